#!/usr/bin/env bash
# Builds the images from already-built binaries (scripts/build-images.sh) and runs each as a
# client would, with the settings the docs recommend (read-only root filesystem, every
# capability dropped, no new privileges):
#   - Fleet: its Docker HEALTHCHECK turns healthy, it runs as the unprivileged user,
#     `--version` names the version, and an OTLP/HTTP push from the host is answered 200;
#   - the agent, in synthetic mode on the same Docker network, pushes to the Fleet
#     container: its own /metrics counts successful pushes and Fleet exports its score.
# Starts dockerd when it is not running; fails (never skips) when Docker cannot run.
# Usage: scripts/image-test.sh BIN_DIR   (e.g. target/debug after `cargo build`)
#   EXPECT_COMMIT  a commit `--version` must name (scripts/release.sh --profile dev builds)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir="$(cd "${1:?usage: image-test.sh BIN_DIR}" && pwd)"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p "$target_dir"

die() { echo "image-test: FAIL: $*" >&2; exit 1; }

# ---- Docker --------------------------------------------------------------------------
command -v docker >/dev/null || die "docker not found (apt-get install docker.io)"
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || die "the Docker daemon is not running and dockerd is not installed"
  echo "image-test: starting dockerd (log: $target_dir/dockerd.log)"
  dockerd >"$target_dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -n 20 "$target_dir/dockerd.log" >&2; die "dockerd did not start (privileges? see the log above)"; }
fi

version="$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="ingero-fleet"))')"
tag="image-test-$$"
net="ingero-image-test-$$"
fleet="ingero-fleet-test-$$"
agent="ingero-agent-test-$$"
images=(ingero-fleet ingero-agent)

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    for c in "$fleet" "$agent"; do
      docker logs "$c" >/dev/null 2>&1 && { echo "--- docker logs $c (last 30 lines)" >&2; docker logs "$c" 2>&1 | tail -n 30 >&2; }
    done
  fi
  docker rm -f "$fleet" "$agent" >/dev/null 2>&1 || true
  docker network rm "$net" >/dev/null 2>&1 || true
  for i in "${images[@]}"; do docker rmi -f "$i:$tag" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

IMAGES="${images[*]}" scripts/build-images.sh "$bin_dir" "$tag"

host_port() { docker port "$1" "$2/tcp" | head -n 1 | sed 's/.*://'; }
wait_healthy() {
  local c="$1" s=""
  for _ in $(seq 1 90); do
    s="$(docker inspect -f '{{.State.Health.Status}}' "$c" 2>/dev/null || echo gone)"
    [ "$s" = healthy ] && return 0
    [ "$(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" = true ] || die "$c exited"
    sleep 1
  done
  die "$c not healthy after 90 s (health: $s)"
}
hardened=(--read-only --cap-drop ALL --security-opt no-new-privileges --health-interval 1s --health-start-period 1s)

# ---- images' static properties -------------------------------------------------------
for i in "${images[@]}"; do
  user="$(docker inspect -f '{{.Config.User}}' "$i:$tag")"
  [ "$user" = "65532:65532" ] || die "$i runs as '$user', not the unprivileged 65532:65532"
  hc="$(docker inspect -f '{{json .Config.Healthcheck.Test}}' "$i:$tag")"
  grep -q http-probe <<<"$hc" || die "$i has no http-probe HEALTHCHECK ($hc)"
  out="$(docker run --rm "${hardened[@]}" --entrypoint "/usr/local/bin/$i" "$i:$tag" --version)"
  grep -q "^$i $version" <<<"$out" || die "$i --version said '$out', not $version"
  if [ -n "${EXPECT_COMMIT:-}" ]; then
    grep -q "(commit $EXPECT_COMMIT)" <<<"$out" || die "$i --version said '$out', without commit $EXPECT_COMMIT"
  fi
  if docker run --rm --entrypoint /bin/sh "$i:$tag" -c true >/dev/null 2>&1; then die "$i has a shell"; fi
  echo "ok   $i: user 65532, HEALTHCHECK, no shell, --version: $out"
done

# ---- Fleet ---------------------------------------------------------------------------
docker network create "$net" >/dev/null
docker run -d --name "$fleet" --network "$net" "${hardened[@]}" \
  -p 127.0.0.1::4318 -p 127.0.0.1::8889 -p 127.0.0.1::13133 \
  "ingero-fleet:$tag" --config /etc/ingero/fleet.yaml \
  --set processors.ingero.push_interval=1s >/dev/null
wait_healthy "$fleet"
otlp_port="$(host_port "$fleet" 4318)"
prom_port="$(host_port "$fleet" 8889)"
echo "ok   ingero-fleet: healthy (OTLP/HTTP on 127.0.0.1:$otlp_port)"

python3 - "$otlp_port" <<'EOF'
import json, sys, time, urllib.request
port = sys.argv[1]
now = str(time.time_ns())
def attr(k, v): return {"key": k, "value": {"stringValue": v}}
body = {"resourceMetrics": [{
    "resource": {"attributes": [attr("ingero.node.id", "probe-from-host"), attr("ingero.cluster.id", "docker-test")]},
    "scopeMetrics": [{"scope": {"name": "ingero.health", "version": "0.10.0"}, "metrics": [{
        "name": "ingero.node.health_score", "unit": "1",
        "gauge": {"dataPoints": [{"timeUnixNano": now, "asDouble": 0.93,
            "attributes": [attr("ingero.node.state", "active"), attr("ingero.workload_type", "unknown")]}]}}]}]}]}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics?cluster_id=docker-test",
    data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    reply = r.read()
    assert r.status == 200, f"push answered {r.status}"
    print(f"ok   ingero-fleet: push answered {r.status} ({len(reply)} byte body)")
EOF

# ---- agent (synthetic) against the Fleet container -----------------------------------
docker run -d --name "$agent" --network "$net" "${hardened[@]}" \
  --tmpfs /var/lib/ingero-agent:uid=65532,gid=65532,mode=0700 -p 127.0.0.1::9465 \
  "ingero-agent:$tag" --synthetic --fleet-endpoint "http://$fleet:4318" --fleet-insecure \
  --fleet-cluster-id docker-test --fleet-node-id agent-in-docker --fleet-push-interval 1s \
  --fleet-provider none >/dev/null
wait_healthy "$agent"
agent_port="$(host_port "$agent" 9465)"

python3 - "$agent_port" "$prom_port" <<'EOF'
import json, re, sys, time, urllib.error, urllib.request
agent_port, prom_port = sys.argv[1], sys.argv[2]
ok_pushes, nodes = 0, []
for _ in range(60):
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/metrics", timeout=5).read().decode()
    m = re.search(r'^ingero_agent_pushes_total\{result="ok"\} (\d+)', text, re.M)
    ok_pushes = int(m.group(1)) if m else 0
    # Fleet's exporter: one health-score series per node that pushed.
    fleet = urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/metrics", timeout=5).read().decode()
    nodes = sorted(set(re.findall(r'^ingero_node_health_score\w*\{[^}]*ingero_node_id="([^"]+)"', fleet, re.M)))
    if ok_pushes >= 2 and "agent-in-docker" in nodes:
        break
    time.sleep(1)
assert ok_pushes >= 2, f"the agent counted {ok_pushes} successful pushes"
assert "agent-in-docker" in nodes and "probe-from-host" in nodes, f"Fleet's exporter has health scores of {nodes}"
print(f"ok   ingero-agent: {ok_pushes} pushes accepted; Fleet exports health scores of {nodes}")
EOF
echo "image-test: all images passed"
