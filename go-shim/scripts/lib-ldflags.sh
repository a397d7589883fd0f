#!/usr/bin/env bash
# Prints the -ldflags value that stamps the sha256 of go-shim/lib/libingero_fleet.a into the
# Go binary (ffi.LinkedLibSHA256). Pass it to every `go build`, `go test` and OCB build:
#
#   go test -ldflags "$(go-shim/scripts/lib-ldflags.sh)" ./...
#   builder --config builder-config.yaml --ldflags "$(go-shim/scripts/lib-ldflags.sh)"
#
# Why: the Go build cache keys a link on Go sources and flags, not on the archives named by
# `#cgo LDFLAGS`, so after the Rust library changes Go can reuse a binary linked against the
# old one. Putting the archive's hash into the link flags makes a new archive a new link.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
lib="$here/lib/libingero_fleet.a"
[ -f "$lib" ] || { echo "lib-ldflags: $lib missing; run go-shim/scripts/build-rust.sh" >&2; exit 1; }
sum="$(sha256sum "$lib" | cut -d' ' -f1)"
echo "-X github.com/ingero-io/ingero-fleet-rs/go-shim/internal/ffi.LinkedLibSHA256=$sum"
