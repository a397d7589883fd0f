//! ingero-agent-core: the pure parts of the Ingero agent, with no eBPF, no aya and no I/O
//! besides the baseline file in [`health::persist`].
//!
//! - [`health`]: score, baselines, node state, detection mode, straggler classification and
//!   the threshold cache with its strict header/body parsing, every function taking `now`;
//! - [`payload`] / [`json`]: the exact OTLP requests the agent pushes (protobuf types and the
//!   spec's JSON rendering);
//! - [`nccl`]: NCCL collective points and their OTLP request;
//! - [`timefmt`]: RFC 3339 and HTTP dates.
//!
//! `ingero-agent` re-exports these modules under their old paths; `fleet-sim` runs thousands
//! of virtual agents on exactly this code.

pub mod health;
pub mod json;
pub mod nccl;
pub mod payload;
pub mod timefmt;

#[cfg(test)]
pub(crate) mod test_util;
