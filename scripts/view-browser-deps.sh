#!/usr/bin/env bash
# Installs what the live view's browser test (fleet/tests/e2e/view.rs, ignored by default)
# needs: Debian's Chromium (apt) and playwright-core (npm, pinned; it downloads no browser)
# into target/view-browser/. Idempotent; scripts/test-all.sh runs it before the test.
set -euo pipefail
cd "$(dirname "$0")/.."

PLAYWRIGHT_CORE_VERSION=1.65.1
DIR=target/view-browser

if [ ! -x "${INGERO_CHROMIUM:-/usr/bin/chromium}" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "view-browser-deps: installing Debian's chromium"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
    || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; }
fi
command -v node >/dev/null || {
  echo "view-browser-deps: Node.js missing (apt-get install -y nodejs npm)" >&2
  exit 1
}

have=$(node -p "try { require('./$DIR/node_modules/playwright-core/package.json').version } catch (e) { '' }")
if [ "$have" != "$PLAYWRIGHT_CORE_VERSION" ]; then
  mkdir -p "$DIR"
  [ -f "$DIR/package.json" ] || echo '{"private": true}' > "$DIR/package.json"
  # --ignore-scripts: playwright-core needs no install step, and no browser is downloaded.
  npm install --prefix "$DIR" --no-audit --no-fund --ignore-scripts --silent \
    "playwright-core@$PLAYWRIGHT_CORE_VERSION"
fi
echo "view-browser-deps: chromium $("${INGERO_CHROMIUM:-/usr/bin/chromium}" --version 2>/dev/null | tr -d '\n'), playwright-core $PLAYWRIGHT_CORE_VERSION in $DIR"
