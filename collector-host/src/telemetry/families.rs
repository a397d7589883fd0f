//! The host's own metric families, declared once (name, type, unit, help, labels): the
//! exposition ([`Telemetry::families`](super::Telemetry::families),
//! [`Telemetry::render_histograms`](super::Telemetry::render_histograms)) is built from
//! these specs, and so is the list of exported families in `examples/exported-metrics.txt`.
//! The `otelcol_*` names are the OpenTelemetry Collector's own; the others are declared
//! `prefix + "..."` and named under the distribution's prefix
//! ([`Telemetry::metric_prefix`](super::Telemetry::metric_prefix)).

use component::telemetry::MetricSpec;

use super::Signal;

pub const LABEL_RECEIVER: &str = "receiver";
pub const LABEL_TRANSPORT: &str = "transport";
pub const LABEL_REASON: &str = "reason";
pub const LABEL_PROCESSOR: &str = "processor";
pub const LABEL_OTEL_SIGNAL: &str = "otel_signal";
pub const LABEL_EXPORTER: &str = "exporter";
pub const LABEL_LISTENER: &str = "listener";
pub const LABEL_OUTCOME: &str = "outcome";

// In exposition order.
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    RECEIVER_ACCEPTED_METRIC_POINTS: counter "otelcol_receiver_accepted_metric_points_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of metric_points successfully pushed into the pipeline.";
    RECEIVER_REFUSED_METRIC_POINTS: counter "otelcol_receiver_refused_metric_points_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of metric_points that could not be pushed into the pipeline.";
    RECEIVER_FAILED_METRIC_POINTS: counter "otelcol_receiver_failed_metric_points_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of metric_points that failed in the receiver (malformed requests).";
    RECEIVER_ACCEPTED_SPANS: counter "otelcol_receiver_accepted_spans_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of spans successfully pushed into the pipeline.";
    RECEIVER_REFUSED_SPANS: counter "otelcol_receiver_refused_spans_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of spans that could not be pushed into the pipeline.";
    RECEIVER_FAILED_SPANS: counter "otelcol_receiver_failed_spans_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of spans that failed in the receiver (malformed requests).";
    RECEIVER_ACCEPTED_LOG_RECORDS: counter "otelcol_receiver_accepted_log_records_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of log_records successfully pushed into the pipeline.";
    RECEIVER_REFUSED_LOG_RECORDS: counter "otelcol_receiver_refused_log_records_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of log_records that could not be pushed into the pipeline.";
    RECEIVER_FAILED_LOG_RECORDS: counter "otelcol_receiver_failed_log_records_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Number of log_records that failed in the receiver (malformed requests).";
    REJECTED_REQUESTS: counter prefix + "rejected_requests_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT, LABEL_REASON],
        help "Requests refused by a receiver before decoding, by reason.";
    RECEIVER_DROPPED_POINTS: counter prefix + "receiver_dropped_points_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT, LABEL_REASON],
        help "Data points a receiver dropped from a decoded export (answered with partial success), by reason.";
    RECEIVER_DROPPED_SPANS: counter prefix + "receiver_dropped_spans_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT, LABEL_REASON],
        help "Spans a receiver dropped from a decoded export (answered with partial success), by reason.";
    RECEIVER_DROPPED_LOG_RECORDS: counter prefix + "receiver_dropped_log_records_total",
        unit "1", labels [LABEL_RECEIVER, LABEL_TRANSPORT, LABEL_REASON],
        help "Log records a receiver dropped from a decoded export (answered with partial success), by reason.";
    PROCESSOR_INCOMING_ITEMS: counter "otelcol_processor_incoming_items_total",
        unit "1", labels [LABEL_PROCESSOR, LABEL_OTEL_SIGNAL],
        help "Number of items passed to the processor.";
    PROCESSOR_OUTGOING_ITEMS: counter "otelcol_processor_outgoing_items_total",
        unit "1", labels [LABEL_PROCESSOR, LABEL_OTEL_SIGNAL],
        help "Number of items emitted from the processor.";
    EXPORTER_SENT_METRIC_POINTS: counter "otelcol_exporter_sent_metric_points_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of metric_points successfully sent to destination.";
    EXPORTER_SEND_FAILED_METRIC_POINTS: counter "otelcol_exporter_send_failed_metric_points_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of metric_points in failed attempts to send to destination.";
    EXPORTER_ENQUEUE_FAILED_METRIC_POINTS: counter "otelcol_exporter_enqueue_failed_metric_points_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of metric_points failed to be added to the sending queue.";
    EXPORTER_SENT_SPANS: counter "otelcol_exporter_sent_spans_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of spans successfully sent to destination.";
    EXPORTER_SEND_FAILED_SPANS: counter "otelcol_exporter_send_failed_spans_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of spans in failed attempts to send to destination.";
    EXPORTER_ENQUEUE_FAILED_SPANS: counter "otelcol_exporter_enqueue_failed_spans_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of spans failed to be added to the sending queue.";
    EXPORTER_SENT_LOG_RECORDS: counter "otelcol_exporter_sent_log_records_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of log_records successfully sent to destination.";
    EXPORTER_SEND_FAILED_LOG_RECORDS: counter "otelcol_exporter_send_failed_log_records_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of log_records in failed attempts to send to destination.";
    EXPORTER_ENQUEUE_FAILED_LOG_RECORDS: counter "otelcol_exporter_enqueue_failed_log_records_total",
        unit "1", labels [LABEL_EXPORTER],
        help "Number of log_records failed to be added to the sending queue.";
    EXPORTER_QUEUE_SIZE: gauge "otelcol_exporter_queue_size", unit "1", labels [LABEL_EXPORTER],
        help "Current size of the retry queue (in batches).";
    EXPORTER_QUEUE_CAPACITY: gauge "otelcol_exporter_queue_capacity", unit "1",
        labels [LABEL_EXPORTER],
        help "Fixed capacity of the retry queue (in batches).";
    TLS_HANDSHAKES: counter prefix + "tls_handshakes_total", unit "1",
        labels [LABEL_LISTENER, LABEL_OUTCOME],
        help "TLS handshakes on a listener, by outcome (ok, failed, timeout).";
    TLS_RELOADS: counter prefix + "tls_reloads_total", unit "1",
        labels [LABEL_LISTENER, LABEL_OUTCOME],
        help "Certificate reloads of a listener, by outcome (ok, failed: the previous certificate stays).";
    CONNECTIONS_OPEN: gauge prefix + "connections_open", unit "1", labels [LABEL_LISTENER],
        help "Open connections of a listener.";
    CONNECTIONS_ACCEPTED: counter prefix + "connections_accepted_total", unit "1",
        labels [LABEL_LISTENER],
        help "Connections a listener accepted.";
    CONNECTIONS_REFUSED: counter prefix + "connections_refused_total", unit "1",
        labels [LABEL_LISTENER, LABEL_REASON],
        help "Connections a listener closed at accept: max_connections were open, or max_connections_per_client from that address, and none of them was idle.";
    REQUESTS_REFUSED: counter prefix + "requests_refused_total", unit "1",
        labels [LABEL_LISTENER, LABEL_REASON],
        help "Requests a listener refused before its handler: host_not_allowed is a request addressed to a name its listener does not answer: not in allowed_hosts, or on a loopback listener without auth not an IP address or localhost.";
    CONNECTIONS_CLOSED: counter prefix + "connections_closed_total", unit "1",
        labels [LABEL_LISTENER, LABEL_REASON],
        help "Connections a listener closed: no byte within first_byte_timeout, no request for idle_timeout, or evicted (idle, to make room for a new connection at max_connections or max_connections_per_client).";
    PROCESS_UPTIME: gauge "otelcol_process_uptime_seconds", unit "s", labels [],
        help "Uptime of the process.";
    /// Left out where /proc/self cannot be read.
    PROCESS_MEMORY_RSS: gauge "otelcol_process_memory_rss_bytes", unit "By", labels [],
        help "Total physical memory (resident set size).";
    /// Left out where /proc/self cannot be read.
    PROCESS_CPU_SECONDS: counter "otelcol_process_cpu_seconds_total", unit "s", labels [],
        help "Total CPU user and system time in seconds.";
    COMPONENT_PANICS: counter prefix + "component_panics_total", unit "1", labels [],
        help "Panics caught at a component boundary (tick or process); the host kept running.";
    /// Written after the other families, with its bucket, sum and count series.
    PUSH_DURATION: histogram prefix + "push_duration_seconds", unit "s",
        labels [LABEL_RECEIVER, LABEL_TRANSPORT],
        help "Time from request received to response ready on the OTLP push path.";
}

/// A receiver's (accepted, refused, failed) families for one signal.
pub fn receiver_specs(s: Signal) -> [&'static MetricSpec; 3] {
    match s {
        Signal::Metrics => [
            &spec::RECEIVER_ACCEPTED_METRIC_POINTS,
            &spec::RECEIVER_REFUSED_METRIC_POINTS,
            &spec::RECEIVER_FAILED_METRIC_POINTS,
        ],
        Signal::Traces => [
            &spec::RECEIVER_ACCEPTED_SPANS,
            &spec::RECEIVER_REFUSED_SPANS,
            &spec::RECEIVER_FAILED_SPANS,
        ],
        Signal::Logs => [
            &spec::RECEIVER_ACCEPTED_LOG_RECORDS,
            &spec::RECEIVER_REFUSED_LOG_RECORDS,
            &spec::RECEIVER_FAILED_LOG_RECORDS,
        ],
    }
}

/// The family of items of one signal a receiver dropped from a decoded export.
pub fn receiver_dropped_spec(s: Signal) -> &'static MetricSpec {
    match s {
        Signal::Metrics => &spec::RECEIVER_DROPPED_POINTS,
        Signal::Traces => &spec::RECEIVER_DROPPED_SPANS,
        Signal::Logs => &spec::RECEIVER_DROPPED_LOG_RECORDS,
    }
}

/// An exporter's (sent, send_failed, enqueue_failed) families for one signal.
pub fn exporter_specs(s: Signal) -> [&'static MetricSpec; 3] {
    match s {
        Signal::Metrics => [
            &spec::EXPORTER_SENT_METRIC_POINTS,
            &spec::EXPORTER_SEND_FAILED_METRIC_POINTS,
            &spec::EXPORTER_ENQUEUE_FAILED_METRIC_POINTS,
        ],
        Signal::Traces => [
            &spec::EXPORTER_SENT_SPANS,
            &spec::EXPORTER_SEND_FAILED_SPANS,
            &spec::EXPORTER_ENQUEUE_FAILED_SPANS,
        ],
        Signal::Logs => [
            &spec::EXPORTER_SENT_LOG_RECORDS,
            &spec::EXPORTER_SEND_FAILED_LOG_RECORDS,
            &spec::EXPORTER_ENQUEUE_FAILED_LOG_RECORDS,
        ],
    }
}
