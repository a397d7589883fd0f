#!/usr/bin/env bash
# Coverage-guided fuzzing with AFL++ (cargo-afl) of the OTLP decoders, config parsing and
# the C ABI; see fuzz/README.md.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 20 (the short run of scripts/test-all.sh); use 600 or more
# for a real campaign, e.g. `scripts/fuzz.sh 1200`. TARGETs default to all of
# otlp_proto otlp_json config ffi, run one after the other (each uses one core).
# Environment:
#   FUZZ_OUT         where corpora and findings go (default fuzz/out; kept between runs, so
#                    a later run resumes from the corpus of the earlier one)
#   FUZZ_FRESH=1     start from the seeds, discarding FUZZ_OUT's earlier corpora
#   FUZZ_TARGET_DIR  cargo target dir of the instrumented build (default fuzz/target)
# Exits non-zero when any target found a crash; each crash is listed with the command
# that reproduces it outside AFL.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECS=${1:-20}
shift || true
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(otlp_proto otlp_json config ffi)
OUT=${FUZZ_OUT:-$ROOT/fuzz/out}
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$ROOT/fuzz/target}
AFL_VERSION=0.18.2 # must match the `afl` dependency in fuzz/Cargo.toml

log() { printf '\n=== fuzz: %s\n' "$*"; }

# cargo-afl builds AFL++ (afl-fuzz and its runtime) from the sources bundled in the crate
# when it is installed; nothing is downloaded at run time.
if ! cargo afl --version 2>/dev/null | grep -q "cargo-afl $AFL_VERSION"; then
  log "installing cargo-afl $AFL_VERSION (builds AFL++ from its bundled sources, ~3 min)"
  cargo install --locked --quiet "cargo-afl@$AFL_VERSION"
fi
if ! cargo afl --version 2>/dev/null | grep -q "AFL++ version"; then
  log "building AFL++"
  cargo afl config --build --force
fi

log "instrumented build ($CARGO_TARGET_DIR)"
# Not --locked: fuzz/Cargo.lock is a separate lock file (copied from the project's); when
# a project crate gains a dependency, cargo adds it here instead of failing the run.
(cd fuzz && cargo afl build --release --features afl --quiet)
BIN=$CARGO_TARGET_DIR/release
TOOL=$BIN/fuzz-tool

# Seeds are generated from the project's own payloads and configs, then checked: every
# seed and every committed regression input must pass its target's invariants.
rm -rf "$OUT/seeds"
"$TOOL" seeds "$OUT/seeds"
for t in "${TARGETS[@]}"; do
  "$TOOL" replay "$t" "$OUT/seeds/$t" 2>/dev/null
  if [ -d "fuzz/regressions/$t" ]; then "$TOOL" replay "$t" "fuzz/regressions/$t" 2>/dev/null; fi
done

# AFL++ without touching the host: no core_pattern or CPU governor changes, no UI, no
# CPU pinning (the machine is shared).
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
  AFL_NO_AFFINITY=1 AFL_FAST_CAL=1 AFL_AUTORESUME=1 \
  AFL_NO_WARN_INSTABILITY=1
[ "${FUZZ_STOP_ON_CRASH:-1}" = 1 ] && export AFL_BENCH_UNTIL_CRASH=1

failed=()
summary=()
for t in "${TARGETS[@]}"; do
  dir=$OUT/$t
  if [ "${FUZZ_FRESH:-0}" = 1 ]; then rm -rf "$dir"; fi
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-x "fuzz/dict/$t.dict")
  log "$t for ${SECS}s (corpus and findings in $dir)"
  # -c -: no CmpLog (cargo-afl asks for it, but it needs the nightly-only LLVM plugins).
  # -t: per-input timeout in ms (generous: the machine is shared).
  # -m none: no address-space limit (Rust reserves address space freely).
  if ! cargo afl fuzz -c - -i "$OUT/seeds/$t" -o "$dir" "${dict[@]}" -V "$SECS" -t 2000 -m none \
    -- "$BIN/fuzz_$t" >"$OUT/$t.log" 2>&1; then
    tail -n 30 "$OUT/$t.log"
    echo "afl-fuzz failed for $t (log: $OUT/$t.log)"
    failed+=("$t")
    continue
  fi
  stats=$dir/default/fuzzer_stats
  get() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
  line=$(printf '%-11s %8s execs  %8s execs/s  corpus %5s  edges %5s/%-6s (%s)  crashes %s  hangs %s' \
    "$t" "$(get execs_done)" "$(get execs_per_sec)" "$(get corpus_count)" \
    "$(get edges_found)" "$(get total_edges)" "$(get bitmap_cvg)" \
    "$(get saved_crashes)" "$(get saved_hangs)")
  echo "$line"
  summary+=("$line")
  crashes=$(find "$dir/default/crashes" -type f -name 'id:*' 2>/dev/null | sort)
  if [ -n "$crashes" ]; then
    failed+=("$t")
    echo "CRASH in $t; reproduce each with:"
    for f in $crashes; do echo "  $TOOL replay $t '$f'"; done
  fi
  hangs=$(find "$dir/default/hangs" -type f -name 'id:*' 2>/dev/null | sort)
  if [ -n "$hangs" ]; then
    echo "warning: $t has inputs that exceeded the timeout (slow, not necessarily stuck):"
    for f in $hangs; do echo "  time $TOOL replay $t '$f'"; done
  fi
done

log "summary (${SECS}s per target)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: no crashes"
