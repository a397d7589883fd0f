#!/usr/bin/env bash
# Runs fleet-sim's fixed scenario set and writes docs/detection-quality.md.
#
# In-process rows: the agent's own code (ingero-agent-core) in virtual agents against the
# real ingero / nccl_peer_lag processors and ingero_threshold extension on a simulated
# clock (deterministic: the same numbers on any machine and build profile). Live rows: the
# `demo` scenario against the real Fleet service over OTLP/HTTP on wall-clock time.
# Usage: scripts/detection-quality.sh [--short]
# Built with the release profile (the numbers do not depend on it; the run is many times
# faster): a few minutes of build and about 5 minutes of run on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

short=""
[ "${1:-}" = "--short" ] && short="--short"
out=docs/detection-quality.md
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cargo build -q --release -p fleet-sim --bin fleet-sim
# A copy, so a rebuild while this runs does not change the binary between the two parts.
sim="$tmp/fleet-sim"
cp target/release/fleet-sim "$sim"
started=$(date +%s)
"$sim" quality $short > "$tmp/inproc.md"
"$sim" demo --auto-ports --duration 90s > "$tmp/demo.txt" || true
secs=$(( $(date +%s) - started ))
machine="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sm)"

{
cat <<'HEAD'
# Detection quality

How fast and how cleanly Fleet and the agents flag stragglers, measured with `fleet-sim`
(`sim/README.md`): virtual agents that run the agent's own code (`ingero-agent-core`:
baseline, score, states, detection mode, CUSUM classification, threshold cache and header
parsing, the exact OTLP payloads) against the real Fleet components. Regenerate with
`scripts/detection-quality.sh`; the test `sim/tests/detection.rs` runs a short version and
asserts detection, no false positives under Gaussian noise, at most 10 per million under
heavy tails, and 5 % drops caught by both sides with a median within 40 s under both
(`cargo test -p fleet-sim`).

**Modes.** Every table below except the last section is **in process on a simulated
clock**: the real `ingero` and `nccl_peer_lag` processors and `ingero_threshold` extension,
driven by `process` / `tick` with simulated time, no sockets (the way a million node-ticks
fit in minutes). Times there are simulated seconds, read at the resolution of the verdicts:
Fleet ticks once per push interval (10 s), agents once per push interval at their own
phase. The **live** section is the `demo` scenario against the real Fleet service over
OTLP/HTTP on wall-clock time.

**What this covers and what it does not.** Covered: Gaussian and heavy-tailed noise, benign
dips, per-node bias, warm-up ramps, stragglers of 5-30 %, recoveries, up to 49 % of a
cluster straggling, a cluster-wide slowdown (panic mode), churn, a Fleet restart, 10,000
nodes, chronic and periodic late NCCL ranks (the seeds' cases), noise fitted to the healthy
scores of the H100 and H200 runs (spread and lower tail; those runs recorded no per-tick
series, so ticks are drawn independently; `sim/README.md`, "Noise fitted to GPU runs"), the
sensitivity to tick-to-tick autocorrelation (AR(1) noise, not yet fitted to a real GPU),
and the classifier's settings against false positives and time to detect.
Not covered here: a real GPU run (one NVIDIA H100 with PyTorch is in `docs/benchmarks.md`,
"Results on NVIDIA GPUs"), multi-rank nodes and the agent's barrier-wait correction, network
loss between agents and Fleet.

**Evidence.** Fleet's classifier needs `classifier.evidence` samples as deep as one sample
alone had to be (`ingero-processor/README.md`, "Evidence and heavy tails"). By default it
picks 1 or 2 per cluster from the lone deep samples of the cluster's own healthy noise: the
Gaussian rows below run at 1 (first-sample detection), the heavy-tailed ones at 2 after
the first lone deep sample. The agent, which sees only its own samples, always needs 2.

**Shallow drops.** Beside that rule, Fleet keeps a second sum per node on its residual
against the cohort's median in units of the cohort's own spread (not widened by
`threshold.mad_floor`): a sample counts for at most 5 spreads beyond a reference 3 spreads
below the median, and a flag needs 11 (`classifier.shallow_decision`), so no two samples
flag on their own and a persistent 5 % drop is flagged on its third sample
(`ingero-processor/README.md`, "Shallow drops"). The agent runs the same sum against where
it usually sits above Fleet's threshold. The trade-off table shows both with it off.

**Fleet's clear trails the agent's.** Fleet decides at its tick, so a recovered node is
cleared at Fleet's first tick after its healthy push arrives: in the recovery columns
below, Fleet's median is about half a tick behind the agent's (8 s against 4 s at 10 s
pushes; p95 18 s against 9 s), inside the goal of two push intervals. Clearing on the push
itself was weighed and not built: it would move each cluster's classifier state from the
tick, which owns it without a lock, to the push path (a lock or a check on every push,
against the push's instruction budget), it would judge the push against the previous tick's
threshold, and it would break the one-observation-per-interval rule that the CUSUM's
settings and the differential tests rest on. What it would buy, about half a tick (4 s
median here), is below what reads the verdict: Prometheus scrapes the straggler gauge every
15-60 s and alerts hold for minutes, and the node's own agent, which drives remediation,
already clears at its own tick.

**Fitting the noise model.** The GPU check's `e2e` stage writes every node's score as Fleet
saw it, one row per node and push, to `OUT/e2e/scores.csv`; `python3 scripts/fit-noise.py
OUT/e2e/scores.csv` prints the `[noise]` block (spread, Student-t tail weight, per-node bias
and lag-1 autocorrelation `ar`) for a scenario (`sim/README.md`, "Fitting the noise model").

**Panic mode.** During a cluster-wide slowdown Fleet holds its threshold and, by design,
flags the nodes below it (`ingero-processor/README.md`, panic mode); agents classifying
against the held threshold flag themselves too. Those node-ticks are counted apart from
healthy ones, with how many were flagged.

**Standard noise** (unless a row says otherwise): Gaussian sigma 1 % of the score per
node-tick, per-node bias sigma 0.3 %, a 0.5 % chance per node-tick of a one-tick dip of
2-5 %; 10 s pushes; the agent's default 30-sample warm-up; Fleet's default config.

HEAD
cat "$tmp/inproc.md"
echo
echo "### Live: \`fleet-sim demo\` against the real Fleet service (wall-clock)"
echo
echo "64 nodes (8 x H100 on aws each) pushing protobuf every second over 4 connections to Fleet"
echo "in the same process (embedded default config, \`push_interval: 1s\`); node 23 drops 15 % at"
echo "35 s and recovers at 80 s, NCCL rank 41 is 80 ms late on every all-reduce from 20 s; the demo"
echo "runs until Ctrl-C, here \`--duration 90s\`. Times are wall-clock seconds after onset (or after"
echo "the recovery, for a clear), read once per push interval. Machine: $machine (shared with"
echo "other builds)."
echo
echo '```'
cat "$tmp/demo.txt"
echo '```'
echo
echo "Whole run (in-process set and live demo): ${secs} s wall-clock on that machine."
} > "$out"
echo "wrote $out"
