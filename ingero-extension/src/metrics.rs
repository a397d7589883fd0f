//! Names of everything this extension emits, and the atomic counters behind them.
//!
//! Every label set is fixed at compile time: no label value ever comes from outside data
//! (cluster ids appear in the admin JSON, never in metric labels).

/// Counter `{endpoint, code}`: requests answered by the agent and admin routes.
pub const API_REQUESTS_TOTAL: &str = "ingero_threshold_api_requests_total";
/// Gauge: clusters in the current published state (with or without a threshold).
pub const PUBLISHED_CLUSTERS: &str = "ingero_threshold_published_clusters";
/// Gauge: published clusters that have a deliverable threshold (push headers are set).
pub const CLUSTERS_WITH_THRESHOLD: &str = "ingero_threshold_clusters_with_threshold";
/// Counter `{outcome="set|absent|invalid"}`: push-path header lookups.
pub const HEADERS_TOTAL: &str = "ingero_threshold_headers_total";
/// Gauge: `computed_at` of the last publish, Unix seconds (0 before the first).
pub const LAST_PUBLISH_TIMESTAMP_SECONDS: &str = "ingero_threshold_last_publish_timestamp_seconds";
/// Counter: publishes received from the processor.
pub const PUBLISHES_TOTAL: &str = "ingero_threshold_publishes_total";
/// Counter `{reason="invalid_cluster_id|duplicate|over_cap"}`: cluster reports a publish
/// dropped instead of storing.
pub const PUBLISH_DROPPED_TOTAL: &str = "ingero_threshold_publish_dropped_total";
