#!/usr/bin/env python3
"""Soak test of ingero-fleet: many paced agents for a long time, with checks.

    cargo build --release -p ingero-fleet --bins
    python3 scripts/soak.py                      # 10,000 agents, 10 minutes (the issue's soak)
    python3 scripts/soak.py --agents 2000 --duration 90s --warmup 30s --profile debug   # CI

Starts ingero-fleet (loopback ports of scripts/fleet_harness.py) with the ingero processor
and a Prometheus exporter, drives it with fleet-loadgen in paced mode (every agent pushes
once per push interval, like the real agent), and every --sample seconds reads the
process's RSS, every cluster's GET /api/v1/threshold and one Prometheus scrape.

Checks (exit status 1 if any fails), over the samples after --warmup:
  - no failed push (the load generator's error count) and no failed GET or scrape;
  - RSS flat: (max - min) / min <= --rss-tolerance (default 10 %);
  - every cluster has quorum and a threshold in [0.1, 0.99] at every sample, and each
    cluster's threshold moves by at most --threshold-tolerance (the simulated scores are
    stationary, so a drifting threshold is a bug).
Prints one JSON line per sample and a JSON summary at the end.
"""

import argparse
import json
import os
import sys
import time

from fleet_harness import (loadgen, open_fds, parse_seconds, rss_kib, scrape, start_fleet,
                           threshold, write_config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=10000)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--interval", default="10s", help="agent push interval")
    ap.add_argument("--duration", default="10m")
    ap.add_argument("--warmup", default="60s", help="samples before this are not checked")
    ap.add_argument("--sample", default="10s")
    ap.add_argument("--rss-tolerance", type=float, default=0.10)
    ap.add_argument("--threshold-tolerance", type=float, default=0.01)
    ap.add_argument("--profile", default="release", help="cargo profile dir of the binaries")
    args = ap.parse_args()
    duration = parse_seconds(args.duration)
    warmup = parse_seconds(args.warmup)
    sample = parse_seconds(args.sample)
    clusters = [f"cluster-{i}" for i in range(args.clusters)]

    cfg = write_config(args.interval, prometheus=True)
    fleet = start_fleet(args.profile, cfg)
    time.sleep(0.5)
    load = loadgen(args.profile, args.agents, args.clusters, args.interval, int(duration))
    start = time.monotonic()
    samples = []
    failures = []
    try:
        while time.monotonic() - start < duration - 1:
            time.sleep(sample)
            if fleet.poll() is not None:
                failures.append(f"ingero-fleet exited with {fleet.returncode}")
                break
            t = time.monotonic() - start
            s = {
                "t_s": round(t, 1),
                "rss_kib": rss_kib(fleet.pid),
                "fds": open_fds(fleet.pid),
                "scrape_bytes": scrape(),
                "thresholds": {c: threshold(c) for c in clusters},
            }
            samples.append(s)
            print(json.dumps({"t_s": s["t_s"], "rss_mib": round(s["rss_kib"] / 1024, 1),
                              "fds": s["fds"],
                              "scrape_bytes": s["scrape_bytes"],
                              "clusters_with_quorum": sum(1 for v in s["thresholds"].values()
                                                          if v and v.get("quorum_met"))}),
                  flush=True)
        out, _ = load.communicate(timeout=60)
        report = json.loads(out)
    finally:
        if load.poll() is None:
            load.kill()
        fleet.terminate()
        fleet.wait(timeout=30)
        os.unlink(cfg)

    checked = [s for s in samples if s["t_s"] >= warmup]
    if not checked:
        failures.append("no samples after the warm-up")
    if report["errors"]:
        failures.append(f"{report['errors']} pushes failed")
    for s in checked:
        if s["scrape_bytes"] is None:
            failures.append(f"scrape failed at {s['t_s']} s")
        for c, v in s["thresholds"].items():
            if v is None:
                failures.append(f"GET failed for {c} at {s['t_s']} s")
            elif not (v.get("quorum_met") and 0.1 <= v.get("threshold", 0) <= 0.99):
                failures.append(f"{c} without a valid threshold at {s['t_s']} s: {v}")
    rss = [s["rss_kib"] for s in checked]
    rss_spread = (max(rss) - min(rss)) / min(rss) if rss else None
    if rss_spread is not None and rss_spread > args.rss_tolerance:
        failures.append(f"RSS not flat: {min(rss)}..{max(rss)} KiB ({rss_spread:.1%})")
    drift = {}
    for c in clusters:
        vals = [s["thresholds"][c]["threshold"] for s in checked
                if s["thresholds"].get(c) and s["thresholds"][c].get("quorum_met")]
        if vals:
            drift[c] = max(vals) - min(vals)
            if drift[c] > args.threshold_tolerance:
                failures.append(f"{c} threshold drifted by {drift[c]:.4f}")
    summary = {
        "agents": args.agents,
        "clusters": args.clusters,
        "push_interval": args.interval,
        "duration_s": duration,
        "pushes_ok": report["pushes_ok"],
        "push_errors": report["errors"],
        "push_latency_ms": report.get("latency_ms"),
        "samples_checked": len(checked),
        "rss_mib_min_max": [round(min(rss) / 1024, 1), round(max(rss) / 1024, 1)] if rss else None,
        "rss_spread": round(rss_spread, 4) if rss_spread is not None else None,
        "max_threshold_drift": max(drift.values()) if drift else None,
        "failures": failures[:20],
        "ok": not failures,
    }
    print(json.dumps(summary))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
