#!/usr/bin/env python3
"""The real-GPU end-to-end harness of ingero-agent (run through scripts/gpu-e2e.sh).

N identical PyTorch workloads share one GPU as N nodes; N agents, each scoped to one
workload with `--pid`, push to one ingero-fleet. After a healthy period one node (the
victim, node 0) gets, in turn, (a) a host stall that slows it by --slowdown, (b) GPU
contention from another process, (c) a stop (no GPU work). Fleet's diagnostics are read
four times a second. The report (JSON, stdout and OUT/report.json) gives per injection the time
to detect on the agent and on Fleet and the time to recover, the false positives over the
healthy minutes, IDLE transitions while kernels ran, and the overhead figures (ns per
launch without and with an agent, agent RSS and CPU, ring-buffer drops).

`--dry-run` needs no GPU and no root: the nodes are `ingero-agent --synthetic` with the same
timeline written into their scripts, so argument handling, Fleet, the diagnostics poller
and the report run for real (no overhead figures). `--report-only DIR` rebuilds the report
from a previous run's files.

`--fake` needs root but no GPU: the workloads are the C training loop of
agent/tests/c/workload.c on the fake CUDA and NCCL libraries (built here with cc), probed by
the real agents, so everything but the GPU runs for real (no contention, no overhead
figures). `--sync` (with `--fake`) makes the N workloads one synchronous job: every step
ends with an all-reduce that completes only when every rank has reached it, so a stall on
node 0 slows every rank and only node 0 may be flagged.

`--check` exits 1 when the report misses a goal (the `verdict` section); `--check A,B`
judges only the named checks (and fails on a name the verdict does not have).

Binaries: INGERO_AGENT_BIN (default target/release/ingero-agent), INGERO_FLEET_BIN (default
target/release/ingero-fleet; the binary may move, so the variable wins).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import layers  # scripts/gpu/layers.py: the /metrics scraper

INJECTIONS = ("stall", "contention", "stop")
# With --sync: the synchronize after the all-reduce (FAKE_SYNC_ON of tests/c/workload.c).
SYNC_ON = ("nccl", "compute", "device")
# Gap between injections, in push intervals: the classifier's clear hold-off (10 ticks),
# one tick for the clear itself and one for the next detection.
RECOVER_INTERVALS = 12
CLUSTER = "gpu-e2e"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gpu-e2e", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=6, help="workloads and agents (>= 6)")
    p.add_argument("--push-interval", type=float, default=2.0, help="seconds (>= 1)")
    p.add_argument("--warmup-samples", type=int, default=10)
    p.add_argument("--signal-window", type=float, default=None,
                   help="the agents' signal window in seconds (default: half the push interval, "
                        "at least 1 s)")
    p.add_argument("--healthy", type=float, default=300.0, help="healthy seconds after warm-up")
    p.add_argument("--inject", type=float, default=40.0, help="seconds per injection")
    p.add_argument("--recover", type=float, default=None,
                   help=f"seconds after each injection (default: 40, at least {RECOVER_INTERVALS} push intervals)")
    p.add_argument("--injections", default=",".join(INJECTIONS),
                   help="comma-separated subset of " + ",".join(INJECTIONS))
    p.add_argument("--slowdown", type=float, default=0.30, help="stall: fraction of the step rate lost")
    p.add_argument("--out", default="/tmp/gpu-e2e")
    p.add_argument("--agent-bin", default=os.environ.get("INGERO_AGENT_BIN", os.path.join(ROOT, "target/release/ingero-agent")))
    p.add_argument("--fleet-bin", default=os.environ.get("INGERO_FLEET_BIN", os.path.join(ROOT, "target/release/ingero-fleet")))
    p.add_argument("--python", default=sys.executable, help="interpreter with torch (GPU runs)")
    p.add_argument("--agent-arg", action="append", default=[],
                   help="extra agent flag (repeatable), e.g. --agent-arg=--probe-library-root=/opt/torch")
    p.add_argument("--overhead-launches", type=int, default=200000)
    p.add_argument("--attach-empty-bin", default=os.environ.get("ATTACH_EMPTY_BIN"),
                   help="the attach_empty example: the overhead part also measures the loops under "
                        "empty entry-only probes on the driver's launch entries (the floor)")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--overhead-only", action="store_true",
                   help="measure the overhead figures and stop (no nodes, no Fleet)")
    p.add_argument("--dry-run", action="store_true", help="synthetic agents, no GPU")
    p.add_argument("--fake", action="store_true",
                   help="C workloads on the fake CUDA/NCCL libraries, real eBPF agents (root, no GPU)")
    p.add_argument("--sync", action="store_true",
                   help="with --fake: the workloads are the ranks of one synchronous job")
    p.add_argument("--sync-on", choices=SYNC_ON, default=None,
                   help="with --sync: how a rank waits for the all-reduce: a synchronize of the "
                        "NCCL stream (nccl, the default), of the compute stream made to wait for "
                        "it as PyTorch does (compute), or of the device (device)")
    p.add_argument("--check", nargs="?", const="all", default=None, metavar="CHECKS",
                   help="exit 1 when the verdict fails; with a comma-separated list of check "
                        "names, when one of those fails")
    p.add_argument("--report-only", metavar="DIR", help="rebuild the report from DIR")
    a = p.parse_args(argv)
    errors = []
    if a.nodes < 6:
        errors.append(f"--nodes must be >= 6 (Fleet's quorum needs 5 peers), got {a.nodes}")
    if a.push_interval < 1:
        errors.append(f"--push-interval must be >= 1, got {a.push_interval}")
    if a.signal_window is None:
        # Recovery needs one full window after the slowdown ends, plus the tick's phase: a
        # window of half the interval leaves room for Fleet's tick inside two intervals.
        a.signal_window = max(1.0, a.push_interval / 2)
    elif not 0.1 <= a.signal_window <= 600:
        errors.append(f"--signal-window must be in [0.1, 600] seconds, got {a.signal_window}")
    if a.warmup_samples < 2:
        errors.append(f"--warmup-samples must be >= 2, got {a.warmup_samples}")
    if a.recover is None:
        a.recover = max(40.0, RECOVER_INTERVALS * a.push_interval)
    for name in ("healthy", "inject", "recover"):
        v = getattr(a, name)
        if v < 3 * a.push_interval:
            errors.append(f"--{name} must be at least 3 push intervals ({3 * a.push_interval}s), got {v}")
    a.injections = [x.strip() for x in a.injections.split(",") if x.strip()]
    if len(a.injections) > 1 and a.recover < RECOVER_INTERVALS * a.push_interval:
        # Fleet's classifier lets an episode clear at once only after classifier.clear_holdoff
        # (10) unflagged ticks since the previous clear: a shorter gap makes the next
        # injection a flapping episode that clears by the slow drain, and measures that.
        errors.append(f"--recover must be at least {RECOVER_INTERVALS} push intervals "
                      f"({RECOVER_INTERVALS * a.push_interval}s) between injections (Fleet's clear "
                      f"hold-off), got {a.recover}")
    bad = [x for x in a.injections if x not in INJECTIONS]
    if bad or not a.injections:
        errors.append(f"--injections: unknown {bad}, choose from {list(INJECTIONS)}")
    if not 0 < a.slowdown < 1:
        errors.append(f"--slowdown must be in (0, 1), got {a.slowdown}")
    if a.fake and a.dry_run:
        errors.append("--fake and --dry-run exclude each other")
    if a.overhead_only and (a.dry_run or a.fake or a.skip_overhead):
        errors.append("--overhead-only needs a GPU run (not --dry-run, --fake or --skip-overhead)")
    if a.sync and not a.fake:
        errors.append("--sync needs --fake (one GPU cannot run a multi-rank NCCL job)")
    if a.fake and "contention" in a.injections:
        errors.append("--fake has no GPU to contend for: leave contention out of --injections")
    if a.sync_on and not a.sync:
        errors.append("--sync-on needs --sync")
    a.sync_on = a.sync_on or SYNC_ON[0]
    if a.sync and [x for x in a.injections if x != "stall"]:
        errors.append("--sync injects stall only (a stopped rank stops the whole job)")
    if errors:
        p.error("; ".join(errors))
    return a


def timeline(a):
    """[(name, start, end)] relative to T0 (the agents' start): one window per injection."""
    warm = (a.warmup_samples + 2) * a.push_interval
    t = warm + a.healthy
    out = []
    for name in a.injections:
        out.append((name, t, t + a.inject))
        t += a.inject + a.recover
    return warm, out, t


def synthetic_script(windows, slowdown, first_tick):
    """The victim's synthetic script for a dry run: the same windows as factors. A script's
    clock starts at the agent's first tick, `first_tick` seconds after it starts."""
    steps = ["0s:1.0"]
    for name, start, end in windows:
        factor = 0.0 if name == "stop" else 1.0 - slowdown
        steps.append(f"{int((start - first_tick) * 1000)}ms:{factor}")
        steps.append(f"{int((end - first_tick) * 1000)}ms:1.0")
    return ",".join(steps)


FAKE_LIBS = (  # (source, soname, driver-linked)
    ("fake_cuda.c", "libcuda.so.1", False),
    ("fake_cudart.c", "libcudart.so.12", True),
    ("fake_cublas.c", "libcublasLt.so.12", True),
    ("fake_nccl.c", "libnccl.so.2", False),
)


def build_fakes(out):
    """Compile the fake libraries and the C workload of agent/tests/c into out; returns the
    workload's path (the same build as agent/tests/e2e/native.rs)."""
    src = os.path.join(ROOT, "agent", "tests", "c")
    os.makedirs(out, exist_ok=True)
    rpath = f"-Wl,-rpath,{out}"
    cuda = os.path.join(out, "libcuda.so.1")
    libs = []
    for c, soname, on_driver in FAKE_LIBS:
        lib = os.path.join(out, soname)
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-Wl,-soname,{soname}",
                        "-o", lib, os.path.join(src, c), *([cuda] if on_driver else []), rpath], check=True)
        libs.append(lib)
    workload = os.path.join(out, "workload")
    # The runtime first, as in native.rs.
    order = [libs[1], libs[0], libs[2], libs[3]]
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", workload, os.path.join(src, "workload.c"), *order, rpath],
                   check=True)
    return workload


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_time(line):
    """Unix seconds of a `--log-json` line, or None."""
    try:
        ts = json.loads(line)["timestamp"]
    except (ValueError, KeyError, TypeError):
        return None
    ts = ts.rstrip("Z")
    frac = ""
    if "." in ts:
        ts, frac = ts.split(".", 1)
    t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def agent_events(lines, t0):
    """(t, kind, value) from an agent's JSON log: kind `straggler` (True/False) or `state`."""
    out = []
    for line in lines:
        t = log_time(line)
        if t is None:
            continue
        f = json.loads(line).get("fields", {})
        msg = f.get("message")
        if msg == "straggler_state transition":
            out.append((t - t0, "straggler", f.get("straggler_state") == "STRAGGLER"))
        elif msg == "health state transition":
            out.append((t - t0, "state", f.get("next")))
        elif msg == "probe totals":
            out.append((t - t0, "totals", {k: v for k, v in f.items() if k != "message"}))
    return out


def flag_at(events, t):
    """The agent's straggler verdict at time t from its transitions."""
    v = False
    for et, kind, val in events:
        if et > t:
            break
        if kind == "straggler":
            v = val
    return v


def first(events, kind, pred, after, before=float("inf")):
    for et, k, v in events:
        if k == kind and after <= et < before and pred(v):
            return et
    return None


def fleet_flag(diag, node):
    return [(d["t"], bool(d["nodes"].get(node, {}).get("straggler"))) for d in diag if "nodes" in d]


def build_report(run):
    """Pure: everything from the recorded files' contents.

    run = {push_interval, warm, windows: [(name, start, end)], end, victim, nodes: [ids],
           agent_logs: {node: [lines]}, t0, diag: [{t, nodes: {id: {straggler, state, score}}}],
           overhead: {...} or None, machine: {...}}
    """
    p = run["push_interval"]
    events = {n: agent_events(run["agent_logs"].get(n, []), run["t0"]) for n in run["nodes"]}
    victim = run["victim"]
    windows = run["windows"]
    budget_detect = 3 * p  # two push intervals plus one tick
    budget_recover = 2 * p
    injections = []
    for name, start, end in windows:
        ev = events[victim]
        a_det = first(ev, "straggler", lambda v: v, start, end + budget_detect)
        # Recovery: the first clear verdict after the detection, relative to the end of the
        # injection (negative when cleared before it: a stopped node goes IDLE, which
        # clears the verdict on the agent and excludes the node on Fleet).
        a_rec = first(ev, "straggler", lambda v: not v, a_det, end + 10 * budget_recover) if a_det is not None else None
        ff = fleet_flag(run["diag"], victim)
        f_det = next((t for t, s in ff if start <= t < end + budget_detect and s), None)
        f_rec = next((t for t, s in ff if t > f_det and not s), None) if f_det is not None else None
        if name == "stop":
            # A stopped node goes IDLE (Fleet excludes it) rather than being flagged: report it.
            idle = first(ev, "state", lambda v: v == "idle", start, end)
            wake = first(ev, "state", lambda v: v in ("active", "calibrating"), end)
        else:
            idle = wake = None
        rel = lambda t, ref: None if t is None else round(t - ref, 2)
        injections.append({
            "injection": name,
            "start_s": start,
            "end_s": end,
            "peer_rate_change": peer_rate_change(run.get("rates") or {}, victim, run["warm"],
                                                 windows[0][1], start, end),
            "agent_detect_s": rel(a_det, start),
            "fleet_detect_s": rel(f_det, start),
            "agent_recover_s": rel(a_rec, end),
            "fleet_recover_s": rel(f_rec, end),
            "agent_idle_after_s": rel(idle, start),
            "agent_wake_after_s": rel(wake, end),
            "agent_detect_ok": a_det is not None and a_det - start <= budget_detect,
            "fleet_detect_ok": f_det is not None and f_det - start <= budget_detect,
            "agent_recover_ok": a_rec is not None and a_rec - end <= budget_recover,
            "fleet_recover_ok": f_rec is not None and f_rec - end <= budget_recover,
            "recover_ok": (a_rec is not None and a_rec - end <= budget_recover
                           and f_rec is not None and f_rec - end <= budget_recover),
        })
    # False positives: any straggler verdict on a node outside an injection window of its
    # own (all of node 0's healthy time and every other node's judged time), sampled per
    # second for agents and per diagnostics record for Fleet.
    judged_from, judged_to = run["warm"], run["end"]

    # A window that moved every other node's step rate is systemic: contention from another
    # process on the one shared GPU slows them all, and a stopped node on it hands its
    # share to the others (they speed up, then slow down again when it resumes). Fleet
    # sees a fleet-wide shift there, holds its threshold and may flag anybody, by design:
    # such a window is nobody's healthy time. Its flags are reported apart. Not so for the
    # ranks of one synchronous job: every rank slows with the slow one, and a flag on a
    # waiting rank is exactly the false positive that run is there to catch.
    systemic = [name == "contention"
                or (not run.get("sync") and abs(inj["peer_rate_change"] or 0.0) >= SYSTEMIC_RATE_CHANGE)
                for (name, _, _), inj in zip(windows, injections)]

    def injected(node, t, everybody_too=True):
        return any(s <= t < e + 10 * budget_recover for (_, s, e), sys_ in zip(windows, systemic)
                   if node == victim or (sys_ and everybody_too))

    healthy_seconds = 0
    agent_fp, agent_fp_systemic = {}, 0
    t = judged_from
    while t < judged_to:
        for n in run["nodes"]:
            if injected(n, t):
                if not injected(n, t, everybody_too=False) and flag_at(events[n], t):
                    agent_fp_systemic += 1
                continue
            healthy_seconds += 1
            if flag_at(events[n], t):
                agent_fp[n] = agent_fp.get(n, 0) + 1
        t += 1.0
    fleet_fp, fleet_samples, fleet_fp_systemic = {}, 0, 0
    for d in run["diag"]:
        if "nodes" not in d or not judged_from <= d["t"] < judged_to:
            continue
        for n in run["nodes"]:
            flagged = d["nodes"].get(n, {}).get("straggler")
            if injected(n, d["t"]):
                if flagged and not injected(n, d["t"], everybody_too=False):
                    fleet_fp_systemic += 1
                continue
            fleet_samples += 1
            if flagged:
                fleet_fp[n] = fleet_fp.get(n, 0) + 1
    # IDLE while kernels ran: any idle transition outside the victim's stop window.
    stop_windows = [(s, e + 10 * budget_recover) for name, s, e in windows if name == "stop"]
    idle_while_running = []
    for n in run["nodes"]:
        for et, kind, v in events[n]:
            if kind == "state" and v == "idle" and et >= 0:
                if not (n == victim and any(s <= et < e for s, e in stop_windows)):
                    idle_while_running.append({"node": n, "t": round(et, 2)})
    totals = {n: v for n in run["nodes"] for _, k, v in events[n] if k == "totals"}
    false_positives = {
        "healthy_node_seconds": healthy_seconds,
        "agent_flagged_node_seconds": sum(agent_fp.values()),
        "agent_by_node": agent_fp,
        "fleet_samples": fleet_samples,
        "fleet_flagged_samples": sum(fleet_fp.values()),
        "fleet_by_node": fleet_fp,
        # Flags on the other nodes inside systemic windows (not judged).
        "systemic_windows": [name for (name, _, _), sys_ in zip(windows, systemic) if sys_],
        "agent_flagged_node_seconds_in_systemic_windows": agent_fp_systemic,
        "fleet_flagged_samples_in_systemic_windows": fleet_fp_systemic,
    }
    ovh = run.get("overhead")
    return {
        "verdict": verdict(injections, false_positives, idle_while_running, ovh, budget_detect, budget_recover),
        "healthy_scores": score_spread(run, injected),
        # One row per node and push (written to scores.csv by report_from_dir).
        "score_rows": score_rows(run, injected),
        "machine": run.get("machine", {}),
        "nodes": len(run["nodes"]),
        "victim": victim,
        "push_interval_s": p,
        "signal_window_s": run.get("signal_window"),
        # One synchronous job: a stall on the victim slows every rank, and a flag on any
        # other rank during it counts as a false positive.
        "synchronous_ranks": bool(run.get("sync")),
        "budgets": {"detect_s": budget_detect, "recover_s": budget_recover},
        "injections": injections,
        "false_positives": false_positives,
        "idle_while_running": idle_while_running,
        "probe_totals": totals,
        "overhead": ovh,
    }


# The other nodes' mean step rate moved this much (as a fraction) during an injection: the
# window is systemic (see build_report). A tenth of every node's rate is a fleet-wide event,
# three times what one node's 30 % stall moves its peers on a shared GPU (they speed up).
SYSTEMIC_RATE_CHANGE = 0.10


def peer_rate_change(rates, victim, healthy_from, healthy_to, start, end):
    """The non-victim nodes' mean step rate during [start + 2 s, end - 1 s] relative to the
    healthy period [healthy_from, healthy_to), minus 1; None without workload logs."""
    mean = lambda v: sum(v) / len(v) if v else None
    peers = [r for n, r in rates.items() if n != victim]
    base = mean([x for r in peers for t, x in r if healthy_from <= t < healthy_to])
    during = mean([x for r in peers for t, x in r if start + 2 <= t < end - 1])
    if not base or during is None:
        return None
    return round(during / base - 1.0, 4)


# Issue 17's overhead targets: step time within 1 % (matmul) and 2 % (transformer) of no
# agent, idle RSS under 30 MB.
OVERHEAD_TARGETS = {"matmul_ms_per_step": 1.01, "transformer_ms_per_step": 1.02}
RSS_IDLE_TARGET_BYTES = 30_000_000


def verdict(injections, fp, idle_while_running, ovh, budget_detect, budget_recover):
    """The goals a run is judged by, each a named check: no false positives; a stall flagged
    by the agent and by Fleet within two intervals plus a tick and cleared within two
    intervals; a stopped node flagged or IDLE within the detection budget and back within
    the recovery budget; no IDLE while kernels ran; the overhead targets when measured.
    Contention loads every node of a shared GPU: reported, not judged."""
    # Without nodes (--overhead-only) there is nothing to judge but the overhead.
    checks = {} if fp.get("healthy_node_seconds") == 0 and not injections else {
        "no_agent_false_positives": fp["agent_flagged_node_seconds"] == 0,
        "no_fleet_false_positives": fp["fleet_flagged_samples"] == 0,
        "no_idle_while_running": not idle_while_running,
    }
    within = lambda v, budget: v is not None and v <= budget
    for i, inj in enumerate(injections):
        key = f"{inj['injection']}{i}"
        if inj["injection"] == "stall":
            checks[f"{key}_agent_detect"] = inj["agent_detect_ok"]
            checks[f"{key}_fleet_detect"] = inj["fleet_detect_ok"]
            checks[f"{key}_agent_recover"] = inj["agent_recover_ok"]
            checks[f"{key}_fleet_recover"] = inj["fleet_recover_ok"]
        elif inj["injection"] == "stop":
            checks[f"{key}_agent_detect"] = inj["agent_detect_ok"] or within(inj["agent_idle_after_s"], budget_detect)
            checks[f"{key}_agent_recover"] = (within(inj["agent_recover_s"], budget_recover)
                                              or within(inj["agent_wake_after_s"], budget_recover))
    if ovh:
        for k, target in OVERHEAD_TARGETS.items():
            checks[f"overhead_{k}"] = ovh["ratio_median"].get(k, float("inf")) <= target
        checks["overhead_rss_idle"] = ovh["agent_rss_idle_bytes"] < RSS_IDLE_TARGET_BYTES
        drops = (ovh.get("probe_totals") or {}).get("ringbuf_full")
        if drops is not None:
            checks["overhead_no_ring_drops"] = drops == 0
    failed = sorted(k for k, ok in checks.items() if not ok)
    return {"pass": not failed, "failed": failed, "checks": checks}


def score_rows(run, injected):
    """Every node's score as Fleet saw it, one row per node and push: (t, node, score,
    healthy), healthy meaning active, inside the judged time and outside the injections
    (what scripts/fit-noise.py fits the simulator's noise model to)."""
    rows, seen = [], set()
    for d in run["diag"]:
        if "nodes" not in d:
            continue
        for n, v in d["nodes"].items():
            if v.get("score") is None:
                continue
            key = (n, v["score"], int(d["t"] // run["push_interval"]))
            if key in seen:
                continue
            seen.add(key)
            healthy = (v.get("state") == "active" and run["warm"] <= d["t"] < run["end"]
                       and not injected(n, d["t"]))
            rows.append((d["t"], n, v["score"], int(healthy)))
    return rows


def write_scores_csv(rows, path):
    with open(path, "w") as f:
        f.write("t_s,node,score,healthy\n")
        for t, n, score, healthy in rows:
            f.write(f"{t},{n},{score},{healthy}\n")


def score_spread(run, injected):
    """How narrow the healthy band is: Fleet's view of every node's score over the judged
    time, outside the victim's injections (one value per node per push, not per poll)."""
    per_node, seen = {}, set()
    for d in run["diag"]:
        if "nodes" not in d or not run["warm"] <= d["t"] < run["end"]:
            continue
        for n, v in d["nodes"].items():
            if injected(n, d["t"]) or v.get("score") is None or v.get("state") != "active":
                continue
            key = (n, v["score"], int(d["t"] // run["push_interval"]))
            if key in seen:
                continue
            seen.add(key)
            per_node.setdefault(n, []).append(v["score"])
    allv = sorted(x for v in per_node.values() for x in v)
    if not allv:
        return None
    q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
    mean = sum(allv) / len(allv)
    sd = (sum((x - mean) ** 2 for x in allv) / max(1, len(allv) - 1)) ** 0.5
    return {"samples": len(allv), "p01": q(allv, 0.01), "p50": q(allv, 0.5), "p99": q(allv, 0.99),
            "min": allv[0], "max": allv[-1], "stdev": round(sd, 5),
            "node_medians": {n: q(sorted(v), 0.5) for n, v in sorted(per_node.items())}}


class Procs:
    def __init__(self):
        self.procs = []
        self.files = []

    def start(self, argv, log, **kw):
        f = open(log, "w")
        self.files.append(f)
        pr = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, **kw)
        self.procs.append(pr)
        return pr

    def stop_all(self):
        for pr in reversed(self.procs):
            if pr.poll() is None:
                pr.send_signal(signal.SIGINT)
        # An agent's stop detaches its probes, about 0.1 s each and one at a time across
        # the host (the kernel waits for an RCU grace period per uprobe): six agents with
        # the real libraries' 98 probes each need about a minute together.
        deadline = time.time() + 90
        for pr in self.procs:
            try:
                pr.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()
        for f in self.files:
            f.close()


# Fleet's diagnostics are read four times a second: its verdict times are known to a
# quarter of a second (a 1 s poll could report a clear up to 1 s late, half a budget).
POLL_S = 0.25


def poll_diag(admin, stop, t0, path):
    url = f"http://{admin}/api/v1/diagnostics?cluster_id={CLUSTER}"
    with open(path, "w") as out:
        while not stop.is_set():
            rec = {"t": round(time.time() - t0, 2)}
            try:
                d = json.load(urllib.request.urlopen(url, timeout=1))
                rec["thr"] = d.get("threshold")
                rec["nodes"] = {x["node_id"]: {"score": x.get("score"), "state": x.get("state"),
                                               "straggler": bool(x.get("straggler"))}
                                for x in d.get("diagnostics", {}).get("nodes", [])}
            except Exception as e:  # cold start answers 404 until the first publish
                rec["err"] = str(e)[:120]
            out.write(json.dumps(rec) + "\n")
            out.flush()
            stop.wait(POLL_S)


def proc_usage(pid):
    """(RSS bytes, CPU seconds) of a process from /proc."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


def rss_by_mapping(pid, top=12):
    """Where a process's resident memory is: KiB of Rss per mapped file (or [heap],
    [anon], ...) from /proc/PID/smaps, the largest `top`, for the idle-RSS target."""
    by = {}
    name = None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    name = head[5] if len(head) > 5 else "[anon]"
                elif head[0] == "Rss:" and name is not None:
                    by[name] = by.get(name, 0) + int(head[1])
    except OSError:
        return None
    return dict(sorted(by.items(), key=lambda kv: -kv[1])[:top])


PROBE_METRICS = ("ingero_agent_runtime_launch_probes", "ingero_agent_runtime_launch_calibration_launches",
                 "ingero_agent_launches_total", "ingero_agent_nested_launches_total",
                 "ingero_agent_probe_dropped_total", "ingero_agent_probe_libraries")


def agent_probe_metrics(addr):
    """{series: value} of the agent's probe metrics from its /metrics, or {"error": ...}."""
    try:
        series = layers.scrape(f"http://{addr}/metrics")
    except OSError as e:
        return {"error": str(e)[:200]}
    return {k: v for k, v in series.items() if k.startswith(PROBE_METRICS)}


def machine_info(a):
    info = {"dry_run": a.dry_run, "fake": a.fake, "sync": a.sync}
    if a.sync:
        info["sync_on"] = a.sync_on
    if a.dry_run:
        return info
    if a.fake:
        info["kernel"] = os.uname().release
        info["cpus"] = os.cpu_count()
        return info
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10).stdout.strip()
        info["gpu"] = q
    except OSError:
        pass
    try:
        info["torch"] = subprocess.run([a.python, "-c", "import torch;print(torch.__version__, torch.version.cuda)"],
                                       capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        pass
    info["kernel"] = os.uname().release
    return info


def overhead(a, out):
    if a.dry_run or a.fake or a.skip_overhead:
        return None
    w = os.path.join(HERE, "workload.py")

    def last_json(args):
        r = subprocess.run([a.python, w, *args], capture_output=True, text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def measure():
        return {
            "ns_per_launch": [last_json(["tiny", str(a.overhead_launches)])["ns_per_launch"] for _ in range(3)],
            "matmul_ms_per_step": [last_json(["step", "matmul", "300"])["ms_per_step"] for _ in range(3)],
            "transformer_ms_per_step": [last_json(["step", "transformer", "300"])["ms_per_step"] for _ in range(3)],
        }

    bare = measure()
    procs = Procs()
    metrics = f"127.0.0.1:{free_port()}"
    # Unscoped: the agent watches every process that maps the CUDA libraries.
    ag = procs.start([a.agent_bin, "--fleet-node-id", "overhead", "--fleet-persist-path",
                      os.path.join(out, "ovh.json"), "--log-json", "--metrics-listen", metrics, *a.agent_arg],
                     os.path.join(out, "agent-overhead.log"))
    time.sleep(3)
    rss_idle, _ = proc_usage(ag.pid)
    rss_idle_map = rss_by_mapping(ag.pid)
    warm = subprocess.Popen([a.python, w, "tiny", "100000"], stdout=subprocess.DEVNULL)
    time.sleep(12)  # a discovery scan attaches to the libraries the warm-up process maps
    warm.wait()
    _, cpu0 = proc_usage(ag.pid)
    t = time.time()
    probed = measure()
    rss_load, cpu1 = proc_usage(ag.pid)
    rss_load_map = rss_by_mapping(ag.pid)
    probe_metrics = agent_probe_metrics(metrics)
    procs.stop_all()
    with open(os.path.join(out, "agent-overhead.log")) as f:
        lines = f.read().splitlines()
    totals = [v for _, k, v in agent_events(lines, 0.0) if k == "totals"]
    med = lambda v: sorted(v)[len(v) // 2]
    floor = probe_floor(a, out, attached_libcuda(lines), measure)
    if floor.get("steps"):
        floor["ratio_median"] = {k: round(med(floor["steps"][k]) / med(bare[k]), 4) for k in bare}
        floor["agent_over_floor"] = {k: round(med(probed[k]) / med(floor["steps"][k]), 4) for k in bare}
    return {"bare": bare, "agent": probed,
            "ratio_median": {k: round(med(probed[k]) / med(bare[k]), 4) for k in bare},
            # The same loops with only an empty entry-only uprobe on each driver launch entry
            # the agent probes: the least any uprobe-based launch count can cost here.
            "floor": floor,
            "agent_rss_idle_bytes": rss_idle, "agent_rss_load_bytes": rss_load,
            "agent_rss_idle_kib_by_mapping": rss_idle_map, "agent_rss_load_kib_by_mapping": rss_load_map,
            "probe_totals": totals[-1] if totals else None,
            # Whether the runtime's launch probes were detached after calibration (launches
            # then pay one trap, at the driver), with the launch counters by layer.
            "agent_probe_metrics": probe_metrics,
            "agent_cpu_share_under_load": round((cpu1 - cpu0) / max(1e-9, time.time() - t), 4)}


def attached_libcuda(log_lines):
    """The libcuda file the agent's probes attached to, from its JSON log."""
    for line in log_lines:
        try:
            fields = json.loads(line).get("fields", {})
        except ValueError:
            continue
        path = fields.get("path", "")
        if fields.get("message") == "probes attached" and "libcuda.so" in os.path.basename(path):
            return path
    return None


def probe_floor(a, out, libcuda, measure):
    """`measure()` with attach_empty's entry-only probes on libcuda's launch entries."""
    if not a.attach_empty_bin or not os.access(a.attach_empty_bin, os.X_OK):
        return {"skipped": "no attach_empty binary (ATTACH_EMPTY_BIN)"}
    if not libcuda:
        return {"skipped": "the agent attached to no libcuda"}
    p = subprocess.Popen([a.attach_empty_bin, libcuda, "@driver-launches", "entry"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=open(os.path.join(out, "attach-empty.log"), "w"), text=True)
    try:
        line = p.stdout.readline().split()
        if not line or line[0] != "attached":
            return {"error": "attach_empty did not attach (see attach-empty.log)", "libcuda": libcuda}
        return {"libcuda": libcuda, "probed_functions": int(line[1]), "steps": measure()}
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def run(a):
    os.makedirs(a.out, exist_ok=True)
    for b in (a.agent_bin, a.fleet_bin):
        if not os.access(b, os.X_OK):
            sys.exit(f"gpu-e2e: {b} is not an executable (set INGERO_AGENT_BIN / INGERO_FLEET_BIN)")
    if a.fake and os.geteuid() != 0:
        sys.exit("gpu-e2e: --fake runs eBPF agents: run it as root")
    warm, windows, end = timeline(a)
    fake_workload = build_fakes(os.path.join(a.out, "fake")) if a.fake else None
    machine = machine_info(a)
    ovh = overhead(a, a.out)
    if a.overhead_only:
        meta = {"t0": time.time(), "push_interval": a.push_interval, "signal_window": a.signal_window,
                "sync": False, "warm": 0.0, "windows": [], "end": 0.0, "victim": None, "nodes": [],
                "overhead": ovh, "machine": machine}
        with open(os.path.join(a.out, "run.json"), "w") as f:
            json.dump(meta, f)
        open(os.path.join(a.out, "diag.ndjson"), "w").close()
        return report_from_dir(a.out)
    otlp, agent_ep, admin, prom = free_port(), free_port(), free_port(), free_port()
    cfg = os.path.join(a.out, "fleet.yaml")
    with open(cfg, "w") as f:
        f.write(f"""receivers: {{otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:{otlp}}}}}}}}}
processors:
  ingero: {{push_interval: {a.push_interval}s}}
extensions: {{ingero_threshold: {{agent_endpoint: 127.0.0.1:{agent_ep}, admin_endpoint: 127.0.0.1:{admin}}}}}
exporters: {{prometheus: {{endpoint: 127.0.0.1:{prom}}}}}
service: {{extensions: [ingero_threshold], pipelines: {{metrics: {{receivers: [otlp], processors: [ingero], exporters: [prometheus]}}}}}}
""")
    procs = Procs()
    procs.start([a.fleet_bin, "--config", cfg], os.path.join(a.out, "fleet.log"))
    time.sleep(1.0)
    nodes = [f"node-{i}" for i in range(a.nodes)]
    victim = nodes[0]
    common = ["--fleet-endpoint", f"http://127.0.0.1:{otlp}", "--fleet-insecure", "--fleet-cluster-id", CLUSTER,
              "--fleet-push-interval", f"{a.push_interval}s", "--warmup-samples", str(a.warmup_samples),
              "--fleet-provider", "none", "--signal-window", f"{int(a.signal_window * 1000)}ms", "--log-json", *a.agent_arg]
    if a.fake:
        common += ["--probe-library-root", os.path.dirname(fake_workload)]
    ctl = {}
    workloads = {}
    if not a.dry_run:
        w = os.path.join(HERE, "workload.py")
        barrier = os.path.join(a.out, "fake", "barrier")
        if a.sync and os.path.exists(barrier):
            os.remove(barrier)
        for i, n in enumerate(nodes):
            ctl[n] = os.path.join(a.out, "ctl-" + n)
            shutil.rmtree(ctl[n], ignore_errors=True)
            os.makedirs(ctl[n])
            # torchrun's variables: the agents read the rank from the traced process.
            env = {**os.environ, "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(len(nodes))}
            if a.sync:
                env["FAKE_NCCL_BARRIER"] = barrier
                env["FAKE_SYNC_ON"] = a.sync_on
            argv = [fake_workload, "train", str(end + 30), ctl[n]] if a.fake else [a.python, w, "train", str(end + 30), ctl[n]]
            workloads[n] = procs.start(argv, os.path.join(a.out, f"workload-{n}.log"), env=env)
        time.sleep(1 if a.fake else 5)  # CUDA initialisation before the agents look for the libraries
    t0 = time.time()
    # Written before the scenario: a run cut short (an outer time limit) still has what
    # `--report-only` needs to judge the part that ran.
    meta = {"t0": t0, "push_interval": a.push_interval, "signal_window": a.signal_window, "sync": a.sync, "warm": warm,
            "windows": windows, "end": end, "victim": victim, "nodes": nodes, "overhead": ovh, "machine": machine}
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(meta, f)
    for n in nodes:
        argv = [a.agent_bin, *common, "--fleet-node-id", n, "--fleet-persist-path", os.path.join(a.out, f"{n}.json")]
        if a.dry_run:
            script = synthetic_script(windows, a.slowdown, a.push_interval) if n == victim else "0s:1.0"
            argv += ["--synthetic", "--synthetic-script", script]
        else:
            argv += ["--pid", str(workloads[n].pid)]
        procs.start(argv, os.path.join(a.out, f"agent-{n}.log"))
    stop = threading.Event()
    poller = threading.Thread(target=poll_diag, args=(f"127.0.0.1:{admin}", stop, t0, os.path.join(a.out, "diag.ndjson")))
    poller.start()
    try:
        if not a.dry_run:
            base = None
            for name, start, stop_at in windows:
                time.sleep(max(0.0, t0 + start - time.time()))
                contender = None
                if name == "stall":
                    if base is None:
                        base = measured_rate(os.path.join(a.out, f"workload-{victim}.log"))
                    # Sleep so the step rate falls by `slowdown`: 1/(s + x) = (1 - d)/s.
                    step = 1.0 / base if base else 0.01
                    with open(os.path.join(ctl[victim], "stall_ms"), "w") as f:
                        f.write(str(1000.0 * step * a.slowdown / (1.0 - a.slowdown)))
                elif name == "contention":
                    contender = subprocess.Popen([a.python, os.path.join(HERE, "workload.py"), "contend", str(a.inject)])
                elif name == "stop":
                    open(os.path.join(ctl[victim], "pause"), "w").close()
                time.sleep(max(0.0, t0 + stop_at - time.time()))
                for fn in ("stall_ms", "pause"):
                    try:
                        os.remove(os.path.join(ctl[victim], fn))
                    except FileNotFoundError:
                        pass
                if contender:
                    contender.wait()
        time.sleep(max(0.0, t0 + end - time.time()))
    finally:
        stop.set()
        poller.join()
        procs.stop_all()
    return report_from_dir(a.out)


def measured_rate(log):
    rates = []
    with open(log) as f:
        for line in f:
            try:
                rates.append(json.loads(line)["steps_per_s"])
            except (ValueError, KeyError):
                pass
    rates = sorted(rates[-20:])
    return rates[len(rates) // 2] if rates else None


def report_from_dir(d):
    with open(os.path.join(d, "run.json")) as f:
        meta = json.load(f)
    logs = {}
    for n in meta["nodes"]:
        try:
            with open(os.path.join(d, f"agent-{n}.log")) as f:
                logs[n] = f.read().splitlines()
        except FileNotFoundError:
            logs[n] = []
    rates = {}
    for n in meta["nodes"]:
        try:
            with open(os.path.join(d, f"workload-{n}.log")) as f:
                for line in f:
                    try:
                        r = json.loads(line)
                        rates.setdefault(n, []).append((r["t"] - meta["t0"], r["steps_per_s"]))
                    except (ValueError, KeyError, TypeError):
                        pass
        except FileNotFoundError:
            pass
    diag = []
    with open(os.path.join(d, "diag.ndjson")) as f:
        for line in f:
            if line.strip():
                diag.append(json.loads(line))
    meta["windows"] = [tuple(w) for w in meta["windows"]]
    report = build_report({**meta, "agent_logs": logs, "diag": diag, "rates": rates})
    write_scores_csv(report.pop("score_rows"), os.path.join(d, "scores.csv"))
    with open(os.path.join(d, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    return report


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    report = report_from_dir(a.report_only) if a.report_only else run(a)
    print(json.dumps(report, indent=1))
    if a.check:
        v = report["verdict"]
        names = v["checks"] if a.check == "all" else [x.strip() for x in a.check.split(",") if x.strip()]
        missing = [n for n in names if n not in v["checks"]]
        failed = [n for n in names if n in v["checks"] and not v["checks"][n]]
        if missing or failed:
            sys.exit("gpu-e2e: verdict failed: " + ", ".join(failed + [f"{n} (no such check)" for n in missing]))


if __name__ == "__main__":
    main()
