//! Fleet's end-to-end tests: one binary, one module per area (each test binary links the
//! whole dependency graph, so one binary links once). Most run the real `ingero-fleet`
//! binary and talk to it over loopback (`common`); `tls_support` makes certificates and TLS
//! clients. One area: `cargo test -p ingero-fleet --test e2e tls_config::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_support;

mod agent_protocol;
mod auth;
mod bad_input;
mod cli;
mod components;
mod conn_lifecycle;
mod file_modes;
mod generated;
mod host_header;
mod interop;
mod loadgen;
mod metric_placement;
mod overload;
mod receiver_compat;
mod replicas;
mod signals;
mod tenant_attacks;
mod tls;
mod tls_config;
mod tls_exporter;
mod view;
