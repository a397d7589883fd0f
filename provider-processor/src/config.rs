//! Config of the `provider_lookup` processor.
//!
//! ```yaml
//! processors:
//!   provider_lookup:
//!     default_provider: unknown
//!     aliases: {}
//!     rules_file: ""
//!     rates_file: ""
//!     include_builtin_rates: true
//!     tick_interval: 10s
//!     cost:
//!       window: 1m
//!       node_ttl: 1m
//!       series_retention: 1h
//!     limits:
//!       max_clusters: 1024
//!       max_nodes: 65536
//!       max_pending_collectives: 65536
//!       max_cost_series: 16384
//!       max_unknown_model_labels: 256
//! ```
//!
//! The files named here are read by [`crate::create`], not by `validate` (which is pure):
//! `validate` checks the shape, `create` reports every problem inside the files.

use std::collections::BTreeMap;
use std::time::Duration;

use component::config::{self, ComponentConfig, ConfigErrors, check};
use serde::{Deserialize, Serialize};

use crate::provider::ProviderAliases;

pub const DEFAULT_DEFAULT_PROVIDER: &str = crate::provider::UNKNOWN_PROVIDER;
pub const DEFAULT_TICK_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_COST_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_NODE_TTL: Duration = Duration::from_secs(60);
pub const DEFAULT_SERIES_RETENTION: Duration = Duration::from_secs(3600);
pub const DEFAULT_MAX_CLUSTERS: usize = 1024;
pub const DEFAULT_MAX_NODES: usize = 65_536;
pub const DEFAULT_MAX_PENDING_COLLECTIVES: usize = 65_536;
pub const DEFAULT_MAX_COST_SERIES: usize = 16_384;
pub const DEFAULT_MAX_UNKNOWN_MODEL_LABELS: usize = 256;
/// Most operator aliases accepted.
pub const MAX_ALIASES: usize = 1024;
/// Bounds of `tick_interval`.
pub const MIN_TICK_INTERVAL: Duration = Duration::from_millis(100);
pub const MAX_TICK_INTERVAL: Duration = Duration::from_secs(3600);
/// Upper bound of `cost.window` (the window keeps one slice per tick).
pub const MAX_COST_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The `provider_lookup` processor config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderConfig {
    /// Provider of a resource no rule, agent value or semantic-convention attribute names.
    pub default_provider: String,
    /// Extra provider spellings: `alias: canonical id`. Win over the built-in aliases.
    pub aliases: BTreeMap<String, String>,
    /// Operator rules (`node_providers.yaml`); empty for none. Reloaded when it changes.
    pub rules_file: String,
    /// GPU rate table (`gpu_rates.yaml`); empty for the built-in table only. Reloaded when
    /// it changes.
    pub rates_file: String,
    /// Start from the built-in table and let `rates_file` override its entries. When
    /// false, `rates_file` is the whole table (and is required).
    pub include_builtin_rates: bool,
    /// How often the host should call `tick` (file checks, cost accrual, expiry).
    #[serde(with = "config::duration")]
    pub tick_interval: Duration,
    pub cost: CostConfig,
    pub limits: LimitsConfig,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            default_provider: DEFAULT_DEFAULT_PROVIDER.to_string(),
            aliases: BTreeMap::new(),
            rules_file: String::new(),
            rates_file: String::new(),
            include_builtin_rates: true,
            tick_interval: DEFAULT_TICK_INTERVAL,
            cost: CostConfig::default(),
            limits: LimitsConfig::default(),
        }
    }
}

/// Cost accounting windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostConfig {
    /// Window the barrier-idle spend rate averages over (>= tick_interval).
    #[serde(with = "config::duration")]
    pub window: Duration,
    /// A node (its provider, GPU model and count) is forgotten after this long without a
    /// push.
    #[serde(with = "config::duration")]
    pub node_ttl: Duration,
    /// A cost counter series that has not grown for this long is dropped.
    #[serde(with = "config::duration")]
    pub series_retention: Duration,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            window: DEFAULT_COST_WINDOW,
            node_ttl: DEFAULT_NODE_TTL,
            series_retention: DEFAULT_SERIES_RETENTION,
        }
    }
}

/// Caps on every map keyed by outside data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_clusters: usize,
    /// Across all clusters.
    pub max_nodes: usize,
    /// Collective instances waiting to be costed, across all clusters.
    pub max_pending_collectives: usize,
    /// Cost counter series (`ingero_cost_*_total`), across all clusters.
    pub max_cost_series: usize,
    /// Distinct `(provider, gpu_model)` label pairs of the unknown-model counter.
    pub max_unknown_model_labels: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_clusters: DEFAULT_MAX_CLUSTERS,
            max_nodes: DEFAULT_MAX_NODES,
            max_pending_collectives: DEFAULT_MAX_PENDING_COLLECTIVES,
            max_cost_series: DEFAULT_MAX_COST_SERIES,
            max_unknown_model_labels: DEFAULT_MAX_UNKNOWN_MODEL_LABELS,
        }
    }
}

impl ProviderConfig {
    /// The alias table these settings describe (built-in plus `aliases`).
    pub fn alias_table(&self) -> Result<ProviderAliases, ConfigErrors> {
        ProviderAliases::with_extra(
            self.aliases
                .iter()
                .map(|(alias, canonical)| (alias.as_str(), canonical.as_str())),
        )
        .map_err(|errs| {
            let mut out = ConfigErrors::new();
            for (alias, e) in errs {
                out.push(format!("aliases.{alias}"), e.to_string());
            }
            out
        })
    }

    /// How long a straggler stays one without a fresh `ingero.fleet.node.straggler` point.
    pub fn straggler_expiry(&self) -> Duration {
        self.tick_interval.saturating_mul(2)
    }
}

fn duration_between(errs: &mut ConfigErrors, path: &str, d: Duration, lo: Duration, hi: Duration) {
    if d < lo || d > hi {
        errs.push(
            path,
            format!(
                "must be between {} and {}, got {}",
                config::format_duration(lo),
                config::format_duration(hi),
                config::format_duration(d)
            ),
        );
    }
}

impl ComponentConfig for ProviderConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::new();
        if self.aliases.len() > MAX_ALIASES {
            errs.push(
                "aliases",
                format!(
                    "{} aliases exceed the cap of {MAX_ALIASES}",
                    self.aliases.len()
                ),
            );
        }
        let aliases = match self.alias_table() {
            Ok(a) => a,
            Err(e) => {
                errs.0.extend(e.0);
                ProviderAliases::builtin()
            }
        };
        if let Err(e) = aliases.normalise(&self.default_provider) {
            errs.push("default_provider", e.to_string());
        }
        for (path, file) in [
            ("rules_file", &self.rules_file),
            ("rates_file", &self.rates_file),
        ] {
            if file.contains('\0') {
                errs.push(path, "must not contain a NUL byte");
            }
        }
        if !self.include_builtin_rates && self.rates_file.trim().is_empty() {
            errs.push(
                "rates_file",
                "is required when include_builtin_rates is false (there would be no rate table)",
            );
        }
        duration_between(
            &mut errs,
            "tick_interval",
            self.tick_interval,
            MIN_TICK_INTERVAL,
            MAX_TICK_INTERVAL,
        );
        duration_between(
            &mut errs,
            "cost.window",
            self.cost.window,
            self.tick_interval.max(MIN_TICK_INTERVAL),
            MAX_COST_WINDOW,
        );
        if self.cost.node_ttl < self.tick_interval || self.cost.node_ttl.is_zero() {
            errs.push(
                "cost.node_ttl",
                format!(
                    "must be >= tick_interval ({}), got {}",
                    config::format_duration(self.tick_interval),
                    config::format_duration(self.cost.node_ttl)
                ),
            );
        }
        if self.cost.series_retention < self.cost.window {
            errs.push(
                "cost.series_retention",
                format!(
                    "must be >= cost.window ({}), got {}",
                    config::format_duration(self.cost.window),
                    config::format_duration(self.cost.series_retention)
                ),
            );
        }
        let l = &self.limits;
        for (path, v) in [
            ("limits.max_clusters", l.max_clusters),
            ("limits.max_nodes", l.max_nodes),
            ("limits.max_pending_collectives", l.max_pending_collectives),
            ("limits.max_cost_series", l.max_cost_series),
            (
                "limits.max_unknown_model_labels",
                l.max_unknown_model_labels,
            ),
        ] {
            check::at_least_u64(&mut errs, path, v as u64, 1);
        }
        errs.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        ProviderConfig::default().validate().unwrap();
        assert_eq!(
            ProviderConfig::default().straggler_expiry(),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn window_shorter_than_tick_is_refused() {
        let cfg = ProviderConfig {
            tick_interval: Duration::from_secs(90),
            cost: CostConfig {
                window: Duration::from_secs(10),
                ..CostConfig::default()
            },
            ..ProviderConfig::default()
        };
        let errs = cfg.validate().unwrap_err();
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["cost.window", "cost.node_ttl"]);
    }
}
