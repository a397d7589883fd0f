//! What processors show in the live cluster view, read on demand.
//!
//! The view is served by the extension that owns the admin listener (`ingero_threshold`).
//! Processors never see that extension's type: at `start` a processor finds, through the
//! host, an extension offering a [`ViewBoard`] ([`find_view_board`]) and registers a
//! read-only [`ClusterViewSource`] with it, the same way the `ingero` processor finds its
//! [`crate::threshold::ThresholdSink`]. The board calls a source only when a view is requested, so a
//! processor pays nothing while nobody looks.
//!
//! A source must answer from its current state without blocking on I/O; it holds its own
//! shared state (not the processor), so the board never keeps a processor alive.

use std::sync::Arc;

use serde::Serialize;

use component::{ComponentId, Extension, Host};

/// One rank of one collective stream, as the peer-lag heat map shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankLagCell {
    pub rank: u32,
    pub node_id: Option<Arc<str>>,
    /// Median lag over the steps this rank was behind in the window; `None` when it never was.
    pub median_lag_ms: Option<f64>,
    /// Behind steps / window steps.
    pub behind_ratio: f64,
    /// Detected period in steps (a rank late every N steps).
    pub period_steps: Option<u32>,
    /// Named as late (chronic or periodic).
    pub named: bool,
}

/// One `(communicator, op_type)` stream: a row of the heat map per rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerLagStream {
    pub comm_id_hash: String,
    pub op_type: String,
    pub nranks: u32,
    pub steps: u64,
    /// Ranks seen in the window, in rank order (at most [`MAX_VIEW_RANKS`]).
    pub ranks: Vec<RankLagCell>,
    /// Ranks left out of `ranks` by the cap.
    pub ranks_left_out: usize,
}

/// The NCCL peer-lag state of one cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeerLagView {
    /// Worst first (streams with named ranks, then more behind steps), at most
    /// [`MAX_VIEW_STREAMS`].
    pub streams: Vec<PeerLagStream>,
    pub streams_left_out: usize,
}

/// Most streams a [`PeerLagView`] carries.
pub const MAX_VIEW_STREAMS: usize = 16;
/// Most ranks a [`PeerLagStream`] carries.
pub const MAX_VIEW_RANKS: usize = 4096;

/// What one current straggler costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerCost {
    pub node_id: Arc<str>,
    pub provider: Arc<str>,
    pub gpu_model: Arc<str>,
    pub affected_gpus: u32,
    pub per_hour: f64,
}

/// The cost of waiting in one cluster right now, in one currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingCostView {
    pub currency: Arc<str>,
    /// Currency units per hour spent by GPUs idle at NCCL barriers (average over the window).
    pub barrier_per_hour: f64,
    /// Average GPUs idle at barriers over the window.
    pub barrier_idle_gpus: f64,
    /// Currency units per hour attributed to the current stragglers.
    pub stragglers_per_hour: f64,
    /// Most expensive first.
    pub stragglers: Vec<StragglerCost>,
    /// When the numbers were computed (the processor's last tick), Unix nanoseconds.
    pub computed_at_unix_nano: u64,
}

/// The top causal chain of one straggler episode, as the node's agent last sent it on its
/// straggler event (`ingero.causal_chain_id`, `ingero.causal_chains`: this project's
/// extension; the Go agent sends none).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerCause {
    pub node_id: Arc<str>,
    pub causal_chain_id: Arc<str>,
    /// `HIGH`, `MEDIUM` or `LOW` as the agent sent it.
    pub severity: Arc<str>,
    pub summary: Arc<str>,
    pub root_cause: Arc<str>,
    /// Chains the event carried (the first, most severe, is the one shown).
    pub chains: u32,
    /// When Fleet received it, Unix nanoseconds.
    pub received_at_unix_nano: u64,
}

/// A processor's current per-cluster state for the view. Every method has a default, so a
/// source implements only what it knows.
pub trait ClusterViewSource: Send + Sync {
    /// The NCCL peer-lag heat map of `cluster`, `None` when this source knows nothing of it.
    fn peer_lag(&self, _cluster: &str) -> Option<PeerLagView> {
        None
    }

    /// The cost of waiting in `cluster` now, `None` when this source knows nothing of it.
    fn waiting_cost(&self, _cluster: &str) -> Option<WaitingCostView> {
        None
    }

    /// The known cause of each straggler of `cluster` that has one.
    fn straggler_causes(&self, _cluster: &str) -> Vec<StragglerCause> {
        Vec::new()
    }
}

/// Where processors register their [`ClusterViewSource`]s. Implemented by the extension
/// that serves the view.
pub trait ViewBoard: Send + Sync {
    /// Add `source` (registering the same `Arc` again replaces it: `start` may run twice).
    fn register(&self, source: Arc<dyn ClusterViewSource>);
}

/// The first extension in `host` that offers a view board.
pub fn find_view_board(host: &dyn Host) -> Option<(ComponentId, Arc<dyn ViewBoard>)> {
    component::find_provided::<Arc<dyn ViewBoard>>(host)
}

/// The view board `ext` offers, if any (its [`Extension::provides`] answer).
pub fn view_board(ext: &(impl Extension + ?Sized)) -> Option<Arc<dyn ViewBoard>> {
    component::provided::<Arc<dyn ViewBoard>>(ext)
}
