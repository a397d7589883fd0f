//! Configuration of the `ingero` processor.
//!
//! The six keys of the seed's `fleet-config.yaml` keep their names and defaults
//! (`threshold.k`, `threshold.ema_alpha`, `quorum.statistical_min`,
//! `quorum.coverage_fraction`, `push_interval`, `ttl_multiplier`); everything else is an
//! addition this implementation needs, documented key by key in the crate README.

use std::collections::BTreeMap;
use std::time::Duration;

use component::config::{ComponentConfig, ConfigErrors, duration, format_duration};
use component::range::{Bound, DurationRange, FloatRange, IntRange, Ranged};
use component::ranges;
use serde::{Deserialize, Serialize};

/// `threshold.k`: MAD multiplier (seed default).
pub const DEFAULT_K: f64 = 2.0;
/// `threshold.ema_alpha`: weight of the newest raw threshold in the EMA (seed default).
pub const DEFAULT_EMA_ALPHA: f64 = 0.2;
/// `threshold.mad_floor`: the smallest MAD the threshold formula uses. With the default
/// `k` the threshold is then never closer than `2 * 1.4826 * 0.01 = 0.0297` to the median.
pub const DEFAULT_MAD_FLOOR: f64 = ingero_stats::DEFAULT_MAD_FLOOR;
/// `quorum.statistical_min`: active nodes needed for a trustworthy statistic (seed default).
pub const DEFAULT_STATISTICAL_MIN: u64 = 5;
/// `quorum.coverage_fraction`: coverage below this raises `coverage_low` (seed default).
pub const DEFAULT_COVERAGE_FRACTION: f64 = 0.80;
/// `quorum.expected_window`: how long a node that stopped pushing still counts as expected.
pub const DEFAULT_EXPECTED_WINDOW: Duration = Duration::from_secs(300);
/// `push_interval`: the agents' push interval and this processor's tick period (seed default).
pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(10);
/// `ttl_multiplier`: a node expires `push_interval * ttl_multiplier` after its last push.
pub const DEFAULT_TTL_MULTIPLIER: u32 = 5;
/// `cohorts.enabled`: per-`ingero.cgroup_path_hash` statistics for server-side classification.
pub const DEFAULT_COHORTS_ENABLED: bool = false;
/// `cohorts.max_per_cluster`: distinct non-empty cohort keys tracked per cluster.
pub const DEFAULT_MAX_COHORTS_PER_CLUSTER: u32 = 64;
/// `panic.enabled`.
pub const DEFAULT_PANIC_ENABLED: bool = true;
/// `panic.enter_fraction`: share of active nodes below the last good threshold that
/// starts panic mode.
pub const DEFAULT_PANIC_ENTER_FRACTION: f64 = 0.30;
/// `panic.exit_fraction`: panic mode ends once the share falls below this.
pub const DEFAULT_PANIC_EXIT_FRACTION: f64 = 0.15;
/// `panic.max_duration`: after this long in panic the new level is accepted (`0s` = never).
pub const DEFAULT_PANIC_MAX_DURATION: Duration = Duration::from_secs(300);
/// `classifier.drift`: CUSUM allowance per sample, in robust standard deviations.
pub const DEFAULT_CLASSIFIER_DRIFT: f64 = ingero_stats::cusum::DEFAULT_DRIFT;
/// `classifier.decision`: CUSUM decision interval, in robust standard deviations.
pub const DEFAULT_CLASSIFIER_DECISION: f64 = ingero_stats::cusum::DEFAULT_DECISION;
/// `classifier.clear_margin`: a flagged node clears at once on a tick this many robust
/// standard deviations above the threshold (halfway to the median at `threshold.k` 2).
pub const DEFAULT_CLASSIFIER_CLEAR_MARGIN: f64 = ingero_stats::cusum::DEFAULT_CLEAR_MARGIN;
/// `classifier.clear_holdoff`: unflagged ticks after a clear before the next episode may
/// clear at once (a node that falls again sooner clears only by the CUSUM's drain).
pub const DEFAULT_CLASSIFIER_CLEAR_HOLDOFF: u32 = ingero_stats::cusum::DEFAULT_CLEAR_HOLDOFF as u32;
/// `classifier.evidence`: samples at the single-sample depth a flag needs; 0 picks 1 or 2
/// per cluster from the tails of its own healthy noise (`classifier::TailEstimate`).
pub const DEFAULT_CLASSIFIER_EVIDENCE: u32 = 0;
/// `classifier.shallow_decision`: level of the shallow-drop sum (the residual against the
/// cohort's median in units of its own spread) that flags; 0 turns that rule off.
pub const DEFAULT_CLASSIFIER_SHALLOW_DECISION: f64 = ingero_stats::cusum::DEFAULT_SHALLOW_DECISION;
/// `limits.max_clusters`.
pub const DEFAULT_MAX_CLUSTERS: u32 = 64;
/// `limits.max_nodes_per_cluster`.
pub const DEFAULT_MAX_NODES_PER_CLUSTER: u32 = 65_536;
/// `limits.max_nodes_total`: node records across all clusters.
pub const DEFAULT_MAX_NODES_TOTAL: u32 = 262_144;
/// `limits.reserved_nodes_per_cluster` when unset: a quarter of the fair share
/// (`max_nodes_total / max_clusters / 4`, 1024 with the defaults).
pub const DEFAULT_RESERVED_SHARE_DIVISOR: u32 = 4;
/// `limits.max_clusters_per_tenant` when unset: `max_clusters` less a quarter of it.
pub const DEFAULT_TENANT_LEFT_DIVISOR: u32 = 4;
/// `diagnostics.max_nodes_per_cluster`: nodes listed per cluster in the published diagnostics.
pub const DEFAULT_DIAGNOSTICS_MAX_NODES: u32 = 1_000;

/// Hard upper bounds validation enforces on the caps (memory safety, not policy).
pub const MAX_CLUSTERS_LIMIT: u32 = 65_536;
pub const MAX_NODES_LIMIT: u32 = 16_777_216;
/// Cohort ids are 16-bit with id 0 reserved for the cluster-wide cohort.
pub const MAX_COHORTS_LIMIT: u32 = 65_535;

/// The whole `processors.ingero` subtree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngeroConfig {
    pub threshold: ThresholdConfig,
    pub quorum: QuorumConfig,
    #[serde(with = "duration")]
    pub push_interval: Duration,
    pub ttl_multiplier: u32,
    pub cohorts: CohortConfig,
    pub panic: PanicConfig,
    pub classifier: ClassifierConfig,
    pub limits: LimitsConfig,
    pub diagnostics: DiagnosticsConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdConfig {
    pub k: f64,
    pub ema_alpha: f64,
    pub mad_floor: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuorumConfig {
    pub statistical_min: u64,
    pub coverage_fraction: f64,
    #[serde(with = "duration")]
    pub expected_window: Duration,
    /// Operator-declared node counts per cluster id; coverage uses the larger of this and
    /// the observed count.
    pub expected_nodes: BTreeMap<String, u64>,
    /// When true, `quorum_met` also requires coverage (otherwise coverage only alerts).
    pub require_coverage: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CohortConfig {
    pub enabled: bool,
    pub max_per_cluster: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PanicConfig {
    pub enabled: bool,
    pub enter_fraction: f64,
    pub exit_fraction: f64,
    #[serde(with = "duration")]
    pub max_duration: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierConfig {
    pub drift: f64,
    pub decision: f64,
    pub clear_margin: f64,
    pub clear_holdoff: u32,
    pub evidence: u32,
    pub shallow_decision: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_clusters: u32,
    pub max_nodes_per_cluster: u32,
    pub max_nodes_total: u32,
    /// Node records each cluster may always hold, whoever fills the rest of
    /// `max_nodes_total`; unset: [`LimitsConfig::reserved_nodes`]'s default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_nodes_per_cluster: Option<u32>,
    /// Clusters one tenant (a bearer token; every request without one is one tenant) may
    /// create and hold, so that it cannot fill `max_clusters` and lock the others out;
    /// unset: [`LimitsConfig::clusters_per_tenant`]'s default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_clusters_per_tenant: Option<u32>,
    /// Records of the shared node pool (what the reserves leave of `max_nodes_total`)
    /// the clusters of one tenant may hold together, so that one tenant cannot take the
    /// whole pool from the others' clusters beyond their reserve; unset:
    /// [`LimitsConfig::pool_nodes_per_tenant`]'s default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pool_nodes_per_tenant: Option<u32>,
}

impl LimitsConfig {
    /// The effective `max_clusters_per_tenant`: the configured value, else three quarters
    /// of `max_clusters` (48 of 64), at least 1, so a quarter is always left to the other
    /// tenants.
    pub fn clusters_per_tenant(&self) -> u32 {
        self.max_clusters_per_tenant
            .unwrap_or(self.max_clusters - self.max_clusters / DEFAULT_TENANT_LEFT_DIVISOR)
            .clamp(1, self.max_clusters.max(1))
    }

    /// The shared node pool: what the reserves of `max_clusters` clusters leave of
    /// `max_nodes_total`.
    pub fn node_pool(&self) -> u32 {
        self.max_nodes_total
            .saturating_sub(self.reserved_nodes().saturating_mul(self.max_clusters))
    }

    /// The effective `max_pool_nodes_per_tenant`: the configured value, else three
    /// quarters of the pool (147,456 of 196,608 with the defaults), so a quarter of it is
    /// always left to the other tenants' clusters.
    pub fn pool_nodes_per_tenant(&self) -> u32 {
        self.max_pool_nodes_per_tenant.unwrap_or_else(|| {
            let pool = self.node_pool();
            pool - pool / DEFAULT_TENANT_LEFT_DIVISOR
        })
    }

    /// The effective `reserved_nodes_per_cluster`: the configured value, else
    /// `max_nodes_total / max_clusters / 4`, never above `max_nodes_per_cluster`.
    pub fn reserved_nodes(&self) -> u32 {
        self.reserved_nodes_per_cluster
            .unwrap_or(
                self.max_nodes_total / self.max_clusters.max(1) / DEFAULT_RESERVED_SHARE_DIVISOR,
            )
            .min(self.max_nodes_per_cluster)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiagnosticsConfig {
    pub max_nodes_per_cluster: u32,
}

impl Default for IngeroConfig {
    fn default() -> Self {
        IngeroConfig {
            threshold: ThresholdConfig::default(),
            quorum: QuorumConfig::default(),
            push_interval: DEFAULT_PUSH_INTERVAL,
            ttl_multiplier: DEFAULT_TTL_MULTIPLIER,
            cohorts: CohortConfig::default(),
            panic: PanicConfig::default(),
            classifier: ClassifierConfig::default(),
            limits: LimitsConfig::default(),
            diagnostics: DiagnosticsConfig::default(),
        }
    }
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        ThresholdConfig {
            k: DEFAULT_K,
            ema_alpha: DEFAULT_EMA_ALPHA,
            mad_floor: DEFAULT_MAD_FLOOR,
        }
    }
}

impl Default for QuorumConfig {
    fn default() -> Self {
        QuorumConfig {
            statistical_min: DEFAULT_STATISTICAL_MIN,
            coverage_fraction: DEFAULT_COVERAGE_FRACTION,
            expected_window: DEFAULT_EXPECTED_WINDOW,
            expected_nodes: BTreeMap::new(),
            require_coverage: false,
        }
    }
}

impl Default for CohortConfig {
    fn default() -> Self {
        CohortConfig {
            enabled: DEFAULT_COHORTS_ENABLED,
            max_per_cluster: DEFAULT_MAX_COHORTS_PER_CLUSTER,
        }
    }
}

impl Default for PanicConfig {
    fn default() -> Self {
        PanicConfig {
            enabled: DEFAULT_PANIC_ENABLED,
            enter_fraction: DEFAULT_PANIC_ENTER_FRACTION,
            exit_fraction: DEFAULT_PANIC_EXIT_FRACTION,
            max_duration: DEFAULT_PANIC_MAX_DURATION,
        }
    }
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        ClassifierConfig {
            drift: DEFAULT_CLASSIFIER_DRIFT,
            decision: DEFAULT_CLASSIFIER_DECISION,
            clear_margin: DEFAULT_CLASSIFIER_CLEAR_MARGIN,
            clear_holdoff: DEFAULT_CLASSIFIER_CLEAR_HOLDOFF,
            evidence: DEFAULT_CLASSIFIER_EVIDENCE,
            shallow_decision: DEFAULT_CLASSIFIER_SHALLOW_DECISION,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_clusters: DEFAULT_MAX_CLUSTERS,
            max_nodes_per_cluster: DEFAULT_MAX_NODES_PER_CLUSTER,
            max_nodes_total: DEFAULT_MAX_NODES_TOTAL,
            reserved_nodes_per_cluster: None,
            max_clusters_per_tenant: None,
            max_pool_nodes_per_tenant: None,
        }
    }
}

impl Default for DiagnosticsConfig {
    fn default() -> Self {
        DiagnosticsConfig {
            max_nodes_per_cluster: DEFAULT_DIAGNOSTICS_MAX_NODES,
        }
    }
}

impl IngeroConfig {
    /// `push_interval * ttl_multiplier`: a node whose last push is older than this leaves
    /// the statistic.
    pub fn node_ttl(&self) -> Duration {
        self.push_interval.saturating_mul(self.ttl_multiplier)
    }
}

// The plain ranges of each section, declared once; `validate` runs these tables and keeps
// the rules that relate keys to each other.

ranges!(ThresholdConfig, |_t| {
    k: FloatRange::open_closed(0.0, 10.0),
    ema_alpha: FloatRange::open_closed(0.0, 1.0),
    mad_floor: FloatRange::closed(0.0, 0.5),
});

ranges!(QuorumConfig, |_q| {
    statistical_min: IntRange::closed(3, u64::from(MAX_NODES_LIMIT))
        .because("median and MAD of fewer than 3 nodes cannot single out a straggler"),
    coverage_fraction: FloatRange::open_closed(0.0, 1.0),
});

// The top-level keys (the sections have tables of their own).
ranges!(IngeroConfig, |_c| {
    push_interval: DurationRange::closed(Duration::from_secs(1), Duration::from_secs(3600))
        .because("the agent's minimum push interval is 1s"),
    ttl_multiplier: IntRange::closed(1, 1000),
});

ranges!(CohortConfig, |_c| {
    max_per_cluster: IntRange::closed(1, u64::from(MAX_COHORTS_LIMIT)),
});

ranges!(PanicConfig, |_p| {
    enter_fraction: FloatRange::open_closed(0.0, 1.0),
    exit_fraction: FloatRange::closed(0.0, 1.0),
});

ranges!(ClassifierConfig, |_c| {
    drift: FloatRange::closed(0.0, 10.0),
    decision: FloatRange::open_closed(0.0, 100.0),
    clear_margin: FloatRange::closed(0.0, 100.0),
    clear_holdoff: IntRange::closed(0, u64::from(u8::MAX)),
    evidence: IntRange::closed(0, 3),
    shallow_decision: FloatRange::closed(0.0, 1000.0),
});

ranges!(LimitsConfig, |_l| {
    max_clusters: IntRange::closed(1, u64::from(MAX_CLUSTERS_LIMIT)),
    max_nodes_per_cluster: IntRange::closed(1, u64::from(MAX_NODES_LIMIT)),
    max_nodes_total: IntRange::closed(1, u64::from(MAX_NODES_LIMIT)),
});

ranges!(DiagnosticsConfig, |_d| {
    max_nodes_per_cluster: IntRange::closed(0, u64::from(MAX_NODES_LIMIT)),
});

impl ComponentConfig for IngeroConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        self.threshold.check_ranges(&mut e, "threshold");
        self.quorum.check_ranges(&mut e, "quorum");
        for (cluster, n) in &self.quorum.expected_nodes {
            if cluster.is_empty() {
                e.push("quorum.expected_nodes", "cluster id must not be empty");
            }
            IntRange::closed(1, u64::from(MAX_NODES_LIMIT)).check(
                &mut e,
                &format!("quorum.expected_nodes.{cluster}"),
                *n,
            );
        }
        self.check_ranges(&mut e, "");
        let ttl = self.node_ttl();
        if self.quorum.expected_window < ttl {
            e.push(
                "quorum.expected_window",
                format!(
                    "must be >= push_interval * ttl_multiplier ({}), got {}",
                    format_duration(ttl),
                    format_duration(self.quorum.expected_window)
                ),
            );
        }
        if self.quorum.expected_window > Duration::from_secs(7 * 24 * 3600) {
            e.push(
                "quorum.expected_window",
                format!(
                    "must be <= 168h, got {}",
                    format_duration(self.quorum.expected_window)
                ),
            );
        }
        self.cohorts.check_ranges(&mut e, "cohorts");
        self.panic.check_ranges(&mut e, "panic");
        let (enter, exit) = (self.panic.enter_fraction, self.panic.exit_fraction);
        if exit.is_finite() && enter.is_finite() && exit >= enter {
            e.push(
                "panic.exit_fraction",
                format!("must be < panic.enter_fraction ({enter}), got {exit}"),
            );
        }
        self.classifier.check_ranges(&mut e, "classifier");
        let l = &self.limits;
        l.check_ranges(&mut e, "limits");
        if let Some(r) = l.reserved_nodes_per_cluster {
            if r > l.max_nodes_per_cluster {
                e.push(
                    "limits.reserved_nodes_per_cluster",
                    format!(
                        "must be <= limits.max_nodes_per_cluster ({}), got {r}",
                        l.max_nodes_per_cluster
                    ),
                );
            }
            if u64::from(r) * u64::from(l.max_clusters) > u64::from(l.max_nodes_total) {
                e.push(
                    "limits.reserved_nodes_per_cluster",
                    format!(
                        "times limits.max_clusters ({}) must be <= limits.max_nodes_total ({}), got {r}",
                        l.max_clusters, l.max_nodes_total
                    ),
                );
            }
        }
        if let Some(t) = l.max_clusters_per_tenant
            && (t == 0 || t > l.max_clusters)
        {
            e.push(
                "limits.max_clusters_per_tenant",
                format!(
                    "must be between 1 and limits.max_clusters ({}), got {t}",
                    l.max_clusters
                ),
            );
        }
        if let Some(t) = self.limits.max_pool_nodes_per_tenant
            && t > self.limits.node_pool()
        {
            e.push(
                "limits.max_pool_nodes_per_tenant",
                format!(
                    "must be <= the shared node pool (limits.max_nodes_total less \
                     limits.max_clusters x limits.reserved_nodes_per_cluster = {}), got {t}",
                    self.limits.node_pool()
                ),
            );
        }
        if u64::from(l.max_nodes_per_cluster) < self.quorum.statistical_min {
            e.push(
                "limits.max_nodes_per_cluster",
                format!(
                    "must be >= quorum.statistical_min ({}), got {}",
                    self.quorum.statistical_min, l.max_nodes_per_cluster
                ),
            );
        }
        self.diagnostics.check_ranges(&mut e, "diagnostics");
        e.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_seed_and_validate() {
        let c = IngeroConfig::default();
        assert_eq!(c.threshold.k, 2.0);
        assert_eq!(c.threshold.ema_alpha, 0.2);
        assert_eq!(c.quorum.statistical_min, 5);
        assert_eq!(c.quorum.coverage_fraction, 0.80);
        assert_eq!(c.push_interval, Duration::from_secs(10));
        assert_eq!(c.ttl_multiplier, 5);
        assert_eq!(c.node_ttl(), Duration::from_secs(50));
        c.validate().unwrap();
    }

    #[test]
    fn exit_fraction_must_stay_below_enter_fraction() {
        let mut c = IngeroConfig::default();
        c.panic.exit_fraction = 0.3;
        let err = c.validate().unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err.0[0].path, "panic.exit_fraction");
    }

    #[test]
    fn non_finite_numbers_are_rejected() {
        let mut c = IngeroConfig::default();
        c.threshold.k = f64::NAN;
        c.threshold.ema_alpha = f64::INFINITY;
        c.quorum.coverage_fraction = f64::NAN;
        c.panic.enter_fraction = f64::NAN;
        c.classifier.decision = f64::INFINITY;
        let err = c.validate().unwrap_err();
        let paths: Vec<_> = err.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "threshold.k",
                "threshold.ema_alpha",
                "quorum.coverage_fraction",
                "panic.enter_fraction",
                "classifier.decision"
            ]
        );
    }

    #[test]
    fn expected_window_must_cover_the_ttl() {
        let mut c = IngeroConfig::default();
        c.quorum.expected_window = Duration::from_secs(49);
        let err = c.validate().unwrap_err();
        assert_eq!(err.0[0].path, "quorum.expected_window");
        c.quorum.expected_window = Duration::from_secs(50);
        c.validate().unwrap();
    }

    #[test]
    fn the_node_reserve_defaults_to_a_quarter_share_and_must_fit_the_total() {
        let mut c = IngeroConfig::default();
        assert_eq!(c.limits.reserved_nodes(), 1024);
        c.limits.max_nodes_total = 10;
        assert_eq!(c.limits.reserved_nodes(), 0);
        c.limits.max_nodes_total = DEFAULT_MAX_NODES_TOTAL;
        c.limits.reserved_nodes_per_cluster = Some(4097);
        let err = c.validate().unwrap_err();
        let paths: Vec<_> = err.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["limits.reserved_nodes_per_cluster"]);
        assert!(err.0[0].message.contains("max_nodes_total (262144)"));
        c.limits.reserved_nodes_per_cluster = Some(4096);
        c.validate().unwrap();
        assert_eq!(c.limits.reserved_nodes(), 4096);
        c.limits.max_nodes_per_cluster = 100;
        assert_eq!(
            c.validate().unwrap_err().0[0].path,
            "limits.reserved_nodes_per_cluster"
        );
    }
}
