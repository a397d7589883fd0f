# ingero-echo image, staged like the Fleet image (scripts/build-images.sh): the binary, the
# shared libraries it links (DuckDB's C++ is linked in statically; libstdc++ and libgcc_s
# come from this machine's Debian packages), the static health probe, the passwd entry of
# the unprivileged user and the container config /etc/ingero/echo.yaml.
# Run with a read-only root filesystem: the store is the only thing Echo writes, on the
# volume /var/lib/ingero-echo (a named volume keeps it across containers; one container at
# a time: Echo locks the directory).
FROM scratch
COPY rootfs/ /
# The data directory, owned by the unprivileged user, so a new named volume mounted there
# starts out writable for it.
COPY --chown=65532:65532 empty/ /var/lib/ingero-echo/
USER 65532:65532
VOLUME ["/var/lib/ingero-echo"]
# OTLP gRPC, OTLP HTTP, query API and MCP, health check, self-telemetry.
EXPOSE 4327 4328 8090 13134 8898
# Opening a large store replays its WAL: a longer start period than Fleet's.
HEALTHCHECK --interval=10s --timeout=4s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/http-probe", "http://127.0.0.1:13134/"]
ENTRYPOINT ["/usr/local/bin/ingero-echo"]
CMD ["--config", "/etc/ingero/echo.yaml"]
