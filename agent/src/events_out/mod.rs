//! Straggler events leaving the node besides OTLP: the NDJSON remediation socket and its
//! reference consumer.

pub mod messages;
pub mod sink;
pub mod uds;
