//! OTLP payloads the agent pushes (spec 1.2 to 1.5, 5.3), built as the OTLP prost types;
//! [`super::json`] renders them in the spec's JSON shape, prost in protobuf.

use component::Timestamp;
use component::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, Gauge, InstrumentationScope, KeyValue,
    Metric, MetricKind, NumberDataPoint, NumberValue, Resource, ResourceMetrics, ScopeMetrics, Sum,
};
use ingero_wire::{attr, metric, resource};

use crate::health::core::{HealthReport, StragglerEmission};

/// Scope of health and straggler pushes, byte for byte what the Go agent sends.
pub const HEALTH_SCOPE_NAME: &str = "ingero.health";
pub const HEALTH_SCOPE_VERSION: &str = "0.10.0";
/// Scope of NCCL collective points.
pub const NCCL_SCOPE_NAME: &str = "ingero.nccl";
/// OTLP `AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: i32 = 2;

/// Who is pushing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub node_id: String,
    pub cluster_id: String,
    /// 0: not a distributed job (no rank attributes).
    pub world_size: u32,
    pub node_rank: u32,
    pub workload_type: String,
    /// First 16 hex chars of SHA-256 of the agent's own cgroup path, or empty.
    pub cgroup_path_hash: String,
}

/// GPU model and count for `ingero.node.info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub model: String,
    pub count: i64,
}

/// Cumulative per-cgroup counters (spec 1.4), one series set per cgroup hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupSeries {
    pub cgroup_path_hash: String,
    pub kernel_launches: u64,
    pub cpu_stall_nanos: u64,
    /// `(direction, bytes)`, direction one of `h2h|h2d|d2h|d2d|unknown`.
    pub memcpy_bytes: Vec<(&'static str, u64)>,
}

pub fn kv_str(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(AnyValueKind::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

pub fn kv_int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(AnyValueKind::IntValue(v)),
        }),
        ..Default::default()
    }
}

pub fn kv_double(key: &str, v: f64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(AnyValueKind::DoubleValue(v)),
        }),
        ..Default::default()
    }
}

fn point(attributes: Vec<KeyValue>, t: Timestamp, value: NumberValue) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: t.as_nanos(),
        value: Some(value),
        ..Default::default()
    }
}

pub fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

fn cumulative_sum(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(MetricKind::Sum(Sum {
            data_points: points,
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

pub fn double_point(attrs: Vec<KeyValue>, t: Timestamp, v: f64) -> NumberDataPoint {
    point(attrs, t, NumberValue::AsDouble(v))
}

pub fn int_point(attrs: Vec<KeyValue>, t: Timestamp, v: i64) -> NumberDataPoint {
    point(attrs, t, NumberValue::AsInt(v))
}

fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Resource attributes (spec 1.3); `provider` only on health pushes.
pub fn resource_attrs(id: &Identity, provider: Option<&str>) -> Vec<KeyValue> {
    let mut a = vec![
        kv_str(resource::NODE_ID, &id.node_id),
        kv_str(resource::CLUSTER_ID, &id.cluster_id),
    ];
    if id.world_size > 0 {
        a.push(kv_int(resource::WORLD_SIZE, i64::from(id.world_size)));
        a.push(kv_int(resource::NODE_RANK, i64::from(id.node_rank)));
    }
    if let Some(p) = provider {
        a.push(kv_str(resource::PROVIDER, p));
    }
    a
}

/// One request with one resource and one scope.
pub fn request(
    resource_attrs: Vec<KeyValue>,
    scope: (&str, &str),
    metrics: Vec<Metric>,
) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource_attrs,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: scope.0.to_string(),
                    version: scope.1.to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Inputs of one health push besides the report.
#[derive(Debug, Clone, Copy)]
pub struct HealthContext<'a> {
    pub identity: &'a Identity,
    pub provider: Option<&'a str>,
    pub gpu: Option<&'a GpuInfo>,
    pub per_cgroup: &'a [CgroupSeries],
    pub now: Timestamp,
}

/// The health push (spec 1.4). `None` for a stale report, which pushes nothing.
pub fn health_request(
    report: &HealthReport,
    ctx: &HealthContext<'_>,
) -> Option<ExportMetricsServiceRequest> {
    let state = report.state.wire()?;
    let id = ctx.identity;
    let t = ctx.now;
    let dp = || {
        vec![
            kv_str(attr::NODE_STATE, state),
            kv_str(attr::WORKLOAD_TYPE, &id.workload_type),
        ]
    };
    let mut score_attrs = dp();
    score_attrs.push(kv_str(attr::CGROUP_PATH_HASH, &id.cgroup_path_hash));
    let s = report.score.signals;
    let mut metrics = vec![
        gauge(
            metric::HEALTH_SCORE,
            "1",
            vec![double_point(score_attrs, t, report.score.value)],
        ),
        gauge(
            metric::THROUGHPUT_RATIO,
            "1",
            vec![double_point(dp(), t, s.throughput)],
        ),
        gauge(
            metric::COMPUTE_EFFICIENCY,
            "1",
            vec![double_point(dp(), t, s.compute)],
        ),
        gauge(
            metric::MEMORY_HEADROOM,
            "1",
            vec![double_point(dp(), t, s.memory)],
        ),
        gauge(
            metric::CPU_AVAILABILITY,
            "1",
            vec![double_point(dp(), t, s.cpu)],
        ),
        gauge(
            metric::DEGRADATION_WARNING,
            "1",
            vec![int_point(dp(), t, i64::from(report.degraded))],
        ),
        gauge(
            metric::DETECTION_MODE,
            "1",
            vec![int_point(
                vec![kv_str(attr::DETECTION_MODE, report.mode.mode.as_str())],
                t,
                1,
            )],
        ),
        gauge(
            metric::FLEET_REACHABLE,
            "1",
            vec![int_point(Vec::new(), t, i64::from(report.fleet_reachable))],
        ),
    ];
    if let Some(g) = ctx.gpu.filter(|g| !g.model.is_empty() && g.count > 0) {
        metrics.push(gauge(
            metric::NODE_INFO,
            "1",
            vec![int_point(
                vec![
                    kv_str(attr::GPU_MODEL, &g.model),
                    kv_int(attr::GPU_COUNT, g.count),
                ],
                t,
                1,
            )],
        ));
    }
    metrics.push(gauge(
        metric::NODE_WORLD_SIZE,
        "1",
        vec![int_point(Vec::new(), t, i64::from(id.world_size))],
    ));
    if !ctx.per_cgroup.is_empty() {
        let hash = |c: &CgroupSeries| vec![kv_str(attr::CGROUP_PATH_HASH, &c.cgroup_path_hash)];
        let launches = ctx
            .per_cgroup
            .iter()
            .map(|c| int_point(hash(c), t, saturating_i64(c.kernel_launches)))
            .collect();
        let stall = ctx
            .per_cgroup
            .iter()
            .map(|c| int_point(hash(c), t, saturating_i64(c.cpu_stall_nanos)))
            .collect();
        let memcpy = ctx
            .per_cgroup
            .iter()
            .flat_map(|c| {
                c.memcpy_bytes.iter().map(move |(dir, bytes)| {
                    let mut a = hash(c);
                    a.push(kv_str(attr::MEMCPY_DIRECTION, dir));
                    int_point(a, t, saturating_i64(*bytes))
                })
            })
            .collect();
        metrics.push(cumulative_sum(
            metric::CUDA_KERNEL_LAUNCH_TOTAL,
            "1",
            launches,
        ));
        metrics.push(cumulative_sum(metric::CPU_STALL_NANOS_TOTAL, "ns", stall));
        metrics.push(cumulative_sum(
            metric::CUDA_MEMCPY_BYTES_TOTAL,
            "By",
            memcpy,
        ));
    }
    Some(request(
        resource_attrs(id, ctx.provider),
        (HEALTH_SCOPE_NAME, HEALTH_SCOPE_VERSION),
        metrics,
    ))
}

/// What this project's agent knows of a straggler episode's cause (an extension to spec
/// 1.5, not part of the Go agent's contract): the episode's id and its top causal chains as
/// compact JSON. Absent while no chain is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeCause {
    /// `<node id>:<episode start, Unix ms>`, the same on every event of the episode.
    pub chain_id: String,
    /// A JSON array of 1 to 3 chains, most severe first, at most 4,000 bytes.
    pub chains_json: String,
}

/// The straggler-event push (spec 1.5): value 1 while a straggler, 0 once on recovery.
/// `cause` is attached to a value-1 event only; the recovery event never carries one.
pub fn straggler_request(
    id: &Identity,
    e: &StragglerEmission,
    event_id: &str,
    cause: Option<&EpisodeCause>,
    now: Timestamp,
) -> ExportMetricsServiceRequest {
    let mut attrs = vec![
        kv_str(attr::DETECTION_MODE, e.mode.as_str()),
        kv_double(attr::THRESHOLD, e.threshold),
        kv_double(attr::SCORE, e.score),
        kv_str(attr::DOMINANT_SIGNAL, e.dominant_signal),
        kv_str(attr::EVENT_ID, event_id),
    ];
    if let (true, Some(c)) = (e.straggler, cause) {
        attrs.push(kv_str(attr::CAUSAL_CHAIN_ID, &c.chain_id));
        attrs.push(kv_str(attr::CAUSAL_CHAINS, &c.chains_json));
    }
    let m = gauge(
        metric::STRAGGLER_EVENT,
        "1",
        vec![int_point(attrs, now, i64::from(e.straggler))],
    );
    request(
        resource_attrs(id, None),
        (HEALTH_SCOPE_NAME, HEALTH_SCOPE_VERSION),
        vec![m],
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::health::SignalSet;
    use crate::health::mode::{DetectionMode, ModeDecision};
    use crate::health::score::Score;
    use crate::health::state::NodeState;
    use component::otlp::{get_i64, get_str, number_points, point_value};

    pub(crate) fn identity() -> Identity {
        Identity {
            node_id: "gpu-node-01".into(),
            cluster_id: "prod".into(),
            world_size: 4,
            node_rank: 0,
            workload_type: "training".into(),
            cgroup_path_hash: "8a5edab282632443".into(),
        }
    }

    pub(crate) fn report(state: NodeState) -> HealthReport {
        HealthReport {
            state,
            score: Score {
                value: 0.92,
                signals: SignalSet::new(1.0, 0.9, 0.8, 0.7),
                penalty: 1.0,
            },
            mode: ModeDecision {
                mode: DetectionMode::Fleet,
                threshold: Some(0.87),
            },
            degraded: false,
            fleet_reachable: true,
        }
    }

    fn metrics(r: &ExportMetricsServiceRequest) -> &[Metric] {
        &r.resource_metrics[0].scope_metrics[0].metrics
    }

    #[test]
    fn health_push_has_every_spec_metric() {
        let gpu = GpuInfo {
            model: "NVIDIA H100 80GB HBM3".into(),
            count: 8,
        };
        let cg = [CgroupSeries {
            cgroup_path_hash: "abc".into(),
            kernel_launches: 10,
            cpu_stall_nanos: 5,
            memcpy_bytes: vec![("h2d", 100), ("d2h", 0)],
        }];
        let id = identity();
        let ctx = HealthContext {
            identity: &id,
            provider: Some("aws"),
            gpu: Some(&gpu),
            per_cgroup: &cg,
            now: Timestamp::from_secs(7),
        };
        let r = health_request(&report(NodeState::Active), &ctx).unwrap();
        let names: Vec<&str> = metrics(&r).iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                metric::HEALTH_SCORE,
                metric::THROUGHPUT_RATIO,
                metric::COMPUTE_EFFICIENCY,
                metric::MEMORY_HEADROOM,
                metric::CPU_AVAILABILITY,
                metric::DEGRADATION_WARNING,
                metric::DETECTION_MODE,
                metric::FLEET_REACHABLE,
                metric::NODE_INFO,
                metric::NODE_WORLD_SIZE,
                metric::CUDA_KERNEL_LAUNCH_TOTAL,
                metric::CPU_STALL_NANOS_TOTAL,
                metric::CUDA_MEMCPY_BYTES_TOTAL,
            ]
        );
        let res = &r.resource_metrics[0].resource.as_ref().unwrap().attributes;
        assert_eq!(get_str(res, resource::NODE_ID), Some("gpu-node-01"));
        assert_eq!(get_str(res, resource::CLUSTER_ID), Some("prod"));
        assert_eq!(get_i64(res, resource::WORLD_SIZE), Some(4));
        assert_eq!(get_i64(res, resource::NODE_RANK), Some(0));
        assert_eq!(get_str(res, resource::PROVIDER), Some("aws"));
        let score = &number_points(&metrics(&r)[0])[0];
        assert_eq!(point_value(score), Some(0.92));
        assert_eq!(score.time_unix_nano, 7_000_000_000);
        assert_eq!(get_str(&score.attributes, attr::NODE_STATE), Some("active"));
        assert_eq!(
            get_str(&score.attributes, attr::WORKLOAD_TYPE),
            Some("training")
        );
        assert_eq!(
            get_str(&score.attributes, attr::CGROUP_PATH_HASH),
            Some("8a5edab282632443")
        );
        let mode = &number_points(&metrics(&r)[6])[0];
        assert_eq!(
            get_str(&mode.attributes, attr::DETECTION_MODE),
            Some("fleet")
        );
        assert!(number_points(&metrics(&r)[7])[0].attributes.is_empty());
        let info = &number_points(&metrics(&r)[8])[0];
        assert_eq!(get_i64(&info.attributes, attr::GPU_COUNT), Some(8));
        let memcpy = number_points(&metrics(&r)[12]);
        assert_eq!(memcpy.len(), 2);
        assert_eq!(
            get_str(&memcpy[0].attributes, attr::MEMCPY_DIRECTION),
            Some("h2d")
        );
        match &metrics(&r)[12].data {
            Some(MetricKind::Sum(s)) => assert!(s.is_monotonic && s.aggregation_temporality == 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn optional_parts_are_left_out() {
        let mut id = identity();
        id.world_size = 0;
        let ctx = HealthContext {
            identity: &id,
            provider: None,
            gpu: None,
            per_cgroup: &[],
            now: Timestamp::from_secs(7),
        };
        let r = health_request(&report(NodeState::Calibrating), &ctx).unwrap();
        assert_eq!(metrics(&r).len(), 9);
        let res = &r.resource_metrics[0].resource.as_ref().unwrap().attributes;
        assert_eq!(res.len(), 2);
        assert!(
            health_request(&report(NodeState::Stale), &ctx).is_none(),
            "stale pushes nothing"
        );
    }

    #[test]
    fn straggler_push_carries_the_event() {
        let e = StragglerEmission {
            straggler: true,
            edge: true,
            score: 0.7,
            threshold: 0.88,
            mode: DetectionMode::FleetCached,
            dominant_signal: "compute",
        };
        let r = straggler_request(&identity(), &e, "id-1", None, Timestamp::from_secs(3));
        let m = &metrics(&r)[0];
        assert_eq!(m.name, metric::STRAGGLER_EVENT);
        let p = &number_points(m)[0];
        assert_eq!(point_value(p), Some(1.0));
        assert_eq!(get_str(&p.attributes, attr::EVENT_ID), Some("id-1"));
        assert_eq!(
            get_str(&p.attributes, attr::DETECTION_MODE),
            Some("fleet-cached")
        );
        assert_eq!(
            get_str(&p.attributes, attr::DOMINANT_SIGNAL),
            Some("compute")
        );
        let res = &r.resource_metrics[0].resource.as_ref().unwrap().attributes;
        assert_eq!(get_str(res, resource::PROVIDER), None);
        // Without a known cause the point is the Go agent's, attribute for attribute.
        assert_eq!(p.attributes.len(), 5);
        assert_eq!(get_str(&p.attributes, attr::CAUSAL_CHAIN_ID), None);
    }

    #[test]
    fn a_known_cause_rides_on_the_straggler_event_only() {
        let cause = EpisodeCause {
            chain_id: "n1:1700000000000".into(),
            chains_json: r#"[{"id":"c1"}]"#.into(),
        };
        let mut e = StragglerEmission {
            straggler: true,
            edge: false,
            score: 0.6,
            threshold: 0.88,
            mode: DetectionMode::Fleet,
            dominant_signal: "cpu",
        };
        let r = straggler_request(
            &identity(),
            &e,
            "id-2",
            Some(&cause),
            Timestamp::from_secs(3),
        );
        let p = &number_points(&metrics(&r)[0])[0];
        assert_eq!(
            get_str(&p.attributes, attr::CAUSAL_CHAIN_ID),
            Some("n1:1700000000000")
        );
        assert_eq!(
            get_str(&p.attributes, attr::CAUSAL_CHAINS),
            Some(r#"[{"id":"c1"}]"#)
        );
        // The recovery edge (value 0) carries none, even when handed one.
        e.straggler = false;
        e.edge = true;
        let r = straggler_request(
            &identity(),
            &e,
            "id-3",
            Some(&cause),
            Timestamp::from_secs(4),
        );
        let p = &number_points(&metrics(&r)[0])[0];
        assert_eq!(point_value(p), Some(0.0));
        assert_eq!(get_str(&p.attributes, attr::CAUSAL_CHAIN_ID), None);
        assert_eq!(get_str(&p.attributes, attr::CAUSAL_CHAINS), None);
    }
}
