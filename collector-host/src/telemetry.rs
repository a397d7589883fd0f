//! The host's own telemetry, with the OpenTelemetry Collector's metric names
//! (`otelcol_receiver_accepted_metric_points`, ...) and, for what otelcol has no name for,
//! names under the distribution's [`MetricPrefix`] ([`HOST_METRIC_PREFIX`] unless the
//! distribution gives its own), rendered as Prometheus families.
//! Counters are plain atomics owned by the component that increments them, so the push
//! path never takes a lock to count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use component::MetricFamily;
use component::telemetry::{MetricPrefix, MetricSpec};
use parking_lot::Mutex;

use crate::server::ListenerStats;

pub mod families;

/// The prefix of the host's own families (`collector_host_connections_open`, ...) in a
/// binary whose distribution gives none (`Components::with_metric_prefix`): the library's
/// name, since `otelcol_` is the OpenTelemetry Collector's namespace and these families
/// are not among its documented ones.
pub const HOST_METRIC_PREFIX: MetricPrefix = component::telemetry::DEFAULT_HOST_PREFIX;

/// Counts by reason (requests refused, items dropped).
type ReasonCounts = Mutex<Vec<(&'static str, u64)>>;

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
    pub rejected_requests: ReasonCounts,
    /// Data points dropped by the ingest screen (cluster identity, size limits), by reason.
    pub dropped_points: ReasonCounts,
    /// Spans dropped by the ingest screen (cluster identity), by reason.
    pub dropped_spans: ReasonCounts,
    /// Log records dropped by the ingest screen (cluster identity), by reason.
    pub dropped_log_records: ReasonCounts,
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

    fn dropped(&self, signal: Signal) -> &ReasonCounts {
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
    /// The prefix of the host's own families.
    prefix: MetricPrefix,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::with_prefix(HOST_METRIC_PREFIX)
    }
}

impl Telemetry {
    /// A registry whose own families are named under `prefix` (the distribution's).
    pub fn with_prefix(prefix: MetricPrefix) -> Self {
        Telemetry {
            prefix,
            started: Instant::now(),
            receivers: Mutex::new(Vec::new()),
            processors: Mutex::new(Vec::new()),
            exporters: Mutex::new(Vec::new()),
            tls: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
            tick_panics: AtomicU64::new(0),
        }
    }

    /// The prefix of the host's own families.
    pub fn metric_prefix(&self) -> MetricPrefix {
        self.prefix
    }

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

    /// Every host metric as Prometheus families (the gauges and counters of
    /// [`families::FAMILIES`], in its order).
    pub fn families(&self) -> Vec<MetricFamily> {
        use families::{LABEL_EXPORTER as EXPORTER, LABEL_LISTENER as LISTENER, spec};
        use families::{LABEL_OTEL_SIGNAL as SIGNAL, LABEL_PROCESSOR as PROCESSOR};
        use families::{LABEL_OUTCOME as OUTCOME, LABEL_REASON as REASON};
        use families::{LABEL_RECEIVER as RECEIVER, LABEL_TRANSPORT as TRANSPORT};
        let load = |c: &AtomicU64| c.load(Relaxed) as f64;
        let family = |s: &MetricSpec| s.family_in(self.prefix);
        let mut fams = Vec::new();
        let receivers = self.receivers.lock().clone();
        for s in Signal::ALL {
            let mut f = families::receiver_specs(s).map(family);
            for r in &receivers {
                let l = [(RECEIVER, r.receiver.as_str()), (TRANSPORT, r.transport)];
                let c = r.signal(s);
                for (f, n) in f.iter_mut().zip([&c.accepted, &c.refused, &c.failed]) {
                    f.push(&l, load(n));
                }
            }
            fams.extend(f);
        }
        let by_reason = |mut f: MetricFamily, which: fn(&ReceiverCounters) -> &ReasonCounts| {
            for r in &receivers {
                for (reason, n) in which(r).lock().iter() {
                    let l = [(RECEIVER, r.receiver.as_str()), (TRANSPORT, r.transport)];
                    f.push(&[l[0], l[1], (REASON, reason)], *n as f64);
                }
            }
            f
        };
        fams.push(by_reason(family(&spec::REJECTED_REQUESTS), |r| {
            &r.rejected_requests
        }));
        for s in Signal::ALL {
            let f = family(families::receiver_dropped_spec(s));
            fams.push(match s {
                Signal::Metrics => by_reason(f, |r| &r.dropped_points),
                Signal::Traces => by_reason(f, |r| &r.dropped_spans),
                Signal::Logs => by_reason(f, |r| &r.dropped_log_records),
            });
        }

        let mut f = [
            family(&spec::PROCESSOR_INCOMING_ITEMS),
            family(&spec::PROCESSOR_OUTGOING_ITEMS),
        ];
        for p in self.processors.lock().iter() {
            let l = [(PROCESSOR, p.processor.as_str()), (SIGNAL, "metrics")];
            f[0].push(&l, load(&p.incoming));
            f[1].push(&l, load(&p.outgoing));
        }
        fams.extend(f);

        let exporters = self.exporters.lock().clone();
        for s in Signal::ALL {
            let i = ExporterCounters::idx(s);
            let mut f = families::exporter_specs(s).map(family);
            for e in &exporters {
                let l = [(EXPORTER, e.exporter.as_str())];
                for (f, c) in f
                    .iter_mut()
                    .zip([&e.sent, &e.send_failed, &e.enqueue_failed])
                {
                    f.push(&l, c.get(i).map_or(0.0, load));
                }
            }
            fams.extend(f);
        }
        let mut f = [
            family(&spec::EXPORTER_QUEUE_SIZE),
            family(&spec::EXPORTER_QUEUE_CAPACITY),
        ];
        for e in &exporters {
            let l = [(EXPORTER, e.exporter.as_str())];
            f[0].push(&l, load(&e.queue_size));
            f[1].push(&l, load(&e.queue_capacity));
        }
        fams.extend(f);

        let mut hs = family(&spec::TLS_HANDSHAKES);
        let mut rl = family(&spec::TLS_RELOADS);
        for t in self.tls.lock().iter() {
            let l = t.listener.as_str();
            for (outcome, c) in [
                ("ok", &t.handshakes_ok),
                ("failed", &t.handshakes_failed),
                ("timeout", &t.handshakes_timed_out),
            ] {
                hs.push(&[(LISTENER, l), (OUTCOME, outcome)], load(c));
            }
            for (outcome, c) in [("ok", &t.reloads_ok), ("failed", &t.reloads_failed)] {
                rl.push(&[(LISTENER, l), (OUTCOME, outcome)], load(c));
            }
        }
        fams.extend([hs, rl]);

        let mut open = family(&spec::CONNECTIONS_OPEN);
        let mut accepted = family(&spec::CONNECTIONS_ACCEPTED);
        let mut refused = family(&spec::CONNECTIONS_REFUSED);
        let mut refused_req = family(&spec::REQUESTS_REFUSED);
        let mut closed = family(&spec::CONNECTIONS_CLOSED);
        for c in self.listeners.lock().iter() {
            let name = c.listener.as_str();
            open.push(&[(LISTENER, name)], load(&c.open));
            accepted.push(&[(LISTENER, name)], load(&c.accepted));
            for (reason, n) in [
                ("max_connections", &c.refused_over_cap),
                ("max_connections_per_client", &c.refused_per_client),
            ] {
                refused.push(&[(LISTENER, name), (REASON, reason)], load(n));
            }
            refused_req.push(
                &[(LISTENER, name), (REASON, "host_not_allowed")],
                load(&c.refused_host),
            );
            for (reason, n) in [
                ("first_byte_timeout", &c.closed_first_byte_timeout),
                ("idle_timeout", &c.closed_idle_timeout),
                ("evicted", &c.closed_evicted),
            ] {
                closed.push(&[(LISTENER, name), (REASON, reason)], load(n));
            }
        }
        fams.extend([open, accepted, refused, refused_req, closed]);

        fams.push(family(&spec::PROCESS_UPTIME).with(&[], self.started.elapsed().as_secs_f64()));
        if let Some((rss, cpu)) = process_stats() {
            fams.push(family(&spec::PROCESS_MEMORY_RSS).with(&[], rss));
            fams.push(family(&spec::PROCESS_CPU_SECONDS).with(&[], cpu));
        }
        fams.push(family(&spec::COMPONENT_PANICS).with(&[], load(&self.tick_panics)));
        fams
    }

    /// Request-latency histograms, rendered as raw exposition lines (families are written
    /// by [`render_text`]).
    pub fn render_histograms(&self, out: &mut String) {
        let spec = &families::spec::PUSH_DURATION;
        spec.header_in(self.prefix, out);
        let name = spec.name_in(self.prefix);
        for r in self.receivers.lock().iter() {
            let mut lines = Vec::new();
            r.latency.render(
                &name,
                &[
                    (families::LABEL_RECEIVER, &r.receiver),
                    (families::LABEL_TRANSPORT, r.transport),
                ],
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

    /// Each family the host reports is its declared spec (name, type, help, labels in
    /// order), in declaration order, and the histogram is written under its spec's header.
    #[test]
    fn families_follow_their_declaration() {
        let t = Telemetry::default();
        let r = t.receiver("otlp", "grpc");
        r.reject("bad_content_type");
        r.drop_items(Signal::Metrics, "no_cluster", 2);
        r.drop_items(Signal::Traces, "no_cluster", 1);
        r.drop_items(Signal::Logs, "no_cluster", 1);
        r.latency.observe(Duration::from_millis(3));
        t.processor("ingero");
        t.exporter("prometheus");
        t.tls("otlp/http");
        t.listener("otlp/http");
        let fams = t.families();
        let declared: Vec<_> = families::FAMILIES
            .iter()
            .filter(|s| s.kind.sample_type().is_some())
            .collect();
        assert_eq!(fams.len(), declared.len());
        for (f, spec) in fams.iter().zip(declared) {
            assert!(
                spec.describes_in(t.metric_prefix(), f),
                "{} does not match {spec:?}",
                f.name
            );
            assert!(!f.samples.is_empty(), "{} has no sample", f.name);
        }
        let mut text = String::new();
        t.render_histograms(&mut text);
        let push = &families::spec::PUSH_DURATION;
        let mut head = String::new();
        push.header_in(t.metric_prefix(), &mut head);
        assert!(text.starts_with(&head), "{text}");
        assert!(
            text.contains(&format!(
                "{}_count{{receiver=\"otlp\",transport=\"grpc\"}} 1\n",
                push.name_in(t.metric_prefix())
            )),
            "{text}"
        );
    }

    /// Every family the host writes is otelcol's or under the prefix it was given; by
    /// default that is the library's own, which names nothing of Ingero.
    #[test]
    fn own_families_take_the_given_prefix() {
        let page = |t: Telemetry| {
            let r = t.receiver("otlp", "grpc");
            r.latency.observe(Duration::from_millis(3));
            t.tls("otlp/grpc");
            t.listener("otlp/grpc");
            let mut s = String::new();
            render_text(&t.families(), &mut s);
            t.render_histograms(&mut s);
            s
        };
        let types = |s: &str| -> Vec<String> {
            s.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split(' ').next())
                .map(str::to_string)
                .collect()
        };
        let generic = types(&page(Telemetry::default()));
        let named = types(&page(Telemetry::with_prefix(MetricPrefix::new("dist_"))));
        assert_eq!(generic.len(), families::FAMILIES.len());
        assert_eq!(generic.len(), named.len());
        assert!(
            generic
                .iter()
                .any(|n| n == "collector_host_connections_open")
        );
        assert!(named.iter().any(|n| n == "dist_push_duration_seconds"));
        for (g, n) in generic.iter().zip(&named) {
            assert!(!g.contains("ingero"), "{g}");
            match g.strip_prefix("collector_host_") {
                Some(rest) => assert_eq!(n.strip_prefix("dist_"), Some(rest)),
                None => {
                    assert!(g.starts_with("otelcol_"), "{g}");
                    assert_eq!(g, n);
                }
            }
        }
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
