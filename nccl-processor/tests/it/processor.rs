//! The processor through its `component::Processor` interface: OTLP batches in, lag
//! metrics out of `tick`, counters and diagnostics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use component::config::{ConfigValue, parse_yaml};
use component::otlp::{
    KeyValue, ResourceMetrics, gauge_f64, get_i64, get_str, kv_i64, kv_str, number_points,
    point_f64, point_value, resource_attrs, resource_metrics,
};
use component::{BatchContext, MetricFamily, Processor, Timestamp};
use ingero_wire::{attr, metric, resource};
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
        tenant: None,
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
            assert_eq!(
                get_i64(&pt.attributes, attr::NCCL_OP_SEQ),
                None,
                "never a label"
            );
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

/// 8 ranks, 60 AllReduce steps with op_seq: rank 5 is 290 ms behind except on every 10th
/// step (and a few more), rank 2 is 120 ms behind every 14th step, everyone else jitters.
#[test]
fn chronic_and_periodic_ranks_reach_telemetry_and_diagnostics() {
    let p = create(&ConfigValue::Null).unwrap();
    let comm = "00000000deadbeef";
    for step in 0..60i64 {
        let t_step = T0 + step as u64 * 2_000 * MS;
        let mut batch = Vec::new();
        for r in 0..8i64 {
            let jitter = ((step * 7 + r * 13) % 5) as u64 * MS / 2;
            let mut lag = 0;
            if r == 5 && !(step % 10 == 0 || matches!(step, 13 | 27 | 44 | 58)) {
                lag = 290 * MS;
            }
            if r == 2 && step % 14 == 3 {
                lag = 120 * MS;
            }
            batch.push(rm(
                Some("prod"),
                &format!("gpu-{r}"),
                vec![dp(
                    "ncclAllReduce",
                    comm,
                    r,
                    8,
                    Some(step),
                    t_step + jitter + lag,
                )],
            ));
        }
        p.process(&mut batch, &ctx(None, t_step + 500 * MS));
        p.tick(Timestamp(t_step + 600 * MS));
    }
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    let lag = family(&fams, "ingero_nccl_rank_lag_seconds");
    assert_eq!(lag.samples.len(), 2, "{:?}", lag.samples);
    let l5 = sample(
        lag,
        &[
            ("cluster_id", "prod"),
            ("comm_id_hash", comm),
            ("op_type", "ncclAllReduce"),
            ("rank", "5"),
        ],
    );
    assert!((l5 - 0.290).abs() < 0.002, "{l5}");
    let l2 = sample(lag, &[("rank", "2")]);
    assert!((l2 - 0.120).abs() < 0.002, "{l2}");
    let ratio = family(&fams, "ingero_nccl_rank_behind_ratio");
    assert!((sample(ratio, &[("rank", "5")]) - 41.0 / 50.0).abs() < 1e-9);
    let period = family(&fams, "ingero_nccl_rank_lag_period_steps");
    assert_eq!(period.samples.len(), 1);
    assert_eq!(sample(period, &[("rank", "2")]), 14.0);

    let diag = p.diagnostics().unwrap();
    let c = &diag["clusters"][0]["communicators"][0];
    assert_eq!(c["comm_id_hash"], comm);
    let op = &c["ops"][0];
    assert_eq!(op["op_type"], "ncclAllReduce");
    assert_eq!(op["steps"], 60);
    let worst = op["worst_ranks"].as_array().unwrap();
    assert_eq!(worst[0]["rank"], 5);
    assert_eq!(worst[0]["behind_steps"], 41);
    assert_eq!(worst[0]["window_steps"], 50);
    assert_eq!(worst[0]["node_id"], "gpu-5");
    assert_eq!(worst[1]["rank"], 2);
    assert_eq!(worst[1]["period_steps"], 14);
    let summaries: Vec<&str> = op["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(
        summaries[0],
        "rank 5 is 290 ms behind on ncclAllReduce of comm 00000000deadbeef, 41 of the last 50 steps"
    );
    assert!(summaries[1].ends_with("every 14 steps"), "{summaries:?}");
}

#[test]
fn named_rank_gauges_are_capped() {
    let v = parse_yaml(b"limits: {max_named_ranks_per_cluster: 1}\n").unwrap();
    let p = create(&v).unwrap();
    for step in 0..20i64 {
        let t = T0 + step as u64 * 2_000 * MS;
        let mut batch = Vec::new();
        for r in 0..6i64 {
            // ranks 4 and 5 always behind (two of six: the median stays with the on-time ranks)
            let lag = match r {
                4 => 100 * MS,
                5 => 200 * MS,
                _ => 0,
            };
            batch.push(rm(
                Some("c"),
                "n",
                vec![dp(
                    "ncclAllGather",
                    "00000000000000aa",
                    r,
                    6,
                    Some(step),
                    t + r as u64 * 100_000 + lag,
                )],
            ));
        }
        p.process(&mut batch, &ctx(None, t));
    }
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    let lag = family(&fams, "ingero_nccl_rank_lag_seconds");
    assert_eq!(lag.samples.len(), 1);
    assert_eq!((sample(lag, &[("rank", "5")]) * 1000.0).round(), 200.0);
    let diag = p.diagnostics().unwrap();
    let worst = diag["clusters"][0]["communicators"][0]["ops"][0]["worst_ranks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        worst, 2,
        "diagnostics list every named rank up to diagnostics_top_ranks"
    );
}

/// A flood of distinct communicators and never-completing instances: the caps hold and
/// everything refused is counted, so memory is bounded by the limits.
#[test]
fn caps_hold_under_a_flood() {
    let v = parse_yaml(
        b"limits: {max_comms_per_cluster: 8, max_open_buckets_per_cluster: 32, \
          max_buffered_points_per_cluster: 100, max_clusters: 2}\n",
    )
    .unwrap();
    let p = create(&v).unwrap();
    let mut sent = 0u64;
    for cluster in ["a", "b", "c"] {
        for comm in 1..=20u64 {
            let mut pts = Vec::new();
            for seq in 0..10i64 {
                // rank 0 of 64 only: never complete
                pts.push(dp(
                    "ncclAllReduce",
                    &format!("{comm:016x}"),
                    0,
                    64,
                    Some(seq),
                    T0,
                ));
            }
            sent += pts.len() as u64;
            let mut b = vec![rm(Some(cluster), "n", pts)];
            p.process(&mut b, &ctx(None, T0));
        }
    }
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    for cluster in ["a", "b"] {
        let l = [("cluster_id", cluster)];
        assert_eq!(sample(family(&fams, "ingero_nccl_tracked_comms"), &l), 8.0);
        assert!(sample(family(&fams, "ingero_nccl_open_buckets"), &l) <= 32.0);
        assert!(sample(family(&fams, "ingero_nccl_buffered_points"), &l) <= 100.0);
    }
    let c = p.counts();
    let accepted = c.outcomes[Outcome::Accepted as usize];
    assert_eq!(
        accepted,
        2 * 32,
        "32 open instances of one point each per cluster"
    );
    let refused = c.dropped(DropReason::CapComms)
        + c.dropped(DropReason::CapBuckets)
        + c.dropped(DropReason::CapClusters);
    assert_eq!(accepted + refused, sent, "every point is accounted for");
    assert_eq!(c.dropped(DropReason::CapClusters), 200);
}
