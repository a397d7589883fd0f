//! Per-signal baselines: a fast EMA (what is normal lately) and a hard-floor EMA (what was
//! normal over a long horizon), both bias corrected (spec 3.2).

use serde::{Deserialize, Serialize};

use super::SignalSet;
use super::ema::{bias_correct, clean_finite, ema_update};

pub const DEFAULT_FAST_ALPHA: f64 = 0.1;
pub const DEFAULT_FLOOR_ALPHA: f64 = 0.001;
pub const DEFAULT_WARNING_RATIO: f64 = 0.5;
pub const DEFAULT_FLOOR_WARMTH_MIN: f64 = 0.01;
pub const DEFAULT_WARMUP_SAMPLES: u64 = 30;
/// The only persisted-baseline schema this agent reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Tunables; the agent uses the defaults and only exposes `warmup_samples`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineConfig {
    pub fast_alpha: f64,
    pub floor_alpha: f64,
    pub warning_ratio: f64,
    pub floor_warmth_min: f64,
    pub warmup_samples: u64,
}

impl Default for BaselineConfig {
    fn default() -> Self {
        BaselineConfig {
            fast_alpha: DEFAULT_FAST_ALPHA,
            floor_alpha: DEFAULT_FLOOR_ALPHA,
            warning_ratio: DEFAULT_WARNING_RATIO,
            floor_warmth_min: DEFAULT_FLOOR_WARMTH_MIN,
            warmup_samples: DEFAULT_WARMUP_SAMPLES,
        }
    }
}

/// The raw (not bias-corrected) state, exactly as persisted (spec 3.5).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BaselineSnapshot {
    pub sample_count: u64,
    pub fast_alpha: f64,
    pub floor_alpha: f64,
    pub fast_ema: SignalSet,
    pub hard_floor: SignalSet,
}

/// Why a snapshot was not restored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestoreError {
    #[error("non-finite value in fast_ema or hard_floor")]
    NonFinite,
    #[error("negative value in fast_ema or hard_floor")]
    Negative,
    #[error(
        "alpha mismatch: snapshot fast={snap_fast} floor={snap_floor}, runtime fast={fast} floor={floor}"
    )]
    AlphaMismatch {
        snap_fast: f64,
        snap_floor: f64,
        fast: f64,
        floor: f64,
    },
}

/// The two EMAs per signal plus a sample count.
#[derive(Debug, Clone)]
pub struct Baseliner {
    cfg: BaselineConfig,
    fast: SignalSet,
    floor: SignalSet,
    samples: u64,
    warning_latch: bool,
}

/// Result of [`Baseliner::degradation_warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Degradation {
    pub warning: bool,
    /// True only on the tick the warning turned on (for a single log line).
    pub rising_edge: bool,
}

impl Baseliner {
    pub fn new(cfg: BaselineConfig) -> Self {
        Baseliner {
            cfg,
            fast: SignalSet::default(),
            floor: SignalSet::default(),
            samples: 0,
            warning_latch: false,
        }
    }

    pub fn config(&self) -> &BaselineConfig {
        &self.cfg
    }

    /// Fold one raw observation into both EMAs.
    pub fn update(&mut self, raw: SignalSet) {
        self.samples = self.samples.saturating_add(1);
        let (fa, la) = (self.cfg.fast_alpha, self.cfg.floor_alpha);
        self.fast = step(self.fast, raw, fa);
        self.floor = step(self.floor, raw, la);
    }

    /// The signals the score uses: throughput relative to the fast baseline (0 while the
    /// baseline is 0); the other three are already ratios. Call before [`Self::update`].
    pub fn signals(&self, raw: SignalSet) -> SignalSet {
        let base = self.current();
        let throughput = if base.throughput > 0.0 {
            clean_finite(raw.throughput) / base.throughput
        } else {
            0.0
        };
        SignalSet::new(throughput, raw.compute, raw.memory, raw.cpu)
    }

    /// Bias-corrected fast baseline.
    pub fn current(&self) -> SignalSet {
        correct(self.fast, self.cfg.fast_alpha, self.samples)
    }

    /// Bias-corrected hard floor.
    pub fn hard_floor(&self) -> SignalSet {
        correct(self.floor, self.cfg.floor_alpha, self.samples)
    }

    pub fn sample_count(&self) -> u64 {
        self.samples
    }

    /// After warm-up: true if any warm signal's fast baseline fell below `warning_ratio` of
    /// its hard floor. A floor below `floor_warmth_min` is not warm enough to judge.
    pub fn degradation_warning(&mut self) -> Degradation {
        if self.samples < self.cfg.warmup_samples {
            self.warning_latch = false;
            return Degradation {
                warning: false,
                rising_edge: false,
            };
        }
        let fast = self.current();
        let floor = self.hard_floor();
        let warning = fast
            .named()
            .iter()
            .zip(floor.named().iter())
            .any(|((_, f), (_, l))| {
                *l >= self.cfg.floor_warmth_min && f / l < self.cfg.warning_ratio
            });
        let rising_edge = warning && !self.warning_latch;
        self.warning_latch = warning;
        Degradation {
            warning,
            rising_edge,
        }
    }

    /// Forget everything (IDLE or STALE back to CALIBRATING).
    pub fn reset(&mut self) {
        self.fast = SignalSet::default();
        self.floor = SignalSet::default();
        self.samples = 0;
        self.warning_latch = false;
    }

    pub fn snapshot(&self) -> BaselineSnapshot {
        BaselineSnapshot {
            sample_count: self.samples,
            fast_alpha: self.cfg.fast_alpha,
            floor_alpha: self.cfg.floor_alpha,
            fast_ema: self.fast,
            hard_floor: self.floor,
        }
    }

    /// Adopt a persisted state. On error nothing changes.
    pub fn restore(&mut self, s: &BaselineSnapshot) -> Result<(), RestoreError> {
        if !s.fast_ema.all_finite() || !s.hard_floor.all_finite() {
            return Err(RestoreError::NonFinite);
        }
        let negative = |v: &SignalSet| v.named().iter().any(|(_, x)| *x < 0.0);
        if negative(&s.fast_ema) || negative(&s.hard_floor) {
            return Err(RestoreError::Negative);
        }
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        if !close(s.fast_alpha, self.cfg.fast_alpha) || !close(s.floor_alpha, self.cfg.floor_alpha)
        {
            return Err(RestoreError::AlphaMismatch {
                snap_fast: s.fast_alpha,
                snap_floor: s.floor_alpha,
                fast: self.cfg.fast_alpha,
                floor: self.cfg.floor_alpha,
            });
        }
        self.samples = s.sample_count;
        self.fast = s.fast_ema;
        self.floor = s.hard_floor;
        self.warning_latch = false;
        Ok(())
    }
}

fn step(prev: SignalSet, raw: SignalSet, alpha: f64) -> SignalSet {
    SignalSet::new(
        ema_update(prev.throughput, raw.throughput, alpha),
        ema_update(prev.compute, raw.compute, alpha),
        ema_update(prev.memory, raw.memory, alpha),
        ema_update(prev.cpu, raw.cpu, alpha),
    )
}

fn correct(raw: SignalSet, alpha: f64, t: u64) -> SignalSet {
    raw.map(|v| bias_correct(v, alpha, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(t: f64) -> SignalSet {
        SignalSet::new(t, 0.9, 0.8, 0.7)
    }

    #[test]
    fn throughput_ratio_uses_the_baseline_before_this_sample() {
        let mut b = Baseliner::new(BaselineConfig::default());
        // Empty baseline: the ratio is 0, the other signals pass through.
        assert_eq!(b.signals(obs(100.0)), SignalSet::new(0.0, 0.9, 0.8, 0.7));
        b.update(obs(100.0));
        assert!((b.current().throughput - 100.0).abs() < 1e-9);
        let s = b.signals(obs(80.0));
        assert!((s.throughput - 0.8).abs() < 1e-9, "{s:?}");
        // Folding 80 in moves the baseline: second corrected value = (0.1*80 + 0.9*10)/0.19.
        b.update(obs(80.0));
        let expected = (0.1 * 80.0 + 0.9 * 10.0) / (1.0 - 0.9f64.powi(2));
        assert!((b.current().throughput - expected).abs() < 1e-9);
    }

    #[test]
    fn degradation_warning_needs_warmup_and_a_warm_floor() {
        let cfg = BaselineConfig {
            warmup_samples: 5,
            ..BaselineConfig::default()
        };
        let mut b = Baseliner::new(cfg);
        for _ in 0..4 {
            b.update(obs(100.0));
        }
        assert!(!b.degradation_warning().warning, "before warm-up");
        b.update(obs(100.0));
        assert_eq!(
            b.degradation_warning(),
            Degradation {
                warning: false,
                rising_edge: false
            }
        );
        // A collapse drags the fast EMA below half of the (slow) floor within a few samples.
        let mut edges = 0;
        let mut last = false;
        for _ in 0..20 {
            b.update(obs(0.0));
            let d = b.degradation_warning();
            edges += usize::from(d.rising_edge);
            last = d.warning;
        }
        assert!(last, "fast={:?} floor={:?}", b.current(), b.hard_floor());
        assert_eq!(edges, 1, "the edge fires once");
    }

    #[test]
    fn a_cold_floor_never_warns() {
        let cfg = BaselineConfig {
            warmup_samples: 1,
            ..BaselineConfig::default()
        };
        let mut b = Baseliner::new(cfg);
        // Every signal below floor_warmth_min: nothing is judged.
        for _ in 0..50 {
            b.update(SignalSet::new(0.005, 0.005, 0.005, 0.005));
        }
        b.update(SignalSet::default());
        assert!(!b.degradation_warning().warning);
    }

    #[test]
    fn reset_forgets_and_restore_validates() {
        let mut b = Baseliner::new(BaselineConfig::default());
        for _ in 0..10 {
            b.update(obs(50.0));
        }
        let snap = b.snapshot();
        assert_eq!(snap.sample_count, 10);
        b.reset();
        assert_eq!(b.sample_count(), 0);
        assert_eq!(b.current(), SignalSet::default());

        let mut bad = snap;
        bad.fast_ema.cpu = f64::NAN;
        assert_eq!(b.restore(&bad), Err(RestoreError::NonFinite));
        bad = snap;
        bad.hard_floor.memory = -1.0;
        assert_eq!(b.restore(&bad), Err(RestoreError::Negative));
        bad = snap;
        bad.fast_alpha = 0.2;
        assert!(matches!(
            b.restore(&bad),
            Err(RestoreError::AlphaMismatch { .. })
        ));
        assert_eq!(b.sample_count(), 0, "a failed restore changes nothing");

        b.restore(&snap).unwrap();
        assert_eq!(b.sample_count(), 10);
        assert!((b.current().throughput - 50.0).abs() < 1e-9);
    }
}
