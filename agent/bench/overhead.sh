#!/usr/bin/env bash
# Measures what the agent costs (needs root, clang, cc), all in one run on this machine:
#   1. per launch: a tight loop of kernel launches through the fake libraries of tests/c,
#      straight through the driver (cuLaunchKernel: cuBLAS's static runtime, Triton) and
#      through the runtime (cudaLaunchKernel, which calls cuLaunchKernel: PyTorch's own
#      kernels), with no probe, with an empty entry-only uprobe (the floor of any
#      uprobe-based counter), with an empty uprobe + uretprobe pair (what a per-call record
#      with a duration costs), and with the agent's probes: the runtime path first with both
#      layers' probes (--runtime-launch-probes always), then, after the agent's calibration
#      has detached the runtime's launch probes (auto), with the driver probe alone;
#   2. the agent process's CPU and RSS at idle (a process maps the libraries, makes no calls),
#      with the largest mappings of its RSS;
#   3. the same under RATE launches per second through the runtime, with the launches the
#      agent counted against the launches made, and every drop counter.
# Prints a markdown table. Knobs: CALLS (default 200000), RUNS (5), IDLE_SECONDS (30),
# LOAD_SECONDS (30), RATE (200000), WORKERS (2: the rate is split over this many processes),
# CALIBRATION (25000: runtime launches made to reach the agent's 20,000-launch calibration),
# METRICS_PORT (19465: the agent's /metrics, read for the calibration state).
# Prebuilt binaries (a machine without cargo, such as a GPU host): INGERO_AGENT_BIN,
# ATTACH_EMPTY_BIN and BPF_STATS_BIN (the examples attach_empty and bpf_stats); with all
# three set nothing is built but the fake libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
AGENT_DIR=$(pwd)
ROOT=$(cd .. && pwd)
CALLS=${CALLS:-200000}
RUNS=${RUNS:-5}
IDLE_SECONDS=${IDLE_SECONDS:-30}
LOAD_SECONDS=${LOAD_SECONDS:-30}
RATE=${RATE:-200000}
WORKERS=${WORKERS:-2}
CALIBRATION=${CALIBRATION:-25000}
METRICS_PORT=${METRICS_PORT:-19465}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

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
cc -O2 -pthread -o "$WORK/loop" "$AGENT_DIR/bench/loop.c" "$WORK/libcudart.so.12" "$WORK/libcuda.so.1" -Wl,-rpath,"$WORK"
if [ -n "${INGERO_AGENT_BIN:-}" ] && [ -n "${ATTACH_EMPTY_BIN:-}" ] && [ -n "${BPF_STATS_BIN:-}" ]; then
  AGENT=$INGERO_AGENT_BIN EMPTY=$ATTACH_EMPTY_BIN STATS=$BPF_STATS_BIN
else
  (cd "$ROOT" && cargo build --release -q -p ingero-agent --bin ingero-agent --example attach_empty --example bpf_stats)
  AGENT="$TARGET/release/ingero-agent"
  EMPTY="$TARGET/release/examples/attach_empty"
  STATS="$TARGET/release/examples/bpf_stats"
fi
# Kernel run-time statistics of BPF programs (restored on exit).
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled
TCK=$(getconf CLK_TCK)

# The agent's /metrics (curl, or Python where curl is missing).
metrics() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null
  else
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
      "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null
  fi
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
per_call() { # api: runtime or driver
  for _ in $(seq "$RUNS"); do "$WORK/loop" max "$CALLS" "$1" | awk '{print $2}'; done | median
}
# Run time of the loaded programs whose name starts with $1: "<runs> <ns per run>".
prog_ns() { "$STATS" "$1" | awk '{ if ($4 > 0) printf "%d %.0f\n", $4, $6 / $4; else print "0 0" }'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
# Empty probes on cuLaunchKernel ($1: "entry", or "pair" for uprobe + uretprobe), then a
# driver loop; sets EMPTY_NS and EMPTY_PROG.
with_empty() {
  local mode=()
  [ "$1" = entry ] && mode=(entry)
  rm -f "$WORK/empty.in" "$WORK/empty.out"
  mkfifo "$WORK/empty.in"
  "$EMPTY" "$WORK/libcuda.so.1" cuLaunchKernel "${mode[@]}" < "$WORK/empty.in" > "$WORK/empty.out" &
  local epid=$!
  PIDS+=("$epid")
  exec 7> "$WORK/empty.in"
  for _ in $(seq 100); do grep -q attached "$WORK/empty.out" 2>/dev/null && break; sleep 0.1; done
  grep -q attached "$WORK/empty.out" || { echo "empty probe did not attach" >&2; exit 1; }
  EMPTY_NS=$(per_call driver)
  EMPTY_PROG=$(prog_ns empty_ | awk '{print $2}')
  exec 7>&-
  wait "$epid" || true
}

# 1a. No probe.
BASE_DRV=$(per_call driver)
BASE_RT=$(per_call runtime)

# 1b. An empty entry-only uprobe, then an empty uprobe + uretprobe pair.
with_empty entry
EMPTY_ENTRY_NS=$EMPTY_NS
EMPTY_ENTRY_PROG=$EMPTY_PROG
with_empty pair
EMPTY_PAIR_NS=$EMPTY_NS
EMPTY_PAIR_PROG=$EMPTY_PROG

# 1c. The agent's probes. A holder process maps the libraries (no calls) so discovery finds
# them. Started with the runtime launch probes mode in $1 (log in $WORK/agent.$1.log).
"$WORK/loop" rate 0 100000 > /dev/null &
HOLDER=$!
PIDS+=("$HOLDER")
start_agent() {
  "$AGENT" --no-nccl --probe-library-root "$WORK" --runtime-launch-probes "$1" \
    --metrics-listen "127.0.0.1:$METRICS_PORT" \
    --fleet-persist-path "$WORK/baseline.json" --log-json > /dev/null 2> "$WORK/agent.$1.log" &
  APID=$!
  PIDS+=("$APID")
  local n=0
  for _ in $(seq 200); do
    n=$(grep -c "probes attached" "$WORK/agent.$1.log" 2>/dev/null || true)
    [ "$n" -ge 2 ] && break
    sleep 0.1
  done
  [ "$n" -ge 2 ] || { echo "agent did not attach both libraries:" >&2; cat "$WORK/agent.$1.log" >&2; exit 1; }
}
launch_state() { # the agent's runtime launch probe state, from its /metrics
  metrics \
    | awk -F'"' '/^ingero_agent_runtime_launch_probes\{/ && / 1$/ {print $2}'
}
# Both layers: the runtime probe and the nested driver probe on every runtime launch.
start_agent always
AGENT_RT_BOTH=$(per_call runtime)
read -r _ AGENT_RT_BOTH_PROG < <(prog_ns cudart_launch)
kill -TERM "$APID"
wait "$APID" || true
# Auto: calibrate with runtime launches, wait until the runtime's launch probes are gone.
start_agent auto
"$WORK/loop" max "$CALIBRATION" runtime > /dev/null
for _ in $(seq 300); do [ "$(launch_state)" = detached ] && break; sleep 0.1; done
SWITCH=$(launch_state)
[ "$SWITCH" = detached ] || { echo "runtime launch probes not detached (state: ${SWITCH:-none}):" >&2; cat "$WORK/agent.auto.log" >&2; exit 1; }
AGENT_DRV=$(per_call driver)
read -r _ AGENT_DRV_PROG < <(prog_ns cu_launch)
AGENT_RT=$(per_call runtime)
# "loop max N" makes N launches plus N / 10 of warm-up.
TIGHT_CALLS=$((RUNS * (CALLS + CALLS / 10)))
SOLO_MADE=$((CALIBRATION + CALIBRATION / 10 + 2 * TIGHT_CALLS))
# What the agent counted of those single-process loops (the status board is copied to
# /metrics once a second).
launches_counted() {
  metrics \
    | awk '/^ingero_agent_launches_total\{/ {c += $2} END {printf "%d", c}'
}
for _ in $(seq 50); do [ "$(launches_counted)" -ge "$SOLO_MADE" ] && break; sleep 0.1; done
sleep 1.5
SOLO_COUNTED=$(launches_counted)

# 2. Idle: the libraries are mapped, nothing calls them.
sleep 2
C0=$(cpu_ticks "$APID"); T0=$(date +%s.%N)
sleep "$IDLE_SECONDS"
C1=$(cpu_ticks "$APID"); T1=$(date +%s.%N)
IDLE_CPU=$(awk -v c="$((C1 - C0))" -v t0="$T0" -v t1="$T1" -v k="$TCK" 'BEGIN {printf "%.2f", 100 * c / k / (t1 - t0)}')
IDLE_RSS=$(rss_kb "$APID")
# The largest contributors to the idle RSS (kB per mapping name).
TOP_MAPS=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {name = ($6 == "" ? "[anon]" : $6)} /^Rss:/ {rss[name] += $2} END {for (n in rss) print rss[n], n}' "/proc/$APID/smaps" \
  | sort -rn | head -4 | awk '{printf "%s%s %d kB", sep, $2, $1; sep = ", "}')

# 3. Under load, through the runtime (the driver probe alone, after the switch).
C0=$(cpu_ticks "$APID"); T0=$(date +%s.%N)
LOADERS=()
for w in $(seq "$WORKERS"); do
  "$WORK/loop" rate "$((RATE / WORKERS))" "$LOAD_SECONDS" runtime > "$WORK/load.$w" &
  LOADERS+=("$!")
done
for p in "${LOADERS[@]}"; do wait "$p"; done
C1=$(cpu_ticks "$APID"); T1=$(date +%s.%N)
LOAD_OUT=$(cat "$WORK"/load.* | awk '{c += $2; if ($4 > s) s = $4} END {print "calls", c, "seconds", s}')
LOAD_CPU=$(awk -v c="$((C1 - C0))" -v t0="$T0" -v t1="$T1" -v k="$TCK" 'BEGIN {printf "%.2f", 100 * c / k / (t1 - t0)}')
LOAD_RSS=$(rss_kb "$APID")
PEAK_RSS=$(hwm_kb "$APID")
LOAD_CALLS=$(echo "$LOAD_OUT" | awk '{print $2}')
ACHIEVED=$(echo "$LOAD_OUT" | awk '{printf "%.0f", $2 / $4}')

kill -TERM "$APID"
wait "$APID" || true
TOTALS=$(grep '"probe totals"' "$WORK/agent.auto.log" | tail -1 || true)
VERDICT_LINE=$(grep 'reached the exported driver entry' "$WORK/agent.auto.log" | head -1 || true)
VERDICT="$(echo "$VERDICT_LINE" | grep -o '"runtime":[0-9]*' | cut -d: -f2), $(echo "$VERDICT_LINE" | grep -o '"nested":[0-9]*' | cut -d: -f2)"
field() { echo "$TOTALS" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
LAUNCHES=$(echo "$TOTALS" | grep -o '"launches":"\[[0-9, ]*\]"' | tr -dc '0-9,' | tr ',' ' ')
read -r L_RT L_RTG L_DRV L_DRVG L_NESTED <<< "${LAUNCHES:-0 0 0 0 0}"
COUNTED=$((L_RT + L_RTG + L_DRV + L_DRVG))
# Launches the auto agent saw: the calibration, the driver and runtime tight loops, the load.
MADE=$((SOLO_MADE + LOAD_CALLS))

cat <<TABLE
| measurement | value |
|---|---|
| \`cuLaunchKernel\` (driver), no probe | ${BASE_DRV} ns/launch |
| \`cudaLaunchKernel\` -> \`cuLaunchKernel\` (runtime), no probe | ${BASE_RT} ns/launch |
| driver launch, empty entry-only uprobe (the floor) | ${EMPTY_ENTRY_NS} ns/launch |
| driver launch, empty uprobe + uretprobe | ${EMPTY_PAIR_NS} ns/launch |
| driver launch, the agent (one entry-only probe) | ${AGENT_DRV} ns/launch ($(ratio "$AGENT_DRV" "$EMPTY_ENTRY_NS")x the floor) |
| runtime launch, the agent, \`always\` (runtime probe + nested driver probe) | ${AGENT_RT_BOTH} ns/launch ($(ratio "$AGENT_RT_BOTH" "$EMPTY_ENTRY_NS")x the floor) |
| runtime launch, the agent, \`auto\` after the switch (driver probe alone) | ${AGENT_RT} ns/launch ($(ratio "$AGENT_RT" "$EMPTY_ENTRY_NS")x the floor) |
| calibration verdict (runtime launches, nested) | ${VERDICT} |
| BPF program time per run (kernel \`bpf_stats\`): empty entry / empty pair | ${EMPTY_ENTRY_PROG} ns / ${EMPTY_PAIR_PROG} ns |
| BPF program time per run: agent \`cu_launch\` / \`cudart_launch\` (\`always\`) | ${AGENT_DRV_PROG} ns / ${AGENT_RT_BOTH_PROG} ns |
| agent CPU at idle (${IDLE_SECONDS} s) | ${IDLE_CPU} % of one core |
| agent RSS at idle | $((IDLE_RSS / 1024)) MiB (${IDLE_RSS} kB; largest: ${TOP_MAPS}) |
| agent CPU at ${ACHIEVED} runtime launches/s (asked ${RATE}/s, ${LOAD_SECONDS} s) | ${LOAD_CPU} % of one core |
| agent RSS under load / peak | $((LOAD_RSS / 1024)) MiB / $((PEAK_RSS / 1024)) MiB |
| single-process loops (calibration, tight loops): launches made / counted | ${SOLO_MADE} / ${SOLO_COUNTED} |
| all, with the load: launches made / counted by the \`auto\` agent (runtime, driver) / nested | ${MADE} / ${COUNTED} (${L_RT}, ${L_DRV}) / ${L_NESTED} |
| ring-buffer full, entry missing, user read, launch map full | $(field ringbuf_full) / $(field entry_missing) / $(field user_read_failed) / $(field launch_counts_full) |
TABLE
echo
echo "machine: $(nproc) CPUs, Linux $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "probe totals: ${TOTALS:-not logged}"
