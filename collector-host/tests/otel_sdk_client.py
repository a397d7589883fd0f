"""Push a counter with the real OpenTelemetry Python SDK to an OTLP endpoint.

usage: otel_sdk_client.py http|grpc ENDPOINT
Exits non-zero if the export fails.
"""
import sys

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource


def main() -> int:
    proto, endpoint = sys.argv[1], sys.argv[2]
    if proto == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(endpoint=endpoint, timeout=5)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=5)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "sdk-test", "service.instance.id": f"sdk-{proto}"}),
    )
    counter = provider.get_meter("sdk-test").create_counter("sdk.requests", unit="{request}")
    counter.add(7, {"transport": proto})
    ok = provider.force_flush(timeout_millis=10_000)
    provider.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
