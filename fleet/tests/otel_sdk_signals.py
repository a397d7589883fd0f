"""Export one span or one log record with the real OpenTelemetry Python SDK's OTLP exporter.

usage: otel_sdk_signals.py http|grpc ENDPOINT traces|logs
Prints the exporter's result (SUCCESS or FAILURE) and exits 0 on success, 1 on failure.
"""
import logging
import sys

from opentelemetry.sdk.resources import Resource

RESOURCE = Resource.create({"service.name": "sdk-signals", "service.instance.id": "sdk-signals"})


def finished_spans():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("sdk-signals").start_as_current_span("sdk-signals-span"):
        pass
    return memory.get_finished_spans()


def finished_logs():
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    log = logging.getLogger("sdk-signals")
    log.propagate = False
    log.addHandler(LoggingHandler(logger_provider=provider))
    log.warning("sdk-signals-log-line")
    return memory.get_finished_logs()


def main() -> int:
    proto, endpoint, signal = sys.argv[1], sys.argv[2], sys.argv[3]
    if signal == "traces":
        data = finished_spans()
        if proto == "http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as E
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as E
    else:
        data = finished_logs()
        if proto == "http":
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as E
        else:
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as E
    if not data:
        print("nothing recorded", file=sys.stderr)
        return 2
    kw = {"endpoint": endpoint, "timeout": 5}
    if proto == "grpc":
        kw["insecure"] = True
    result = E(**kw).export(data)
    print(result.name)
    return 0 if result.name == "SUCCESS" else 1


if __name__ == "__main__":
    sys.exit(main())
