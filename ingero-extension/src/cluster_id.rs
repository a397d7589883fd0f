//! What a cluster id may look like, and how it is read from a query string: the rule lives
//! in [`ingero_wire::cluster_id`] (the host's ingest path applies it too), re-exported here.

pub use ingero_wire::cluster_id::*;
