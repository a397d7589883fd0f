#!/usr/bin/env bash
# Builds the Rust static library the shim links (release, libingero_fleet.a) and copies it
# and its header into go-shim/lib/, where the cgo directives look for them.
# Usage: go-shim/scripts/build-rust.sh   (from anywhere; needs cargo)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
cargo build --release --locked -p ingero-ffi --features mimalloc --manifest-path "$root/Cargo.toml"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$here/lib"
# Only the .a: with a .so next to it the linker would pick the shared library.
cp "$target_dir/release/libingero_fleet.a" "$here/lib/libingero_fleet.a.tmp"
mv "$here/lib/libingero_fleet.a.tmp" "$here/lib/libingero_fleet.a"
cp "$root/ffi/include/ingero_fleet.h" "$here/lib/ingero_fleet.h"
echo "go-shim/lib: $(du -h "$here/lib/libingero_fleet.a" | cut -f1) libingero_fleet.a"
