//! Ingero's wire: the names shared by the agent, Fleet and Echo, and the Fleet-specific
//! types its components exchange through the generic `component` contract.
//!
//! - the wire names (this module: [`metric`], [`resource`], [`attr`], [`http`], ...) and
//!   the Prometheus family prefixes of the distributions ([`family`]);
//! - [`cluster_id`]: the cluster and node id rules and where a push names its cluster;
//! - [`cluster_identity`]: one cluster identity per resource;
//! - [`scope`]: [`scope::ClusterScope`], the host's request scope for Fleet and Echo (the
//!   cluster of a request and of a resource);
//! - [`threshold`]: what the `ingero` processor publishes to the threshold extension
//!   ([`ThresholdSink`], found with [`find_threshold_sink`]);
//! - [`view`]: the live cluster view's sources and board ([`find_view_board`]).
//!
//! Normative source: `docs/agent-protocol.md`, the project's text of the wire contract.
//! Every metric name, attribute key, header, path and parameter that crosses the wire is
//! spelled here once; the rest of the workspace refers to these constants, never to literals.

#![forbid(unsafe_code)]

pub mod cluster_id;
pub mod cluster_identity;
pub mod scope;
pub mod threshold;
pub mod view;

pub use threshold::{ClusterReport, ThresholdSink, ThresholdValue, find_threshold_sink};
pub use view::find_view_board;

/// Metric names (OTLP, dotted).
pub mod metric {
    pub const HEALTH_SCORE: &str = "ingero.node.health_score";
    pub const THROUGHPUT_RATIO: &str = "ingero.node.throughput_ratio";
    pub const COMPUTE_EFFICIENCY: &str = "ingero.node.compute_efficiency";
    pub const MEMORY_HEADROOM: &str = "ingero.node.memory_headroom";
    pub const CPU_AVAILABILITY: &str = "ingero.node.cpu_availability";
    pub const DEGRADATION_WARNING: &str = "ingero.node.degradation_warning";
    pub const DETECTION_MODE: &str = "ingero.agent.detection_mode";
    pub const FLEET_REACHABLE: &str = "ingero.agent.fleet_reachable";
    pub const STRAGGLER_EVENT: &str = "ingero.node.straggler_event";
    pub const NODE_INFO: &str = "ingero.node.info";
    pub const NODE_WORLD_SIZE: &str = "ingero.node.world_size";
    pub const CUDA_KERNEL_LAUNCH_TOTAL: &str = "ingero.node.cuda_kernel_launch_total";
    pub const CUDA_MEMCPY_BYTES_TOTAL: &str = "ingero.node.cuda_memcpy_bytes_total";
    pub const CPU_STALL_NANOS_TOTAL: &str = "ingero.node.cpu_stall_nanos_total";
    pub const NCCL_DURATION_MS: &str = "nccl.collective.duration_ms";
    pub const NCCL_BARRIER_WAIT_MS: &str = "nccl.collective.barrier_wait_ms";
    pub const NCCL_PEER_LAG_MS: &str = "nccl.collective.peer_lag_ms";
    /// Emitted by Fleet (the `ingero` processor's tick), not by agents: int gauge 1 per
    /// current straggler node, resource `ingero.cluster.id` + `ingero.node.id`, no
    /// data-point attributes (they would become Prometheus labels).
    pub const FLEET_NODE_STRAGGLER: &str = "ingero.fleet.node.straggler";
    pub const NCCL_BYTES: &str = "nccl.collective.bytes";
}

/// Prometheus family names: how Ingero's distributions (`ingero-fleet`, `ingero-echo`) name
/// what their host and their components write on a scrape page, and what their Prometheus
/// exporter keeps off it by default.
pub mod family {
    use component::telemetry::MetricPrefix;

    use super::{attr, metric};

    /// The prefix the distributions give their host's own families
    /// (`ingero_fleet_connections_open`, `ingero_fleet_auth_requests_total`,
    /// `ingero_fleet_prometheus_series`, ...).
    pub const HOST_PREFIX: MetricPrefix = MetricPrefix::new("ingero_fleet_");

    /// Name prefixes of the families Fleet's own components write on the exporter page (the
    /// threshold processor, cost attribution, NCCL lag, provider attribution, the threshold
    /// extension). The Prometheus exporter refuses pushed data that would translate to one
    /// of them: recording rules and alerts select on these families, so no client may add
    /// series to them or change their type.
    pub const RESERVED_PREFIXES: &[&str] = &[
        "ingero_fleet_",
        "ingero_cost_",
        "ingero_nccl_",
        "ingero_provider_",
        "ingero_threshold_",
        "ingero_gpu_hourly_rate",
    ];

    /// OTLP gauges Fleet's processors put into the pipeline under a reserved family name
    /// (the `ingero` processor's straggler gauge, `ingero_fleet_node_straggler_ratio`): the
    /// Prometheus exporter stores them as data although their name is reserved.
    pub const PIPELINE_GAUGES: &[&str] = &[metric::FLEET_NODE_STRAGGLER];

    /// Attributes the distributions' Prometheus exporter leaves out of label sets when a
    /// config does not set `drop_attributes`: values the Ingero agents put on points that
    /// change with every point (the NCCL operation sequence number of each collective; the
    /// UUID, score and threshold of each straggler event; the episode id and causal chains
    /// this project's agent adds to a straggler event). As labels each would start a new
    /// series per point (or per episode): unbounded cardinality for Prometheus, and the
    /// chains are kilobytes of JSON.
    pub const DROP_ATTRIBUTES: &[&str] = &[
        attr::NCCL_OP_SEQ,
        attr::EVENT_ID,
        attr::SCORE,
        attr::THRESHOLD,
        attr::CAUSAL_CHAIN_ID,
        attr::CAUSAL_CHAINS,
    ];
}

/// Resource attribute keys.
pub mod resource {
    pub const NODE_ID: &str = "ingero.node.id";
    pub const CLUSTER_ID: &str = "ingero.cluster.id";
    pub const PROVIDER: &str = "ingero.provider";
    pub const WORLD_SIZE: &str = "ingero.world_size";
    pub const NODE_RANK: &str = "ingero.node.rank";
    /// OTel semantic conventions consulted by provider lookup.
    pub const CLOUD_PROVIDER: &str = "cloud.provider";
    pub const CLOUD_PLATFORM: &str = "cloud.platform";
    pub const HOST_TYPE: &str = "host.type";
    pub const SERVICE_NAME: &str = "service.name";
    pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
}

/// Data-point attribute keys.
pub mod attr {
    pub const NODE_STATE: &str = "ingero.node.state";
    pub const WORKLOAD_TYPE: &str = "ingero.workload_type";
    pub const DETECTION_MODE: &str = "ingero.detection_mode";
    pub const CGROUP_PATH_HASH: &str = "ingero.cgroup_path_hash";
    pub const GPU_MODEL: &str = "ingero.gpu_model";
    pub const GPU_COUNT: &str = "ingero.gpu_count";
    pub const MEMCPY_DIRECTION: &str = "ingero.memcpy.direction";
    pub const THRESHOLD: &str = "threshold";
    pub const SCORE: &str = "score";
    pub const DOMINANT_SIGNAL: &str = "dominant_signal";
    pub const EVENT_ID: &str = "ingero.event.id";
    pub const NCCL_OP_TYPE: &str = "nccl.op_type";
    pub const NCCL_COMM_ID_HASH: &str = "nccl.comm_id_hash";
    pub const NCCL_RANK: &str = "nccl.rank";
    pub const NCCL_NRANKS: &str = "nccl.nranks";
    pub const NCCL_DATATYPE: &str = "nccl.datatype";
    pub const NCCL_REDUCE_OP: &str = "nccl.reduce_op";
    pub const NCCL_PEER_RANK: &str = "nccl.peer_rank";
    /// Added by this project's agent: per-communicator operation sequence number.
    pub const NCCL_OP_SEQ: &str = "nccl.op_seq";
    /// Added by this project's agent on a straggler event of value 1 (and its detection
    /// span): one id per straggler episode, `<node id>:<episode start, Unix ms>`.
    pub const CAUSAL_CHAIN_ID: &str = "ingero.causal_chain_id";
    /// Added by this project's agent beside [`CAUSAL_CHAIN_ID`]: the episode's top causal
    /// chains as a compact JSON array (at most 3, at most 4,000 bytes).
    pub const CAUSAL_CHAINS: &str = "ingero.causal_chains";
}

/// Values of `ingero.node.state`.
pub mod state {
    pub const ACTIVE: &str = "active";
    pub const CALIBRATING: &str = "calibrating";
    pub const IDLE: &str = "idle";
}

/// Values of `ingero.detection_mode`.
pub mod mode {
    pub const NONE: &str = "none";
    pub const FLEET: &str = "fleet";
    pub const FLEET_CACHED: &str = "fleet-cached";
    pub const LOCAL_CACHED: &str = "local-cached";
    pub const LOCAL_BASELINE: &str = "local-baseline";
}

/// HTTP and gRPC names on the Fleet side of the wire.
pub mod http {
    /// Push-response header carrying the threshold (decimal in [0.1, 0.99]).
    pub const HEADER_THRESHOLD: &str = "X-Ingero-Threshold";
    /// Push-response header carrying `true` / `false`.
    pub const HEADER_QUORUM_MET: &str = "X-Ingero-Quorum-Met";
    /// gRPC response metadata twin of [`HEADER_THRESHOLD`] (lower case, as gRPC requires).
    pub const GRPC_META_THRESHOLD: &str = "ingero-threshold";
    /// gRPC response metadata twin of [`HEADER_QUORUM_MET`].
    pub const GRPC_META_QUORUM_MET: &str = "ingero-quorum-met";
    /// Request header the agent's README documents for middleware routing.
    pub const REQUEST_HEADER_CLUSTER_ID: &str = "ingero.cluster.id";
    /// Threshold GET endpoint.
    pub const THRESHOLD_API_PATH: &str = "/api/v1/threshold";
    /// Query parameter naming the cluster on pushes and on the GET endpoint.
    pub const PARAM_CLUSTER_ID: &str = "cluster_id";
    /// OTLP/HTTP paths.
    pub const OTLP_METRICS_PATH: &str = "/v1/metrics";
    pub const OTLP_TRACES_PATH: &str = "/v1/traces";
    pub const OTLP_LOGS_PATH: &str = "/v1/logs";
}

/// Bounds the agent enforces on a received threshold (spec section 2.1).
pub const THRESHOLD_MIN: f64 = 0.1;
/// Upper bound of a deliverable threshold (spec section 2.1).
pub const THRESHOLD_MAX: f64 = 0.99;
/// The constant that makes MAD a consistent estimator of a normal standard deviation.
pub const MAD_SCALE: f64 = 1.4826;
