#!/usr/bin/env bash
# Fleet -> Echo end to end through a real MCP client (the Python `mcp` package, pinned):
# six synthetic agents push to ingero-fleet, one slows down, Fleet forwards to ingero-echo
# with its otlp exporter, and the client asks fleet.cluster.find_outlier_nodes over MCP
# streamable HTTP, then over stdio after a restart. See scripts/echo_e2e.py.
#
#   scripts/echo-e2e.sh            (builds the debug binaries and target/echo-mcp-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
python="$(scripts/py-venv.sh echo-mcp-venv mcp 2.3.0)"
# INGERO_SKIP_BUILD=1: the debug binaries are current (scripts/test-all.sh, after `cargo test`).
[ "${INGERO_SKIP_BUILD:-0}" = 1 ] || cargo build -q -p ingero-echo -p ingero-fleet -p ingero-agent
exec "$python" scripts/echo_e2e.py "$@"
