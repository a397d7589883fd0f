//! What the `ingero` processor hands to the `ingero_threshold` extension each tick.
//!
//! The processor never sees the extension's type: at `start` it finds, through the host,
//! an extension offering a [`ThresholdSink`] and publishes [`ClusterReport`]s into it. The
//! extension owns the store, the push-path header policy and the HTTP API.

use std::sync::Arc;

use serde::Serialize;

use crate::{THRESHOLD_MAX, THRESHOLD_MIN};
use component::{ComponentId, Extension, Host, Timestamp};

/// A threshold as delivered to agents. Construct with [`ThresholdValue::new`], which
/// refuses anything the agent would reject (non-finite or outside [0.1, 0.99]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ThresholdValue {
    threshold: f64,
    quorum_met: bool,
}

impl ThresholdValue {
    /// `None` unless `threshold` is finite and within [`THRESHOLD_MIN`, `THRESHOLD_MAX`].
    pub fn new(threshold: f64, quorum_met: bool) -> Option<Self> {
        if threshold.is_finite() && (THRESHOLD_MIN..=THRESHOLD_MAX).contains(&threshold) {
            Some(ThresholdValue {
                threshold,
                quorum_met,
            })
        } else {
            None
        }
    }

    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    pub fn quorum_met(&self) -> bool {
        self.quorum_met
    }
}

/// One node as the admin diagnostics show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeDiagnostics {
    pub node_id: Arc<str>,
    /// Cohort key (`ingero.cgroup_path_hash`), empty for the cluster-wide cohort.
    pub cohort: Arc<str>,
    /// `active`, `idle` or `calibrating`.
    pub state: &'static str,
    pub score: f64,
    pub last_seen_unix_nano: u64,
    pub straggler: bool,
}

/// The statistic of one cohort (or of the whole cluster when `cohort` is empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CohortDiagnostics {
    pub cohort: Arc<str>,
    pub active_nodes: u64,
    pub median: Option<f64>,
    pub mad: Option<f64>,
    /// `median - k * 1.4826 * max(MAD, floor)` before smoothing and clamping.
    pub raw_threshold: Option<f64>,
    /// The smoothed, clamped threshold this cohort classifies against.
    pub threshold: Option<f64>,
    pub quorum_met: bool,
    /// True when this cohort lacked quorum and borrowed the cluster-wide threshold.
    pub uses_cluster_fallback: bool,
}

/// Everything the processor knows about one cluster after a tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterDiagnostics {
    pub median: Option<f64>,
    pub mad: Option<f64>,
    pub raw_threshold: Option<f64>,
    pub threshold: Option<f64>,
    pub quorum_met: bool,
    pub active_nodes: u64,
    pub idle_nodes: u64,
    pub calibrating_nodes: u64,
    /// The node count coverage is measured against (see the processor README).
    pub expected_nodes: u64,
    /// `active_nodes / expected_nodes` (1.0 when nothing is expected yet).
    pub coverage: f64,
    pub coverage_low: bool,
    pub panic_mode: bool,
    pub straggler_count: u64,
    pub cohorts: Vec<CohortDiagnostics>,
    pub nodes: Vec<NodeDiagnostics>,
    pub computed_at_unix_nano: u64,
}

/// One cluster's published state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    pub cluster_id: Arc<str>,
    /// `None` until a threshold was ever computed (cold start: no headers, GET answers
    /// `{"threshold":0,"quorum_met":false}`).
    pub value: Option<ThresholdValue>,
    pub diagnostics: Arc<ClusterDiagnostics>,
}

/// Where the processor publishes. Implemented by the threshold extension's store.
pub trait ThresholdSink: Send + Sync {
    /// Replace the whole published state with this tick's reports. A cluster missing from
    /// `reports` is no longer known (its answers return to the cold-start shape).
    fn publish(&self, reports: Vec<ClusterReport>, computed_at: Timestamp);
}

/// The first extension in `host` that offers a threshold sink.
pub fn find_threshold_sink(host: &dyn Host) -> Option<(ComponentId, Arc<dyn ThresholdSink>)> {
    component::find_provided::<Arc<dyn ThresholdSink>>(host)
}

/// The threshold sink `ext` offers, if any (its [`Extension::provides`] answer).
pub fn threshold_sink(ext: &(impl Extension + ?Sized)) -> Option<Arc<dyn ThresholdSink>> {
    component::provided::<Arc<dyn ThresholdSink>>(ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_value_refuses_what_agents_reject() {
        assert!(ThresholdValue::new(0.87, true).is_some());
        assert!(ThresholdValue::new(0.1, false).is_some());
        assert!(ThresholdValue::new(0.99, true).is_some());
        for bad in [0.0, 0.05, 0.999, 1.0, f64::NAN, f64::INFINITY, -0.5] {
            assert!(ThresholdValue::new(bad, true).is_none(), "{bad}");
        }
    }
}
