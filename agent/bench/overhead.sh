#!/usr/bin/env bash
# Measures what the agent costs (needs root, clang, cc):
#   1. per probed call: a tight loop of cudaLaunchKernel calls (fake libcudart) with no probe,
#      with an empty uprobe+uretprobe pair (the floor any uprobe-based tracer pays), and with
#      the agent's probes;
#   2. the agent process's CPU and RSS at idle (a process maps the library, makes no calls);
#   3. the same under 100,000 probed calls per second.
# Prints a markdown table. Knobs: CALLS (default 2000000), RUNS (5), IDLE_SECONDS (30),
# LOAD_SECONDS (30), RATE (100000), WORKERS (2: the rate is split over this many processes,
# since one probed call costs several microseconds of the caller's time).
set -euo pipefail
cd "$(dirname "$0")/.."
AGENT_DIR=$(pwd)
ROOT=$(cd .. && pwd)
CALLS=${CALLS:-2000000}
RUNS=${RUNS:-5}
IDLE_SECONDS=${IDLE_SECONDS:-30}
LOAD_SECONDS=${LOAD_SECONDS:-30}
RATE=${RATE:-100000}
WORKERS=${WORKERS:-2}

if [ "$(id -u)" != 0 ]; then
  echo "overhead.sh: needs root (uprobes)" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/ingero-overhead.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  [ -n "${OLD_STATS:-}" ] && echo "$OLD_STATS" > /proc/sys/kernel/bpf_stats_enabled || true
}
trap cleanup EXIT

echo "building (release)..." >&2
# The fake runtime launches through the fake driver, as the real one does.
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$WORK/libcuda.so.1" "$AGENT_DIR/tests/c/fake_cuda.c"
cc -shared -fPIC -O2 -Wl,-soname,libcudart.so.12 -o "$WORK/libcudart.so.12" "$AGENT_DIR/tests/c/fake_cudart.c" \
  "$WORK/libcuda.so.1" -Wl,-rpath,"$WORK"
cc -O2 -o "$WORK/loop" "$AGENT_DIR/bench/loop.c" "$WORK/libcudart.so.12" -Wl,-rpath,"$WORK"
(cd "$ROOT" && cargo build --release -q -p ingero-agent --bin ingero-agent --example attach_empty --example bpf_stats)
AGENT="$ROOT/target/release/ingero-agent"
EMPTY="$ROOT/target/release/examples/attach_empty"
STATS="$ROOT/target/release/examples/bpf_stats"
# Kernel run-time statistics of BPF programs (restored on exit).
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled
TCK=$(getconf CLK_TCK)

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
per_call() {
  for _ in $(seq "$RUNS"); do "$WORK/loop" max "$CALLS" | awk '{print $2}'; done | median
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# 1a. No probe.
BASE=$(per_call)

# 1b. Empty uprobe + uretprobe.
mkfifo "$WORK/empty.in"
"$EMPTY" "$WORK/libcudart.so.12" cudaLaunchKernel < "$WORK/empty.in" > "$WORK/empty.out" &
EPID=$!; PIDS+=("$EPID")
exec 7> "$WORK/empty.in"
for _ in $(seq 100); do grep -q attached "$WORK/empty.out" 2>/dev/null && break; sleep 0.1; done
grep -q attached "$WORK/empty.out" || { echo "empty probe did not attach" >&2; exit 1; }
EMPTY_NS=$(per_call)
EMPTY_PROG=$("$STATS" empty_ | awk '{print $8}')
exec 7>&-
wait "$EPID" || true

# 1c. The agent's probes. A holder process maps the library (no calls) so discovery finds it.
"$WORK/loop" rate 0 100000 > /dev/null &
HOLDER=$!; PIDS+=("$HOLDER")
"$AGENT" --no-nccl --probe-library-root "$WORK" \
  --fleet-persist-path "$WORK/baseline.json" --log-json > /dev/null 2> "$WORK/agent.log" &
APID=$!; PIDS+=("$APID")
for _ in $(seq 200); do grep -q "probes attached" "$WORK/agent.log" 2>/dev/null && break; sleep 0.1; done
grep -q "probes attached" "$WORK/agent.log" || { echo "agent did not attach:" >&2; cat "$WORK/agent.log" >&2; exit 1; }
AGENT_NS=$(per_call)
AGENT_PROG=$("$STATS" cudart_launch_k | awk '{print $8}')

# 2. Idle: the library is mapped, nothing calls it.
sleep 2
C0=$(cpu_ticks "$APID"); T0=$(date +%s.%N)
sleep "$IDLE_SECONDS"
C1=$(cpu_ticks "$APID"); T1=$(date +%s.%N)
IDLE_CPU=$(awk -v c="$((C1 - C0))" -v t0="$T0" -v t1="$T1" -v k="$TCK" 'BEGIN {printf "%.2f", 100 * c / k / (t1 - t0)}')
IDLE_RSS=$(rss_kb "$APID")

# 3. Under load.
C0=$(cpu_ticks "$APID"); T0=$(date +%s.%N)
LOADERS=()
for w in $(seq "$WORKERS"); do
  "$WORK/loop" rate "$((RATE / WORKERS))" "$LOAD_SECONDS" > "$WORK/load.$w" &
  LOADERS+=("$!")
done
for p in "${LOADERS[@]}"; do wait "$p"; done
C1=$(cpu_ticks "$APID"); T1=$(date +%s.%N)
LOAD_OUT=$(cat "$WORK"/load.* | awk '{c += $2; if ($4 > s) s = $4} END {print "calls", c, "seconds", s}')
LOAD_CPU=$(awk -v c="$((C1 - C0))" -v t0="$T0" -v t1="$T1" -v k="$TCK" 'BEGIN {printf "%.2f", 100 * c / k / (t1 - t0)}')
LOAD_RSS=$(rss_kb "$APID")
PEAK_RSS=$(hwm_kb "$APID")
ACHIEVED=$(echo "$LOAD_OUT" | awk '{printf "%.0f", $2 / $4}')

kill -TERM "$APID"; wait "$APID" || true
TOTALS=$(grep '"probe totals"' "$WORK/agent.log" | tail -1 || true)

cat <<EOF
| measurement | value |
|---|---|
| cudaLaunchKernel, no probe | ${BASE} ns/call |
| with an empty uprobe + uretprobe | ${EMPTY_NS} ns/call |
| with the agent's probes | ${AGENT_NS} ns/call |
| agent cost over the empty probe (whole call) | $(awk -v a="$AGENT_NS" -v e="$EMPTY_NS" 'BEGIN {printf "%.0f", a - e}') ns/call |
| BPF program time per call: empty entry+return | ${EMPTY_PROG} ns |
| BPF program time per call: agent entry+return | ${AGENT_PROG} ns |
| agent CPU at idle (${IDLE_SECONDS} s) | ${IDLE_CPU} % of one core |
| agent RSS at idle | $((IDLE_RSS / 1024)) MiB (${IDLE_RSS} kB) |
| agent CPU at ${ACHIEVED} probed calls/s (${LOAD_SECONDS} s) | ${LOAD_CPU} % of one core |
| agent RSS under load / peak | $((LOAD_RSS / 1024)) MiB / $((PEAK_RSS / 1024)) MiB |
EOF
echo
echo "probe totals: ${TOTALS:-not logged}"
