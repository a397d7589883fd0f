#!/usr/bin/env bash
# Prepares DuckDB's own release build of the version Echo pins, as one static library, and
# prints the environment that makes Cargo link it instead of compiling DuckDB's C++ (about
# 20 min on 2 cores). DuckDB publishes that library as a Go module; the Go module proxy and
# checksum database serve and verify it, and this script checks its hash once more.
#
#   eval "$(scripts/duckdb-prebuilt.sh)"     # then cargo build/test as usual
#
# Prints nothing and exits 1 where it cannot (no Go, not x86_64 Linux, no network to the
# module proxy): the caller keeps the bundled build. Output goes under
# ${CARGO_TARGET_DIR:-target}/duckdb-prebuilt/<version>.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Go module version encodes DuckDB 1.5.6, the C++ of the duckdb crate =1.10506.1 (see
# echo/Cargo.toml: both must move together).
MODULE="github.com/duckdb/duckdb-go-bindings/lib/linux-amd64"
MODULE_VERSION="v0.10506.0"
MODULE_SUM="h1:yy2TUU+YWxiBiOQryYseUl0AcUzoFFYRmmrCGijUxiU="

[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || { echo "duckdb-prebuilt: only for x86_64 Linux" >&2; exit 1; }
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
command -v go >/dev/null 2>&1 || { echo "duckdb-prebuilt: no go toolchain" >&2; exit 1; }
for tool in ar pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || { echo "duckdb-prebuilt: $tool not found" >&2; exit 1; }
done

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target_dir/duckdb-prebuilt/$MODULE_VERSION"
if [ ! -f "$out/.done" ]; then
  # `go mod download` outside any module: GOFLAGS=-mod=mod keeps it from reading a go.mod.
  json="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$MODULE@$MODULE_VERSION")" || {
    echo "duckdb-prebuilt: go mod download failed" >&2; exit 1; }
  dir="$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  sum="$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Sum"])')"
  [ "$sum" = "$MODULE_SUM" ] || { echo "duckdb-prebuilt: $MODULE@$MODULE_VERSION has sum $sum, expected $MODULE_SUM" >&2; exit 1; }

  rm -rf "$out" && mkdir -p "$out/pkgconfig"
  # ar's MRI scripts cut a path at '@', which every module directory holds: a link without one.
  ln -s "$dir" "$out/module"
  # One archive from the module's archives (DuckDB, its third-party libraries and the
  # statically registered extensions: core_functions, json, parquet, icu, ...), so the link
  # order between them does not matter.
  {
    echo "CREATE $out/libduckdb_static.a"
    for a in "$dir"/lib*.a; do echo "ADDLIB $out/module/${a##*/}"; done
    echo "SAVE"
    echo "END"
  } | ar -M
  rm "$out/module"
  cp "$dir/duckdb.h" "$out/"
  cat > "$out/pkgconfig/duckdb.pc" <<PC
libdir=$out
includedir=$out

Name: duckdb
Description: DuckDB ${MODULE_VERSION} release build (static)
Version: 1.5.6
Libs: -L\${libdir} -lduckdb_static -lstdc++ -lm -ldl -lpthread
Cflags: -I\${includedir}
PC
  touch "$out/.done"
fi

# Linked statically: libduckdb-sys reads DUCKDB_LIB_DIR and the .pc file beside it; the cfg
# selects echo/Cargo.toml's prebuilt dependency table.
printf 'export DUCKDB_LIB_DIR=%q DUCKDB_INCLUDE_DIR=%q\n' "$out" "$out"
printf 'export RUSTFLAGS=%q\n' "${RUSTFLAGS:+$RUSTFLAGS }--cfg ingero_duckdb_prebuilt"
