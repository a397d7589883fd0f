//! The layout memo (`translate::layout_key`, `intern::LayoutMemo`) against the full
//! translation: the same pushes, expiries and compactions through an exporter with the memo
//! and one without it must give the same page and the same drop counts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use common::agent::{AgentPush, health_push};
use common::*;
use component::MetricFamily;
use component::otlp::{KeyValue, Metric, MetricKind, kv_i64, kv_str};
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};
use opentelemetry_proto::tonic::metrics::v1::{Histogram, HistogramDataPoint};
use proptest::prelude::*;

/// One self-metric sample: family name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Drop and intake counters (not memory figures, which the memo itself changes).
fn counters(e: &PrometheusExporter) -> Vec<Sample> {
    let mut fams: Vec<MetricFamily> = Vec::new();
    e.telemetry(&mut fams);
    let mut out: Vec<_> = fams
        .into_iter()
        .filter(|f| f.name.contains("dropped") || f.name.contains("points"))
        .flat_map(|f| {
            let name = f.name.clone();
            f.samples
                .into_iter()
                .map(move |s| (name.clone(), s.labels, s.value))
        })
        .collect();
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// The page as a sorted list of lines: the order of series within a family follows hash
/// tables with per-instance seeds, so two exporters list them differently.
fn page(e: &PrometheusExporter, now: u64) -> Vec<String> {
    let mut lines: Vec<String> = render(e, now, &[]).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn pair() -> (PrometheusExporter, PrometheusExporter) {
    let cfg = PrometheusExporterConfig {
        metric_expiration: std::time::Duration::from_secs(100),
        ..Default::default()
    };
    (exporter(cfg.clone()), exporter(cfg).without_layout_memo())
}

fn same_state(a: &PrometheusExporter, b: &PrometheusExporter, now: u64) {
    assert_eq!(page(a, now), page(b, now));
    assert_eq!(counters(a), counters(b));
    assert_eq!(a.series_count(), b.series_count());
}

#[test]
fn a_layout_is_kept_once_two_nodes_sent_it_and_then_gives_the_same_page() {
    let (memo, full) = pair();
    let push = |node: u64, t: u64| {
        let mut p = AgentPush::fleet_node(node, false, t * 1_000_000_000);
        // One cohort: the same point attributes on every node, as agents of one job send.
        p.cgroup_hash = "8a5edab282632443".into();
        health_push(&p)
    };
    for e in [&memo, &full] {
        e.consume(&[push(0, T0)], ts(T0));
        e.consume(&[push(0, T0 + 1)], ts(T0 + 1));
    }
    // One node, however often: not kept.
    assert_eq!(memo.layout_memo_entries(), 0);
    for e in [&memo, &full] {
        e.consume(&[push(1, T0 + 2)], ts(T0 + 2));
    }
    assert_eq!(memo.layout_memo_entries(), 1);
    // Every further node of the cohort goes through the memo.
    for t in 3..6 {
        let batch: Vec<_> = (0..50).map(|n| push(n, T0 + t)).collect();
        memo.consume(&batch, ts(T0 + t));
        full.consume(&batch, ts(T0 + t));
        same_state(&memo, &full, T0 + t);
    }
    assert_eq!(memo.layout_memo_entries(), 1);
    assert_eq!(memo.series_count(), 50 * 10);
    // Compaction clears it (its ids are renumbered); the next pushes bring it back.
    assert!(memo.expire(ts(T0 + 200)) > 0);
    memo.compact();
    assert_eq!(memo.layout_memo_entries(), 0);
}

#[test]
fn a_kept_layout_is_not_used_for_a_resource_whose_labels_collide_with_its_points() {
    let (memo, full) = pair();
    let shape = |t| vec![gauge("g", "", vec![point(vec![kv_str("x", "dp")], t, 1.0)])];
    for e in [&memo, &full] {
        for node in ["a", "b", "c"] {
            e.consume(&[rm(vec![kv_str("node", node)], shape(T0))], ts(T0));
        }
        // `x` as a resource attribute: contrib's merge makes it win over the point's.
        let res = vec![kv_str("node", "d"), kv_str("x", "res")];
        e.consume(&[rm(res.clone(), shape(T0 + 1))], ts(T0 + 1));
        e.consume(&[rm(res, shape(T0 + 2))], ts(T0 + 2));
    }
    assert_eq!(memo.layout_memo_entries(), 1);
    same_state(&memo, &full, T0 + 2);
    let d: Vec<_> = parse(&render(&memo, T0 + 2, &[]))
        .into_iter()
        .filter(|s| s.labels["node"] == "d")
        .map(|s| s.labels)
        .collect();
    assert_eq!(d, vec![labels(&[("node", "d"), ("x", "res")])]);
}

#[test]
fn layouts_unique_per_node_are_never_kept() {
    let (memo, _) = pair();
    // `fleet_node` gives every node its own cgroup hash, a point attribute.
    for t in 0..3 {
        let batch: Vec<_> = (0..200)
            .map(|n| health_push(&AgentPush::fleet_node(n, false, (T0 + t) * 1_000_000_000)))
            .collect();
        memo.consume(&batch, ts(T0 + t));
    }
    assert_eq!(memo.layout_memo_entries(), 0);
}

/// The `g` series of the page as (labels, value), sorted.
fn g_series(
    e: &PrometheusExporter,
    now: u64,
) -> Vec<(std::collections::BTreeMap<String, String>, f64)> {
    let mut out: Vec<_> = parse(&render(e, now, &[]))
        .into_iter()
        .filter(|s| s.name == "g")
        .map(|s| (s.labels, s.value))
        .collect();
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// Node `node` sends [`state_shape`] at `t`.
fn push_state(e: &PrometheusExporter, node: &str, state: &str, t: u64, v: f64) {
    e.consume(
        &[rm(vec![kv_str("node", node)], state_shape(state, t, v))],
        ts(t),
    );
}

fn state_shape(state: &str, t: u64, v: f64) -> Vec<Metric> {
    vec![
        gauge("g", "", vec![point(vec![kv_str("state", state)], t, v)]),
        gauge("h", "", vec![point(vec![], t, v)]),
    ]
}

#[test]
fn pushes_that_differ_in_one_attribute_value_land_on_different_series() {
    let (memo, full) = pair();
    for e in [&memo, &full] {
        // Two nodes send the layout, so it is kept; node a's next push hits it and the
        // resource memo remembers both node a and the layout it sent.
        push_state(e, "a", "active", T0, 1.0);
        push_state(e, "b", "active", T0, 2.0);
        push_state(e, "a", "active", T0 + 1, 3.0);
        // The same node with one point attribute value changed: another series.
        push_state(e, "a", "idle", T0 + 2, 4.0);
        // Back to the first value: the first series again.
        push_state(e, "a", "active", T0 + 3, 5.0);
        // One resource attribute value changed: another resource.
        push_state(e, "c", "active", T0 + 3, 6.0);
    }
    assert_eq!(memo.layout_memo_entries(), 1);
    same_state(&memo, &full, T0 + 3);
    let s = |node: &str, state: &str, v: f64| (labels(&[("node", node), ("state", state)]), v);
    assert_eq!(
        g_series(&memo, T0 + 3),
        vec![
            s("a", "active", 5.0),
            s("a", "idle", 4.0),
            s("b", "active", 2.0),
            s("c", "active", 6.0),
        ]
    );
    // g per (node, state), h per node.
    assert_eq!(memo.series_count(), 7);
}

#[test]
fn a_layout_hint_left_from_before_the_memo_was_emptied_is_checked_against_the_push() {
    let (memo, full) = pair();
    for e in [&memo, &full] {
        // Layout `active` kept (entry 0); node a's resource remembers it.
        for (node, t) in [("a", T0), ("b", T0), ("a", T0 + 1)] {
            push_state(e, node, "active", t, 1.0);
        }
        // A self-metric family new to the page forgets every memoised decision: the layout
        // memo is emptied, the resources (and node a's hint) stay.
        let own = [
            MetricFamily::gauge("acme_component_gauge", "A component's gauge.")
                .with(&[("cluster_id", "c")], 1.0),
        ];
        render(e, T0 + 1, &own);
    }
    assert_eq!(memo.layout_memo_entries(), 0);
    for e in [&memo, &full] {
        // Layout `idle` kept next, at the index `active` had.
        for node in ["c", "d"] {
            push_state(e, node, "idle", T0 + 2, 2.0);
        }
        // Node a's hint names that index; its push is `active` still.
        push_state(e, "a", "active", T0 + 3, 3.0);
    }
    assert_eq!(memo.layout_memo_entries(), 1);
    same_state(&memo, &full, T0 + 3);
    let s = |node: &str, state: &str, v: f64| (labels(&[("node", node), ("state", state)]), v);
    assert_eq!(
        g_series(&memo, T0 + 3),
        vec![
            s("a", "active", 3.0),
            s("b", "active", 1.0),
            s("c", "idle", 2.0),
            s("d", "idle", 2.0)
        ]
    );
}

#[test]
fn resources_known_before_a_compaction_keep_their_own_series_after_it() {
    let (memo, full) = pair();
    // Nodes 0..40 push once and expire; nodes 40..80 stay. Compaction renumbers the label
    // sets, so every remembered resource set id of the staying nodes changes.
    let push = |node: u64, t: u64| {
        rm(
            vec![
                kv_str("node", format!("n{node}")),
                kv_str("rack", format!("r{}", node % 3)),
            ],
            state_shape("active", t, node as f64),
        )
    };
    for e in [&memo, &full] {
        let early: Vec<_> = (0..40).map(|n| push(n, T0)).collect();
        e.consume(&early, ts(T0));
        for t in [T0 + 60, T0 + 90] {
            let late: Vec<_> = (40..80).map(|n| push(n, t)).collect();
            e.consume(&late, ts(t));
        }
        assert_eq!(e.expire(ts(T0 + 120)), 80);
        assert!(e.compact());
        let late: Vec<_> = (40..80).map(|n| push(n, T0 + 130)).collect();
        e.consume(&late, ts(T0 + 130));
    }
    same_state(&memo, &full, T0 + 130);
    assert_eq!(memo.series_count(), 80);
    assert_eq!(memo.resource_count(), 40);
    let page = g_series(&memo, T0 + 130);
    for n in 40..80u64 {
        let want = labels(&[
            ("node", &format!("n{n}")),
            ("rack", &format!("r{}", n % 3)),
            ("state", "active"),
        ]);
        assert!(page.contains(&(want, n as f64)), "node {n}: {page:?}");
    }
}

#[derive(Debug, Clone)]
struct Push {
    node: u8,
    /// Resource attribute `x` (the label name point attribute `x` also gives): a collision.
    res_x: bool,
    metrics: Vec<(u8, u8, u8, u8)>,
}

#[derive(Debug, Clone)]
enum Op {
    Push(Vec<Push>),
    Advance(u8),
    Expire,
    Compact,
}

fn push() -> impl Strategy<Value = Push> {
    (
        0u8..6,
        prop::bool::weighted(0.15),
        prop::collection::vec((0u8..8, 0u8..6, 0u8..12, 0u8..4), 0..5),
    )
        .prop_map(|(node, res_x, metrics)| Push {
            node,
            res_x,
            metrics,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(push(), 1..4).prop_map(Op::Push),
        2 => (1u8..60).prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => Just(Op::Compact),
    ]
}

/// Point attributes: plain, dropped (`score`), sanitised collisions (`a.b`/`a_b`), the
/// `x` that collides with a resource attribute, ints.
fn attrs(sel: u8) -> Vec<KeyValue> {
    match sel {
        0 => vec![],
        1 => vec![kv_str("state", "active")],
        2 => vec![kv_str("state", "idle"), kv_str("score", "0.4")],
        3 => vec![kv_str("x", "dp")],
        4 => vec![kv_str("a.b", "1"), kv_str("a_b", "2")],
        _ => vec![kv_i64("gpu_count", 8), kv_str("state", "active")],
    }
}

/// A metric: `kind` picks gauge / sums of each temporality and monotonicity / a histogram /
/// a metric without data; `v` picks the value (some points have none, or the no-value flag).
fn metric(kind: u8, attr: u8, v: u8, name: u8, t: u64) -> Metric {
    let mut p = point(attrs(attr), t, f64::from(v));
    match v {
        10 => p.value = None,
        11 => p.flags = 1,
        _ => {}
    }
    let name = format!("m{name}");
    match kind {
        0 | 1 => gauge(&name, "1", vec![p]),
        2 => sum(&name, "By", true, 2, vec![p]),
        3 => sum(&name, "By", true, 1, vec![p]),
        4 => sum(&name, "", false, 2, vec![p]),
        5 => sum(&name, "", true, 0, vec![p]),
        6 => Metric {
            name,
            data: Some(MetricKind::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes: attrs(attr),
                    time_unix_nano: t * 1_000_000_000,
                    count: 2,
                    sum: Some(3.0),
                    bucket_counts: vec![1, 1],
                    explicit_bounds: vec![1.0],
                    ..Default::default()
                }],
                aggregation_temporality: 2,
            })),
            ..Default::default()
        },
        _ => Metric {
            name,
            ..Default::default()
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn memo_and_full_translation_agree(ops in prop::collection::vec(op(), 1..40)) {
        let (memo, full) = pair();
        let mut now = T0;
        for op in ops {
            match op {
                Op::Push(pushes) => {
                    let batch: Vec<_> = pushes
                        .iter()
                        .map(|p| {
                            let mut res = vec![kv_str("node", format!("n{}", p.node))];
                            if p.res_x {
                                res.push(kv_str("x", "res"));
                            }
                            let metrics = p
                                .metrics
                                .iter()
                                .map(|&(kind, attr, v, name)| metric(kind, attr, v, name % 3, now))
                                .collect();
                            rm(res, metrics)
                        })
                        .collect();
                    let a = memo.consume(&batch, ts(now));
                    let b = full.consume(&batch, ts(now));
                    prop_assert_eq!(a, b);
                }
                Op::Advance(d) => now += u64::from(d),
                Op::Expire => {
                    prop_assert_eq!(memo.expire(ts(now)), full.expire(ts(now)));
                }
                Op::Compact => {
                    memo.compact();
                    full.compact();
                }
            }
            prop_assert_eq!(page(&memo, now), page(&full, now));
            prop_assert_eq!(counters(&memo), counters(&full));
        }
    }
}
