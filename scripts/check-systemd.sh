#!/usr/bin/env bash
# Checks the systemd units in packaging/systemd/: `systemd-analyze verify` against the real
# binaries (any message, warnings on unknown keys included, fails the check), and
# `systemd-analyze security --offline` exposure at most the level each unit is held to.
# For a unit with a StateDirectory whose binary has a store (ingero-echo), the binary's
# effective config under the unit's environment puts the store in that directory.
# Usage: scripts/check-systemd.sh BIN_DIR   (BIN_DIR holds ingero-fleet, ingero-agent, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir="$(cd "${1:?usage: check-systemd.sh BIN_DIR}" && pwd)"
command -v systemd-analyze >/dev/null || { echo "check-systemd: systemd-analyze not found (apt-get install systemd)" >&2; exit 1; }

# Exposure ceilings (0 = fully locked down, 10 = unprotected). The agent needs root with
# CAP_BPF/CAP_PERFMON/CAP_SYS_RESOURCE/CAP_SYS_PTRACE and the host's /proc, hence its higher level.
declare -A max_exposure=([ingero-fleet]=1.5 [ingero-agent]=3.5 [ingero-echo]=1.5)
# Binary -> the config key holding its data directory, which must be the unit's StateDirectory.
declare -A data_dir_key=([ingero-echo]=exporters.echo.data_dir)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0
for unit in packaging/systemd/*.service; do
  name="$(basename "$unit" .service)"
  [ -f "packaging/systemd/$name.env" ] || { echo "FAIL $name: no packaging/systemd/$name.env" >&2; fail=1; }
  [ -x "$bin_dir/$name" ] || { echo "FAIL $name: no binary $bin_dir/$name" >&2; fail=1; continue; }
  [ -n "${max_exposure[$name]:-}" ] || { echo "FAIL $name: no exposure ceiling in $0" >&2; fail=1; continue; }
  sed "s#/usr/local/bin/$name#$bin_dir/$name#g" "$unit" >"$work/$name.service"
  msgs="$(cd "$work" && systemd-analyze verify "./$name.service" 2>&1)" || { echo "FAIL $name: systemd-analyze verify: $msgs" >&2; fail=1; continue; }
  if [ -n "$msgs" ]; then echo "FAIL $name: systemd-analyze verify reported: $msgs" >&2; fail=1; continue; fi
  level="$(cd "$work" && systemd-analyze security --offline=yes "./$name.service" 2>/dev/null |
    sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')"
  [ -n "$level" ] || { echo "FAIL $name: no exposure level from systemd-analyze security" >&2; fail=1; continue; }
  if awk -v l="$level" -v m="${max_exposure[$name]}" 'BEGIN { exit !(l > m) }'; then
    echo "FAIL $name: exposure $level above $name's ceiling ${max_exposure[$name]}" >&2; fail=1; continue
  fi
  # The hardening the issue names, present literally (a refactor must not drop them).
  for key in NoNewPrivileges=yes ProtectSystem=strict ProtectHome= CapabilityBoundingSet=; do
    grep -q "^$key" "$unit" || { echo "FAIL $name: no $key line" >&2; fail=1; }
  done
  if [ -n "${data_dir_key[$name]:-}" ]; then
    # The unit's Environment= lines and the env file's assignments, then the binary's
    # effective config (print-config) with the unit's arguments.
    state="$(sed -n 's/^StateDirectory=//p' "$unit")"
    [ -n "$state" ] || { echo "FAIL $name: no StateDirectory= for its store" >&2; fail=1; continue; }
    mapfile -t envs < <(sed -n 's/^Environment=//p' "$unit"; grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "packaging/systemd/$name.env")
    args="$(grep -E '^INGERO_[A-Z_]*ARGS=' "packaging/systemd/$name.env" | head -n 1 | cut -d= -f2-)"
    # shellcheck disable=SC2086 # the unit word-splits $..._ARGS the same way
    got="$(env -i "${envs[@]}" "$bin_dir/$name" $args print-config --format json |
      python3 -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v=v[k]
print(v)' "${data_dir_key[$name]}")" || { echo "FAIL $name: print-config under the unit's environment failed" >&2; fail=1; continue; }
    [ "$got" = "/var/lib/$state" ] || { echo "FAIL $name: ${data_dir_key[$name]} is '$got' under the unit's environment, not its StateDirectory /var/lib/$state" >&2; fail=1; continue; }
    echo "ok   $name.service: ${data_dir_key[$name]} = /var/lib/$state (StateDirectory=$state)"
  fi
  echo "ok   $name.service: verify clean, exposure $level (ceiling ${max_exposure[$name]})"
done
exit "$fail"
