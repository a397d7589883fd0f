//! The per-cluster caps (`max_series_per_cluster`, `max_bytes_per_cluster`): exact under
//! concurrent pushes and expiry, released by expiry, and one cluster at its cap never
//! takes another's room.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use common::agent::{AgentPush, health_push};
use common::*;
use component::otlp::kv_str;
use fleet_prometheus::{DropReason, PrometheusExporter, PrometheusExporterConfig};

/// One resource of `cluster`, node `node`, with `n` gauges named `m.0` ... (so a new node
/// is `n` new series).
fn node(cluster: &str, node: &str, n: usize, t: u64) -> component::ResourceMetrics {
    rm(
        vec![
            kv_str("ingero.cluster.id", cluster),
            kv_str("ingero.node.id", node),
        ],
        (0..n)
            .map(|i| gauge(&format!("m.{i}"), "", vec![point(vec![], t, 1.0)]))
            .collect(),
    )
}

fn count(page: &str, needle: &str) -> usize {
    page.lines().filter(|l| l.contains(needle)).count()
}

const ALPHA: &str = "ingero_cluster_id=\"alpha\"";
const BETA: &str = "ingero_cluster_id=\"beta\"";

#[test]
fn concurrent_floods_of_one_cluster_never_hold_more_than_its_cap() {
    const CAP: usize = 400;
    const THREADS: usize = 8;
    const REQUESTS: usize = 100;
    let e = exporter(PrometheusExporterConfig {
        max_series_per_cluster: CAP,
        ..Default::default()
    });
    // beta holds a node before the flood.
    e.consume(&[node("beta", "b0", 10, T0)], ts(T0));
    let flooding = AtomicBool::new(true);
    let seen_max = AtomicUsize::new(0);
    let attempted = AtomicUsize::new(0);
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        let floods: Vec<_> = (0..THREADS)
            .map(|t| {
                let (e, attempted, start) = (&e, &attempted, &start);
                s.spawn(move || {
                    start.wait();
                    // Each request: two new nodes of 5 new series each.
                    for i in 0..REQUESTS {
                        let batch = [
                            node("alpha", &format!("a{t}-{i}-0"), 5, T0),
                            node("alpha", &format!("a{t}-{i}-1"), 5, T0),
                        ];
                        attempted.fetch_add(10, Relaxed);
                        e.consume(&batch, ts(T0));
                    }
                })
            })
            .collect();
        // Meanwhile: expiry passes (nothing is due; they used to recount the clusters) and
        // a watcher of the count and of the page.
        s.spawn(|| {
            while flooding.load(Relaxed) {
                e.expire(ts(T0 + 1));
                let held = e.cluster_series("alpha");
                let on_page = count(&render(&e, T0 + 1, &[]), ALPHA);
                seen_max.fetch_max(held.max(on_page), Relaxed);
            }
        });
        for f in floods {
            f.join().unwrap();
        }
        flooding.store(false, Relaxed);
    });
    let attempted = attempted.load(Relaxed);
    assert_eq!(attempted, THREADS * REQUESTS * 10);
    assert!(
        seen_max.load(Relaxed) <= CAP,
        "alpha held {} series at some point, over its cap of {CAP}",
        seen_max.load(Relaxed)
    );
    let page = render(&e, T0 + 1, &[]);
    assert_eq!(count(&page, ALPHA), CAP, "alpha holds exactly its cap");
    assert_eq!(e.cluster_series("alpha"), CAP);
    assert_eq!(
        e.dropped(DropReason::ClusterSeriesLimit),
        (attempted - CAP) as u64
    );
    assert_eq!(count(&page, BETA), 10);

    // beta still creates new series; alpha updates what it holds but creates nothing.
    let stats = e.consume(&[node("beta", "b1", 10, T0 + 2)], ts(T0 + 2));
    assert_eq!((stats.stored, stats.lost), (10, 0));
    let stats = e.consume(&[node("alpha", "late", 10, T0 + 2)], ts(T0 + 2));
    assert_eq!(stats.lost, 10);
    assert_eq!(stats.loss_reason, Some(DropReason::ClusterSeriesLimit));

    // Expiry gives alpha its room back, to the series.
    e.expire(ts(T0 + 301));
    assert_eq!(e.cluster_series("alpha"), 0);
    assert_eq!(e.cluster_bytes("alpha"), 0);
    assert_eq!(e.cluster_count(), 1, "only beta's b1 is left");
    let batch: Vec<_> = (0..50)
        .map(|i| node("alpha", &format!("again{i}"), 10, T0 + 303))
        .collect();
    let stats = e.consume(&batch, ts(T0 + 303));
    assert_eq!(stats.stored, CAP as u64);
    assert_eq!(e.cluster_series("alpha"), CAP);
}

#[test]
fn one_request_flooding_a_cluster_stops_exactly_at_its_cap() {
    let e = exporter(PrometheusExporterConfig {
        max_series_per_cluster: 400,
        ..Default::default()
    });
    // One batch: 100 new alpha nodes of 10 series, with a beta node in the middle.
    let mut batch: Vec<_> = (0..100)
        .map(|i| node("alpha", &format!("a{i}"), 10, T0))
        .collect();
    batch.insert(50, node("beta", "b0", 10, T0));
    let stats = e.consume(&batch, ts(T0));
    assert_eq!(stats.stored, 410);
    assert_eq!(stats.lost, 600);
    assert_eq!(stats.loss_reason, Some(DropReason::ClusterSeriesLimit));
    let page = render(&e, T0, &[]);
    assert_eq!(count(&page, ALPHA), 400);
    assert_eq!(count(&page, BETA), 10);
    // The nodes past the cap were refused whole: no empty resource is left behind.
    assert_eq!(e.resource_count(), 41);
}

#[test]
fn a_cluster_at_its_byte_cap_is_refused_new_series_and_others_keep_their_room() {
    const CAP: usize = 64 * 1024;
    let e = exporter(PrometheusExporterConfig {
        max_bytes_per_cluster: CAP,
        ..Default::default()
    });
    e.consume(&[node("beta", "b0", 5, T0)], ts(T0));
    // alpha: new nodes each carrying a distinct 4000-byte label value.
    let big = |i: usize, t: u64| {
        let mut r = node("alpha", &format!("a{i}"), 3, t);
        r.resource
            .as_mut()
            .unwrap()
            .attributes
            .push(kv_str("note", format!("{i:04}{}", "x".repeat(3996))));
        r
    };
    let mut refused = 0;
    let mut held_nodes = 0;
    for i in 0..40 {
        let stats = e.consume(&[big(i, T0)], ts(T0));
        if stats.lost > 0 {
            assert_eq!(stats.loss_reason, Some(DropReason::ClusterBytesLimit));
            refused += stats.lost;
        } else {
            held_nodes += 1;
        }
        assert!(
            e.cluster_bytes("alpha") <= CAP,
            "{}",
            e.cluster_bytes("alpha")
        );
    }
    // Each node is charged about 5 KiB (its 4,000-byte value and the arena's growth room
    // for it): 12 fit in 64 KiB.
    assert_eq!(held_nodes, 12);
    assert_eq!(refused, 3 * 28);
    assert_eq!(e.dropped(DropReason::ClusterBytesLimit), 84);
    assert_eq!(e.cluster_series("alpha"), 3 * 12);

    // At the cap nothing new of alpha is interned: more distinct values cost nothing.
    let interned = || {
        let mut out = Vec::new();
        e.telemetry(&mut out);
        out.iter()
            .find(|f| f.name == "ingero_fleet_prometheus_interned_bytes")
            .unwrap()
            .samples[0]
            .value
    };
    let before = interned();
    for i in 100..150 {
        assert_eq!(e.consume(&[big(i, T0)], ts(T0)).lost, 3);
    }
    assert_eq!(interned(), before, "refused text was interned");

    // alpha's held series still update; beta still creates new series.
    let stats = e.consume(&[big(0, T0 + 1)], ts(T0 + 1));
    assert_eq!((stats.stored, stats.lost), (3, 0));
    let stats = e.consume(&[node("beta", "b1", 5, T0 + 1)], ts(T0 + 1));
    assert_eq!((stats.stored, stats.lost), (5, 0));
    let page = render(&e, T0 + 1, &[]);
    assert_eq!(count(&page, ALPHA), 36);
    assert_eq!(count(&page, BETA), 10);

    // The counter is on the exporter's telemetry with its reason label.
    let mut tel = Vec::new();
    e.telemetry(&mut tel);
    let dropped = tel
        .iter()
        .find(|f| f.name == "ingero_fleet_prometheus_points_dropped_total")
        .unwrap();
    let s = dropped
        .samples
        .iter()
        .find(|s| s.labels.iter().any(|(_, v)| v == "cluster_bytes_limit"))
        .unwrap();
    assert_eq!(s.value, (84 + 150) as f64);

    // Expiry releases every byte.
    e.expire(ts(T0 + 400));
    assert_eq!(e.cluster_bytes("alpha"), 0);
    assert_eq!(e.cluster_bytes("beta"), 0);
    assert_eq!(e.cluster_count(), 0);
}

fn agent_node_bytes(e: &PrometheusExporter, i: u64) -> usize {
    let p = AgentPush::fleet_node(i, true, T0 * 1_000_000_000);
    let cluster = p.cluster.clone();
    let before = e.cluster_bytes(&cluster);
    e.consume(&[health_push(&p)], ts(T0));
    e.cluster_bytes(&cluster) - before
}

#[test]
fn an_agent_node_is_charged_about_three_kib() {
    // What the default max_bytes_per_cluster is sized by (config.rs, README): a node of
    // the agent's full health push (13 series) is charged about 2.8 KiB, so ordinary
    // clusters meet max_series_per_cluster well before max_bytes_per_cluster.
    let e = default_exporter();
    let bytes = agent_node_bytes(&e, 1);
    eprintln!("one agent node (13 series): {bytes} bytes charged");
    assert!((2400..3200).contains(&bytes), "{bytes}");
    // A second node of the same cluster is charged the same (nothing shared is credited).
    assert_eq!(agent_node_bytes(&e, 2), bytes);
    let per_series_at_cap =
        bytes as f64 / 13.0 * fleet_prometheus::config::DEFAULT_MAX_SERIES_PER_CLUSTER as f64;
    assert!(
        per_series_at_cap < fleet_prometheus::config::DEFAULT_MAX_BYTES_PER_CLUSTER as f64,
        "a cluster of agents would meet the byte cap first: {per_series_at_cap}"
    );
}

#[test]
fn resources_without_a_cluster_share_one_allowance() {
    // max_series 300, 100 per cluster: alpha's 100 plus 200 series of resources that name
    // no cluster used to take all 300, and beta then got nothing.
    // Every push here is the one token-less tenant, allowed the whole of max_series.
    let e = exporter(PrometheusExporterConfig {
        max_series: 300,
        max_series_per_cluster: 100,
        max_series_per_tenant: Some(300),
        ..Default::default()
    });
    e.consume(&[node("alpha", "a0", 100, T0)], ts(T0));
    assert_eq!(e.cluster_series("alpha"), 100);
    let unlabelled = |n: &str| {
        rm(
            vec![kv_str("ingero.node.id", n)],
            (0..100)
                .map(|i| gauge(&format!("m.{i}"), "", vec![point(vec![], T0, 1.0)]))
                .collect(),
        )
    };
    let first = e.consume(&[unlabelled("u0")], ts(T0));
    assert_eq!(first.lost, 0);
    let second = e.consume(&[unlabelled("u1")], ts(T0));
    assert_eq!(second.lost, 100, "{second:?}");
    assert_eq!(second.loss_reason, Some(DropReason::ClusterSeriesLimit));
    assert_eq!(e.cluster_series(""), 100);
    assert_eq!(e.series_count(), 200);
    let beta = e.consume(&[node("beta", "b0", 100, T0)], ts(T0));
    assert_eq!(beta.lost, 0, "{beta:?}");
    assert_eq!(e.cluster_series("beta"), 100);
}

/// Push nodes of 10 series into `cluster` as `tenant` until one is refused; the reason.
fn fill(e: &PrometheusExporter, tenant: &str, cluster: &str) -> DropReason {
    for i in 0.. {
        let s = e.consume_as(
            &[node(cluster, &format!("n{i}"), 10, T0)],
            ts(T0),
            Some(tenant),
        );
        if s.stored < 10 {
            return s.loss_reason.expect("a refusal names its reason");
        }
    }
    unreachable!()
}

#[test]
fn one_tenant_over_several_clusters_is_held_to_its_share_of_the_global_budget() {
    const BUDGET: usize = 64 << 10;
    let e = exporter(PrometheusExporterConfig {
        max_bytes: BUDGET,
        max_bytes_per_cluster: BUDGET,
        ..Default::default()
    });
    let share = BUDGET - BUDGET / 4;
    // Tenant A fills one cluster after another: the first reaches the tenant's share, the
    // others get nothing new (before, each cluster had its own full allowance).
    for c in ["a1", "a2", "a3", "a4"] {
        assert_eq!(fill(&e, "A", c), DropReason::TenantBytesLimit, "{c}");
    }
    let (_, a_bytes) = e.tenant_usage(Some("A"));
    assert!(a_bytes <= share, "{a_bytes} > {share}");
    assert!(a_bytes > share / 2, "the share was used: {a_bytes}");
    assert_eq!(e.total_bytes(), a_bytes);
    // Tenant B still gets its series, up to what is left of the global budget.
    let s = e.consume_as(&[node("b1", "n0", 10, T0)], ts(T0), Some("B"));
    assert_eq!(s.stored, 10, "B's first node");
    assert_eq!(fill(&e, "B", "b1"), DropReason::BytesLimit);
    assert!(e.total_bytes() <= BUDGET);
    assert!(e.dropped(DropReason::TenantBytesLimit) > 0);
    assert!(e.dropped(DropReason::BytesLimit) > 0);
    // Expiry gives every byte back, to the tenants and the global budget.
    e.expire(ts(T0 + 3600));
    assert_eq!(e.total_bytes(), 0);
    assert_eq!(e.tenant_usage(Some("A")), (0, 0));
    assert_eq!(
        e.consume_as(&[node("a1", "n0", 10, T0 + 3600)], ts(T0 + 3600), Some("A"))
            .stored,
        10
    );
}

#[test]
fn a_tenants_series_share_holds_across_its_clusters() {
    let e = exporter(PrometheusExporterConfig {
        max_series: 400,
        max_series_per_cluster: 400,
        ..Default::default()
    });
    for c in ["a1", "a2", "a3"] {
        assert_eq!(fill(&e, "A", c), DropReason::TenantSeriesLimit, "{c}");
    }
    assert_eq!(e.tenant_usage(Some("A")).0, 300);
    // Pushes without a token are a tenant of their own.
    let s = e.consume_as(&[node("n1", "n0", 10, T0)], ts(T0), None);
    assert_eq!(s.stored, 10);
    assert_eq!(e.tenant_usage(None).0, 10);
}
