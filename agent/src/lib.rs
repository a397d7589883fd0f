//! ingero-agent: the per-node agent of Ingero Fleet.
//!
//! Design notes:
//! - eBPF uprobes (C, built by `build.rs`, loaded with aya) on libcudart / libcuda / libnccl
//!   feed ring buffers; [`signals`] turns a window of events into four raw signals.
//! - [`health`] is pure: score, baselines, node state, detection mode and classification,
//!   every function taking `now`. Tests drive it with a fake clock. It lives in
//!   `ingero-agent-core` (with the payloads, NCCL points and [`timefmt`]), which `fleet-sim`
//!   shares, and is re-exported here under its old path.
//! - [`fleet`] pushes OTLP/HTTP (protobuf or the spec's JSON) to Fleet and reads the
//!   threshold from the response headers; a GET poller is the fallback.
//! - [`events_out`] is the NDJSON Unix socket for straggler events and its reference
//!   consumer (`ingero-agent sink`).
//! - [`api`] is the read-only query API over the event store (off by default); [`fanout`]
//!   asks many agents' APIs at once and measures their clocks; [`mcp`] serves both as MCP
//!   tools.
//! - [`agent`] is the glue that runs one tick and the push loop. A synthetic signal source
//!   drives exactly the same code without a GPU or root.

pub mod agent;
pub mod api;
pub mod config;
pub mod events;
pub mod events_out;
pub mod fanout;
pub mod fleet;
pub mod httpserve;
pub mod investigate;
pub mod mcp;
pub mod metrics;
pub mod nccl;
pub mod probes;
pub mod procstats;
pub mod selfmetrics;
pub mod setup;
pub mod signals;
pub mod spans;
pub mod status;
pub mod store;
pub mod tlsfiles;

pub use ingero_agent_core::{health, timefmt};

/// The agent's name as it appears in logs and the scope of its own payloads.
pub const AGENT_NAME: &str = "ingero-agent";

#[cfg(test)]
pub(crate) mod test_util;
