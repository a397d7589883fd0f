#!/usr/bin/env python3
"""Fleet -> Echo end to end, asked through a real MCP client (the Python `mcp` package).

Six `ingero-agent --synthetic` nodes push to `ingero-fleet`; one of them slows by 30 %
after 12 s. Fleet forwards everything (health scores, its straggler verdicts, straggler
events) to `ingero-echo` with its `otlp` exporter over gRPC. Then:

1. over MCP streamable HTTP (`/mcp` on Echo's API listener): initialize, list the tools and
   the `investigate` prompt, and call `fleet.cluster.find_outlier_nodes` until the slow node
   is ranked first and flagged;
2. Echo is stopped and restarted as `ingero-echo mcp` on the same data directory, spoken to
   over stdio by the same client library: the stored answer survives the restart and is the
   same over stdio.

Run through scripts/echo-e2e.sh (it builds the binaries and the client's virtualenv).
Binaries: INGERO_ECHO_BIN, INGERO_FLEET_BIN, INGERO_AGENT_BIN (default $CARGO_TARGET_DIR or
target, then debug/...).
Prints a JSON summary; exits 1 on any failed check.
"""
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import httpx2 as httpx  # the transport the mcp package is built on
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = "e2e"
NODES = 6
SLOW = "node-3"
TOOL = "fleet.cluster.find_outlier_nodes"


def binary(env, name):
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.environ.get(env, os.path.join(target, "debug", name))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not listen on {port} within {timeout}s")


def wait_healthy(port, what, proc, timeout=120):
    """Poll the health_check extension until it answers 200 (all components started)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            last = e.code
        except OSError as e:
            last = e
        time.sleep(0.2)
    sys.exit(f"{what} was not healthy within {timeout}s (last answer: {last})")


def echo_config(work, p):
    return f"""receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:{p['echo_grpc']}}}
      http: {{endpoint: 127.0.0.1:{p['echo_http']}}}
exporters:
  echo: {{data_dir: {work}/echo-data}}
extensions:
  echo_api: {{endpoint: 127.0.0.1:{p['echo_api']}}}
  health_check: {{endpoint: 127.0.0.1:{p['echo_health']}}}
service:
  extensions: [echo_api, health_check]
  pipelines:
    metrics: {{receivers: [otlp], exporters: [echo]}}
  telemetry:
    metrics:
      readers:
        - pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {p['echo_telemetry']}}}}}}}
"""


def fleet_config(p):
    # The example of docs (examples/fleet-to-echo/fleet.yaml) with test ports and a short
    # retry interval; Echo acknowledges after its commit, so nothing is lost while it restarts.
    return f"""receivers:
  otlp:
    protocols:
      http: {{endpoint: 127.0.0.1:{p['fleet_http']}}}
processors:
  ingero: {{push_interval: 1s, quorum: {{statistical_min: 5}}}}
exporters:
  otlp/echo:
    endpoint: 127.0.0.1:{p['echo_grpc']}
    tls: {{insecure: true}}
    retry_on_failure: {{initial_interval: 1s, max_interval: 5s}}
extensions:
  ingero_threshold: {{agent_endpoint: 127.0.0.1:{p['fleet_agent']}, admin_endpoint: 127.0.0.1:{p['fleet_admin']}}}
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [otlp/echo]}}
  telemetry:
    metrics:
      readers:
        - pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {p['fleet_telemetry']}}}}}}}
"""


def structured(result):
    """The tool's JSON answer from a CallToolResult (structured content, else text)."""
    if result.is_error:
        raise RuntimeError(f"tool error: {result.content}")
    if result.structured_content:
        return result.structured_content
    return json.loads(result.content[0].text)


async def ask_http(url, deadline):
    """Initialize, list, then poll find_outlier_nodes until the slow node leads."""
    out = {}
    async with httpx.AsyncClient(timeout=10) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                out["server"] = init.server_info.name
                out["protocol"] = init.protocol_version
                tools = [t.name for t in (await s.list_tools()).tools]
                out["tools"] = tools
                prompts = [p.name for p in (await s.list_prompts()).prompts]
                out["prompts"] = prompts
                pr = await s.get_prompt("investigate", {"cluster_id": CLUSTER})
                out["prompt_mentions_tool"] = TOOL in pr.messages[0].content.text
                last = None
                while time.time() < deadline:
                    r = await s.call_tool(TOOL, {"cluster_id": CLUSTER, "window": "10m"})
                    if r.is_error and "unknown cluster" in r.content[0].text:
                        await asyncio.sleep(1)  # nothing forwarded yet
                        continue
                    last = structured(r)
                    nodes = last.get("nodes", [])
                    if nodes and nodes[0].get("is_straggler"):
                        break
                    await asyncio.sleep(1)
                out["answer"] = last
    return out


async def ask_stdio(echo_bin, cfg):
    params = StdioServerParameters(command=echo_bin, args=["mcp", "--config", cfg])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            return structured(await s.call_tool(TOOL, {"cluster_id": CLUSTER, "window": "10m"}))


def main():
    work = tempfile.mkdtemp(prefix="echo-e2e-")
    p = {k: free_port() for k in ("echo_grpc", "echo_http", "echo_api", "echo_health", "echo_telemetry", "fleet_http",
                                  "fleet_agent", "fleet_admin", "fleet_telemetry")}
    echo_cfg = os.path.join(work, "echo.yaml")
    with open(echo_cfg, "w") as f:
        f.write(echo_config(work, p))
    fleet_cfg = os.path.join(work, "fleet.yaml")
    with open(fleet_cfg, "w") as f:
        f.write(fleet_config(p))
    echo_bin = binary("INGERO_ECHO_BIN", "ingero-echo")
    procs = []

    def start(argv, log):
        pr = subprocess.Popen(argv, stdout=open(os.path.join(work, log), "w"), stderr=subprocess.STDOUT)
        procs.append(pr)
        return pr

    checks, report = {}, {"work": work}
    try:
        echo = start([echo_bin, "--config", echo_cfg], "echo.log")
        # The API listener binds before the exporter has opened the store; the health check
        # answers 200 only once every component has started, as a readiness probe would see.
        wait_healthy(p["echo_health"], "ingero-echo", echo)
        fleet = start([binary("INGERO_FLEET_BIN", "ingero-fleet"), "--config", fleet_cfg], "fleet.log")
        wait_port(p["fleet_http"], "ingero-fleet", fleet)
        for i in range(NODES):
            node = f"node-{i}"
            script = "0s:1.0,12s:0.7" if node == SLOW else "0s:1.0"
            start([binary("INGERO_AGENT_BIN", "ingero-agent"), "--synthetic", "--synthetic-script", script,
                   "--fleet-endpoint", f"http://127.0.0.1:{p['fleet_http']}", "--fleet-insecure",
                   "--fleet-cluster-id", CLUSTER, "--fleet-node-id", node, "--fleet-push-interval", "1s",
                   "--warmup-samples", "5", "--fleet-provider", "none",
                   "--fleet-persist-path", os.path.join(work, f"{node}.json")], f"agent-{node}.log")
        http = asyncio.run(ask_http(f"http://127.0.0.1:{p['echo_api']}/mcp", time.time() + 90))
        report["http"] = http
        first = (http["answer"] or {}).get("nodes", [{}])[0]
        checks["http: every tool listed"] = all(
            t in http["tools"] for t in ("fleet.cluster.summary", "fleet.cluster.event_history", TOOL,
                                         "fleet.cluster.nccl", "fleet.cluster.get_cost", "fleet.cluster.run_analysis"))
        checks["http: investigate prompt names the outlier tool"] = http["prompts"] == ["investigate"] and http["prompt_mentions_tool"]
        checks["http: the slow node is ranked first and flagged"] = first.get("node_id") == SLOW and bool(first.get("is_straggler"))
        checks["http: no other node flagged"] = not any(
            n.get("is_straggler") for n in http["answer"]["nodes"][1:])
        # Stop the agents and Fleet, then Echo (its writer commits what is queued); restart
        # Echo as an MCP stdio server on the same data directory.
        for pr in procs[2:] + [procs[1]]:
            pr.send_signal(signal.SIGINT)
            pr.wait(timeout=20)
        echo.send_signal(signal.SIGTERM)
        checks["echo exits 0 on SIGTERM"] = echo.wait(timeout=30) == 0
        stdio = asyncio.run(ask_stdio(echo_bin, echo_cfg))
        report["stdio"] = stdio
        checks["stdio: the same first node after a restart"] = stdio["nodes"][0]["node_id"] == SLOW
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
    finish("echo-e2e", report, checks, work)


def finish(name, report, checks, work):
    """Print the report; exit 1 naming the failed checks (keeping the logs), else clean up."""
    report["checks"] = checks
    print(json.dumps(report, indent=1, default=str))
    failed = [k for k, ok in checks.items() if not ok]
    if failed or not checks:
        print(f"{name}: FAILED: {failed}; logs in {work}", file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{name}: {len(checks)} checks passed")


if __name__ == "__main__":
    main()
