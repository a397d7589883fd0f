//! `nccl_peer_lag`: per-rank peer lag of NCCL collectives, computed cluster-side.
//!
//! Knowing a node is slow is the start; this processor answers the next question: which
//! collective, on which rank, is how far behind. It reads the per-rank NCCL points agents
//! send (`nccl.collective.duration_ms`, spec section 5.3), gathers the points of one
//! collective instance from every rank of a communicator, and emits
//! `nccl.collective.peer_lag_ms` per rank.
//!
//! Design notes (the README has the full rules, definitions and limits):
//! - **Alignment** ([`align`]): exactly by `(cluster, comm, op_seq)` when points carry
//!   `nccl.op_seq` (this project's agent); otherwise by time bucket of `alignment.window`
//!   per `(cluster, comm, op_type)`, with skew tolerance and arrival-order repair.
//! - **Clocks** ([`clock`]): wall-clock timestamps are used as they are; monotonic
//!   (since-boot) timestamps from the Ingero agent get a per-node offset: an arrival bound
//!   (windowed minimum delivery delay), refined from the data against reference nodes,
//!   normalised against the tightest bound; lags of a node are held until it has settled.
//! - **Lag** ([`lag`]): `lag_r = t_r - median(t)` over the ranks present; positive = behind.
//! - **Completion** ([`emit`]): an instance is closed as soon as all `nranks` ranks arrived, or
//!   at the first tick after its grace period if it has a quorum; otherwise discarded and
//!   counted. Closing computes the lags, feeds the per-rank statistics and queues records.
//! - **Statistics** ([`stats`], [`report`]): rolling per-rank windows name chronic and
//!   periodic laggards for telemetry and diagnostics.
//! - **Output** ([`output`]): the batch passes through unchanged; lag points are returned by
//!   `tick` as `nccl.collective.peer_lag_ms`.
//! - **State** is per cluster ([`tracker::ClusterTracker`]) behind one mutex each; every
//!   map keyed by outside data has a cap and a drop counter ([`metrics::DropReason`]).
//! - Components never read the clock: arrival comes from `BatchContext::received_at`,
//!   expiry from the `now` handed to `tick`.

#![forbid(unsafe_code)]

pub mod align;
pub mod clock;
pub mod config;
pub mod emit;
pub mod factory;
pub mod ingest;
pub mod lag;
pub mod metrics;
pub mod output;
pub mod processor;
pub mod report;
pub mod settings;
pub mod stats;
pub mod tracker;

/// The component type name in configs (`processors: { nccl_peer_lag: ... }`).
pub const TYPE: &str = "nccl_peer_lag";

pub use factory::FACTORY;

/// The only metrics `process` reads; it never changes the batch. Hosts may hand it a batch
/// holding just these (the C ABI decodes only them). Of these metrics it reads the name,
/// the data kind and, of gauge and sum points, the timestamp and the attributes in
/// [`READS_POINT_ATTRIBUTES`]; of a resource only the attributes in
/// [`READS_RESOURCE_ATTRIBUTES`]. Keep the three lists in step with `ingest.rs` and
/// `processor.rs` (`ffi/tests/it/select_differential.rs` checks that a batch cut down to them
/// gives the same counters and tick output).
pub const READS_METRICS: &[&str] = &[
    ingero_wire::metric::NCCL_DURATION_MS,
    ingero_wire::metric::NCCL_BYTES,
    ingero_wire::metric::NCCL_BARRIER_WAIT_MS,
];

/// The only resource attributes `process` reads (the C ABI decodes only these).
pub const READS_RESOURCE_ATTRIBUTES: &[&str] = &[
    ingero_wire::resource::CLUSTER_ID,
    ingero_wire::resource::NODE_ID,
];

/// The only data-point attributes `process` reads, on the points of [`READS_METRICS`] (the
/// C ABI decodes only these).
pub const READS_POINT_ATTRIBUTES: &[&str] = &[
    ingero_wire::attr::NCCL_OP_TYPE,
    ingero_wire::attr::NCCL_COMM_ID_HASH,
    ingero_wire::attr::NCCL_RANK,
    ingero_wire::attr::NCCL_NRANKS,
    ingero_wire::attr::NCCL_OP_SEQ,
];

pub use config::NcclConfig;
pub use processor::{NcclPeerLagProcessor, create};
