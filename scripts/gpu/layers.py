#!/usr/bin/env python3
"""Which launch counters fire for each layer of a real PyTorch install (issue: count the
work whichever layer launched it), and the ring buffer at a high launch rate.

One unscoped ingero-agent with its /metrics endpoint watches the machine. For each layer a
workload process initialises CUDA, warms up, and waits; the script reads
`ingero_agent_launches_total{layer}` and `ingero_agent_nested_launches_total`, tells the
workload to run N operations, waits for the agent's next drain and reads them again. The
difference divided by N is what one operation of that layer costs in counted launches.
Then several launch-bound processes run at once and the script reports their combined
launch rate and the ring buffer's drops over that time.

Needs root, an NVIDIA GPU and torch (Triton and NCCL for those rows). Usage:

  sudo python3 scripts/gpu/layers.py --agent-bin target/release/ingero-agent \\
      [--agent-arg=--probe-library-root=/opt] [--out /tmp/gpu-layers]

Prints a JSON report and writes it to OUT/layers.json.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = ("eager", "cublas", "cudnn", "triton", "graph", "nccl", "nccl_item")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url):
    """{metric{labels}: value} of the agent's counters."""
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def counters(m):
    pick = lambda k: m.get(k, 0.0)
    return {
        "runtime": pick('ingero_agent_launches_total{layer="runtime"}'),
        "runtime_graph": pick('ingero_agent_launches_total{layer="runtime_graph"}'),
        "driver": pick('ingero_agent_launches_total{layer="driver"}'),
        "driver_graph": pick('ingero_agent_launches_total{layer="driver_graph"}'),
        "nested": pick("ingero_agent_nested_launches_total"),
        "cuda_events": pick('ingero_agent_probe_events_total{library="cuda"}'),
        "nccl_events": pick('ingero_agent_probe_events_total{library="nccl"}'),
        "dropped": sum(v for k, v in m.items() if k.startswith("ingero_agent_probe_dropped_total")),
        "libraries": pick("ingero_agent_probe_libraries"),
        # Collectives whose barrier wait was measured (nccl_item: one per all-reduce).
        "barrier_waits": pick("ingero_agent_nccl_barrier_waits_total"),
    }


def settle(url, before=None, wait=2.5):
    """Counters after the agent's 1 s copy has seen a quiet period."""
    time.sleep(wait)
    return counters(scrape(url))


def run_layer(python, url, layer, n, limit_s=120.0):
    p = subprocess.Popen([python, os.path.join(HERE, "layer_workload.py"), layer, str(n)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    # A workload that hangs (an NCCL init without a usable interface, say) is killed with
    # everything it started, so one layer cannot cost the others.
    watchdog = threading.Timer(limit_s, lambda: os.killpg(p.pid, signal.SIGKILL))
    watchdog.start()
    try:
        return drive_layer(p, url, layer, n)
    finally:
        watchdog.cancel()


def drive_layer(p, url, layer, n):
    # Libraries may print to stdout first (NCCL prints its version line when NCCL_DEBUG is
    # set): skip to "ready". On EOF the workload has exited, so its stderr can be read
    # without waiting on it (it would otherwise wait on stdin for ever).
    seen = []
    for line in p.stdout:
        if line.strip() == "ready":
            break
        seen.append(line.strip())
    else:
        p.wait()
        err = p.stderr.read()
        return {"layer": layer, "error": (" ".join(seen) + " " + err)[-600:]}
    time.sleep(2.5)  # discovery (1 s) attaches to anything the warm-up mapped
    before = settle(url)
    p.stdin.write("go\n")
    p.stdin.flush()
    done = next((json.loads(x) for x in p.stdout if x.startswith("{")), None)
    if done is None:
        p.wait()
        return {"layer": layer, "error": ("no result: " + p.stderr.read())[-600:]}
    after = settle(url)
    p.stdin.write("exit\n")
    p.stdin.flush()
    p.wait()
    delta = {k: after[k] - before[k] for k in before if k != "libraries"}
    return {"layer": layer, "ops": n, **done,
            "per_op": {k: round(v / n, 3) for k, v in delta.items()},
            "delta": delta, "libraries": after["libraries"]}


def rate(python, url, procs, launches):
    before = settle(url, wait=1.5)
    t = time.time()
    ps = [subprocess.Popen([python, os.path.join(HERE, "workload.py"), "tiny", str(launches)],
                           stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    wall = time.time() - t
    after = settle(url)
    counted = sum(after[k] - before[k] for k in ("runtime", "runtime_graph", "driver", "driver_graph"))
    # Each process times its own launch loop; at full overlap the combined rate is the sum.
    per_proc = [1e9 / o["ns_per_launch"] for o in outs]
    return {"processes": procs, "launches_each": launches, "ns_per_launch": [o["ns_per_launch"] for o in outs],
            "combined_launches_per_s": round(sum(per_proc)), "wall_s": round(wall, 2),
            "counted": counted, "dropped": after["dropped"] - before["dropped"],
            "ringbuf_events": after["cuda_events"] - before["cuda_events"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent-bin", default=os.environ.get("INGERO_AGENT_BIN", "target/release/ingero-agent"))
    ap.add_argument("--agent-arg", action="append", default=[])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--ops", type=int, default=5000)
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--rate-procs", type=int, default=3)
    ap.add_argument("--rate-launches", type=int, default=400000)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-layers"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = open(os.path.join(a.out, "agent-layers.log"), "w")
    # Both layers' launch probes stay attached (no calibration switch mid-table), so the
    # table shows what fires at each layer.
    agent = subprocess.Popen([a.agent_bin, "--fleet-node-id", "layers", "--log-json",
                              "--fleet-persist-path", os.path.join(a.out, "layers.json.state"),
                              "--metrics-listen", f"127.0.0.1:{port}", "--libnccl-discovery-interval", "1s",
                              "--runtime-launch-probes", "always",
                              # Barrier waits are counted at the tick: one a second.
                              "--fleet-push-interval", "1s",
                              *a.agent_arg], stdout=log, stderr=subprocess.STDOUT)
    report = {"layers": [], "rate": None}
    try:
        for _ in range(50):
            try:
                scrape(url)
                break
            except OSError:
                time.sleep(0.2)
        for layer in [x for x in a.layers.split(",") if x]:
            try:
                r = run_layer(a.python, url, layer, a.ops)
            except Exception as e:  # one broken layer must not cost the others
                r = {"layer": layer, "error": repr(e)[:600]}
            print(json.dumps(r), flush=True)
            report["layers"].append(r)
        if a.rate_procs > 0:
            try:
                report["rate"] = rate(a.python, url, a.rate_procs, a.rate_launches)
            except Exception as e:
                report["rate"] = {"error": repr(e)[:600]}
            print(json.dumps(report["rate"]), flush=True)
    finally:
        agent.send_signal(2)
        agent.wait(timeout=20)
        log.close()
    with open(os.path.join(a.out, "agent-layers.log")) as f:
        report["attached"] = [json.loads(l).get("fields") for l in f if "attached" in l][:20]
    with open(os.path.join(a.out, "layers.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
