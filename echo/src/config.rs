//! Configs of Echo's two components: the `echo` exporter (the store) and the `echo_api`
//! extension (the HTTP+JSON API and MCP listener).

use std::time::Duration;

use component::config::{AuthRef, ComponentConfig, ConfigErrors, duration};
use serde::{Deserialize, Serialize};

pub const DEFAULT_DATA_DIR: &str = "./ingero-echo-data";
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
pub const DEFAULT_MAX_SIZE_MIB: u64 = 10 * 1024;
pub const DEFAULT_RETENTION_CHECK: Duration = Duration::from_secs(60);
pub const DEFAULT_MAX_PENDING_BATCHES: usize = 256;
pub const DEFAULT_MAX_BATCHES_PER_COMMIT: usize = 64;
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
pub const DEFAULT_MEMORY_LIMIT: &str = "1GB";
pub const DEFAULT_THREADS: u32 = 2;

pub const DEFAULT_API_ENDPOINT: &str = "127.0.0.1:8090";
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
pub const DEFAULT_MAX_ROWS: usize = 10_000;
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_RESULT_BYTES: usize = 16 << 20;
pub const DEFAULT_MAX_CONCURRENT: usize = 8;
pub const DEFAULT_STRAGGLER_SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);

/// `retention` of the `echo` exporter: enforced while running by the writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Rows whose point time is older than this are deleted.
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// When the database's used blocks pass this size, the oldest rows are deleted (a
    /// tenth of the stored time range at a time) until it fits.
    pub max_size_mib: u64,
    /// How often the writer checks both.
    #[serde(with = "duration")]
    pub check_interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            max_age: DEFAULT_MAX_AGE,
            max_size_mib: DEFAULT_MAX_SIZE_MIB,
            check_interval: DEFAULT_RETENTION_CHECK,
        }
    }
}

/// `exporters.echo`: where and how the batches are stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Directory of the database file (`echo.duckdb`) and the lock file (`echo.lock`).
    pub data_dir: String,
    pub retention: RetentionConfig,
    /// Batches waiting for the writer; one more is answered 503 / `UNAVAILABLE`.
    pub max_pending_batches: usize,
    /// Batches committed together (one transaction, one WAL sync).
    pub max_batches_per_commit: usize,
    /// The retry delay a client is told when the writer is behind.
    #[serde(with = "duration")]
    pub retry_after: Duration,
    /// DuckDB `memory_limit` (e.g. `1GB`).
    pub memory_limit: String,
    /// DuckDB worker threads.
    pub threads: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: DEFAULT_DATA_DIR.to_string(),
            retention: RetentionConfig::default(),
            max_pending_batches: DEFAULT_MAX_PENDING_BATCHES,
            max_batches_per_commit: DEFAULT_MAX_BATCHES_PER_COMMIT,
            retry_after: DEFAULT_RETRY_AFTER,
            memory_limit: DEFAULT_MEMORY_LIMIT.to_string(),
            threads: DEFAULT_THREADS,
        }
    }
}

impl ComponentConfig for StoreConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        if self.data_dir.trim().is_empty() {
            e.push("data_dir", "must not be empty");
        }
        if self.retention.max_age.is_zero() {
            e.push("retention.max_age", "must be > 0");
        }
        if self.retention.max_size_mib == 0 {
            e.push("retention.max_size_mib", "must be > 0");
        }
        if self.retention.check_interval.is_zero() {
            e.push("retention.check_interval", "must be > 0");
        }
        if self.max_pending_batches == 0 {
            e.push("max_pending_batches", "must be > 0");
        }
        if self.max_batches_per_commit == 0 {
            e.push("max_batches_per_commit", "must be > 0");
        }
        if self.retry_after.is_zero() {
            e.push("retry_after", "must be > 0");
        }
        if !valid_memory_limit(&self.memory_limit) {
            e.push(
                "memory_limit",
                "must be a size such as 512MB or 2GB (digits then KB, MB, GB or TB)",
            );
        }
        if self.threads == 0 || self.threads > 256 {
            e.push("threads", "must be in [1, 256]");
        }
        e.into_result()
    }
}

/// Bytes of a `memory_limit` (`1GB`: 10^9, as DuckDB reads it); `None` when not valid.
pub fn memory_limit_bytes(s: &str) -> Option<u64> {
    if !valid_memory_limit(s) {
        return None;
    }
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let n: u64 = s.get(..digits)?.parse().ok()?;
    let unit = match s.get(digits..)?.to_ascii_uppercase().as_str() {
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => 1_000_000_000_000,
    };
    n.checked_mul(unit)
}

fn valid_memory_limit(s: &str) -> bool {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let unit = s.get(digits..).unwrap_or("").to_ascii_uppercase();
    digits > 0 && matches!(unit.as_str(), "KB" | "MB" | "GB" | "TB")
}

/// `query` of the `echo_api` extension: limits of every tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Rows one answer carries at most (`truncated: true` beyond).
    pub max_rows: usize,
    /// A query running longer is interrupted (its SQL check included).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Bytes of values one answer carries at most (about; `truncated: true` beyond).
    pub max_result_bytes: usize,
    /// Queries running at once; one more is answered 503.
    pub max_concurrent: usize,
    /// The process's resident memory (MiB) beyond which running tool calls are
    /// interrupted; 0: the store's `memory_limit` plus 512 MiB.
    pub memory_budget_mib: u64,
    /// Window of a tool call that names none.
    #[serde(with = "duration")]
    pub default_window: Duration,
    /// The time one straggler sample stands for (Fleet's and the agents' tick).
    #[serde(with = "duration")]
    pub straggler_sample_interval: Duration,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_rows: DEFAULT_MAX_ROWS,
            timeout: DEFAULT_QUERY_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            memory_budget_mib: 0,
            default_window: DEFAULT_WINDOW,
            straggler_sample_interval: DEFAULT_STRAGGLER_SAMPLE_INTERVAL,
        }
    }
}

/// `extensions.echo_api`: the HTTP+JSON API (`/api/v1/...`, `/openapi.json`) and MCP
/// (`/mcp`) on one listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    pub endpoint: String,
    /// The `echo` exporter whose store this listener serves.
    pub exporter: String,
    /// Bearer tokens (an `ingero_auth` extension); scoped tokens see their clusters only.
    pub auth: Option<AuthRef>,
    pub max_connections: usize,
    pub max_request_body_bytes: usize,
    /// `Host` header values `/mcp` accepts (DNS-rebinding guard), and the hosts a
    /// browser's `Origin` may name on `/mcp` and the tools (cross-site requests). Empty:
    /// the loopback names (`localhost`, `127.0.0.1`, `[::1]`, any port).
    pub allowed_hosts: Vec<String>,
    pub query: QueryConfig,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            endpoint: DEFAULT_API_ENDPOINT.to_string(),
            exporter: crate::EXPORTER_TYPE.to_string(),
            auth: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_request_body_bytes: DEFAULT_MAX_BODY_BYTES,
            allowed_hosts: Vec::new(),
            query: QueryConfig::default(),
        }
    }
}

impl ComponentConfig for ApiConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        if let Err(m) = component::listen_addr::ListenAddr::parse(&self.endpoint) {
            e.push("endpoint", m);
        }
        if component::ComponentId::parse(&self.exporter).is_err() {
            e.push("exporter", "must be an exporter id (type[/name])");
        }
        if self.max_connections == 0 {
            e.push("max_connections", "must be > 0");
        }
        if self.max_request_body_bytes < 1024 {
            e.push("max_request_body_bytes", "must be >= 1024");
        }
        if self.query.max_rows == 0 {
            e.push("query.max_rows", "must be > 0");
        }
        if self.query.max_result_bytes < 1024 {
            e.push("query.max_result_bytes", "must be >= 1024");
        }
        if self.query.max_concurrent == 0 {
            e.push("query.max_concurrent", "must be > 0");
        }
        if self.query.timeout.is_zero() {
            e.push("query.timeout", "must be > 0");
        }
        if self.query.default_window.is_zero() {
            e.push("query.default_window", "must be > 0");
        }
        if self.query.straggler_sample_interval.is_zero() {
            e.push("query.straggler_sample_interval", "must be > 0");
        }
        e.into_result()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use component::config::decode;

    #[test]
    fn defaults_validate() {
        StoreConfig::default().validate().unwrap();
        ApiConfig::default().validate().unwrap();
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let v = serde_json::json!({
            "data_dir": "",
            "max_pending_batches": 0,
            "memory_limit": "lots",
            "retention": {"max_age": "0s"}
        });
        let e = decode::<StoreConfig>(&v).unwrap_err();
        let all: Vec<String> = e.iter().map(|e| e.to_string()).collect();
        for key in [
            "data_dir",
            "max_pending_batches",
            "memory_limit",
            "retention.max_age",
        ] {
            assert!(all.iter().any(|m| m.starts_with(key)), "{key}: {all:?}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let v = serde_json::json!({"data_dri": "/tmp"});
        let e = decode::<StoreConfig>(&v).unwrap_err();
        assert!(e.to_string().contains("data_dri"), "{e}");
        let v = serde_json::json!({"endpoint": "127.0.0.1:1", "query": {"max_row": 1}});
        assert!(decode::<ApiConfig>(&v).is_err());
    }
}
