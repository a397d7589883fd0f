//! Component factories and their metadata: each component crate declares, in one place, its
//! type name, stability per signal and how to build an instance from config (the otelcol
//! `metadata.yaml` + `NewFactory` idea). A host is assembled from a set of factories; its
//! `components` listing, config validation and the C ABI's type list come from them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::exporter::Exporter;
use crate::{ComponentId, ConfigErrors, ConfigValue, Extension, Processor, Stability};

/// What a component is in a pipeline config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Receiver,
    Processor,
    Exporter,
    Extension,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Receiver,
        Kind::Processor,
        Kind::Exporter,
        Kind::Extension,
    ];

    /// `receiver`, `processor`, ... (error messages).
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Receiver => "receiver",
            Kind::Processor => "processor",
            Kind::Exporter => "exporter",
            Kind::Extension => "extension",
        }
    }

    /// The config section (`receivers`, `processors`, ...).
    pub fn section(self) -> &'static str {
        match self {
            Kind::Receiver => "receivers",
            Kind::Processor => "processors",
            Kind::Exporter => "exporters",
            Kind::Extension => "extensions",
        }
    }
}

/// One component type: the facts otelcol keeps in `metadata.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    pub kind: Kind,
    /// Canonical type name in configs.
    pub type_name: &'static str,
    /// Other names accepted in configs (otelcol's renamed types).
    pub aliases: &'static [&'static str],
    /// Stability per signal, (metrics, traces, logs); `None`: signal not supported. An
    /// extension has one stability, in the first slot.
    pub stability: [Option<Stability>; 3],
    /// Where it lives (crate or path), for the `components` listing.
    pub module: &'static str,
    /// At most one instance may run in a process (two would overwrite each other's state,
    /// e.g. two threshold publishers).
    pub singleton: bool,
    /// The host serves this component's listeners and owns their `tls` block: the host
    /// takes `tls` out of the config before the factory sees it.
    pub host_tls: bool,
    /// One line on what it does: the README component table and the generated files
    /// (`cargo run -p ingero-fleet --example generate`) take it from here.
    pub description: &'static str,
    /// `Some(reads)`: a processor whose `process` never changes the batch and reads only
    /// `reads` of it. A host may then decode only that and keep its own bytes (the C ABI
    /// does); `None`: no such promise.
    pub reads: Option<Reads>,
}

/// What a pass-through processor's `process` reads of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Names of the metrics it reads; the others are skipped.
    pub metrics: &'static [&'static str],
    /// Resource attribute keys it reads.
    pub resource_attributes: &'static [&'static str],
    /// Data-point attribute keys it reads on the gauge and sum points of `metrics`.
    pub point_attributes: &'static [&'static str],
}

impl Reads {
    /// Nothing: resources and scopes only.
    pub const NOTHING: Reads = Reads {
        metrics: &[],
        resource_attributes: &[],
        point_attributes: &[],
    };
}

impl Metadata {
    /// Whether the type is called `name` (canonical or alias).
    pub fn is_named(&self, name: &str) -> bool {
        self.type_name == name || self.aliases.contains(&name)
    }

    /// The stability of an extension, or of a component's metrics signal.
    pub fn first_stability(&self) -> Option<Stability> {
        self.stability[0]
    }
}

/// A processor built from config, with how often the host ticks it.
pub struct CreatedProcessor {
    pub processor: Arc<dyn Processor>,
    /// Tick period (never zero: a factory whose component does not tick returns a second).
    pub tick_interval: Duration,
}

impl CreatedProcessor {
    /// A built processor ticked every `tick_interval`; zero (a component that does not
    /// tick) becomes one second, so the host's timer never spins.
    pub fn new(processor: impl Processor + 'static, tick_interval: Duration) -> Self {
        CreatedProcessor {
            processor: Arc::new(processor),
            tick_interval: if tick_interval.is_zero() {
                Duration::from_secs(1)
            } else {
                tick_interval
            },
        }
    }
}

impl fmt::Debug for CreatedProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedProcessor")
            .field("tick_interval", &self.tick_interval)
            .finish_non_exhaustive()
    }
}

/// Builds processors of one type.
pub trait ProcessorFactory: Send + Sync {
    fn metadata(&self) -> &'static Metadata;
    /// Decode and validate `cfg` (`null` = defaults) and build an instance (no I/O).
    fn create(&self, cfg: &ConfigValue) -> Result<CreatedProcessor, ConfigErrors>;
}

/// Builds extensions of one type.
pub trait ExtensionFactory: Send + Sync {
    fn metadata(&self) -> &'static Metadata;
    /// Decode and validate `cfg` (`null` = defaults) and build an instance (no I/O).
    fn create(
        &self,
        id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Extension>, ConfigErrors>;
}

/// Builds exporters of one type a distribution brings (a host's own exporters are its
/// built-ins). The exporter's I/O starts in [`Exporter::start`], not here.
pub trait ExporterFactory: Send + Sync {
    fn metadata(&self) -> &'static Metadata;
    /// Decode and validate `cfg` (`null` = defaults) and build an instance (no I/O).
    fn create(
        &self,
        id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Exporter>, ConfigErrors>;
}

impl fmt::Debug for dyn ExporterFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExporterFactory({})", self.metadata().type_name)
    }
}

impl fmt::Debug for dyn ProcessorFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessorFactory({})", self.metadata().type_name)
    }
}

impl fmt::Debug for dyn ExtensionFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExtensionFactory({})", self.metadata().type_name)
    }
}
