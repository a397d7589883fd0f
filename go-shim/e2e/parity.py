#!/usr/bin/env python3
"""Parity test between the two hosts of the Ingero components.

Runs `ingero-fleet` (Rust host) and the OCB-built Go collector with the shim side by side,
each with a config equivalent to examples/fleet-config.yaml (loopback, free ports, a 1 s
push_interval so the test is quick, and in the Go collector the threshold middleware wired
into the stock otlp receiver), pushes the same agent payloads (the testkit builders the
ingero-fleet tests use, printed by `cargo run -p ingero-ffi --example agent_payloads`) to
both, and asserts the same answers: push-response headers (HTTP and gRPC), the threshold GET
endpoint, the admin diagnostics, refusals of malformed cluster ids, the Prometheus series of
the pushed data and of the tick output, and the component self-metrics.

usage: parity.py --fleet BIN --otelcol BIN --payloads FILE
Prints one line per check and ends with "N passed, N failed".
"""

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

RESULTS = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        RESULTS["passed"] += 1
        print(f"ok    {name}")
    else:
        RESULTS["failed"] += 1
        print(f"FAIL  {name}: {detail}")
    sys.stdout.flush()


def same(name, rust, go):
    check(name, rust == go, f"\n  ingero-fleet: {rust!r}\n  go collector: {go!r}")


def free_ports(n):
    """n distinct free loopback ports. The sockets stay bound until all n are chosen (one
    at a time, the kernel may hand out the same port twice); a port can still be taken
    between here and the collector's bind, which start_otelcol retries."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Proc:
    """A host process whose stderr is collected line by line."""

    def __init__(self, name, argv):
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env={**os.environ, "RUST_LOG": "info"})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_for(self, pattern, timeout=60):
        deadline = time.time() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if line is None:
                        raise RuntimeError(f"{self.name} exited:\n" + self.log())
                    if re.search(pattern, line):
                        return line
                left = deadline - time.time()
                if left <= 0:
                    raise RuntimeError(f"{self.name}: no line matching {pattern!r}:\n" + self.log())
                self.cond.wait(left)

    def log(self):
        return "\n".join(l for l in self.lines[-80:] if l is not None)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


PROCESSOR_CFG = """
  ingero:
    threshold:
      k: 2.0
      ema_alpha: 0.2
    quorum:
      statistical_min: 5
      coverage_fraction: 0.80
    push_interval: 1s
    ttl_multiplier: 5
"""


def start_fleet(binary, tmp):
    cfg = f"""
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:{PROCESSOR_CFG}
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: 127.0.0.1:0
exporters:
  prometheus:
    endpoint: 127.0.0.1:0
    # The contrib exporter of the Go collector keeps every attribute as a label; make
    # ingero-fleet's exporter do the same so the series compare like for like.
    drop_attributes: []
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [ingero]
      exporters: [prometheus]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: 0
"""
    path = os.path.join(tmp, "fleet.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    p = Proc("ingero-fleet", [binary, "--config", path])
    p.wait_for(r"ingero-fleet is ready")
    addrs = {}
    for line in p.lines:
        if line and " listening" in line:
            m1 = re.search(r'listener="?([^"\s]+)', line)
            m2 = re.search(r'addr="?([^"\s]+)', line)
            if m1 and m2:
                addrs[m1.group(1)] = m2.group(1)
    p.addr = {
        "http": addrs["otlp/http"], "grpc": addrs["otlp/grpc"],
        "agent": addrs["ingero_threshold/agent"], "admin": addrs["ingero_threshold/admin"],
        "prom": addrs["prometheus"], "telemetry": addrs["telemetry"],
    }
    return p


def start_otelcol(binary, tmp, attempts=3):
    """The Go collector takes its listen addresses from the config, so they are chosen
    here; a start that loses a port to another process is retried with fresh ones."""
    for attempt in range(attempts):
        try:
            return start_otelcol_once(binary, tmp)
        except RuntimeError as e:
            if "address already in use" not in str(e) or attempt == attempts - 1:
                raise
            print(f"otelcol-ingero lost a port to another process, retrying: {e}".splitlines()[0])
    raise AssertionError("unreachable")


def start_otelcol_once(binary, tmp):
    names = ["http", "grpc", "agent", "admin", "prom", "telemetry"]
    ports = dict(zip(names, free_ports(len(names))))
    a = {k: f"127.0.0.1:{ports[k]}" for k in names}
    tport = ports["telemetry"]
    cfg = f"""
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {a['grpc']}
        middlewares: [{{id: ingero_threshold}}]
      http:
        endpoint: {a['http']}
        middlewares: [{{id: ingero_threshold}}]
processors:{PROCESSOR_CFG}
extensions:
  ingero_threshold:
    agent_endpoint: {a['agent']}
    admin_endpoint: {a['admin']}
exporters:
  prometheus:
    endpoint: {a['prom']}
    # ingero-fleet's exporter promotes resource attributes (node and cluster ids) to labels
    # by default; contrib's needs it said (its default is false).
    resource_to_telemetry_conversion:
      enabled: true
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [ingero]
      exporters: [prometheus]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {tport}
"""
    path = os.path.join(tmp, "otelcol.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    p = Proc("otelcol-ingero", [binary, "--config", "file:" + path])
    p.wait_for(r"Everything is ready")
    p.addr = a
    return p


def request(addr, method, target, body=None, headers=None):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=15)
    c.request(method, target, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data


def push(h, cluster, body, extra=None, target=None):
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(extra or {})
    t = target if target is not None else f"/v1/metrics?cluster_id={cluster}"
    return request(h.addr["http"], "POST", t, body.encode(), hdrs)


def thr(hdrs):
    t, q = hdrs.get("x-ingero-threshold"), hdrs.get("x-ingero-quorum-met")
    if (t is None) != (q is None):
        return ("ONLY ONE HEADER", t, q)
    return None if t is None else (t, q)


def get(h, listener, target):
    s, hdrs, body = request(h.addr[listener], "GET", target)
    return s, hdrs.get("content-type"), body.decode()


def strip_times(v):
    """Diagnostics without the fields that depend on when each host received or ticked."""
    if isinstance(v, dict):
        return {k: strip_times(x) for k, x in v.items()
                if "unix_nano" not in k and k not in ("generation",)}
    if isinstance(v, list):
        return [strip_times(x) for x in v]
    return v


SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# Labels one exporter adds for reasons unrelated to the data (scope info, target info).
IGNORED_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "job", "instance"}


def prom(addr, prefixes):
    _, _, body = request(addr, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = SERIES.match(line)
        if not m or not m.group(1).startswith(prefixes):
            continue
        labels = tuple(sorted((k, v) for k, v in LABEL.findall(m.group(3) or "")
                              if k not in IGNORED_LABELS and not k.startswith("otel_scope_")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def grpc_export(h, md_pairs, json_body):
    import grpc
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as ms
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as msg
    req = json_format.Parse(json_body, ms.ExportMetricsServiceRequest())
    with grpc.insecure_channel(h.addr["grpc"]) as ch:
        stub = msg.MetricsServiceStub(ch)
        try:
            _, call = stub.Export.with_call(req, metadata=md_pairs, timeout=10)
            md = dict(call.initial_metadata())
            return "OK", md.get("ingero-threshold"), md.get("ingero-quorum-met")
        except grpc.RpcError as e:
            return e.code().name, e.details(), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", required=True)
    ap.add_argument("--otelcol", required=True)
    ap.add_argument("--payloads", required=True)
    args = ap.parse_args()
    with open(args.payloads) as f:
        pl = json.load(f)
    tmp = tempfile.mkdtemp(prefix="ingero-parity-")
    hosts = []
    try:
        hosts.append(start_fleet(args.fleet, tmp))
        hosts.append(start_otelcol(args.otelcol, tmp))
        run(hosts, pl)
    except Exception as e:  # a host that fails to start or answer is a failed check
        check("hosts run and answer", False, f"{e}")
        for h in hosts:
            print(f"--- {h.name} log:\n{h.log()}")
    finally:
        for h in hosts:
            h.stop()
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


def run(hosts, pl):
    rust, go = hosts

    # Cold start: a cluster below quorum gets no headers and the zero body.
    for h in hosts:
        s, hdrs, _ = push(h, "cold", pl["cold"])
        check(f"{h.name}: cold push accepted", s == 200, s)
        check(f"{h.name}: cold start sends no threshold headers", thr(hdrs) is None, hdrs)
    same("GET cold cluster", get(rust, "agent", "/api/v1/threshold?cluster_id=cold"),
         get(go, "agent", "/api/v1/threshold?cluster_id=cold"))

    # Every node of a cluster in one request: both hosts' first quorum tick sees the same
    # set, so the EMA starts from the same value and stays there while the scores repeat.
    for h in hosts:
        for c in ("alpha", "beta"):
            s, _, body = push(h, c, pl["batches"][c])
            check(f"{h.name}: {c} batch accepted", s == 200, (s, body[:200]))

    def round_of_pushes():
        seen = {}
        for h in hosts:
            for c in ("alpha", "beta"):
                last = None
                for body in pl["pushes"][c]:
                    s, hdrs, _ = push(h, c, body)
                    last = thr(hdrs)
                seen[(h.name, c)] = last
        return seen

    # Until both hosts flag the straggler (the server-side classifier needs a few ticks);
    # the thresholds are stable from the first quorum tick.
    deadline = time.time() + 60
    while True:
        seen = round_of_pushes()
        flagged = []
        for h in hosts:
            s, _, body = get(h, "admin", "/api/v1/diagnostics?cluster_id=alpha")
            nodes = json.loads(body).get("diagnostics", {}).get("nodes", []) if s == 200 else []
            flagged.append(sorted(n["node_id"] for n in nodes if n.get("straggler")))
        ready = all(v is not None for v in seen.values()) and all(f == ["alpha-node-07"] for f in flagged)
        if ready or time.time() > deadline:
            break
        time.sleep(0.3)
    check("both hosts flag alpha-node-07 as the only straggler", flagged == [["alpha-node-07"]] * 2, flagged)

    # Push-response headers.
    for c in ("alpha", "beta"):
        same(f"threshold headers for {c}", seen[(rust.name, c)], seen[(go.name, c)])
        t = seen[(rust.name, c)]
        check(f"{c} threshold is deliverable (agent accepts it)",
              t is not None and 0.1 <= float(t[0]) <= 0.99 and t[1] in ("true", "false"), t)

    # Pushes without the query parameter: request header, then the payload's resource.
    body = pl["pushes"]["alpha"][0]
    res = [thr(push(h, "alpha", body, {"ingero.cluster.id": "alpha"}, target="/v1/metrics")[1]) for h in hosts]
    same("headers for a cluster named by the ingero.cluster.id header", *res)
    check("header-named cluster gets a threshold", res[0] is not None, res)
    res = [thr(push(h, "alpha", body, target="/v1/metrics")[1]) for h in hosts]
    same("headers for a cluster named only by the payload", *res)
    check("payload-named cluster gets a threshold", res[0] is not None, res)
    res = [(lambda r: (r[0], thr(r[1])))(push(h, "alpha", pl["event"])) for h in hosts]
    same("straggler-event push: status and headers", *res)

    # Malformed cluster ids: refused with the same status and error body.
    for target in ("/v1/metrics?cluster_id=", "/v1/metrics?cluster_id=a&cluster_id=b",
                   "/v1/metrics?cluster_id=a%0d%0aX-Evil:%201"):
        res = [(lambda r: (r[0], json.loads(r[2] or b"{}"), thr(r[1])))(push(h, "x", body, target=target)) for h in hosts]
        same(f"refusal of {target}", *res)
        check(f"{target} is a 400", res[0][0] == 400, res[0])

    # The threshold GET endpoint and its errors.
    for target in ("/api/v1/threshold?cluster_id=alpha", "/api/v1/threshold?cluster_id=beta",
                   "/api/v1/threshold?cluster_id=nobody", "/api/v1/threshold",
                   "/api/v1/threshold?cluster_id=a%0a", "/elsewhere"):
        same(f"GET {target}", get(rust, "agent", target), get(go, "agent", target))
    res = []
    for h in hosts:
        s, hdrs, b = request(h.addr["agent"], "POST", "/api/v1/threshold?cluster_id=alpha", b"")
        res.append((s, hdrs.get("allow"), b.decode()))
    same("POST to the threshold endpoint", *res)
    s, _, b = get(rust, "agent", "/api/v1/threshold?cluster_id=alpha")
    check("GET body carries the header's digits",
          b == f'{{"threshold":{seen[(rust.name, "alpha")][0]},"quorum_met":true}}', b)

    # Admin diagnostics (timestamps differ by nature; everything else must not).
    for target in ("/api/v1/diagnostics?cluster_id=alpha", "/api/v1/diagnostics",
                   "/api/v1/diagnostics?cluster_id=nobody", "/api/v1/diagnostics?limit=0"):
        r = [get(h, "admin", target) for h in hosts]
        norm = [(s, ct, strip_times(json.loads(b))) for s, ct, b in r]
        same(f"admin GET {target}", *norm)

    # gRPC: the threshold in response metadata, and refusals.
    body = pl["pushes"]["beta"][0]
    res = [grpc_export(h, [("cluster_id", "beta")], body) for h in hosts]
    same("gRPC Export metadata for beta", *res)
    check("gRPC Export carries the threshold", res[0][0] == "OK" and res[0][1] is not None, res[0])
    res = [grpc_export(h, [], body) for h in hosts]
    same("gRPC Export metadata from the payload's cluster", *res)
    res = [grpc_export(h, [("ingero.cluster.id", "")], body) for h in hosts]
    same("gRPC Export with a malformed cluster", *res)
    check("gRPC malformed cluster is INVALID_ARGUMENT", res[0][0] == "INVALID_ARGUMENT", res[0])

    # Prometheus series of the pushed data and of the tick output (straggler gauge). The
    # last push of each series was the same on both hosts (same order).
    round_of_pushes()
    time.sleep(1.5)  # at least one tick on both hosts after the last pushes
    data_prefixes = ("ingero_node_", "ingero_agent_", "ingero_fleet_node_straggler")
    pr, pg = prom(rust.addr["prom"], data_prefixes), prom(go.addr["prom"], data_prefixes)
    same("Prometheus data series (names and labels)", sorted(pr), sorted(pg))
    same("Prometheus data values", sorted((k, v) for k, v in pr.items() if not k[0].startswith("ingero_fleet_node_straggler")),
         sorted((k, v) for k, v in pg.items() if not k[0].startswith("ingero_fleet_node_straggler")))
    check("health score series exported", any(k[0].startswith("ingero_node_health_score") for k in pr), sorted(pr)[:5])
    check("tick output (straggler gauge) exported", any(k[0].startswith("ingero_fleet_node_straggler") for k in pr), sorted(pr)[:5])

    # Component self-metrics: ingero-fleet serves them on its exporter, the Go collector on
    # its telemetry endpoint (collector convention for component self-metrics).
    fams = ("ingero_fleet_threshold", "ingero_fleet_median", "ingero_fleet_mad", "ingero_fleet_active_nodes",
            "ingero_fleet_quorum_met", "ingero_fleet_stragglers", "ingero_fleet_clusters",
            "ingero_threshold_published_clusters", "ingero_threshold_clusters_with_threshold")
    sr = prom(rust.addr["prom"], fams)
    sg = prom(go.addr["telemetry"], fams)
    exact = lambda d: {k: v for k, v in d.items() if k[0] in fams}
    same("component self-metrics (name, labels, value)", sorted(exact(sr).items()), sorted(exact(sg).items()))


if __name__ == "__main__":
    sys.exit(main())
