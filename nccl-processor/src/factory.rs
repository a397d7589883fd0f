//! This crate's component metadata and factory: what a host needs to list, configure and
//! build the `nccl_peer_lag` processor (see `component::factory`).

use component::factory::{CreatedProcessor, Kind, Metadata, ProcessorFactory, Reads};
use component::{ConfigErrors, ConfigValue, Stability};

/// Type, stability and module of the processor.
pub static METADATA: Metadata = Metadata {
    kind: Kind::Processor,
    type_name: crate::TYPE,
    aliases: &[],
    stability: [Some(Stability::Alpha), None, None],
    module: "nccl-processor",
    singleton: false,
    host_tls: false,
    description: "per-rank NCCL peer lag with bucket skew tolerance",
    reads: Some(Reads {
        metrics: crate::READS_METRICS,
        resource_attributes: crate::READS_RESOURCE_ATTRIBUTES,
        point_attributes: crate::READS_POINT_ATTRIBUTES,
    }),
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
