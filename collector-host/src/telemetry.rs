//! The host's own telemetry, with the OpenTelemetry Collector's metric names
//! (`otelcol_receiver_accepted_metric_points`, ...), rendered as Prometheus families.
//! Counters are plain atomics owned by the component that increments them, so the push
//! path never takes a lock to count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use component::MetricFamily;
use parking_lot::Mutex;

use crate::server::ListenerStats;

/// Which OTLP signal a counter is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Metrics,
    Traces,
    Logs,
}

impl Signal {
    pub fn item_name(self) -> &'static str {
        match self {
            Signal::Metrics => "metric_points",
            Signal::Traces => "spans",
            Signal::Logs => "log_records",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Metrics => "metrics",
            Signal::Traces => "traces",
            Signal::Logs => "logs",
        }
    }

    pub const ALL: [Signal; 3] = [Signal::Metrics, Signal::Traces, Signal::Logs];
}

#[derive(Debug, Default)]
pub struct SignalCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub failed: AtomicU64,
}

/// Counters of one receiver on one transport (`http` or `grpc`).
#[derive(Debug)]
pub struct ReceiverCounters {
    pub receiver: String,
    pub transport: &'static str,
    pub metrics: SignalCounters,
    pub traces: SignalCounters,
    pub logs: SignalCounters,
    /// Requests refused before decoding, by reason.
    pub rejected_requests: Mutex<Vec<(&'static str, u64)>>,
    /// Data points dropped by the ingest screen (cluster identity, size limits), by reason.
    pub dropped_points: Mutex<Vec<(&'static str, u64)>>,
    /// Spans dropped by the ingest screen (cluster identity), by reason.
    pub dropped_spans: Mutex<Vec<(&'static str, u64)>>,
    /// Log records dropped by the ingest screen (cluster identity), by reason.
    pub dropped_log_records: Mutex<Vec<(&'static str, u64)>>,
    pub latency: Histogram,
}

impl ReceiverCounters {
    pub fn signal(&self, s: Signal) -> &SignalCounters {
        match s {
            Signal::Metrics => &self.metrics,
            Signal::Traces => &self.traces,
            Signal::Logs => &self.logs,
        }
    }

    /// Count a request refused for `reason` (body too large, bad content type, ...).
    pub fn reject(&self, reason: &'static str) {
        let mut v = self.rejected_requests.lock();
        match v.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => v.push((reason, 1)),
        }
    }

    /// Count `n` data points dropped by the ingest screen for `reason`.
    pub fn drop_points(&self, reason: &'static str, n: u64) {
        self.drop_items(Signal::Metrics, reason, n);
    }

    /// Count `n` items of `signal` (points, spans, log records) dropped by the ingest
    /// screen for `reason`.
    pub fn drop_items(&self, signal: Signal, reason: &'static str, n: u64) {
        let mut v = self.dropped(signal).lock();
        match v.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c += n,
            None => v.push((reason, n)),
        }
    }

    fn dropped(&self, signal: Signal) -> &Mutex<Vec<(&'static str, u64)>> {
        match signal {
            Signal::Metrics => &self.dropped_points,
            Signal::Traces => &self.dropped_spans,
            Signal::Logs => &self.dropped_log_records,
        }
    }
}

/// Counters of one processor.
#[derive(Debug)]
pub struct ProcessorCounters {
    pub processor: String,
    pub incoming: AtomicU64,
    pub outgoing: AtomicU64,
}

/// Counters of one exporter.
#[derive(Debug)]
pub struct ExporterCounters {
    pub exporter: String,
    pub sent: [AtomicU64; 3],
    pub send_failed: [AtomicU64; 3],
    pub enqueue_failed: [AtomicU64; 3],
    pub queue_size: AtomicU64,
    pub queue_capacity: AtomicU64,
}

impl ExporterCounters {
    pub fn idx(s: Signal) -> usize {
        match s {
            Signal::Metrics => 0,
            Signal::Traces => 1,
            Signal::Logs => 2,
        }
    }
}

/// TLS counters of one listener.
#[derive(Debug, Default)]
pub struct TlsStats {
    pub listener: String,
    pub handshakes_ok: AtomicU64,
    pub handshakes_failed: AtomicU64,
    pub handshakes_timed_out: AtomicU64,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

/// Latency histogram with fixed bucket bounds (seconds).
#[derive(Debug)]
pub struct Histogram {
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

/// Bucket bounds for push latency: 50 µs to 10 s.
pub const LATENCY_BOUNDS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0,
];

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..LATENCY_BOUNDS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = LATENCY_BOUNDS.iter().position(|b| secs <= *b)
            && let Some(c) = self.counts.get(i)
        {
            c.fetch_add(1, Relaxed);
        }
        self.sum_nanos
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    fn render(&self, name: &str, labels: &[(&str, &str)], out: &mut Vec<(String, f64)>) {
        let mut cumulative = 0u64;
        for (i, bound) in LATENCY_BOUNDS.iter().enumerate() {
            cumulative += self.counts.get(i).map(|c| c.load(Relaxed)).unwrap_or(0);
            out.push((
                format!(
                    "{name}_bucket{}",
                    label_str(labels, Some(&bound.to_string()))
                ),
                cumulative as f64,
            ));
        }
        let count = self.count.load(Relaxed);
        out.push((
            format!("{name}_bucket{}", label_str(labels, Some("+Inf"))),
            count as f64,
        ));
        out.push((
            format!("{name}_sum{}", label_str(labels, None)),
            self.sum_nanos.load(Relaxed) as f64 / 1e9,
        ));
        out.push((
            format!("{name}_count{}", label_str(labels, None)),
            count as f64,
        ));
    }
}

fn label_str(labels: &[(&str, &str)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", component::text::LabelValue(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// Registry of every counter in the process, for rendering.
#[derive(Debug)]
pub struct Telemetry {
    started: Instant,
    receivers: Mutex<Vec<Arc<ReceiverCounters>>>,
    processors: Mutex<Vec<Arc<ProcessorCounters>>>,
    exporters: Mutex<Vec<Arc<ExporterCounters>>>,
    tls: Mutex<Vec<Arc<TlsStats>>>,
    listeners: Mutex<Vec<Arc<ListenerStats>>>,
    /// Tick outputs and other internal data-path losses, by (component, reason).
    pub tick_panics: AtomicU64,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            started: Instant::now(),
            receivers: Mutex::new(Vec::new()),
            processors: Mutex::new(Vec::new()),
            exporters: Mutex::new(Vec::new()),
            tls: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
            tick_panics: AtomicU64::new(0),
        }
    }
}

impl Telemetry {
    pub fn receiver(&self, receiver: &str, transport: &'static str) -> Arc<ReceiverCounters> {
        let c = Arc::new(ReceiverCounters {
            receiver: receiver.to_string(),
            transport,
            metrics: SignalCounters::default(),
            traces: SignalCounters::default(),
            logs: SignalCounters::default(),
            rejected_requests: Mutex::new(Vec::new()),
            dropped_points: Mutex::new(Vec::new()),
            dropped_spans: Mutex::new(Vec::new()),
            dropped_log_records: Mutex::new(Vec::new()),
            latency: Histogram::default(),
        });
        self.receivers.lock().push(c.clone());
        c
    }

    pub fn processor(&self, processor: &str) -> Arc<ProcessorCounters> {
        let c = Arc::new(ProcessorCounters {
            processor: processor.to_string(),
            incoming: AtomicU64::new(0),
            outgoing: AtomicU64::new(0),
        });
        self.processors.lock().push(c.clone());
        c
    }

    pub fn exporter(&self, exporter: &str) -> Arc<ExporterCounters> {
        let z = || [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        let c = Arc::new(ExporterCounters {
            exporter: exporter.to_string(),
            sent: z(),
            send_failed: z(),
            enqueue_failed: z(),
            queue_size: AtomicU64::new(0),
            queue_capacity: AtomicU64::new(0),
        });
        self.exporters.lock().push(c.clone());
        c
    }

    pub fn tls(&self, listener: &str) -> Arc<TlsStats> {
        let c = Arc::new(TlsStats {
            listener: listener.to_string(),
            ..TlsStats::default()
        });
        self.tls.lock().push(c.clone());
        c
    }

    /// Connection counters of one listener (`otlp/http`, `otlp/grpc`, `prometheus`, ...).
    pub fn listener(&self, listener: &str) -> Arc<ListenerStats> {
        let c = Arc::new(ListenerStats {
            listener: listener.to_string(),
            ..ListenerStats::default()
        });
        self.listeners.lock().push(c.clone());
        c
    }

    /// Every host metric as Prometheus families.
    pub fn families(&self) -> Vec<MetricFamily> {
        let mut fams = Vec::new();
        let receivers = self.receivers.lock().clone();
        for s in Signal::ALL {
            let item = s.item_name();
            let mut acc = MetricFamily::counter(
                &format!("otelcol_receiver_accepted_{item}_total"),
                &format!("Number of {item} successfully pushed into the pipeline."),
            );
            let mut refused = MetricFamily::counter(
                &format!("otelcol_receiver_refused_{item}_total"),
                &format!("Number of {item} that could not be pushed into the pipeline."),
            );
            let mut failed = MetricFamily::counter(
                &format!("otelcol_receiver_failed_{item}_total"),
                &format!("Number of {item} that failed in the receiver (malformed requests)."),
            );
            for r in &receivers {
                let l = [
                    ("receiver", r.receiver.as_str()),
                    ("transport", r.transport),
                ];
                let c = r.signal(s);
                acc.push(&l, c.accepted.load(Relaxed) as f64);
                refused.push(&l, c.refused.load(Relaxed) as f64);
                failed.push(&l, c.failed.load(Relaxed) as f64);
            }
            fams.extend([acc, refused, failed]);
        }
        let mut rej = MetricFamily::counter(
            "ingero_fleet_rejected_requests_total",
            "Requests refused by a receiver before decoding, by reason.",
        );
        for r in &receivers {
            for (reason, n) in r.rejected_requests.lock().iter() {
                rej.push(
                    &[
                        ("receiver", &r.receiver),
                        ("transport", r.transport),
                        ("reason", reason),
                    ],
                    *n as f64,
                );
            }
        }
        fams.push(rej);
        for (signal, name, what) in [
            (
                Signal::Metrics,
                "ingero_fleet_receiver_dropped_points_total",
                "Data points",
            ),
            (
                Signal::Traces,
                "ingero_fleet_receiver_dropped_spans_total",
                "Spans",
            ),
            (
                Signal::Logs,
                "ingero_fleet_receiver_dropped_log_records_total",
                "Log records",
            ),
        ] {
            let mut dropped = MetricFamily::counter(
                name,
                &format!(
                    "{what} a receiver dropped from a decoded export (answered with partial \
                     success), by reason."
                ),
            );
            for r in &receivers {
                for (reason, n) in r.dropped(signal).lock().iter() {
                    dropped.push(
                        &[
                            ("receiver", &r.receiver),
                            ("transport", r.transport),
                            ("reason", reason),
                        ],
                        *n as f64,
                    );
                }
            }
            fams.push(dropped);
        }

        let processors = self.processors.lock().clone();
        let mut inc = MetricFamily::counter(
            "otelcol_processor_incoming_items_total",
            "Number of items passed to the processor.",
        );
        let mut out = MetricFamily::counter(
            "otelcol_processor_outgoing_items_total",
            "Number of items emitted from the processor.",
        );
        for p in &processors {
            let l = [
                ("processor", p.processor.as_str()),
                ("otel_signal", "metrics"),
            ];
            inc.push(&l, p.incoming.load(Relaxed) as f64);
            out.push(&l, p.outgoing.load(Relaxed) as f64);
        }
        fams.extend([inc, out]);

        let exporters = self.exporters.lock().clone();
        for s in Signal::ALL {
            let item = s.item_name();
            let i = ExporterCounters::idx(s);
            let mut sent = MetricFamily::counter(
                &format!("otelcol_exporter_sent_{item}_total"),
                &format!("Number of {item} successfully sent to destination."),
            );
            let mut fail = MetricFamily::counter(
                &format!("otelcol_exporter_send_failed_{item}_total"),
                &format!("Number of {item} in failed attempts to send to destination."),
            );
            let mut enq = MetricFamily::counter(
                &format!("otelcol_exporter_enqueue_failed_{item}_total"),
                &format!("Number of {item} failed to be added to the sending queue."),
            );
            for e in &exporters {
                let l = [("exporter", e.exporter.as_str())];
                sent.push(&l, e.sent.get(i).map_or(0, |c| c.load(Relaxed)) as f64);
                fail.push(
                    &l,
                    e.send_failed.get(i).map_or(0, |c| c.load(Relaxed)) as f64,
                );
                enq.push(
                    &l,
                    e.enqueue_failed.get(i).map_or(0, |c| c.load(Relaxed)) as f64,
                );
            }
            fams.extend([sent, fail, enq]);
        }
        let mut qs = MetricFamily::gauge(
            "otelcol_exporter_queue_size",
            "Current size of the retry queue (in batches).",
        );
        let mut qc = MetricFamily::gauge(
            "otelcol_exporter_queue_capacity",
            "Fixed capacity of the retry queue (in batches).",
        );
        for e in &exporters {
            let l = [("exporter", e.exporter.as_str())];
            qs.push(&l, e.queue_size.load(Relaxed) as f64);
            qc.push(&l, e.queue_capacity.load(Relaxed) as f64);
        }
        fams.extend([qs, qc]);

        let tls = self.tls.lock().clone();
        let mut hs = MetricFamily::counter(
            "ingero_fleet_tls_handshakes_total",
            "TLS handshakes on a listener, by outcome (ok, failed, timeout).",
        );
        let mut rl = MetricFamily::counter(
            "ingero_fleet_tls_reloads_total",
            "Certificate reloads of a listener, by outcome (ok, failed: the previous certificate stays).",
        );
        for t in &tls {
            let l = t.listener.as_str();
            for (outcome, c) in [
                ("ok", &t.handshakes_ok),
                ("failed", &t.handshakes_failed),
                ("timeout", &t.handshakes_timed_out),
            ] {
                hs.push(
                    &[("listener", l), ("outcome", outcome)],
                    c.load(Relaxed) as f64,
                );
            }
            for (outcome, c) in [("ok", &t.reloads_ok), ("failed", &t.reloads_failed)] {
                rl.push(
                    &[("listener", l), ("outcome", outcome)],
                    c.load(Relaxed) as f64,
                );
            }
        }
        fams.extend([hs, rl]);

        let listeners = self.listeners.lock().clone();
        let mut open = MetricFamily::gauge(
            "ingero_fleet_connections_open",
            "Open connections of a listener.",
        );
        let mut accepted = MetricFamily::counter(
            "ingero_fleet_connections_accepted_total",
            "Connections a listener accepted.",
        );
        let mut refused = MetricFamily::counter(
            "ingero_fleet_connections_refused_total",
            "Connections a listener closed at accept: max_connections were open, or max_connections_per_client from that address, and none of them was idle.",
        );
        let mut refused_req = MetricFamily::counter(
            "ingero_fleet_requests_refused_total",
            "Requests a listener refused before its handler: host_not_allowed is a request addressed to a name its listener does not answer: not in allowed_hosts, or on a loopback listener without auth not an IP address or localhost.",
        );
        let mut closed = MetricFamily::counter(
            "ingero_fleet_connections_closed_total",
            "Connections a listener closed: no byte within first_byte_timeout, no request for idle_timeout, or evicted (idle, to make room for a new connection at max_connections or max_connections_per_client).",
        );
        for c in &listeners {
            let name = c.listener.as_str();
            let l = [("listener", name)];
            open.push(&l, c.open.load(Relaxed) as f64);
            accepted.push(&l, c.accepted.load(Relaxed) as f64);
            for (reason, n) in [
                ("max_connections", &c.refused_over_cap),
                ("max_connections_per_client", &c.refused_per_client),
            ] {
                refused.push(
                    &[("listener", name), ("reason", reason)],
                    n.load(Relaxed) as f64,
                );
            }
            refused_req.push(
                &[("listener", name), ("reason", "host_not_allowed")],
                c.refused_host.load(Relaxed) as f64,
            );
            for (reason, n) in [
                ("first_byte_timeout", &c.closed_first_byte_timeout),
                ("idle_timeout", &c.closed_idle_timeout),
                ("evicted", &c.closed_evicted),
            ] {
                closed.push(
                    &[("listener", name), ("reason", reason)],
                    n.load(Relaxed) as f64,
                );
            }
        }
        fams.extend([open, accepted, refused, refused_req, closed]);

        fams.push(
            MetricFamily::gauge("otelcol_process_uptime_seconds", "Uptime of the process.")
                .with(&[], self.started.elapsed().as_secs_f64()),
        );
        if let Some((rss, cpu)) = process_stats() {
            fams.push(
                MetricFamily::gauge(
                    "otelcol_process_memory_rss_bytes",
                    "Total physical memory (resident set size).",
                )
                .with(&[], rss),
            );
            fams.push(
                MetricFamily::counter(
                    "otelcol_process_cpu_seconds_total",
                    "Total CPU user and system time in seconds.",
                )
                .with(&[], cpu),
            );
        }
        fams.push(
            MetricFamily::counter(
                "ingero_fleet_component_panics_total",
                "Panics caught at a component boundary (tick or process); the host kept running.",
            )
            .with(&[], self.tick_panics.load(Relaxed) as f64),
        );
        fams
    }

    /// Request-latency histograms, rendered as raw exposition lines (families are written
    /// by [`render_text`]).
    pub fn render_histograms(&self, out: &mut String) {
        let receivers = self.receivers.lock().clone();
        let name = "ingero_fleet_push_duration_seconds";
        out.push_str(&format!(
            "# HELP {name} Time from request received to response ready on the OTLP push path.\n# TYPE {name} histogram\n"
        ));
        for r in &receivers {
            let mut lines = Vec::new();
            r.latency.render(
                name,
                &[("receiver", &r.receiver), ("transport", r.transport)],
                &mut lines,
            );
            for (series, v) in lines {
                out.push_str(&format!("{series} {v}\n"));
            }
        }
    }
}

/// (RSS bytes, CPU seconds) of this process from /proc/self.
pub fn process_stats() -> Option<(f64, f64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let rss_pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    Some((rss_pages * page, (utime + stime) / tick.max(1.0)))
}

/// Render families as Prometheus text exposition 0.0.4.
pub fn render_text(fams: &[MetricFamily], out: &mut String) {
    use std::fmt::Write;
    for f in fams {
        let kind = match f.kind {
            component::MetricType::Gauge => "gauge",
            component::MetricType::Counter => "counter",
        };
        let _ = writeln!(
            out,
            "# HELP {} {}",
            f.name,
            f.help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for s in &f.samples {
            let labels: Vec<(&str, &str)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let _ = writeln!(
                out,
                "{}{} {}",
                f.name,
                label_str(&labels, None),
                fmt_value(s.value)
            );
        }
    }
}

/// Prometheus float formatting (`NaN`, `+Inf`, `-Inf`).
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(40));
        h.observe(Duration::from_micros(700));
        h.observe(Duration::from_secs(20));
        let mut lines = Vec::new();
        h.render("x", &[("a", "b")], &mut lines);
        let get = |k: &str| lines.iter().find(|(s, _)| s == k).map(|(_, v)| *v);
        assert_eq!(get("x_bucket{a=\"b\",le=\"0.00005\"}"), Some(1.0));
        assert_eq!(get("x_bucket{a=\"b\",le=\"0.001\"}"), Some(2.0));
        assert_eq!(get("x_bucket{a=\"b\",le=\"10\"}"), Some(2.0));
        assert_eq!(get("x_bucket{a=\"b\",le=\"+Inf\"}"), Some(3.0));
        assert_eq!(get("x_count{a=\"b\"}"), Some(3.0));
    }

    #[test]
    fn renders_otelcol_names() {
        let t = Telemetry::default();
        let r = t.receiver("otlp", "http");
        r.metrics.accepted.fetch_add(9, Relaxed);
        r.reject("body_too_large");
        let mut s = String::new();
        render_text(&t.families(), &mut s);
        assert!(s.contains(
            "otelcol_receiver_accepted_metric_points_total{receiver=\"otlp\",transport=\"http\"} 9"
        ));
        assert!(s.contains("reason=\"body_too_large\"} 1"));
        assert!(s.contains("# TYPE otelcol_process_uptime_seconds gauge"));
    }
}
