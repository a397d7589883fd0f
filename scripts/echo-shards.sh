#!/usr/bin/env bash
# Two Fleet replicas and two Echo shards behind one real nginx running
# examples/nginx/ingero-fleet-echo-shards.conf: each cluster's history on one shard, and
# queries through nginx (HTTP API and a real MCP client) reach it. See scripts/echo_shards.py.
#
#   scripts/echo-shards.sh         (builds the debug binaries; needs nginx)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
python="$(scripts/py-venv.sh echo-mcp-venv mcp 2.3.0)"
# INGERO_SKIP_BUILD=1: the debug binaries are current (scripts/test-all.sh, after `cargo test`).
[ "${INGERO_SKIP_BUILD:-0}" = 1 ] || cargo build -q -p ingero-echo -p ingero-fleet
exec "$python" scripts/echo_shards.py "$@"
