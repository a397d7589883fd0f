{{- define "ingero-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ingero-fleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "ingero-fleet.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "ingero-fleet.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ingero-fleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ingero-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ingero
{{- end }}

{{/* Selector of the Fleet pods (not the front end's). */}}
{{- define "ingero-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ingero-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: collector
{{- end }}

{{- define "ingero-fleet.frontEndSelectorLabels" -}}
app.kubernetes.io/name: {{ include "ingero-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: front-end
{{- end }}

{{- define "ingero-fleet.tlsSecret" -}}
{{- default (printf "%s-tls" (include "ingero-fleet.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{- define "ingero-fleet.authSecret" -}}
{{- default (printf "%s-auth" (include "ingero-fleet.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* The headless Service naming the sharded replicas. */}}
{{- define "ingero-fleet.headless" -}}
{{- printf "%s-replicas" (include "ingero-fleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Where the TLS certificate comes from: none (tls.enabled=false), secret, inline,
cert-manager, or "" when TLS is on and nothing provides it. */}}
{{- define "ingero-fleet.tlsSource" -}}
{{- $cm := toString .Values.tls.certManager.enabled }}
{{- if not .Values.tls.enabled }}none
{{- else if .Values.tls.existingSecret }}secret
{{- else if or .Values.tls.cert .Values.tls.key }}inline
{{- else if or (eq $cm "true") (and (eq $cm "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}cert-manager
{{- end }}
{{- end }}

{{/* Checks the values that cannot be expressed in a schema; fails the render otherwise. */}}
{{- define "ingero-fleet.validate" -}}
{{- $src := include "ingero-fleet.tlsSource" . }}
{{- if not (has (toString .Values.tls.certManager.enabled) (list "auto" "true" "false")) }}
{{- fail "tls.certManager.enabled must be auto, true or false" }}
{{- end }}
{{- if eq $src "" }}
{{- fail "TLS is on by default (tls.enabled) and needs a certificate: set tls.existingSecret (a kubernetes.io/tls Secret, with ca.crt for client certificates), or tls.cert and tls.key, or install cert-manager (tls.certManager); tls.enabled=false serves plaintext" }}
{{- end }}
{{- if and (eq $src "inline") (or (not .Values.tls.cert) (not .Values.tls.key)) }}
{{- fail "tls.cert and tls.key go together" }}
{{- end }}
{{- if and (eq $src "cert-manager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}
{{- fail "tls.certManager.enabled=true, but the cert-manager API (cert-manager.io/v1) is not installed" }}
{{- end }}
{{- if and (eq $src "inline") .Values.tls.requireClientCert (not .Values.tls.clientCA) }}
{{- fail "tls.requireClientCert needs tls.clientCA (or an existingSecret with ca.crt); set tls.requireClientCert=false for server-only TLS" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (not .Values.auth.tokensFile) }}
{{- fail "auth.enabled needs auth.tokensFile (or auth.existingSecret with tokens.yaml)" }}
{{- end }}
{{- if not (regexMatch "^[0-9]+s$" (toString .Values.shutdownTimeout)) }}
{{- fail "shutdownTimeout must be whole seconds, e.g. 10s (the pod's grace period is derived from it)" }}
{{- end }}
{{- if and .Values.sharding.enabled .Values.tls.enabled (eq $src "inline") (not .Values.tls.clientCA) }}
{{- fail "sharding with TLS needs tls.clientCA: the front end checks the replicas' certificates against it (ca.crt) and shows tls.cert to them" }}
{{- end }}
{{- if .Values.echo.enabled }}
{{- if not (regexMatch "^([A-Za-z0-9.-]+|\\[[0-9A-Fa-f:.]+\\]):[0-9]+$" (toString .Values.echo.endpoint)) }}
{{- fail "echo.endpoint must be Echo's OTLP/gRPC receiver as host:port, e.g. echo-ingero-echo.ingero.svc:4327" }}
{{- end }}
{{- if and (not .Values.echo.plaintext) (not .Values.echo.tls.caSecret) (not .Values.tls.enabled) }}
{{- fail "echo.tls.caSecret is needed: with tls.enabled=false this release has no ca.crt to check Echo's certificate against (echo.plaintext=true sends plaintext)" }}
{{- end }}
{{- if and .Values.echo.token.required (not .Values.echo.token.secretName) }}
{{- fail "echo.token.secretName is needed: Echo's chart requires a bearer token on OTLP (auth.otlp); give the Secret holding a \"*\" token of Echo's tokens file, or set echo.token.required=false" }}
{{- end }}
{{- end }}
{{- if and .Values.sharding.enabled (lt (int .Values.sharding.replicas) 2) }}
{{- fail "sharding.replicas must be at least 2 (one replica needs no front end: set sharding.enabled=false)" }}
{{- end }}
{{- end }}

{{/* The second config file: TLS and auth blocks merged over `config`. */}}
{{- define "ingero-fleet.overlay" -}}
{{- $overlay := dict }}
{{- $svc := dict }}
{{- if .Values.tls.enabled }}
{{- $tls := dict "cert_file" "/etc/ingero/tls/tls.crt" "key_file" "/etc/ingero/tls/tls.key" "reload_interval" .Values.tls.reloadInterval }}
{{- $agentTls := deepCopy $tls }}
{{- if .Values.tls.requireClientCert }}
{{- $_ := set $agentTls "client_ca_file" "/etc/ingero/tls/ca.crt" }}
{{- end }}
{{- $_ := set $overlay "receivers" (dict "otlp" (dict "protocols" (dict "grpc" (dict "tls" $agentTls) "http" (dict "tls" $agentTls)))) }}
{{- $_ := set $overlay "extensions" (dict "ingero_threshold" (dict "tls" $agentTls) "health_check" (dict "tls" (deepCopy $tls))) }}
{{- $_ := set $overlay "exporters" (dict "prometheus" (dict "tls" (deepCopy $tls))) }}
{{- with .Values.config.service.telemetry }}
{{- $tel := deepCopy . }}
{{- range (dig "metrics" "readers" list $tel) }}
{{- $p := dig "pull" "exporter" "prometheus" dict . }}
{{- if $p }}{{- $_ := set $p "tls" (deepCopy $tls) }}{{- end }}
{{- end }}
{{- $_ := set $svc "telemetry" $tel }}
{{- end }}
{{- else }}
{{- $_ := set $svc "allow_plaintext_listeners" true }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- $a := dict "auth" (dict "authenticator" "ingero_auth") }}
{{- $recv := dict "otlp" (dict "protocols" (dict "grpc" $a "http" $a)) }}
{{- $_ := set $overlay "receivers" (mergeOverwrite (default dict $overlay.receivers) $recv) }}
{{- $ext := default dict $overlay.extensions }}
{{- $_ := set $ext "ingero_threshold" (mergeOverwrite (default dict $ext.ingero_threshold) $a) }}
{{- $_ := set $ext "ingero_auth" (dict "tokens_file" "/etc/ingero/auth/tokens.yaml" "audit_log" "stderr") }}
{{- $_ := set $overlay "extensions" $ext }}
{{- $svcExt := prepend (without .Values.config.service.extensions "ingero_auth") "ingero_auth" }}
{{- $_ := set $svc "extensions" $svcExt }}
{{- end }}
{{- with (include "ingero-fleet.echoExporter" . | fromYaml) }}
{{- $exporters := default dict $overlay.exporters }}
{{- $_ := set $exporters "otlp/echo" . }}
{{- $_ := set $overlay "exporters" $exporters }}
{{- $pipeline := deepCopy (dig "pipelines" "metrics" dict $.Values.config.service) }}
{{- $_ := set $pipeline "exporters" (append (without (dig "exporters" list $pipeline) "otlp/echo") "otlp/echo") }}
{{- $_ := set $svc "pipelines" (dict "metrics" $pipeline) }}
{{- end }}
{{- if $svc }}
{{- $_ := set $overlay "service" $svc }}
{{- end }}
{{- toYaml $overlay }}
{{- end }}

{{/* The otlp/echo exporter (echo.enabled), as YAML; empty when off. Files: Echo's CA at
/etc/ingero/echo-ca (echo.tls.caSecret) or the release's ca.crt; the client certificate at
/etc/ingero/echo-client (echo.tls.clientCertSecret) or the release's own. */}}
{{- define "ingero-fleet.echoExporter" -}}
{{- $e := .Values.echo }}
{{- if $e.enabled }}
{{- $exp := dict "endpoint" $e.endpoint "timeout" $e.timeout "compression" "gzip" }}
{{- $_ := set $exp "sending_queue" (dict "enabled" true "queue_size" (int $e.queueSize)) }}
{{- $_ := set $exp "retry_on_failure" (dict "enabled" true "initial_interval" "1s" "max_interval" "30s" "max_elapsed_time" $e.maxElapsedTime) }}
{{- if $e.plaintext }}
{{- $_ := set $exp "tls" (dict "insecure" true) }}
{{- else }}
{{- $t := dict "ca_file" (ternary "/etc/ingero/echo-ca/ca.crt" "/etc/ingero/tls/ca.crt" (not (empty $e.tls.caSecret))) }}
{{- if $e.tls.clientCertSecret }}
{{- $_ := set $t "cert_file" "/etc/ingero/echo-client/tls.crt" }}
{{- $_ := set $t "key_file" "/etc/ingero/echo-client/tls.key" }}
{{- else if .Values.tls.enabled }}
{{- $_ := set $t "cert_file" "/etc/ingero/tls/tls.crt" }}
{{- $_ := set $t "key_file" "/etc/ingero/tls/tls.key" }}
{{- end }}
{{- with $e.tls.serverName }}
{{- $_ := set $t "server_name_override" . }}
{{- end }}
{{- $_ := set $exp "tls" $t }}
{{- end }}
{{- if $e.token.secretName }}
{{- $_ := set $exp "headers" (dict "authorization" "Bearer ${env:INGERO_ECHO_TOKEN}") }}
{{- end }}
{{- toYaml $exp }}
{{- end }}
{{- end }}
