//! OTLP batches to rows: every data point, span and log record becomes one row of the
//! catch-all tables (`points`, `spans`, `logs`, attributes kept as JSON), and the points the
//! common questions read also become rows of the typed tables (`health_scores`,
//! `straggler_events`, `fleet_stragglers`, `nccl`, `node_info`), and the causal chains a
//! straggler event or detection span carries become rows of `causal_chains`. Pure: no I/O.

use component::otlp::{
    AnyValueKind, KeyValue, MetricKind, NumberValue, Resource, get_f64, get_i64, get_str,
};
use ingero_wire::{attr, metric, resource};

use crate::chains;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;

/// Attribute keys read as a causal chain id (data point, span or log attributes).
pub const CAUSAL_CHAIN_KEYS: [&str; 2] = ["causal_chain_id", "ingero.causal_chain_id"];

#[derive(Debug, Clone, PartialEq)]
pub struct PointRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub metric: String,
    /// `gauge`, `sum`, `histogram`, `exponential_histogram`, `summary`.
    pub kind: &'static str,
    /// The number (gauge, sum), else the sum of the distribution when set.
    pub value: Option<f64>,
    pub causal_chain_id: Option<String>,
    /// Data-point attributes as a JSON object.
    pub attributes: String,
    /// Resource attributes as a JSON object.
    pub resource: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub score: f64,
    pub state: Option<String>,
    pub workload_type: Option<String>,
    pub detection_mode: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// `ingero.event.id`, else `<cluster>/<node>/<time>` (one row per id: retries of an
    /// acknowledged batch do not add rows).
    pub event_id: String,
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub value: i64,
    pub threshold: Option<f64>,
    pub score: Option<f64>,
    pub dominant_signal: Option<String>,
    pub detection_mode: Option<String>,
    pub rank: Option<i64>,
    /// The straggler episode's id (`ingero.causal_chain_id`), keying its causal chains.
    pub causal_chain_id: Option<String>,
}

/// One causal chain of a straggler episode (see [`chains`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChainRow {
    /// The episode (`ingero.causal_chain_id`).
    pub causal_chain_id: String,
    /// 0 for the most severe chain of the event, then 1, 2.
    pub position: i32,
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    /// The `ingero.event.id` of the event (or span) that carried the chains.
    pub event_id: Option<String>,
    pub chain: chains::Chain,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlagRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NcclRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    /// `duration_ms`, `bytes`, `barrier_wait_ms` or `peer_lag_ms`.
    pub metric: &'static str,
    pub op_type: Option<String>,
    pub comm_id_hash: Option<String>,
    pub rank: Option<i64>,
    pub nranks: Option<i64>,
    pub op_seq: Option<i64>,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InfoRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub provider: Option<String>,
    pub gpu_model: Option<String>,
    pub gpu_count: Option<i64>,
    pub world_size: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpanRow {
    pub ts_ns: i64,
    pub end_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub name: String,
    pub kind: i32,
    pub status_code: i32,
    pub causal_chain_id: Option<String>,
    pub attributes: String,
    pub resource: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub ts_ns: i64,
    pub cluster_id: Option<String>,
    pub node_id: Option<String>,
    pub severity_number: i32,
    pub severity_text: Option<String>,
    pub body: Option<String>,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    pub event_id: Option<String>,
    pub causal_chain_id: Option<String>,
    pub attributes: String,
    pub resource: String,
}

/// The rows of one or more exports, committed together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    pub points: Vec<PointRow>,
    pub health: Vec<HealthRow>,
    pub events: Vec<EventRow>,
    pub flags: Vec<FlagRow>,
    pub nccl: Vec<NcclRow>,
    pub info: Vec<InfoRow>,
    pub spans: Vec<SpanRow>,
    pub logs: Vec<LogRow>,
    pub chains: Vec<ChainRow>,
    /// Metric points dropped because a value they carry is NaN or infinite (answered as
    /// partial success; no answer could carry them as JSON numbers).
    pub rejected_nonfinite: u64,
    /// `ingero.causal_chains` attributes refused (the event or span itself is stored).
    pub rejected_chains: u64,
    /// Why the first of them was refused.
    pub chains_error: Option<String>,
}

impl Rows {
    pub fn is_empty(&self) -> bool {
        self.points.is_empty() && self.spans.is_empty() && self.logs.is_empty()
    }

    /// Rows of every table, for the writer's counters.
    pub fn len(&self) -> usize {
        self.points.len()
            + self.health.len()
            + self.events.len()
            + self.flags.len()
            + self.nccl.len()
            + self.info.len()
            + self.spans.len()
            + self.logs.len()
            + self.chains.len()
    }

    pub fn append(&mut self, mut other: Rows) {
        self.points.append(&mut other.points);
        self.health.append(&mut other.health);
        self.events.append(&mut other.events);
        self.flags.append(&mut other.flags);
        self.nccl.append(&mut other.nccl);
        self.info.append(&mut other.info);
        self.spans.append(&mut other.spans);
        self.logs.append(&mut other.logs);
        self.chains.append(&mut other.chains);
        self.rejected_nonfinite += other.rejected_nonfinite;
        self.rejected_chains += other.rejected_chains;
        if self.chains_error.is_none() {
            self.chains_error = other.chains_error;
        }
    }
}

/// An OTLP `AnyValue` as JSON (bytes as lower-case hex).
pub fn any_to_json(v: Option<&AnyValueKind>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        None => J::Null,
        Some(AnyValueKind::StringValue(s)) => J::String(s.clone()),
        Some(AnyValueKind::BoolValue(b)) => J::Bool(*b),
        Some(AnyValueKind::IntValue(i)) => J::from(*i),
        Some(AnyValueKind::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(J::Null, J::Number)
        }
        Some(AnyValueKind::BytesValue(b)) => J::String(hex::encode(b)),
        Some(AnyValueKind::ArrayValue(a)) => J::Array(
            a.values
                .iter()
                .map(|v| any_to_json(v.value.as_ref()))
                .collect(),
        ),
        Some(AnyValueKind::KvlistValue(kv)) => attrs_value(&kv.values),
        Some(other) => J::String(format!("{other:?}")),
    }
}

fn attrs_value(attrs: &[KeyValue]) -> serde_json::Value {
    let mut m = serde_json::Map::with_capacity(attrs.len());
    for kv in attrs {
        m.insert(
            kv.key.clone(),
            any_to_json(kv.value.as_ref().and_then(|v| v.value.as_ref())),
        );
    }
    serde_json::Value::Object(m)
}

/// Attributes as a JSON object text.
pub fn attrs_json(attrs: &[KeyValue]) -> String {
    attrs_value(attrs).to_string()
}

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

fn causal(attrs: &[KeyValue]) -> Option<String> {
    CAUSAL_CHAIN_KEYS
        .iter()
        .find_map(|k| get_str(attrs, k))
        .map(str::to_string)
}

/// The chains `attrs` carry (`ingero.causal_chains` under `ingero.causal_chain_id`) as
/// rows; refused ones are counted in `out` and leave nothing behind.
fn chain_rows(
    out: &mut Rows,
    attrs: &[KeyValue],
    ts_ns: i64,
    origin: &Origin,
    event_id: Option<&str>,
) {
    let Some(value) = component::otlp::find(attrs, chains::CHAINS_KEY) else {
        return;
    };
    let text = match value {
        AnyValueKind::StringValue(s) => Some(s.as_str()),
        _ => None,
    };
    let parsed = chains::parse(text).and_then(|c| match causal(attrs) {
        _ if c.is_empty() => Ok((String::new(), c)),
        Some(id) if chains::valid_episode_id(&id) => Ok((id, c)),
        _ => Err(chains::ChainError::NoEpisodeId),
    });
    match parsed {
        Ok((episode, list)) => {
            for (i, chain) in list.into_iter().enumerate() {
                out.chains.push(ChainRow {
                    causal_chain_id: episode.clone(),
                    position: i32::try_from(i).unwrap_or(i32::MAX),
                    ts_ns,
                    cluster_id: origin.cluster.clone(),
                    node_id: origin.node.clone(),
                    event_id: event_id.map(str::to_string),
                    chain,
                });
            }
        }
        Err(e) => {
            out.rejected_chains += 1;
            if out.chains_error.is_none() {
                out.chains_error = Some(e.to_string());
            }
        }
    }
}

fn ts(t: u64, received_ns: i64) -> i64 {
    if t == 0 {
        received_ns
    } else {
        i64::try_from(t).unwrap_or(i64::MAX)
    }
}

/// What every row of one resource carries: its cluster (`ingero.cluster.id`, else the
/// export's request cluster), its node and its attributes as JSON.
struct Origin {
    cluster: Option<String>,
    node: Option<String>,
    resource: String,
}

impl Origin {
    fn of<'a>(
        res: Option<&'a Resource>,
        request_cluster: Option<&str>,
    ) -> (Origin, &'a [KeyValue]) {
        let attrs = res.map_or(&[][..], |r| r.attributes.as_slice());
        let origin = Origin {
            cluster: owned(get_str(attrs, resource::CLUSTER_ID).or(request_cluster)),
            node: owned(get_str(attrs, resource::NODE_ID)),
            resource: attrs_json(attrs),
        };
        (origin, attrs)
    }
}

/// Rows of a metrics batch.
pub fn from_metrics(
    data: &[ResourceMetrics],
    request_cluster: Option<&str>,
    received_ns: i64,
) -> Rows {
    let mut out = Rows::default();
    for rm in data {
        let (origin, res) = Origin::of(rm.resource.as_ref(), request_cluster);
        let extra = ResourceExtra {
            provider: owned(get_str(res, resource::PROVIDER)),
            world_size: get_i64(res, resource::WORLD_SIZE),
        };
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                type Points<'a> = Vec<(u64, &'a [KeyValue], Option<f64>)>;
                let (kind, points): (&'static str, Points<'_>) = match &m.data {
                    Some(MetricKind::Gauge(g)) => (
                        "gauge",
                        g.data_points
                            .iter()
                            .map(|p| (p.time_unix_nano, p.attributes.as_slice(), number(p.value)))
                            .collect(),
                    ),
                    Some(MetricKind::Sum(s)) => (
                        "sum",
                        s.data_points
                            .iter()
                            .map(|p| (p.time_unix_nano, p.attributes.as_slice(), number(p.value)))
                            .collect(),
                    ),
                    Some(MetricKind::Histogram(h)) => (
                        "histogram",
                        h.data_points
                            .iter()
                            .map(|p| (p.time_unix_nano, p.attributes.as_slice(), p.sum))
                            .collect(),
                    ),
                    Some(MetricKind::ExponentialHistogram(h)) => (
                        "exponential_histogram",
                        h.data_points
                            .iter()
                            .map(|p| (p.time_unix_nano, p.attributes.as_slice(), p.sum))
                            .collect(),
                    ),
                    Some(MetricKind::Summary(s)) => (
                        "summary",
                        s.data_points
                            .iter()
                            .map(|p| (p.time_unix_nano, p.attributes.as_slice(), Some(p.sum)))
                            .collect(),
                    ),
                    None => ("gauge", Vec::new()),
                };
                for (t, attrs, value) in points {
                    if !finite(&m.name, attrs, value) {
                        out.rejected_nonfinite += 1;
                        continue;
                    }
                    let ts_ns = ts(t, received_ns);
                    out.points.push(PointRow {
                        ts_ns,
                        cluster_id: origin.cluster.clone(),
                        node_id: origin.node.clone(),
                        metric: m.name.clone(),
                        kind,
                        value,
                        causal_chain_id: causal(attrs),
                        attributes: attrs_json(attrs),
                        resource: origin.resource.clone(),
                    });
                    let Some(v) = value else { continue };
                    typed(&mut out, &m.name, ts_ns, attrs, v, &origin, &extra);
                }
            }
        }
    }
    out
}

/// Whether a point's value, and the numbers a straggler event carries, are finite.
fn finite(name: &str, attrs: &[KeyValue], value: Option<f64>) -> bool {
    let ok = |v: Option<f64>| v.is_none_or(f64::is_finite);
    ok(value)
        && (name != metric::STRAGGLER_EVENT
            || (ok(get_f64(attrs, attr::THRESHOLD)) && ok(get_f64(attrs, attr::SCORE))))
}

fn number(v: Option<NumberValue>) -> Option<f64> {
    match v? {
        NumberValue::AsDouble(d) => Some(d),
        NumberValue::AsInt(i) => Some(i as f64),
    }
}

/// Resource attributes only the typed metric tables read.
struct ResourceExtra {
    provider: Option<String>,
    world_size: Option<i64>,
}

fn typed(
    out: &mut Rows,
    name: &str,
    ts_ns: i64,
    attrs: &[KeyValue],
    v: f64,
    origin: &Origin,
    extra: &ResourceExtra,
) {
    let (cluster, node) = (&origin.cluster, &origin.node);
    let nccl_metric = match name {
        metric::HEALTH_SCORE => {
            out.health.push(HealthRow {
                ts_ns,
                cluster_id: cluster.clone(),
                node_id: node.clone(),
                score: v,
                state: owned(get_str(attrs, attr::NODE_STATE)),
                workload_type: owned(get_str(attrs, attr::WORKLOAD_TYPE)),
                detection_mode: owned(get_str(attrs, attr::DETECTION_MODE)),
            });
            return;
        }
        metric::STRAGGLER_EVENT => {
            chain_rows(out, attrs, ts_ns, origin, get_str(attrs, attr::EVENT_ID));
            let event_id = get_str(attrs, attr::EVENT_ID)
                .map(str::to_string)
                .unwrap_or_else(|| {
                    format!(
                        "{}/{}/{ts_ns}",
                        cluster.as_deref().unwrap_or(""),
                        node.as_deref().unwrap_or("")
                    )
                });
            out.events.push(EventRow {
                event_id,
                ts_ns,
                cluster_id: cluster.clone(),
                node_id: node.clone(),
                value: v as i64,
                threshold: get_f64(attrs, attr::THRESHOLD),
                score: get_f64(attrs, attr::SCORE),
                dominant_signal: owned(get_str(attrs, attr::DOMINANT_SIGNAL)),
                detection_mode: owned(get_str(attrs, attr::DETECTION_MODE)),
                rank: get_i64(attrs, "rank").or_else(|| get_i64(attrs, resource::NODE_RANK)),
                causal_chain_id: causal(attrs),
            });
            return;
        }
        metric::FLEET_NODE_STRAGGLER => {
            out.flags.push(FlagRow {
                ts_ns,
                cluster_id: cluster.clone(),
                node_id: node.clone(),
                value: v,
            });
            return;
        }
        metric::NODE_INFO => {
            out.info.push(InfoRow {
                ts_ns,
                cluster_id: cluster.clone(),
                node_id: node.clone(),
                provider: extra.provider.clone(),
                gpu_model: owned(get_str(attrs, attr::GPU_MODEL)),
                gpu_count: get_i64(attrs, attr::GPU_COUNT),
                world_size: extra.world_size,
            });
            return;
        }
        metric::NCCL_DURATION_MS => "duration_ms",
        metric::NCCL_BYTES => "bytes",
        metric::NCCL_BARRIER_WAIT_MS => "barrier_wait_ms",
        metric::NCCL_PEER_LAG_MS => "peer_lag_ms",
        _ => return,
    };
    out.nccl.push(NcclRow {
        ts_ns,
        cluster_id: cluster.clone(),
        node_id: node.clone(),
        metric: nccl_metric,
        op_type: owned(get_str(attrs, attr::NCCL_OP_TYPE)),
        comm_id_hash: owned(get_str(attrs, attr::NCCL_COMM_ID_HASH)),
        rank: get_i64(attrs, attr::NCCL_RANK),
        nranks: get_i64(attrs, attr::NCCL_NRANKS),
        op_seq: get_i64(attrs, attr::NCCL_OP_SEQ),
        value: v,
    });
}

fn hex_id(b: &[u8]) -> Option<String> {
    (!b.is_empty() && b.iter().any(|x| *x != 0)).then(|| hex::encode(b))
}

/// Rows of a traces export.
pub fn from_traces(
    req: &ExportTraceServiceRequest,
    request_cluster: Option<&str>,
    received_ns: i64,
) -> Rows {
    let mut out = Rows::default();
    for rs in &req.resource_spans {
        let (origin, _) = Origin::of(rs.resource.as_ref(), request_cluster);
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                let ts_ns = ts(s.start_time_unix_nano, received_ns);
                if s.name == chains::DETECTION_SPAN {
                    chain_rows(
                        &mut out,
                        &s.attributes,
                        ts_ns,
                        &origin,
                        get_str(&s.attributes, attr::EVENT_ID),
                    );
                }
                out.spans.push(SpanRow {
                    ts_ns,
                    end_ns: ts(s.end_time_unix_nano, received_ns),
                    cluster_id: origin.cluster.clone(),
                    node_id: origin.node.clone(),
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex_id(&s.parent_span_id),
                    name: s.name.clone(),
                    kind: s.kind,
                    status_code: s.status.as_ref().map_or(0, |st| st.code),
                    causal_chain_id: causal(&s.attributes),
                    attributes: attrs_json(&s.attributes),
                    resource: origin.resource.clone(),
                });
            }
        }
    }
    out
}

/// Rows of a logs export.
pub fn from_logs(
    req: &ExportLogsServiceRequest,
    request_cluster: Option<&str>,
    received_ns: i64,
) -> Rows {
    let mut out = Rows::default();
    for rl in &req.resource_logs {
        let (origin, _) = Origin::of(rl.resource.as_ref(), request_cluster);
        for sl in &rl.scope_logs {
            for l in &sl.log_records {
                let t = if l.time_unix_nano != 0 {
                    l.time_unix_nano
                } else {
                    l.observed_time_unix_nano
                };
                let body = match l.body.as_ref().and_then(|b| b.value.as_ref()) {
                    None => None,
                    Some(AnyValueKind::StringValue(s)) => Some(s.clone()),
                    other => Some(any_to_json(other).to_string()),
                };
                out.logs.push(LogRow {
                    ts_ns: ts(t, received_ns),
                    cluster_id: origin.cluster.clone(),
                    node_id: origin.node.clone(),
                    severity_number: l.severity_number,
                    severity_text: (!l.severity_text.is_empty()).then(|| l.severity_text.clone()),
                    body,
                    trace_id: hex_id(&l.trace_id),
                    span_id: hex_id(&l.span_id),
                    event_id: owned(get_str(&l.attributes, attr::EVENT_ID)),
                    causal_chain_id: causal(&l.attributes),
                    attributes: attrs_json(&l.attributes),
                    resource: origin.resource.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use component::otlp::{gauge_f64, kv_f64, kv_i64, kv_str, point_f64, resource_metrics};

    fn rm(node: &str, metrics: Vec<component::otlp::Metric>) -> ResourceMetrics {
        resource_metrics(
            vec![
                kv_str(resource::CLUSTER_ID, "prod"),
                kv_str(resource::NODE_ID, node),
            ],
            "test",
            metrics,
        )
    }

    #[test]
    fn health_event_nccl_and_info_points_fill_their_tables_and_points() {
        let batch = vec![rm(
            "n1",
            vec![
                gauge_f64(
                    metric::HEALTH_SCORE,
                    "1",
                    vec![point_f64(vec![kv_str(attr::NODE_STATE, "active")], 5, 0.7)],
                ),
                gauge_f64(
                    metric::STRAGGLER_EVENT,
                    "1",
                    vec![point_f64(
                        vec![
                            kv_str(attr::EVENT_ID, "e-1"),
                            kv_f64(attr::THRESHOLD, 0.8),
                            kv_f64(attr::SCORE, 0.7),
                            kv_str("causal_chain_id", "chain-9"),
                        ],
                        6,
                        1.0,
                    )],
                ),
                gauge_f64(
                    metric::NCCL_PEER_LAG_MS,
                    "ms",
                    vec![point_f64(
                        vec![
                            kv_str(attr::NCCL_OP_TYPE, "ncclAllReduce"),
                            kv_i64(attr::NCCL_RANK, 5),
                        ],
                        7,
                        290.0,
                    )],
                ),
            ],
        )];
        let r = from_metrics(&batch, None, 99);
        assert_eq!(r.points.len(), 3);
        assert_eq!(r.health.len(), 1);
        assert_eq!(r.health[0].state.as_deref(), Some("active"));
        assert_eq!(r.events[0].event_id, "e-1");
        assert_eq!(r.events[0].threshold, Some(0.8));
        assert_eq!(r.nccl[0].rank, Some(5));
        assert_eq!(r.nccl[0].metric, "peer_lag_ms");
        let ev = r
            .points
            .iter()
            .find(|p| p.metric == metric::STRAGGLER_EVENT)
            .unwrap();
        assert_eq!(ev.causal_chain_id.as_deref(), Some("chain-9"));
        let attrs: serde_json::Value = serde_json::from_str(&ev.attributes).unwrap();
        assert_eq!(attrs["ingero.event.id"], "e-1");
        assert_eq!(ev.cluster_id.as_deref(), Some("prod"));
    }

    #[test]
    fn a_point_without_time_takes_the_receive_time_and_the_request_cluster() {
        let batch = vec![resource_metrics(
            vec![kv_str(resource::NODE_ID, "n")],
            "test",
            vec![gauge_f64("x", "1", vec![point_f64(vec![], 0, 1.0)])],
        )];
        let r = from_metrics(&batch, Some("req"), 42);
        assert_eq!(r.points[0].ts_ns, 42);
        assert_eq!(r.points[0].cluster_id.as_deref(), Some("req"));
    }
}
