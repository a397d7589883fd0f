#!/usr/bin/env bash
# The agent's checks on a GPU host, in stages that each fit a short session on a machine
# without cargo or network (build here, copy the binaries there):
#
#   scripts/gpu-check.sh [STAGE...]      (root; default: every stage, in this order)
#
#   facts     GPU, driver, kernel, CPUs, torch / CUDA / NCCL / Triton versions
#   rss       the agent's idle RSS by mapping, with NVML loaded, as is and with
#             MALLOC_ARENA_MAX=1 (does the off-main-thread memory follow glibc's arenas?)
#   layers    which probe counts each launch layer, and the ring buffer at a high combined
#             launch rate (scripts/gpu/layers.py)                                  ~2 min
#   overhead  the cost of an empty entry-only uprobe, of an uprobe + uretprobe pair and
#             of the agent's probes on the fake libraries of agent/tests/c, on this host
#             (agent/bench/overhead.sh; needs cc)                                 ~1.5 min
#   steps     step and launch times of PyTorch loops without an agent, with one, and with
#             only empty entry-only probes on the driver's launch entries (the floor); the
#             agent's RSS by mapping and probe state (scripts/gpu-e2e.sh --overhead-only) ~4.5 min
#   e2e       the end-to-end harness (scripts/gpu-e2e.sh --skip-overhead): six PyTorch
#             nodes; a stall, a stop and contention, 24 s apart; stopping the agents  ~6 min
#             Every node's score per push, as Fleet saw it, lands in OUT/e2e/scores.csv
#             (`python3 scripts/fit-noise.py OUT/e2e/scores.csv` fits fleet-sim's noise to it)
#   why       "why is this node slow" (scripts/gpu/why.sh): a PyTorch training loop recorded
#             with --store, alone, then with a CPU hog pinned beside it, then with
#             synchronous disk writes in the loop; `explain --json` must name nothing, CPU
#             contention, block I/O; OUT/why/summary.txt and three explain JSONs  ~1.5 min
#
# A 15-minute GPU session fits `facts rss overhead steps` in one call and `e2e` in the
# next (with `layers` too when time is left). Issue 17's acceptance run, five healthy
# minutes, is `E2E_HEALTHY=300 E2E_INJECTIONS=stall,stop` (~8 min): then `steps` next.
#
# `facts why` (~2 min) fits beside any of them. `scripts/gpu/why.sh --fake` runs the `why`
# stage's plumbing without a GPU (root, cc; the fake CUDA libraries of agent/tests/c).
#
# Binaries (default target/release/...): INGERO_AGENT_BIN, INGERO_FLEET_BIN, and for
# `overhead` ATTACH_EMPTY_BIN, BPF_STATS_BIN (`cargo build --release -p ingero-agent
# --examples`). PYTHON: an interpreter with torch (default /opt/torch/.venv/bin/python3 when
# it exists, else python3). E2E_HEALTHY (150), E2E_INJECT (20), E2E_RECOVER (24),
# E2E_INJECTIONS (stall,stop,contention) shorten or widen the harness's timeline.
# Everything lands in OUT (default /tmp/gpu-check): OUT/<stage>.log and OUT/<stage>/.
# A stage that fails is reported and the next one runs; the exit status is 1 if any failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
OUT=${OUT:-/tmp/gpu-check}
release=${CARGO_TARGET_DIR:-$root/target}/release
export INGERO_AGENT_BIN=${INGERO_AGENT_BIN:-$release/ingero-agent}
export INGERO_FLEET_BIN=${INGERO_FLEET_BIN:-$release/ingero-fleet}
export ATTACH_EMPTY_BIN=${ATTACH_EMPTY_BIN:-$release/examples/attach_empty}
export BPF_STATS_BIN=${BPF_STATS_BIN:-$release/examples/bpf_stats}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x /opt/torch/.venv/bin/python3 ] && PYTHON=/opt/torch/.venv/bin/python3
fi
export PYTHONUNBUFFERED=1

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(facts rss layers overhead steps e2e why)
for s in "${stages[@]}"; do
  case "$s" in
    facts | rss | layers | overhead | steps | e2e | why) ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check: unknown stage '$s' (facts rss layers overhead steps e2e why)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "gpu-check: needs root (uprobes)" >&2
  exit 1
fi
mkdir -p "$OUT"

stage_facts() {
  date -u
  echo "kernel $(uname -r), $(nproc) CPUs"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  else
    echo "no nvidia-smi"
  fi
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' 2>&1 | tail -1
  "$PYTHON" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  "$INGERO_AGENT_BIN" --version
  command -v cc >/dev/null 2>&1 && cc --version | head -1 || echo "no cc (the overhead stage needs it)"
}

# The idle agent's RSS by mapping, once as is and once with one malloc arena.
stage_rss() {
  local label
  for label in default arena1; do
    local env=()
    [ "$label" = arena1 ] && env=(MALLOC_ARENA_MAX=1)
    env "${env[@]}" "$INGERO_AGENT_BIN" --fleet-node-id gpu-check --log-json \
      --fleet-persist-path "$OUT/rss/$label.json" > "$OUT/rss/agent-$label.log" 2>&1 &
    local pid=$!
    sleep 4
    echo "== $label: $(grep -E '^(VmRSS|Threads)' "/proc/$pid/status" | tr -s ' \t' ' ' | paste -sd ' ')"
    python3 -c 'import json, sys; sys.path.insert(0, sys.argv[1]); import e2e
print(json.dumps(e2e.rss_by_mapping(int(sys.argv[2]), top=8), indent=0))' "$here/gpu" "$pid"
    kill -INT "$pid"
    wait "$pid"
  done
}

stage_layers() {
  "$PYTHON" "$here/gpu/layers.py" --python "$PYTHON" --agent-bin "$INGERO_AGENT_BIN" --out "$OUT/layers"
}

stage_overhead() {
  RUNS=${RUNS:-3} CALLS=${CALLS:-100000} IDLE_SECONDS=${IDLE_SECONDS:-10} LOAD_SECONDS=${LOAD_SECONDS:-10} \
    "$root/agent/bench/overhead.sh"
}

stage_steps() {
  "$here/gpu-e2e.sh" --python "$PYTHON" --out "$OUT/steps" --overhead-only
}

# The stop before contention: contention slows every node, and what follows it is judged
# against the fleet it leaves behind.
stage_e2e() {
  "$here/gpu-e2e.sh" --python "$PYTHON" --out "$OUT/e2e" --skip-overhead --push-interval 2 \
    --healthy "${E2E_HEALTHY:-150}" --inject "${E2E_INJECT:-20}" --recover "${E2E_RECOVER:-24}" \
    --injections "${E2E_INJECTIONS:-stall,stop,contention}"
}

stage_why() {
  OUT="$OUT/why" PYTHON="$PYTHON" "$here/gpu/why.sh"
}

failed=()
for s in "${stages[@]}"; do
  mkdir -p "$OUT/$s"
  printf '=== %s (%s)\n' "$s" "$(date -u +%T)"
  if "stage_$s" > "$OUT/$s.log" 2>&1; then
    tail -n 40 "$OUT/$s.log"
  else
    tail -n 40 "$OUT/$s.log"
    echo "=== $s FAILED (log: $OUT/$s.log)"
    failed+=("$s")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "gpu-check: failed: ${failed[*]}"; exit 1; }
