#!/usr/bin/env bash
# Builds the container images from binaries that are already built, pulling nothing:
# each image is `FROM scratch` with a root filesystem staged here from
#   - the binary (BIN_DIR/<name>) and the shared libraries it links, copied from this
#     machine's Debian packages (ldd), with the dynamic loader;
#   - packaging/docker/http-probe, compiled static here from http-probe.c (the HEALTHCHECK;
#     the images hold no shell);
#   - /etc/passwd and /etc/group with the unprivileged user 65532 (`ingero`), the CA bundle,
#     and the container configs of the binary if it has them (packaging/docker/<name>.yaml,
#     TLS, and <name>-plaintext.yaml);
#   - beside rootfs/, an empty directory `empty/` a Dockerfile can copy with --chown to make a
#     data directory the unprivileged user owns (the classic builder gives rootfs/ to root).
# Usage: scripts/build-images.sh BIN_DIR [TAG]    (TAG defaults to the Cargo version)
#   IMAGE_PREFIX   registry/repository prefix for the image names (default: none)
#   IMAGES         which binaries (default: every packaging/docker/<name>.Dockerfile)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
bin_dir="$(cd "${1:?usage: build-images.sh BIN_DIR [TAG]}" && pwd)"
tag="${2:-$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ingero-fleet"))')}"
prefix="${IMAGE_PREFIX:-}"
command -v docker >/dev/null || { echo "build-images: docker not found (apt-get install docker.io)" >&2; exit 1; }
cc="${CC:-cc}"

if [ -z "${IMAGES:-}" ]; then
  IMAGES="$(cd packaging/docker && ls ./*.Dockerfile | sed 's#^\./##; s#\.Dockerfile$##' | tr '\n' ' ')"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The health probe: static, so it needs no library in the image.
"$cc" -static -Os -Wall -Wextra -Werror -o "$work/http-probe" packaging/docker/http-probe.c

# Copies a file to the same path under the root filesystem, symlinks resolved (the library
# paths ldd prints may go through symlinked directories such as /lib64 or /lib).
copy_path() {
  local src="$1" dst_root="$2"
  mkdir -p "$dst_root$(dirname "$src")"
  cp -L "$src" "$dst_root$src"
}

for name in $IMAGES; do
  bin="$bin_dir/$name"
  [ -x "$bin" ] || { echo "build-images: $bin not found or not executable" >&2; exit 1; }
  ctx="$work/$name"
  rootfs="$ctx/rootfs"
  mkdir -p "$ctx/empty"
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ingero" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  install -m 0755 "$bin" "$rootfs/usr/local/bin/$name"
  install -m 0755 "$work/http-probe" "$rootfs/usr/local/bin/http-probe"

  # Shared libraries from ldd: "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the loader
  # "/lib64/ld-linux-x86-64.so.2 (0x...)". A static binary has none.
  ldd_out="$(ldd "$bin" 2>&1 || true)"
  if ! grep -q "not a dynamic executable\|statically linked" <<<"$ldd_out"; then
    if grep -q "not found" <<<"$ldd_out"; then
      echo "build-images: $name links a library this machine lacks:" >&2
      echo "$ldd_out" >&2
      exit 1
    fi
    while read -r lib; do
      copy_path "$lib" "$rootfs"
    done < <(awk '/=> \// { print $3 } /^[ \t]*\// { print $1 }' <<<"$ldd_out")
  fi

  printf 'root:x:0:0:root:/:/sbin/nologin\ningero:x:65532:65532:ingero:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\ningero:x:65532:\n' >"$rootfs/etc/group"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  # The container config (TLS) and its explicit plaintext variant, where the binary has them.
  for conf in "packaging/docker/${name#ingero-}.yaml" "packaging/docker/${name#ingero-}-plaintext.yaml"; do
    if [ -f "$conf" ]; then install -m 0644 "$conf" "$rootfs/etc/ingero/$(basename "$conf")"; fi
  done

  cp "packaging/docker/$name.Dockerfile" "$ctx/Dockerfile"
  image="$prefix$name:$tag"
  echo "build-images: $image ($(du -sh "$rootfs" | cut -f1) root filesystem)"
  # The classic builder: Debian's docker.io has no BuildKit plugin, and nothing here needs it.
  DOCKER_BUILDKIT=0 docker build --quiet \
    --label "org.opencontainers.image.version=$tag" \
    --label "org.opencontainers.image.revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    --label "org.opencontainers.image.source=https://github.com/ingero-io/ingero-fleet-rs" \
    -t "$image" "$ctx" >/dev/null
done
