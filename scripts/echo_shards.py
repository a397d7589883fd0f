#!/usr/bin/env python3
"""Two Fleet replicas, two Echo shards, one real nginx running
examples/nginx/ingero-fleet-echo-shards.conf (addresses, ports and certificate paths
substituted), TLS on every hop behind nginx:
  - nginx -> Fleet replicas (OTLP/HTTP, threshold API) and -> Echo shards (API, MCP) over
    TLS with nginx's client certificate; those listeners require one (`client_ca_file`);
  - Fleet replica i -> Echo shard i: the `otlp` exporter over gRPC with the CA, its own
    client certificate and a bearer token; Echo's OTLP receivers require both (mTLS and
    `ingero_auth`).

Sixteen clusters of four nodes push OTLP/HTTP through nginx (`?cluster_id=`, as agents
do); in every cluster one node is slow. Replica i forwards to shard i. Checks:
  - every push is answered 200 through nginx;
  - every cluster's history is on exactly one shard, and both shards hold clusters;
  - through nginx, find_outlier_nodes?cluster_id=X (HTTP API) reaches the shard holding
    X and ranks X's slow node first, for every cluster;
  - through nginx, a real MCP client (Python `mcp`, streamable HTTP at /mcp?cluster_id=X)
    gets the same answer for one cluster of each shard;
  - a third Fleet exporting to shard 0 with a client certificate of another CA (and the
    right token), and one with the right certificate and no token, deliver nothing: shard 0
    never holds their cluster, Echo counts the failed handshakes and the refused request,
    and that Fleet counts its failed exports.
Run by scripts/echo-shards.sh (builds the binaries and the venv); needs nginx.
"""

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import echo_e2e as e2e
from test_pki import Pki

CLUSTERS = 16
NODES = 4
SLOW = "node-2"
TOKEN = "fleet-fwd-3b9e41c7d2a85f60e1c4b7a9"
ROGUE_CLUSTER = "tenant-rogue"


def tls_block(server, pki):
    """A listener's `tls`: its certificate, and mTLS against the test CA."""
    return f"{{cert_file: {server['cert']}, key_file: {server['key']}, client_ca_file: {pki.ca}}}"


def echo_config(work, p, server, pki, tokens):
    """Echo with its OTLP receivers and API on TLS requiring client certificates, OTLP auth
    on; health check and self-telemetry plaintext on loopback (the test's own probes)."""
    tls = tls_block(server, pki)
    auth = "{authenticator: ingero_auth}"
    return f"""receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:{p['echo_grpc']}, tls: {tls}, auth: {auth}}}
      http: {{endpoint: 127.0.0.1:{p['echo_http']}, tls: {tls}, auth: {auth}}}
exporters:
  echo: {{data_dir: {work}/echo-data}}
extensions:
  ingero_auth: {{tokens_file: {tokens}}}
  echo_api: {{endpoint: 127.0.0.1:{p['echo_api']}, tls: {tls}}}
  health_check: {{endpoint: 127.0.0.1:{p['echo_health']}}}
service:
  extensions: [ingero_auth, echo_api, health_check]
  pipelines:
    metrics: {{receivers: [otlp], exporters: [echo]}}
  telemetry:
    metrics:
      readers:
        - pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {p['echo_telemetry']}}}}}}}
"""


def fleet_config(p, exporters, receiver_tls=None):
    """A Fleet replica: OTLP/HTTP and the threshold API on `receiver_tls` (None: plaintext
    loopback), forwarding to Echo with `exporters` (name -> block)."""
    tls = f", tls: {receiver_tls}" if receiver_tls else ""
    blocks = "".join(f"  {name}:\n{block}" for name, block in exporters.items())
    names = ", ".join(exporters)
    return f"""receivers:
  otlp:
    protocols:
      http: {{endpoint: 127.0.0.1:{p['fleet_http']}{tls}}}
processors:
  ingero: {{push_interval: 1s, quorum: {{statistical_min: 5}}}}
exporters:
{blocks}extensions:
  ingero_threshold: {{agent_endpoint: 127.0.0.1:{p['fleet_agent']}, admin_endpoint: 127.0.0.1:{p['fleet_admin']}{tls}}}
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [{names}]}}
  telemetry:
    metrics:
      readers:
        - pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {p['fleet_telemetry']}}}}}}}
"""


def echo_exporter(port, pki, client, token, retry=True):
    """Fleet's `otlp` exporter to an Echo shard: gRPC over TLS (the CA, a client
    certificate) with a bearer token."""
    auth = f"\n    headers: {{authorization: \"Bearer {token}\"}}" if token else ""
    retry = ("{enabled: true, initial_interval: 1s, max_interval: 5s}" if retry
             else "{enabled: false}")
    return (f"    endpoint: 127.0.0.1:{port}\n"
            f"    tls: {{ca_file: {pki.ca}, cert_file: {client['cert']}, key_file: {client['key']}}}\n"
            f"    timeout: 5s{auth}\n"
            f"    retry_on_failure: {retry}\n")


def https_context(pki, client):
    """A client context trusting only the test CA, showing `client`'s certificate."""
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(client["cert"], client["key"])
    return ctx


def prom_sum(port, prefix):
    """The sum of the self-telemetry samples whose line starts with `prefix`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        page = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(prefix))


def nginx_bin():
    for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"):
        if os.path.exists(p):
            return p
    sys.exit("nginx is required (Debian package nginx; scripts/test-all.sh installs it)")


def start_nginx(work, fleets, shards, procs, pki, client):
    """The example file with the test's addresses and certificates; returns the public
    (otlp, threshold, api) ports."""
    with open(os.path.join(e2e.ROOT, "examples", "nginx", "ingero-fleet-echo-shards.conf")) as f:
        conf = f.read()
    for i, (fp, ep) in enumerate(zip(fleets, shards)):
        for name, port in ((f"fleet-{i}.fleet:4318", fp["fleet_http"]), (f"fleet-{i}.fleet:8080", fp["fleet_agent"])):
            assert f"server {name};" in conf, f"the example names server {name}"
            conf = conf.replace(f"server {name};", f"server 127.0.0.1:{port};")
        assert f"proxy_pass https://ingero_fleet_{i}_otlp;" in conf, "the example proxies to Fleet over TLS"
        name = f"echo-{i}.echo:8090"
        assert f"https://{name}" in conf, f"the example proxies to https://{name}"
        conf = conf.replace(f"https://{name}", f"https://127.0.0.1:{ep['echo_api']}")
    for path, ours in (("/etc/nginx/ingero-tls/ca.crt", pki.ca),
                       ("/etc/nginx/ingero-tls/nginx-client.crt", client["cert"]),
                       ("/etc/nginx/ingero-tls/nginx-client.key", client["key"])):
        assert path in conf, f"the example names {path}"
        conf = conf.replace(path, ours)
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
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def tool(port, name, args, cluster=None, tls=None):
    """A tool call through nginx (plaintext, loopback) or, with `tls` (an SSL context),
    straight to a shard."""
    q = f"?cluster_id={cluster}" if cluster else ""
    scheme = "https" if tls else "http"
    req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}/api/v1/tools/{name}{q}", data=json.dumps(args).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=tls) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def clusters_on(port, tls):
    """The clusters one shard holds (asked directly over TLS, not through nginx)."""
    st, out = tool(port, "fleet.cluster.run_analysis",
                   {"sql": "SELECT DISTINCT cluster_id FROM health_scores ORDER BY cluster_id"}, tls=tls)
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
    os.chmod(work, 0o755)
    pki = Pki(os.path.join(work, "pki"))
    nginx_client = pki.leaf("nginx")
    direct = https_context(pki, nginx_client)  # the test's own asks, past nginx
    try:
        for i in range(2):
            d = os.path.join(work, f"shard-{i}")
            os.makedirs(d)
            ep = {k: e2e.free_port() for k in ("echo_grpc", "echo_http", "echo_api", "echo_health", "echo_telemetry")}
            fp = {k: e2e.free_port() for k in ("fleet_http", "fleet_agent", "fleet_admin", "fleet_telemetry")}
            with open(os.path.join(d, "tokens.yaml"), "w") as f:
                f.write(f"- name: fleet\n  token: {TOKEN}\n  clusters: ['*']\n")
            os.chmod(os.path.join(d, "tokens.yaml"), 0o600)
            with open(os.path.join(d, "echo.yaml"), "w") as f:
                f.write(echo_config(d, ep, pki.leaf(f"echo-{i}", server=True, dns=[f"echo-{i}.echo"]), pki,
                                    os.path.join(d, "tokens.yaml")))
            # Replica i forwards to shard i only, with a client certificate of its own.
            exporter = echo_exporter(ep["echo_grpc"], pki, pki.leaf(f"fleet-{i}"), TOKEN)
            with open(os.path.join(d, "fleet.yaml"), "w") as f:
                f.write(fleet_config(fp, {"otlp/echo": exporter},
                                     tls_block(pki.leaf(f"fleet-{i}-server", server=True, dns=[f"fleet-{i}.fleet"]),
                                               pki)))
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

        # A Fleet that must not get through to shard 0: one exporter with a client
        # certificate of another CA (same name, right token), one with the right certificate
        # and no token. Plaintext OTLP in on loopback: the test pushes to it directly.
        d = os.path.join(work, "intruder")
        ip = {k: e2e.free_port() for k in ("fleet_http", "fleet_agent", "fleet_admin", "fleet_telemetry")}
        rogue = Pki(os.path.join(work, "rogue-pki"), "rogue CA").leaf("fleet-0")
        os.makedirs(d)
        with open(os.path.join(d, "fleet.yaml"), "w") as f:
            f.write(fleet_config(ip, {
                "otlp/wrongca": echo_exporter(shards[0]["echo_grpc"], pki, rogue, TOKEN, retry=False),
                "otlp/notoken": echo_exporter(shards[0]["echo_grpc"], pki, pki.leaf("fleet-notoken"), None,
                                              retry=False),
            }))
        intruder = subprocess.Popen([e2e.binary("INGERO_FLEET_BIN", "ingero-fleet"), "--config", f"{d}/fleet.yaml"],
                                    stdout=open(f"{d}/fleet.log", "w"), stderr=subprocess.STDOUT)
        procs.append(intruder)
        e2e.wait_port(ip["fleet_http"], "ingero-fleet intruder", intruder)

        pub = start_nginx(work, fleets, shards, procs, pki, nginx_client)
        names = [f"tenant-{c:02d}" for c in range(CLUSTERS)]
        statuses = []
        for _ in range(3):
            for c in names:
                for n in range(NODES):
                    node = f"node-{n}"
                    statuses.append(push(pub["otlp"], c, node, 0.6 if node == SLOW else 0.95))
            for n in range(NODES):
                push(ip["fleet_http"], ROGUE_CLUSTER, f"node-{n}", 0.9)
            time.sleep(1)
        report["push_statuses_through_nginx"] = {str(s): statuses.count(s) for s in set(statuses)}
        checks["every push through nginx answered 200"] = statuses.count(200) == len(statuses)
        # Fleet forwards in batches; wait until every cluster is stored somewhere.
        deadline = time.time() + 60
        while time.time() < deadline:
            held = [clusters_on(ep["echo_api"], direct) for ep in shards]
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

        # The intruder: its exports failed (counted per exporter), Echo refused them
        # (handshakes failed, the request without a token refused) and stored none of it.
        failed = {}
        deadline = time.time() + 30
        while time.time() < deadline:
            failed = {e: prom_sum(ip["fleet_telemetry"],
                                  f'otelcol_exporter_send_failed_metric_points_total{{exporter="{e}"')
                      for e in ("otlp/wrongca", "otlp/notoken")}
            if all(v > 0 for v in failed.values()):
                break
            time.sleep(0.5)
        report["intruder_send_failed_points"] = failed
        checks["wrong CA and missing token: Fleet counts the failed exports"] = all(v > 0 for v in failed.values())
        sent = prom_sum(ip["fleet_telemetry"], "otelcol_exporter_sent_metric_points_total")
        report["intruder_sent_points"] = sent
        checks["wrong CA and missing token: nothing counted as sent"] = sent == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{shards[0]['echo_telemetry']}/metrics", timeout=10) as r:
            page_lines = [ln for ln in r.read().decode().splitlines()
                          if ln.startswith("ingero_fleet_tls_handshakes_total") and 'outcome="failed"' in ln]
        hs_failed = sum(float(ln.rsplit(" ", 1)[1]) for ln in page_lines)
        report["shard0_failed_handshakes"] = page_lines
        checks["wrong CA: shard 0 counts failed handshakes"] = hs_failed > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{shards[0]['echo_telemetry']}/metrics", timeout=10) as r:
            page_lines = [ln for ln in r.read().decode().splitlines()
                          if ln.startswith("ingero_fleet_auth_requests_total") and 'listener="otlp/grpc"' in ln
                          and 'outcome="unauthenticated"' in ln]
        unauthenticated = sum(float(ln.rsplit(" ", 1)[1]) for ln in page_lines)
        report["shard0_unauthenticated"] = page_lines
        checks["missing token: shard 0 refuses the request (unauthenticated)"] = unauthenticated > 0
        stored = set().union(*[clusters_on(ep["echo_api"], direct) for ep in shards])
        checks["the intruder's cluster is on no shard"] = ROGUE_CLUSTER not in stored
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
