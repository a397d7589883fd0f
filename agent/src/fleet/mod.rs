//! Everything that talks to Fleet: URLs, payloads (protobuf and the spec's JSON), the HTTP
//! transport (TLS, mTLS, bearer token), the push client, the GET poller and cloud-provider
//! detection.

pub mod client;
pub mod json;
pub mod payload;
pub mod poller;
pub mod provider;
pub mod transport;
pub mod url;
