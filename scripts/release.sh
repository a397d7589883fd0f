#!/usr/bin/env bash
# Builds the release archives: one `<binary>_<version>_linux_<arch>.tar.gz` per shipped
# binary, holding the binary (version from Cargo, git commit in `--version`), its example
# configs, its systemd unit and env file, the license and a CycloneDX SBOM made from
# Cargo.lock; then SHA256SUMS over the archives.
#
# Usage: scripts/release.sh [--out DIR] [--profile release|dev] [--bin-dir DIR]
#   --out DIR        where archives go (default dist/)
#   --profile dev    package debug builds instead (the test command's check of the archive
#                    layout, SBOM and checksums; reuses what `cargo test` built). Release is
#                    the default and what a release ships. ingero-echo compiles DuckDB's C++
#                    (about 20 min on 2 cores per profile; export CXX="ccache c++", or
#                    link DuckDB's release build: eval "$(scripts/duckdb-prebuilt.sh)").
#   --bin-dir DIR    package the binaries already in DIR (amd64 only) instead of building
#                    them, e.g. built by an earlier CI step; their --version must name this
#                    commit, which scripts/check-release.sh checks.
#   RELEASE_BINARIES which binaries (default all: ingero-fleet ingero-agent ingero-echo).
#   RELEASE_ARCHES   "amd64" (default) or "amd64 arm64": arm64 needs the Rust target
#                    aarch64-unknown-linux-gnu and a cross linker; the script fails naming what
#                    is missing rather than skipping it.
#   RELEASE_ALLOW_DIRTY=1  build from a tree with uncommitted changes (the commit in
#                    `--version` then does not describe the binary; never for a release).
#
# Reproducibility: the archives (file order, mtimes = the commit's time, owners, gzip
# header), the SBOM (timestamp = the commit's time, serial number derived from its content)
# and the checksums are byte-for-byte functions of their inputs. The release binaries are
# built with --remap-path-prefix (no build directory or home in them) from the locked
# dependencies and the pinned toolchain; the agent's eBPF objects (clang -g) still carry the
# source directory, so bit-identical agent binaries need the same checkout path.
#
# Signing happens in CI, not here (keyless cosign needs an OIDC identity): see
# docs/deploy.md, "Verifying a release".
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

out="$root/dist"
profile=release
prebuilt=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --out) out="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --bin-dir) prebuilt="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "release.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release) profile_dir=release ;;
  dev) profile_dir=debug ;;
  *) echo "release.sh: --profile must be release or dev, not $profile" >&2; exit 2 ;;
esac

# The binaries shipped, as package:binary:readme:examples (space-separated, relative to the
# repository root; a file goes to examples/<name>, a directory to examples/<directory>/).
# Each archive also gets LICENSE and packaging/systemd/<binary>.{service,env}.
ALL_BINARIES=(
  "ingero-fleet:ingero-fleet:fleet/README.md:examples/fleet-config.yaml examples/fleet-config-tls.yaml"
  "ingero-agent:ingero-agent:agent/README.md:agent/testdata/config.yaml"
  "ingero-echo:ingero-echo:echo/README.md:examples/fleet-to-echo"
)
BINARIES=()
for entry in "${ALL_BINARIES[@]}"; do
  IFS=: read -r _ bin _ _ <<<"$entry"
  if [ -z "${RELEASE_BINARIES:-}" ] || grep -qw -- "$bin" <<<"$RELEASE_BINARIES"; then BINARIES+=("$entry"); fi
done
[ "${#BINARIES[@]}" -gt 0 ] || { echo "release.sh: RELEASE_BINARIES names none of the shipped binaries" >&2; exit 2; }

version="$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ingero-fleet"))')"
commit="$(git rev-parse HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no)" ] && [ "${RELEASE_ALLOW_DIRTY:-0}" != 1 ]; then
  echo "release.sh: the tree has uncommitted changes; commit them (or RELEASE_ALLOW_DIRTY=1 for a local try)" >&2
  exit 1
fi
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)"
export SOURCE_DATE_EPOCH
echo "release: version $version, commit $commit, profile $profile, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH"

# cargo-cyclonedx, pinned, installed on first use under target/tools.
CDX_VERSION=0.5.9
tools="$root/target/tools"
cdx="$tools/bin/cargo-cyclonedx"
if ! [ -x "$cdx" ] || ! "$cdx" cyclonedx --version 2>/dev/null | grep -q " $CDX_VERSION\$"; then
  echo "release: installing cargo-cyclonedx $CDX_VERSION into $tools"
  cargo install --locked --quiet --root "$tools" --version "$CDX_VERSION" cargo-cyclonedx
fi

rust_target_of() {
  case "$1" in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) echo "release.sh: unknown arch $1 (amd64, arm64)" >&2; return 1 ;;
  esac
}

host_target="$(rustc -vV | sed -n 's/^host: //p')"
mkdir -p "$out"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
archives=()

for arch in ${RELEASE_ARCHES:-amd64}; do
  target="$(rust_target_of "$arch")"
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "release.sh: $arch needs the Rust target $target, which this toolchain does not have" \
      "(rustup target list --installed); install it and a linker for it (e.g. gcc-aarch64-linux-gnu," \
      "libc6-dev-arm64-cross for the agent's eBPF headers)" >&2
    exit 1
  fi
  target_args=()
  bin_dir="${CARGO_TARGET_DIR:-$root/target}/$profile_dir"
  if [ "$target" != "$host_target" ]; then
    target_args=(--target "$target")
    bin_dir="${CARGO_TARGET_DIR:-$root/target}/$target/$profile_dir"
  fi

  build_args=(build --locked "${target_args[@]}")
  [ "$profile" = release ] && build_args+=(--release)
  for entry in "${BINARIES[@]}"; do
    IFS=: read -r pkg bin _ _ <<<"$entry"
    build_args+=(-p "$pkg" --bin "$bin")
  done
  if [ -n "$prebuilt" ]; then
    [ "$arch" = amd64 ] || { echo "release.sh: --bin-dir packages amd64 binaries only" >&2; exit 2; }
    bin_dir="$prebuilt"
    echo "release: packaging the binaries in $bin_dir (not built here)"
  elif [ "$profile" = release ]; then
    echo "release: cargo ${build_args[*]}"
    # Paths of the checkout and of the dependency sources are rewritten in panic messages
    # and debug info, so the binary does not depend on where it was built.
    RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$root=/build/ingero-fleet --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
      INGERO_GIT_COMMIT="$commit" cargo "${build_args[@]}"
  else
    echo "release: cargo ${build_args[*]}"
    INGERO_GIT_COMMIT="$commit" cargo "${build_args[@]}"
  fi

  for entry in "${BINARIES[@]}"; do
    IFS=: read -r pkg bin readme examples <<<"$entry"
    name="${bin}_${version}_linux_${arch}"
    dir="$stage/$name"
    mkdir -p "$dir/examples" "$dir/systemd"
    [ -x "$bin_dir/$bin" ] || { echo "release.sh: no $bin_dir/$bin" >&2; exit 1; }
    install -m 0755 "$bin_dir/$bin" "$dir/$bin"
    install -m 0644 LICENSE "$dir/LICENSE"
    install -m 0644 "$readme" "$dir/README.md"
    for ex in $examples; do
      if [ -d "$ex" ]; then
        install -d -m 0755 "$dir/examples/$(basename "$ex")"
        for f in "$ex"/*; do install -m 0644 "$f" "$dir/examples/$(basename "$ex")/$(basename "$f")"; done
      else
        install -m 0644 "$ex" "$dir/examples/$(basename "$ex")"
      fi
    done
    install -m 0644 "packaging/systemd/$bin.service" "$dir/systemd/$bin.service"
    install -m 0644 "packaging/systemd/$bin.env" "$dir/systemd/$bin.env"

    # The SBOM of the package's dependency graph for this target, from Cargo.lock.
    # cargo-cyclonedx writes one beside every workspace member's Cargo.toml; the package's
    # own is kept, all are removed from the source tree at once.
    manifest_dir="$(cargo metadata --no-deps --format-version 1 --locked |
      python3 -c 'import json,sys,os; print(os.path.dirname(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]==sys.argv[1])))' "$pkg")"
    "$cdx" cyclonedx --manifest-path "$manifest_dir/Cargo.toml" --format json --spec-version 1.5 \
      --target "$target" --override-filename "$name.cdx" --quiet
    python3 scripts/sbom_normalize.py "$manifest_dir/$name.cdx.json" "$dir/$bin.cdx.json" \
      --epoch "$SOURCE_DATE_EPOCH"
    find "$root" -path "$root/target" -prune -o -path "$out" -prune -o -name "$name.cdx.json" -type f -print0 |
      xargs -0 rm -f

    # Deterministic tar: sorted names, fixed owner and mtime, no gzip name/time.
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -C "$stage" -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz"
    archives+=("$name.tar.gz")
    echo "release: $out/$name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1))"
  done
done

(cd "$out" && sha256sum "${archives[@]}" >SHA256SUMS)
echo "release: $out/SHA256SUMS"
cat "$out/SHA256SUMS"
