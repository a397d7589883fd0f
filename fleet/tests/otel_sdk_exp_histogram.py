"""Record a histogram with the real OpenTelemetry Python SDK's exponential bucket
aggregation and push it over OTLP/HTTP.

usage: otel_sdk_exp_histogram.py ENDPOINT
Records 1, 2, 3, ..., 10 (ms) into `sdk.latency` (unit ms). Exits non-zero if the export fails.
"""
import sys

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource


def main() -> int:
    exporter = OTLPMetricExporter(endpoint=sys.argv[1], timeout=5)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "sdk-exp", "service.instance.id": "sdk-exp-1"}),
        views=[View(instrument_type=Histogram, aggregation=ExponentialBucketHistogramAggregation())],
    )
    hist = provider.get_meter("sdk-exp").create_histogram("sdk.latency", unit="ms")
    for v in range(1, 11):
        hist.record(float(v), {"route": "/push"})
    ok = provider.force_flush(timeout_millis=10_000)
    provider.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
