//! Expiry, compaction of the intern tables, the series cap and self-telemetry.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use std::collections::BTreeMap;

use common::agent::{AgentPush, health_push, straggler_event};
use common::*;
use component::MetricFamily;
use component::otlp::kv_str;
use fleet_prometheus::{DropReason, PrometheusExporter, PrometheusExporterConfig};
use proptest::prelude::*;

fn push_nodes(e: &PrometheusExporter, nodes: impl Iterator<Item = u64>, t: u64) {
    let batch: Vec<_> = nodes
        .map(|i| health_push(&AgentPush::fleet_node(i, false, t * 1_000_000_000)))
        .collect();
    e.consume(&batch, ts(t));
}

fn telemetry(e: &PrometheusExporter) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    e.telemetry(&mut out);
    out
}

fn metric(fams: &[MetricFamily], name: &str, label: Option<&str>) -> f64 {
    let f = fams
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name}"));
    f.samples
        .iter()
        .find(|s| label.is_none_or(|l| s.labels.iter().any(|(_, v)| v == l)))
        .unwrap()
        .value
}

fn sorted(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn series_stop_rendering_after_expiration_and_expire_frees_them() {
    let e = default_exporter();
    push_nodes(&e, 0..3, T0);
    push_nodes(&e, 0..1, T0 + 200);
    // Just inside the window: everything shows.
    assert_eq!(parse(&render(&e, T0 + 299, &[])).len(), 30);
    // At 5m the older nodes are hidden even before expire() runs.
    let page = parse(&render(&e, T0 + 300, &[]));
    assert_eq!(page.len(), 10);
    assert!(
        page.iter()
            .all(|s| s.labels["ingero_node_id"] == "gpu-node-000000")
    );
    assert_eq!(e.series_count(), 30);
    assert_eq!(e.expire(ts(T0 + 300)), 20);
    assert_eq!(e.series_count(), 10);
    assert_eq!(e.resource_count(), 1);
    assert_eq!(e.expire(ts(T0 + 300)), 0);
    let tel = telemetry(&e);
    assert_eq!(
        metric(
            &tel,
            "ingero_fleet_prometheus_series_dropped_total",
            Some("expired")
        ),
        20.0
    );
    assert_eq!(metric(&tel, "ingero_fleet_prometheus_series", None), 10.0);
    assert_eq!(metric(&tel, "ingero_fleet_prometheus_resources", None), 1.0);
    assert_eq!(e.expire(ts(T0 + 500)), 10);
    assert_eq!(render(&e, T0 + 500, &[]), "");
}

#[test]
fn expiry_compacts_the_intern_tables_without_changing_what_survives() {
    let e = default_exporter();
    push_nodes(&e, 0..2000, T0);
    // Survivors spread over the id space, so compaction really renumbers them.
    push_nodes(&e, (0..2000).step_by(20), T0 + 200);
    let bytes_full = metric(
        &telemetry(&e),
        "ingero_fleet_prometheus_interned_bytes",
        None,
    );
    let before = render(&e, T0 + 300, &[]);
    assert_eq!(e.expire(ts(T0 + 300)), 19_000);
    let tel = telemetry(&e);
    assert_eq!(
        metric(&tel, "ingero_fleet_prometheus_compactions_total", None),
        1.0
    );
    let bytes_after = metric(&tel, "ingero_fleet_prometheus_interned_bytes", None);
    assert!(
        bytes_after * 4.0 < bytes_full,
        "interned bytes {bytes_full} -> {bytes_after}"
    );
    // Ids were renumbered; the page is the same.
    let after = render(&e, T0 + 300, &[]);
    assert_eq!(sorted(&before), sorted(&after));
    assert_eq!(parse(&after).len(), 1000);
    // And the exporter keeps working on the compacted tables.
    push_nodes(&e, 0..300, T0 + 310);
    // 100 survivors + 300 pushed, 15 of which (0, 20, ..., 280) were survivors.
    assert_eq!(parse(&render(&e, T0 + 310, &[])).len(), 3850);
    assert_eq!(e.series_count(), 3850);
    // Nothing left to free: an explicit compaction is a no-op.
    assert!(!e.compact());
}

#[test]
fn the_series_cap_drops_and_counts_new_series_only() {
    let cfg = PrometheusExporterConfig {
        max_series: 25,
        // One tenant (no token) may use the whole: this is about max_series itself.
        max_series_per_tenant: Some(25),
        ..Default::default()
    };
    let e = exporter(cfg);
    push_nodes(&e, 0..3, T0);
    assert_eq!(e.series_count(), 25);
    assert_eq!(e.dropped(DropReason::SeriesLimit), 5);
    let tel = telemetry(&e);
    assert_eq!(
        metric(
            &tel,
            "ingero_fleet_prometheus_series_dropped_total",
            Some("limit")
        ),
        5.0
    );
    assert_eq!(
        metric(
            &tel,
            "ingero_fleet_prometheus_points_dropped_total",
            Some("series_limit")
        ),
        5.0
    );
    assert_eq!(
        metric(&tel, "ingero_fleet_prometheus_points_received_total", None),
        30.0
    );

    // Existing series keep updating at the cap.
    let mut p = AgentPush::fleet_node(0, false, (T0 + 10) * 1_000_000_000);
    p.score = 0.11;
    let st = e.consume(&[health_push(&p)], ts(T0 + 10));
    assert_eq!((st.stored, st.dropped), (10, 0));
    let s = parse(&render(&e, T0 + 10, &[]));
    let score = named(&s, "ingero_node_health_score_ratio")
        .into_iter()
        .find(|x| x.labels["ingero_node_id"] == "gpu-node-000000")
        .unwrap();
    assert_eq!(score.value, 0.11);

    // Room frees up when series expire.
    e.expire(ts(T0 + 305));
    assert_eq!(e.series_count(), 10);
    push_nodes(&e, 10..11, T0 + 305);
    assert_eq!(e.series_count(), 20);
}

#[test]
fn at_the_cap_new_label_values_are_not_interned() {
    let e = exporter(PrometheusExporterConfig {
        max_series: 10,
        // One tenant (no token) may use the whole: this is about max_series itself.
        max_series_per_tenant: Some(10),
        ..Default::default()
    });
    push_nodes(&e, 0..1, T0);
    let bytes = metric(
        &telemetry(&e),
        "ingero_fleet_prometheus_interned_bytes",
        None,
    );
    push_nodes(&e, 1..500, T0);
    assert_eq!(e.dropped(DropReason::SeriesLimit), 4990);
    let after = metric(
        &telemetry(&e),
        "ingero_fleet_prometheus_interned_bytes",
        None,
    );
    assert_eq!(
        bytes, after,
        "a cardinality flood at the cap must not grow memory"
    );
}

#[test]
fn straggler_events_share_one_series_per_node_until_it_expires() {
    let p = AgentPush::fleet_node(7, false, T0 * 1_000_000_000);
    let events: Vec<_> = (0..5)
        .map(|i| {
            straggler_event(
                &p,
                &format!("00000000-0000-4000-8000-00000000000{i}"),
                0.85,
                0.4 - 0.01 * f64::from(i),
            )
        })
        .collect();
    // The event id, score and threshold are per event: not labels by default, so five
    // events of one node are one series.
    let e = default_exporter();
    e.consume(&events, ts(T0));
    let s = parse(&render(&e, T0, &[]));
    let ev = named(&s, "ingero_node_straggler_event_ratio");
    assert_eq!(ev.len(), 1);
    assert!(!ev[0].labels.contains_key("threshold"));
    assert_eq!(ev[0].labels["dominant_signal"], "throughput");
    assert!(!ev[0].labels.contains_key("ingero_provider"));
    assert_eq!(e.expire(ts(T0 + 300)), 1);

    // Kept as labels on request: one series per event, each expiring.
    let e = exporter(PrometheusExporterConfig {
        drop_attributes: Some(vec![]),
        ..Default::default()
    });
    e.consume(&events, ts(T0));
    let s = parse(&render(&e, T0, &[]));
    let ev = named(&s, "ingero_node_straggler_event_ratio");
    assert_eq!(ev.len(), 5);
    assert_eq!(ev[0].labels["threshold"], "0.85");
    assert_eq!(e.expire(ts(T0 + 300)), 5);
}

#[test]
fn shutdown_frees_everything_and_keeps_counters() {
    let e = default_exporter();
    push_nodes(&e, 0..10, T0);
    e.shutdown();
    let tel = telemetry(&e);
    assert_eq!(metric(&tel, "ingero_fleet_prometheus_series", None), 0.0);
    assert_eq!(metric(&tel, "ingero_fleet_prometheus_families", None), 0.0);
    assert_eq!(
        metric(&tel, "ingero_fleet_prometheus_points_received_total", None),
        100.0
    );
}

#[derive(Debug, Clone)]
enum Op {
    /// (node, value) pairs pushed at the current time.
    Push(Vec<(u8, u8)>),
    Advance(u16),
    Expire,
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec((0u8..12, any::<u8>()), 1..6).prop_map(Op::Push),
        2 => (1u16..200).prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => Just(Op::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Against a plain map of (node -> value, last update): whatever the interleaving of
    /// pushes, expiry and compaction, the page shows exactly the live entries.
    #[test]
    fn page_matches_a_simple_model(ops in prop::collection::vec(op(), 1..40)) {
        let e = exporter(PrometheusExporterConfig {
            metric_expiration: std::time::Duration::from_secs(100),
            ..Default::default()
        });
        let mut model: BTreeMap<u8, (f64, u64)> = BTreeMap::new();
        let mut now = T0;
        for op in ops {
            match op {
                Op::Push(points) => {
                    let batch: Vec<_> = points
                        .iter()
                        .map(|(n, v)| {
                            rm(
                                vec![kv_str("node", format!("n{n}"))],
                                vec![gauge("g", "", vec![point(vec![kv_str("k", format!("v{}", n % 3))], now, f64::from(*v))])],
                            )
                        })
                        .collect();
                    e.consume(&batch, ts(now));
                    for (n, v) in points {
                        model.insert(n, (f64::from(v), now));
                    }
                }
                Op::Advance(d) => now += u64::from(d),
                Op::Expire => {
                    e.expire(ts(now));
                }
                Op::Compact => {
                    e.compact();
                }
            }
            let page = parse(&render(&e, now, &[]));
            let mut got: Vec<(String, f64)> = page
                .iter()
                .map(|s| (s.labels["node"].clone(), s.value))
                .collect();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            let mut want: Vec<(String, f64)> = model
                .iter()
                .filter(|(_, (_, seen))| now < seen + 100)
                .map(|(n, (v, _))| (format!("n{n}"), *v))
                .collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            prop_assert_eq!(got, want);
        }
    }
}
