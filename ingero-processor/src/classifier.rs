//! Server-side straggler classification: a one-sided CUSUM on each node's shortfall below
//! its cohort's threshold, in units of the cohort's robust standard deviation.
//!
//! Per tick and active node: `z = (threshold - score) / sigma` (a healthy node sits near
//! `z = -k`, i.e. `k` sigmas above the bar), then
//!
//! ```text
//! S = clamp(S + z - drift, 0, decision)
//! healthy   -> straggler when S >= decision
//! straggler -> healthy   when S == 0
//! ```
//!
//! A single sample at least `decision + drift` sigmas below the threshold flags at once;
//! smaller shortfalls must persist (a node `z` sigmas below needs `decision / (z - drift)`
//! samples); healthy noise has a drift of about `-(k + drift)` per sample and never
//! accumulates. The cap at `decision` bounds how long a recovered node stays flagged: about
//! `decision / (k + drift)` ticks once it is back at the median (2 with the defaults), as
//! fast as the slowest single-sample detection. Hysteresis comes from the clearing rule
//! (the sum must drain to 0), not from the cap: one good sample among bad ones leaves the
//! node flagged.

use crate::config::IngeroConfig;

/// Smallest sigma the classifier divides by (a zero MAD floor with a uniform fleet).
pub const MIN_SIGMA: f64 = 1e-9;

/// CUSUM parameters, in robust standard deviations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CusumParams {
    pub drift: f64,
    pub decision: f64,
}

impl CusumParams {
    pub fn from_config(cfg: &IngeroConfig) -> Self {
        CusumParams {
            drift: cfg.classifier.drift,
            decision: cfg.classifier.decision,
        }
    }

    /// The ceiling of the cumulative sum: the decision level itself, so a recovered node
    /// drains in `decision / (k + drift)` ticks.
    pub fn cap(&self) -> f64 {
        self.decision
    }
}

/// A classification edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Entered,
    Cleared,
}

/// One node's classifier state (8 bytes: the tick keeps one per node). The sum is stored
/// as `f32`: it lives in [0, decision], where that precision is ample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShortfallCusum {
    sum: f32,
    straggler: bool,
}

impl ShortfallCusum {
    pub fn is_straggler(&self) -> bool {
        self.straggler
    }

    /// Sum 0 and not flagged: a shortfall within the drift leaves it unchanged.
    #[inline]
    pub fn at_rest(&self) -> bool {
        self.sum == 0.0 && !self.straggler
    }

    pub fn sum(&self) -> f64 {
        f64::from(self.sum)
    }

    /// Fold in one score against `threshold` with robust standard deviation `sigma`.
    pub fn observe(
        &mut self,
        p: &CusumParams,
        score: f64,
        threshold: f64,
        sigma: f64,
    ) -> Option<Transition> {
        self.observe_z(p, (threshold - score) / sigma.max(MIN_SIGMA))
    }

    /// Fold in one standardised shortfall `z = (threshold - score) / sigma`.
    #[inline]
    pub fn observe_z(&mut self, p: &CusumParams, z: f64) -> Option<Transition> {
        // At rest (sum 0, not flagged) a shortfall within the drift leaves the state as it
        // is: exactly what the general step below computes (0 + z - drift <= 0 clamps to
        // 0), without its floating-point chain. Nearly every healthy node takes this path.
        if self.at_rest() && z <= p.drift {
            return None;
        }
        let next = f64::from(self.sum) + z - p.drift;
        // NaN cannot arise from finite inputs; `max`/`min` would drop it anyway.
        let sum = next.max(0.0).min(p.cap());
        let stored = sum as f32;
        // Healthy nodes stay at 0: skipping the unchanged store keeps their cache lines clean.
        if stored != self.sum {
            self.sum = stored;
        }
        if !self.straggler && sum >= p.decision {
            self.straggler = true;
            Some(Transition::Entered)
        } else if self.straggler && sum <= 0.0 {
            self.straggler = false;
            Some(Transition::Cleared)
        } else {
            None
        }
    }

    /// Forget the node's history (not active, expired, or no threshold to compare with).
    pub fn reset(&mut self) -> Option<Transition> {
        let was = self.straggler;
        *self = ShortfallCusum::default();
        was.then_some(Transition::Cleared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: CusumParams = CusumParams {
        drift: 0.5,
        decision: 4.0,
    };

    #[test]
    fn a_large_drop_is_flagged_on_its_first_sample() {
        let mut c = ShortfallCusum::default();
        // Exactly decision + drift sigmas below: flagged.
        assert_eq!(
            c.observe(&P, 0.9 - 4.5 * 0.01, 0.9, 0.01),
            Some(Transition::Entered)
        );
        let mut c = ShortfallCusum::default();
        // A bit less: not yet.
        assert_eq!(c.observe(&P, 0.9 - 4.4 * 0.01, 0.9, 0.01), None);
        assert!(!c.is_straggler());
    }

    #[test]
    fn a_small_persistent_shortfall_accumulates() {
        let mut c = ShortfallCusum::default();
        // 1.5 sigma below the threshold: +1.0 per tick, flagged on the 4th sample.
        for i in 1..=4 {
            let t = c.observe(&P, 0.9 - 1.5 * 0.01, 0.9, 0.01);
            assert_eq!(t.is_some(), i == 4, "sample {i}");
        }
        assert!(c.is_straggler());
    }

    #[test]
    fn healthy_noise_never_accumulates() {
        let mut c = ShortfallCusum::default();
        // Alternating between 2 sigma above the median (z=-4) and just at the threshold (z=0).
        for i in 0..10_000 {
            let score = if i % 2 == 0 { 0.9 } else { 0.9 + 0.04 };
            assert_eq!(c.observe(&P, score, 0.9, 0.01), None);
        }
        assert_eq!(c.sum(), 0.0);
    }

    #[test]
    fn recovery_drains_to_zero_and_is_bounded_by_the_cap() {
        let mut c = ShortfallCusum::default();
        for _ in 0..100 {
            c.observe(&P, 0.5, 0.9, 0.01);
        }
        assert_eq!(c.sum(), P.cap(), "capped, so recovery time is bounded");
        // Back at the median (k = 2 sigma above threshold): -2.5 per tick, 4 -> 0 in 2 ticks.
        // A single good sample is not enough: hysteresis is the drain to 0.
        let mut ticks = 0;
        loop {
            ticks += 1;
            if c.observe(&P, 0.92, 0.9, 0.01) == Some(Transition::Cleared) {
                break;
            }
            assert!(c.is_straggler());
        }
        assert_eq!(ticks, 2);
    }

    #[test]
    fn reset_clears_and_reports_the_edge_once() {
        let mut c = ShortfallCusum::default();
        c.observe(&P, 0.0, 0.9, 0.01);
        assert!(c.is_straggler());
        assert_eq!(c.reset(), Some(Transition::Cleared));
        assert_eq!(c.reset(), None);
    }

    #[test]
    fn zero_sigma_does_not_produce_nan() {
        let mut c = ShortfallCusum::default();
        assert_eq!(c.observe(&P, 0.9, 0.9, 0.0), None);
        assert_eq!(c.sum(), 0.0);
        assert_eq!(c.observe(&P, 0.899, 0.9, 0.0), Some(Transition::Entered));
    }
}
