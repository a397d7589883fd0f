#!/usr/bin/env bash
# Makes target/<name> a Python venv holding exactly <package>==<version> (from PyPI) unless
# it is already there, and prints its python. The Echo test and benchmark scripts pin their
# Python clients with it.
#   scripts/py-venv.sh echo-mcp-venv mcp 2.3.0
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:?usage: py-venv.sh NAME PACKAGE VERSION}" package="${2:?}" version="${3:?}"
venv="target/$name"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$package') != '$version')" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$package==$version" >&2
fi
echo "$PWD/$venv/bin/python"
