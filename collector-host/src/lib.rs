//! `ingero-fleet`: a Rust-native OpenTelemetry collector running the Ingero components.
//!
//! A library of collector building blocks; the `ingero-fleet` binary (`src/main.rs`) is
//! the allocator plus [`cli::main`] with Fleet's [`cli::Distribution`]:
//! - [`cli`]: `validate`, `components`, `print-config` and run, for any component set;
//! - [`registry`]: the host's built-in components plus the factories a binary picks;
//! - [`config`]: loading (YAML/TOML, merge, `--set`, `${env:VAR}`), typed host configs,
//!   and the validated [`config::Plan`];
//! - [`ingest`]: the transport-neutral path of an OTLP export (middlewares, pipelines,
//!   partial success);
//! - [`receiver`]: OTLP/HTTP and OTLP/gRPC, adapters over [`ingest`];
//! - [`pipeline`]: processors in order, exporters fan out, tick outputs re-enter;
//! - [`exporter`]: prometheus, debug, otlp, otlphttp;
//! - [`telemetry`]: otelcol self-metrics; [`metric_placement`]: which endpoint serves
//!   which component metric; [`server`]: the shared HTTP server loop; [`conn_guard`]:
//!   first-byte and idle deadlines and per-client caps on every listener;
//! - [`tls`]: rustls on the listeners, certificate reload;
//! - [`service`]: running a plan with graceful shutdown;
//! - [`auth`]: the `ingero_auth` extension (bearer tokens, scopes, audit, rate limits).

pub mod auth;
pub mod cli;
pub mod config;
pub mod conn_guard;
pub mod exporter;
pub mod ingest;
pub mod metric_placement;
pub mod pipeline;
pub mod receiver;
pub mod registry;
pub mod server;
pub mod service;
pub mod telemetry;
pub mod tls;
