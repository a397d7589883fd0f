//! Everything that talks to Fleet: URLs, payloads (protobuf and the spec's JSON), the HTTP
//! transport (TLS, mTLS, bearer token), the push client, the GET poller and cloud-provider
//! detection. The payloads are [`ingero_agent_core`]'s, re-exported here.

pub mod client;
pub mod poller;
pub mod provider;
pub mod transport;
pub mod url;

pub use ingero_agent_core::{json, payload};
