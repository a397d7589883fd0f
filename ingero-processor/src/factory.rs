//! This crate's component metadata and factory: what a host needs to list, configure and
//! build the `ingero` processor (see `component::factory`).

use component::factory::{CreatedProcessor, Kind, Metadata, ProcessorFactory, Reads};
use component::{ConfigErrors, ConfigValue, Stability};

/// Type, stability and module of the processor.
pub static METADATA: Metadata = Metadata {
    kind: Kind::Processor,
    type_name: crate::TYPE,
    aliases: &[],
    stability: [Some(Stability::Beta), None, None],
    module: "ingero-processor",
    // One per process: two would overwrite each other's thresholds in the store.
    singleton: true,
    host_tls: false,
    description: "per-cluster MAD threshold, EMA, quorum, coverage, panic mode, cohorts, expiry, CUSUM classification",
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
        let every = p.push_interval();
        Ok(CreatedProcessor::new(p, every))
    }
}
