//! Names of everything the agent emits.
//!
//! OTLP metric and attribute names are the shared wire names of `ingero_wire`; the
//! Prometheus names of the sink and the structured log messages operators match on are
//! spelled here.

use ingero_wire::metric;

/// Metrics of every health push (spec 1.4); `NODE_INFO` only with a known GPU.
pub const HEALTH_PUSH: [&str; 10] = [
    metric::HEALTH_SCORE,
    metric::THROUGHPUT_RATIO,
    metric::COMPUTE_EFFICIENCY,
    metric::MEMORY_HEADROOM,
    metric::CPU_AVAILABILITY,
    metric::DEGRADATION_WARNING,
    metric::DETECTION_MODE,
    metric::FLEET_REACHABLE,
    metric::NODE_INFO,
    metric::NODE_WORLD_SIZE,
];

/// Cumulative per-cgroup sums, on health pushes once eBPF data exists.
pub const PER_CGROUP_SUMS: [&str; 3] = [
    metric::CUDA_KERNEL_LAUNCH_TOTAL,
    metric::CPU_STALL_NANOS_TOTAL,
    metric::CUDA_MEMCPY_BYTES_TOTAL,
];

/// The straggler-event push (spec 1.5).
pub const STRAGGLER_EVENT: &str = metric::STRAGGLER_EVENT;

/// NCCL collective points (spec 5.3); barrier wait when a synchronize of the process follows.
pub const NCCL: [&str; 3] = [
    metric::NCCL_DURATION_MS,
    metric::NCCL_BYTES,
    metric::NCCL_BARRIER_WAIT_MS,
];

/// `ingero-agent sink` Prometheus metrics (spec 4.3).
pub mod sink {
    pub const EVENTS_TOTAL: &str = "ingero_sink_events_total";
    pub const PARSE_ERRORS_TOTAL: &str = "ingero_sink_parse_errors_total";
    pub const CONNECTED: &str = "ingero_sink_connected";
    pub const LAST_EVENT_TIMESTAMP_SECONDS: &str = "ingero_sink_last_event_timestamp_seconds";
    pub const ACTIVE_STRAGGLERS: &str = "ingero_sink_active_stragglers";
    pub const DROPPED_TOTAL: &str = "ingero_sink_dropped_total";
}

/// Log messages (Info unless noted) that scripts and operators match on.
pub mod log {
    pub const STATE_TRANSITION: &str = "health state transition";
    pub const MODE_TRANSITION: &str = "detection mode transition";
    pub const STRAGGLER_TRANSITION: &str = "straggler_state transition";
    /// Warn.
    pub const DEGRADATION_WARNING: &str = "health degradation warning";
    pub const PROBES_ATTACHED: &str = "probes attached";
    pub const PROBE_TOTALS: &str = "probe totals";
}
