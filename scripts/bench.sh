#!/usr/bin/env bash
# Push-path benchmark: ingero-fleet vs a bare hyper server, same load generator, same box.
# Usage: ./scripts/bench.sh [seconds]   (default 20). Writes bench/results-<date>.json lines.
# Needs only the workspace (release build). Reports ratios; absolute numbers drift per run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-20}"
cargo build --release -p collector-host --bins --examples -q
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

echo "== idle RSS"
pid=$(run_fleet); wait_port 14318; sleep 2
idle=$(rss_kb "$pid"); echo "{\"case\":\"idle\",\"server\":\"ingero-fleet\",\"rss_kb\":$idle}" | tee -a "$OUT"

for enc in json protobuf; do
  echo "== ingero-fleet, $enc, 64 connections, ${SECS}s"
  "$BIN/fleet-loadgen" --endpoint http://127.0.0.1:14318 --agents 10000 --clusters 8 --connections 64 \
     --duration "${SECS}s" --encoding "$enc" --server-pid "$pid" --json \
     | sed "s/^{/{\"case\":\"closed-loop\",\"server\":\"ingero-fleet\",/" | tee -a "$OUT"
done
kill "$pid"; wait "$pid" 2>/dev/null || true

echo "== bare hyper, json, 64 connections"
"$BIN/examples/bare_hyper" 127.0.0.1:14318 2>/dev/null & hp=$!
wait_port 14318
"$BIN/fleet-loadgen" --endpoint http://127.0.0.1:14318 --agents 10000 --clusters 8 --connections 64 \
   --duration "${SECS}s" --encoding json --server-pid "$hp" --json \
   | sed "s/^{/{\"case\":\"closed-loop\",\"server\":\"bare-hyper\",/" | tee -a "$OUT"
kill "$hp"; wait "$hp" 2>/dev/null || true

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
kill "$pid"; wait "$pid" 2>/dev/null || true
rm -f "$cfg"
echo "results in $OUT"
