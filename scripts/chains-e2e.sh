#!/usr/bin/env bash
# The straggler arrives with its cause, end to end (root): six agents with their stores on
# loops of the fake CUDA libraries push to ingero-fleet, which forwards to ingero-echo; a CPU
# hog pinned to one loop's CPU makes that node a straggler whose agent explains it. Checked
# in Fleet's live view (JSON and headless Chromium), Echo's fleet.cluster.event_history and
# the MCP investigate prompt. See scripts/chains_e2e.py.
#
#   sudo scripts/chains-e2e.sh   (builds the debug binaries, the MCP client's virtualenv and
#                                 the browser's playwright-core)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
python="$(scripts/py-venv.sh echo-mcp-venv mcp 2.3.0)"
scripts/view-browser-deps.sh >&2
[ "${INGERO_SKIP_BUILD:-0}" = 1 ] || cargo build -q -p ingero-echo -p ingero-fleet -p ingero-agent
exec "$python" scripts/chains_e2e.py "$@"
