//! provider-processor's integration tests, one binary: each former `tests/*.rs` file is a
//! module here (`cargo test -p provider-processor --test it reload::` runs one of them).

mod common;

mod conformance;
mod examples;
mod processor;
mod reload;
