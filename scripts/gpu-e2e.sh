#!/usr/bin/env bash
# The real-GPU end-to-end harness of ingero-agent: N >= 6 identical PyTorch workloads on one
# GPU as N nodes, N agents scoped with --pid, one ingero-fleet; one node gets a host stall,
# GPU contention from another process, then a stop. Prints the report (JSON) and writes it
# to $OUT/report.json (default /tmp/gpu-e2e). Needs root, an NVIDIA GPU and torch.
#
#   cargo build --release -p ingero-agent -p ingero-fleet
#   sudo scripts/gpu-e2e.sh --python /opt/torch/.venv/bin/python \
#       --agent-arg=--probe-library-root=/opt/torch/.venv
#
# Without a GPU: scripts/gpu-e2e.sh --dry-run (synthetic agents, same timeline and report),
# or as root scripts/gpu-e2e.sh --fake [--sync] --injections stall (C workloads on the fake
# CUDA/NCCL libraries under real eBPF agents; --sync: the workloads are one synchronous job).
# --check exits 1 when the report's verdict fails.
# Binaries: INGERO_AGENT_BIN, INGERO_FLEET_BIN (defaults target/release/...). All flags:
# scripts/gpu-e2e.sh --help
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec python3 "$here/gpu/e2e.py" --out "${OUT:-/tmp/gpu-e2e}" "$@"
