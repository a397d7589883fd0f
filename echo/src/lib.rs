//! `ingero-echo`: the cluster's queryable memory. A second distribution of the
//! `collector-host` library: the host's OTLP receivers (auth, TLS) feed the `echo` exporter,
//! which writes every metric point, span and log record into an embedded DuckDB database
//! (typed tables for the common questions, every attribute kept as JSON), and the
//! `echo_api` extension serves the query tools over an HTTP+JSON API (OpenAPI 3.1) and MCP.
//!
//! Design notes:
//! - One writer per data directory (`flock` on `echo.lock`); one writer thread commits
//!   many batches per transaction; a batch is acknowledged (HTTP 200 / gRPC OK) only after
//!   its commit, and a full queue is answered 503 / `UNAVAILABLE` with a retry delay
//!   ([`store`]).
//! - Readers use connections of the writer's own DuckDB instance, so they see every commit.
//! - The SQL tool runs one `SELECT` (DuckDB's parser decides) read-only, with external
//!   access, extension autoload and configuration changes off ([`sandbox`]).
//! - Scoped tokens see only their clusters; arbitrary SQL needs a token scoped to `"*"`
//!   ([`query`]).

pub mod chains;
pub mod config;
pub mod exporter;
pub mod extension;
pub mod lock;
pub mod mcp;
pub mod query;
pub mod rollup;
pub mod rows;
pub mod sandbox;
pub mod schema;
pub mod store;
pub mod telemetry;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use collector_host::cli::Distribution;
use collector_host::registry::Components;

/// The exporter's type name in configs.
pub const EXPORTER_TYPE: &str = "echo";
/// The API extension's type name in configs.
pub const API_TYPE: &str = "echo_api";

/// The config `ingero-echo` runs with no `--config`: everything on loopback.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.yaml");

/// Echo's set: the host's built-ins, the `echo` exporter and the `echo_api` extension,
/// with requests and resources scoped to clusters as in Fleet
/// ([`ingero_wire::scope::ClusterScope`]). The host's own families keep the names of
/// Ingero's distributions (`ingero_fleet_*`), and its Prometheus exporter the same
/// reserved names and default `drop_attributes` as Fleet's ([`ingero_wire::family`]).
pub fn components() -> Components {
    Components::host()
        .with_request_scope(std::sync::Arc::new(ingero_wire::scope::ClusterScope))
        .with_metric_prefix(ingero_wire::family::HOST_PREFIX)
        .with_reserved_metric_prefixes(ingero_wire::family::RESERVED_PREFIXES)
        .with_pipeline_gauges(ingero_wire::family::PIPELINE_GAUGES)
        .with_prometheus_drop_attributes(ingero_wire::family::DROP_ATTRIBUTES)
        .with_exporter(&exporter::EXPORTER_FACTORY)
        .with_extension(&extension::API_FACTORY)
}

/// `ingero-echo`: [`components`] and [`EMBEDDED_DEFAULT`].
pub fn distribution() -> Distribution {
    Distribution {
        command: "ingero-echo",
        // The Cargo version, plus the git commit in release builds (build.rs).
        version: env!("INGERO_VERSION_LINE"),
        about: "The cluster's queryable memory: OTLP into embedded DuckDB, an HTTP+JSON API and MCP",
        long_about: "Runs Ingero Echo: OTLP receivers feeding an embedded DuckDB store, and one \
                     listener with the query API (/api/v1/tools/..., /openapi.json) and MCP (/mcp). \
                     With no --config, an embedded default runs everything on loopback with the \
                     database under $INGERO_ECHO_DATA_DIR (default ./ingero-echo-data). \
                     `ingero-echo mcp [--config ...]` runs the same service and also serves MCP \
                     on stdin/stdout, stopping when stdin closes.",
        description: "Ingero Echo, the cluster's queryable memory (OTLP into DuckDB, HTTP+JSON API, MCP)",
        default_config: EMBEDDED_DEFAULT,
        components: components(),
    }
}

static STDIO_MCP: AtomicBool = AtomicBool::new(false);

fn stdio_done() -> &'static Arc<tokio::sync::Notify> {
    static N: OnceLock<Arc<tokio::sync::Notify>> = OnceLock::new();
    N.get_or_init(|| Arc::new(tokio::sync::Notify::new()))
}

/// Ask the `echo_api` extension to serve MCP on stdin/stdout too (`ingero-echo mcp`).
pub fn request_stdio_mcp() {
    STDIO_MCP.store(true, Relaxed);
}

pub(crate) fn stdio_mcp_requested() -> bool {
    STDIO_MCP.load(Relaxed)
}

pub(crate) fn stdio_closed_notify() {
    stdio_done().notify_one();
}

/// Resolves once the stdio MCP client closed stdin.
pub async fn stdio_closed() {
    stdio_done().notified().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use collector_host::config::{Plan, source};

    #[test]
    fn embedded_default_plans_with_the_echo_set() {
        let mut v = source::parse_document("embedded", EMBEDDED_DEFAULT).unwrap();
        source::expand_env(&mut v, &|_| None).unwrap();
        assert_eq!(v["exporters"]["echo"]["data_dir"], "./ingero-echo-data");
        if let Err(e) = Plan::build_with(&v, &components()) {
            panic!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn components_lists_the_echo_types() {
        let d = distribution();
        let y = d
            .components
            .components_yaml(d.command, d.description, d.version);
        let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(v["exporters"][0]["name"], "echo");
        assert!(y.contains("name: echo_api"), "{y}");
        for fleet_only in [
            "name: ingero\n",
            "name: provider_lookup\n",
            "name: nccl_peer_lag\n",
            "name: ingero_threshold\n",
        ] {
            assert!(!y.contains(fleet_only), "no Fleet component: {y}");
        }
    }
}
