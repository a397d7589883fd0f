//! The self-metric families are declared once (`metrics::FAMILIES`): the exposition keeps
//! the names, types and help texts it had when they were written out by hand, each family
//! matches its declaration, and the README's telemetry table lists every one with its type.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use component::config::ConfigValue;
use component::{MetricType, Processor};
use nccl_processor::{create, metrics};

#[test]
fn the_families_are_the_declared_ones_with_unchanged_names_types_and_help() {
    let p = create(&ConfigValue::Null).unwrap();
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    let got: Vec<(&str, MetricType, &str)> = fams
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.help.as_str()))
        .collect();
    use MetricType::{Counter, Gauge};
    let want = [
        (
            "ingero_nccl_points_total",
            Counter,
            "NCCL points seen by the nccl_peer_lag processor, by outcome.",
        ),
        (
            "ingero_nccl_dropped_total",
            Counter,
            "NCCL points discarded by the nccl_peer_lag processor, by reason.",
        ),
        (
            "ingero_nccl_cluster_fallback_total",
            Counter,
            "NCCL points whose cluster came from the request or from default_cluster_id.",
        ),
        (
            "ingero_nccl_collectives_total",
            Counter,
            "Collective instances closed, by outcome (complete, partial, under_quorum).",
        ),
        (
            "ingero_nccl_lag_points_total",
            Counter,
            "nccl.collective.peer_lag_ms points emitted.",
        ),
        (
            "ingero_nccl_tracked_comms",
            Gauge,
            "Communicators tracked per cluster (capped by limits.max_comms_per_cluster).",
        ),
        (
            "ingero_nccl_open_buckets",
            Gauge,
            "Open collective instances (time buckets and op_seq instances) per cluster.",
        ),
        (
            "ingero_nccl_buffered_points",
            Gauge,
            "NCCL points held in open instances per cluster.",
        ),
        (
            "ingero_nccl_rank_series",
            Gauge,
            "Rolling per-rank windows held per cluster (capped by limits.max_rank_series_per_cluster).",
        ),
        (
            "ingero_nccl_monotonic_clocks",
            Gauge,
            "Nodes with monotonic NCCL clocks per cluster, by calibration state.",
        ),
        (
            "ingero_nccl_rank_lag_seconds",
            Gauge,
            "Median lag (seconds) over the behind steps of ranks named chronic or periodic.",
        ),
        (
            "ingero_nccl_rank_behind_ratio",
            Gauge,
            "Fraction of the recent steps a named rank was behind on.",
        ),
        (
            "ingero_nccl_rank_lag_period_steps",
            Gauge,
            "Steps between recurring lag episodes of a named rank, when periodic.",
        ),
    ];
    assert_eq!(got, want);
    assert_eq!(fams.len(), metrics::FAMILIES.len());
    // The counters carry samples without traffic (zeros included); their labels are the
    // declared ones. (The per-cluster gauges are empty without a cluster.)
    for (f, spec) in fams.iter().zip(metrics::FAMILIES) {
        assert!(spec.describes(f), "{} does not match {spec:?}", f.name);
        if f.kind == Counter {
            assert!(!f.samples.is_empty(), "{}", f.name);
        }
    }
}

#[test]
fn the_readme_lists_every_declared_family_with_its_type() {
    let readme = include_str!("../../README.md");
    for spec in metrics::FAMILIES {
        let name = format!("`{}`", spec.name);
        let row = readme
            .lines()
            .find(|l| l.starts_with("| ") && l.split('|').nth(1).is_some_and(|c| c.contains(&name)))
            .unwrap_or_else(|| panic!("README has no telemetry row for {}", spec.name));
        let kind = row.split('|').nth(2).map(str::trim);
        assert_eq!(kind, Some(spec.kind_name()), "{row}");
    }
}
