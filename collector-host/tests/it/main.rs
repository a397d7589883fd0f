//! collector-host's integration tests: one binary (each test binary links the whole
//! dependency graph). One area: `cargo test -p collector-host --test it durable_exporter::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod durable_exporter;
mod host_exporter_defaults;
mod host_metric_prefix;
mod no_ingero_components;
mod no_ingero_names;
mod otlp_json_differential;
mod otlp_proto_differential;
