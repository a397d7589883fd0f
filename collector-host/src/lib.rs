//! `ingero-fleet`: a Rust-native OpenTelemetry collector running the Ingero components.
//!
//! The binary (`src/main.rs`) parses the CLI; this library holds everything else so
//! integration tests and the load generator can use it:
//! - [`config`]: loading (YAML/TOML, merge, `--set`, `${env:VAR}`), typed host configs,
//!   and the validated [`config::Plan`];
//! - [`ingest`]: the transport-neutral path of an OTLP export (middlewares, pipelines,
//!   partial success);
//! - [`receiver`]: OTLP/HTTP and OTLP/gRPC, adapters over [`ingest`];
//! - [`pipeline`]: processors in order, exporters fan out, tick outputs re-enter;
//! - [`exporter`]: prometheus, debug, otlp, otlphttp;
//! - [`telemetry`]: otelcol self-metrics; [`server`]: the shared HTTP server loop;
//! - [`tls`]: rustls on the listeners, certificate reload;
//! - [`service`]: running a plan with graceful shutdown;
//! - [`auth`]: the `ingero_auth` extension (bearer tokens, scopes, audit, rate limits).

pub mod auth;
pub mod config;
pub mod exporter;
pub mod ingest;
pub mod pipeline;
pub mod receiver;
pub mod registry;
pub mod server;
pub mod service;
pub mod telemetry;
pub mod tls;
