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
MCP_VERSION=2.3.0
venv=target/echo-mcp-venv
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "mcp==$MCP_VERSION"
fi
cargo build -q -p ingero-echo -p ingero-fleet -p ingero-agent
exec "$venv/bin/python" scripts/echo_e2e.py "$@"
