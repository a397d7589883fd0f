{{/* The Fleet pod, shared by the Deployment (one replica) and the StatefulSet (sharding). */}}
{{- define "ingero-fleet.podTemplate" -}}
metadata:
  labels:
    {{- include "ingero-fleet.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # Roll the pods when the config changes.
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "ingero-fleet.fullname" . }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ add 20 (trimSuffix "s" .Values.shutdownTimeout | int) }}
  containers:
    - name: fleet
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - --config
        - /etc/ingero/config/fleet.yaml
        - --config
        - /etc/ingero/config/overlay.yaml
        - --shutdown-timeout
        - {{ .Values.shutdownTimeout | quote }}
        {{- range .Values.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      {{- if and .Values.auth.enabled .Values.auth.tokenValues }}
      envFrom:
        - secretRef:
            name: {{ include "ingero-fleet.authSecret" . }}-tokens
      {{- end }}
      {{- if and .Values.echo.enabled .Values.echo.token.secretName }}
      env:
        # The bearer token of the otlp/echo exporter.
        - name: INGERO_ECHO_TOKEN
          valueFrom:
            secretKeyRef: { name: {{ .Values.echo.token.secretName }}, key: {{ .Values.echo.token.key }} }
      {{- end }}
      ports:
        - { name: otlp-grpc, containerPort: 4317, protocol: TCP }
        - { name: otlp-http, containerPort: 4318, protocol: TCP }
        - { name: threshold, containerPort: 8080, protocol: TCP }
        - { name: health, containerPort: 13133, protocol: TCP }
        - { name: metrics, containerPort: 8889, protocol: TCP }
        - { name: telemetry, containerPort: 8888, protocol: TCP }
      {{- $scheme := ternary "HTTPS" "HTTP" (ne (include "ingero-fleet.tlsSource" .) "none") }}
      readinessProbe:
        httpGet: { path: /, port: health, scheme: {{ $scheme }} }
        periodSeconds: 5
        failureThreshold: 2
      livenessProbe:
        httpGet: { path: /, port: health, scheme: {{ $scheme }} }
        initialDelaySeconds: 10
        periodSeconds: 10
        failureThreshold: 6
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - { name: config, mountPath: /etc/ingero/config, readOnly: true }
        {{- if .Values.tls.enabled }}
        - { name: tls, mountPath: /etc/ingero/tls, readOnly: true }
        {{- end }}
        {{- if .Values.auth.enabled }}
        - { name: auth, mountPath: /etc/ingero/auth, readOnly: true }
        {{- end }}
        {{- if and .Values.echo.enabled (not .Values.echo.plaintext) }}
        {{- if .Values.echo.tls.caSecret }}
        - { name: echo-ca, mountPath: /etc/ingero/echo-ca, readOnly: true }
        {{- end }}
        {{- if .Values.echo.tls.clientCertSecret }}
        - { name: echo-client, mountPath: /etc/ingero/echo-client, readOnly: true }
        {{- end }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "ingero-fleet.fullname" . }}
    {{- if .Values.tls.enabled }}
    - name: tls
      secret:
        secretName: {{ include "ingero-fleet.tlsSecret" . }}
        defaultMode: 0400
    {{- end }}
    {{- if .Values.auth.enabled }}
    - name: auth
      secret:
        secretName: {{ include "ingero-fleet.authSecret" . }}
        defaultMode: 0400
        items:
          - { key: tokens.yaml, path: tokens.yaml }
    {{- end }}
    {{- if and .Values.echo.enabled (not .Values.echo.plaintext) }}
    {{- if .Values.echo.tls.caSecret }}
    - name: echo-ca
      secret:
        secretName: {{ .Values.echo.tls.caSecret }}
        defaultMode: 0400
        items:
          - { key: {{ .Values.echo.tls.caKey }}, path: ca.crt }
    {{- end }}
    {{- if .Values.echo.tls.clientCertSecret }}
    - name: echo-client
      secret:
        secretName: {{ .Values.echo.tls.clientCertSecret }}
        defaultMode: 0400
        items:
          - { key: tls.crt, path: tls.crt }
          - { key: tls.key, path: tls.key }
    {{- end }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
