{{- define "ingero-echo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ingero-echo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "ingero-echo.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "ingero-echo.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ingero-echo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ingero-echo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ingero
{{- end }}

{{- define "ingero-echo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ingero-echo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: echo
{{- end }}

{{- define "ingero-echo.headless" -}}
{{- printf "%s-headless" (include "ingero-echo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The tokens file's Secret (key tokens.yaml): the existing one, or the chart's. */}}
{{- define "ingero-echo.authSecret" -}}
{{- default (printf "%s-auth" (include "ingero-echo.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* The token values' Secret (auth.tokenValues, as environment variables): always the chart's. */}}
{{- define "ingero-echo.tokenValuesSecret" -}}
{{- printf "%s-auth-tokens" (include "ingero-echo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The encrypted-storage guard: Echo's volume holds the cluster's whole history, so the render
fails unless the StorageClass is declared encrypted at rest (a named class and
persistence.storageClassEncrypted=true), or the operator explicitly accepts an unencrypted
volume (persistence.allowUnencrypted=true). Both must be booleans: a string "false" is true
to a template, so a string is refused rather than read.
*/}}
{{- define "ingero-echo.storageEncryption" -}}
{{- $p := .Values.persistence }}
{{- if not (kindIs "bool" $p.storageClassEncrypted) }}
{{- fail (printf "persistence.storageClassEncrypted must be a boolean (true or false), not %q" (toString $p.storageClassEncrypted)) }}
{{- end }}
{{- if not (kindIs "bool" $p.allowUnencrypted) }}
{{- fail (printf "persistence.allowUnencrypted must be a boolean (true or false), not %q" (toString $p.allowUnencrypted)) }}
{{- end }}
{{- if $p.storageClassEncrypted }}
{{- if not $p.storageClassName }}
{{- fail "persistence.storageClassEncrypted=true declares a StorageClass encrypted, but persistence.storageClassName names none (the cluster's default class is not assumed to be encrypted): name the encrypted class" }}
{{- end }}
{{- print "declared-encrypted" }}
{{- else if $p.allowUnencrypted }}
{{- print "unencrypted-allowed" }}
{{- else }}
{{- fail "refusing to install: Echo's volume holds the cluster's whole history and its StorageClass is not declared encrypted at rest. Set persistence.storageClassName to an encrypted StorageClass and persistence.storageClassEncrypted=true; or, to accept an unencrypted volume explicitly (a trial), persistence.allowUnencrypted=true" }}
{{- end }}
{{- end }}

{{- define "ingero-echo.tlsSecret" -}}
{{- default (printf "%s-tls" (include "ingero-echo.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/* Where the TLS certificate comes from: none (tls.enabled=false), secret, inline,
cert-manager, or "" when TLS is on and nothing provides it. */}}
{{- define "ingero-echo.tlsSource" -}}
{{- $cm := toString .Values.tls.certManager.enabled }}
{{- if not .Values.tls.enabled }}none
{{- else if .Values.tls.existingSecret }}secret
{{- else if or .Values.tls.cert .Values.tls.key }}inline
{{- else if or (eq $cm "true") (and (eq $cm "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}cert-manager
{{- end }}
{{- end }}

{{/* Checks the values a schema cannot express; fails the render otherwise. */}}
{{- define "ingero-echo.validate" -}}
{{- $_ := include "ingero-echo.storageEncryption" . }}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (not .Values.auth.tokensFile) }}
{{- fail "auth.enabled needs auth.tokensFile (with auth.tokenValues) or auth.existingSecret with tokens.yaml: the API serves the whole history. Set auth.enabled=false only where the NetworkPolicy admits trusted clients alone" }}
{{- end }}
{{- if not (regexMatch "^[0-9]+s$" (toString .Values.shutdownTimeout)) }}
{{- fail "shutdownTimeout must be whole seconds, e.g. 10s (the pod's grace period is derived from it)" }}
{{- end }}
{{- $src := include "ingero-echo.tlsSource" . }}
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
{{- end }}

{{/* The second config file: the API's Host names, and auth, merged over `config`. */}}
{{- define "ingero-echo.overlay" -}}
{{- $full := include "ingero-echo.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list "localhost" "127.0.0.1" "[::1]" $full (printf "%s.%s" $full $ns) (printf "%s.%s.svc" $full $ns) (printf "%s.%s.svc.%s" $full $ns .Values.clusterDomain) }}
{{- $hosts = concat $hosts .Values.api.allowedHosts }}
{{- $api := dict "allowed_hosts" $hosts }}
{{- $overlay := dict }}
{{- if .Values.auth.enabled }}
{{- $a := dict "authenticator" "ingero_auth" }}
{{- $_ := set $api "auth" $a }}
{{- $_ := set $overlay "extensions" (dict "ingero_auth" (dict "tokens_file" "/etc/ingero/auth/tokens.yaml" "audit_log" "stderr")) }}
{{- $svcExt := prepend (without .Values.config.service.extensions "ingero_auth") "ingero_auth" }}
{{- $_ := set $overlay "service" (dict "extensions" $svcExt) }}
{{- if .Values.auth.otlp }}
{{- $_ := set $overlay "receivers" (dict "otlp" (dict "protocols" (dict "grpc" (dict "auth" $a) "http" (dict "auth" $a)))) }}
{{- end }}
{{- end }}
{{- $ext := default dict $overlay.extensions }}
{{- $svc := default dict $overlay.service }}
{{- if .Values.tls.enabled }}
{{- $tls := dict "cert_file" "/etc/ingero/tls/tls.crt" "key_file" "/etc/ingero/tls/tls.key" "reload_interval" .Values.tls.reloadInterval }}
{{- $otlpTls := deepCopy $tls }}
{{- if .Values.tls.requireClientCert }}
{{- $_ := set $otlpTls "client_ca_file" "/etc/ingero/tls/ca.crt" }}
{{- end }}
{{- $recv := dict "otlp" (dict "protocols" (dict "grpc" (dict "tls" $otlpTls) "http" (dict "tls" (deepCopy $otlpTls)))) }}
{{- $_ := set $overlay "receivers" (mergeOverwrite (default dict $overlay.receivers) $recv) }}
{{- $_ := set $api "tls" (deepCopy $tls) }}
{{- $_ := set $ext "health_check" (dict "tls" (deepCopy $tls)) }}
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
{{- $_ := set $ext "echo_api" $api }}
{{- $_ := set $overlay "extensions" $ext }}
{{- if $svc }}
{{- $_ := set $overlay "service" $svc }}
{{- end }}
{{- toYaml $overlay }}
{{- end }}
