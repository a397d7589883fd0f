//! This crate's component metadata and factory: what a host needs to list, configure and
//! build the `ingero_threshold` extension (see `component::factory`).

use std::sync::Arc;

use component::factory::{ExtensionFactory, Kind, Metadata};
use component::{ComponentId, ConfigErrors, ConfigValue, Extension, Stability};

/// Type, stability and module of the extension. The host serves its two listeners and
/// owns their `tls` block.
pub static METADATA: Metadata = Metadata {
    kind: Kind::Extension,
    type_name: crate::TYPE,
    aliases: &[],
    stability: [Some(Stability::Beta), None, None],
    module: "ingero-extension",
    singleton: false,
    host_tls: true,
    description: "threshold store, push-response headers, `GET /api/v1/threshold`, admin diagnostics",
    reads: None,
};

/// Builds the extension from its config subtree.
#[derive(Debug, Clone, Copy)]
pub struct Factory;

/// The factory a host registers.
pub static FACTORY: Factory = Factory;

impl ExtensionFactory for Factory {
    fn metadata(&self) -> &'static Metadata {
        &METADATA
    }

    fn create(
        &self,
        _id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Extension>, ConfigErrors> {
        let ext: Arc<dyn Extension> = Arc::new(crate::create(cfg)?);
        Ok(ext)
    }
}
