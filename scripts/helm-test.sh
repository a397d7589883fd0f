#!/usr/bin/env bash
# Checks the Helm charts in deploy/helm/: `helm lint --strict` with the defaults and with
# each chart's ci/production-values.yaml, then the Go test in deploy/helm/test, which renders
# every chart with Helm's engine and decodes each object strictly into the Kubernetes API
# types (see that file). helm is built from the Go module proxy on first use and cached
# under target/tools.
# Usage: scripts/helm-test.sh [FLEET_BIN]   (an ingero-fleet binary: the test validates the
#        rendered Fleet config with it; default target/debug/ingero-fleet)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
HELM_VERSION=v3.19.5
tools="${CARGO_TARGET_DIR:-$root/target}/tools"
helm="$tools/bin/helm"
fleet_bin="${1:-${CARGO_TARGET_DIR:-$root/target}/debug/ingero-fleet}"
[ -x "$fleet_bin" ] || { echo "helm-test: $fleet_bin not found (cargo build -p ingero-fleet)" >&2; exit 1; }
fleet_bin="$(cd "$(dirname "$fleet_bin")" && pwd)/$(basename "$fleet_bin")"

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
# `go install` does not stamp helm's version (it prints only v3.19), so a file beside it does.
if ! [ -x "$helm" ] || [ "$(cat "$helm.version" 2>/dev/null)" != "$HELM_VERSION" ]; then
  echo "helm-test: building helm $HELM_VERSION from the Go module proxy into $tools/bin"
  mkdir -p "$tools/bin"
  GOBIN="$tools/bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" >"$helm.version"
fi

fail=0
for chart in deploy/helm/ingero-*/; do
  chart="${chart%/}"
  name="$(basename "$chart")"
  for values in "" "$chart/ci/production-values.yaml"; do
    args=(lint --strict "$chart")
    [ -n "$values" ] && args+=(-f "$values")
    if out="$("$helm" "${args[@]}" 2>&1)"; then
      echo "ok   helm lint --strict $name ${values:+with $(basename "$values")}"
    else
      echo "FAIL helm ${args[*]}:" >&2
      echo "$out" >&2
      fail=1
    fi
  done
done
[ "$fail" = 0 ] || exit 1

echo "helm-test: rendering and strict decoding (deploy/helm/test)"
(cd deploy/helm/test && FLEET_BIN="$fleet_bin" go test -count=1 ./...)
