#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use component::otlp::{KeyValue, NumberValue};
use ingero_wire::attr;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

fn limits(max_clusters: u32, max_nodes: u32, max_total: u32) -> IngestLimits {
    IngestLimits {
        table: TableLimits {
            max_nodes: max_nodes as usize,
            max_cohorts: 16,
            cohorts_enabled: true,
            ttl_nanos: 50_000_000_000,
        },
        max_clusters,
        max_clusters_per_tenant: max_clusters,
        max_nodes_per_cluster: max_nodes,
        max_nodes_total: max_total,
        reserved_nodes_per_cluster: 0,
        max_pool_nodes_per_tenant: max_total,
    }
}

fn ingest() -> Ingest {
    Ingest::new(limits(8, 100, 1000))
}

fn ctx(cluster: Option<&str>, at: Timestamp) -> BatchContext {
    BatchContext {
        cluster_id: cluster.map(Arc::from),
        received_at: at,
        tenant: None,
    }
}

fn point(score: f64, state: Option<&str>, cohort: Option<&str>) -> NumberDataPoint {
    let mut attrs = Vec::new();
    if let Some(s) = state {
        attrs.push(otlp::kv_str(attr::NODE_STATE, s));
    }
    if let Some(c) = cohort {
        attrs.push(otlp::kv_str(attr::CGROUP_PATH_HASH, c));
    }
    otlp::point_f64(attrs, 1, score)
}

fn resource_with(
    cluster: Option<&str>,
    node: Option<&str>,
    metrics: Vec<Metric>,
) -> ResourceMetrics {
    let mut res: Vec<KeyValue> = Vec::new();
    if let Some(c) = cluster {
        res.push(otlp::kv_str(resource::CLUSTER_ID, c));
    }
    if let Some(n) = node {
        res.push(otlp::kv_str(resource::NODE_ID, n));
    }
    otlp::resource_metrics(res, "ingero.health", metrics)
}

fn health(
    cluster: Option<&str>,
    node: Option<&str>,
    points: Vec<NumberDataPoint>,
) -> ResourceMetrics {
    resource_with(
        cluster,
        node,
        vec![otlp::gauge_f64(metric::HEALTH_SCORE, "1", points)],
    )
}

fn active(cluster: &str, node: &str, score: f64) -> ResourceMetrics {
    health(
        Some(cluster),
        Some(node),
        vec![point(score, Some("active"), None)],
    )
}

/// What the table of `cluster` holds: (node, score, state, cohort), sorted by node.
fn stored(ing: &Ingest, cluster: &str) -> Vec<(String, f64, NodeState, String)> {
    let tables = ing.clusters();
    let Some((_, table)) = tables.iter().find(|(id, _)| id.as_ref() == cluster) else {
        return Vec::new();
    };
    let mut table = table.lock();
    let (mut samples, mut scores, mut names) = (Vec::new(), Vec::new(), Vec::new());
    table.snapshot(
        T0.as_nanos(),
        u64::MAX,
        u64::MAX,
        ing.budget(),
        &mut samples,
        &mut scores,
        &mut names,
    );
    let mut out: Vec<_> = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_vacant())
        .map(|(i, s)| {
            let id = table.node_id(i, s.generation()).unwrap();
            let cohort = names
                .get(s.cohort() as usize)
                .cloned()
                .flatten()
                .map(|c| c.to_string())
                .unwrap_or_default();
            (id.to_string(), s.score, s.state(), cohort)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn validate_point_accepts_the_range_and_names_every_rejection() {
    let ok = point(0.0, Some("idle"), Some("abcd"));
    assert_eq!(validate_point(&ok).unwrap(), (0.0, NodeState::Idle, "abcd"));
    let ok = point(1.0, Some("calibrating"), None);
    assert_eq!(
        validate_point(&ok).unwrap(),
        (1.0, NodeState::Calibrating, "")
    );

    let mut no_value = point(0.5, Some("active"), None);
    no_value.value = None;
    let long_cohort = "c".repeat(MAX_COHORT_BYTES + 1);
    let cases = [
        (
            no_value,
            RejectReason::NoValue,
            "ingero.node.health_score: data point has no value",
        ),
        (
            point(f64::NAN, Some("active"), None),
            RejectReason::NonFinite,
            "ingero.node.health_score: score NaN is not in [0, 1]",
        ),
        (
            point(-0.01, Some("active"), None),
            RejectReason::OutOfRange,
            "ingero.node.health_score: score -0.01 is not in [0, 1]",
        ),
        (
            point(0.5, None, None),
            RejectReason::BadState,
            "ingero.node.health_score: missing ingero.node.state",
        ),
        (
            point(0.5, Some("asleep"), None),
            RejectReason::BadState,
            "ingero.node.health_score: unknown ingero.node.state \"asleep\" (want active, idle or calibrating)",
        ),
        (
            point(0.5, Some("active"), Some(&long_cohort)),
            RejectReason::IdTooLong,
            "ingero.node.health_score: ingero.cgroup_path_hash longer than 64 bytes",
        ),
    ];
    for (dp, reason, msg) in cases {
        let (r, m) = validate_point(&dp).unwrap_err();
        assert_eq!((r, m.as_str()), (reason, msg));
    }
    // An integer point is read as its value.
    let mut int = point(0.0, Some("active"), None);
    int.value = Some(NumberValue::AsInt(1));
    assert_eq!(validate_point(&int).unwrap().0, 1.0);
    // A cohort key of exactly the limit is accepted.
    let edge = "c".repeat(MAX_COHORT_BYTES);
    assert_eq!(
        validate_point(&point(0.5, Some("active"), Some(&edge)))
            .unwrap()
            .2
            .len(),
        MAX_COHORT_BYTES
    );
}

#[test]
fn a_bad_point_is_rejected_alone_and_the_good_points_are_stored() {
    let ing = ingest();
    let batch = [
        active("prod", "a", 0.9),
        // One bad point between two good ones of another node: only it is refused.
        health(
            Some("prod"),
            Some("b"),
            vec![
                point(0.8, Some("active"), Some("k1")),
                point(f64::INFINITY, Some("active"), None),
                point(0.7, Some("idle"), Some("k1")),
            ],
        ),
        active("prod", "c", 0.95),
    ];
    let mut out = ProcessOutcome::default();
    for rm in &batch {
        ing.resource(rm, &ctx(None, T0), &mut out);
    }
    assert_eq!(out.rejected_points, 1);
    assert_eq!(
        out.message.as_deref(),
        Some("ingero.node.health_score: score inf is not in [0, 1]")
    );
    let c = ing.counters();
    assert_eq!(c.rejected(RejectReason::NonFinite), 1);
    assert_eq!(c.rejected_total(), 1);
    assert_eq!(c.accepted.load(Ordering::Relaxed), 4);
    // Node b keeps its last good point (same receive time: the later point wins).
    assert_eq!(
        stored(&ing, "prod"),
        vec![
            ("a".to_string(), 0.9, NodeState::Active, String::new()),
            ("b".to_string(), 0.7, NodeState::Idle, "k1".to_string()),
            ("c".to_string(), 0.95, NodeState::Active, String::new()),
        ]
    );
    assert_eq!(ing.budget().used(), 3);
    assert_eq!(ing.cluster_count(), 1);
}

#[test]
fn other_metrics_are_ignored_and_non_gauges_rejected_by_point_count() {
    let ing = ingest();
    let mut kind = MetricKind::Histogram(Default::default());
    if let MetricKind::Histogram(h) = &mut kind {
        h.data_points = vec![Default::default(), Default::default()];
    }
    let hist = Metric {
        name: metric::HEALTH_SCORE.to_string(),
        data: Some(kind),
        ..Default::default()
    };
    let other = otlp::gauge_f64(metric::THROUGHPUT_RATIO, "1", vec![point(7.0, None, None)]);
    let good = otlp::gauge_f64(
        metric::HEALTH_SCORE,
        "1",
        vec![point(0.5, Some("active"), None)],
    );
    let rm = resource_with(Some("prod"), Some("n"), vec![hist, other, good]);
    let mut out = ProcessOutcome::default();
    ing.resource(&rm, &ctx(None, T0), &mut out);
    assert_eq!(out.rejected_points, 2);
    assert_eq!(
        out.message.as_deref(),
        Some("ingero.node.health_score: not a gauge")
    );
    assert_eq!(ing.counters().rejected(RejectReason::UnsupportedType), 2);
    assert_eq!(stored(&ing, "prod").len(), 1);

    // A resource without the health score is not looked at: no cluster, no counters.
    let mut out = ProcessOutcome::default();
    let rm = resource_with(
        None,
        None,
        vec![otlp::gauge_f64(metric::THROUGHPUT_RATIO, "1", vec![])],
    );
    ing.resource(&rm, &ctx(None, T0), &mut out);
    assert_eq!(out, ProcessOutcome::default());
    assert_eq!(ing.counters().rejected_total(), 2);
}

#[test]
fn identity_comes_from_the_resource_else_the_request_and_is_bounded() {
    let ing = ingest();
    let two = || {
        vec![
            point(0.5, Some("active"), None),
            point(0.6, Some("active"), None),
        ]
    };

    // No cluster anywhere: every point of the resource is refused.
    let mut out = ProcessOutcome::default();
    ing.resource(&health(None, Some("n"), two()), &ctx(None, T0), &mut out);
    assert_eq!(
        (out.rejected_points, out.message.as_deref()),
        (2, Some("missing cluster id"))
    );
    assert_eq!(ing.counters().rejected(RejectReason::MissingClusterId), 2);

    // The request's cluster is the fallback; an empty resource attribute counts as missing.
    let mut out = ProcessOutcome::default();
    ing.resource(
        &health(Some(""), Some("n"), two()),
        &ctx(Some("req"), T0),
        &mut out,
    );
    assert_eq!(out.rejected_points, 0);
    assert_eq!(stored(&ing, "req").len(), 1);
    // The resource attribute wins over the request.
    ing.resource(&active("res", "n", 0.5), &ctx(Some("req"), T0), &mut out);
    assert_eq!(stored(&ing, "res").len(), 1);
    assert_eq!(stored(&ing, "req").len(), 1);

    let mut out = ProcessOutcome::default();
    ing.resource(&health(Some("prod"), None, two()), &ctx(None, T0), &mut out);
    assert_eq!(
        (out.rejected_points, out.message.as_deref()),
        (2, Some("missing node id (ingero.node.id)"))
    );
    assert_eq!(ing.counters().rejected(RejectReason::MissingNodeId), 2);

    let at_limit = "n".repeat(MAX_ID_BYTES);
    let over = "n".repeat(MAX_ID_BYTES + 1);
    let mut out = ProcessOutcome::default();
    ing.resource(&active("prod", &at_limit, 0.5), &ctx(None, T0), &mut out);
    assert_eq!(out.rejected_points, 0);
    ing.resource(&active("prod", &over, 0.5), &ctx(None, T0), &mut out);
    ing.resource(&active(&over, "n", 0.5), &ctx(None, T0), &mut out);
    assert_eq!(out.rejected_points, 2);
    assert_eq!(
        out.message.as_deref(),
        Some("cluster or node id longer than 256 bytes")
    );
    assert_eq!(ing.counters().rejected(RejectReason::IdTooLong), 2);
    assert_eq!(ing.cluster_count(), 3, "req, res, prod; never the long id");
}

#[test]
fn an_older_point_is_superseded_and_not_stored() {
    let ing = ingest();
    let mut out = ProcessOutcome::default();
    let later = Timestamp::from_nanos(T0.as_nanos() + 1);
    ing.resource(&active("prod", "n", 0.9), &ctx(None, later), &mut out);
    ing.resource(&active("prod", "n", 0.1), &ctx(None, T0), &mut out);
    assert_eq!(out.rejected_points, 0, "superseded is not a rejection");
    assert_eq!(ing.counters().superseded.load(Ordering::Relaxed), 1);
    assert_eq!(stored(&ing, "prod")[0].1, 0.9);
}

#[test]
fn caps_refuse_points_with_partial_success_and_count_them() {
    // One cluster, two nodes per cluster, three in total.
    let ing = Ingest::new(limits(1, 2, 3));
    let mut out = ProcessOutcome::default();
    for n in ["a", "b", "c"] {
        ing.resource(&active("one", n, 0.9), &ctx(None, T0), &mut out);
    }
    assert_eq!(out.rejected_points, 1);
    assert_eq!(
        out.message.as_deref(),
        Some("node cap reached (limits.max_nodes_per_cluster = 2) in cluster \"one\"")
    );
    let mut out = ProcessOutcome::default();
    ing.resource(&active("two", "a", 0.9), &ctx(None, T0), &mut out);
    assert_eq!(out.rejected_points, 1);
    assert_eq!(
        out.message.as_deref(),
        Some("cluster cap reached (limits.max_clusters = 1): cluster \"two\" not tracked")
    );
    let c = ing.counters();
    assert_eq!(c.dropped(DropReason::CapNodes), 1);
    assert_eq!(c.dropped(DropReason::CapClusters), 1);
    assert_eq!(c.dropped_points.load(Ordering::Relaxed), 2);
    assert_eq!(c.rejected_total(), 0, "caps are drops, not rejections");
    assert_eq!(ing.cluster_count(), 1);
    assert_eq!(stored(&ing, "one").len(), 2);

    // The total cap across clusters.
    let ing = Ingest::new(limits(4, 10, 2));
    let mut out = ProcessOutcome::default();
    for (cl, n) in [("x", "a"), ("y", "b"), ("y", "c")] {
        ing.resource(&active(cl, n, 0.9), &ctx(None, T0), &mut out);
    }
    assert_eq!(
        (out.rejected_points, out.message.as_deref()),
        (1, Some("node cap reached (limits.max_nodes_total = 2)"))
    );
    assert_eq!(ing.counters().dropped(DropReason::CapNodesTotal), 1);
    assert_eq!(ing.budget().used(), 2);
}

#[test]
fn one_cluster_filling_the_shared_pool_leaves_every_cluster_its_reserve() {
    // 4 clusters x 2 reserved = 8 of 12; a shared pool of 4.
    let mut l = limits(4, 10, 12);
    l.reserved_nodes_per_cluster = 2;
    let ing = Ingest::new(l);
    let mut out = ProcessOutcome::default();
    // A noisy cluster takes its reserve and the whole pool: 6 nodes, the 7th refused.
    for i in 0..7 {
        ing.resource(
            &active("noisy", &format!("n{i}"), 0.9),
            &ctx(None, T0),
            &mut out,
        );
    }
    assert_eq!(out.rejected_points, 1);
    assert_eq!(
        out.message.as_deref(),
        Some("node cap reached (limits.max_nodes_total = 12)")
    );
    // Every other cluster still gets its two reserved nodes, and no more.
    for cl in ["a", "b", "c"] {
        let mut out = ProcessOutcome::default();
        for n in ["x", "y", "z"] {
            ing.resource(&active(cl, n, 0.9), &ctx(None, T0), &mut out);
        }
        assert_eq!(out.rejected_points, 1, "cluster {cl}");
        assert_eq!(stored(&ing, cl).len(), 2);
    }
    assert_eq!(ing.budget().used(), 12);
    assert_eq!(ing.counters().dropped(DropReason::CapNodesTotal), 4);
}

#[test]
fn cohort_keys_beyond_the_cap_fold_into_the_cluster_wide_cohort() {
    let mut l = limits(8, 100, 1000);
    l.table.max_cohorts = 1;
    let ing = Ingest::new(l);
    let mut out = ProcessOutcome::default();
    for (n, k) in [("a", "k1"), ("b", "k2")] {
        let rm = health(
            Some("prod"),
            Some(n),
            vec![point(0.9, Some("active"), Some(k))],
        );
        ing.resource(&rm, &ctx(None, T0), &mut out);
    }
    assert_eq!(out.rejected_points, 0, "the point is kept");
    assert_eq!(ing.counters().dropped(DropReason::CapCohorts), 1);
    let s = stored(&ing, "prod");
    assert_eq!((s[0].3.as_str(), s[1].3.as_str()), ("k1", ""));
}

#[test]
fn forget_empty_removes_only_tables_that_are_still_empty() {
    let ing = ingest();
    let mut out = ProcessOutcome::default();
    ing.resource(&active("gone", "n", 0.9), &ctx(None, T0), &mut out);
    ing.resource(&active("kept", "n", 0.9), &ctx(None, T0), &mut out);
    // Expire everything in "gone" the way a tick does.
    {
        let tables = ing.clusters();
        let (_, t) = tables.iter().find(|(id, _)| id.as_ref() == "gone").unwrap();
        let (mut s, mut sc, mut names) = (Vec::new(), Vec::new(), Vec::new());
        t.lock().snapshot(
            T0.as_nanos() + 10,
            0,
            0,
            ing.budget(),
            &mut s,
            &mut sc,
            &mut names,
        );
        assert!(t.lock().is_empty());
    }
    let ids: Vec<Arc<str>> = vec![Arc::from("gone"), Arc::from("kept"), Arc::from("never")];
    assert_eq!(ing.forget_empty(&ids), vec![Arc::<str>::from("gone")]);
    assert_eq!(ing.cluster_count(), 1);
    assert_eq!(ing.budget().used(), 1);
    assert!(ing.forget_empty(&[]).is_empty());
}

fn tenant_ctx(cluster: &str, tenant: Option<&str>) -> BatchContext {
    BatchContext {
        cluster_id: Some(Arc::from(cluster)),
        received_at: T0,
        tenant: tenant.map(Arc::from),
    }
}

#[test]
fn a_tenant_at_its_cluster_share_leaves_new_clusters_to_other_tenants() {
    let mut l = limits(4, 100, 1000);
    l.max_clusters_per_tenant = 3;
    let ing = Ingest::new(l);
    let push = |cluster: &str, tenant: Option<&str>| {
        let mut out = ProcessOutcome::default();
        let rm = active(cluster, "n0", 0.9);
        ing.resource(&rm, &tenant_ctx(cluster, tenant), &mut out);
        out
    };
    for c in ["a1", "a2", "a3"] {
        assert_eq!(push(c, Some("A")).rejected_points, 0, "{c}");
    }
    // A's fourth cluster is refused although the total has room.
    let out = push("a4", Some("A"));
    assert_eq!(out.rejected_points, 1);
    assert_eq!(
        out.message.as_deref(),
        Some(
            "this tenant's cluster share is used up (limits.max_clusters_per_tenant = 3): cluster \"a4\" not tracked"
        )
    );
    assert_eq!(ing.counters().dropped(DropReason::CapClustersPerTenant), 1);
    // A's existing clusters still take points; B creates the last cluster.
    assert_eq!(push("a1", Some("A")).rejected_points, 0);
    assert_eq!(push("b1", Some("B")).rejected_points, 0);
    assert_eq!(
        (
            ing.tenant_clusters(Some("A")),
            ing.tenant_clusters(Some("B"))
        ),
        (3, 1)
    );
    // The total cap still holds for everyone (requests without a token are one tenant).
    assert_eq!(push("n1", None).rejected_points, 1);
    assert_eq!(ing.counters().dropped(DropReason::CapClusters), 1);
    // A forgotten cluster gives its tenant the slot back.
    let (id, t) = ing
        .clusters()
        .into_iter()
        .find(|(id, _)| &**id == "a3")
        .unwrap();
    // Expire it the way a tick does (the tests' TTL is 50 s).
    let (mut s, mut sc, mut names) = (Vec::new(), Vec::new(), Vec::new());
    t.lock().snapshot(
        T0.as_nanos() + 60_000_000_000,
        0,
        0,
        ing.budget(),
        &mut s,
        &mut sc,
        &mut names,
    );
    assert!(t.lock().is_empty());
    assert_eq!(ing.forget_empty(&[id]).len(), 1);
    assert_eq!(ing.tenant_clusters(Some("A")), 2);
    assert_eq!(push("a4", Some("A")).rejected_points, 0);
}

#[test]
fn a_tenant_at_its_share_of_the_node_pool_leaves_the_rest_to_other_tenants() {
    // 4 clusters x 4 reserved of 40: a pool of 24, of which one tenant may hold 18.
    let mut l = limits(4, 100, 40);
    l.reserved_nodes_per_cluster = 4;
    l.max_pool_nodes_per_tenant = 18;
    let ing = Ingest::new(l);
    let push = |cluster: &str, node: &str, tenant: Option<&str>| {
        let mut out = ProcessOutcome::default();
        ing.resource(
            &active(cluster, node, 0.9),
            &tenant_ctx(cluster, tenant),
            &mut out,
        );
        out
    };
    // A fills two clusters as far as it may: 4 + 4 reserved, then 18 of the pool.
    let mut stored = 0;
    let mut last = None;
    for i in 0..30 {
        for c in ["a1", "a2"] {
            let out = push(c, &format!("n{i}"), Some("A"));
            if out.rejected_points == 0 {
                stored += 1;
            } else {
                last = out.message;
            }
        }
    }
    assert_eq!(stored, 8 + 18);
    assert_eq!(
        last.as_deref(),
        Some(
            "this tenant's share of the node pool is used up (limits.max_pool_nodes_per_tenant = 18): new node in cluster \"a2\" not tracked"
        )
    );
    assert_eq!(
        ing.counters().dropped(DropReason::CapNodesPerTenant),
        60 - 26
    );
    assert_eq!(ing.tenant_pool_nodes(Some("A")), 18);
    // A's known nodes keep updating.
    assert_eq!(push("a1", "n0", Some("A")).rejected_points, 0);
    // B's cluster gets its reserve and the 6 left in the pool, then the total cap.
    for i in 0..10 {
        assert_eq!(
            push("b1", &format!("n{i}"), Some("B")).rejected_points,
            0,
            "{i}"
        );
    }
    let out = push("b1", "n10", Some("B"));
    assert_eq!(out.rejected_points, 1);
    assert!(out.message.unwrap().contains("limits.max_nodes_total = 40"));
    assert_eq!(ing.tenant_pool_nodes(Some("B")), 6);
    assert_eq!(ing.budget().used(), 40 - 4);
}
