#!/usr/bin/env python3
"""Memory attacks on the exporter's budget, against a built ingero-fleet (release by
default), default limits, tokens on OTLP/HTTP, loopback only. While the attacker pushes,
a second tenant (token B, cluster beta) pushes one new agent node after every attack
request; the script reports the binary's peak RSS (VmHWM) and how many of B's pushes were
accepted whole.

Shapes (docs/security.md, "One memory budget for the exporter"):
  four-clusters  a token covering four clusters pushes requests of 500 nodes (3 gauges
                 and a distinct 4,000-byte label each) into each until every point is
                 refused
  limit-labels   one token, one cluster: every series carries 64 attributes at the
                 payload limits (256-byte keys, 4,096-byte values)
  no-cluster-id  an operator token ("*"), no request cluster, resources without a
                 cluster id: 1,000 metrics per resource (names of their own, 39 bytes),
                 10 resources per request

Usage: scripts/attack-rss.py SHAPE [--profile release] [--max-requests N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTLP_HTTP = "127.0.0.1:24318"
TOKENS = {
    "A": "tokA-0c1d2e3f4a5b6c7d8e9f",
    "B": "tokB-9f8e7d6c5b4a3f2e1d0c",
    "C": "tokC-5e6f7a8b9c0d1e2f3a4b",
    "S": "tokS-a1b2c3d4e5f6a7b8c9d0",
}
NOW = 1_763_769_600_000_000_000

CONFIG = f"""
receivers:
  otlp:
    protocols:
      http:
        endpoint: {OTLP_HTTP}
        auth: {{authenticator: ingero_auth}}
processors:
  ingero: {{push_interval: 10s}}
extensions:
  ingero_auth: {{tokens_file: %(tokens)s, audit_log: ''}}
  ingero_threshold: {{agent_endpoint: 127.0.0.1:28080, admin_endpoint: 127.0.0.1:28081}}
exporters:
  prometheus: {{endpoint: 127.0.0.1:29090}}
service:
  extensions: [ingero_auth, ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [prometheus]}}
  telemetry:
    logs: {{level: error}}
    metrics: {{level: none}}
"""

TOKENS_FILE = f"""- name: team-a
  token: {TOKENS['A']}
  clusters: [alpha]
- name: team-b
  token: {TOKENS['B']}
  clusters: [beta]
- name: team-c
  token: {TOKENS['C']}
  clusters: [c1, c2, c3, c4]
- name: ops
  token: {TOKENS['S']}
  clusters: ['*']
"""


def kv(k, v):
    return {"key": k, "value": {"stringValue": v}}


def gauge(name, value, attrs=()):
    return {
        "name": name,
        "gauge": {
            "dataPoints": [
                {"asDouble": value, "timeUnixNano": str(NOW), "attributes": list(attrs)}
            ]
        },
    }


def resource(attrs, metrics):
    return {"resource": {"attributes": attrs}, "scopeMetrics": [{"metrics": metrics}]}


def body(resources):
    return json.dumps({"resourceMetrics": resources}).encode()


def push(token, cluster, data):
    q = f"?cluster_id={cluster}" if cluster else ""
    req = urllib.request.Request(
        f"http://{OTLP_HTTP}/v1/metrics{q}",
        data=data,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            text = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        text = e.read()
        status = e.code
    rejected = 0
    if status == 200 and text:
        ps = json.loads(text).get("partialSuccess") or {}
        rejected = int(ps.get("rejectedDataPoints") or 0)
    return status, rejected


def agent(cluster, node):
    score = gauge(
        "ingero.node.health_score",
        0.95,
        [kv("ingero.node.state", "active")],
    )
    return resource(
        [kv("ingero.cluster.id", cluster), kv("ingero.node.id", node)],
        [score, gauge("ingero.node.throughput_ratio", 0.95)],
    )


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) // 1024
    return out


def four_clusters(i):
    cluster = f"c{i % 4 + 1}"
    rs = []
    for n in range(500):
        node = f"{cluster}-r{i}-n{n}"
        # A distinct value per node: nothing is shared between nodes.
        attrs = [kv("big", (node + "-" + "x" * 4000)[:4000])]
        rs.append(
            resource(
                [kv("ingero.cluster.id", cluster), kv("ingero.node.id", node)],
                [gauge(f"attack.g{g}", 1.0, attrs) for g in range(3)],
            )
        )
    return TOKENS["C"], cluster, body(rs), 1500


def limit_labels(i):
    rs = []
    for n in range(4):
        node = f"a-r{i}-n{n}"
        attrs = [kv("ingero.cluster.id", "alpha"), kv("ingero.node.id", node)]
        attrs += [kv(f"k{j:03d}" + "k" * 252, f"{node}-{j}-" + "v" * 4000) for j in range(30)]
        point = [kv(f"p{j:03d}" + "p" * 252, f"{node}-{j}-" + "w" * 4000) for j in range(32)]
        rs.append(resource(attrs, [gauge("attack.wide", 1.0, point)]))
    return TOKENS["A"], "alpha", body(rs), 4


def no_cluster_id(i):
    rs = []
    for r in range(10):
        attrs = [kv("service.name", f"svc-{i}-{r}")]
        # Metric names of its own per resource: no series shares a name with another
        # resource's.
        names = [f"attack.req{i:05d}.res{r:02d}.metric{m:04d}" for m in range(1000)]
        rs.append(resource(attrs, [gauge(n, 1.0) for n in names]))
    return TOKENS["S"], None, body(rs), 10_000


SHAPES = {
    "four-clusters": four_clusters,
    "limit-labels": limit_labels,
    "no-cluster-id": no_cluster_id,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--profile", default="release")
    ap.add_argument("--max-requests", type=int, default=1000)
    args = ap.parse_args()
    binary = os.path.join(ROOT, "target", args.profile, "ingero-fleet")
    with tempfile.TemporaryDirectory() as d:
        tokens = os.path.join(d, "tokens.yaml")
        with open(tokens, "w") as f:
            f.write(TOKENS_FILE)
        os.chmod(tokens, 0o600)
        cfg = os.path.join(d, "fleet.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG % {"tokens": tokens})
        p = subprocess.Popen([binary, "--config", cfg])
        try:
            for _ in range(100):
                try:
                    push(TOKENS["B"], "beta", body([agent("beta", "b-warm")]))
                    break
                except OSError:
                    time.sleep(0.1)
            before = proc_status(p.pid)
            shape = SHAPES[args.shape]
            b_ok = b_total = 0
            held = refused = 0
            all_refused_in_a_row = 0
            started = time.time()
            for i in range(args.max_requests):
                token, cluster, data, points = shape(i)
                status, rej = push(token, cluster, data)
                if status != 200:
                    print(f"attack request {i}: status {status}", file=sys.stderr)
                held += points - rej
                refused += rej
                all_refused_in_a_row = all_refused_in_a_row + 1 if rej == points else 0
                bs, brej = push(TOKENS["B"], "beta", body([agent("beta", f"b{i}")]))
                b_total += 1
                b_ok += int(bs == 200 and brej == 0)
                if all_refused_in_a_row >= 4:
                    break
            after = proc_status(p.pid)
            print(
                json.dumps(
                    {
                        "shape": args.shape,
                        "binary": binary,
                        "requests": i + 1,
                        "points_held": held,
                        "points_refused": refused,
                        "rss_before_mb": before["VmRSS"],
                        "rss_after_mb": after["VmRSS"],
                        "peak_rss_mb": after["VmHWM"],
                        "second_tenant_accepted": f"{b_ok} of {b_total}",
                        "seconds": round(time.time() - started, 1),
                    }
                )
            )
        finally:
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
