#!/usr/bin/env bash
# User-space instructions per push of a running ingero-fleet, counted by callgrind: a
# load-independent figure for comparing versions of the push path on a shared machine
# (CPU time on this VM moves by 15 % or more between runs).
# Usage: ./scripts/push-instructions.sh [json|protobuf] [ingero-fleet binary]
# Needs valgrind (apt-get install valgrind) and a release build of ingero-fleet (`cargo build --release -p ingero-fleet`).
# KEEP=DIR keeps the callgrind output there (for callgrind_annotate --inclusive=yes).
# PORT_OFFSET=N moves every port by N, so that two counts can run side by side.
# AGENTS=N sets the number of distinct nodes (default 2000; scripts/bench.sh uses 10000).
set -euo pipefail
cd "$(dirname "$0")/.."
ENC="${1:-json}"
FLEET="${2:-target/release/ingero-fleet}"
LOADGEN=target/release/fleet-loadgen
OFF="${PORT_OFFSET:-0}"
OTLP=$((14318 + OFF)) AGENT=$((18080 + OFF)) ADMIN=$((18081 + OFF)) PROM=$((18889 + OFF)) SELF=$((18888 + OFF))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/fleet.yaml" <<YAML
receivers:
  otlp:
    protocols:
      http: {endpoint: 127.0.0.1:$OTLP}
processors:
  ingero: {push_interval: 10s}
extensions:
  ingero_threshold: {agent_endpoint: 127.0.0.1:$AGENT, admin_endpoint: 127.0.0.1:$ADMIN}
exporters:
  prometheus: {endpoint: 127.0.0.1:$PROM}
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {receivers: [otlp], processors: [ingero], exporters: [prometheus]}
  telemetry:
    logs: {level: warn}
    metrics: {readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: $SELF}}}}]}
YAML
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out" \
  "$FLEET" --config "$work/fleet.yaml" >/dev/null 2>"$work/fleet.log" &
pid=$!
for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$OTLP) 2>/dev/null && break; sleep 0.2; done
# Warm-up: node table entries and Prometheus series exist before counting starts.
"$LOADGEN" --endpoint http://127.0.0.1:$OTLP --agents "${AGENTS:-2000}" --clusters 8 --connections 8 \
  --duration 8s --encoding "$ENC" >/dev/null
callgrind_control -i on "$pid" >/dev/null 2>&1
"$LOADGEN" --endpoint http://127.0.0.1:$OTLP --agents "${AGENTS:-2000}" --clusters 8 --connections 8 \
  --duration 10s --encoding "$ENC" --json >"$work/load.json"
callgrind_control -i off "$pid" >/dev/null 2>&1
kill "$pid"; wait "$pid" 2>/dev/null || true
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/cg.out* "$KEEP"/; fi
pushes=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pushes_ok'])" "$work/load.json")
total=$(callgrind_annotate "$work"/cg.out* 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",","",$1); print $1; done = 1}')
echo "{\"encoding\":\"$ENC\",\"pushes\":$pushes,\"instructions\":$total,\"per_push\":$((total / pushes))}"
