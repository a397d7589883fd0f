//! fleet-prometheus's integration tests, one binary (each test binary links the whole
//! dependency graph): each area is a module. One area:
//! `cargo test -p fleet-prometheus --test it reserved_families::`. `tests/memory.rs` stays
//! a binary of its own: its counting global allocator measures the heap of the whole
//! process, which other tests' threads would change.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

mod common;

mod cluster_caps;
mod conformance;
mod consume_render;
mod expiry_limits;
mod golden;
mod histogram_summary;
mod layout_memo;
mod reserved_families;
