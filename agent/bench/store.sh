#!/usr/bin/env bash
# What recording into the event store costs and how much it keeps (needs root and cc), all in
# one run on this machine, with the fake libraries of tests/c and bench/loop.c:
#   1. per call: a tight loop of driver launches, runtime launches and cudaMemcpyAsync calls
#      (a call the agent times: one stored event each) with no agent, with the agent
#      counting only (no --store) and with the agent recording (--store); median of RUNS;
#   2. throughput: RATE cudaMemcpyAsync calls per second (split over WORKERS processes) for
#      LOAD_SECONDS under the recording agent, beside a watched process handing a byte back
#      and forth between two threads (a context switch per hand-over: the scheduler layer's
#      load); calls made against events stored plus every counted drop (probe ring buffer,
#      store queue, write errors): the uncounted loss must be 0. A call is recorded when
#      its second's aggregate counts it; the first 2,000 per process, op and second are
#      also stored as rows of their own;
#   3. the agent's RSS with the store open, idle and at the end of the load, and the disk
#      bound: the same load with --store-max-size-mb BOUND_MB, the largest store file (with
#      its WAL) seen, sampled every 0.2 s, and the rollovers.
# Prints a markdown table. Knobs: CALLS (200000), RUNS (5), RATE (200000), WORKERS (2),
# LOAD_SECONDS (10), BOUND_MB (4). INGERO_AGENT_BIN: a prebuilt agent (else a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
AGENT_DIR=$(pwd)
ROOT=$(cd .. && pwd)
CALLS=${CALLS:-200000}
RUNS=${RUNS:-5}
RATE=${RATE:-200000}
WORKERS=${WORKERS:-2}
LOAD_SECONDS=${LOAD_SECONDS:-10}
BOUND_MB=${BOUND_MB:-4}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

if [ "$(id -u)" != 0 ]; then
  echo "store.sh: needs root (uprobes, tracepoints)" >&2
  exit 1
fi
WORK=$(mktemp -d /var/tmp/ingero-store-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "building (release)..." >&2
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$WORK/libcuda.so.1" "$AGENT_DIR/tests/c/fake_cuda.c"
cc -shared -fPIC -O2 -Wl,-soname,libcudart.so.12 -o "$WORK/libcudart.so.12" "$AGENT_DIR/tests/c/fake_cudart.c" \
  "$WORK/libcuda.so.1" -Wl,-rpath,"$WORK"
cc -O2 -pthread -o "$WORK/loop" "$AGENT_DIR/bench/loop.c" "$WORK/libcudart.so.12" "$WORK/libcuda.so.1" -Wl,-rpath,"$WORK"
if [ -n "${INGERO_AGENT_BIN:-}" ]; then
  AGENT=$INGERO_AGENT_BIN
else
  (cd "$ROOT" && cargo build --release -q -p ingero-agent --bin ingero-agent)
  AGENT="$TARGET/release/ingero-agent"
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
per_call() { for _ in $(seq "$RUNS"); do "$WORK/loop" max "$CALLS" "$1" | awk '{print $2}'; done | median; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
field() { grep "$2" "$1" | tail -1 | grep -o "$3=[0-9]*" | cut -d= -f2; }
sql() { "$AGENT" query --json --db "$1" "$2" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(next(iter(r[0].values())) or 0)'; }

# A holder maps the libraries (no calls) so the agent's discovery finds them at start.
"$WORK/loop" rate 0 100000 > /dev/null &
PIDS+=("$!")
# start_agent LOG [flags...]: the agent with its probes attached to both libraries.
start_agent() {
  local log=$1; shift
  "$AGENT" --no-nccl --probe-library-root "$WORK" --runtime-launch-probes always \
    --fleet-provider none --fleet-persist-path "$WORK/baseline.json" "$@" > /dev/null 2> "$log" &
  APID=$!
  PIDS+=("$APID")
  local n=0
  for _ in $(seq 300); do
    n=$(grep -c "probes attached" "$log" 2>/dev/null || true)
    [ "$n" -ge 2 ] && break
    sleep 0.1
  done
  [ "$n" -ge 2 ] || { echo "agent did not attach both libraries:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.5
}
stop_agent() { kill -TERM "$APID"; wait "$APID" || true; }

# 1. Per call.
declare -A NS
for api in driver runtime memcpy; do NS[none,$api]=$(per_call $api); done
start_agent "$WORK/count.log"
for api in driver runtime memcpy; do NS[count,$api]=$(per_call $api); done
stop_agent
start_agent "$WORK/record.log" --store --store-path "$WORK/percall.db"
IDLE_RSS=$(rss_kb "$APID")
for api in driver runtime memcpy; do NS[record,$api]=$(per_call $api); done
stop_agent

# 2. Throughput, and 3. RSS under load and the disk bound.
load() { # DB LOG [agent flags...]: sets MADE, SWITCHES, LOAD_RSS, LOAD_HWM, MAX_BYTES
  local db=$1 log=$2; shift 2
  start_agent "$log" --store --store-path "$db" "$@"
  "$WORK/loop" switch "$LOAD_SECONDS" > "$WORK/switch.out" &
  local sw=$!
  local w pids=()
  for w in $(seq "$WORKERS"); do
    "$WORK/loop" rate "$((RATE / WORKERS))" "$LOAD_SECONDS" memcpy > "$WORK/load.$w" &
    pids+=("$!")
  done
  MAX_BYTES=0
  while kill -0 "${pids[0]}" 2>/dev/null; do
    local b
    b=$(stat -c %s "$db" "$db-wal" 2>/dev/null | awk '{s += $1} END {print s + 0}')
    [ "$b" -gt "$MAX_BYTES" ] && MAX_BYTES=$b
    sleep 0.2
  done
  wait "${pids[@]}" "$sw" || echo "store.sh: a load process failed (its figures below are short)" >&2
  LOAD_RSS=$(rss_kb "$APID")
  LOAD_HWM=$(hwm_kb "$APID")
  sleep 2 # the last drain
  stop_agent
  # The copies of the loops, and the switching process's one copy.
  MADE=$(cat "$WORK"/load.* | awk '{s += $2} END {print s + 1}')
  SWITCHES=$(awk '{print $2}' "$WORK/switch.out")
  SW_PID=$sw
}
load "$WORK/rate.db" "$WORK/rate.log"
STORED=$(sql "$WORK/rate.db" "SELECT count(*) FROM events WHERE source = 1 AND op = 7")
COUNTED=$(sql "$WORK/rate.db" "SELECT sum(count) FROM event_aggregates WHERE source = 1 AND op = 7")
RING=$(field "$WORK/rate.log" "probe totals" ringbuf_full)
QFULL=$(field "$WORK/rate.log" "store totals" dropped_queue_full)
WERR=$(field "$WORK/rate.log" "store totals" dropped_write_error)
ENTRY=$(field "$WORK/rate.log" "probe totals" entry_missing)
SCHED=$(sql "$WORK/rate.db" "SELECT sum(count) FROM event_aggregates WHERE source = 3 AND op = 1 AND pid = $SW_PID")
HOSTDROP=$(grep "host layer drops" "$WORK/rate.log" | grep -o '_full=[0-9]*' | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
UNCOUNTED=$((MADE - COUNTED - RING - QFULL - WERR - ENTRY))
RATE_RSS=$LOAD_RSS RATE_HWM=$LOAD_HWM RATE_MADE=$MADE RATE_SWITCHES=$SWITCHES
load "$WORK/bound.db" "$WORK/bound.log" --store-max-size-mb "$BOUND_MB"
ROLL=$(field "$WORK/bound.log" "store totals" rollovers)

cat <<EOF
| What | Figure |
|---|---|
| per call, driver launch: none / counting / recording | ${NS[none,driver]} / ${NS[count,driver]} / ${NS[record,driver]} ns (recording/counting $(ratio "${NS[record,driver]}" "${NS[count,driver]}")x) |
| per call, runtime launch (both layers probed): none / counting / recording | ${NS[none,runtime]} / ${NS[count,runtime]} / ${NS[record,runtime]} ns ($(ratio "${NS[record,runtime]}" "${NS[count,runtime]}")x) |
| per call, cudaMemcpyAsync (timed: one event each): none / counting / recording | ${NS[none,memcpy]} / ${NS[count,memcpy]} / ${NS[record,memcpy]} ns ($(ratio "${NS[record,memcpy]}" "${NS[count,memcpy]}")x) |
| timed calls made at ${RATE}/s asked, ${LOAD_SECONDS} s | ${RATE_MADE} ($((RATE_MADE / LOAD_SECONDS))/s) |
| calls recorded (per-second aggregates) / of them stored as rows | ${COUNTED} ($((COUNTED / LOAD_SECONDS))/s) / ${STORED} ($((STORED / LOAD_SECONDS))/s) |
| counted drops: ring buffer full / entry missing / store queue full / write errors | ${RING} / ${ENTRY} / ${QFULL} / ${WERR} |
| uncounted loss (made - recorded - counted drops) | ${UNCOUNTED} |
| watched context switches beside it (sched_switch aggregates / hand-overs made) | ${SCHED} / ${RATE_SWITCHES} ($((SCHED / LOAD_SECONDS))/s); host-layer drops ${HOSTDROP} |
| agent RSS with the store open: idle / end of load / peak | $((IDLE_RSS / 1024)) / $((RATE_RSS / 1024)) / $((RATE_HWM / 1024)) MiB |
| disk bound ${BOUND_MB} MiB under the same load (checked every 5 s): largest file + WAL seen / rollovers | $((MAX_BYTES / 1048576)) MiB / ${ROLL} |
EOF
