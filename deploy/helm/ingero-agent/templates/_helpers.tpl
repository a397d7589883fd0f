{{- define "ingero-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ingero-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "ingero-agent.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "ingero-agent.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ingero-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ingero-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ingero
{{- end }}

{{- define "ingero-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ingero-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* The TCP port of a Fleet URL as the agent reads it: an explicit port, else 80 for
http:// and 443 otherwise (a bare host is https unless --fleet-insecure, which keeps
the explicit port it needs). */}}
{{- define "ingero-agent.urlPort" -}}
{{- $rest := . }}
{{- $scheme := "https" }}
{{- if contains "://" $rest }}
{{- $parts := splitn "://" 2 $rest }}
{{- $scheme = lower $parts._0 }}
{{- $rest = $parts._1 }}
{{- end }}
{{- $hostport := (splitn "/" 2 $rest)._0 }}
{{- if regexMatch ":[0-9]+$" $hostport }}
{{- regexFind "[0-9]+$" $hostport }}
{{- else if eq $scheme "http" }}80
{{- else }}443
{{- end }}
{{- end }}

{{/* The destination ports of the agent's egress to Fleet: networkPolicy.fleetPorts, else
the ports of fleet.endpoint and fleet.thresholdUrl. A comma-separated list. */}}
{{- define "ingero-agent.fleetPorts" -}}
{{- $ports := list }}
{{- if .Values.networkPolicy.fleetPorts }}
{{- range .Values.networkPolicy.fleetPorts }}{{ $ports = append $ports (toString .) }}{{ end }}
{{- else }}
{{- $ports = append $ports (include "ingero-agent.urlPort" .Values.fleet.endpoint) }}
{{- with .Values.fleet.thresholdUrl }}{{ $ports = append $ports (include "ingero-agent.urlPort" .) }}{{ end }}
{{- end }}
{{- $ports | uniq | join "," }}
{{- end }}

{{/* Where the client certificate for Fleet comes from: none (fleet.tls.enabled=false),
secret (fleet.tls.existingSecret), cert-manager, or "" when TLS is on and nothing
provides it. */}}
{{- define "ingero-agent.tlsSource" -}}
{{- $t := .Values.fleet.tls }}
{{- $cm := toString $t.certManager.enabled }}
{{- if not $t.enabled }}none
{{- else if $t.existingSecret }}secret
{{- else if or (eq $cm "true") (and (eq $cm "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}cert-manager
{{- end }}
{{- end }}

{{/* The Secret mounted at /etc/ingero/tls: the given one, or the one cert-manager writes. */}}
{{- define "ingero-agent.tlsSecret" -}}
{{- default (printf "%s-tls" (include "ingero-agent.fullname" .)) .Values.fleet.tls.existingSecret }}
{{- end }}

{{/* Where the query API's certificate comes from: "" when the API is off, none
(api.tls.enabled=false), secret (api.tls.existingSecret), cert-manager, or "missing" when
TLS is on and nothing provides it. */}}
{{- define "ingero-agent.apiTlsSource" -}}
{{- $a := .Values.api }}
{{- $cm := toString $a.tls.certManager.enabled }}
{{- if not $a.enabled }}
{{- else if not $a.tls.enabled }}none
{{- else if $a.tls.existingSecret }}secret
{{- else if or (eq $cm "true") (and (eq $cm "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}cert-manager
{{- else }}missing
{{- end }}
{{- end }}

{{/* The Secret mounted at /etc/ingero/api-tls: the given one, or the one cert-manager writes. */}}
{{- define "ingero-agent.apiTlsSecret" -}}
{{- default (printf "%s-api-tls" (include "ingero-agent.fullname" .)) .Values.api.tls.existingSecret }}
{{- end }}

{{/* The scheme of fleet.endpoint as the agent reads it: http for http:// or, with
fleet.insecure, a bare host:port; https otherwise. */}}
{{- define "ingero-agent.scheme" -}}
{{- $e := toString .Values.fleet.endpoint }}
{{- if contains "://" $e }}{{ lower (splitn "://" 2 $e)._0 }}
{{- else if .Values.fleet.insecure }}http
{{- else }}https
{{- end }}
{{- end }}

{{/* Checks the values; fails the render with the reason otherwise. */}}
{{- define "ingero-agent.validate" -}}
{{- $t := .Values.fleet.tls }}
{{- $src := include "ingero-agent.tlsSource" . }}
{{- $scheme := include "ingero-agent.scheme" . }}
{{- if not .Values.fleet.clusterId }}
{{- fail "fleet.clusterId is required (the cluster these nodes report as)" }}
{{- end }}
{{- if not .Values.fleet.endpoint }}
{{- fail "fleet.endpoint is required (Fleet's OTLP/HTTP receiver, e.g. https://ingero-fleet.ingero.svc:4318)" }}
{{- end }}
{{- if not (has (toString $t.certManager.enabled) (list "auto" "true" "false")) }}
{{- fail "fleet.tls.certManager.enabled must be auto, true or false" }}
{{- end }}
{{- if eq $src "" }}
{{- fail "TLS to Fleet is on by default (fleet.tls.enabled) and needs a client certificate: set fleet.tls.existingSecret (a Secret with ca.crt, tls.crt and tls.key), or install cert-manager (fleet.tls.certManager, issued by the Issuer that issues Fleet's certificate); fleet.tls.enabled=false with an http:// endpoint sends plaintext" }}
{{- end }}
{{- if and (eq $src "cert-manager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}
{{- fail "fleet.tls.certManager.enabled=true, but the cert-manager API (cert-manager.io/v1) is not installed" }}
{{- end }}
{{- if and (eq $src "cert-manager") (not $t.certManager.issuerRef.name) }}
{{- fail "fleet.tls.certManager.issuerRef.name is needed: the Issuer (or ClusterIssuer) that issues Fleet's certificate, e.g. the Fleet chart's <release>-ca" }}
{{- end }}
{{- if and $t.enabled (ne $scheme "https") }}
{{- fail (printf "fleet.tls.enabled is on, but fleet.endpoint %q is plaintext: give an https:// endpoint, or set fleet.tls.enabled=false to send plaintext" (toString .Values.fleet.endpoint)) }}
{{- end }}
{{- with .Values.fleet.thresholdUrl }}
{{- if and $t.enabled (hasPrefix "http://" (lower .)) }}
{{- fail (printf "fleet.thresholdUrl %q is plaintext while fleet.tls.enabled is on: give its https:// URL" .) }}
{{- end }}
{{- end }}
{{- if and (not $t.enabled) $t.existingSecret }}
{{- fail "fleet.tls.existingSecret is given but fleet.tls.enabled is false: the certificate would not be used" }}
{{- end }}
{{- if and $t.caSecret (not $t.enabled) }}
{{- fail "fleet.tls.caSecret is given but fleet.tls.enabled is false: the CA would not be used" }}
{{- end }}
{{- if and .Values.fleet.token.enabled (not .Values.fleet.token.existingSecret) }}
{{- fail "fleet.token.enabled needs fleet.token.existingSecret (a Secret with the bearer token under fleet.token.key)" }}
{{- end }}
{{- $a := .Values.api }}
{{- $apiSrc := include "ingero-agent.apiTlsSource" . }}
{{- if not (has (toString $a.tls.certManager.enabled) (list "auto" "true" "false")) }}
{{- fail "api.tls.certManager.enabled must be auto, true or false" }}
{{- end }}
{{- if eq $apiSrc "missing" }}
{{- fail "The query API serves TLS by default (api.tls.enabled) and needs a certificate: set api.tls.existingSecret (a kubernetes.io/tls Secret, plus ca.crt with api.tls.requireClientCert), or install cert-manager (api.tls.certManager); api.tls.enabled=false serves plaintext" }}
{{- end }}
{{- if and (eq $apiSrc "cert-manager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}
{{- fail "api.tls.certManager.enabled=true, but the cert-manager API (cert-manager.io/v1) is not installed" }}
{{- end }}
{{- if and (eq $apiSrc "cert-manager") (not $a.tls.certManager.issuerRef.name) }}
{{- fail "api.tls.certManager.issuerRef.name is needed: the Issuer (or ClusterIssuer) that issues the API's certificate" }}
{{- end }}
{{- if and $a.enabled (not $a.tls.enabled) $a.tls.existingSecret }}
{{- fail "api.tls.existingSecret is given but api.tls.enabled is false: the certificate would not be used" }}
{{- end }}
{{- if and $a.enabled $a.token.enabled (not $a.token.existingSecret) }}
{{- fail "api.token.enabled needs api.token.existingSecret (a Secret with the bearer token under api.token.key)" }}
{{- end }}
{{- if and $a.enabled (eq (int $a.port) (int .Values.metrics.port)) }}
{{- fail "api.port and metrics.port must differ" }}
{{- end }}
{{- end }}
