# ingero-agent image, staged like the Fleet image (scripts/build-images.sh). Defaults to the
# unprivileged user, which is enough for --synthetic; the eBPF probes need uid 0 with
# CAP_BPF, CAP_PERFMON (CAP_SYS_RESOURCE before 5.11, CAP_SYS_PTRACE for other users'
# processes) and the host's PID namespace: the Helm chart's DaemonSet sets exactly those.
FROM scratch
COPY rootfs/ /
USER 65532:65532
# The baseline survives restarts here (mount a volume; the root filesystem is read-only).
VOLUME ["/var/lib/ingero-agent"]
# The agent opens no port unless asked; the image's CMD turns on /healthz for the check.
EXPOSE 9465
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/http-probe", "http://127.0.0.1:9465/healthz"]
ENTRYPOINT ["/usr/local/bin/ingero-agent", "--fleet-persist-path", "/var/lib/ingero-agent/health-baseline.json", "--metrics-listen", "0.0.0.0:9465"]
