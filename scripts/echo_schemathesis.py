#!/usr/bin/env python3
"""Starts ingero-echo with bearer auth on loopback, stores a little data, and runs the
schemathesis CLI against its /openapi.json. Exit status: schemathesis's. Called by
scripts/echo-schemathesis.sh (arguments: echo binary, schemathesis binary, examples)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echo_shards import push  # noqa: E402  (OTLP/JSON health push, stdlib only)
from echo_e2e import free_port, wait_healthy  # noqa: E402

TOKEN = "schemathesis-all-clusters-0123456789abcdef0123"


def push_straggler_events(port):
    """Straggler events as both agents send them: the Go agent's without causal chains, the
    Rust agent's with an episode id and its chains, so event_history answers carry both."""
    ts = time.time_ns()
    chains = json.dumps([{"id": "cpu", "severity": "HIGH", "causes": ["cpu.runqueue_delay"],
                          "summary": "sync p99 9x median", "root_cause": "CPU contention",
                          "recommendations": ["pin the process"], "cuda_op": "cudaStreamSynchronize",
                          "cuda_p99_us": 48210, "tail_ratio": 9.25}], separators=(",", ":"))

    def event(node, event_id, extra):
        attrs = [{"key": "ingero.event.id", "value": {"stringValue": event_id}},
                 {"key": "threshold", "value": {"doubleValue": 0.8}},
                 {"key": "score", "value": {"doubleValue": 0.6}},
                 {"key": "dominant_signal", "value": {"stringValue": "cpu"}}] + extra
        res = [{"key": "ingero.cluster.id", "value": {"stringValue": "prod"}},
               {"key": "ingero.node.id", "value": {"stringValue": node}}]
        return {"resourceMetrics": [{"resource": {"attributes": res}, "scopeMetrics": [{"metrics": [
            {"name": "ingero.node.straggler_event", "gauge": {"dataPoints": [
                {"timeUnixNano": str(ts), "asInt": "1", "attributes": attrs}]}}]}]}]}

    episode = f"node-2:{ts // 1_000_000}"
    for body in (event("node-1", "go-1", []),
                 event("node-2", "rust-1", [{"key": "ingero.causal_chain_id", "value": {"stringValue": episode}},
                                            {"key": "ingero.causal_chains", "value": {"stringValue": chains}}])):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, r.status


def main():
    echo_bin, st_bin, examples = sys.argv[1], sys.argv[2], sys.argv[3]
    work = tempfile.mkdtemp(prefix="echo-schemathesis-")
    p = {k: free_port() for k in ("http", "grpc", "api", "health")}
    tokens = os.path.join(work, "tokens.yaml")
    with open(tokens, "w") as f:
        f.write(f'- name: ops\n  token: {TOKEN}\n  clusters: ["*"]\n')
    os.chmod(tokens, 0o600)
    cfg = os.path.join(work, "echo.yaml")
    with open(cfg, "w") as f:
        f.write(f"""receivers:
  otlp:
    protocols:
      http: {{endpoint: 127.0.0.1:{p['http']}}}
exporters:
  echo: {{data_dir: {work}/data}}
extensions:
  ingero_auth: {{tokens_file: {tokens}, audit_log: ""}}
  echo_api: {{endpoint: 127.0.0.1:{p['api']}, auth: {{authenticator: ingero_auth}}}}
  health_check: {{endpoint: 127.0.0.1:{p['health']}}}
service:
  extensions: [ingero_auth, echo_api, health_check]
  pipelines:
    metrics: {{receivers: [otlp], exporters: [echo]}}
  telemetry:
    logs: {{level: warn}}
    metrics: {{level: none}}
""")
    echo = subprocess.Popen([echo_bin, "--config", cfg], stdout=open(os.path.join(work, "echo.log"), "w"),
                            stderr=subprocess.STDOUT)
    rc = 1
    try:
        wait_healthy(p["health"], "ingero-echo", echo)
        for n in range(4):
            push(p["http"], "prod", f"node-{n}", 0.6 if n == 2 else 0.95)
        push_straggler_events(p["http"])
        rc = subprocess.run([st_bin, "run", f"http://127.0.0.1:{p['api']}/openapi.json",
                             "--checks", "all", "--exclude-checks", "positive_data_acceptance",
                             "-H", f"Authorization: Bearer {TOKEN}", "--max-examples", examples,
                             "--seed", "1", "--workers", "2", "--generation-database", "none",
                             "--request-timeout", "30"]).returncode
        if echo.poll() is not None:
            print(f"echo-schemathesis: ingero-echo exited with {echo.returncode} during the run", file=sys.stderr)
            rc = rc or 1
    finally:
        if echo.poll() is None:
            echo.send_signal(signal.SIGTERM)
            echo.wait(timeout=60)
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"echo-schemathesis: FAILED; Echo's log in {work}/echo.log", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    main()
