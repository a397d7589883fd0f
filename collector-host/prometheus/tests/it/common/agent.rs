//! The agent's health push, built exactly as `docs/agent-protocol.md` ("Resource
//! attributes" and "The health push") describes it (one resource, one scope `ingero.health`/`0.10.0`, the metrics in
//! `buildPayload` order, data-point attributes state + workload type, per-cgroup sums).
//! Shared by the tests, the benches and the memory example (`#[path]`-included).
#![allow(dead_code)]

use component::otlp::{
    Gauge, InstrumentationScope, KeyValue, Metric, MetricKind, NumberDataPoint, NumberValue,
    Resource, ResourceMetrics, ScopeMetrics, Sum, kv_f64, kv_i64, kv_str,
};
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};
use ingero_wire::{attr, family, metric, resource};

/// The exporter as Ingero's distributions build it from `cfg`: their host prefix and
/// reserved prefixes, resources charged to their `ingero.cluster.id`, their default
/// `drop_attributes` and the straggler gauge stored as data.
pub fn fleet_exporter(cfg: PrometheusExporterConfig) -> PrometheusExporter {
    PrometheusExporter::new(cfg)
        .unwrap()
        .with_names(family::HOST_PREFIX, family::RESERVED_PREFIXES)
        .with_scope_key(Some(resource::CLUSTER_ID))
        .with_default_drop_attributes(family::DROP_ATTRIBUTES)
        .with_pipeline_gauges(family::PIPELINE_GAUGES)
}

/// Per-cgroup cumulative totals the real collector adds when it has per-cgroup data.
#[derive(Debug, Clone)]
pub struct CgroupSums {
    pub hash: String,
    pub kernel_launches: i64,
    pub stall_nanos: i64,
    /// (direction, bytes), e.g. ("h2d", 4096).
    pub memcpy: Vec<(String, i64)>,
}

/// One health push's inputs.
#[derive(Debug, Clone)]
pub struct AgentPush {
    pub node: String,
    pub cluster: String,
    /// 0: `ingero.world_size` / `ingero.node.rank` are not sent.
    pub world_size: i64,
    pub rank: i64,
    pub provider: Option<String>,
    pub state: String,
    pub workload: String,
    /// `ingero.cgroup_path_hash` of the fleet-push process (16 hex chars or "").
    pub cgroup_hash: String,
    pub score: f64,
    pub throughput: f64,
    pub compute: f64,
    pub memory: f64,
    pub cpu: f64,
    pub degradation_warning: i64,
    pub detection_mode: String,
    pub fleet_reachable: i64,
    /// (GPU model, count); `ingero.node.info` only when set.
    pub gpu: Option<(String, i64)>,
    pub cgroup_sums: Vec<CgroupSums>,
    pub time_unix_nano: u64,
}

impl AgentPush {
    /// Node `i` of a large fleet: 64-node clusters, world size 8, AWS, H100s, a cgroup
    /// hash unique to the node, and per-cgroup sums with one memcpy direction
    /// (13 series). `with_sums: false` gives the 10-series push of a tick without
    /// per-cgroup data.
    pub fn fleet_node(i: u64, with_sums: bool, time_unix_nano: u64) -> Self {
        let hash = format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        AgentPush {
            node: format!("gpu-node-{i:06}"),
            cluster: format!("cluster-{:04}", i / 64),
            world_size: 8,
            rank: (i % 8) as i64,
            provider: Some("aws".into()),
            state: "active".into(),
            workload: "training".into(),
            cgroup_hash: hash.clone(),
            score: 0.9 + (i % 10) as f64 / 100.0,
            throughput: 0.97,
            compute: 0.93,
            memory: 0.71,
            cpu: 0.88,
            degradation_warning: 0,
            detection_mode: "fleet".into(),
            fleet_reachable: 1,
            gpu: Some(("NVIDIA H100 80GB HBM3".into(), 8)),
            cgroup_sums: if with_sums {
                vec![CgroupSums {
                    hash: format!("{:016x}", i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)),
                    kernel_launches: 1000 + i as i64,
                    stall_nanos: 5_000_000,
                    memcpy: vec![("h2d".into(), 1 << 20)],
                }]
            } else {
                Vec::new()
            },
            time_unix_nano,
        }
    }
}

fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: "1".into(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

fn cumulative(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(MetricKind::Sum(Sum {
            data_points: points,
            aggregation_temporality: 2,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

fn dbl(attrs: Vec<KeyValue>, t: u64, v: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: t,
        value: Some(NumberValue::AsDouble(v)),
        ..Default::default()
    }
}

fn int(attrs: Vec<KeyValue>, t: u64, v: i64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: t,
        value: Some(NumberValue::AsInt(v)),
        ..Default::default()
    }
}

/// The OTLP resource of every push (spec 1.3).
pub fn resource_attrs(p: &AgentPush) -> Vec<KeyValue> {
    let mut attrs = vec![
        kv_str(resource::NODE_ID, p.node.clone()),
        kv_str(resource::CLUSTER_ID, p.cluster.clone()),
    ];
    if p.world_size > 0 {
        attrs.push(kv_i64(resource::WORLD_SIZE, p.world_size));
        attrs.push(kv_i64(resource::NODE_RANK, p.rank));
    }
    if let Some(prov) = &p.provider {
        attrs.push(kv_str(resource::PROVIDER, prov.clone()));
    }
    attrs
}

fn wrap(p: &AgentPush, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: resource_attrs(p),
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: "ingero.health".into(),
                version: "0.10.0".into(),
                ..Default::default()
            }),
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// One health push (spec 1.4, `buildPayload` order).
pub fn health_push(p: &AgentPush) -> ResourceMetrics {
    let t = p.time_unix_nano;
    let dp = || {
        vec![
            kv_str(attr::NODE_STATE, p.state.clone()),
            kv_str(attr::WORKLOAD_TYPE, p.workload.clone()),
        ]
    };
    let mut score_attrs = dp();
    score_attrs.push(kv_str(attr::CGROUP_PATH_HASH, p.cgroup_hash.clone()));
    let mut metrics = vec![
        gauge(metric::HEALTH_SCORE, vec![dbl(score_attrs, t, p.score)]),
        gauge(metric::THROUGHPUT_RATIO, vec![dbl(dp(), t, p.throughput)]),
        gauge(metric::COMPUTE_EFFICIENCY, vec![dbl(dp(), t, p.compute)]),
        gauge(metric::MEMORY_HEADROOM, vec![dbl(dp(), t, p.memory)]),
        gauge(metric::CPU_AVAILABILITY, vec![dbl(dp(), t, p.cpu)]),
        gauge(
            metric::DEGRADATION_WARNING,
            vec![int(dp(), t, p.degradation_warning)],
        ),
        gauge(
            metric::DETECTION_MODE,
            vec![int(
                vec![kv_str(attr::DETECTION_MODE, p.detection_mode.clone())],
                t,
                1,
            )],
        ),
        gauge(
            metric::FLEET_REACHABLE,
            vec![int(vec![], t, p.fleet_reachable)],
        ),
    ];
    if let Some((model, count)) = &p.gpu {
        metrics.push(gauge(
            metric::NODE_INFO,
            vec![int(
                vec![
                    kv_str(attr::GPU_MODEL, model.clone()),
                    kv_i64(attr::GPU_COUNT, *count),
                ],
                t,
                1,
            )],
        ));
    }
    metrics.push(gauge(
        metric::NODE_WORLD_SIZE,
        vec![int(vec![], t, p.world_size)],
    ));
    if !p.cgroup_sums.is_empty() {
        let hash = |c: &CgroupSums| kv_str(attr::CGROUP_PATH_HASH, c.hash.clone());
        metrics.push(cumulative(
            metric::CUDA_KERNEL_LAUNCH_TOTAL,
            "1",
            p.cgroup_sums
                .iter()
                .map(|c| int(vec![hash(c)], t, c.kernel_launches))
                .collect(),
        ));
        metrics.push(cumulative(
            metric::CPU_STALL_NANOS_TOTAL,
            "ns",
            p.cgroup_sums
                .iter()
                .map(|c| int(vec![hash(c)], t, c.stall_nanos))
                .collect(),
        ));
        metrics.push(cumulative(
            metric::CUDA_MEMCPY_BYTES_TOTAL,
            "By",
            p.cgroup_sums
                .iter()
                .flat_map(|c| {
                    c.memcpy.iter().map(move |(dir, bytes)| {
                        int(
                            vec![hash(c), kv_str(attr::MEMCPY_DIRECTION, dir.clone())],
                            t,
                            *bytes,
                        )
                    })
                })
                .collect(),
        ));
    }
    wrap(p, metrics)
}

/// The straggler-event push (spec 1.5): same resource without provider.
pub fn straggler_event(
    p: &AgentPush,
    event_id: &str,
    threshold: f64,
    score: f64,
) -> ResourceMetrics {
    let mut q = p.clone();
    q.provider = None;
    wrap(
        &q,
        vec![gauge(
            metric::STRAGGLER_EVENT,
            vec![int(
                vec![
                    kv_str(attr::DETECTION_MODE, p.detection_mode.clone()),
                    kv_f64(attr::THRESHOLD, threshold),
                    kv_f64(attr::SCORE, score),
                    kv_str(attr::DOMINANT_SIGNAL, "throughput"),
                    kv_str(attr::EVENT_ID, event_id),
                ],
                p.time_unix_nano,
                1,
            )],
        )],
    )
}

/// Feed `nodes` agents' health pushes (node `i` = `AgentPush::fleet_node(i, with_sums, ..)`)
/// to `e` at time `t` (seconds), in batches of 1000 as a busy receiver would hand them over.
pub fn fill(e: &fleet_prometheus::PrometheusExporter, nodes: u64, with_sums: bool, t: u64) {
    let mut batch = Vec::with_capacity(1000);
    for i in 0..nodes {
        batch.push(health_push(&AgentPush::fleet_node(
            i,
            with_sums,
            t * 1_000_000_000,
        )));
        if batch.len() == 1000 {
            e.consume(&batch, component::Timestamp::from_secs(t));
            batch.clear();
        }
    }
    e.consume(&batch, component::Timestamp::from_secs(t));
}
