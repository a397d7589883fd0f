//! Signal sources: what one tick observed, from eBPF events (real) or a script (synthetic).

pub mod cgroup;
pub mod nvml;
pub mod procfs;
pub mod synthetic;
pub mod window;

use component::Timestamp;

use crate::health::SignalSet;
pub use cgroup::{CgroupDelta, CgroupTotals};

/// One tick's observation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Raw throughput (kernel launches per second), compute, memory and CPU ratios.
    pub raw: SignalSet,
    /// Kernel launches in the signal window (idle detection).
    pub kernel_launches: i64,
    /// Per-cgroup counts since the previous sample.
    pub per_cgroup: Vec<CgroupDelta>,
}

/// Events could not be read this tick.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signal collection failed: {0}")]
pub struct CollectError(pub String);

/// Something that produces one [`Sample`] per tick.
pub trait SignalSource: Send {
    fn collect(&mut self, now: Timestamp) -> Result<Sample, CollectError>;

    /// Short name for logs and the status view.
    fn name(&self) -> &'static str;
}
