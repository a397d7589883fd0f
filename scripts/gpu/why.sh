#!/usr/bin/env bash
# "Why is this node slow" on a real GPU: a PyTorch training loop (scripts/gpu/why_train.py)
# recorded by `ingero-agent --store`, in three runs one after the other:
#
#   clean   the loop alone                                  explain: no chain
#   hog     a CPU hog pinned to the loop's CPU after CLEAN s   explain: cpu_contention
#   io      synchronous O_DIRECT writes in the loop after CLEAN s   explain: block_io
#
# then `ingero-agent explain --json` on each store, checked, and a summary written.
#
#   scripts/gpu/why.sh [--fake] [--out DIR] [--clean S] [--disturbed S] [--cpu N]
#
# --fake: no GPU or torch: the loop is agent/tests/c/why_workload.c on the fake CUDA
#   libraries of the agent's tests (built here with cc), so the script's plumbing (agent,
#   hog, writer, explain, checks, summary) runs on any root machine with cc.
# Needs root (uprobes, tracepoints). Binaries: INGERO_AGENT_BIN (default
# target/release/ingero-agent). PYTHON: an interpreter with torch (default
# /opt/torch/.venv/bin/python3 when it exists, else python3). WHY_DIR: where the stores
# and the written file go (default /var/tmp/ingero-why; O_DIRECT needs a real filesystem,
# not tmpfs). OUT (default /tmp/gpu-check/why) gets four files: summary.txt and
# explain-{clean,hog,io}.json. Exit status 1 if a check failed. About 3 x (start-up + CLEAN +
# DISTURBED) s: ~1.5 min with the defaults.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fake=0
OUT=${OUT:-/tmp/gpu-check/why}
CLEAN=8
DISTURBED=8
CPU=""
while [ $# -gt 0 ]; do
  case "$1" in
    --fake) fake=1 ;;
    --out) OUT=$2; shift ;;
    --clean) CLEAN=$2; shift ;;
    --disturbed) DISTURBED=$2; shift ;;
    --cpu) CPU=$2; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "why.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ "$(id -u)" != 0 ]; then
  echo "why.sh: needs root (uprobes, tracepoints)" >&2
  exit 1
fi
AGENT=${INGERO_AGENT_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ingero-agent}
[ -x "$AGENT" ] || { echo "why.sh: no agent binary at $AGENT (INGERO_AGENT_BIN)" >&2; exit 1; }
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x /opt/torch/.venv/bin/python3 ] && PYTHON=/opt/torch/.venv/bin/python3
fi
# The loop's CPU: the last one (away from CPU 0's interrupts), or CPU 0 on one CPU.
[ -n "$CPU" ] || CPU=$(( $(nproc) - 1 ))
WORK=${WHY_DIR:-/var/tmp/ingero-why}/run-$$
mkdir -p "$OUT" "$WORK"
summary=$OUT/summary.txt
: > "$summary"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# Build the fake libraries and the C loop (the agent tests' own sources).
libroot=()
if [ $fake = 1 ]; then
  c=$root/agent/tests/c
  fk=$WORK/fake
  mkdir -p "$fk"
  cc -shared -fPIC -O1 -Wall -Werror -Wl,-soname,libcuda.so.1 -o "$fk/libcuda.so.1" "$c/fake_cuda.c" || exit 1
  cc -shared -fPIC -O1 -Wall -Werror -Wl,-soname,libcudart.so.12 -o "$fk/libcudart.so.12" "$c/fake_cudart.c" \
    "$fk/libcuda.so.1" -Wl,-rpath,"$fk" || exit 1
  cc -O1 -Wall -Werror -pthread -o "$fk/why_workload" "$c/why_workload.c" "$fk/libcudart.so.12" "$fk/libcuda.so.1" \
    -Wl,-rpath,"$fk" || exit 1
  libroot=(--probe-library-root "$fk" --no-nccl)
fi

# Start a command with its stdout in FILE; wait for its "started" line; print its pid.
start() {
  local file=$1; shift
  "$@" > "$file" 2>&1 &
  local pid=$! i
  for i in $(seq 1 600); do
    grep -q '^started' "$file" 2>/dev/null && { echo "$pid"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "why.sh: $* did not start:" >&2
  tail -5 "$file" >&2
  return 1
}

stored() {
  "$AGENT" query --json --db "$1" "SELECT count(*) AS n FROM events WHERE source IN (1, 4)" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["n"])' 2>/dev/null || echo 0
}

failed=0
run() {
  local s=$1 total=$((40 + CLEAN + DISTURBED)) ctl=$WORK/$s
  mkdir -p "$ctl"
  local db=$WORK/$s.db log=$WORK/agent-$s.log train
  if [ $fake = 1 ]; then
    local extra=()
    [ "$s" = io ] && extra=("$ctl/ckpt.bin")
    train=$(start "$WORK/train-$s.out" "$WORK/fake/why_workload" train "$CPU" "$total" 3000 "${extra[@]}") || return 1
  else
    train=$(start "$WORK/train-$s.out" "$PYTHON" "$here/why_train.py" train "$CPU" "$total" "$ctl") || return 1
  fi
  pids+=("$train")
  "$AGENT" --store --store-path "$db" --node "$s-node" --pid "$train" "${libroot[@]}" \
    --fleet-provider none --fleet-persist-path "$WORK/baseline-$s.json" 2> "$log" &
  local agent=$!
  pids+=("$agent")
  local i
  for i in $(seq 1 240); do
    [ "$(stored "$db")" -ge 50 ] && break
    sleep 0.25
  done
  sleep "$CLEAN"
  local hog=""
  case $s in
    hog)
      if [ $fake = 1 ]; then
        hog=$(start "$WORK/hog.out" "$WORK/fake/why_workload" hog "$CPU" "$DISTURBED") || return 1
      else
        hog=$(start "$WORK/hog.out" python3 "$here/why_train.py" hog "$CPU" "$DISTURBED") || return 1
      fi
      pids+=("$hog") ;;
    io)
      if [ $fake = 1 ]; then touch "$ctl/ckpt.bin.go"; else touch "$ctl/write"; fi ;;
  esac
  sleep "$DISTURBED"
  kill -TERM "$agent"
  wait "$agent"
  local rc=$?
  kill "$train" ${hog:+"$hog"} 2>/dev/null
  "$AGENT" explain --json --since 10m --db "$db" > "$OUT/explain-$s.json"
  local text
  text=$("$AGENT" explain --since 10m --db "$db")
  local verdict
  verdict=$(python3 - "$OUT/explain-$s.json" "$s" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = sys.argv[2]
chains = r["chains"]
causes = sorted({c for ch in chains for c in ch["causes"]})
want = {"clean": None, "hog": "cpu_contention", "io": "block_io"}[s]
ok = (not chains) if want is None else (len(chains) >= 1 and want in causes)
print(("PASS" if ok else "FAIL") + f" {s}: {len(chains)} chain(s), causes {causes or '-'}"
      + (f", want {want}" if want else ", want none"))
PY
)
  {
    echo "== $s (agent exit $rc)"
    echo "$verdict"
    echo "$text"
    grep -E 'store totals|host layer drops|probe totals' "$log" | sed 's/^/  agent: /'
    [ $fake = 1 ] || echo "  trainer: $(tail -3 "$WORK/train-$s.out" | tr '\n' ' ')"
    echo
  } >> "$summary"
  [ "$rc" = 0 ] || { echo "FAIL $s: agent exited $rc" >> "$summary"; failed=1; }
  case $verdict in PASS*) ;; *) failed=1 ;; esac
}

{
  date -u
  echo "mode: $([ $fake = 1 ] && echo fake || echo "gpu, $PYTHON"), loop on CPU $CPU, clean ${CLEAN}s, disturbed ${DISTURBED}s"
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo
} >> "$summary"
for s in clean hog io; do
  run "$s" || { echo "FAIL $s: did not run" >> "$summary"; failed=1; }
done
cat "$summary"
exit $failed
