//! The threshold state of one cohort across ticks: quorum, EMA smoothing, clamping into
//! the range agents accept, and panic mode. Pure: time comes in as an argument.
//!
//! One tick of [`CohortThreshold::update`]:
//!
//! 1. `quorum_met` = at least `statistical_min` active scores (and, when the caller says so,
//!    coverage is sufficient).
//! 2. Panic check (only with quorum and a previous threshold `T`): `below` = share of active
//!    scores strictly below `T`. Not in panic and `below >= enter_fraction` -> enter panic.
//!    In panic and `below < exit_fraction` -> leave panic. In panic for `max_duration`
//!    (non-zero) -> re-baseline: leave panic and restart the EMA from this tick's value.
//! 3. Median and MAD by selection; `raw = median - k * 1.4826 * max(MAD, mad_floor)`.
//! 4. With quorum and not in panic: `c = clamp(raw, 0.1, 0.99)`, the EMA becomes `c` on the
//!    first update, else `prev + alpha * (c - prev)`; the robust sigma is remembered with it.
//!    Otherwise the previous threshold and sigma are held unchanged.

use std::time::Duration;

use component::Timestamp;
use ingero_wire::{THRESHOLD_MAX, THRESHOLD_MIN};

use crate::config::IngeroConfig;
use crate::stats::RobustStats;

/// Panic-mode parameters (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PanicParams {
    pub enter_fraction: f64,
    pub exit_fraction: f64,
    /// Zero means "hold until the cohort recovers".
    pub max_duration: Duration,
}

/// Everything one cohort's threshold update depends on besides the scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdParams {
    pub k: f64,
    pub ema_alpha: f64,
    pub mad_floor: f64,
    pub statistical_min: u64,
    pub panic: Option<PanicParams>,
}

impl ThresholdParams {
    pub fn from_config(cfg: &IngeroConfig) -> Self {
        ThresholdParams {
            k: cfg.threshold.k,
            ema_alpha: cfg.threshold.ema_alpha,
            mad_floor: cfg.threshold.mad_floor,
            statistical_min: cfg.quorum.statistical_min,
            panic: cfg.panic.enabled.then_some(PanicParams {
                enter_fraction: cfg.panic.enter_fraction,
                exit_fraction: cfg.panic.exit_fraction,
                max_duration: cfg.panic.max_duration,
            }),
        }
    }
}

/// A panic-mode edge, for logs and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicEvent {
    Entered,
    Exited,
    /// `max_duration` elapsed: panic ended and the EMA restarted at the new level.
    Rebaselined,
}

/// The outcome of one tick for one cohort.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CohortUpdate {
    pub active: usize,
    pub stats: Option<RobustStats>,
    /// `median - k * 1.4826 * max(MAD, floor)` of this tick, before smoothing and clamping.
    pub raw_threshold: Option<f64>,
    pub quorum_met: bool,
    /// The smoothed threshold in [0.1, 0.99]; held when quorum is lost or in panic.
    /// `None` until the cohort first had quorum (cold start).
    pub threshold: Option<f64>,
    /// Robust standard deviation remembered with `threshold` (the classifier's unit).
    pub sigma: Option<f64>,
    pub panic: bool,
    /// Share of active scores below the previous threshold (evaluated only with quorum).
    pub below_fraction: Option<f64>,
    pub panic_event: Option<PanicEvent>,
}

/// Threshold state carried from tick to tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CohortThreshold {
    smoothed: Option<f64>,
    sigma: Option<f64>,
    panic_since: Option<Timestamp>,
    /// The last statistic, the seed of the next one's selection brackets (it only makes
    /// the selection cheaper: see [`RobustStats::compute_seeded`]).
    last_stats: Option<RobustStats>,
}

fn clamp_deliverable(t: f64) -> f64 {
    t.clamp(THRESHOLD_MIN, THRESHOLD_MAX)
}

impl CohortThreshold {
    /// The current smoothed threshold, if any.
    pub fn threshold(&self) -> Option<f64> {
        self.smoothed
    }

    pub fn in_panic(&self) -> bool {
        self.panic_since.is_some()
    }

    /// Run one tick over this cohort's active scores. `active_scores` is scratch: it is
    /// reordered and overwritten. `quorum_allowed` is false when the caller's extra quorum
    /// condition (coverage, if required) fails.
    pub fn update(
        &mut self,
        p: &ThresholdParams,
        active_scores: &mut [f64],
        quorum_allowed: bool,
        now: Timestamp,
    ) -> CohortUpdate {
        self.update_with(p, active_scores, quorum_allowed, now, &mut Vec::new())
    }

    /// [`Self::update`] with a selection buffer reused across ticks (same result).
    pub fn update_with(
        &mut self,
        p: &ThresholdParams,
        active_scores: &mut [f64],
        quorum_allowed: bool,
        now: Timestamp,
        scratch: &mut Vec<f64>,
    ) -> CohortUpdate {
        let active = active_scores.len();
        let quorum_met = quorum_allowed && active as u64 >= p.statistical_min;
        let mut below_fraction = None;
        let mut panic_event = None;

        if quorum_met && let (Some(pp), Some(held)) = (p.panic, self.smoothed) {
            let below = active_scores.iter().filter(|s| **s < held).count();
            let frac = below as f64 / active as f64;
            below_fraction = Some(frac);
            match self.panic_since {
                None => {
                    if frac >= pp.enter_fraction {
                        self.panic_since = Some(now);
                        panic_event = Some(PanicEvent::Entered);
                    }
                }
                Some(since) => {
                    if frac < pp.exit_fraction {
                        self.panic_since = None;
                        panic_event = Some(PanicEvent::Exited);
                    } else if !pp.max_duration.is_zero() && now.since(since) >= pp.max_duration {
                        self.panic_since = None;
                        self.smoothed = None;
                        panic_event = Some(PanicEvent::Rebaselined);
                    }
                }
            }
        }

        let stats = RobustStats::compute_seeded(active_scores, self.last_stats, scratch);
        self.last_stats = stats;
        let raw_threshold = stats.map(|s| s.raw_threshold(p.k, p.mad_floor));

        if quorum_met
            && self.panic_since.is_none()
            && let (Some(s), Some(raw)) = (stats, raw_threshold)
        {
            let c = clamp_deliverable(raw);
            let next = match self.smoothed {
                None => c,
                Some(prev) => prev + p.ema_alpha * (c - prev),
            };
            self.smoothed = Some(clamp_deliverable(next));
            self.sigma = Some(s.sigma(p.mad_floor));
        }

        CohortUpdate {
            active,
            stats,
            raw_threshold,
            quorum_met,
            threshold: self.smoothed,
            sigma: self.sigma,
            panic: self.panic_since.is_some(),
            below_fraction,
            panic_event,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::ManualClock;
    use component::time::Clock;

    fn params() -> ThresholdParams {
        ThresholdParams::from_config(&IngeroConfig::default())
    }

    fn healthy(n: usize, center: f64) -> Vec<f64> {
        // A deterministic spread of +-0.02 around `center`.
        (0..n)
            .map(|i| center + 0.02 * ((i % 5) as f64 - 2.0) / 2.0)
            .collect()
    }

    #[test]
    fn cold_start_has_no_threshold_until_quorum() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let p = params();
        let mut c = CohortThreshold::default();
        let u = c.update(&p, &mut healthy(4, 0.9), true, clock.now());
        assert!(!u.quorum_met);
        assert_eq!(u.threshold, None);
        assert!(u.stats.is_some(), "diagnostics still see the statistic");
        let u = c.update(&p, &mut [], true, clock.now());
        assert_eq!(u.threshold, None);
        assert!(u.stats.is_none());
        let u = c.update(&p, &mut healthy(5, 0.9), true, clock.now());
        assert!(u.quorum_met);
        assert_eq!(
            u.threshold, u.raw_threshold,
            "the first value initialises the EMA"
        );
    }

    #[test]
    fn quorum_boundary_is_statistical_min() {
        let p = params();
        let mut c = CohortThreshold::default();
        let now = Timestamp::from_secs(1);
        assert!(!c.update(&p, &mut healthy(4, 0.9), true, now).quorum_met);
        assert!(c.update(&p, &mut healthy(5, 0.9), true, now).quorum_met);
        assert!(
            !c.update(&p, &mut healthy(50, 0.9), false, now).quorum_met,
            "caller's extra condition vetoes quorum"
        );
    }

    #[test]
    fn lost_quorum_holds_the_last_threshold() {
        let p = params();
        let mut c = CohortThreshold::default();
        let now = Timestamp::from_secs(1);
        let t = c.update(&p, &mut healthy(10, 0.9), true, now).threshold;
        let u = c.update(&p, &mut healthy(3, 0.5), true, now);
        assert!(!u.quorum_met);
        assert_eq!(u.threshold, t);
        let u = c.update(&p, &mut [], true, now);
        assert_eq!(u.threshold, t);
    }

    #[test]
    fn ema_moves_alpha_of_the_way_each_tick() {
        let mut p = params();
        p.panic = None;
        let mut c = CohortThreshold::default();
        let now = Timestamp::from_secs(1);
        let t0 = c.update(&p, &mut [0.9; 10], true, now).threshold.unwrap();
        let u = c.update(&p, &mut [0.8; 10], true, now);
        let raw1 = u.raw_threshold.unwrap();
        let expected = t0 + 0.2 * (raw1 - t0);
        assert!((u.threshold.unwrap() - expected).abs() < 1e-12);
        // After many ticks at the new level it converges.
        let mut last = 0.0;
        for _ in 0..200 {
            last = c.update(&p, &mut [0.8; 10], true, now).threshold.unwrap();
        }
        assert!((last - raw1).abs() < 1e-9);
    }

    #[test]
    fn thresholds_are_clamped_into_what_agents_accept() {
        let mut p = params();
        p.panic = None;
        p.mad_floor = 0.0;
        let now = Timestamp::from_secs(1);
        let mut c = CohortThreshold::default();
        // Uniform perfect scores and no floor: raw 1.0 -> 0.99.
        let u = c.update(&p, &mut [1.0; 8], true, now);
        assert_eq!(u.raw_threshold, Some(1.0));
        assert_eq!(u.threshold, Some(THRESHOLD_MAX));
        // A wildly spread fleet: raw far below 0 -> 0.1 (EMA of clamped values).
        let mut c = CohortThreshold::default();
        let mut spread = vec![0.0, 0.0, 0.5, 1.0, 1.0, 0.1, 0.9];
        let u = c.update(&p, &mut spread, true, now);
        assert!(u.raw_threshold.unwrap() < THRESHOLD_MIN);
        assert_eq!(u.threshold, Some(THRESHOLD_MIN));
    }

    #[test]
    fn panic_holds_the_threshold_when_much_of_the_cohort_collapses() {
        let clock = ManualClock::new(Timestamp::from_secs(0));
        let p = params();
        let mut c = CohortThreshold::default();
        let mut good = None;
        for _ in 0..20 {
            good = c
                .update(
                    &p,
                    &mut healthy(20, 0.95),
                    true,
                    clock.advance(Duration::from_secs(10)),
                )
                .threshold;
        }
        let good = good.unwrap();
        // 8 of 20 nodes (40%) drop to 0.6: the MAD balloons and the raw threshold collapses.
        let mut degraded = healthy(20, 0.95);
        for s in degraded.iter_mut().take(8) {
            *s = 0.6;
        }
        let u = c.update(
            &p,
            &mut degraded.clone(),
            true,
            clock.advance(Duration::from_secs(10)),
        );
        assert_eq!(u.panic_event, Some(PanicEvent::Entered));
        assert!(u.panic);
        assert!(
            u.raw_threshold.unwrap() < good - 0.05,
            "the statistic collapsed"
        );
        assert_eq!(u.threshold, Some(good), "held, not followed");
        assert_eq!(u.below_fraction, Some(0.4));
        // Still degraded: held.
        let u = c.update(
            &p,
            &mut degraded.clone(),
            true,
            clock.advance(Duration::from_secs(10)),
        );
        assert!(u.panic && u.panic_event.is_none());
        assert_eq!(u.threshold, Some(good));
        // Recovery below exit_fraction (1 of 20 = 5% < 15%) ends panic and resumes the EMA.
        let mut recovered = healthy(20, 0.95);
        recovered[0] = 0.6;
        let u = c.update(
            &p,
            &mut recovered,
            true,
            clock.advance(Duration::from_secs(10)),
        );
        assert_eq!(u.panic_event, Some(PanicEvent::Exited));
        assert!(!u.panic);
        assert!((u.threshold.unwrap() - good).abs() < 0.01);
    }

    #[test]
    fn panic_enter_and_exit_boundaries_are_exact() {
        let now = Timestamp::from_secs(1);
        let p = params(); // enter 0.30, exit 0.15
        let mut c = CohortThreshold::default();
        c.update(&p, &mut [0.9; 20], true, now);
        let t = c.threshold().unwrap();
        // 5 of 20 = 25% below: no panic.
        let mut v = vec![0.9; 20];
        v[..5].fill(t - 0.2);
        assert!(!c.update(&p, &mut v, true, now).panic);
        // 6 of 20 = 30%: panic (>=).
        let mut v = vec![0.9; 20];
        v[..6].fill(t - 0.2);
        assert!(c.update(&p, &mut v, true, now).panic);
        // 3 of 20 = 15%: still panic (exit needs < 15%).
        let mut v = vec![0.9; 20];
        v[..3].fill(t - 0.2);
        assert!(c.update(&p, &mut v, true, now).panic);
        // 2 of 20 = 10%: exits.
        let mut v = vec![0.9; 20];
        v[..2].fill(t - 0.2);
        assert!(!c.update(&p, &mut v, true, now).panic);
    }

    #[test]
    fn panic_rebaselines_after_max_duration() {
        let clock = ManualClock::new(Timestamp::from_secs(0));
        let p = params(); // max_duration 300s
        let mut c = CohortThreshold::default();
        c.update(&p, &mut healthy(10, 0.95), true, clock.now());
        let good = c.threshold().unwrap();
        // The whole fleet moves to a new, lower level (a systemic slowdown that stays).
        let entered = c.update(
            &p,
            &mut healthy(10, 0.7),
            true,
            clock.advance(Duration::from_secs(10)),
        );
        assert_eq!(entered.panic_event, Some(PanicEvent::Entered));
        let u = c.update(
            &p,
            &mut healthy(10, 0.7),
            true,
            clock.advance(Duration::from_secs(299)),
        );
        assert!(u.panic, "299s in panic < 300s");
        assert_eq!(u.threshold, Some(good));
        let u = c.update(
            &p,
            &mut healthy(10, 0.7),
            true,
            clock.advance(Duration::from_secs(1)),
        );
        assert_eq!(u.panic_event, Some(PanicEvent::Rebaselined));
        assert!(!u.panic);
        assert_eq!(
            u.threshold, u.raw_threshold,
            "the EMA restarts at the new level"
        );
    }

    #[test]
    fn panic_disabled_follows_the_collapse() {
        let mut p = params();
        p.panic = None;
        let now = Timestamp::from_secs(1);
        let mut c = CohortThreshold::default();
        let good = c
            .update(&p, &mut healthy(10, 0.95), true, now)
            .threshold
            .unwrap();
        let u = c.update(&p, &mut healthy(10, 0.7), true, now);
        assert!(!u.panic);
        assert!(u.threshold.unwrap() < good);
    }

    #[test]
    fn stragglers_below_enter_fraction_do_not_move_the_threshold_much() {
        let p = params();
        let now = Timestamp::from_secs(1);
        let mut c = CohortThreshold::default();
        let good = c
            .update(&p, &mut healthy(20, 0.95), true, now)
            .threshold
            .unwrap();
        let mut v = healthy(20, 0.95);
        v[..3].fill(0.2); // 15%: not panic, the median/MAD barely move
        let u = c.update(&p, &mut v, true, now);
        assert!(!u.panic);
        assert!((u.threshold.unwrap() - good).abs() < 0.01);
    }
}
