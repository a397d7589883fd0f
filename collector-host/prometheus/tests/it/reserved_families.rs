//! Fleet's own families (the components' self-metrics on the page) own their names: pushed
//! data that would translate to them is refused as a loss, and a family of another type
//! pushed under such a name never replaces Fleet's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use common::*;
use component::MetricFamily;
use component::otlp::{Metric, MetricKind, kv_str};
use fleet_prometheus::{DropReason, PrometheusExporterConfig};
use opentelemetry_proto::tonic::metrics::v1::{
    Summary, SummaryDataPoint, summary_data_point::ValueAtQuantile,
};

fn node(cluster: &str, node: &str, metrics: Vec<Metric>) -> component::ResourceMetrics {
    rm(
        vec![
            kv_str("ingero.cluster.id", cluster),
            kv_str("ingero.node.id", node),
        ],
        metrics,
    )
}

fn summary(name: &str, t: u64) -> Metric {
    Metric {
        name: name.into(),
        data: Some(MetricKind::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                time_unix_nano: t * 1_000_000_000,
                count: 1,
                sum: 1.0,
                quantile_values: vec![ValueAtQuantile {
                    quantile: 0.5,
                    value: 1.0,
                }],
                ..Default::default()
            }],
        })),
        ..Default::default()
    }
}

/// What the threshold processor puts on the page for cluster-b.
fn fleet_families() -> Vec<MetricFamily> {
    vec![
        MetricFamily::gauge("ingero_fleet_threshold", "Threshold.")
            .with(&[("cluster_id", "cluster-b")], 0.7),
        MetricFamily::gauge("ingero_fleet_stragglers", "Stragglers.")
            .with(&[("cluster_id", "cluster-b")], 1.0),
    ]
}

#[test]
fn pushes_that_would_translate_to_fleet_families_are_refused_as_a_loss() {
    let e = default_exporter();
    let forged = node(
        "cluster-a",
        "a0",
        vec![
            gauge(
                "ingero.fleet.stragglers",
                "",
                vec![point(vec![kv_str("cluster_id", "cluster-b")], T0, 99.0)],
            ),
            gauge(
                "ingero.fleet.threshold",
                "",
                vec![point(vec![kv_str("cluster_id", "cluster-b")], T0, 0.01)],
            ),
            gauge(
                "ingero.cost.straggler_rate",
                "",
                vec![point(vec![kv_str("node_id", "b6")], T0, 1e6)],
            ),
            gauge(
                "ingero_nccl.rank_lag_seconds",
                "",
                vec![point(vec![], T0, 5.0)],
            ),
            gauge(
                "ingero.threshold.published_clusters",
                "",
                vec![point(vec![], T0, 5.0)],
            ),
            gauge("ingero.gpu.hourly_rate", "", vec![point(vec![], T0, 5.0)]),
            summary("ingero.fleet.threshold", T0),
            // Tenant data beside them is stored.
            gauge(
                "ingero.node.health_score",
                "1",
                vec![point(vec![], T0, 0.9)],
            ),
        ],
    );
    let stats = e.consume(&[forged], ts(T0));
    assert_eq!(stats.lost, 7, "{stats:?}");
    assert_eq!(stats.loss_reason, Some(DropReason::ReservedName));
    assert_eq!(e.dropped(DropReason::ReservedName), 7);
    let s = parse(&render(&e, T0, &fleet_families()));
    let threshold = named(&s, "ingero_fleet_threshold");
    assert_eq!(threshold.len(), 1, "{threshold:?}");
    assert_eq!(threshold[0].value, 0.7);
    let stragglers = named(&s, "ingero_fleet_stragglers");
    assert_eq!(stragglers.len(), 1);
    assert_eq!(stragglers[0].value, 1.0);
    assert!(s.iter().all(|x| !x.name.starts_with("ingero_cost")
        && !x.name.starts_with("ingero_nccl")
        && !x.name.starts_with("ingero_threshold")
        && !x.name.starts_with("ingero_gpu")));
    assert_eq!(named(&s, "ingero_node_health_score_ratio").len(), 1);
}

/// Built from the host library alone, the exporter names its own families under the
/// library's prefix and reserves that prefix only: Ingero's names are data there.
#[test]
fn without_a_distribution_only_the_host_prefix_is_reserved() {
    let e = fleet_prometheus::PrometheusExporter::new(PrometheusExporterConfig::default()).unwrap();
    let stats = e.consume(
        &[node(
            "cluster-a",
            "a0",
            vec![
                gauge("ingero.fleet.threshold", "", vec![point(vec![], T0, 0.5)]),
                gauge(
                    "collector.host.connections_open",
                    "",
                    vec![point(vec![], T0, 1.0)],
                ),
            ],
        )],
        ts(T0),
    );
    assert_eq!(stats.lost, 1, "{stats:?}");
    assert_eq!(e.dropped(DropReason::ReservedName), 1);
    let mut own = Vec::new();
    e.telemetry(&mut own);
    assert!(!own.is_empty());
    for f in &own {
        assert!(
            f.name.starts_with("collector_host_prometheus_"),
            "{}",
            f.name
        );
    }
    let s = parse(&render(&e, T0, &own));
    assert_eq!(named(&s, "ingero_fleet_threshold").len(), 1);
    assert!(named(&s, "collector_host_connections_open").is_empty());
    assert_eq!(named(&s, "collector_host_prometheus_series").len(), 1);
}

#[test]
fn a_namespace_that_would_make_a_fleet_name_is_refused_too() {
    let e = exporter(PrometheusExporterConfig {
        namespace: "ingero".into(),
        ..Default::default()
    });
    let stats = e.consume(
        &[node(
            "cluster-a",
            "a0",
            vec![gauge("fleet.threshold", "", vec![point(vec![], T0, 0.01)])],
        )],
        ts(T0),
    );
    assert_eq!(stats.lost, 1);
    assert_eq!(e.dropped(DropReason::ReservedName), 1);
}

#[test]
fn fleets_own_straggler_gauge_is_stored() {
    let e = default_exporter();
    let stats = e.consume(
        &[node(
            "cluster-b",
            "b6",
            vec![gauge(
                ingero_wire::metric::FLEET_NODE_STRAGGLER,
                "1",
                vec![point(vec![], T0, 1.0)],
            )],
        )],
        ts(T0),
    );
    assert_eq!(stats.lost, 0);
    let s = parse(&render(&e, T0, &fleet_families()));
    assert_eq!(named(&s, "ingero_fleet_node_straggler_ratio").len(), 1);
    // As a gauge only: the same name as a summary is refused.
    let other = e.consume(
        &[node(
            "cluster-b",
            "b7",
            vec![summary(ingero_wire::metric::FLEET_NODE_STRAGGLER, T0)],
        )],
        ts(T0),
    );
    assert_eq!(other.lost, 1);
    assert_eq!(other.loss_reason, Some(DropReason::ReservedName));
}

#[test]
fn a_self_metric_family_wins_over_data_of_its_name_of_any_type() {
    // A name outside the reserved prefixes that a component emits: data pushed before the
    // first render created a summary family of that name.
    let e = default_exporter();
    let first = e.consume(
        &[node(
            "cluster-a",
            "a0",
            vec![summary("acme.fleet.median", T0)],
        )],
        ts(T0),
    );
    assert_eq!(first.lost, 0);
    let fleets = vec![
        MetricFamily::gauge("acme_fleet_median", "A component's gauge.")
            .with(&[("cluster_id", "cluster-b")], 0.5),
    ];
    let text = render(&e, T0, &fleets);
    assert_eq!(
        text.matches("# TYPE acme_fleet_median gauge").count(),
        1,
        "{text}"
    );
    assert!(!text.contains("summary"), "{text}");
    let s = parse(&text);
    let m = named(&s, "acme_fleet_median");
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0].value, 0.5);
    // From then on the name is reserved: the next push of the summary is refused.
    let again = e.consume(
        &[node(
            "cluster-a",
            "a0",
            vec![summary("acme.fleet.median", T0 + 1)],
        )],
        ts(T0 + 1),
    );
    assert_eq!(again.lost, 1);
    assert_eq!(e.dropped(DropReason::ReservedName), 1);
    // After the stored summary expires, the family is still there, Fleet's.
    let later = T0 + 3600;
    e.expire(ts(later));
    let fleets_later = vec![
        MetricFamily::gauge("acme_fleet_median", "A component's gauge.")
            .with(&[("cluster_id", "cluster-b")], 0.6),
    ];
    let s = parse(&render(&e, later, &fleets_later));
    let m = named(&s, "acme_fleet_median");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].value, 0.6);
}
