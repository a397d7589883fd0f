//! Test fixtures in the Ingero agent's exact wire format.
//!
//! The JSON builders reproduce what the unmodified Go agent sends (spec sections 1.2 to 1.5
//! and 5.3): hand-built proto3-JSON with `timeUnixNano` as a string, int64 values as JSON
//! numbers, `aggregationTemporality` as the integer 2, `attributes` omitted when empty, scope
//! `ingero.health` / `0.10.0`. The protobuf builders produce the same content as
//! `ExportMetricsServiceRequest` bytes.

#[cfg(feature = "bench")]
pub mod cpu_time;
pub mod crate_graph;
#[cfg(feature = "push")]
pub mod push;

use component::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, Gauge, InstrumentationScope, KeyValue,
    Metric, MetricKind, NumberDataPoint, NumberValue, Resource, ResourceMetrics, ScopeMetrics, Sum,
};
use ingero_wire::{attr, metric, resource};
use prost::Message;
use serde_json::{Value, json};

/// One agent's state for one push.
#[derive(Debug, Clone)]
pub struct AgentPush {
    pub cluster_id: String,
    pub node_id: String,
    pub score: f64,
    /// `active`, `calibrating` or `idle`.
    pub state: String,
    pub workload_type: String,
    /// 16 hex chars or empty.
    pub cgroup_path_hash: String,
    pub detection_mode: String,
    pub fleet_reachable: bool,
    /// 0 = not distributed (then no world_size/rank resource attributes).
    pub world_size: i64,
    pub node_rank: i64,
    pub provider: Option<String>,
    pub gpu_model: Option<String>,
    pub gpu_count: i64,
    pub time_unix_nano: u64,
    /// Per-cgroup cumulative sums (only the real collector sends them).
    pub with_cgroup_sums: bool,
}

impl AgentPush {
    /// A healthy active training node with the agent's defaults.
    pub fn new(cluster_id: &str, node_id: &str, score: f64) -> Self {
        AgentPush {
            cluster_id: cluster_id.to_string(),
            node_id: node_id.to_string(),
            score,
            state: "active".to_string(),
            workload_type: "training".to_string(),
            cgroup_path_hash: "8a5edab282632443".to_string(),
            detection_mode: "none".to_string(),
            fleet_reachable: true,
            world_size: 0,
            node_rank: 0,
            provider: None,
            gpu_model: None,
            gpu_count: 0,
            time_unix_nano: 1_763_769_600_000_000_000,
            with_cgroup_sums: false,
        }
    }

    pub fn state(mut self, s: &str) -> Self {
        self.state = s.to_string();
        self
    }

    pub fn at(mut self, time_unix_nano: u64) -> Self {
        self.time_unix_nano = time_unix_nano;
        self
    }

    pub fn gpu(mut self, model: &str, count: i64) -> Self {
        self.gpu_model = Some(model.to_string());
        self.gpu_count = count;
        self
    }

    pub fn provider(mut self, p: &str) -> Self {
        self.provider = Some(p.to_string());
        self
    }

    pub fn world(mut self, world_size: i64, rank: i64) -> Self {
        self.world_size = world_size;
        self.node_rank = rank;
        self
    }

    pub fn cohort(mut self, hash: &str) -> Self {
        self.cgroup_path_hash = hash.to_string();
        self
    }

    fn resource_attrs_json(&self, with_provider: bool) -> Vec<Value> {
        let mut v = vec![
            str_kv(resource::NODE_ID, &self.node_id),
            str_kv(resource::CLUSTER_ID, &self.cluster_id),
        ];
        if self.world_size > 0 {
            v.push(int_kv(resource::WORLD_SIZE, self.world_size));
            v.push(int_kv(resource::NODE_RANK, self.node_rank));
        }
        if with_provider && let Some(p) = &self.provider {
            v.push(str_kv(resource::PROVIDER, p));
        }
        v
    }

    fn dp_attrs_json(&self) -> Vec<Value> {
        vec![
            str_kv(attr::NODE_STATE, &self.state),
            str_kv(attr::WORKLOAD_TYPE, &self.workload_type),
        ]
    }

    /// The health push exactly as the Go agent's `buildPayload` writes it.
    pub fn to_json(&self) -> String {
        let t = self.time_unix_nano.to_string();
        let dp = self.dp_attrs_json();
        let mut score_attrs = dp.clone();
        score_attrs.push(str_kv(attr::CGROUP_PATH_HASH, &self.cgroup_path_hash));
        let g = |name: &str, attrs: &[Value], value: Value| -> Value {
            let mut point = serde_json::Map::new();
            if !attrs.is_empty() {
                point.insert("attributes".into(), Value::Array(attrs.to_vec()));
            }
            point.insert("timeUnixNano".into(), Value::String(t.clone()));
            match value {
                Value::Number(n) if n.is_i64() => point.insert("asInt".into(), Value::Number(n)),
                other => point.insert("asDouble".into(), other),
            };
            json!({"name": name, "unit": "1", "gauge": {"dataPoints": [Value::Object(point)]}})
        };
        let sub = self.score.clamp(0.0, 1.0);
        let mut metrics = vec![
            g(metric::HEALTH_SCORE, &score_attrs, json!(self.score)),
            g(metric::THROUGHPUT_RATIO, &dp, json!(sub)),
            g(metric::COMPUTE_EFFICIENCY, &dp, json!(0.9)),
            g(metric::MEMORY_HEADROOM, &dp, json!(0.85)),
            g(metric::CPU_AVAILABILITY, &dp, json!(0.9)),
            g(metric::DEGRADATION_WARNING, &dp, json!(0)),
            g(
                metric::DETECTION_MODE,
                &[str_kv(attr::DETECTION_MODE, &self.detection_mode)],
                json!(1),
            ),
            g(
                metric::FLEET_REACHABLE,
                &[],
                json!(i64::from(self.fleet_reachable)),
            ),
        ];
        if let Some(model) = &self.gpu_model
            && self.gpu_count > 0
        {
            metrics.push(g(
                metric::NODE_INFO,
                &[
                    str_kv(attr::GPU_MODEL, model),
                    int_kv(attr::GPU_COUNT, self.gpu_count),
                ],
                json!(1),
            ));
        }
        metrics.push(g(metric::NODE_WORLD_SIZE, &[], json!(self.world_size)));
        if self.with_cgroup_sums {
            let sum = |name: &str, unit: &str, attrs: Vec<Value>, v: i64| {
                json!({"name": name, "unit": unit, "sum": {"dataPoints": [
                    {"attributes": attrs, "timeUnixNano": t, "asInt": v}
                ], "aggregationTemporality": 2, "isMonotonic": true}})
            };
            let h = str_kv(attr::CGROUP_PATH_HASH, &self.cgroup_path_hash);
            metrics.push(sum(
                metric::CUDA_KERNEL_LAUNCH_TOTAL,
                "1",
                vec![h.clone()],
                120_000,
            ));
            metrics.push(sum(
                metric::CPU_STALL_NANOS_TOTAL,
                "ns",
                vec![h.clone()],
                5_000_000,
            ));
            metrics.push(sum(
                metric::CUDA_MEMCPY_BYTES_TOTAL,
                "By",
                vec![h, str_kv(attr::MEMCPY_DIRECTION, "h2d")],
                1 << 30,
            ));
        }
        envelope(self.resource_attrs_json(true), metrics)
    }

    /// The same content as OTLP protobuf (`ExportMetricsServiceRequest`).
    pub fn to_proto(&self) -> ExportMetricsServiceRequest {
        let rm = json_to_proto(&self.to_json());
        ExportMetricsServiceRequest {
            resource_metrics: rm,
        }
    }

    pub fn to_proto_bytes(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }

    /// The standalone straggler-event push (spec 1.5): value 1 while straggler, 0 on recovery.
    pub fn straggler_event_json(&self, value: i64, threshold: f64, event_id: &str) -> String {
        let point = json!({
            "attributes": [
                str_kv(attr::DETECTION_MODE, &self.detection_mode),
                double_kv(attr::THRESHOLD, threshold),
                double_kv(attr::SCORE, self.score),
                str_kv(attr::DOMINANT_SIGNAL, "throughput"),
                str_kv(attr::EVENT_ID, event_id),
            ],
            "timeUnixNano": self.time_unix_nano.to_string(),
            "asInt": value,
        });
        let m =
            json!({"name": metric::STRAGGLER_EVENT, "unit": "1", "gauge": {"dataPoints": [point]}});
        envelope(self.resource_attrs_json(false), vec![m])
    }
}

/// One NCCL collective as the original agent exports it (spec 5.3): monotonic timestamp,
/// no op sequence number. Set `op_seq` and a wall-clock `time_unix_nano` for our agent.
#[derive(Debug, Clone)]
pub struct NcclPoint {
    pub op_type: String,
    pub comm_id_hash: String,
    pub rank: i64,
    pub nranks: i64,
    pub duration_ms: f64,
    pub count: i64,
    pub datatype: i64,
    pub reduce_op: i64,
    pub time_unix_nano: u64,
    pub op_seq: Option<i64>,
}

impl NcclPoint {
    pub fn all_reduce(comm: &str, rank: i64, nranks: i64, duration_ms: f64, t: u64) -> Self {
        NcclPoint {
            op_type: "ncclAllReduce".into(),
            comm_id_hash: comm.into(),
            rank,
            nranks,
            duration_ms,
            count: 1 << 20,
            datatype: 7,
            reduce_op: 0,
            time_unix_nano: t,
            op_seq: None,
        }
    }

    fn attrs(&self) -> Vec<Value> {
        let mut a = vec![
            str_kv(attr::NCCL_OP_TYPE, &self.op_type),
            str_kv(attr::NCCL_COMM_ID_HASH, &self.comm_id_hash),
            int_kv(attr::NCCL_RANK, self.rank),
            int_kv(attr::NCCL_NRANKS, self.nranks),
            int_kv(attr::NCCL_DATATYPE, self.datatype),
            int_kv(attr::NCCL_REDUCE_OP, self.reduce_op),
        ];
        if let Some(seq) = self.op_seq {
            a.push(int_kv(attr::NCCL_OP_SEQ, seq));
        }
        a
    }
}

/// An `ingero trace --otlp` export (spec 1.9 / 5.3) carrying NCCL points of one node:
/// resource with `service.name`, `ingero.node.id`, optional `ingero.cluster.id`.
pub fn nccl_export_json(cluster_id: Option<&str>, node_id: &str, points: &[NcclPoint]) -> String {
    let mut res = vec![
        str_kv(resource::SERVICE_NAME, "ingero"),
        str_kv("service.version", "0.17.0"),
        str_kv(resource::NODE_ID, node_id),
    ];
    if let Some(c) = cluster_id {
        res.push(str_kv(resource::CLUSTER_ID, c));
    }
    let dur: Vec<Value> = points
        .iter()
        .map(|p| json!({"attributes": p.attrs(), "timeUnixNano": p.time_unix_nano.to_string(), "asDouble": p.duration_ms}))
        .collect();
    let bytes: Vec<Value> = points
        .iter()
        .map(|p| json!({"attributes": p.attrs(), "timeUnixNano": p.time_unix_nano.to_string(), "asInt": p.count}))
        .collect();
    let metrics = vec![
        json!({"name": metric::NCCL_DURATION_MS, "description": "NCCL collective duration", "unit": "ms", "gauge": {"dataPoints": dur}}),
        json!({"name": metric::NCCL_BYTES, "description": "NCCL collective element count", "unit": "By", "gauge": {"dataPoints": bytes}}),
    ];
    let body = json!({"resourceMetrics": [{
        "resource": {"attributes": res},
        "scopeMetrics": [{"scope": {"name": "ingero", "version": "0.17.0"}, "metrics": metrics}]
    }]});
    body.to_string()
}

fn envelope(resource_attrs: Vec<Value>, metrics: Vec<Value>) -> String {
    json!({"resourceMetrics": [{
        "resource": {"attributes": resource_attrs},
        "scopeMetrics": [{"scope": {"name": "ingero.health", "version": "0.10.0"}, "metrics": metrics}]
    }]})
    .to_string()
}

fn str_kv(k: &str, v: &str) -> Value {
    json!({"key": k, "value": {"stringValue": v}})
}

fn int_kv(k: &str, v: i64) -> Value {
    json!({"key": k, "value": {"intValue": v}})
}

fn double_kv(k: &str, v: f64) -> Value {
    json!({"key": k, "value": {"doubleValue": v}})
}

/// Byte ranges of the scalar values of a compact JSON document: strings that are not
/// keys, numbers, literals (after a `:`, or an element of an array). For tests that splice
/// other values over an agent push's.
pub fn json_scalar_spans(body: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    let mut prev = b' ';
    while i < body.len() {
        let c = body[i];
        if c == b'"' {
            let start = i;
            i += 1;
            while i < body.len() && body[i] != b'"' {
                i += if body[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            // A key is followed by ':'; only values are spans.
            if body.get(i) != Some(&b':') {
                spans.push((start, i.min(body.len())));
            }
            prev = b'"';
            continue;
        }
        if matches!(prev, b':' | b'[' | b',') && (c == b'-' || c.is_ascii_alphanumeric()) {
            let start = i;
            while i < body.len() && !matches!(body[i], b',' | b']' | b'}') {
                i += 1;
            }
            spans.push((start, i));
            prev = b'0';
            continue;
        }
        prev = c;
        i += 1;
    }
    spans
}

/// Convert the agent-shaped JSON above into prost types without going through any
/// production decoder (so tests of the decoder are not circular).
pub fn json_to_proto(body: &str) -> Vec<ResourceMetrics> {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for rm in v["resourceMetrics"].as_array().into_iter().flatten() {
        let attrs = kvs(&rm["resource"]["attributes"]);
        let mut scopes = Vec::new();
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            let mut metrics = Vec::new();
            for m in sm["metrics"].as_array().into_iter().flatten() {
                let (pts_json, is_sum) = if m.get("gauge").is_some() {
                    (&m["gauge"]["dataPoints"], false)
                } else {
                    (&m["sum"]["dataPoints"], true)
                };
                let points: Vec<NumberDataPoint> = pts_json
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| NumberDataPoint {
                        attributes: kvs(&p["attributes"]),
                        time_unix_nano: p["timeUnixNano"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        value: if let Some(i) = p.get("asInt").and_then(Value::as_i64) {
                            Some(NumberValue::AsInt(i))
                        } else {
                            p.get("asDouble")
                                .and_then(Value::as_f64)
                                .map(NumberValue::AsDouble)
                        },
                        ..Default::default()
                    })
                    .collect();
                let data = if is_sum {
                    MetricKind::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: 2,
                        is_monotonic: true,
                    })
                } else {
                    MetricKind::Gauge(Gauge {
                        data_points: points,
                    })
                };
                metrics.push(Metric {
                    name: m["name"].as_str().unwrap_or("").to_string(),
                    unit: m["unit"].as_str().unwrap_or("").to_string(),
                    description: m["description"].as_str().unwrap_or("").to_string(),
                    data: Some(data),
                    ..Default::default()
                });
            }
            scopes.push(ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: sm["scope"]["name"].as_str().unwrap_or("").to_string(),
                    version: sm["scope"]["version"].as_str().unwrap_or("").to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            });
        }
        out.push(ResourceMetrics {
            resource: Some(Resource {
                attributes: attrs,
                ..Default::default()
            }),
            scope_metrics: scopes,
            ..Default::default()
        });
    }
    out
}

fn kvs(v: &Value) -> Vec<KeyValue> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let val = &kv["value"];
            let value = if let Some(s) = val.get("stringValue").and_then(Value::as_str) {
                AnyValueKind::StringValue(s.to_string())
            } else if let Some(i) = val.get("intValue").and_then(Value::as_i64) {
                AnyValueKind::IntValue(i)
            } else if let Some(d) = val.get("doubleValue").and_then(Value::as_f64) {
                AnyValueKind::DoubleValue(d)
            } else {
                AnyValueKind::BoolValue(
                    val.get("boolValue")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                )
            };
            KeyValue {
                key: kv["key"].as_str().unwrap_or("").to_string(),
                key_strindex: 0,
                value: Some(AnyValue { value: Some(value) }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_push_has_the_agents_shape() {
        let full = AgentPush::new("prod", "gpu-node-01", 0.92)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .world(4, 1)
            .provider("aws")
            .to_json();
        let body = full.clone();
        let v: Value = serde_json::from_str(&body).unwrap();
        let rm = &v["resourceMetrics"][0];
        assert_eq!(rm["scopeMetrics"][0]["scope"]["version"], "0.10.0");
        let metrics = rm["scopeMetrics"][0]["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), 10);
        let hs = &metrics[0]["gauge"]["dataPoints"][0];
        assert!(
            hs["timeUnixNano"].is_string(),
            "timeUnixNano must be a string"
        );
        assert_eq!(hs["asDouble"], 0.92);
        // int64 as a JSON number, attributes omitted when empty
        let reach = &metrics[7]["gauge"]["dataPoints"][0];
        assert!(reach["asInt"].is_number());
        assert!(reach.get("attributes").is_none());
        // The plain push (no GPU info, world size or provider) with every attribute of
        // spec 1.4 measures 2,409 bytes; the full one adds node.info and resource
        // attributes. Pin the size so benchmark figures stay comparable.
        let plain = AgentPush::new("prod", "gpu-node-01", 0.92).to_json().len();
        assert_eq!(plain, 2409, "plain agent push size changed");
        assert!(full.len() > plain);
    }

    #[test]
    fn proto_matches_json_content() {
        let push = AgentPush::new("c", "n", 0.5);
        let req = push.to_proto();
        assert_eq!(req.resource_metrics.len(), 1);
        assert_eq!(component::otlp::count_points(&req.resource_metrics), 9);
        let attrs = component::otlp::resource_attrs(&req.resource_metrics[0]);
        assert_eq!(
            component::otlp::get_str(attrs, resource::CLUSTER_ID),
            Some("c")
        );
    }
}
