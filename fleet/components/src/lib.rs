//! The component crates Ingero Fleet ships: the one list of them.
//!
//! `ingero-fleet` registers these beside the host's built-ins; the C ABI (`ingero-ffi`)
//! builds its processors through the same factories; the Go shim's component files, the
//! OCB manifest entries and the README status rows are generated from them
//! (`cargo run -p ingero-fleet --example generate`). Adding a component crate means adding
//! it here and running the generator. The list comes with the request scope the
//! components expect ([`request_scope`]: the cluster of a request and a resource).

use std::sync::Arc;

use component::factory::{ExtensionFactory, Metadata, ProcessorFactory};
use component::scope::RequestScope;

/// Processors, in the order listings show them.
pub static PROCESSORS: [&dyn ProcessorFactory; 3] = [
    &ingero_processor::FACTORY,
    &nccl_processor::FACTORY,
    &provider_processor::FACTORY,
];

/// Extensions, in the order listings show them.
pub static EXTENSIONS: [&dyn ExtensionFactory; 1] = [&ingero_extension::FACTORY];

/// The request scope Fleet's components expect of their host: a request and a resource
/// belong to a cluster (`ingero.cluster.id`, the `cluster_id` query parameter, ...).
pub fn request_scope() -> Arc<dyn RequestScope> {
    Arc::new(ingero_wire::scope::ClusterScope)
}

/// The processor factory called `name` (canonical type or alias).
pub fn processor(name: &str) -> Option<&'static dyn ProcessorFactory> {
    PROCESSORS
        .iter()
        .copied()
        .find(|f| f.metadata().is_named(name))
}

/// The extension factory called `name` (canonical type or alias).
pub fn extension(name: &str) -> Option<&'static dyn ExtensionFactory> {
    EXTENSIONS
        .iter()
        .copied()
        .find(|f| f.metadata().is_named(name))
}

/// Every shipped component's metadata: processors, then extensions.
pub fn metadata() -> impl Iterator<Item = &'static Metadata> {
    PROCESSORS
        .iter()
        .map(|f| f.metadata())
        .chain(EXTENSIONS.iter().map(|f| f.metadata()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_unique_and_found_by_name() {
        let mut names: Vec<&str> = metadata().map(|m| m.type_name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a type is listed twice");
        assert!(processor("ingero").is_some());
        assert!(processor("ingero_threshold").is_none());
        assert!(extension("ingero_threshold").is_some());
    }

    #[test]
    fn pass_through_processors_declare_what_they_read() {
        let reads = |t: &str| processor(t).map(|f| f.metadata().reads);
        assert!(
            reads("ingero")
                .flatten()
                .is_some_and(|r| !r.metrics.is_empty())
        );
        assert!(reads("nccl_peer_lag").flatten().is_some());
        // provider_lookup adds attributes and series: it must never be passed through.
        assert_eq!(reads("provider_lookup"), Some(None));
    }
}
