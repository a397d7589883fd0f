# ingero-fleet image. Nothing is pulled: scripts/build-images.sh stages rootfs/ from a built
# binary, the shared libraries it links (from this machine's Debian packages), the static
# health probe, a passwd entry for the unprivileged user and the container config.
# Run with a read-only root filesystem: the service writes nothing to its image.
FROM scratch
COPY rootfs/ /
USER 65532:65532
# OTLP gRPC, OTLP HTTP, threshold API, health check, Prometheus exporter, self-telemetry.
EXPOSE 4317 4318 8080 13133 8889 8888
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/http-probe", "http://127.0.0.1:13133/"]
ENTRYPOINT ["/usr/local/bin/ingero-fleet"]
CMD ["--config", "/etc/ingero/fleet.yaml"]
