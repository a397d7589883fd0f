#!/usr/bin/env bash
# Checks the Helm charts in deploy/helm/: `helm lint --strict` and `helm template` with the
# defaults and with each chart's ci/production-values.yaml, then the Go test in
# deploy/helm/test, which renders every chart with Helm's engine and decodes each object
# strictly into the Kubernetes API types (see that file). A chart whose install needs values
# (ingero-echo: a StorageClass declared encrypted, an API token) has ci/default-values.yaml
# with just those, used in place of the bare defaults; for ingero-echo the bare defaults
# must fail to render, saying why (its fail-closed storage rule; `helm lint` reports a
# template's `fail` without failing, so only a render proves it). Each chart's TLS modes
# (a Secret, cert-manager, explicit plaintext) are linted and rendered. The Go test also
# runs rendered configs for real on loopback: the sharded front end's nginx.conf in a real
# nginx before two Fleet replicas over TLS, Fleet forwarding to Echo over mTLS, and the
# agent chart's arguments in three ingero-agents (synthetic source) reaching the Fleet
# chart's threshold over mTLS with a token and over explicit plaintext, their query APIs
# answering over the chart's TLS and token (and explicit plaintext); each of those has a
# deadline and ends its processes, and go test has a 300 s ceiling. helm is built from the
# Go module proxy on first use and cached under target/tools.
# Usage: scripts/helm-test.sh [FLEET_BIN [ECHO_BIN [AGENT_BIN]]]   (the test validates the
#        rendered configs with these binaries; default target/debug/ingero-fleet and the
#        ingero-echo and ingero-agent beside FLEET_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
HELM_VERSION=v3.19.5
tools="${CARGO_TARGET_DIR:-$root/target}/tools"
helm="$tools/bin/helm"
fleet_bin="${1:-${CARGO_TARGET_DIR:-$root/target}/debug/ingero-fleet}"
[ -x "$fleet_bin" ] || { echo "helm-test: $fleet_bin not found (cargo build -p ingero-fleet)" >&2; exit 1; }
fleet_bin="$(cd "$(dirname "$fleet_bin")" && pwd)/$(basename "$fleet_bin")"
echo_bin="${2:-$(dirname "$fleet_bin")/ingero-echo}"
[ -x "$echo_bin" ] || { echo "helm-test: $echo_bin not found (cargo build -p ingero-echo)" >&2; exit 1; }
echo_bin="$(cd "$(dirname "$echo_bin")" && pwd)/$(basename "$echo_bin")"
agent_bin="${3:-$(dirname "$fleet_bin")/ingero-agent}"
[ -x "$agent_bin" ] || { echo "helm-test: $agent_bin not found (cargo build -p ingero-agent)" >&2; exit 1; }
agent_bin="$(cd "$(dirname "$agent_bin")" && pwd)/$(basename "$agent_bin")"

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
# `go install` does not stamp helm's version (it prints only v3.19), so a file beside it does.
if ! [ -x "$helm" ] || [ "$(cat "$helm.version" 2>/dev/null)" != "$HELM_VERSION" ]; then
  echo "helm-test: building helm $HELM_VERSION from the Go module proxy into $tools/bin"
  mkdir -p "$tools/bin"
  GOBIN="$tools/bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" >"$helm.version"
fi

fail=0
for chart in deploy/helm/ingero-*/; do
  chart="${chart%/}"
  name="$(basename "$chart")"
  defaults=""
  [ -f "$chart/ci/default-values.yaml" ] && defaults="$chart/ci/default-values.yaml"
  for values in "$defaults" "$chart/ci/production-values.yaml"; do
    for cmd in lint template; do
      args=("$cmd")
      [ "$cmd" = lint ] && args+=(--strict "$chart") || args+=(--kube-version 1.31.0 "$name" "$chart")
      [ -n "$values" ] && args+=(-f "$values")
      if out="$("$helm" "${args[@]}" 2>&1)"; then
        echo "ok   helm $cmd $name ${values:+with $(basename "$values")}"
      else
        echo "FAIL helm ${args[*]}:" >&2
        echo "$out" >&2
        fail=1
      fi
    done
  done
done

# ingero-echo fails closed: no render without a StorageClass declared encrypted (the
# bare defaults, and with every other required value given), and renders with the explicit
# override only.
echo_chart=deploy/helm/ingero-echo
refusal="StorageClass is not declared encrypted at rest"
token=(--set 'auth.tokensFile[0].name=ops' --set 'auth.tokensFile[0].token_env=T' --set 'auth.tokensFile[0].clusters[0]=*')
refuse() {
  local what="$1"; shift
  if out="$("$helm" template --kube-version 1.31.0 echo "$echo_chart" "$@" 2>&1)"; then
    echo "FAIL helm template ingero-echo ($what) rendered without an encrypted StorageClass" >&2
    fail=1
  elif ! grep -q "$refusal" <<<"$out"; then
    echo "FAIL helm template ingero-echo ($what) failed, but not with '$refusal':" >&2
    echo "$out" >&2
    fail=1
  else
    echo "ok   helm template ingero-echo refused ($what): '...$refusal...'"
  fi
}
refuse "the defaults"
refuse "a token" "${token[@]}"
refuse "a token, a class not declared encrypted" "${token[@]}" --set persistence.storageClassName=fast-ssd
refuse "a token, a class, storageClassEncrypted=false" "${token[@]}" --set persistence.storageClassName=fast-ssd \
  --set persistence.storageClassEncrypted=false
if out="$("$helm" template --kube-version 1.31.0 echo "$echo_chart" "${token[@]}" --set tls.existingSecret=echo-tls --set persistence.allowUnencrypted=true 2>&1)" &&
  grep -q 'ingero.io/storage-encryption: unencrypted-allowed' <<<"$out"; then
  echo "ok   helm template ingero-echo with persistence.allowUnencrypted=true renders, annotated unencrypted-allowed"
else
  echo "FAIL helm template ingero-echo with persistence.allowUnencrypted=true:" >&2
  echo "$out" >&2
  fail=1
fi
# TLS is the default in every chart: without a certificate source (a Secret, PEM values,
# or cert-manager's API) nothing renders; plaintext renders only as an explicit value
# (tls.enabled=false; for the agent fleet.tls.enabled=false and an http:// endpoint).
agent_chart=deploy/helm/ingero-agent
for chart in deploy/helm/ingero-fleet "$echo_chart" "$agent_chart"; do
  extra=() tls_off=(--set tls.enabled=false) plain_want="allow_plaintext_listeners: true" refusal="TLS is on by default"
  [ "$chart" = "$echo_chart" ] && extra=("${token[@]}" --set persistence.allowUnencrypted=true)
  if [ "$chart" = "$agent_chart" ]; then
    tls_off=(--set fleet.tls.enabled=false --set fleet.endpoint=http://ingero-fleet:4318)
    plain_want="--fleet-endpoint=http://ingero-fleet:4318" refusal="TLS to Fleet is on by default"
  fi
  if out="$("$helm" template --kube-version 1.31.0 t "$chart" "${extra[@]}" 2>&1)"; then
    echo "FAIL helm template $chart rendered without a TLS certificate" >&2
    fail=1
  elif ! grep -q "$refusal" <<<"$out"; then
    echo "FAIL helm template $chart failed, but not for TLS:" >&2
    echo "$out" >&2
    fail=1
  elif ! out="$("$helm" template --kube-version 1.31.0 t "$chart" "${extra[@]}" "${tls_off[@]}" 2>&1)" ||
    ! grep -q -- "$plain_want" <<<"$out"; then
    echo "FAIL helm template $chart with ${tls_off[*]}:" >&2
    echo "$out" >&2
    fail=1
  else
    echo "ok   helm template $(basename "$chart"): refused without a certificate; plaintext only with ${tls_off[*]}"
  fi
  # The three certificate modes, each linted strictly and rendered: a Secret (the ci
  # defaults), cert-manager's Certificate when its API is served (the sharded front end
  # and, for Fleet, forwarding to Echo on), and explicit plaintext.
  name="$(basename "$chart")"
  mode_extra=() plain_extra=()
  if [ "$chart" = deploy/helm/ingero-fleet ]; then
    mode_extra=(--set sharding.enabled=true --set echo.enabled=true
      --set echo.endpoint=ingero-echo.ingero.svc.cluster.local:4327 --set echo.token.secretName=echo-token)
    plain_extra=(--set echo.plaintext=true)
  fi
  for mode in secret cert-manager plaintext; do
    case "$mode" in
      secret) args=(--set tls.existingSecret=t-tls); want="secretName: t-tls" ;;
      cert-manager) args=(--api-versions cert-manager.io/v1); want="kind: Certificate" ;;
      plaintext) args=("${tls_off[@]}" "${plain_extra[@]}"); want="$plain_want" ;;
    esac
    [ "$chart" = "$agent_chart" ] && [ "$mode" = secret ] && args=(--set fleet.tls.existingSecret=t-tls)
    # helm lint has no --api-versions (it cannot see cert-manager's API), so that mode is
    # rendered only; the Go test decodes its objects strictly.
    lint_args=("${args[@]}")
    [ "$mode" = cert-manager ] && lint_args=()
    if [ "${#lint_args[@]}" -gt 0 ] &&
      ! out="$("$helm" lint --strict "$chart" "${extra[@]}" "${mode_extra[@]}" "${lint_args[@]}" 2>&1)"; then
      echo "FAIL helm lint $name ($mode):" >&2
      echo "$out" >&2
      fail=1
    elif ! out="$("$helm" template --kube-version 1.31.0 t "$chart" "${extra[@]}" "${mode_extra[@]}" "${args[@]}" 2>&1)" ||
      ! grep -q -- "$want" <<<"$out"; then
      echo "FAIL helm template $name ($mode): no '$want'" >&2
      echo "$out" >&2
      fail=1
    else
      echo "ok   helm ${lint_args[*]:+lint and }template $name, TLS mode $mode"
    fi
  done
done
# Half a TLS config is refused: the agent's certificate with a plaintext endpoint.
if out="$("$helm" template --kube-version 1.31.0 t "$agent_chart" --set fleet.tls.existingSecret=t-tls \
  --set fleet.endpoint=http://ingero-fleet:4318 2>&1)" || ! grep -q 'is plaintext: give an https:// endpoint' <<<"$out"; then
  echo "FAIL helm template ingero-agent with a certificate and an http:// endpoint:" >&2
  echo "$out" >&2
  fail=1
else
  echo "ok   helm template ingero-agent refused a certificate with an http:// endpoint"
fi
# The agent's query API (api.enabled) serves TLS by default: refused without a certificate
# source, then each mode linted (cert-manager rendered only, as above) and rendered.
api=(--set fleet.tls.existingSecret=t-tls --set api.enabled=true)
if out="$("$helm" template --kube-version 1.31.0 t "$agent_chart" "${api[@]}" 2>&1)" ||
  ! grep -q 'The query API serves TLS by default' <<<"$out"; then
  echo "FAIL helm template ingero-agent with api.enabled and no API certificate:" >&2
  echo "$out" >&2
  fail=1
else
  echo "ok   helm template ingero-agent refused the query API without a certificate"
fi
for mode in secret cert-manager plaintext; do
  case "$mode" in
    secret) args=(--set api.tls.existingSecret=t-api-tls); want="--api-tls-cert=/etc/ingero/api-tls/tls.crt" ;;
    cert-manager) args=(--api-versions cert-manager.io/v1); want="name: t-ingero-agent-api-tls" ;;
    plaintext) args=(--set api.tls.enabled=false); want="--api-no-tls" ;;
  esac
  if [ "$mode" != cert-manager ] && ! out="$("$helm" lint --strict "$agent_chart" "${api[@]}" "${args[@]}" 2>&1)"; then
    echo "FAIL helm lint ingero-agent (query API, $mode):" >&2
    echo "$out" >&2
    fail=1
  elif ! out="$("$helm" template --kube-version 1.31.0 t "$agent_chart" "${api[@]}" "${args[@]}" 2>&1)" ||
    ! grep -q -- "$want" <<<"$out"; then
    echo "FAIL helm template ingero-agent (query API, $mode): no '$want'" >&2
    echo "$out" >&2
    fail=1
  else
    echo "ok   helm template ingero-agent, query API TLS mode $mode"
  fi
done
[ "$fail" = 0 ] || exit 1

echo "helm-test: rendering and strict decoding (deploy/helm/test)"
(cd deploy/helm/test && FLEET_BIN="$fleet_bin" ECHO_BIN="$echo_bin" AGENT_BIN="$agent_bin" go test -count=1 -timeout 300s ./...)
