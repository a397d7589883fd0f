#!/usr/bin/env python3
"""Restart recovery of ingero-fleet: how long after a crash every cluster's agents get a
valid threshold again, with the state rebuilt from pushes alone.

    cargo build --release -p collector-host --bins
    python3 scripts/restart-recovery.py [--agents 1000] [--clusters 10] [--interval 10s]

Starts ingero-fleet (release, loopback ports 24317/24318/28080/28081), drives it with
fleet-loadgen in paced mode (each agent pushes once per interval), waits until every
cluster has a threshold, kills the process with SIGKILL, starts it again at once, and
measures from the restart until GET /api/v1/threshold answers quorum_met=true for every
cluster. Prints one JSON line per phase. Nothing here asserts times: it reports them.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")

CONFIG = """
receivers:
  otlp:
    protocols:
      http: {endpoint: 127.0.0.1:24318}
processors:
  ingero: {push_interval: %(interval)s}
extensions:
  ingero_threshold: {agent_endpoint: 127.0.0.1:28080, admin_endpoint: 127.0.0.1:28081}
exporters:
  debug: {}
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {receivers: [otlp], processors: [ingero], exporters: [debug]}
  telemetry:
    logs: {level: warn}
    metrics: {level: none}
"""


def start_fleet(cfg_path):
    return subprocess.Popen(
        [os.path.join(BIN, "ingero-fleet"), "--config", cfg_path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def threshold(cluster):
    url = f"http://127.0.0.1:28080/api/v1/threshold?cluster_id={cluster}"
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return json.load(r)
    except OSError:
        return None


def wait_all_quorum(clusters, deadline_s):
    """Seconds until every cluster answers quorum_met=true, or None at the deadline."""
    start = time.monotonic()
    pending = set(clusters)
    while pending and time.monotonic() - start < deadline_s:
        for c in list(pending):
            t = threshold(c)
            if t and t.get("quorum_met") and 0.1 <= t.get("threshold", 0) <= 0.99:
                pending.discard(c)
        time.sleep(0.05)
    return None if pending else time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--interval", default="10s")
    args = ap.parse_args()
    interval_s = float(args.interval.rstrip("s"))
    clusters = [f"cluster-{i}" for i in range(args.clusters)]

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG % {"interval": args.interval})
        cfg = f.name
    fleet = start_fleet(cfg)
    time.sleep(0.5)
    duration = int(interval_s * 12)
    load = subprocess.Popen(
        [
            os.path.join(BIN, "fleet-loadgen"),
            "--endpoint", "http://127.0.0.1:24318",
            "--agents", str(args.agents),
            "--clusters", str(args.clusters),
            "--interval", args.interval,
            "--duration", f"{duration}s",
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        cold = wait_all_quorum(clusters, interval_s * 5)
        print(json.dumps({"phase": "cold start", "seconds_to_all_thresholds": cold,
                          "clusters": args.clusters, "agents": args.agents,
                          "push_interval_s": interval_s}))
        if cold is None:
            return 1
        fleet.send_signal(signal.SIGKILL)
        fleet.wait()
        fleet = start_fleet(cfg)
        again = wait_all_quorum(clusters, interval_s * 5)
        print(json.dumps({"phase": "after SIGKILL and restart", "seconds_to_all_thresholds": again}))
        out, _ = load.communicate(timeout=duration + 30)
        report = json.loads(out)
        print(json.dumps({"phase": "load generator", "pushes_ok": report["pushes_ok"],
                          "errors_during_the_outage": report["errors"]}))
        return 0 if again is not None else 1
    finally:
        if load.poll() is None:
            load.kill()
        fleet.kill()
        os.unlink(cfg)


if __name__ == "__main__":
    sys.exit(main())
