"""Push a counter with the real OpenTelemetry Python SDK to an OTLP endpoint.

usage: otel_sdk_client.py http|grpc ENDPOINT [none|gzip|deflate]
The counter carries the transport and the compression as attributes.
Exits non-zero if the export fails.
"""
import sys

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource


def main() -> int:
    proto, endpoint = sys.argv[1], sys.argv[2]
    compression = sys.argv[3] if len(sys.argv) > 3 else "none"
    if proto == "http":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        kind = {"none": Compression.NoCompression, "gzip": Compression.Gzip, "deflate": Compression.Deflate}
        exporter = OTLPMetricExporter(endpoint=endpoint, timeout=5, compression=kind[compression])
    else:
        from grpc import Compression
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        kind = {"none": Compression.NoCompression, "gzip": Compression.Gzip, "deflate": Compression.Deflate}
        exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=5, compression=kind[compression])
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "sdk-test", "service.instance.id": f"sdk-{proto}"}),
    )
    counter = provider.get_meter("sdk-test").create_counter("sdk.requests", unit="{request}")
    attrs = {"transport": proto}
    if compression != "none":
        attrs["compression"] = compression
    counter.add(7, attrs)
    ok = provider.force_flush(timeout_millis=10_000)
    provider.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
