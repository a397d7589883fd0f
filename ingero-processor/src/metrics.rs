//! Names of everything the processor emits, and its drop/reject counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// OTLP gauge the tick emits per straggler node (int value 1, no data-point attributes).
pub const NODE_STRAGGLER_METRIC: &str = ingero_wire::metric::FLEET_NODE_STRAGGLER;
/// Unit of [`NODE_STRAGGLER_METRIC`].
pub const NODE_STRAGGLER_UNIT: &str = "1";
/// Instrumentation scope of tick-generated metrics.
pub const SCOPE_NAME: &str = "ingero-processor";

// Self-metric families (Prometheus names), declared once: the name constants, their specs
// (`spec::*`: type, unit, help, labels) and `FAMILIES`, in exposition order. Per-cluster
// gauges carry `cluster_id` and `cgroup_path_hash` (empty for the cluster-wide cohort).
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    THRESHOLD: gauge "ingero_fleet_threshold", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "Smoothed straggler threshold (held when quorum is lost or in panic mode)";
    ACTIVE_NODES: gauge "ingero_fleet_active_nodes", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT], help "Active nodes in the statistic";
    IDLE_NODES: gauge "ingero_fleet_idle_nodes", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "Nodes reporting state idle";
    CALIBRATING_NODES: gauge "ingero_fleet_calibrating_nodes", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT], help "Nodes reporting state calibrating";
    EXPECTED_NODES: gauge "ingero_fleet_expected_nodes", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT], help "Nodes coverage is measured against";
    COVERAGE_LOW: gauge "ingero_fleet_coverage_low", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT],
        help "1 if active/expected is below quorum.coverage_fraction";
    COVERAGE_RATIO: gauge "ingero_fleet_coverage_ratio", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT], help "Active nodes / expected nodes";
    PANIC_MODE: gauge "ingero_fleet_panic_mode", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "1 if panic mode holds the last good threshold";
    QUORUM_MET: gauge "ingero_fleet_quorum_met", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "1 if at least quorum.statistical_min active nodes";
    MEDIAN: gauge "ingero_fleet_median", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "Median health score of active nodes";
    MAD: gauge "ingero_fleet_mad", unit "1", labels [LABEL_CLUSTER, LABEL_COHORT],
        help "Median absolute deviation of active health scores (unscaled)";
    /// Stragglers per (cluster, cohort); not `_count`, which Prometheus reserves for
    /// histograms and summaries.
    STRAGGLER_COUNT: gauge "ingero_fleet_stragglers", unit "1",
        labels [LABEL_CLUSTER, LABEL_COHORT],
        help "Nodes the server-side classifier flags as stragglers";
    STRAGGLER_TRANSITIONS_TOTAL: counter "ingero_fleet_straggler_transitions_total", unit "1",
        labels [LABEL_CLUSTER, LABEL_DIRECTION], help "Server-side straggler classification edges";
    PANIC_TRANSITIONS_TOTAL: counter "ingero_fleet_panic_transitions_total", unit "1",
        labels [LABEL_CLUSTER, LABEL_EVENT], help "Cluster-wide panic-mode edges";
    POINTS_TOTAL: counter "ingero_fleet_points_total", unit "1", labels [LABEL_OUTCOME],
        help "Health-score points by outcome";
    REJECTED_POINTS_TOTAL: counter "ingero_fleet_rejected_points_total", unit "1",
        labels [LABEL_REASON], help "Health-score points rejected, by reason";
    DROPPED_TOTAL: counter "ingero_fleet_dropped_total", unit "1", labels [LABEL_REASON],
        help "Points or keys refused by a cap, by reason";
    CLUSTERS: gauge "ingero_fleet_clusters", unit "1", labels [], help "Clusters tracked";
    NODE_RECORDS: gauge "ingero_fleet_node_records", unit "1", labels [],
        help "Node records held across clusters";
    CAUSES_TOTAL: counter "ingero_fleet_straggler_causes_total", unit "1",
        labels [LABEL_OUTCOME],
        help "Causal chains on straggler events, by outcome (stored for the view, malformed, dropped at the node cap)";
}

// Label names.
pub const LABEL_CLUSTER: &str = "cluster_id";
pub const LABEL_COHORT: &str = "cgroup_path_hash";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_REASON: &str = "reason";
pub const LABEL_DIRECTION: &str = "direction";
pub const LABEL_EVENT: &str = "event";

/// Why a health-score point was rejected (`ingero_fleet_rejected_points_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    NoValue,
    NonFinite,
    OutOfRange,
    MissingClusterId,
    MissingNodeId,
    BadState,
    IdTooLong,
    UnsupportedType,
    BadId,
}

impl RejectReason {
    pub const ALL: [RejectReason; 9] = [
        RejectReason::NoValue,
        RejectReason::NonFinite,
        RejectReason::OutOfRange,
        RejectReason::MissingClusterId,
        RejectReason::MissingNodeId,
        RejectReason::BadState,
        RejectReason::IdTooLong,
        RejectReason::UnsupportedType,
        RejectReason::BadId,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RejectReason::NoValue => "no_value",
            RejectReason::NonFinite => "non_finite",
            RejectReason::OutOfRange => "out_of_range",
            RejectReason::MissingClusterId => "missing_cluster_id",
            RejectReason::MissingNodeId => "missing_node_id",
            RejectReason::BadState => "bad_state",
            RejectReason::IdTooLong => "id_too_long",
            RejectReason::BadId => "bad_id",
            RejectReason::UnsupportedType => "unsupported_type",
        }
    }
}

/// What a cap refused (`ingero_fleet_dropped_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A point for a new cluster beyond `limits.max_clusters`.
    CapClusters,
    /// A point for a new cluster of a tenant holding `limits.max_clusters_per_tenant`.
    CapClustersPerTenant,
    /// A point for a new node beyond `limits.max_nodes_per_cluster`.
    CapNodes,
    /// A point for a new node beyond `limits.max_nodes_total`.
    CapNodesTotal,
    /// A point for a new node of a cluster whose tenant holds
    /// `limits.max_pool_nodes_per_tenant` records of the shared pool.
    CapNodesPerTenant,
    /// A new cohort key beyond `cohorts.max_per_cluster` (the point is kept, in the
    /// cluster-wide cohort).
    CapCohorts,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::CapClusters,
        DropReason::CapClustersPerTenant,
        DropReason::CapNodes,
        DropReason::CapNodesTotal,
        DropReason::CapNodesPerTenant,
        DropReason::CapCohorts,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DropReason::CapClusters => "cap_clusters",
            DropReason::CapClustersPerTenant => "cap_clusters_per_tenant",
            DropReason::CapNodes => "cap_nodes",
            DropReason::CapNodesTotal => "cap_nodes_total",
            DropReason::CapNodesPerTenant => "cap_nodes_per_tenant",
            DropReason::CapCohorts => "cap_cohorts",
        }
    }
}

/// Lock-free counters of the push path.
#[derive(Debug, Default)]
pub struct Counters {
    pub accepted: AtomicU64,
    pub superseded: AtomicU64,
    rejected: [AtomicU64; 8],
    dropped: [AtomicU64; 6],
    /// Points refused by a node or cluster cap (subset of `dropped`, in points).
    pub dropped_points: AtomicU64,
}

impl Counters {
    pub fn reject(&self, r: RejectReason, n: u64) {
        if let Some(c) = self.rejected.get(r as usize) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn drop(&self, r: DropReason, n: u64) {
        if let Some(c) = self.dropped.get(r as usize) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn rejected(&self, r: RejectReason) -> u64 {
        self.rejected
            .get(r as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn dropped(&self, r: DropReason) -> u64 {
        self.dropped
            .get(r as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn rejected_total(&self) -> u64 {
        RejectReason::ALL.iter().map(|r| self.rejected(*r)).sum()
    }
}
