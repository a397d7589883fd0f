//! Health: the pure algorithms that turn raw signals into a score, a node state, a
//! detection mode and a straggler classification (spec section 3 and 4.1, 2.3).
//!
//! Nothing here does I/O or reads a clock: every function takes `now`. The glue that runs
//! one tick lives in [`core`].

pub mod baseline;
pub mod classifier;
pub mod core;
pub mod ema;
pub mod mode;
pub mod persist;
pub mod score;
pub mod state;
pub mod threshold;

use serde::{Deserialize, Serialize};

/// The four signals, in the order and spelling the persisted baseline uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SignalSet {
    /// Raw observation: CUDA kernel launches per second. Signal: ratio to the baseline.
    #[serde(rename = "Throughput")]
    pub throughput: f64,
    /// Fraction of wall time spent inside CUDA calls per GPU, in [0, 1].
    #[serde(rename = "Compute")]
    pub compute: f64,
    /// Free fraction of GPU memory (host memory without NVML), in [0, 1].
    #[serde(rename = "Memory")]
    pub memory: f64,
    /// Idle fraction of host CPU, in [0, 1].
    #[serde(rename = "CPU")]
    pub cpu: f64,
}

impl SignalSet {
    pub const fn new(throughput: f64, compute: f64, memory: f64, cpu: f64) -> Self {
        SignalSet {
            throughput,
            compute,
            memory,
            cpu,
        }
    }

    /// The values with their names, in a fixed order (throughput, compute, memory, cpu).
    pub fn named(&self) -> [(Signal, f64); 4] {
        [
            (Signal::Throughput, self.throughput),
            (Signal::Compute, self.compute),
            (Signal::Memory, self.memory),
            (Signal::Cpu, self.cpu),
        ]
    }

    pub fn map(self, f: impl Fn(f64) -> f64) -> Self {
        SignalSet::new(
            f(self.throughput),
            f(self.compute),
            f(self.memory),
            f(self.cpu),
        )
    }

    pub fn all_finite(&self) -> bool {
        self.named().iter().all(|(_, v)| v.is_finite())
    }
}

/// One of the four signals. Its wire name is the `dominant_signal` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Throughput,
    Compute,
    Memory,
    Cpu,
}

impl Signal {
    pub const fn as_str(self) -> &'static str {
        match self {
            Signal::Throughput => "throughput",
            Signal::Compute => "compute",
            Signal::Memory => "memory",
            Signal::Cpu => "cpu",
        }
    }
}
