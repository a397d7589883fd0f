//! Configuration of the `nccl_peer_lag` processor: serde shape with a default for every key,
//! and [`NcclConfig::validate`] reporting every problem with its key path.

use std::collections::HashSet;
use std::time::Duration;

use component::config::{ComponentConfig, ConfigErrors, duration};
use component::range::{Bound, DurationRange, FloatRange, IntRange, NonNegative, Ranged};
use component::ranges;
use serde::{Deserialize, Serialize};

/// How often the host calls `tick` (flushes buckets past their grace period, drains output).
pub const DEFAULT_TICK_INTERVAL: Duration = Duration::from_secs(1);
/// Cluster used when neither the resource nor the request names one. Empty: none (drop and count).
pub const DEFAULT_CLUSTER_ID: &str = "";
/// Operation types aligned across ranks. Point-to-point (`ncclSend`/`ncclRecv`) and
/// `ncclCommInitAll` are not collectives every rank takes part in, so they are not listed.
pub const DEFAULT_OP_TYPES: &[&str] = &[
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBcast",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAllToAll",
];
/// Width of a time bucket (alignment without `nccl.op_seq`).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(1);
/// A rank up to this fraction of `window` past a bucket boundary joins the previous bucket.
pub const DEFAULT_SKEW_TOLERANCE_FRACTION: f64 = 0.5;
/// How long (host arrival time) an incomplete collective waits for its missing ranks.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(15);
/// Fraction of `nranks` an incomplete collective needs at the end of its grace period.
pub const DEFAULT_QUORUM_FRACTION: f64 = 0.75;
/// Fewest ranks a collective needs for a lag to mean anything.
pub const DEFAULT_MIN_RANKS: u32 = 2;
/// A rank is "behind" on a step when its lag is at least this many milliseconds...
pub const DEFAULT_MIN_LAG_MS: f64 = 20.0;
/// ...and at least `mad_k * 1.4826 * MAD` of that step's lags.
pub const DEFAULT_MAD_K: f64 = 5.0;
/// Rolling per-rank window, in steps the rank took part in.
pub const DEFAULT_WINDOW_STEPS: u32 = 50;
/// Steps in the window before a rank can be named chronic.
pub const DEFAULT_MIN_STEPS: u32 = 10;
/// Fraction of the window a rank must be behind on to be named chronic.
pub const DEFAULT_BEHIND_FRACTION: f64 = 0.5;
/// Behind steps needed before a period is reported.
pub const DEFAULT_MIN_REPEATS: u32 = 3;
/// Fraction of the gaps between behind steps that must equal the period.
pub const DEFAULT_MATCH_FRACTION: f64 = 0.8;
/// Delivery samples a node with a monotonic clock needs before its points are aligned.
pub const DEFAULT_MONOTONIC_MIN_BATCHES: u32 = 3;
/// Delivery samples the windowed-minimum offset estimate looks back over.
pub const DEFAULT_MONOTONIC_OFFSET_WINDOW: u32 = 32;
/// Refine each monotonic node's offset from the data (see `clock.rs`).
pub const DEFAULT_MONOTONIC_REFINE: bool = true;
/// The quantile of a node's lags that refinement moves to zero.
pub const DEFAULT_MONOTONIC_REFINE_QUANTILE: f64 = 0.1;
pub const DEFAULT_MAX_CLUSTERS: u32 = 16;
pub const DEFAULT_MAX_COMMS_PER_CLUSTER: u32 = 1024;
pub const DEFAULT_MAX_OPEN_BUCKETS_PER_CLUSTER: u32 = 4096;
pub const DEFAULT_MAX_BUFFERED_POINTS_PER_CLUSTER: u32 = 1 << 20;
pub const DEFAULT_MAX_RANKS: u32 = 4096;
pub const DEFAULT_MAX_NODES_PER_CLUSTER: u32 = 4096;
pub const DEFAULT_MAX_NAMED_RANKS_PER_CLUSTER: u32 = 64;
pub const DEFAULT_MAX_PENDING_OUTPUT: u32 = 1 << 18;
/// Rolling per-(comm, op_type, rank) windows a cluster keeps.
pub const DEFAULT_MAX_RANK_SERIES_PER_CLUSTER: u32 = 1 << 16;
/// A communicator with no points for this long is forgotten (frees its cap slot).
pub const DEFAULT_COMM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Worst ranks shown per communicator and operation in diagnostics.
pub const DEFAULT_DIAGNOSTICS_TOP_RANKS: u32 = 5;

/// Hard upper bounds that validation enforces (memory and index sizes).
pub const MAX_WINDOW_STEPS: u32 = 1024;
pub const MAX_RANKS_LIMIT: u32 = 1 << 16;
pub const MAX_OP_TYPES: usize = 32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclConfig {
    #[serde(with = "duration")]
    pub tick_interval: Duration,
    pub default_cluster_id: String,
    pub op_types: Vec<String>,
    pub alignment: AlignmentConfig,
    pub lag: LagConfig,
    pub chronic: ChronicConfig,
    pub periodic: PeriodicConfig,
    pub monotonic: MonotonicConfig,
    pub limits: LimitsConfig,
    pub diagnostics_top_ranks: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlignmentConfig {
    #[serde(with = "duration")]
    pub window: Duration,
    pub skew_tolerance_fraction: f64,
    #[serde(with = "duration")]
    pub grace_period: Duration,
    pub quorum_fraction: f64,
    pub min_ranks: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LagConfig {
    pub min_lag_ms: f64,
    pub mad_k: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChronicConfig {
    pub window_steps: u32,
    pub min_steps: u32,
    pub behind_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeriodicConfig {
    pub min_repeats: u32,
    pub match_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonotonicConfig {
    pub min_batches: u32,
    pub offset_window: u32,
    pub refine: bool,
    pub refine_quantile: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_clusters: u32,
    pub max_comms_per_cluster: u32,
    pub max_open_buckets_per_cluster: u32,
    pub max_buffered_points_per_cluster: u32,
    pub max_ranks: u32,
    pub max_nodes_per_cluster: u32,
    pub max_named_ranks_per_cluster: u32,
    pub max_pending_output: u32,
    pub max_rank_series_per_cluster: u32,
    #[serde(with = "duration")]
    pub comm_idle_timeout: Duration,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            tick_interval: DEFAULT_TICK_INTERVAL,
            default_cluster_id: DEFAULT_CLUSTER_ID.to_string(),
            op_types: DEFAULT_OP_TYPES.iter().map(|s| (*s).to_string()).collect(),
            alignment: AlignmentConfig::default(),
            lag: LagConfig::default(),
            chronic: ChronicConfig::default(),
            periodic: PeriodicConfig::default(),
            monotonic: MonotonicConfig::default(),
            limits: LimitsConfig::default(),
            diagnostics_top_ranks: DEFAULT_DIAGNOSTICS_TOP_RANKS,
        }
    }
}

impl Default for AlignmentConfig {
    fn default() -> Self {
        AlignmentConfig {
            window: DEFAULT_WINDOW,
            skew_tolerance_fraction: DEFAULT_SKEW_TOLERANCE_FRACTION,
            grace_period: DEFAULT_GRACE_PERIOD,
            quorum_fraction: DEFAULT_QUORUM_FRACTION,
            min_ranks: DEFAULT_MIN_RANKS,
        }
    }
}

impl Default for LagConfig {
    fn default() -> Self {
        LagConfig {
            min_lag_ms: DEFAULT_MIN_LAG_MS,
            mad_k: DEFAULT_MAD_K,
        }
    }
}

impl Default for ChronicConfig {
    fn default() -> Self {
        ChronicConfig {
            window_steps: DEFAULT_WINDOW_STEPS,
            min_steps: DEFAULT_MIN_STEPS,
            behind_fraction: DEFAULT_BEHIND_FRACTION,
        }
    }
}

impl Default for PeriodicConfig {
    fn default() -> Self {
        PeriodicConfig {
            min_repeats: DEFAULT_MIN_REPEATS,
            match_fraction: DEFAULT_MATCH_FRACTION,
        }
    }
}

impl Default for MonotonicConfig {
    fn default() -> Self {
        MonotonicConfig {
            min_batches: DEFAULT_MONOTONIC_MIN_BATCHES,
            offset_window: DEFAULT_MONOTONIC_OFFSET_WINDOW,
            refine: DEFAULT_MONOTONIC_REFINE,
            refine_quantile: DEFAULT_MONOTONIC_REFINE_QUANTILE,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_clusters: DEFAULT_MAX_CLUSTERS,
            max_comms_per_cluster: DEFAULT_MAX_COMMS_PER_CLUSTER,
            max_open_buckets_per_cluster: DEFAULT_MAX_OPEN_BUCKETS_PER_CLUSTER,
            max_buffered_points_per_cluster: DEFAULT_MAX_BUFFERED_POINTS_PER_CLUSTER,
            max_ranks: DEFAULT_MAX_RANKS,
            max_nodes_per_cluster: DEFAULT_MAX_NODES_PER_CLUSTER,
            max_named_ranks_per_cluster: DEFAULT_MAX_NAMED_RANKS_PER_CLUSTER,
            max_pending_output: DEFAULT_MAX_PENDING_OUTPUT,
            max_rank_series_per_cluster: DEFAULT_MAX_RANK_SERIES_PER_CLUSTER,
            comm_idle_timeout: DEFAULT_COMM_IDLE_TIMEOUT,
        }
    }
}

// The plain ranges of each section, declared once; `validate` runs these tables and keeps
// the rules that relate keys to each other.

// The top-level keys (the sections have tables of their own).
ranges!(NcclConfig, |_c| {
    tick_interval: DurationRange::between(Duration::from_millis(10), Duration::from_secs(60)),
});
// `diagnostics_top_ranks` (checked last, where its error has always been listed).
const DIAGNOSTICS_TOP_RANKS: IntRange = IntRange::between(1, 1024);

ranges!(AlignmentConfig, |_a| {
    window: DurationRange::between(Duration::from_millis(1), Duration::from_secs(3600)),
    skew_tolerance_fraction: FloatRange::closed_open(0.0, 1.0),
    grace_period: DurationRange::between(Duration::from_millis(1), Duration::from_secs(3600)),
    quorum_fraction: FloatRange::open_closed(0.0, 1.0),
    min_ranks: IntRange::between(2, u64::from(MAX_RANKS_LIMIT)),
});

ranges!(LagConfig, |_l| {
    min_lag_ms: NonNegative,
    mad_k: NonNegative,
});

ranges!(ChronicConfig, |c| {
    window_steps: IntRange::between(2, u64::from(MAX_WINDOW_STEPS)),
    min_steps: IntRange::between(1, u64::from(c.window_steps.clamp(1, MAX_WINDOW_STEPS))),
    behind_fraction: FloatRange::open_closed(0.0, 1.0),
});

ranges!(PeriodicConfig, |_p| {
    match_fraction: FloatRange::open_closed(0.0, 1.0),
});

ranges!(MonotonicConfig, |_m| {
    min_batches: IntRange::between(1, 1024),
    offset_window: IntRange::between(1, 1024),
    refine_quantile: FloatRange::closed(0.0, 0.5),
});

ranges!(LimitsConfig, |_l| {
    max_clusters: IntRange::between(1, 1 << 16),
    max_comms_per_cluster: IntRange::between(1, 1 << 20),
    max_open_buckets_per_cluster: IntRange::between(1, 1 << 24),
    max_buffered_points_per_cluster: IntRange::between(1, 1 << 28),
    max_ranks: IntRange::between(2, u64::from(MAX_RANKS_LIMIT)),
    max_nodes_per_cluster: IntRange::between(1, 1 << 20),
    max_named_ranks_per_cluster: IntRange::between(0, 1 << 16),
    max_pending_output: IntRange::between(1, 1 << 26),
    max_rank_series_per_cluster: IntRange::between(0, 1 << 24),
    comm_idle_timeout: DurationRange::between(
        Duration::from_secs(1),
        Duration::from_secs(7 * 24 * 3600)
    ),
});

impl ComponentConfig for NcclConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        self.check_ranges(&mut e, "");
        if self.default_cluster_id.len() > 256
            || self.default_cluster_id.chars().any(char::is_control)
        {
            e.push(
                "default_cluster_id",
                "must be at most 256 characters without control characters",
            );
        }
        if self.op_types.is_empty() {
            e.push("op_types", "must list at least one operation type");
        }
        if self.op_types.len() > MAX_OP_TYPES {
            e.push(
                "op_types",
                format!(
                    "at most {MAX_OP_TYPES} operation types, got {}",
                    self.op_types.len()
                ),
            );
        }
        let mut seen = HashSet::new();
        for (i, op) in self.op_types.iter().enumerate() {
            if op.trim().is_empty() || op.len() > 128 {
                e.push(
                    format!("op_types.{i}"),
                    "must be a non-empty name of at most 128 bytes",
                );
            } else if !seen.insert(op.as_str()) {
                e.push(format!("op_types.{i}"), format!("duplicate entry {op:?}"));
            }
        }
        self.alignment.check_ranges(&mut e, "alignment");
        self.lag.check_ranges(&mut e, "lag");
        self.chronic.check_ranges(&mut e, "chronic");
        let steps = self.chronic.window_steps.clamp(3, MAX_WINDOW_STEPS);
        IntRange::between(3, u64::from(steps)).check(
            &mut e,
            "periodic.min_repeats",
            self.periodic.min_repeats,
        );
        self.periodic.check_ranges(&mut e, "periodic");
        self.monotonic.check_ranges(&mut e, "monotonic");
        let (a, l) = (&self.alignment, &self.limits);
        l.check_ranges(&mut e, "limits");
        if a.min_ranks > l.max_ranks {
            e.push(
                "alignment.min_ranks",
                format!("must not exceed limits.max_ranks ({})", l.max_ranks),
            );
        }
        if l.comm_idle_timeout < a.grace_period {
            e.push(
                "limits.comm_idle_timeout",
                "must be at least alignment.grace_period",
            );
        }
        DIAGNOSTICS_TOP_RANKS.check(&mut e, "diagnostics_top_ranks", self.diagnostics_top_ranks);
        e.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::{ConfigValue, decode, parse_yaml};

    #[test]
    fn default_config_validates() {
        NcclConfig::default().validate().unwrap();
        let cfg: NcclConfig = decode(&ConfigValue::Null).unwrap();
        assert_eq!(cfg, NcclConfig::default());
    }

    #[test]
    fn unknown_key_is_rejected_with_its_path() {
        let v = parse_yaml(b"alignment:\n  window: 1s\n  windw: 2s\n").unwrap();
        let err = decode::<NcclConfig>(&v).unwrap_err();
        assert_eq!(err.0[0].path, "alignment.windw");
        assert!(err.0[0].message.contains("unknown field"), "{err}");
    }

    #[test]
    fn every_problem_is_reported() {
        let v = parse_yaml(
            b"alignment: {skew_tolerance_fraction: 1.0, quorum_fraction: 0, min_ranks: 1}\n\
              chronic: {window_steps: 5, min_steps: 6}\nop_types: [a, a]\n",
        )
        .unwrap();
        let err = decode::<NcclConfig>(&v).unwrap_err();
        let paths: Vec<_> = err.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "op_types.1",
                "alignment.skew_tolerance_fraction",
                "alignment.quorum_fraction",
                "alignment.min_ranks",
                "chronic.min_steps",
            ]
        );
    }
}
