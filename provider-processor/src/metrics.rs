//! Names of everything this processor emits (Prometheus form, through `telemetry`), and
//! the pipeline-internal input it reads besides the agent wire names of `ingero_wire`.

/// Input produced by the `ingero` threshold processor's tick (not on the agent wire):
/// gauge, int 1 per current straggler node; resource `ingero.cluster.id`,
/// `ingero.node.id`; data-point attributes `score`, `threshold`.
pub const INPUT_FLEET_NODE_STRAGGLER: &str = ingero_wire::metric::FLEET_NODE_STRAGGLER;

/// Barrier idle spend per cluster, currency units per hour.
/// Labels: cluster_id, provider, gpu_model, currency.
pub const COST_BARRIER_IDLE_RATE: &str = "ingero_cost_barrier_idle_rate";
/// Average GPUs idle at NCCL barriers over the window. Labels: cluster_id, provider,
/// gpu_model.
pub const COST_BARRIER_IDLE_GPUS: &str = "ingero_cost_barrier_idle_gpus";
/// Cumulative barrier idle spend, currency units. Labels: cluster_id, provider, gpu_model,
/// currency.
pub const COST_BARRIER_IDLE_TOTAL: &str = "ingero_cost_barrier_idle_total";
/// Cumulative idle GPU-seconds at barriers. Labels: cluster_id, provider, gpu_model.
pub const COST_BARRIER_IDLE_GPU_SECONDS_TOTAL: &str = "ingero_cost_barrier_idle_gpu_seconds_total";
/// Spend attributable to each current straggler, currency units per hour.
/// Labels: cluster_id, node_id, provider, gpu_model, currency.
pub const COST_STRAGGLER_RATE: &str = "ingero_cost_straggler_rate";
/// Cumulative straggler spend, currency units. Same labels as the rate.
pub const COST_STRAGGLER_TOTAL: &str = "ingero_cost_straggler_total";
/// Rate per GPU-hour in use for every (provider, GPU model) of a live node.
/// Labels: provider, gpu_model, currency.
pub const GPU_HOURLY_RATE: &str = "ingero_gpu_hourly_rate";
/// Live nodes per cluster and provider. Labels: cluster_id, provider.
pub const PROVIDER_NODES: &str = "ingero_provider_nodes";
/// Current stragglers per cluster as this processor sees them. Labels: cluster_id.
pub const PROVIDER_STRAGGLERS: &str = "ingero_provider_stragglers";
/// Rules in use.
pub const RULES_LOADED: &str = "ingero_provider_rules_loaded";
/// Rules file reloads. Labels: outcome (`success`, `failure`).
pub const RULES_RELOAD_TOTAL: &str = "ingero_provider_rules_reload_total";
/// (provider, GPU model) rates in use.
pub const RATES_LOADED: &str = "ingero_provider_rates_loaded";
/// Rates file reloads. Labels: outcome (`success`, `failure`).
pub const RATES_RELOAD_TOTAL: &str = "ingero_provider_rates_reload_total";
/// Node reports (first report, or a change of provider or model) whose GPU model has no
/// rate, priced at the fallback. Labels: provider, gpu_model (capped, see limits).
pub const UNKNOWN_GPU_MODEL_TOTAL: &str = "ingero_provider_unknown_gpu_model_total";
/// Resources tagged, by where the provider came from. Labels: source (`rule`, `agent`,
/// `semconv`, `default`).
pub const RESOLVED_TOTAL: &str = "ingero_provider_resolved_total";
/// Things not kept, by reason. Labels: reason.
pub const DROPPED_TOTAL: &str = "ingero_provider_dropped_total";

/// Every name above that `telemetry` emits, for documentation checks.
pub const ALL: &[&str] = &[
    COST_BARRIER_IDLE_RATE,
    COST_BARRIER_IDLE_GPUS,
    COST_BARRIER_IDLE_TOTAL,
    COST_BARRIER_IDLE_GPU_SECONDS_TOTAL,
    COST_STRAGGLER_RATE,
    COST_STRAGGLER_TOTAL,
    GPU_HOURLY_RATE,
    PROVIDER_NODES,
    PROVIDER_STRAGGLERS,
    RULES_LOADED,
    RULES_RELOAD_TOTAL,
    RATES_LOADED,
    RATES_RELOAD_TOTAL,
    UNKNOWN_GPU_MODEL_TOTAL,
    RESOLVED_TOTAL,
    DROPPED_TOTAL,
];

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
