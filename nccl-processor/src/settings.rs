//! The validated config turned into the numbers the algorithm uses.

use crate::config::NcclConfig;
use crate::ingest::{OpTypes, PointLimits};
use crate::lag::LagParams;

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Everything a [`crate::tracker::ClusterTracker`] needs, precomputed once.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ops: OpTypes,
    pub window_ns: i64,
    /// `skew_tolerance_fraction * window`, ns.
    pub skew_ns: i64,
    pub grace_ns: u64,
    pub quorum_fraction: f64,
    pub min_ranks: u32,
    pub lag: LagParams,
    pub window_steps: usize,
    pub min_steps: usize,
    pub behind_fraction: f64,
    pub min_repeats: usize,
    pub match_fraction: f64,
    pub mono_min_batches: u64,
    pub mono_window: usize,
    /// `Some(quantile)` when monotonic offsets are refined from the data.
    pub mono_refine_quantile: Option<f64>,
    pub max_comms: usize,
    pub max_open_instances: usize,
    pub max_buffered_points: usize,
    pub max_nodes: usize,
    pub max_named: usize,
    pub max_pending_output: usize,
    pub max_rank_series: usize,
    pub comm_idle_ns: u64,
    pub point_limits: PointLimits,
    pub top_ranks: usize,
}

impl Settings {
    /// From a config that passed `validate()`.
    pub fn new(cfg: &NcclConfig) -> Self {
        let window_ns = i64::try_from(nanos(cfg.alignment.window))
            .unwrap_or(i64::MAX)
            .max(1);
        let skew_ns = (window_ns as f64 * cfg.alignment.skew_tolerance_fraction) as i64;
        Settings {
            ops: OpTypes::new(&cfg.op_types),
            window_ns,
            skew_ns: skew_ns.clamp(0, window_ns - 1),
            grace_ns: nanos(cfg.alignment.grace_period),
            quorum_fraction: cfg.alignment.quorum_fraction,
            min_ranks: cfg.alignment.min_ranks.max(2),
            lag: LagParams {
                min_lag_ms: cfg.lag.min_lag_ms,
                mad_k: cfg.lag.mad_k,
            },
            window_steps: cfg.chronic.window_steps.max(2) as usize,
            min_steps: cfg.chronic.min_steps.max(1) as usize,
            behind_fraction: cfg.chronic.behind_fraction,
            min_repeats: cfg.periodic.min_repeats.max(3) as usize,
            match_fraction: cfg.periodic.match_fraction,
            mono_min_batches: u64::from(cfg.monotonic.min_batches),
            mono_window: cfg.monotonic.offset_window.max(1) as usize,
            mono_refine_quantile: cfg
                .monotonic
                .refine
                .then_some(cfg.monotonic.refine_quantile),
            max_comms: cfg.limits.max_comms_per_cluster as usize,
            max_open_instances: cfg.limits.max_open_buckets_per_cluster as usize,
            max_buffered_points: cfg.limits.max_buffered_points_per_cluster as usize,
            max_nodes: cfg.limits.max_nodes_per_cluster as usize,
            max_named: cfg.limits.max_named_ranks_per_cluster as usize,
            max_pending_output: cfg.limits.max_pending_output as usize,
            max_rank_series: cfg.limits.max_rank_series_per_cluster as usize,
            comm_idle_ns: nanos(cfg.limits.comm_idle_timeout),
            point_limits: PointLimits {
                max_ranks: cfg.limits.max_ranks,
                min_ranks: cfg.alignment.min_ranks.max(2),
            },
            top_ranks: cfg.diagnostics_top_ranks.max(1) as usize,
        }
    }

    /// A monotonic node is settled once a refinement step moves it by at most this (ms).
    pub fn settle_ms(&self) -> f64 {
        self.lag.min_lag_ms / 4.0
    }

    /// Instances a stream remembers for numbering steps: twice the rank window.
    pub fn step_index_capacity(&self) -> usize {
        (2 * self.window_steps).clamp(64, 4096)
    }

    pub fn rank_params(&self) -> crate::stats::RankParams {
        crate::stats::RankParams {
            window_steps: self.window_steps,
            min_steps: self.min_steps,
            behind_fraction: self.behind_fraction,
            min_repeats: self.min_repeats,
            match_fraction: self.match_fraction,
        }
    }

    /// Ranks an incomplete instance of a `nranks` communicator needs to be emitted.
    pub fn quorum(&self, nranks: u32) -> usize {
        let q = (self.quorum_fraction * f64::from(nranks)).ceil() as usize;
        q.max(self.min_ranks as usize).min(nranks as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_rounds_up_and_respects_min_ranks() {
        let s = Settings::new(&NcclConfig::default());
        assert_eq!(s.quorum(8), 6); // ceil(0.75 * 8)
        assert_eq!(s.quorum(5), 4); // ceil(3.75)
        assert_eq!(s.quorum(2), 2);
        assert_eq!(s.quorum(512), 384);
        assert_eq!(s.skew_ns, 500_000_000);
    }
}
