//! Configuration of the `ingero_threshold` extension.

/// Most clusters one publish stores; reports beyond it are dropped and counted.
pub const DEFAULT_MAX_CLUSTERS: usize = 100_000;
