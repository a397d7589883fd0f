//! nccl-processor's integration tests, one binary: each former `tests/*.rs` file is a
//! module here (`cargo test -p nccl-processor --test it traces::` runs one of them).

mod tracegen;

mod bucket_props;
mod conformance;
mod processor;
mod telemetry_families;
mod traces;
