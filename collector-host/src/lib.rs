//! `ingero-fleet`: a Rust-native OpenTelemetry collector running the Ingero components.
//!
//! The binary (`src/main.rs`) parses the CLI; this library holds everything else so
//! integration tests and the load generator can use it:
//! - [`config`]: loading (YAML/TOML, merge, `--set`, `${env:VAR}`), typed host configs,
//!   and the validated [`config::Plan`];
//! - [`receiver`]: OTLP/HTTP and OTLP/gRPC with the threshold middleware;
//! - [`pipeline`]: processors in order, exporters fan out, tick outputs re-enter;
//! - [`exporter`]: prometheus, debug, otlp, otlphttp;
//! - [`telemetry`]: otelcol self-metrics; [`metric_placement`]: which endpoint serves
//!   which component metric; [`server`]: the shared HTTP server loop; [`conn_guard`]:
//!   first-byte and idle deadlines and per-client caps on every listener;
//! - [`tls`]: rustls on the listeners, certificate reload;
//! - [`service`]: running a plan with graceful shutdown;
//! - [`auth`]: the `ingero_auth` extension (bearer tokens, scopes, audit, rate limits).

pub mod auth;
pub mod config;
pub mod conn_guard;
pub mod exporter;
pub mod metric_placement;
pub mod pipeline;
pub mod receiver;
pub mod registry;
pub mod server;
pub mod service;
pub mod telemetry;
pub mod tls;
