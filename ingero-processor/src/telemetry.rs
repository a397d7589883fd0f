//! What the processor says about itself: the self-metric families (`telemetry()`) and the
//! diagnostics JSON (`diagnostics()`), both read from the last tick's [`Snapshot`] and the
//! push path's [`Counters`]. Names are in [`crate::metrics`].

use std::sync::atomic::Ordering;

use component::MetricFamily;
use ingero_wire::threshold::CohortDiagnostics;
use serde::Serialize;

use crate::metrics::{self as m, Counters, DropReason, RejectReason};
use crate::tick::Snapshot;

/// Panic-edge labels, in the order of `ClusterSummary::panic_events`.
const PANIC_EVENTS: [&str; 3] = ["entered", "exited", "rebaselined"];

/// Held state the snapshot does not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holdings {
    /// Clusters tracked by the push path.
    pub clusters: usize,
    /// Node records held across clusters.
    pub node_records: usize,
    /// Causal chains on straggler events: stored for the view, malformed, dropped at the
    /// board's node cap (`crate::causes::CauseCounters`).
    pub causes: [u64; 3],
}

/// `outcome` labels of [`m::CAUSES_TOTAL`], in the order of [`Holdings::causes`].
pub const CAUSE_OUTCOMES: [&str; 3] = ["stored", "malformed", "dropped_cap"];

fn bit(v: bool) -> f64 {
    if v { 1.0 } else { 0.0 }
}

/// Append the self-metric families, in a fixed order: per-cluster and per-cohort gauges,
/// transition counters, point counters, then the holdings.
pub fn families(snap: &Snapshot, ctr: &Counters, held: Holdings, out: &mut Vec<MetricFamily>) {
    let mut threshold = m::spec::THRESHOLD.family();
    let mut active = m::spec::ACTIVE_NODES.family();
    let mut idle = m::spec::IDLE_NODES.family();
    let mut calibrating = m::spec::CALIBRATING_NODES.family();
    let mut expected = m::spec::EXPECTED_NODES.family();
    let mut coverage_low = m::spec::COVERAGE_LOW.family();
    let mut coverage_ratio = m::spec::COVERAGE_RATIO.family();
    let mut panic = m::spec::PANIC_MODE.family();
    let mut quorum = m::spec::QUORUM_MET.family();
    let mut median = m::spec::MEDIAN.family();
    let mut mad = m::spec::MAD.family();
    let mut stragglers = m::spec::STRAGGLER_COUNT.family();
    let mut transitions = m::spec::STRAGGLER_TRANSITIONS_TOTAL.family();
    let mut panic_tr = m::spec::PANIC_TRANSITIONS_TOTAL.family();

    for c in &snap.clusters {
        let d = &c.diagnostics;
        let cid: &str = &c.cluster_id;
        let cl = [(m::LABEL_CLUSTER, cid), (m::LABEL_COHORT, "")];
        idle.push(&cl, d.idle_nodes as f64);
        calibrating.push(&cl, d.calibrating_nodes as f64);
        expected.push(&cl, d.expected_nodes as f64);
        coverage_low.push(&cl, bit(d.coverage_low));
        coverage_ratio.push(&cl, d.coverage);
        for (co, (straggler_count, in_panic)) in d.cohorts.iter().zip(&c.cohort_extra) {
            let labels = [
                (m::LABEL_CLUSTER, cid),
                (m::LABEL_COHORT, co.cohort.as_ref()),
            ];
            stragglers.push(&labels, *straggler_count as f64);
            panic.push(&labels, bit(*in_panic));
            if let Some(t) = co.threshold {
                threshold.push(&labels, t);
            }
            active.push(&labels, co.active_nodes as f64);
            quorum.push(&labels, bit(co.quorum_met));
            if let Some(v) = co.median {
                median.push(&labels, v);
            }
            if let Some(v) = co.mad {
                mad.push(&labels, v);
            }
        }
        transitions.push(
            &[(m::LABEL_CLUSTER, cid), (m::LABEL_DIRECTION, "entered")],
            c.entered as f64,
        );
        transitions.push(
            &[(m::LABEL_CLUSTER, cid), (m::LABEL_DIRECTION, "cleared")],
            c.cleared as f64,
        );
        for (i, ev) in PANIC_EVENTS.iter().enumerate() {
            let v = c.panic_events.get(i).copied().unwrap_or(0);
            panic_tr.push(&[(m::LABEL_CLUSTER, cid), (m::LABEL_EVENT, ev)], v as f64);
        }
    }

    let mut points = m::spec::POINTS_TOTAL.family();
    points.push(
        &[(m::LABEL_OUTCOME, "accepted")],
        ctr.accepted.load(Ordering::Relaxed) as f64,
    );
    points.push(
        &[(m::LABEL_OUTCOME, "superseded")],
        ctr.superseded.load(Ordering::Relaxed) as f64,
    );
    points.push(
        &[(m::LABEL_OUTCOME, "rejected")],
        ctr.rejected_total() as f64,
    );
    points.push(
        &[(m::LABEL_OUTCOME, "dropped")],
        ctr.dropped_points.load(Ordering::Relaxed) as f64,
    );
    let mut rejected = m::spec::REJECTED_POINTS_TOTAL.family();
    for r in RejectReason::ALL {
        rejected.push(&[(m::LABEL_REASON, r.label())], ctr.rejected(r) as f64);
    }
    let mut dropped = m::spec::DROPPED_TOTAL.family();
    for r in DropReason::ALL {
        dropped.push(&[(m::LABEL_REASON, r.label())], ctr.dropped(r) as f64);
    }
    let clusters = m::spec::CLUSTERS.family().with(&[], held.clusters as f64);
    let records = m::spec::NODE_RECORDS
        .family()
        .with(&[], held.node_records as f64);
    let mut causes = m::spec::CAUSES_TOTAL.family();
    for (outcome, n) in CAUSE_OUTCOMES.iter().zip(held.causes) {
        causes.push(&[(m::LABEL_OUTCOME, outcome)], n as f64);
    }

    out.extend([
        threshold,
        active,
        idle,
        calibrating,
        expected,
        coverage_low,
        coverage_ratio,
        panic,
        quorum,
        median,
        mad,
        stragglers,
        transitions,
        panic_tr,
        points,
        rejected,
        dropped,
        clusters,
        records,
        causes,
    ]);
}

/// The diagnostics JSON: every cluster of the snapshot, the point counters, the sink the
/// thresholds go to (`None` without one) and the node records held.
pub fn diagnostics_json(
    snap: &Snapshot,
    ctr: &Counters,
    sink: Option<String>,
    node_records: usize,
) -> serde_json::Value {
    #[derive(Serialize)]
    struct ClusterJson<'a> {
        cluster_id: &'a str,
        published_threshold: Option<f64>,
        quorum_met: bool,
        median: Option<f64>,
        mad: Option<f64>,
        raw_threshold: Option<f64>,
        active_nodes: u64,
        idle_nodes: u64,
        calibrating_nodes: u64,
        expected_nodes: u64,
        coverage: f64,
        coverage_low: bool,
        panic_mode: bool,
        straggler_count: u64,
        cohorts: &'a [CohortDiagnostics],
        straggler_transitions_entered: u64,
        straggler_transitions_cleared: u64,
    }
    let clusters: Vec<ClusterJson<'_>> = snap
        .clusters
        .iter()
        .map(|c| {
            let d = &c.diagnostics;
            ClusterJson {
                cluster_id: &c.cluster_id,
                published_threshold: c.published.map(|v| v.threshold()),
                quorum_met: d.quorum_met,
                median: d.median,
                mad: d.mad,
                raw_threshold: d.raw_threshold,
                active_nodes: d.active_nodes,
                idle_nodes: d.idle_nodes,
                calibrating_nodes: d.calibrating_nodes,
                expected_nodes: d.expected_nodes,
                coverage: d.coverage,
                coverage_low: d.coverage_low,
                panic_mode: d.panic_mode,
                straggler_count: d.straggler_count,
                cohorts: &d.cohorts,
                straggler_transitions_entered: c.entered,
                straggler_transitions_cleared: c.cleared,
            }
        })
        .collect();
    let rejected: serde_json::Map<String, serde_json::Value> = RejectReason::ALL
        .iter()
        .map(|r| (r.label().to_string(), ctr.rejected(*r).into()))
        .collect();
    let dropped: serde_json::Map<String, serde_json::Value> = DropReason::ALL
        .iter()
        .map(|r| (r.label().to_string(), ctr.dropped(*r).into()))
        .collect();
    serde_json::json!({
        "computed_at_unix_nano": snap.computed_at.map(|t| t.as_nanos()),
        "sink": sink,
        "clusters": clusters,
        "points": {
            "accepted": ctr.accepted.load(Ordering::Relaxed),
            "superseded": ctr.superseded.load(Ordering::Relaxed),
            "rejected": rejected,
            "dropped": dropped,
        },
        "node_records": node_records,
    })
}

#[cfg(test)]
mod tests;
