//! `debug` exporter: a human-readable summary of what passes through, on stderr.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::ResourceMetrics;
use component::otlp::{count_points, point_value, resource_attrs};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::config::model::{DebugExporterConfig, Verbosity};
use crate::pipeline::Exporter;
use crate::telemetry::{ExporterCounters, Signal};

#[derive(Debug)]
pub struct DebugExporter {
    pub id: String,
    pub cfg: DebugExporterConfig,
    pub counters: Arc<ExporterCounters>,
}

fn attr_list(attrs: &[component::otlp::KeyValue]) -> String {
    attrs
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(component::otlp::AnyValueKind::StringValue(s)) => s.clone(),
                Some(component::otlp::AnyValueKind::IntValue(i)) => i.to_string(),
                Some(component::otlp::AnyValueKind::DoubleValue(d)) => d.to_string(),
                Some(component::otlp::AnyValueKind::BoolValue(b)) => b.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            format!("{}={}", kv.key, v)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Render a metrics batch as the debug exporter prints it.
pub fn summarize(data: &[ResourceMetrics], verbosity: Verbosity) -> String {
    let metrics: usize = data
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .map(|s| s.metrics.len())
        .sum();
    let mut out = format!(
        "Metrics: resource metrics: {}, metrics: {metrics}, data points: {}\n",
        data.len(),
        count_points(data)
    );
    if verbosity == Verbosity::Basic {
        return out;
    }
    for rm in data {
        out.push_str(&format!(
            "  resource {{{}}}\n",
            attr_list(resource_attrs(rm))
        ));
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let pts = component::otlp::number_points(m);
                if verbosity == Verbosity::Normal {
                    let vals: Vec<String> = pts
                        .iter()
                        .filter_map(point_value)
                        .map(|v| v.to_string())
                        .collect();
                    out.push_str(&format!("    {} [{}] {}\n", m.name, m.unit, vals.join(" ")));
                } else {
                    out.push_str(&format!("    {} [{}]\n", m.name, m.unit));
                    for p in pts {
                        out.push_str(&format!(
                            "      {{{}}} t={} v={}\n",
                            attr_list(&p.attributes),
                            p.time_unix_nano,
                            point_value(p)
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "-".into())
                        ));
                    }
                }
            }
        }
    }
    out
}

impl Exporter for DebugExporter {
    fn consume_metrics(&self, data: &[ResourceMetrics]) {
        let text = summarize(data, self.cfg.verbosity);
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("[{}] {text}", self.id).as_bytes());
        self.counters.sent[ExporterCounters::idx(Signal::Metrics)]
            .fetch_add(count_points(data), Relaxed);
    }

    fn consume_traces(&self, data: &ExportTraceServiceRequest) {
        let n: usize = data
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        let _ = writeln!(
            std::io::stderr().lock(),
            "[{}] Traces: resource spans: {}, spans: {n}",
            self.id,
            data.resource_spans.len()
        );
        self.counters.sent[ExporterCounters::idx(Signal::Traces)].fetch_add(n as u64, Relaxed);
    }

    fn consume_logs(&self, data: &ExportLogsServiceRequest) {
        let n: usize = data
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        let _ = writeln!(
            std::io::stderr().lock(),
            "[{}] Logs: resource logs: {}, log records: {n}",
            self.id,
            data.resource_logs.len()
        );
        self.counters.sent[ExporterCounters::idx(Signal::Logs)].fetch_add(n as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_grow_with_verbosity() {
        let data = testkit::AgentPush::new("c1", "n1", 0.91)
            .to_proto()
            .resource_metrics;
        let basic = summarize(&data, Verbosity::Basic);
        assert_eq!(
            basic,
            "Metrics: resource metrics: 1, metrics: 9, data points: 9\n"
        );
        let normal = summarize(&data, Verbosity::Normal);
        assert!(
            normal.contains("ingero.node.health_score [1] 0.91"),
            "{normal}"
        );
        let detailed = summarize(&data, Verbosity::Detailed);
        assert!(detailed.contains("ingero.node.state=active"), "{detailed}");
    }
}
