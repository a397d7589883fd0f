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
