#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use component::otlp::get_str;
use parking_lot::Mutex;

use crate::table::{NodeState, NodeTable, RecordOutcome, ScoreUpdate, TableLimits};

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
const SEC: u64 = 1_000_000_000;

fn at(secs: u64) -> Timestamp {
    Timestamp::from_nanos(T0.as_nanos() + secs * SEC)
}

struct Fleet {
    settings: TickSettings,
    limits: TableLimits,
    budget: NodeBudget,
    tables: Vec<(Arc<str>, SharedTable)>,
}

impl Fleet {
    fn new(cfg: &IngeroConfig, clusters: &[&str]) -> Self {
        let settings = TickSettings::from_config(cfg);
        Fleet {
            limits: TableLimits {
                max_nodes: 1000,
                max_cohorts: 16,
                cohorts_enabled: cfg.cohorts.enabled,
                ttl_nanos: settings.ttl_nanos,
            },
            settings,
            budget: NodeBudget::new(10_000),
            tables: clusters
                .iter()
                .map(|c| (Arc::from(*c), Arc::new(Mutex::new(NodeTable::default()))))
                .collect(),
        }
    }

    fn push(&self, cluster: usize, node: &str, score: f64, state: NodeState, when: Timestamp) {
        let u = ScoreUpdate {
            node_id: node,
            cohort: "",
            score,
            state,
            received_at: when.as_nanos(),
        };
        let (_, table) = &self.tables[cluster];
        let r = table.lock().record(&u, &self.limits, &self.budget);
        assert!(matches!(r, RecordOutcome::Stored { .. }), "{r:?}");
    }

    fn tick(&self, side: &mut TickSide, declared: u64, now: Timestamp) -> TickOutput {
        side.run(
            &self.settings,
            &self.tables,
            |_| declared,
            &self.budget,
            now,
        )
    }
}

/// Ten healthy nodes (0.94 x3, 0.95 x4, 0.96 x3) and one at 0.30, all active.
/// Median 0.95; deviations 0 x4, 0.01 x6, 0.65: MAD 0.01 (= the default floor).
/// Threshold (first EMA value) = 0.95 - 2 * 1.4826 * 0.01 = 0.920348.
fn push_fixed_fleet(f: &Fleet, cluster: usize, when: Timestamp) {
    let healthy = [0.94, 0.94, 0.94, 0.95, 0.95, 0.95, 0.95, 0.96, 0.96, 0.96];
    for (i, s) in healthy.iter().enumerate() {
        f.push(cluster, &format!("h{i:02}"), *s, NodeState::Active, when);
    }
    f.push(cluster, "slow", 0.30, NodeState::Active, when);
}

const EXPECTED_THRESHOLD: f64 = 0.95 - 2.0 * 1.4826 * 0.01;

#[test]
fn a_tick_over_a_fixed_table_gives_the_threshold_and_the_stragglers() {
    let f = Fleet::new(&IngeroConfig::default(), &["prod"]);
    push_fixed_fleet(&f, 0, T0);
    f.push(0, "resting", 0.10, NodeState::Idle, T0);
    f.push(0, "warming", 0.20, NodeState::Calibrating, T0);
    let mut side = TickSide::default();
    let out = f.tick(&mut side, 0, at(1));

    assert!(out.empty.is_empty());
    assert_eq!(out.summaries.len(), 1);
    let s = &out.summaries[0];
    assert_eq!(s.cluster_id.as_ref(), "prod");
    let published = s.published.expect("quorum on the first tick");
    assert!((published.threshold() - EXPECTED_THRESHOLD).abs() < 1e-12);
    assert!(published.quorum_met());
    let d = &s.diagnostics;
    assert!((d.median.unwrap() - 0.95).abs() < 1e-12);
    assert!((d.mad.unwrap() - 0.01).abs() < 1e-12);
    assert_eq!(
        (
            d.active_nodes,
            d.idle_nodes,
            d.calibrating_nodes,
            d.expected_nodes
        ),
        (11, 1, 1, 12)
    );
    assert_eq!(d.straggler_count, 1);
    assert!(!d.panic_mode);
    assert_eq!(d.computed_at_unix_nano, at(1).as_nanos());
    // The straggler set: exactly "slow", in the metrics, the diagnostics and the counters.
    let flagged: Vec<&str> = d
        .nodes
        .iter()
        .filter(|n| n.straggler)
        .map(|n| n.node_id.as_ref())
        .collect();
    assert_eq!(flagged, ["slow"]);
    assert_eq!(d.nodes.len(), 13, "every node fits the diagnostics list");
    assert_eq!(d.nodes[0].node_id.as_ref(), "slow", "stragglers first");
    assert_eq!(d.nodes[0].last_seen_unix_nano, T0.as_nanos());
    assert_eq!(out.metrics.len(), 1);
    assert_eq!(
        get_str(otlp::resource_attrs(&out.metrics[0]), resource::NODE_ID),
        Some("slow")
    );
    assert_eq!((s.entered, s.cleared, s.panic_events), (1, 0, [0, 0, 0]));
    assert_eq!(s.cohort_extra, vec![(1, false)]);
    // The cluster-wide cohort is the only one (cohorts are off by default).
    assert_eq!(d.cohorts.len(), 1);
    assert_eq!(d.cohorts[0].cohort.as_ref(), "");
    assert_eq!(side.len(), 1);

    // A declared size above the nodes seen lowers coverage below 0.8.
    let out = f.tick(&mut side, 20, at(2));
    let d = &out.summaries[0].diagnostics;
    assert_eq!(d.expected_nodes, 20);
    assert!((d.coverage - 11.0 / 20.0).abs() < 1e-12);
    assert!(d.coverage_low);
    // Still flagged: no new transition, the straggler gauge again.
    assert_eq!(out.summaries[0].entered, 1);
    assert_eq!(out.metrics.len(), 1);
}

#[test]
fn a_fleet_below_quorum_publishes_nothing_at_cold_start() {
    let f = Fleet::new(&IngeroConfig::default(), &["small"]);
    for i in 0..4 {
        f.push(0, &format!("n{i}"), 0.9, NodeState::Active, T0);
    }
    let mut side = TickSide::default();
    let out = f.tick(&mut side, 0, at(1));
    let s = &out.summaries[0];
    assert_eq!(s.published, None, "4 active nodes < statistical_min 5");
    assert!(!s.diagnostics.quorum_met);
    assert_eq!(s.diagnostics.active_nodes, 4);
    assert!(out.metrics.is_empty());
}

#[test]
fn expiry_holds_the_threshold_then_the_cluster_is_reported_empty() {
    let f = Fleet::new(&IngeroConfig::default(), &["prod", "other"]);
    push_fixed_fleet(&f, 0, T0);
    push_fixed_fleet(&f, 1, at(200));
    let mut side = TickSide::default();
    f.tick(&mut side, 0, at(1));

    // Past the TTL (50 s): no live node, quorum lost, the last threshold held.
    let out = f.tick(&mut side, 0, at(60));
    let s = out
        .summaries
        .iter()
        .find(|s| s.cluster_id.as_ref() == "prod")
        .unwrap();
    let held = s.published.expect("held after quorum loss");
    assert!((held.threshold() - EXPECTED_THRESHOLD).abs() < 1e-12);
    assert!(!held.quorum_met());
    assert_eq!(s.diagnostics.active_nodes, 0);
    let clusters: Vec<_> = out
        .metrics
        .iter()
        .map(|m| get_str(otlp::resource_attrs(m), resource::CLUSTER_ID))
        .collect();
    assert_eq!(
        clusters,
        [Some("other")],
        "an expired node is no current straggler"
    );

    // Past expected_window (300 s) the records are forgotten: "prod" is empty and has no
    // summary; "other" (pushed at 200 s) is still reported.
    let out = f.tick(&mut side, 0, at(301));
    assert_eq!(out.empty, vec![Arc::<str>::from("prod")]);
    let ids: Vec<&str> = out
        .summaries
        .iter()
        .map(|s| s.cluster_id.as_ref())
        .collect();
    assert_eq!(ids, ["other"]);
    assert_eq!(
        f.budget.used(),
        11,
        "the forgotten records gave their budget back"
    );
    side.forget(&out.empty);
    assert_eq!(side.len(), 1);
}

#[test]
fn a_collapse_enters_panic_and_holds_the_threshold() {
    let f = Fleet::new(&IngeroConfig::default(), &["prod"]);
    push_fixed_fleet(&f, 0, T0);
    let mut side = TickSide::default();
    f.tick(&mut side, 0, at(1));
    // Half of the healthy nodes fall to 0.5: 6 of 11 below the threshold (>= 30 %).
    for i in 0..5 {
        f.push(0, &format!("h{i:02}"), 0.5, NodeState::Active, at(10));
    }
    let out = f.tick(&mut side, 0, at(11));
    let s = &out.summaries[0];
    assert_eq!(s.panic_events, [1, 0, 0]);
    assert!(s.cohort_extra[0].1);
    assert!(s.diagnostics.panic_mode);
    let t = s.published.unwrap().threshold();
    assert!((t - EXPECTED_THRESHOLD).abs() < 1e-12, "held at {t}");
}

#[test]
fn reports_and_straggler_metrics_carry_the_cluster_and_node() {
    let m = straggler_metric("prod", "n1", at(5));
    let attrs = otlp::resource_attrs(&m);
    assert_eq!(get_str(attrs, resource::CLUSTER_ID), Some("prod"));
    assert_eq!(get_str(attrs, resource::NODE_ID), Some("n1"));
    let sm = &m.scope_metrics[0];
    assert_eq!(sm.scope.as_ref().unwrap().name, m::SCOPE_NAME);
    let metric = &sm.metrics[0];
    assert_eq!(metric.name, m::NODE_STRAGGLER_METRIC);
    assert_eq!(metric.unit, "1");
    let points = otlp::number_points(metric);
    assert_eq!(points.len(), 1);
    assert_eq!(points[0].value, Some(NumberValue::AsInt(1)));
    assert_eq!(points[0].time_unix_nano, at(5).as_nanos());
    assert!(points[0].attributes.is_empty());

    let f = Fleet::new(&IngeroConfig::default(), &["b", "a"]);
    push_fixed_fleet(&f, 0, T0);
    push_fixed_fleet(&f, 1, T0);
    let out = f.tick(&mut TickSide::default(), 0, at(1));
    let r = reports(&out.summaries);
    let ids: Vec<&str> = r.iter().map(|r| r.cluster_id.as_ref()).collect();
    assert_eq!(ids, ["b", "a"], "in the order given");
    assert_eq!(r[0].value, out.summaries[0].published);
    assert!(Arc::ptr_eq(
        &r[1].diagnostics,
        &out.summaries[1].diagnostics
    ));
}
