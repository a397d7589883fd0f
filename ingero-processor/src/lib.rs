//! `ingero`: the peer-relative straggler-threshold processor of Ingero Fleet.
//!
//! # What it does
//!
//! - **Push path** ([`IngeroProcessor`] as a [`component::Processor`], `process`): every
//!   `ingero.node.health_score` point is validated (finite, in [0, 1], a known
//!   `ingero.node.state`) and stored as its node's latest score in a per-cluster
//!   [`table::NodeTable`] keyed by `ingero.node.id` ([`ingest`]). The cluster is the
//!   resource attribute `ingero.cluster.id`, else the request's `cluster_id`. The batch
//!   itself passes through unchanged; rejected points are counted and reported as partial
//!   success.
//! - **Tick** (`tick(now)`, every `push_interval`): per cluster, scores are copied out under
//!   a short lock, then without any push-path lock: counts and coverage
//!   ([`cluster`]), median and MAD by selection ([`stats`]), quorum, EMA, clamping and panic
//!   mode ([`threshold`]), per-cohort statistics with a cluster-wide fallback, and a CUSUM
//!   straggler classifier per node ([`classifier`]). Reports go to the threshold sink of
//!   the `ingero_threshold` extension; straggler nodes come back as
//!   `ingero.fleet.node.straggler` gauges for downstream processors ([`tick`]).
//! - **Causes** ([`causes`]): the top causal chain this project's agent attaches to its
//!   `ingero.node.straggler_event` points is kept per node for the live view (a
//!   [`ingero_wire::view::ClusterViewSource`]), cleared by the recovery event or expiry.
//! - **Telemetry** ([`telemetry`]): self-metric families and diagnostics JSON, read from
//!   the last tick's snapshot and the push path's counters.
//!
//! # Design notes
//!
//! - `last_seen` is the host's receive time (`BatchContext::received_at`), never the agent's
//!   point timestamp: node expiry compares against the host's tick clock, and agent clocks
//!   are skewed (the agent itself tolerates timestamps a minute in the future), so mixing
//!   clocks would expire skewed nodes early or keep them forever.
//! - Time is always an argument; nothing here reads a clock. Tests use a fake clock.
//! - Every map keyed by outside data has a cap and a drop counter: clusters, nodes per
//!   cluster, nodes in total, cohort keys per cluster.
//! - The published cluster value is the cluster-wide cohort's threshold: the push-response
//!   header and the GET endpoint only know `cluster_id`. Cohort thresholds drive server-side
//!   classification and appear in diagnostics and metrics.
//!
//! The rules (MAD floor, coverage, panic trigger, classifier) are documented on the modules
//! that implement them and in the crate README.

#![forbid(unsafe_code)]

pub mod causes;
pub mod classifier;
pub mod cluster;
pub mod config;
pub mod factory;
pub mod ingest;
pub mod metrics;
pub mod processor;
pub mod stats;
pub mod table;
pub mod telemetry;
pub mod threshold;
pub mod tick;

pub use config::IngeroConfig;
pub use processor::IngeroProcessor;

/// The component type name (`processors: ingero:` in a collector config).
pub const TYPE: &str = "ingero";

pub use factory::FACTORY;

/// The only metrics `process` reads; it never changes the batch. Hosts may hand it a batch
/// holding just these (the C ABI decodes only them). Of these metrics it reads the name,
/// the data kind, the number of points and, of gauge and sum points, the value and the
/// attributes in [`READS_POINT_ATTRIBUTES`]; of a resource only the attributes in
/// [`READS_RESOURCE_ATTRIBUTES`]. Keep the three lists in step with `ingest.rs`
/// (`ffi/tests/it/select_differential.rs` checks that a batch cut down to them gives the same
/// outcome, telemetry, diagnostics and tick output).
pub const READS_METRICS: &[&str] = &[
    ingero_wire::metric::HEALTH_SCORE,
    ingero_wire::metric::STRAGGLER_EVENT,
];

/// The only resource attributes `process` reads (the C ABI decodes only these).
pub const READS_RESOURCE_ATTRIBUTES: &[&str] = &[
    ingero_wire::resource::CLUSTER_ID,
    ingero_wire::resource::NODE_ID,
];

/// The only data-point attributes `process` reads, on the points of [`READS_METRICS`] (the
/// C ABI decodes only these).
pub const READS_POINT_ATTRIBUTES: &[&str] = &[
    ingero_wire::attr::NODE_STATE,
    ingero_wire::attr::CGROUP_PATH_HASH,
    ingero_wire::attr::CAUSAL_CHAIN_ID,
    ingero_wire::attr::CAUSAL_CHAINS,
];

/// Decode, validate and build a processor from its config subtree (`null` = defaults).
pub fn create(cfg: &component::ConfigValue) -> Result<IngeroProcessor, component::ConfigErrors> {
    let cfg: IngeroConfig = component::config::decode(cfg)?;
    IngeroProcessor::new(cfg)
}
