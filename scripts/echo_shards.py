#!/usr/bin/env python3
"""Two Fleet replicas, two Echo shards, one real nginx running
examples/nginx/ingero-fleet-echo-shards.conf (addresses and ports substituted).

Sixteen clusters of four nodes push OTLP/HTTP through nginx (`?cluster_id=`, as agents
do); in every cluster one node is slow. Replica i forwards to shard i. Checks:
  - every push is answered 200 through nginx;
  - every cluster's history is on exactly one shard, and both shards hold clusters;
  - through nginx, find_outlier_nodes?cluster_id=X (HTTP API) reaches the shard holding
    X and ranks X's slow node first, for every cluster;
  - through nginx, a real MCP client (Python `mcp`, streamable HTTP at /mcp?cluster_id=X)
    gets the same answer for one cluster of each shard.
Run by scripts/echo-shards.sh (builds the binaries and the venv); needs nginx.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import echo_e2e as e2e

CLUSTERS = 16
NODES = 4
SLOW = "node-2"


def nginx_bin():
    for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"):
        if os.path.exists(p):
            return p
    sys.exit("nginx is required (Debian package nginx; scripts/test-all.sh installs it)")


def start_nginx(work, fleets, shards, procs):
    """The example file with the test's addresses; returns the public (otlp, api) ports."""
    with open(os.path.join(e2e.ROOT, "examples", "nginx", "ingero-fleet-echo-shards.conf")) as f:
        conf = f.read()
    for i, (fp, ep) in enumerate(zip(fleets, shards)):
        for name, port in ((f"fleet-{i}.fleet:4318", fp["fleet_http"]), (f"fleet-{i}.fleet:8080", fp["fleet_agent"]),
                           (f"echo-{i}.echo:8090", ep["echo_api"])):
            assert name in conf, f"the example names {name}"
            conf = conf.replace(f"http://{name}", f"http://127.0.0.1:{port}")
    pub = {"otlp": e2e.free_port(), "threshold": e2e.free_port(), "api": e2e.free_port()}
    for listen, port in (("listen 4318;", pub["otlp"]), ("listen 8080;", pub["threshold"]),
                         ("listen 8090;", pub["api"])):
        assert listen in conf
        conf = conf.replace(listen, f"listen 127.0.0.1:{port};")
    os.chmod(work, 0o755)  # nginx's workers may run as an unprivileged user: let them in
    d = os.path.join(work, "nginx")
    os.makedirs(d)
    os.chmod(d, 0o777)  # and let them use the sockets and temp directories here
    conf = conf.replace("unix:/run/nginx/", f"unix:{d}/")
    with open(os.path.join(d, "shards.conf"), "w") as f:
        f.write(conf)
    main = (f"worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            f"http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
            f"  include {d}/shards.conf;\n}}\n")
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(main)
    t = subprocess.run([nginx_bin(), "-t", "-p", d, "-c", f"{d}/nginx.conf"], capture_output=True, text=True)
    if t.returncode != 0:
        sys.exit(f"nginx -t: {t.stderr}")
    pr = subprocess.Popen([nginx_bin(), "-p", d, "-c", f"{d}/nginx.conf", "-g", "daemon off;"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(pr)
    e2e.wait_port(pub["api"], "nginx", pr)
    return pub


def push(port, cluster, node, score):
    ts = time.time_ns()
    attrs = [{"key": "ingero.cluster.id", "value": {"stringValue": cluster}},
             {"key": "ingero.node.id", "value": {"stringValue": node}}]
    body = {"resourceMetrics": [{"resource": {"attributes": attrs}, "scopeMetrics": [{"metrics": [
        {"name": "ingero.node.health_score", "gauge": {"dataPoints": [{"timeUnixNano": str(ts), "asDouble": score}]}}]}]}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics?cluster_id={cluster}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def tool(port, name, args, cluster=None):
    q = f"?cluster_id={cluster}" if cluster else ""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/tools/{name}{q}", data=json.dumps(args).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def clusters_on(port):
    """The clusters one shard holds (asked directly, not through nginx)."""
    st, out = tool(port, "fleet.cluster.run_analysis",
                   {"sql": "SELECT DISTINCT cluster_id FROM health_scores ORDER BY cluster_id"})
    return set() if st != 200 else {r[0] for r in out["rows"]}


async def mcp_first_node(url, cluster):
    async with e2e.httpx.AsyncClient(timeout=30) as http:
        async with e2e.streamable_http_client(url, http_client=http) as (read, write):
            async with e2e.ClientSession(read, write) as s:
                await s.initialize()
                r = await s.call_tool(e2e.TOOL, {"cluster_id": cluster, "window": "10m"})
                return e2e.structured(r)["nodes"][0]["node_id"]


def main():
    work = tempfile.mkdtemp(prefix="echo-shards-")
    procs, checks, report = [], {}, {"work": work}
    fleets, shards = [], []
    try:
        for i in range(2):
            d = os.path.join(work, f"shard-{i}")
            os.makedirs(d)
            ep = {k: e2e.free_port() for k in ("echo_grpc", "echo_http", "echo_api", "echo_health", "echo_telemetry")}
            fp = {k: e2e.free_port() for k in ("fleet_http", "fleet_agent", "fleet_admin", "fleet_telemetry")}
            fp["echo_grpc"] = ep["echo_grpc"]  # replica i forwards to shard i only
            with open(os.path.join(d, "echo.yaml"), "w") as f:
                f.write(e2e.echo_config(d, ep))
            with open(os.path.join(d, "fleet.yaml"), "w") as f:
                f.write(e2e.fleet_config(fp))
            echo = subprocess.Popen([e2e.binary("INGERO_ECHO_BIN", "ingero-echo"), "--config", f"{d}/echo.yaml"],
                                    stdout=open(f"{d}/echo.log", "w"), stderr=subprocess.STDOUT)
            procs.append(echo)
            e2e.wait_healthy(ep["echo_health"], f"ingero-echo shard {i}", echo)
            fleet = subprocess.Popen([e2e.binary("INGERO_FLEET_BIN", "ingero-fleet"), "--config", f"{d}/fleet.yaml"],
                                     stdout=open(f"{d}/fleet.log", "w"), stderr=subprocess.STDOUT)
            procs.append(fleet)
            e2e.wait_port(fp["fleet_http"], f"ingero-fleet replica {i}", fleet)
            fleets.append(fp)
            shards.append(ep)
        pub = start_nginx(work, fleets, shards, procs)
        names = [f"tenant-{c:02d}" for c in range(CLUSTERS)]
        statuses = []
        for _ in range(3):
            for c in names:
                for n in range(NODES):
                    node = f"node-{n}"
                    statuses.append(push(pub["otlp"], c, node, 0.6 if node == SLOW else 0.95))
            time.sleep(1)
        checks["every push through nginx answered 200"] = statuses.count(200) == len(statuses)
        # Fleet forwards in batches; wait until every cluster is stored somewhere.
        deadline = time.time() + 60
        while time.time() < deadline:
            held = [clusters_on(ep["echo_api"]) for ep in shards]
            if set(names) <= held[0] | held[1]:
                break
            time.sleep(0.5)
        report["clusters_per_shard"] = [sorted(h) for h in held]
        checks["every cluster is stored"] = set(names) <= held[0] | held[1]
        checks["every cluster on exactly one shard"] = not (held[0] & held[1])
        checks["both shards hold clusters"] = bool(held[0]) and bool(held[1])
        firsts = {}
        for c in names:
            st, out = tool(pub["api"], e2e.TOOL, {"cluster_id": c, "window": "10m"}, cluster=c)
            firsts[c] = out.get("nodes", [{}])[0].get("node_id") if st == 200 else f"HTTP {st}: {out}"
        report["first_node_through_nginx"] = firsts
        checks["through nginx: every cluster's slow node first (HTTP API)"] = all(v == SLOW for v in firsts.values())
        probe = [min(held[0]), min(held[1])] if held[0] and held[1] else []
        mcp = {c: asyncio.run(mcp_first_node(f"http://127.0.0.1:{pub['api']}/mcp?cluster_id={c}", c)) for c in probe}
        report["first_node_through_nginx_mcp"] = mcp
        checks["through nginx: MCP reaches each shard and ranks the slow node first"] = (
            len(mcp) == 2 and all(v == SLOW for v in mcp.values()))
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
                try:
                    pr.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pr.kill()
                    pr.wait()
    e2e.finish("echo-shards", report, checks, work)


if __name__ == "__main__":
    main()
