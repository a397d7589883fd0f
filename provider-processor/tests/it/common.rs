//! OTLP inputs shaped like the real producers (agent health push, threshold processor
//! tick output, nccl_peer_lag tick output), and temp-file helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use component::otlp::{
    self, Gauge, KeyValue, Metric, MetricKind, NumberDataPoint, NumberValue, ResourceMetrics,
};
use component::{MetricFamily, Timestamp};
use ingero_wire::{attr, metric, resource};

pub const H100: &str = "NVIDIA H100 80GB HBM3";
pub const A100: &str = "NVIDIA A100-SXM4-80GB";

fn int_point(attrs: Vec<KeyValue>, value: i64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: 1_700_000_000_000_000_000,
        value: Some(NumberValue::AsInt(value)),
        ..Default::default()
    }
}

fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

/// An agent health push (spec 1.3/1.4): resource ids and optional provider, the node
/// info and world size gauges.
pub fn health_push(
    cluster: &str,
    node: &str,
    provider: Option<&str>,
    gpu: Option<(&str, i64)>,
    world_size: i64,
) -> ResourceMetrics {
    let mut res = vec![
        otlp::kv_str(resource::NODE_ID, node),
        otlp::kv_str(resource::CLUSTER_ID, cluster),
    ];
    if world_size > 0 {
        res.push(otlp::kv_i64(resource::WORLD_SIZE, world_size));
    }
    if let Some(p) = provider {
        res.push(otlp::kv_str(resource::PROVIDER, p));
    }
    let mut metrics = vec![otlp::gauge_f64(
        metric::HEALTH_SCORE,
        "1",
        vec![otlp::point_f64(vec![], 1, 0.95)],
    )];
    if let Some((model, count)) = gpu {
        metrics.push(gauge(
            metric::NODE_INFO,
            "1",
            vec![int_point(
                vec![
                    otlp::kv_str(attr::GPU_MODEL, model),
                    otlp::kv_i64(attr::GPU_COUNT, count),
                ],
                1,
            )],
        ));
    }
    metrics.push(gauge(
        metric::NODE_WORLD_SIZE,
        "1",
        vec![int_point(vec![], world_size)],
    ));
    otlp::resource_metrics(res, "ingero.health", metrics)
}

/// A bare resource with these attributes and one unrelated gauge.
pub fn resource_with(attrs: Vec<KeyValue>) -> ResourceMetrics {
    otlp::resource_metrics(
        attrs,
        "test",
        vec![otlp::gauge_f64(
            "x",
            "1",
            vec![otlp::point_f64(vec![], 1, 1.0)],
        )],
    )
}

/// The threshold processor's straggler gauge for one node.
pub fn straggler(cluster: &str, node: &str) -> ResourceMetrics {
    otlp::resource_metrics(
        vec![
            otlp::kv_str(resource::CLUSTER_ID, cluster),
            otlp::kv_str(resource::NODE_ID, node),
        ],
        "ingero",
        vec![gauge(
            provider_processor::metrics::INPUT_FLEET_NODE_STRAGGLER,
            "1",
            vec![int_point(
                vec![
                    otlp::kv_f64(attr::SCORE, 0.41),
                    otlp::kv_f64(attr::THRESHOLD, 0.82),
                ],
                1,
            )],
        )],
    )
}

/// One `nccl.collective.peer_lag_ms` point per (rank, node, lag), one collective instance
/// (same comm, op and time).
pub fn peer_lag(
    cluster: &str,
    comm: &str,
    time_unix_nano: u64,
    nranks: i64,
    ranks: &[(i64, Option<&str>, f64)],
) -> Vec<ResourceMetrics> {
    ranks
        .iter()
        .map(|(rank, node, lag)| {
            let mut res = vec![otlp::kv_str(resource::CLUSTER_ID, cluster)];
            if let Some(n) = node {
                res.push(otlp::kv_str(resource::NODE_ID, *n));
            }
            let mut dp = otlp::point_f64(
                vec![
                    otlp::kv_str(attr::NCCL_COMM_ID_HASH, comm),
                    otlp::kv_str(attr::NCCL_OP_TYPE, "ncclAllReduce"),
                    otlp::kv_i64(attr::NCCL_RANK, *rank),
                    otlp::kv_i64(attr::NCCL_NRANKS, nranks),
                ],
                time_unix_nano,
                *lag,
            );
            dp.time_unix_nano = time_unix_nano;
            otlp::resource_metrics(
                res,
                "nccl_peer_lag",
                vec![otlp::gauge_f64(metric::NCCL_PEER_LAG_MS, "ms", vec![dp])],
            )
        })
        .collect()
}

pub fn provider_of(rm: &ResourceMetrics) -> Option<String> {
    otlp::get_str(otlp::resource_attrs(rm), resource::PROVIDER).map(str::to_string)
}

pub fn ctx(at: Timestamp) -> component::BatchContext {
    component::BatchContext {
        cluster_id: None,
        received_at: at,
        tenant: None,
    }
}

/// The value of the sample of `name` whose labels include every pair in `labels`.
pub fn sample(families: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| &f.samples)
        .find(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
}

pub fn close(x: f64, want: f64) -> bool {
    (x - want).abs() <= 1e-9 * want.abs().max(1.0)
}

/// A fresh directory under the system temp dir for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("provider-processor-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Write `bytes` and set the mtime explicitly, so change detection never depends on the
/// file system's timestamp granularity.
pub fn write_at(path: &Path, bytes: &str, mtime_secs: u64) {
    std::fs::write(path, bytes).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime_secs))
        .unwrap();
}
