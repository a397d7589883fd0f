//! What the processor feeds the ledger, and what the ledger refuses.

use std::sync::Arc;

/// What a node push said about the node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeObservation {
    pub cluster: Arc<str>,
    pub node: Arc<str>,
    pub provider: Arc<str>,
    /// `(ingero.gpu_model, ingero.gpu_count)` from `ingero.node.info`, when present.
    pub gpu: Option<(Arc<str>, u32)>,
    /// `ingero.node.world_size` (metric, else resource attribute), when present.
    pub world_size: Option<u32>,
}

/// One straggler point of the threshold processor's output.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerPoint {
    pub node: Arc<str>,
    /// Provider of the point's resource (used only if the node never pushed).
    pub provider: Arc<str>,
    pub straggler: bool,
}

/// One `nccl.collective.peer_lag_ms` point.
#[derive(Debug, Clone, PartialEq)]
pub struct LagPoint {
    pub cluster: Arc<str>,
    pub node: Option<Arc<str>>,
    /// Provider of the point's resource.
    pub provider: Arc<str>,
    pub comm: Arc<str>,
    pub op: Arc<str>,
    pub time_unix_nano: u64,
    /// `nccl.op_seq`, when the producer knows it.
    pub op_seq: Option<i64>,
    /// Among the points of one batch with the same (cluster, comm, op, time, op_seq,
    /// rank), this is the `occurrence`-th (0-based); see the module notes on grouping.
    pub occurrence: u32,
    pub rank: u32,
    pub nranks: u32,
    pub lag_ms: f64,
}

/// What happened to a node observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    /// First push of this node, or its provider / GPU model changed.
    NewInfo,
    Same,
    /// Refused: a cap was reached (counted).
    Dropped,
}

/// Why something was not kept; each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    ClusterCap,
    NodeCap,
    StragglerCap,
    PendingCap,
    RanksCap,
    SeriesCap,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::ClusterCap,
        DropReason::NodeCap,
        DropReason::StragglerCap,
        DropReason::PendingCap,
        DropReason::RanksCap,
        DropReason::SeriesCap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::ClusterCap => "cluster_cap",
            DropReason::NodeCap => "node_cap",
            DropReason::StragglerCap => "straggler_cap",
            DropReason::PendingCap => "pending_collective_cap",
            DropReason::RanksCap => "ranks_per_collective_cap",
            DropReason::SeriesCap => "cost_series_cap",
        }
    }
}
