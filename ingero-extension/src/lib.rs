//! `ingero_threshold`: the threshold store, the push-response header policy and the
//! threshold API of Ingero Fleet.
//!
//! Work in progress: the store and header policy are in place; routes and config follow.

pub mod cluster_id;
pub mod config;
pub mod listen_addr;
pub mod metrics;
pub mod store;

pub use cluster_id::{
    ClusterIdParam, MAX_CLUSTER_ID_LEN, cluster_id_from_query, validate_cluster_id,
};
pub use store::{PushHeaders, QUORUM_MET_HEADER, THRESHOLD_HEADER, ThresholdStore};

/// The component type name in configs (`extensions: ingero_threshold:`).
pub const TYPE: &str = "ingero_threshold";
