#!/usr/bin/env bash
# Checks what scripts/release.sh made, as a user receiving it would:
#   - SHA256SUMS verifies every archive, and refuses a copy with one byte changed;
#   - each archive holds exactly the expected files, the binary runs and `--version` names
#     the Cargo version and the commit;
#   - the SBOM is CycloneDX 1.5 JSON naming the package, its version, crates it is known to
#     link and the commit's time;
#   - Fleet's and Echo's example configs validate with the archived binaries.
# Usage: scripts/check-release.sh DIST_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dist="$(cd "${1:?usage: check-release.sh DIST_DIR}" && pwd)"
version="$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ingero-fleet"))')"
commit="$(git rev-parse HEAD)"
epoch="$(git log -1 --format=%ct)"
die() { echo "check-release: FAIL: $*" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ---- checksums --------------------------------------------------------------------------
[ -s "$dist/SHA256SUMS" ] || die "no $dist/SHA256SUMS"
(cd "$dist" && sha256sum --check --strict SHA256SUMS) || die "SHA256SUMS does not verify"
first="$(awk 'NR==1 { print $2 }' "$dist/SHA256SUMS")"
mkdir "$work/tampered"
cp "$dist/SHA256SUMS" "$work/tampered/"
cp "$dist/$first" "$work/tampered/"
# Flip one byte in the middle of the archive.
size="$(stat -c %s "$work/tampered/$first")"
python3 - "$work/tampered/$first" "$((size / 2))" <<'EOF'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0xFF]))
EOF
if (cd "$work/tampered" && sha256sum --check --strict --ignore-missing SHA256SUMS >/dev/null 2>&1); then
  die "a tampered $first still verifies"
fi
echo "ok   SHA256SUMS verifies $(wc -l <"$dist/SHA256SUMS") archives and refuses a tampered one"

# ---- each archive -----------------------------------------------------------------------
# binary -> a crate its SBOM must list (a dependency it is known to link).
declare -A known_dep=([ingero-fleet]=tokio [ingero-agent]=aya [ingero-echo]=libduckdb-sys)
while read -r _ archive; do
  name="${archive%.tar.gz}"                      # ingero-fleet_0.1.0_linux_amd64
  bin="${name%%_*}"
  arch="${name##*_}"
  [ "$name" = "${bin}_${version}_linux_${arch}" ] || die "$archive: name is not <binary>_${version}_linux_<arch>"
  tar -xzf "$dist/$archive" -C "$work"
  dir="$work/$name"
  [ -d "$dir" ] || die "$archive: no top directory $name/"
  actual="$(cd "$dir" && find . -type f | sed 's#^\./##' | sort)"
  for want in "$bin" LICENSE README.md "$bin.cdx.json" "systemd/$bin.service" "systemd/$bin.env"; do
    grep -qx "$want" <<<"$actual" || die "$archive lacks $want (has: $(tr '\n' ' ' <<<"$actual"))"
  done
  grep -q '^examples/' <<<"$actual" || die "$archive has no examples/"
  extra="$(grep -v -x -e "$bin" -e LICENSE -e README.md -e "$bin.cdx.json" -e "systemd/$bin.service" -e "systemd/$bin.env" -e 'examples/.*' <<<"$actual" || true)"
  [ -z "$extra" ] || die "$archive holds unexpected files: $extra"
  grep -q "Apache License" "$dir/LICENSE" || die "$archive: LICENSE is not the Apache license"
  [ -x "$dir/$bin" ] || die "$archive: $bin not executable"
  # Owners and times are fixed (reproducible archives).
  tar -tvzf "$dist/$archive" | awk -v n="$archive" '$2 != "0/0" { print "check-release: FAIL: " n ": owner " $2 " on " $6; bad = 1 } END { exit bad }' ||
    exit 1

  [ "$arch" = amd64 ] || { echo "ok   $archive (not run: $arch)"; continue; }
  out="$("$dir/$bin" --version)"
  [ "$out" = "$bin $version (commit $commit)" ] || die "$bin --version said '$out', want '$bin $version (commit $commit)'"

  python3 - "$dir/$bin.cdx.json" "$bin" "$version" "$epoch" "${known_dep[$bin]:-}" <<'EOF'
import datetime, json, sys
path, pkg, version, epoch, dep = sys.argv[1:6]
bom = json.load(open(path))
def fail(msg):
    sys.exit(f"check-release: FAIL: {path}: {msg}")
if bom.get("bomFormat") != "CycloneDX" or bom.get("specVersion") != "1.5":
    fail(f"bomFormat {bom.get('bomFormat')} specVersion {bom.get('specVersion')}")
meta = bom.get("metadata", {})
comp = meta.get("component", {})
if comp.get("name") != pkg or comp.get("version") != version:
    fail(f"describes {comp.get('name')} {comp.get('version')}, not {pkg} {version}")
want_ts = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
if meta.get("timestamp") != want_ts:
    fail(f"timestamp {meta.get('timestamp')}, want the commit's {want_ts}")
if not str(bom.get("serialNumber", "")).startswith("urn:uuid:"):
    fail("no urn:uuid serial number")
names = {c.get("name") for c in bom.get("components", [])}
if dep and dep not in names:
    fail(f"does not list {dep} ({len(names)} components)")
purls = [c.get("purl", "") for c in bom.get("components", []) if c.get("name") == dep]
if dep and not any(p.startswith(f"pkg:cargo/{dep}@") for p in purls):
    fail(f"{dep} has no pkg:cargo purl: {purls}")
print(f"ok   {pkg}.cdx.json: CycloneDX 1.5, {len(names)} components, {dep} included")
EOF

  if [ "$bin" = ingero-fleet ]; then
    # The plaintext seed config binds 0.0.0.0: valid once plaintext is allowed explicitly.
    "$dir/$bin" --config "$dir/examples/fleet-config.yaml" \
      --set service.allow_plaintext_listeners=true validate >/dev/null ||
      die "examples/fleet-config.yaml does not validate with the archived ingero-fleet"
  fi
  if [ "$bin" = ingero-echo ]; then
    # The embedded default the unit runs, and the example with tokens on the API, with the
    # store and the tokens file where the unit's environment would put them.
    printf -- '- name: ops\n  token: check-release-token-0123456789\n  clusters: ["*"]\n' >"$work/echo-tokens.yaml"
    chmod 0600 "$work/echo-tokens.yaml"
    for args in "" "--config $dir/examples/fleet-to-echo/echo.yaml"; do
      # shellcheck disable=SC2086 # $args is a list of flags
      INGERO_ECHO_DATA_DIR="$work/echo-data" INGERO_ECHO_TOKENS_FILE="$work/echo-tokens.yaml" \
        "$dir/$bin" $args validate >/dev/null || die "ingero-echo ${args:-(embedded default)} does not validate with the archived ingero-echo"
    done
    [ -f "$dir/examples/fleet-to-echo/fleet.yaml" ] || die "$archive lacks examples/fleet-to-echo/fleet.yaml"
  fi
  echo "ok   $archive: contents, --version '$out'"
done <"$dist/SHA256SUMS"
