//! The processor through its `component::Processor` interface: OTLP batches in, lag
//! metrics out of `tick`, counters and diagnostics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use component::config::{ConfigValue, parse_yaml};
use component::otlp::{
    KeyValue, ResourceMetrics, gauge_f64, get_i64, get_str, kv_i64, kv_str, number_points,
    point_f64, point_value, resource_attrs, resource_metrics,
};
use component::wire::{attr, metric, resource};
use component::{BatchContext, MetricFamily, Processor, Timestamp};
use nccl_processor::metrics::{DropReason, Outcome};
use nccl_processor::{NcclPeerLagProcessor, create};

const MS: u64 = 1_000_000;
const T0: u64 = 1_760_000_000_000_000_000;

fn dp(
    op: &str,
    comm: &str,
    rank: i64,
    nranks: i64,
    seq: Option<i64>,
    t: u64,
) -> component::otlp::NumberDataPoint {
    let mut a: Vec<KeyValue> = vec![
        kv_str(attr::NCCL_OP_TYPE, op),
        kv_str(attr::NCCL_COMM_ID_HASH, comm),
        kv_i64(attr::NCCL_RANK, rank),
        kv_i64(attr::NCCL_NRANKS, nranks),
        kv_i64(attr::NCCL_DATATYPE, 7),
        kv_i64(attr::NCCL_REDUCE_OP, 0),
    ];
    if let Some(s) = seq {
        a.push(kv_i64(attr::NCCL_OP_SEQ, s));
    }
    point_f64(a, t, 0.03)
}

fn rm(
    cluster: Option<&str>,
    node: &str,
    points: Vec<component::otlp::NumberDataPoint>,
) -> ResourceMetrics {
    let mut res = vec![
        kv_str(resource::NODE_ID, node),
        kv_str(resource::SERVICE_NAME, "ingero"),
    ];
    if let Some(c) = cluster {
        res.push(kv_str(resource::CLUSTER_ID, c));
    }
    let bytes: Vec<_> = points
        .iter()
        .map(|p| {
            let mut b = p.clone();
            b.value = Some(component::otlp::NumberValue::AsInt(1024));
            b
        })
        .collect();
    resource_metrics(
        res,
        "ingero",
        vec![
            gauge_f64(metric::NCCL_DURATION_MS, "ms", points),
            gauge_f64(metric::NCCL_BYTES, "By", bytes),
        ],
    )
}

fn ctx(cluster: Option<&str>, at: u64) -> BatchContext {
    BatchContext {
        cluster_id: cluster.map(Arc::from),
        received_at: Timestamp(at),
    }
}

fn family<'a>(fams: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
    fams.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

fn sample(f: &MetricFamily, labels: &[(&str, &str)]) -> f64 {
    f.samples
        .iter()
        .find(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
        })
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no sample {labels:?} in {}", f.name))
}

#[test]
fn exact_alignment_through_process_and_tick() {
    let p = create(&ConfigValue::Null).unwrap();
    let mut batch = Vec::new();
    for r in 0..4i64 {
        let late = if r == 3 { 120 * MS } else { 0 };
        batch.push(rm(
            Some("prod"),
            &format!("gpu-{r}"),
            vec![dp(
                "ncclAllReduce",
                "00000000000000c1",
                r,
                4,
                Some(9),
                T0 + r as u64 * MS + late,
            )],
        ));
    }
    let before = batch.clone();
    let out = p.process(&mut batch, &ctx(None, T0 + 5_000 * MS));
    assert_eq!(out.rejected_points, 0);
    assert_eq!(
        batch, before,
        "process must pass the batch through unchanged"
    );

    let emitted = p.tick(Timestamp(T0 + 6_000 * MS));
    assert_eq!(emitted.len(), 4, "one resource per node");
    let mut lags = Vec::new();
    for rm in &emitted {
        assert_eq!(
            get_str(resource_attrs(rm), resource::CLUSTER_ID),
            Some("prod")
        );
        let node = get_str(resource_attrs(rm), resource::NODE_ID)
            .unwrap()
            .to_string();
        let m = &rm.scope_metrics[0].metrics[0];
        assert_eq!(m.name, metric::NCCL_PEER_LAG_MS);
        for pt in number_points(m) {
            let rank = get_i64(&pt.attributes, attr::NCCL_RANK).unwrap();
            assert_eq!(node, format!("gpu-{rank}"));
            assert_eq!(get_i64(&pt.attributes, attr::NCCL_OP_SEQ), Some(9));
            assert_eq!(
                get_str(&pt.attributes, attr::NCCL_COMM_ID_HASH),
                Some("00000000000000c1")
            );
            lags.push((rank, point_value(pt).unwrap(), pt.time_unix_nano));
        }
    }
    lags.sort_by_key(|l| l.0);
    // Entries 0, 1, 2, 123 ms: median 1.5 ms.
    assert!((lags[3].1 - 121.5).abs() < 1e-6, "{lags:?}");
    assert!((lags[0].1 + 1.5).abs() < 1e-6);
    assert!(
        lags.iter().all(|l| l.2 == T0 + 1_500_000),
        "timestamp is the collective's time"
    );
    assert!(
        p.tick(Timestamp(T0 + 7_000 * MS)).is_empty(),
        "emitted once"
    );

    let c = p.counts();
    assert_eq!(c.outcomes[Outcome::Accepted as usize], 4);
    assert_eq!(
        c.outcomes[Outcome::Ignored as usize],
        4,
        "bytes points are ignored"
    );
    assert_eq!(c.lag_points, 4);
}

#[test]
fn cluster_comes_from_resource_then_request_then_default() {
    let v = parse_yaml(b"default_cluster_id: fallback\n").unwrap();
    let p = create(&v).unwrap();
    let none = create(&ConfigValue::Null).unwrap();
    let pts = || vec![dp("ncclAllReduce", "00000000000000c1", 0, 2, Some(1), T0)];
    for proc_ in [&p, &none] {
        let mut b = vec![rm(None, "n0", pts())];
        proc_.process(&mut b, &ctx(Some("from-request"), T0));
        let mut b = vec![rm(None, "n1", pts())];
        proc_.process(&mut b, &ctx(None, T0));
    }
    let diag = p.diagnostics().unwrap();
    let clusters: Vec<&str> = diag["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster_id"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["fallback", "from-request"]);
    assert_eq!(p.counts().dropped(DropReason::NoCluster), 0);
    assert_eq!(none.counts().dropped(DropReason::NoCluster), 1);
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    let fb = family(&fams, "ingero_nccl_cluster_fallback_total");
    assert_eq!(sample(fb, &[("source", "batch_context")]), 1.0);
    assert_eq!(sample(fb, &[("source", "default")]), 1.0);
}

#[test]
fn cluster_cap_and_telemetry_gauges() {
    let v = parse_yaml(b"limits: {max_clusters: 1}\n").unwrap();
    let p = create(&v).unwrap();
    let mut b = vec![
        rm(
            Some("a"),
            "n0",
            vec![dp("ncclAllReduce", "00000000000000c1", 0, 4, Some(1), T0)],
        ),
        rm(
            Some("b"),
            "n1",
            vec![dp("ncclAllReduce", "00000000000000c1", 1, 4, Some(1), T0)],
        ),
    ];
    p.process(&mut b, &ctx(None, T0));
    assert_eq!(p.counts().dropped(DropReason::CapClusters), 1);
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    assert_eq!(
        sample(
            family(&fams, "ingero_nccl_tracked_comms"),
            &[("cluster_id", "a")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            family(&fams, "ingero_nccl_open_buckets"),
            &[("cluster_id", "a")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            family(&fams, "ingero_nccl_dropped_total"),
            &[("reason", "cap_clusters")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            family(&fams, "ingero_nccl_points_total"),
            &[("outcome", "accepted")]
        ),
        1.0
    );
}

#[test]
fn shutdown_discards_and_counts_open_state() {
    let p: NcclPeerLagProcessor = create(&ConfigValue::Null).unwrap();
    let mut b = vec![rm(
        Some("a"),
        "n0",
        vec![dp("ncclAllReduce", "00000000000000c1", 0, 4, Some(1), T0)],
    )];
    p.process(&mut b, &ctx(None, T0));
    p.shutdown();
    assert_eq!(p.counts().dropped(DropReason::Shutdown), 1);
    assert!(p.tick(Timestamp(T0 + 60_000 * MS)).is_empty());
}
