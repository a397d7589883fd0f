//! Everything this processor emits (Prometheus form, through `telemetry`), declared once
//! with `component::metric_set!`, and the pipeline-internal input it reads besides the
//! agent wire names of `ingero_wire`.

/// Input produced by the `ingero` threshold processor's tick (not on the agent wire):
/// gauge, int 1 per current straggler node; resource `ingero.cluster.id`,
/// `ingero.node.id`; data-point attributes `score`, `threshold`.
pub const INPUT_FLEET_NODE_STRAGGLER: &str = ingero_wire::metric::FLEET_NODE_STRAGGLER;

pub const LABEL_CLUSTER: &str = "cluster_id";
pub const LABEL_NODE: &str = "node_id";
pub const LABEL_PROVIDER: &str = "provider";
pub const LABEL_GPU_MODEL: &str = "gpu_model";
pub const LABEL_CURRENCY: &str = "currency";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_SOURCE: &str = "source";
pub const LABEL_REASON: &str = "reason";

// Every family `telemetry` emits, declared once (name, type, unit, help, labels); the
// exposition is built from these specs, and `examples/exported-metrics.txt` lists them in
// this order.
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    /// Barrier idle spend per cluster, currency units per hour.
    COST_BARRIER_IDLE_RATE: gauge "ingero_cost_barrier_idle_rate", unit "{currency}/h",
        labels [LABEL_CLUSTER, LABEL_PROVIDER, LABEL_GPU_MODEL, LABEL_CURRENCY],
        help "GPU spend idle at NCCL barriers, currency units per hour (window average).";
    /// Average GPUs idle at NCCL barriers over the window.
    COST_BARRIER_IDLE_GPUS: gauge "ingero_cost_barrier_idle_gpus", unit "{gpu}",
        labels [LABEL_CLUSTER, LABEL_PROVIDER, LABEL_GPU_MODEL],
        help "GPUs idle at NCCL barriers on average over the window.";
    /// Cumulative barrier idle spend, currency units.
    COST_BARRIER_IDLE_TOTAL: counter "ingero_cost_barrier_idle_total", unit "{currency}",
        labels [LABEL_CLUSTER, LABEL_PROVIDER, LABEL_GPU_MODEL, LABEL_CURRENCY],
        help "GPU spend idle at NCCL barriers, currency units.";
    /// Cumulative idle GPU-seconds at barriers.
    COST_BARRIER_IDLE_GPU_SECONDS_TOTAL: counter "ingero_cost_barrier_idle_gpu_seconds_total",
        unit "s", labels [LABEL_CLUSTER, LABEL_PROVIDER, LABEL_GPU_MODEL],
        help "GPU-seconds idle at NCCL barriers.";
    /// Spend attributable to each current straggler, currency units per hour.
    COST_STRAGGLER_RATE: gauge "ingero_cost_straggler_rate", unit "{currency}/h",
        labels [LABEL_CLUSTER, LABEL_NODE, LABEL_PROVIDER, LABEL_GPU_MODEL, LABEL_CURRENCY],
        help "GPU spend held back by each current straggler, currency units per hour.";
    /// Cumulative straggler spend, currency units.
    COST_STRAGGLER_TOTAL: counter "ingero_cost_straggler_total", unit "{currency}",
        labels [LABEL_CLUSTER, LABEL_NODE, LABEL_PROVIDER, LABEL_GPU_MODEL, LABEL_CURRENCY],
        help "GPU spend held back by stragglers, currency units.";
    /// Rate per GPU-hour in use for every (provider, GPU model) of a live node.
    GPU_HOURLY_RATE: gauge "ingero_gpu_hourly_rate", unit "{currency}/h",
        labels [LABEL_PROVIDER, LABEL_GPU_MODEL, LABEL_CURRENCY],
        help "Rate per GPU-hour in use for the GPUs of live nodes.";
    /// Live nodes per cluster and provider.
    PROVIDER_NODES: gauge "ingero_provider_nodes", unit "1",
        labels [LABEL_CLUSTER, LABEL_PROVIDER],
        help "Live nodes per cluster and provider.";
    /// Current stragglers per cluster as this processor sees them.
    PROVIDER_STRAGGLERS: gauge "ingero_provider_stragglers", unit "1", labels [LABEL_CLUSTER],
        help "Current stragglers per cluster.";
    /// Rules in use.
    RULES_LOADED: gauge "ingero_provider_rules_loaded", unit "1", labels [],
        help "Operator provider rules in use.";
    /// Rules file reloads (`success`, `failure`).
    RULES_RELOAD_TOTAL: counter "ingero_provider_rules_reload_total", unit "1",
        labels [LABEL_OUTCOME],
        help "Rules file reloads by outcome.";
    /// (provider, GPU model) rates in use.
    RATES_LOADED: gauge "ingero_provider_rates_loaded", unit "1", labels [],
        help "(provider, GPU model) rates in use.";
    /// Rates file reloads (`success`, `failure`).
    RATES_RELOAD_TOTAL: counter "ingero_provider_rates_reload_total", unit "1",
        labels [LABEL_OUTCOME],
        help "Rates file reloads by outcome.";
    /// Node reports (first report, or a change of provider or model) whose GPU model has no
    /// rate, priced at the fallback; labels capped (see limits).
    UNKNOWN_GPU_MODEL_TOTAL: counter "ingero_provider_unknown_gpu_model_total", unit "1",
        labels [LABEL_PROVIDER, LABEL_GPU_MODEL],
        help "Node reports whose GPU model has no rate for its provider (priced at the fallback).";
    /// Resources tagged, by where the provider came from (`rule`, `agent`, `semconv`,
    /// `default`).
    RESOLVED_TOTAL: counter "ingero_provider_resolved_total", unit "1", labels [LABEL_SOURCE],
        help "Resources tagged with a provider, by source.";
    /// Things not kept, by reason.
    DROPPED_TOTAL: counter "ingero_provider_dropped_total", unit "1", labels [LABEL_REASON],
        help "Inputs not kept, by reason.";
}

/// Label value standing for every (provider, GPU model) beyond the unknown-model cap.
pub const OVERFLOW_LABEL: &str = "_other";

/// `reason` label values of [`DROPPED_TOTAL`] raised by the processor itself (the cost
/// ledger adds its own, see `cost::DropReason`).
pub mod reason {
    /// A resource without `ingero.cluster.id` (and no cluster on the request) carried
    /// node info, straggler or lag points.
    pub const NO_CLUSTER: &str = "no_cluster";
    /// Node info / straggler point without `ingero.node.id`.
    pub const NO_NODE: &str = "no_node";
    /// `ingero.node.info` without a usable model or count.
    pub const INVALID_NODE_INFO: &str = "invalid_node_info";
    /// `ingero.node.world_size` outside [0, 1_000_000].
    pub const INVALID_WORLD_SIZE: &str = "invalid_world_size";
    /// A peer-lag point missing a communicator, op, rank or value, or out of range.
    pub const INVALID_LAG_POINT: &str = "invalid_lag_point";
    /// `nccl.comm_id_hash` 0000000000000000 (spec 8.1 item 16: unknown communicator).
    pub const UNKNOWN_COMMUNICATOR: &str = "unknown_communicator";
    /// An `ingero.provider` (or semantic-convention) value that is not a valid id.
    pub const INVALID_PROVIDER_VALUE: &str = "invalid_provider_value";
    /// A new (provider, GPU model) pair beyond `limits.max_unknown_model_labels`.
    pub const UNKNOWN_MODEL_LABEL_CAP: &str = "unknown_model_label_cap";

    pub const ALL: &[&str] = &[
        NO_CLUSTER,
        NO_NODE,
        INVALID_NODE_INFO,
        INVALID_WORLD_SIZE,
        INVALID_LAG_POINT,
        UNKNOWN_COMMUNICATOR,
        INVALID_PROVIDER_VALUE,
        UNKNOWN_MODEL_LABEL_CAP,
    ];
}
