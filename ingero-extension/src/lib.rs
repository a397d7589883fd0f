//! `ingero_threshold`: the threshold store, the push-response header policy and the
//! threshold API of Ingero Fleet.
//!
//! # Design
//!
//! - **Store** ([`ThresholdStore`]). The `ingero` processor finds this extension through the
//!   host at `start` ([`ingero_wire::find_threshold_sink`]) and calls
//!   [`ThresholdSink::publish`](ingero_wire::ThresholdSink::publish) once per tick with every
//!   cluster it knows. A publish builds one immutable snapshot (header values and GET bodies
//!   formatted once) and swaps it in with `arc-swap`; a push-path read is an atomic load and
//!   one hash lookup and never waits for a publish. Swapped-out snapshots are freed by the
//!   next publish, never by a push request.
//! - **Header policy** ([`PushHeaders`]). `X-Ingero-Threshold` and `X-Ingero-Quorum-Met`
//!   travel together or not at all (gRPC twin: `ingero-threshold` / `ingero-quorum-met`).
//!   Values come from [`ingero_wire::ThresholdValue`], which cannot hold `0`, `NaN` or anything
//!   outside [0.1, 0.99]; they are delivered with six decimals (`0.870348`), the same text in
//!   the header and the GET body, and the header value is a static string (no reference count
//!   on the push path). A cluster with nothing computed, or unknown, gets neither header.
//! - **Cluster ids** ([`validate_cluster_id`], [`cluster_id_from_query`]). One rule everywhere:
//!   non-empty, at most 256 bytes, no control characters or line breaks; query values are
//!   percent-decoded strictly (a bad escape, invalid UTF-8 or a repeated parameter is an
//!   error). An id breaking the rule is never stored, so it can never select headers.
//! - **Routes** (socket-free, [`ThresholdExtension::route_agent`] /
//!   [`ThresholdExtension::route_admin`]): `GET /api/v1/threshold?cluster_id=ID` on the agent
//!   listener, `GET /api/v1/diagnostics[?cluster_id=ID]` on the admin listener. The host binds
//!   them to `agent_endpoint` / `admin_endpoint`.
//!
//! - **Live view** ([`view`]): `GET /view/` on the admin listener, a page embedded in the
//!   binary that polls `GET /api/v1/view?cluster_id=ID` (the cluster's summary, nodes with
//!   straggler-since, a history ring of threshold and median, and what the NCCL and provider
//!   processors registered through [`ingero_wire::view`]).
//!
//! The extension never opens sockets, spawns tasks or reads the clock (see `component`).

#![forbid(unsafe_code)]

pub mod cluster_id;
pub mod config;
pub mod extension;
pub mod factory;
pub mod listen_addr;
pub mod metrics;
pub mod routes;
pub mod store;
pub mod threshold_text;
pub mod view;

pub use cluster_id::{
    ClusterIdParam, MAX_CLUSTER_ID_LEN, cluster_id_from_query, header_cluster_id, push_cluster,
    validate_cluster_id,
};
pub use config::ThresholdExtensionConfig;
pub use extension::{ThresholdExtension, create};
pub use factory::FACTORY;
pub use listen_addr::{ListenAddr, ListenHost};
pub use routes::{
    DEFAULT_PAGE_LIMIT, DIAGNOSTICS_PATH, LISTING_FORBIDDEN, MAX_PAGE_LIMIT, Visibility,
};
pub use store::{
    COLD_START_BODY, PushHeaders, QUORUM_MET_HEADER, THRESHOLD_HEADER, ThresholdStore,
};

/// The component type name in configs (`extensions: ingero_threshold:`).
pub const TYPE: &str = "ingero_threshold";
