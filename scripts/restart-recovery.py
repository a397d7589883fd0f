#!/usr/bin/env python3
"""Restart recovery of ingero-fleet: how long after a crash every cluster's agents get a
valid threshold again, with the state rebuilt from pushes alone.

    cargo build --release -p ingero-fleet --bins
    python3 scripts/restart-recovery.py [--agents 1000] [--clusters 10] [--interval 10s]

Starts ingero-fleet (release, loopback ports 24318/28080/28081), drives it with
fleet-loadgen in paced mode (each agent pushes once per interval), waits until every
cluster has a threshold, kills the process with SIGKILL, starts it again at once, and
measures from the restart until GET /api/v1/threshold answers quorum_met=true for every
cluster. Prints one JSON line per phase. Nothing here asserts times: it reports them.
"""

import argparse
import json
import os
import signal
import sys
import time

from fleet_harness import loadgen, parse_seconds, start_fleet, threshold, write_config


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
    ap.add_argument("--profile", default="release", help="cargo profile dir of the binaries")
    args = ap.parse_args()
    interval_s = parse_seconds(args.interval)
    clusters = [f"cluster-{i}" for i in range(args.clusters)]

    cfg = write_config(args.interval)
    fleet = start_fleet(args.profile, cfg)
    time.sleep(0.5)
    duration = int(interval_s * 12)
    load = loadgen(args.profile, args.agents, args.clusters, args.interval, duration)
    try:
        cold = wait_all_quorum(clusters, interval_s * 5)
        print(json.dumps({"phase": "cold start", "seconds_to_all_thresholds": cold,
                          "clusters": args.clusters, "agents": args.agents,
                          "push_interval_s": interval_s}))
        if cold is None:
            return 1
        fleet.send_signal(signal.SIGKILL)
        fleet.wait()
        fleet = start_fleet(args.profile, cfg)
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
