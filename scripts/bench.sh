#!/usr/bin/env bash
# Push-path benchmark: ingero-fleet vs a bare hyper server, same load generator, same box.
# Usage: ./scripts/bench.sh [seconds] [rounds]   (defaults 20 and 3). Writes
# bench/results-<date>.json lines. Needs only the workspace (release build).
# CPU time on a shared VM drifts by 15 % or more within minutes, so the closed-loop cases
# run in alternating rounds (fleet JSON, bare hyper JSON, fleet protobuf, each a fresh
# process) and the summary gives each round's ratio to bare hyper from the same round.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-20}"
ROUNDS="${2:-3}"
cargo build --release -p ingero-fleet --bins -q
cargo build --release -p collector-host --examples -q
BIN=target/release
OUT="bench/results-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
mkdir -p bench
cfg=$(mktemp --suffix=.yaml)
cat > "$cfg" <<'YAML'
receivers:
  otlp:
    protocols:
      http: {endpoint: 127.0.0.1:14318, max_connections: 8192}
      grpc: {endpoint: 127.0.0.1:14317}
processors:
  ingero: {push_interval: 10s}
extensions:
  ingero_threshold: {agent_endpoint: 127.0.0.1:18080, admin_endpoint: 127.0.0.1:18081}
exporters:
  prometheus: {endpoint: 127.0.0.1:18889}
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {receivers: [otlp], processors: [ingero], exporters: [prometheus]}
  telemetry:
    logs: {level: warn}
    metrics: {readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: 18888}}}}]}
YAML

run_fleet() { "$BIN/ingero-fleet" --config "$cfg" >/dev/null 2>/tmp/fleet-bench.log & echo $!; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# run_fleet's process is not this shell's child (command substitution), so `wait` cannot
# wait for it: poll until it is gone, so the next server can bind the port.
stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true # reaps a child (bare_hyper); returns at once otherwise
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  kill -9 "$1" 2>/dev/null || true
}

echo "== idle RSS"
pid=$(run_fleet); wait_port 14318; sleep 2
idle=$(rss_kb "$pid"); echo "{\"case\":\"idle\",\"server\":\"ingero-fleet\",\"rss_kb\":$idle}" | tee -a "$OUT"
stop "$pid"

closed_loop() { # server-label pid encoding round
  "$BIN/fleet-loadgen" --endpoint http://127.0.0.1:14318 --agents 10000 --clusters 8 --connections 64 \
     --duration "${SECS}s" --encoding "$3" --server-pid "$2" --json \
     | sed "s/^{/{\"case\":\"closed-loop\",\"server\":\"$1\",\"round\":$4,/" | tee -a "$OUT"
}
for round in $(seq "$ROUNDS"); do
  for enc in json bare protobuf; do
    if [ "$enc" = bare ]; then
      echo "== round $round: bare hyper, json, 64 connections, ${SECS}s"
      "$BIN/examples/bare_hyper" 127.0.0.1:14318 2>/dev/null & pid=$!
      wait_port 14318
      closed_loop bare-hyper "$pid" json "$round"
    else
      echo "== round $round: ingero-fleet, $enc, 64 connections, ${SECS}s"
      pid=$(run_fleet); wait_port 14318
      closed_loop ingero-fleet "$pid" "$enc" "$round"
    fi
    stop "$pid"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"closed-loop"' in l]
print("== summary: server CPU per push (us), p99 (ms); ratio = ingero-fleet / bare hyper, same round")
ratios = {"json": [], "protobuf": []}
for r in sorted({x["round"] for x in rows}):
    by = {(x["server"], x["encoding"]): x for x in rows if x["round"] == r}
    bare = by.get(("bare-hyper", "json"))
    line = [f"round {r}:"]
    for (srv, enc), x in sorted(by.items()):
        line.append(f"{srv} {enc} {x['server_cpu_us_per_push']:.1f} us p99 {x['latency_ms']['p99']:.2f} ms")
        if srv == "ingero-fleet" and bare:
            ratios[enc].append(x["server_cpu_us_per_push"] / bare["server_cpu_us_per_push"])
    print("  " + "; ".join(line))
for enc, v in ratios.items():
    if v:
        print(f"  {enc}: ratio to bare hyper min {min(v):.2f} median {statistics.median(v):.2f} max {max(v):.2f}")
PY

echo "== ingero-fleet, 100,000 distinct nodes pushing every 10s (paced), scraped every 5s"
pid=$(run_fleet); wait_port 14318
( sleep 12; for _ in 1 2 3 4; do
    curl -s -o /dev/null -w '{"case":"scrape-100k","server":"ingero-fleet","page_bytes":%{size_download},"seconds":%{time_total}}\n' \
      http://127.0.0.1:18889/metrics | tee -a "$OUT"
    sleep 5
  done ) &
scraper=$!
"$BIN/fleet-loadgen" --endpoint http://127.0.0.1:14318 --agents 100000 --clusters 10 --interval 10s \
   --duration 35s --encoding json --server-pid "$pid" --json \
   | sed "s/^{/{\"case\":\"paced-100k\",\"server\":\"ingero-fleet\",/" | tee -a "$OUT"
wait "$scraper"
peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
echo "{\"case\":\"paced-100k\",\"server\":\"ingero-fleet\",\"peak_rss_kb\":$peak}" | tee -a "$OUT"
stop "$pid"
rm -f "$cfg"
echo "results in $OUT"
