//! This crate's component metadata and factory: what a host needs to list, configure and
//! build the `provider_lookup` processor (see `component::factory`).

use component::factory::{CreatedProcessor, Kind, Metadata, ProcessorFactory};
use component::{ConfigErrors, ConfigValue, Stability};

/// Type, stability and module of the processor.
pub static METADATA: Metadata = Metadata {
    kind: Kind::Processor,
    type_name: crate::TYPE,
    aliases: &[],
    stability: [Some(Stability::Alpha), None, None],
    module: "provider-processor",
    singleton: false,
    host_tls: false,
    description: "provider tagging, GPU rate tables, cost of waiting",
    // It adds attributes and cost series: the batch changes.
    reads: None,
};

/// Builds the processor from its config subtree.
#[derive(Debug, Clone, Copy)]
pub struct Factory;

/// The factory a host registers.
pub static FACTORY: Factory = Factory;

impl ProcessorFactory for Factory {
    fn metadata(&self) -> &'static Metadata {
        &METADATA
    }

    fn create(&self, cfg: &ConfigValue) -> Result<CreatedProcessor, ConfigErrors> {
        let p = crate::create(cfg)?;
        let every = p.tick_interval();
        Ok(CreatedProcessor::new(p, every))
    }
}
