#!/usr/bin/env python3
"""Echo benchmarks against the real `ingero-echo` binary over OTLP/HTTP (protobuf).

Phases (each on a fresh data directory unless said otherwise):

  zero-loss  20,000 straggler events from 8 producers as fast as they are acknowledged,
             then 50,000 paced at about 10,000 events/s from 8 concurrent clients. Read
             back with SQL: exactly 2,500 (then 6,250) events per node, every
             causal_chain_id intact (points.causal_chain_id matches the event id carried
             in the same row's attributes).
  kill       the paced 50,000 again, with `kill -9` of Echo half way and a restart on the
             same data directory. Producers retry an unacknowledged batch until it is
             acknowledged, as an OTLP exporter does. Every acknowledged event must be
             present, and none twice in straggler_events (its primary key is the event
             id); re-sent batches that had been committed before the kill show up as extra
             rows in the catch-all `points` table (at-least-once), which is counted.
  ingest     8 clients push batches of 2,000 points (250 nodes x 8 points: a health
             score, four NCCL durations, three plain gauges) back to back for
             --ingest-seconds; every acknowledgement comes after the commit. Reports
             acknowledged points/s, 503 answers, request latency and Echo's RSS.
  query      stores --query-points health-score points of one cluster (1,000 nodes,
             timestamps spread over the last 50 minutes), then calls
             fleet.cluster.find_outlier_nodes (window 1h) through the HTTP API
             --query-calls times right after the fill (the rollup still holds the last
             seconds unflushed and the partial rows unmerged), then again once the
             writer merged them (--query-settle seconds later): latency percentiles as
             the client sees them.

Prints one JSON report; exits 1 when a correctness check of zero-loss or kill fails.
Usage: scripts/echo-bench.sh [--phases zero-loss,kill,ingest,query] [...]
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENT = "ingero.node.straggler_event"
PRODUCERS = 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv(k, v):
    if isinstance(v, str):
        return KeyValue(key=k, value=AnyValue(string_value=v))
    if isinstance(v, int):
        return KeyValue(key=k, value=AnyValue(int_value=v))
    return KeyValue(key=k, value=AnyValue(double_value=v))


def resource(cluster, node):
    return Resource(attributes=[kv("ingero.cluster.id", cluster), kv("ingero.node.id", node)])


def gauge(name, points):
    return Metric(name=name, gauge=Gauge(data_points=points))


def point(ts, value, attrs=()):
    return NumberDataPoint(time_unix_nano=ts, as_double=value, attributes=[kv(k, v) for k, v in attrs])


def event_body(cluster, node, seqs, now_ns):
    """One request: `seqs` straggler events of one node, each with its id and causal chain."""
    pts = []
    for s in seqs:
        eid = f"{cluster}/{node}/{s}"
        pts.append(point(now_ns + s, 1.0, [("ingero.event.id", eid), ("causal_chain_id", "chain:" + eid),
                                           ("threshold", 0.8), ("score", 0.6)]))
    rm = ResourceMetrics(resource=resource(cluster, node),
                         scope_metrics=[ScopeMetrics(metrics=[gauge(EVENT, pts)])])
    return ExportMetricsServiceRequest(resource_metrics=[rm]).SerializeToString()


class Echo:
    """One ingero-echo process on loopback ports and a data directory."""

    def __init__(self, binary, work, data_dir):
        self.binary, self.work, self.data_dir = binary, work, data_dir
        self.ports = {k: free_port() for k in ("http", "grpc", "api", "health", "telemetry")}
        self.cfg = os.path.join(work, "echo.yaml")
        self.proc = None
        self.starts = 0

    def config(self):
        p = self.ports
        return f"""receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:{p['grpc']}}}
      http: {{endpoint: 127.0.0.1:{p['http']}}}
exporters:
  echo: {{data_dir: {self.data_dir}}}
extensions:
  echo_api: {{endpoint: 127.0.0.1:{p['api']}}}
  health_check: {{endpoint: 127.0.0.1:{p['health']}}}
service:
  extensions: [echo_api, health_check]
  pipelines:
    metrics: {{receivers: [otlp], exporters: [echo]}}
  telemetry:
    logs: {{level: warn}}
    metrics:
      readers:
        - pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {p['telemetry']}}}}}}}
"""

    def start(self):
        with open(self.cfg, "w") as f:
            f.write(self.config())
        log = open(os.path.join(self.work, f"echo-{self.starts}.log"), "w")
        self.starts += 1
        t0 = time.time()
        self.proc = subprocess.Popen([self.binary, "--config", self.cfg], stdout=log, stderr=subprocess.STDOUT)
        while time.time() < t0 + 120:
            if self.proc.poll() is not None:
                sys.exit(f"ingero-echo exited with {self.proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['health']}/", timeout=2) as r:
                    if r.status == 200:
                        return time.time() - t0
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        sys.exit("ingero-echo was not healthy within 120 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def rss(self):
        """(VmRSS, VmHWM) in MiB."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                s = {l.split(":")[0]: l.split()[1] for l in f if l.startswith(("VmRSS", "VmHWM"))}
            return int(s["VmRSS"]) / 1024, int(s["VmHWM"]) / 1024
        except (OSError, KeyError):
            return None, None

    def tool(self, name, args, timeout=120):
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['api']}/api/v1/tools/{name}",
                                     data=json.dumps(args).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)

    def sql(self, query):
        out = self.tool("fleet.cluster.run_analysis", {"sql": query})
        return [dict(zip(out["columns"], row)) for row in out["rows"]]


class Pusher:
    """One keep-alive OTLP/HTTP connection; `push` retries until the batch is acknowledged."""

    def __init__(self, echo):
        self.echo, self.conn = echo, None
        self.refused = 0  # 503 answers (writer behind): retried after Retry-After
        self.errors = 0  # connection failures (Echo down): retried

    def _send(self, body):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.echo.ports["http"], timeout=60)
        self.conn.request("POST", "/v1/metrics", body, {"Content-Type": "application/x-protobuf"})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, r.getheader("Retry-After"), data

    def push(self, body, deadline):
        while time.time() < deadline:
            try:
                status, retry_after, data = self._send(body)
            except (OSError, http.client.HTTPException):
                self.errors += 1
                self.conn = None
                time.sleep(0.2)
                continue
            if status == 200:
                return True
            if status in (429, 503):
                self.refused += 1
                time.sleep(min(float(retry_after or 1), 1.0))
                continue
            raise RuntimeError(f"push answered {status}: {data[:200]!r}")
        return False


def produce_events(echo, cluster, per_node, batch, rate, deadline, kill_at=None):
    """PRODUCERS threads, one node each; returns (acked ids per node, pushers, seconds)."""
    acked = [[] for _ in range(PRODUCERS)]
    pushers = [Pusher(echo) for _ in range(PRODUCERS)]
    now_ns = time.time_ns()
    per_thread_rate = rate / PRODUCERS if rate else None
    sent = [0] * PRODUCERS

    def run(i):
        node = f"node-{i}"
        t0 = time.time()
        for start in range(0, per_node, batch):
            seqs = range(start, min(start + batch, per_node))
            body = event_body(cluster, node, seqs, now_ns)
            if per_thread_rate:
                due = t0 + start / per_thread_rate
                if due > time.time():
                    time.sleep(due - time.time())
            if not pushers[i].push(body, deadline):
                return
            acked[i].extend(seqs)
            sent[i] = len(acked[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(PRODUCERS)]
    t0 = time.time()
    for t in threads:
        t.start()
    killed = None
    if kill_at is not None:
        total = PRODUCERS * per_node
        while sum(sent) < total * kill_at and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        killed = sum(sent)
        echo.kill9()
        time.sleep(0.5)
        echo.start()
    for t in threads:
        t.join()
    return acked, pushers, time.time() - t0, killed


def check_events(echo, cluster, acked, per_node):
    """SQL read-back: counts per node, distinct ids, causal chains, duplicates in points."""
    rows = echo.sql(f"SELECT node_id, count(*) AS n, count(DISTINCT event_id) AS ids FROM straggler_events "
                    f"WHERE cluster_id = '{cluster}' GROUP BY node_id ORDER BY node_id")
    per = {r["node_id"]: (r["n"], r["ids"]) for r in rows}
    pts = echo.sql(
        "SELECT count(*) AS rows, count(DISTINCT causal_chain_id) AS chains, "
        "count(*) FILTER (WHERE causal_chain_id = 'chain:' || "
        "regexp_extract(attributes, '\"ingero.event.id\":\"([^\"]+)\"', 1)) AS intact "
        f"FROM points WHERE cluster_id = '{cluster}' AND metric = '{EVENT}'")[0]
    acked_total = sum(len(a) for a in acked)
    expected = {f"node-{i}": len(a) for i, a in enumerate(acked)}
    checks = {
        f"every node acknowledged {per_node}": all(len(a) == per_node for a in acked),
        f"exactly {per_node} events per node in straggler_events": all(
            per.get(n, (0, 0)) == (per_node, per_node) for n in expected),
        "every causal_chain_id intact": pts["intact"] == pts["rows"] and pts["chains"] == acked_total,
        "no event missing from points": pts["chains"] == acked_total,
    }
    return checks, {"events_acknowledged": acked_total, "points_rows": pts["rows"],
                    "distinct_chains": pts["chains"], "duplicate_point_rows": pts["rows"] - pts["chains"]}


def phase_zero_loss(args, binary, work):
    echo = Echo(binary, work, os.path.join(work, "zero-loss"))
    out, checks = {"startup_s": round(echo.start(), 2)}, {}
    try:
        deadline = time.time() + 600
        acked, pushers, secs, _ = produce_events(echo, "zl-burst", 2500, 50, None, deadline)
        c, d = check_events(echo, "zl-burst", acked, 2500)
        checks.update({f"burst 20k: {k}": v for k, v in c.items()})
        out["burst_20k"] = {**d, "seconds": round(secs, 2), "events_per_s": round(20000 / secs),
                            "refused_503": sum(p.refused for p in pushers)}
        acked, pushers, secs, _ = produce_events(echo, "zl-paced", 6250, 25, 10000, deadline)
        c, d = check_events(echo, "zl-paced", acked, 6250)
        checks.update({f"paced 50k: {k}": v for k, v in c.items()})
        out["paced_50k"] = {**d, "seconds": round(secs, 2), "events_per_s": round(50000 / secs),
                            "refused_503": sum(p.refused for p in pushers)}
        out["rss_mib"], out["peak_rss_mib"] = echo.rss()
    finally:
        echo.stop()
    return out, checks


def phase_kill(args, binary, work):
    echo = Echo(binary, work, os.path.join(work, "kill"))
    echo.start()
    checks = {}
    try:
        acked, pushers, secs, killed = produce_events(echo, "zl-kill", 6250, 25, 10000, time.time() + 600,
                                                      kill_at=0.5)
        c, d = check_events(echo, "zl-kill", acked, 6250)
        # The primary key dedups re-sent events in straggler_events; `points` is at-least-once.
        checks.update({f"kill -9: {k}": v for k, v in c.items() if k != "every causal_chain_id intact"})
        checks["kill -9: causal_chain_id intact in every row"] = d["points_rows"] > 0 and echo.sql(
            "SELECT count(*) FILTER (WHERE causal_chain_id <> 'chain:' || "
            "regexp_extract(attributes, '\"ingero.event.id\":\"([^\"]+)\"', 1)) AS bad "
            f"FROM points WHERE cluster_id = 'zl-kill' AND metric = '{EVENT}'")[0]["bad"] == 0
        out = {**d, "acknowledged_before_kill": killed, "seconds": round(secs, 2),
               "connection_errors_retried": sum(p.errors for p in pushers),
               "refused_503": sum(p.refused for p in pushers), "starts": echo.starts}
    finally:
        echo.stop()
    return out, checks


def ingest_bodies(count, nodes_per_body=250, cluster="bench"):
    """`count` distinct requests of nodes_per_body x 8 points, timestamps 1 s apart."""
    now = time.time_ns()
    ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
    bodies = []
    for b in range(count):
        ts = now - (count - b) * 1_000_000_000
        rms = []
        for j in range(nodes_per_body):
            node = f"node-{(b * nodes_per_body + j) % 1000:04d}"
            ms = [gauge("ingero.node.health_score", [point(ts, 0.9 + random.random() * 0.05,
                                                            [("ingero.node.state", "active")])]),
                  gauge("nccl.collective.duration_ms", [point(ts, 10 + random.random(), [("nccl.op_type", op),
                                                                                     ("nccl.rank", j % 8)])
                                                    for op in ops]),
                  gauge("gpu.utilization", [point(ts, random.random())]),
                  gauge("gpu.memory.used_bytes", [point(ts, 6.4e10 * random.random())]),
                  gauge("gpu.temperature", [point(ts, 60 + random.random() * 10)])]
            rms.append(ResourceMetrics(resource=resource(cluster, node), scope_metrics=[ScopeMetrics(metrics=ms)]))
        bodies.append(ExportMetricsServiceRequest(resource_metrics=rms).SerializeToString())
    return bodies, nodes_per_body * 8


def drive(echo, bodies, points_per_body, seconds, clients=8, limit_bodies=None):
    """Closed loop: `clients` connections push bodies back to back; returns the report."""
    stop = time.time() + seconds
    lat, lock = [], threading.Lock()
    acked, refused, next_i = [0], [0], [0]
    pushers = [Pusher(echo) for _ in range(clients)]
    rss = []

    def run(p):
        while time.time() < stop:
            with lock:
                i = next_i[0]
                if limit_bodies is not None and i >= limit_bodies:
                    return
                next_i[0] += 1
            t = time.perf_counter()
            if not p.push(bodies[i % len(bodies)], stop + 60):
                return
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                acked[0] += 1

    threads = [threading.Thread(target=run, args=(p,)) for p in pushers]
    t0 = time.time()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rss.append(echo.rss()[0])
        time.sleep(0.5)
    secs = time.time() - t0
    lat.sort()
    pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 1) if lat else None
    return {"seconds": round(secs, 1), "requests": acked[0], "points": acked[0] * points_per_body,
            "points_per_s": round(acked[0] * points_per_body / secs), "refused_503": sum(p.refused for p in pushers),
            "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
            "rss_mib": {"max_sampled": round(max(r for r in rss if r), 1) if any(rss) else None,
                        "peak": round(echo.rss()[1] or 0, 1)}}


def phase_ingest(args, binary, work):
    bodies, ppb = ingest_bodies(256)
    echo = Echo(binary, work, os.path.join(work, "ingest"))
    echo.start()
    try:
        out = drive(echo, bodies, ppb, args.ingest_seconds)
        out["points_per_request"] = ppb
        out["request_bytes"] = round(statistics.mean(len(b) for b in bodies))
        out["database_mib"] = round(dir_size(echo.data_dir) / 2**20, 1)
    finally:
        echo.stop()
    return out, {}


def dir_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def phase_query(args, binary, work):
    """10 M health points of one cluster, then find_outlier_nodes through the HTTP API."""
    per_body, nodes = 2000, 1000
    bodies_needed = args.query_points // per_body
    span_ns = 50 * 60 * 1_000_000_000
    now = time.time_ns()
    # 1,000 nodes x 2 samples per body; node-0007 is the slow one.
    bodies = []
    distinct = 200
    for b in range(distinct):
        rms = []
        for n in range(nodes):
            base = 0.7 if n == 7 else 0.93
            pts = [point(now - span_ns + (b * 2 + k) * (span_ns // (distinct * 2)), base + random.random() * 0.03)
                   for k in range(per_body // nodes)]
            rms.append(ResourceMetrics(resource=resource("q10m", f"node-{n:04d}"),
                                       scope_metrics=[ScopeMetrics(metrics=[gauge("ingero.node.health_score", pts)])]))
        bodies.append(ExportMetricsServiceRequest(resource_metrics=rms).SerializeToString())
    echo = Echo(binary, work, os.path.join(work, "query"))
    echo.start()
    try:
        fill = drive(echo, bodies, per_body, 10**9, limit_bodies=bodies_needed)
        stored = echo.sql("SELECT count(*) AS n FROM health_scores WHERE cluster_id = 'q10m'")[0]["n"]

        def calls():
            lat, first = [], None
            for _ in range(args.query_calls):
                t = time.perf_counter()
                ans = echo.tool("fleet.cluster.find_outlier_nodes", {"cluster_id": "q10m", "window": "1h"})
                lat.append(time.perf_counter() - t)
                first = ans["nodes"][0]["node_id"]
            lat.sort()
            return first, {"min": round(lat[0] * 1000, 1), "p50": round(statistics.median(lat) * 1000, 1),
                           "p95": round(lat[int(0.95 * (len(lat) - 1))] * 1000, 1), "max": round(lat[-1] * 1000, 1)}

        first, after_fill = calls()
        rollup_rows = echo.sql("SELECT count(*) AS n FROM health_minutes")[0]["n"]
        time.sleep(args.query_settle)
        first_settled, settled = calls()
        out = {"fill": fill, "health_points_stored": stored, "calls": args.query_calls,
               "latency_ms": after_fill, "rollup_rows_after_fill": rollup_rows,
               "latency_ms_settled": settled, "settle_seconds": args.query_settle,
               "rollup_rows_settled": echo.sql("SELECT count(*) AS n FROM health_minutes")[0]["n"],
               "first_node": first, "rss_mib_after": round(echo.rss()[0] or 0, 1),
               "database_mib": round(dir_size(echo.data_dir) / 2**20, 1)}
        first = first if first == first_settled else None
        checks = {"query: all points stored": stored >= bodies_needed * per_body,
                  "query: the slow node is ranked first": first == "node-0007"}
    finally:
        echo.stop()
    return out, checks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--echo-bin", default=os.environ.get("INGERO_ECHO_BIN",
                                                         os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "ingero-echo")))
    ap.add_argument("--phases", default="zero-loss,kill,ingest,query")
    ap.add_argument("--ingest-seconds", type=float, default=60)
    ap.add_argument("--query-points", type=int, default=10_000_000)
    ap.add_argument("--query-calls", type=int, default=20)
    ap.add_argument("--query-settle", type=float, default=70,
                    help="seconds between the calls right after the fill and the settled ones")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="echo-bench-")
    phases = {"zero-loss": phase_zero_loss, "kill": phase_kill, "ingest": phase_ingest, "query": phase_query}
    report = {"binary": args.echo_bin, "duckdb": os.environ.get("INGERO_ECHO_BENCH_DUCKDB", "as built"),
              "cpus": os.cpu_count(), "load_before": os.getloadavg()[0], "phases": {}}
    checks = {}
    for name in args.phases.split(","):
        t = time.time()
        out, c = phases[name](args, args.echo_bin, work)
        out["phase_seconds"] = round(time.time() - t, 1)
        report["phases"][name] = out
        checks.update(c)
        if not args.keep:
            for d in os.listdir(work):
                p = os.path.join(work, d)
                if os.path.isdir(p):
                    shutil.rmtree(p, ignore_errors=True)
    report["load_after"] = os.getloadavg()[0]
    report["checks"] = checks
    print(json.dumps(report, indent=1))
    failed = [k for k, v in checks.items() if not v]
    if failed:
        print(f"echo-bench: FAILED: {failed}; logs in {work}", file=sys.stderr)
        sys.exit(1)
    print(f"echo-bench: {len(checks)} checks passed; logs in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
