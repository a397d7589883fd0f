#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use component::{MetricType, Timestamp};
use ingero_wire::ThresholdValue;
use ingero_wire::threshold::ClusterDiagnostics;

use super::*;
use crate::tick::ClusterSummary;

fn cohort(name: &str, active: u64, threshold: Option<f64>, quorum: bool) -> CohortDiagnostics {
    CohortDiagnostics {
        cohort: Arc::from(name),
        active_nodes: active,
        median: threshold.map(|t| t + 0.03),
        mad: threshold.map(|_| 0.01),
        raw_threshold: threshold,
        threshold,
        quorum_met: quorum,
        uses_cluster_fallback: !quorum,
    }
}

/// Two clusters: "a" with the cluster-wide cohort and cohort "k1" (in panic, 2 stragglers),
/// "b" at cold start (no threshold, no median).
fn snapshot() -> Snapshot {
    let a = ClusterDiagnostics {
        median: Some(0.93),
        mad: Some(0.01),
        raw_threshold: Some(0.9),
        threshold: Some(0.9),
        quorum_met: true,
        active_nodes: 12,
        idle_nodes: 2,
        calibrating_nodes: 1,
        expected_nodes: 16,
        coverage: 0.75,
        coverage_low: true,
        panic_mode: false,
        straggler_count: 3,
        cohorts: vec![
            cohort("", 12, Some(0.9), true),
            cohort("k1", 6, Some(0.8), true),
        ],
        nodes: Vec::new(),
        computed_at_unix_nano: 7,
    };
    let b = ClusterDiagnostics {
        median: None,
        mad: None,
        raw_threshold: None,
        threshold: None,
        quorum_met: false,
        active_nodes: 3,
        idle_nodes: 0,
        calibrating_nodes: 0,
        expected_nodes: 3,
        coverage: 1.0,
        coverage_low: false,
        panic_mode: false,
        straggler_count: 0,
        cohorts: vec![cohort("", 3, None, false)],
        nodes: Vec::new(),
        computed_at_unix_nano: 7,
    };
    Snapshot {
        computed_at: Some(Timestamp::from_nanos(7)),
        clusters: vec![
            ClusterSummary {
                cluster_id: Arc::from("a"),
                published: ThresholdValue::new(0.9, true),
                diagnostics: Arc::new(a),
                cohort_extra: vec![(3, false), (2, true)],
                entered: 5,
                cleared: 2,
                panic_events: [1, 1, 0],
            },
            ClusterSummary {
                cluster_id: Arc::from("b"),
                published: None,
                diagnostics: Arc::new(b),
                cohort_extra: vec![(0, false)],
                entered: 0,
                cleared: 0,
                panic_events: [0, 0, 0],
            },
        ],
    }
}

fn counters() -> Counters {
    let c = Counters::default();
    c.accepted.store(40, Ordering::Relaxed);
    c.superseded.store(3, Ordering::Relaxed);
    c.reject(RejectReason::NonFinite, 2);
    c.reject(RejectReason::MissingNodeId, 5);
    c.drop(DropReason::CapNodes, 4);
    c.drop(DropReason::CapCohorts, 1);
    c.dropped_points.store(4, Ordering::Relaxed);
    c
}

fn all_families() -> Vec<MetricFamily> {
    let mut out = Vec::new();
    let held = Holdings {
        clusters: 2,
        node_records: 18,
        causes: [5, 2, 1],
    };
    families(&snapshot(), &counters(), held, &mut out);
    out
}

fn value(fams: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let f = fams.iter().find(|f| f.name == name)?;
    let hits: Vec<f64> = f
        .samples
        .iter()
        .filter(|s| {
            s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
        .collect();
    assert!(
        hits.len() <= 1,
        "{name} {labels:?} appears {} times",
        hits.len()
    );
    hits.first().copied()
}

#[test]
fn families_have_the_expected_names_types_and_order() {
    let fams = all_families();
    let got: Vec<(&str, MetricType)> = fams.iter().map(|f| (f.name.as_str(), f.kind)).collect();
    use MetricType::{Counter, Gauge};
    assert_eq!(
        got,
        [
            (m::THRESHOLD, Gauge),
            (m::ACTIVE_NODES, Gauge),
            (m::IDLE_NODES, Gauge),
            (m::CALIBRATING_NODES, Gauge),
            (m::EXPECTED_NODES, Gauge),
            (m::COVERAGE_LOW, Gauge),
            (m::COVERAGE_RATIO, Gauge),
            (m::PANIC_MODE, Gauge),
            (m::QUORUM_MET, Gauge),
            (m::MEDIAN, Gauge),
            (m::MAD, Gauge),
            (m::STRAGGLER_COUNT, Gauge),
            (m::STRAGGLER_TRANSITIONS_TOTAL, Counter),
            (m::PANIC_TRANSITIONS_TOTAL, Counter),
            (m::POINTS_TOTAL, Counter),
            (m::REJECTED_POINTS_TOTAL, Counter),
            (m::DROPPED_TOTAL, Counter),
            (m::CLUSTERS, Gauge),
            (m::NODE_RECORDS, Gauge),
            (m::CAUSES_TOTAL, Counter),
        ]
    );
    assert!(fams.iter().all(|f| !f.help.is_empty()));
    // Every name is a valid Prometheus name in the ingero_fleet_ namespace.
    for f in &fams {
        assert!(f.name.starts_with("ingero_fleet_"), "{}", f.name);
        assert!(
            f.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}",
            f.name
        );
        if f.kind == Counter {
            assert!(f.name.ends_with("_total"), "{}", f.name);
        }
    }
}

#[test]
fn cohort_gauges_carry_cluster_and_cohort_and_skip_what_is_unknown() {
    let fams = all_families();
    let a = [(m::LABEL_CLUSTER, "a"), (m::LABEL_COHORT, "")];
    let k1 = [(m::LABEL_CLUSTER, "a"), (m::LABEL_COHORT, "k1")];
    let b = [(m::LABEL_CLUSTER, "b"), (m::LABEL_COHORT, "")];
    assert_eq!(value(&fams, m::THRESHOLD, &a), Some(0.9));
    assert_eq!(value(&fams, m::THRESHOLD, &k1), Some(0.8));
    assert_eq!(
        value(&fams, m::THRESHOLD, &b),
        None,
        "cold start: no threshold"
    );
    assert_eq!(value(&fams, m::MEDIAN, &b), None);
    assert_eq!(value(&fams, m::MAD, &k1), Some(0.01));
    assert_eq!(value(&fams, m::ACTIVE_NODES, &k1), Some(6.0));
    assert_eq!(value(&fams, m::ACTIVE_NODES, &b), Some(3.0));
    assert_eq!(value(&fams, m::QUORUM_MET, &a), Some(1.0));
    assert_eq!(value(&fams, m::QUORUM_MET, &b), Some(0.0));
    assert_eq!(value(&fams, m::STRAGGLER_COUNT, &a), Some(3.0));
    assert_eq!(value(&fams, m::STRAGGLER_COUNT, &k1), Some(2.0));
    assert_eq!(value(&fams, m::PANIC_MODE, &a), Some(0.0));
    assert_eq!(value(&fams, m::PANIC_MODE, &k1), Some(1.0));
    // Cluster-level gauges use the empty cohort only.
    assert_eq!(value(&fams, m::IDLE_NODES, &a), Some(2.0));
    assert_eq!(value(&fams, m::CALIBRATING_NODES, &a), Some(1.0));
    assert_eq!(value(&fams, m::EXPECTED_NODES, &a), Some(16.0));
    assert_eq!(value(&fams, m::COVERAGE_RATIO, &a), Some(0.75));
    assert_eq!(value(&fams, m::COVERAGE_LOW, &a), Some(1.0));
    assert_eq!(value(&fams, m::COVERAGE_LOW, &b), Some(0.0));
    assert_eq!(value(&fams, m::IDLE_NODES, &k1), None);
    let idle = fams.iter().find(|f| f.name == m::IDLE_NODES).unwrap();
    assert_eq!(idle.samples.len(), 2);
}

#[test]
fn counters_are_reported_per_label_including_zeros() {
    let fams = all_families();
    let tr = |c: &str, d: &str| {
        value(
            &fams,
            m::STRAGGLER_TRANSITIONS_TOTAL,
            &[(m::LABEL_CLUSTER, c), (m::LABEL_DIRECTION, d)],
        )
    };
    assert_eq!(
        (tr("a", "entered"), tr("a", "cleared")),
        (Some(5.0), Some(2.0))
    );
    assert_eq!(tr("b", "entered"), Some(0.0));
    let panic = |e: &str| {
        value(
            &fams,
            m::PANIC_TRANSITIONS_TOTAL,
            &[(m::LABEL_CLUSTER, "a"), (m::LABEL_EVENT, e)],
        )
    };
    assert_eq!(
        (panic("entered"), panic("exited"), panic("rebaselined")),
        (Some(1.0), Some(1.0), Some(0.0))
    );
    let points = |o: &str| value(&fams, m::POINTS_TOTAL, &[(m::LABEL_OUTCOME, o)]);
    assert_eq!(
        (
            points("accepted"),
            points("superseded"),
            points("rejected"),
            points("dropped")
        ),
        (Some(40.0), Some(3.0), Some(7.0), Some(4.0))
    );
    let rejected = fams
        .iter()
        .find(|f| f.name == m::REJECTED_POINTS_TOTAL)
        .unwrap();
    assert_eq!(rejected.samples.len(), RejectReason::ALL.len());
    let reason = |r: RejectReason| {
        value(
            &fams,
            m::REJECTED_POINTS_TOTAL,
            &[(m::LABEL_REASON, r.label())],
        )
    };
    assert_eq!(reason(RejectReason::NonFinite), Some(2.0));
    assert_eq!(reason(RejectReason::MissingNodeId), Some(5.0));
    assert_eq!(reason(RejectReason::OutOfRange), Some(0.0));
    let dropped = |r: DropReason| value(&fams, m::DROPPED_TOTAL, &[(m::LABEL_REASON, r.label())]);
    assert_eq!(dropped(DropReason::CapNodes), Some(4.0));
    assert_eq!(dropped(DropReason::CapCohorts), Some(1.0));
    assert_eq!(dropped(DropReason::CapClusters), Some(0.0));
    assert_eq!(value(&fams, m::CLUSTERS, &[]), Some(2.0));
    assert_eq!(value(&fams, m::NODE_RECORDS, &[]), Some(18.0));
    assert_eq!(
        value(&fams, m::CAUSES_TOTAL, &[(m::LABEL_OUTCOME, "malformed")]),
        Some(2.0)
    );
    assert_eq!(
        value(&fams, m::CAUSES_TOTAL, &[(m::LABEL_OUTCOME, "dropped_cap")]),
        Some(1.0)
    );
}

#[test]
fn an_empty_snapshot_still_reports_the_point_counters() {
    let mut out = Vec::new();
    let held = Holdings {
        clusters: 0,
        node_records: 0,
        causes: [0, 0, 0],
    };
    families(&Snapshot::default(), &Counters::default(), held, &mut out);
    assert_eq!(out.len(), 20);
    let with_samples: Vec<&str> = out
        .iter()
        .filter(|f| !f.samples.is_empty())
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(
        with_samples,
        [
            m::POINTS_TOTAL,
            m::REJECTED_POINTS_TOTAL,
            m::DROPPED_TOTAL,
            m::CLUSTERS,
            m::NODE_RECORDS,
            m::CAUSES_TOTAL
        ]
    );
}

#[test]
fn diagnostics_json_summarises_every_cluster_and_the_counters() {
    let j = diagnostics_json(
        &snapshot(),
        &counters(),
        Some("ingero_threshold".into()),
        18,
    );
    assert_eq!(j["computed_at_unix_nano"], 7);
    assert_eq!(j["sink"], "ingero_threshold");
    assert_eq!(j["node_records"], 18);
    assert_eq!(j["points"]["accepted"], 40);
    assert_eq!(j["points"]["superseded"], 3);
    assert_eq!(j["points"]["rejected"]["non_finite"], 2);
    assert_eq!(j["points"]["rejected"]["no_value"], 0);
    assert_eq!(j["points"]["dropped"]["cap_nodes"], 4);
    let a = &j["clusters"][0];
    assert_eq!(a["cluster_id"], "a");
    assert_eq!(a["published_threshold"], 0.9);
    assert_eq!(a["coverage_low"], true);
    assert_eq!(a["straggler_count"], 3);
    assert_eq!(a["straggler_transitions_entered"], 5);
    assert_eq!(a["straggler_transitions_cleared"], 2);
    assert_eq!(a["cohorts"][1]["cohort"], "k1");
    assert_eq!(a["cohorts"].as_array().unwrap().len(), 2);
    let b = &j["clusters"][1];
    assert_eq!(b["cluster_id"], "b");
    assert!(b["published_threshold"].is_null());
    assert!(b["median"].is_null());
    assert_eq!(j["clusters"].as_array().unwrap().len(), 2);

    let empty = diagnostics_json(&Snapshot::default(), &Counters::default(), None, 0);
    assert!(empty["computed_at_unix_nano"].is_null());
    assert!(empty["sink"].is_null());
    assert_eq!(empty["clusters"], serde_json::json!([]));
}

/// The exposition's names, types and help texts, in order, exactly as they were written
/// out by hand before the families were declared once (`metrics::FAMILIES`).
#[test]
fn the_families_are_the_declared_ones_with_unchanged_names_types_and_help() {
    let fams = all_families();
    let got: Vec<(&str, MetricType, &str)> = fams
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.help.as_str()))
        .collect();
    use MetricType::{Counter, Gauge};
    let want = [
        (
            "ingero_fleet_threshold",
            Gauge,
            "Smoothed straggler threshold (held when quorum is lost or in panic mode)",
        ),
        (
            "ingero_fleet_active_nodes",
            Gauge,
            "Active nodes in the statistic",
        ),
        (
            "ingero_fleet_idle_nodes",
            Gauge,
            "Nodes reporting state idle",
        ),
        (
            "ingero_fleet_calibrating_nodes",
            Gauge,
            "Nodes reporting state calibrating",
        ),
        (
            "ingero_fleet_expected_nodes",
            Gauge,
            "Nodes coverage is measured against",
        ),
        (
            "ingero_fleet_coverage_low",
            Gauge,
            "1 if active/expected is below quorum.coverage_fraction",
        ),
        (
            "ingero_fleet_coverage_ratio",
            Gauge,
            "Active nodes / expected nodes",
        ),
        (
            "ingero_fleet_panic_mode",
            Gauge,
            "1 if panic mode holds the last good threshold",
        ),
        (
            "ingero_fleet_quorum_met",
            Gauge,
            "1 if at least quorum.statistical_min active nodes",
        ),
        (
            "ingero_fleet_median",
            Gauge,
            "Median health score of active nodes",
        ),
        (
            "ingero_fleet_mad",
            Gauge,
            "Median absolute deviation of active health scores (unscaled)",
        ),
        (
            "ingero_fleet_stragglers",
            Gauge,
            "Nodes the server-side classifier flags as stragglers",
        ),
        (
            "ingero_fleet_straggler_transitions_total",
            Counter,
            "Server-side straggler classification edges",
        ),
        (
            "ingero_fleet_panic_transitions_total",
            Counter,
            "Cluster-wide panic-mode edges",
        ),
        (
            "ingero_fleet_points_total",
            Counter,
            "Health-score points by outcome",
        ),
        (
            "ingero_fleet_rejected_points_total",
            Counter,
            "Health-score points rejected, by reason",
        ),
        (
            "ingero_fleet_dropped_total",
            Counter,
            "Points or keys refused by a cap, by reason",
        ),
        ("ingero_fleet_clusters", Gauge, "Clusters tracked"),
        (
            "ingero_fleet_node_records",
            Gauge,
            "Node records held across clusters",
        ),
        (
            "ingero_fleet_straggler_causes_total",
            Counter,
            "Causal chains on straggler events, by outcome (stored for the view, malformed, dropped at the node cap)",
        ),
    ];
    assert_eq!(got, want);
    // Each family is its declaration, labels included, in the declared order.
    assert_eq!(fams.len(), m::FAMILIES.len());
    for (f, spec) in fams.iter().zip(m::FAMILIES) {
        assert!(
            !f.samples.is_empty(),
            "{}: the snapshot fills every family",
            f.name
        );
        assert!(spec.describes(f), "{} does not match {spec:?}", f.name);
    }
}

/// The crate README's telemetry table lists every declared family with its type.
#[test]
fn the_readme_lists_every_declared_family_with_its_type() {
    let readme = include_str!("../../README.md");
    for spec in m::FAMILIES {
        let name = format!("`{}`", spec.name);
        let row = readme
            .lines()
            .find(|l| l.starts_with("| ") && l.split('|').nth(1).is_some_and(|c| c.contains(&name)))
            .unwrap_or_else(|| panic!("README has no telemetry row for {}", spec.name));
        let kind = row.split('|').nth(2).map(str::trim);
        assert_eq!(kind, Some(spec.kind_name()), "{row}");
    }
}
