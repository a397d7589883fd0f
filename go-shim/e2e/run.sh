#!/usr/bin/env bash
# End-to-end parity test of the two hosts: builds the Rust static library (release), the Go
# collector with OCB (builder-config.yaml) and ingero-fleet, then runs parity.py, which
# starts both on loopback with free ports, pushes the same agent payloads and asserts the
# same thresholds, headers, GET answers, diagnostics and Prometheus series.
#
# usage: go-shim/e2e/run.sh            (from anywhere; needs cargo, go, python3 with grpcio)
# env:   BUILDER_VERSION (default v0.159.0, the version builder-config.yaml is written for)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
BUILDER_VERSION="${BUILDER_VERSION:-v0.159.0}"
step() { printf -- '--- e2e: %s\n' "$*"; }

step "Rust static library (release) -> go-shim/lib"
go-shim/scripts/build-rust.sh

step "ingero-fleet and the agent payloads (testkit)"
cargo build --locked -q -p ingero-fleet --bin ingero-fleet
cargo build --locked -q -p ingero-ffi --example agent_payloads
target_dir="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$target_dir/debug/examples/agent_payloads" > "$work/payloads.json"

step "OCB $BUILDER_VERSION"
gobin="$(go env GOPATH)/bin"
if ! "$gobin/builder" version 2>/dev/null | grep -q "${BUILDER_VERSION#v}"; then
  GOFLAGS=-buildvcs=false go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
fi

step "building the Go collector (dist.cgo_enabled: true)"
"$gobin/builder" --config builder-config.yaml --ldflags "$(go-shim/scripts/lib-ldflags.sh)" > "$work/ocb.log" 2>&1 || { cat "$work/ocb.log"; exit 1; }
otelcol="$root/go-shim/e2e/_build/otelcol-ingero"
"$otelcol" components | grep -E 'ingero|provider_lookup|nccl_peer_lag' | head -n 8 || true

step "parity: ingero-fleet vs otelcol-ingero"
python3 go-shim/e2e/parity.py --fleet "$target_dir/debug/ingero-fleet" --otelcol "$otelcol" --payloads "$work/payloads.json"
