#!/usr/bin/env bash
# Builds the images from already-built binaries (scripts/build-images.sh) and runs each as a
# client would, with the settings the docs recommend (read-only root filesystem, every
# capability dropped, no new privileges):
#   - Fleet: its Docker HEALTHCHECK turns healthy, it runs as the unprivileged user,
#     `--version` names the version, and an OTLP/HTTP push from the host is answered 200;
#   - the agent, in synthetic mode on the same Docker network, pushes to the Fleet
#     container: its own /metrics counts successful pushes and Fleet exports its score;
#   - Echo, its store on a named volume: healthy, running as 65532 with the root filesystem
#     read-only and no capability, an OTLP/HTTP push from the host is stored and read back
#     through the query API with a bearer token (none: 401; a token of another cluster:
#     404), a second container on the same volume refuses to start (the data directory's
#     lock), and after a restart the stored point is still there.
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
echo_c="ingero-echo-test-$$"
echo_vol="ingero-echo-test-$$"
images=(ingero-fleet ingero-agent ingero-echo)

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    for c in "$fleet" "$agent" "$echo_c" "$echo_c-2"; do
      docker logs "$c" >/dev/null 2>&1 && { echo "--- docker logs $c (last 30 lines)" >&2; docker logs "$c" 2>&1 | tail -n 30 >&2; }
    done
  fi
  docker rm -f "$fleet" "$agent" "$echo_c" "$echo_c-2" >/dev/null 2>&1 || true
  docker volume rm "$echo_vol" >/dev/null 2>&1 || true
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

# ---- TLS by default: the images' configs do not start without certificates ------------
for i in "${images[@]}"; do
  conf="/etc/ingero/${i#ingero-}.yaml"
  [ "$i" = ingero-agent ] && continue
  if out="$(docker run --rm "${hardened[@]}" "$i:$tag" --config "$conf" validate 2>&1)"; then
    die "$i: $conf validated without certificates (TLS is the default)"
  fi
  grep -q '/etc/ingero/tls/tls.crt' <<<"$out" || die "$i: $conf refused, but not naming the certificate: $out"
  echo "ok   $i: $conf needs /etc/ingero/tls (plaintext only with ${conf%.yaml}-plaintext.yaml)"
done

# ---- Fleet (the explicit plaintext config) -------------------------------------------
docker network create "$net" >/dev/null
docker run -d --name "$fleet" --network "$net" "${hardened[@]}" \
  -p 127.0.0.1::4318 -p 127.0.0.1::8889 \
  "ingero-fleet:$tag" --config /etc/ingero/fleet-plaintext.yaml \
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

# ---- Echo: store on a named volume, tokens from the environment ------------------------
# The image's config requires bearer tokens on the API (INGERO_ECHO_TOKENS holds the tokens
# file): one for every cluster, one for another cluster only.
echo_token="image-test-$$-all-clusters-token"
echo_tokens="$(printf -- '- name: ops\n  token: %s\n  clusters: ["*"]\n- name: tenant-other\n  token: %s-other\n  clusters: [other]\n' "$echo_token" "$echo_token")"
docker volume create "$echo_vol" >/dev/null
run_echo() {
  docker run -d --name "$1" --network "$net" "${hardened[@]}" \
    -v "$echo_vol:/var/lib/ingero-echo" -e INGERO_ECHO_TOKENS="$echo_tokens" \
    -p 127.0.0.1::4328 -p 127.0.0.1::8090 "ingero-echo:$tag" \
    --config /etc/ingero/echo-plaintext.yaml >/dev/null
}
run_echo "$echo_c"
wait_healthy "$echo_c"
# What the running container is, not only what the image asks for.
uid="$(docker top "$echo_c" -eo pid,uid,comm | awk '$3 == "ingero-echo" { print $2 }')"
[ "$uid" = 65532 ] || die "ingero-echo runs as uid '$uid', not 65532"
[ "$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$echo_c")" = true ] || die "ingero-echo's root filesystem is writable"
[ "$(docker inspect -f '{{json .HostConfig.CapDrop}}' "$echo_c")" = '["ALL"]' ] || die "ingero-echo keeps capabilities"
echo "ok   ingero-echo: healthy, uid 65532, read-only root filesystem, every capability dropped"

echo_check() {
  python3 - "$(host_port "$echo_c" 4328)" "$(host_port "$echo_c" 8090)" "$echo_token" "$1" <<'EOF'
import json, sys, time, urllib.error, urllib.request
otlp_port, api_port, token, step = sys.argv[1:5]
def call(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
def tool(name, args, tok=token):
    return call(f"http://127.0.0.1:{api_port}/api/v1/tools/{name}", args,
                {"Authorization": f"Bearer {tok}"} if tok else {})
if step == "push":
    def attr(k, v): return {"key": k, "value": {"stringValue": v}}
    body = {"resourceMetrics": [{
        "resource": {"attributes": [attr("ingero.node.id", "probe-from-host"), attr("ingero.cluster.id", "docker-test")]},
        "scopeMetrics": [{"scope": {"name": "ingero.health", "version": "0.10.0"}, "metrics": [{
            "name": "ingero.node.health_score", "unit": "1",
            "gauge": {"dataPoints": [{"timeUnixNano": str(time.time_ns()), "asDouble": 0.93,
                "attributes": [attr("ingero.node.state", "active"), attr("ingero.workload_type", "unknown")]}]}}]}]}]}
    # Answered 200 only once the writer committed the batch.
    s, _ = call(f"http://127.0.0.1:{otlp_port}/v1/metrics", body, {})
    assert s == 200, f"push answered {s}"
    print("ok   ingero-echo: push from the host answered 200 (committed)")
    s, v = tool("fleet.cluster.summary", {"cluster_id": "docker-test"}, tok=None)
    assert s == 401, f"no token: {s} {v}"
    s, v = tool("fleet.cluster.summary", {"cluster_id": "docker-test"}, tok=token + "-other")
    assert s == 404, f"a token of another cluster: {s} {v}"
    s, v = tool("fleet.cluster.summary", {"cluster_id": "docker-test"})
    assert s == 200, f"summary: {s} {v}"
    c = v["clusters"][0]
    assert c["cluster_id"] == "docker-test" and c["nodes"] == 1 and c["health_points"] == 1, v
    print(f"ok   ingero-echo: fleet.cluster.summary: {c['nodes']} node, {c['health_points']} health point; no token 401, other cluster's token 404")
# Both steps: the point is in the store (after the restart, read from the volume).
s, v = tool("fleet.cluster.run_analysis", {"sql": "SELECT node_id, score FROM health_scores WHERE cluster_id = 'docker-test'"})
assert s == 200, f"run_analysis: {s} {v}"
assert v["rows"] == [["probe-from-host", 0.93]], v
print(f"ok   ingero-echo: fleet.cluster.run_analysis ({step}): {v['rows']}")
EOF
}
echo_check push

# One writer per data directory: a second container on the same volume refuses to start.
if out="$(timeout 60 docker run --name "$echo_c-2" --network "$net" "${hardened[@]}" \
  -v "$echo_vol:/var/lib/ingero-echo" -e INGERO_ECHO_TOKENS="$echo_tokens" "ingero-echo:$tag" \
  --config /etc/ingero/echo-plaintext.yaml 2>&1)"; then
  die "a second ingero-echo on the same volume ran (and exited 0) instead of refusing"
fi
grep -q "is in use by another ingero-echo" <<<"$out" || die "the second ingero-echo failed, but not on the lock: $(tail -n 5 <<<"$out")"
echo "ok   ingero-echo: a second container on the same volume refuses to start (the lock)"

# The store outlives the container: stop (SIGTERM: drain, close the store), start anew.
docker stop -t 30 "$echo_c" >/dev/null
docker rm "$echo_c" >/dev/null
run_echo "$echo_c"
wait_healthy "$echo_c"
echo_check restart
echo "image-test: all images passed"
