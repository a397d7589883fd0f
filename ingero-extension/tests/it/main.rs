//! ingero-extension's integration tests, one binary: each former `tests/*.rs` file is a
//! module here (`cargo test -p ingero-extension --test it go_agent_model::` runs one of them).

mod concurrent_reads;
mod conformance;
mod go_agent_model;
