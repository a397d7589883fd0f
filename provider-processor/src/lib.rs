//! Provider lookup, GPU rate tables and the cost of stragglers (component type
//! `provider_lookup`).
//!
//! # What it does
//!
//! - Tags every resource with `ingero.provider`, a canonical provider id, resolved in this
//!   order: operator rules (file, first match wins) > the agent's own value > what the
//!   same node's latest health push resolved to by rule or agent value > OpenTelemetry
//!   semantic conventions (`cloud.provider`, `cloud.platform`, `host.type`) >
//!   `default_provider`. Aliases meet: the agent's `aws` and a rate table's `ec2` are one
//!   id (`ec2`).
//! - Keeps per node the GPU model and count (`ingero.node.info`) and world size
//!   (`ingero.node.world_size`) from health pushes, the current stragglers (from the
//!   `ingero` threshold processor's `ingero.fleet.node.straggler` gauge) and the NCCL
//!   peer lag (`nccl.collective.peer_lag_ms` from `nccl_peer_lag`).
//! - Prices them with a rate table (built-in, overridable by a file) into the spend idle at
//!   NCCL barriers and the spend held back by each straggler, as rates and counters in
//!   `telemetry` (see [`metrics`]). The formulas are in [`cost`] and the README.
//!
//! # Design notes
//!
//! - The host owns time and I/O. The rules and rates files are re-checked from `tick`
//!   (one `stat` each when unchanged) and re-read only when their metadata moved; a bad
//!   version is refused with every error logged and the previous one stays in use.
//!   [`ProviderLookupProcessor::reload_rules`] forces a re-read.
//! - `process` may run concurrently: rules and rates are behind `ArcSwap` (lock-free
//!   reads on the data path), the cost ledger behind one mutex taken once per batch after
//!   everything was extracted without it.
//! - Every map keyed by outside data is capped (`limits.*`), and what a cap refused is
//!   counted in `ingero_provider_dropped_total{reason}`.
//! - The processor enriches only: it never refuses or consumes points.

#![forbid(unsafe_code)]

pub mod config;
pub mod cost;
mod exposition;
pub mod extract;
pub mod factory;
pub mod metrics;
pub mod pattern;
pub mod processor;
pub mod resolve;
pub mod rules;
mod view;
pub mod watch;

pub use config::ProviderConfig;
/// Provider ids and rate tables live in the pure `gpu-rates` crate (Echo prices with the
/// same table); re-exported under their old paths.
pub use gpu_rates::{provider, rates};
pub use processor::{ProviderLookupProcessor, ReloadError};
pub use resolve::{ProviderSource, Resolution};

/// The component type name in collector configs.
pub const TYPE: &str = "provider_lookup";

pub use factory::FACTORY;

/// Decode and validate a config subtree, read its files and build the processor. Every
/// problem is reported, with its key path (problems inside the files under `rules_file`
/// / `rates_file`, each naming its place in the file).
pub fn create(
    cfg: &component::ConfigValue,
) -> Result<ProviderLookupProcessor, component::ConfigErrors> {
    let cfg: ProviderConfig = component::config::decode(cfg)?;
    ProviderLookupProcessor::new(cfg)
}
