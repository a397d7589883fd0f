//! `ingero-stats`: the statistics Fleet and the agent share, as pure functions and plain
//! state over `f64` (no I/O, no clock, no dependency beyond `std`).
//!
//! - [`robust`]: median and median absolute deviation by selection, the MAD threshold
//!   formula (`median - k * 1.4826 * max(MAD, mad_floor)`).
//! - [`cusum`]: the persistence-aware straggler classifier (one-sided CUSUM on the shortfall
//!   below the threshold, the shallow-drop sum, the tail estimate that picks the evidence).
//!
//! Fleet's `ingero` processor maps its `threshold` and `classifier` config onto these; the
//! agent's `cusum` rule uses the same code and defaults, so a node and Fleet classify alike.

#![forbid(unsafe_code)]

pub mod cusum;
pub mod robust;

/// The constant that makes the MAD a consistent estimator of a normal standard deviation.
pub const MAD_SCALE: f64 = 1.4826;

/// Default floor under the raw MAD before it is scaled into a sigma
/// (`processors.ingero.threshold.mad_floor`): with a uniform fleet the sigma never falls
/// below `1.4826 * 0.01`.
pub const DEFAULT_MAD_FLOOR: f64 = 0.01;
