//! Straggler classification.
//!
//! Two rules, chosen by `health.classifier`:
//!
//! - `cusum` (default): Fleet's persistence-aware rule, the very code Fleet's `ingero`
//!   processor runs server-side ([`ingero_stats::cusum::ShortfallCusum`], same defaults:
//!   drift 0.5, decision 4.0, clear margin 1.0, clear hold-off 10 ticks). The shortfall
//!   below the threshold is measured in units of `sigma = max(1.4826 * 0.01, own noise)`:
//!   the first term is Fleet's smallest robust sigma (its default MAD floor), the second
//!   this node's own score noise (a robust running estimate, fed only by samples at or
//!   above the threshold so a slowdown cannot widen it). A single sample 4.5 sigmas below
//!   the threshold is a full sample of evidence; the agent needs two of them (or more,
//!   shallower ones) before it flags itself ([`AGENT_EVIDENCE`]): one node's own samples
//!   cannot tell within hours whether its noise has heavy tails (a deep healthy sample
//!   comes a few times in ten thousand under Student-t tails), so it takes the rule that
//!   stays quiet under them. Fleet, which sees the whole cluster's samples, measures the
//!   tails and keeps one-sample detection where they are light. One-tick dips drain.
//!   Recovery: on the first tick at least one sigma above the threshold (`clear_margin`),
//!   unless the node fell again within 10 ticks of its last clear (`clear_holdoff`); else
//!   when the sum is back at 0.
//!   Shallow drops: beside that sum the rule keeps Fleet's shallow-drop sum
//!   ([`ingero_stats::cusum`], "Shallow drops"), on the residual against where this
//!   node usually sits relative to the threshold: `gap`, a running mean of `score -
//!   threshold` learned from samples that are not evidence of a drop. A node that falls
//!   alone moves away from the threshold and accumulates; a cohort that moves together
//!   moves the threshold with it. The spread is the node's own score noise, floored as
//!   Fleet floors a cohort's (`SHALLOW_MIN_GAP`). The gap is learned afresh after
//!   [`SHALLOW_WARMUP`] samples whenever the threshold jumps (a switch between Fleet's and
//!   the local threshold).
//! - `one-sample` (the spec's rule, 4.1): straggler when `score + eps < threshold`, healthy
//!   again at `score + eps >= threshold + h`. One sample flips either way.

use ingero_stats::cusum::{
    CusumParams, MIN_SIGMA, SHALLOW_MIN_GAP, SHALLOW_REFERENCE, ShortfallCusum,
};

use super::{Signal, SignalSet};

pub const DEFAULT_HYSTERESIS: f64 = 0.02;
/// Samples at the single-sample depth the agent's `cusum` rule needs before it flags
/// itself (`CusumParams::evidence`).
pub const AGENT_EVIDENCE: u8 = 2;
pub const EPSILON: f64 = 1e-9;

#[derive(Debug, Clone)]
pub struct Classifier {
    hysteresis: f64,
    straggler: bool,
}

/// One classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub straggler: bool,
    /// The verdict differs from the previous one.
    pub changed: bool,
}

impl Verdict {
    /// Straggler ticks emit every time; a recovery emits once, on its edge.
    pub fn should_emit(&self) -> bool {
        self.straggler || self.changed
    }
}

/// Fleet's smallest robust sigma: `1.4826 * threshold.mad_floor` at its default.
pub const SIGMA_FLOOR: f64 = ingero_stats::MAD_SCALE * ingero_stats::DEFAULT_MAD_FLOOR;
/// Weight of a new sample in the running score level and absolute-deviation estimates.
pub const NOISE_ALPHA: f64 = 0.05;
/// Mean absolute deviation of a normal distribution times this is its standard deviation.
const MEAN_ABS_DEV_TO_SIGMA: f64 = 1.2533;
/// Samples of `score - threshold` the shallow-drop rule learns from before it acts.
pub const SHALLOW_WARMUP: u32 = 10;

/// Which rule classifies (`health.classifier`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    #[default]
    Cusum,
    OneSample,
}

impl Rule {
    pub const fn as_str(self) -> &'static str {
        match self {
            Rule::Cusum => "cusum",
            Rule::OneSample => "one-sample",
        }
    }
}

/// The persistence-aware rule: Fleet's CUSUM with a sigma this node can know.
#[derive(Debug, Clone)]
pub struct CusumClassifier {
    params: CusumParams,
    cusum: ShortfallCusum,
    level: Option<f64>,
    abs_dev: f64,
    /// Where this node usually sits above the threshold (`score - threshold`).
    gap: f64,
    /// Samples the gap learned from since it (re)started (saturating).
    gap_samples: u32,
    /// The threshold of the last classification.
    last_threshold: Option<f64>,
}

impl Default for CusumClassifier {
    fn default() -> Self {
        CusumClassifier::with_evidence(AGENT_EVIDENCE)
    }
}

impl CusumClassifier {
    /// Needing `evidence` samples at the single-sample depth (1: one deep sample flags).
    pub fn with_evidence(evidence: u8) -> Self {
        CusumClassifier {
            params: CusumParams::DEFAULT.with_evidence(evidence),
            cusum: ShortfallCusum::default(),
            level: None,
            abs_dev: 0.0,
            gap: 0.0,
            gap_samples: 0,
            last_threshold: None,
        }
    }

    /// The spread the shallow-drop residual is measured in: this node's own score noise,
    /// floored as Fleet floors a cohort's spread.
    pub fn shallow_spread(&self) -> f64 {
        let level = self.level.unwrap_or(0.0).abs();
        (MEAN_ABS_DEV_TO_SIGMA * self.abs_dev)
            .max(SHALLOW_MIN_GAP * level / SHALLOW_REFERENCE)
            .max(MIN_SIGMA)
    }

    /// The sigma the shortfall is measured in.
    pub fn sigma(&self) -> f64 {
        (MEAN_ABS_DEV_TO_SIGMA * self.abs_dev).max(SIGMA_FLOOR)
    }

    pub fn is_straggler(&self) -> bool {
        self.cusum.is_straggler()
    }

    pub fn classify(&mut self, score: f64, threshold: f64) -> Verdict {
        let was = self.cusum.is_straggler();
        let spread = self.shallow_spread();
        // A jump of the threshold (Fleet's and the local one swapped) restarts the gap.
        if self
            .last_threshold
            .is_some_and(|t| (threshold - t).abs() > SHALLOW_REFERENCE * spread)
        {
            self.gap_samples = 0;
        }
        self.last_threshold = Some(threshold);
        let above = score - threshold;
        let r = if self.gap_samples >= SHALLOW_WARMUP {
            (self.gap - above) / spread
        } else {
            f64::NEG_INFINITY
        };
        let sigma = self.sigma().max(MIN_SIGMA);
        self.cusum
            .observe_zr(&self.params, (threshold - score) / sigma, r);
        // Learn the gap from samples that are not evidence of a drop, while not flagged.
        if above.is_finite() && !self.cusum.is_straggler() && r <= SHALLOW_REFERENCE {
            // A plain mean over the first 1 / NOISE_ALPHA samples, then the running one.
            let weight = (1.0 / f64::from(self.gap_samples.saturating_add(1))).max(NOISE_ALPHA);
            self.gap += weight * (above - self.gap);
            self.gap_samples = self.gap_samples.saturating_add(1);
        }
        // Learn the noise from samples that are not a shortfall.
        if score.is_finite() && score >= threshold {
            match self.level {
                None => self.level = Some(score),
                Some(l) => {
                    self.abs_dev += NOISE_ALPHA * ((score - l).abs() - self.abs_dev);
                    self.level = Some(l + NOISE_ALPHA * (score - l));
                }
            }
        }
        let straggler = self.cusum.is_straggler();
        Verdict {
            straggler,
            changed: straggler != was,
        }
    }
}

/// Either rule behind one interface.
#[derive(Debug, Clone)]
pub enum AnyClassifier {
    Cusum(CusumClassifier),
    OneSample(Classifier),
}

impl AnyClassifier {
    /// `evidence` applies to the `cusum` rule ([`CusumClassifier::with_evidence`]).
    pub fn new(rule: Rule, hysteresis: f64, evidence: u8) -> Self {
        match rule {
            Rule::Cusum => AnyClassifier::Cusum(CusumClassifier::with_evidence(evidence)),
            Rule::OneSample => AnyClassifier::OneSample(Classifier::new(hysteresis)),
        }
    }

    /// The `cusum` rule with its shallow-drop sum flagging at `level` (0: off).
    pub fn with_shallow_decision(self, level: f64) -> Self {
        match self {
            AnyClassifier::Cusum(mut c) => {
                c.params.shallow_decision = level;
                AnyClassifier::Cusum(c)
            }
            other => other,
        }
    }

    pub fn is_straggler(&self) -> bool {
        match self {
            AnyClassifier::Cusum(c) => c.is_straggler(),
            AnyClassifier::OneSample(c) => c.is_straggler(),
        }
    }

    pub fn classify(&mut self, score: f64, threshold: f64) -> Verdict {
        match self {
            AnyClassifier::Cusum(c) => c.classify(score, threshold),
            AnyClassifier::OneSample(c) => c.classify(score, threshold),
        }
    }

    /// The node went IDLE. `cusum` forgets the shortfall as Fleet does for a node that is
    /// not active and returns whether a straggler verdict was cleared; `one-sample` keeps
    /// its verdict (the spec's agent) and returns false.
    pub fn reset_on_idle(&mut self) -> bool {
        match self {
            AnyClassifier::Cusum(c) => c.cusum.reset().is_some(),
            AnyClassifier::OneSample(_) => false,
        }
    }
}

impl Classifier {
    /// `hysteresis` must be in [0, 0.5) (validated by the config).
    pub fn new(hysteresis: f64) -> Self {
        Classifier {
            hysteresis,
            straggler: false,
        }
    }

    pub fn is_straggler(&self) -> bool {
        self.straggler
    }

    pub fn classify(&mut self, score: f64, threshold: f64) -> Verdict {
        let next = if self.straggler {
            score + EPSILON < threshold + self.hysteresis
        } else {
            score + EPSILON < threshold
        };
        let changed = next != self.straggler;
        self.straggler = next;
        Verdict {
            straggler: next,
            changed,
        }
    }
}

/// The signal with the largest relative drop below its baseline, or `None` ("unknown").
///
/// `current` are the score's clamped signals and `baseline` the fast baseline before this
/// tick's update. Throughput is compared as a ratio: its score signal is already
/// `raw / baseline`, so its drop is `1 - ratio`. (The Go agent compares the ratio with the
/// raw kernels/s baseline, which makes `throughput` win almost always; spec 8.3 item 6.)
/// Ties go to the first in the order throughput, compute, memory, cpu.
pub fn dominant_signal(current: &SignalSet, baseline: &SignalSet) -> Option<Signal> {
    let drop = |base: f64, cur: f64| {
        if base <= 0.0 || cur >= base {
            0.0
        } else {
            (base - cur) / base
        }
    };
    let throughput_drop = if baseline.throughput > 0.0 {
        drop(1.0, current.throughput)
    } else {
        0.0
    };
    let candidates = [
        (Signal::Throughput, throughput_drop),
        (Signal::Compute, drop(baseline.compute, current.compute)),
        (Signal::Memory, drop(baseline.memory, current.memory)),
        (Signal::Cpu, drop(baseline.cpu, current.cpu)),
    ];
    let mut best: Option<(Signal, f64)> = None;
    for (s, d) in candidates {
        if d > 0.0 && best.is_none_or(|(_, b)| d > b) {
            best = Some((s, d));
        }
    }
    best.map(|(s, _)| s)
}

/// The wire value of [`dominant_signal`].
pub fn dominant_signal_str(current: &SignalSet, baseline: &SignalSet) -> &'static str {
    dominant_signal(current, baseline).map_or("unknown", Signal::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of the shared classifier's tests (`ingero-stats`), run through the agent's wrapper
    /// with a sigma at the floor (a node without noise of its own).
    #[test]
    fn the_cusum_rule_with_one_sample_of_evidence_behaves_like_fleets() {
        let t = 0.9;
        let s = SIGMA_FLOOR;
        // decision + drift sigmas below: flagged on the first sample; a bit less: not yet.
        let mut c = CusumClassifier::with_evidence(1);
        assert_eq!(
            c.classify(t - 4.5 * s - 1e-12, t),
            Verdict {
                straggler: true,
                changed: true
            }
        );
        let mut c = CusumClassifier::with_evidence(1);
        assert!(!c.classify(t - 4.4 * s, t).straggler);
        // 1.5 sigma below: +1 per tick, flagged on the 4th sample.
        let mut c = CusumClassifier::with_evidence(1);
        let flags: Vec<bool> = (0..4)
            .map(|_| c.classify(t - 1.5 * s, t).straggler)
            .collect();
        assert_eq!(flags, [false, false, false, true]);
        // Healthy noise alternating between at the threshold and 4 sigma above never sums.
        let mut c = CusumClassifier::with_evidence(1);
        for i in 0..10_000 {
            let score = if i % 2 == 0 { t } else { t + 4.0 * s };
            assert!(!c.classify(score, t).straggler, "sample {i}");
        }
        // Recovery: from the cap (the decision level, 4), one tick at 2 sigma above the
        // threshold (the median) clears at once ...
        let mut c = CusumClassifier::with_evidence(1);
        for _ in 0..100 {
            c.classify(0.5, t);
        }
        assert_eq!(
            c.classify(t + 2.0 * s, t),
            Verdict {
                straggler: false,
                changed: true
            },
            "cleared on the first tick back at the median"
        );
        // ... while 0.6 sigma above (short of the margin) drains at -1.1 per tick: four ticks.
        let mut c = CusumClassifier::with_evidence(1);
        c.classify(0.5, t);
        let flags: Vec<bool> = (0..4)
            .map(|_| c.classify(t + 0.6 * s, t).straggler)
            .collect();
        assert_eq!(flags, [true, true, true, false]);
        // A node swinging between far below and the median: one early clear, then the
        // hold-off leaves it to the drain, which the swings never empty.
        let mut c = CusumClassifier::with_evidence(1);
        let changes = (0..200)
            .filter(|i| {
                let score = if i % 2 == 0 { 0.5 } else { t + 2.0 * s };
                c.classify(score, t).changed
            })
            .count();
        assert_eq!(changes, 3);
        assert!(c.is_straggler());
    }

    /// Scores alternating 0.5 % either side of 0.94 against a threshold 0.03 below: after
    /// the gap is learned, a drop of 4.7 % (0.044, one floored sigma below the threshold)
    /// is flagged on its third sample by the shallow-drop sum; without it, not within ten.
    #[test]
    fn a_shallow_drop_is_flagged_against_where_the_node_usually_sits() {
        let t = 0.91;
        let healthy = |i: u32| 0.94 + if i.is_multiple_of(2) { 0.005 } else { -0.005 };
        let first_flag = |shallow: f64| {
            let mut c = AnyClassifier::new(Rule::Cusum, DEFAULT_HYSTERESIS, AGENT_EVIDENCE)
                .with_shallow_decision(shallow);
            for i in 0..40 {
                assert!(!c.classify(healthy(i), t).straggler);
            }
            (1..=10).find(|_| c.classify(0.94 - 0.044, t).straggler)
        };
        assert_eq!(
            first_flag(ingero_stats::cusum::DEFAULT_SHALLOW_DECISION),
            Some(3)
        );
        assert_eq!(first_flag(0.0), None);
    }

    /// The whole cohort moving together moves Fleet's threshold with it: the residual
    /// against the learned gap stays small and nothing is flagged. Before the gap has
    /// [`SHALLOW_WARMUP`] samples the rule does not act, and a jump of the threshold
    /// restarts it.
    #[test]
    fn a_cohort_moving_together_and_a_jumping_threshold_flag_nobody() {
        let mut c = CusumClassifier::default();
        for i in 0..40 {
            let score = 0.94 + if i % 2 == 0 { 0.005 } else { -0.005 };
            assert!(!c.classify(score, 0.91).straggler);
        }
        // Everyone 4.4 % slower; Fleet's threshold follows at its EMA (0.2 a tick).
        let mut t = 0.91;
        for i in 0..40 {
            t += 0.2 * (0.866 - t);
            assert!(!c.classify(0.896, t).straggler, "tick {i}");
        }
        // The threshold jumps (a switch to the local one): the gap is learned afresh, so
        // the samples right after the jump are not measured against the old gap.
        let mut c = CusumClassifier::default();
        for _ in 0..40 {
            c.classify(0.94, 0.91);
        }
        for i in 0..(SHALLOW_WARMUP - 1) {
            assert!(!c.classify(0.9, 0.7).straggler, "sample {i}");
        }
        assert_eq!(c.gap_samples, SHALLOW_WARMUP - 1);
    }

    /// The agent's default: one sample at the single-sample depth is not enough, two
    /// consecutive ones flag; lone deep samples among healthy ones never do.
    #[test]
    fn the_agent_needs_two_deep_samples_by_default() {
        let t = 0.9;
        let s = SIGMA_FLOOR;
        let deep = t - 4.5 * s - 1e-12;
        let mut c = CusumClassifier::default();
        assert!(!c.classify(deep, t).straggler, "one deep sample");
        assert_eq!(
            c.classify(deep, t),
            Verdict {
                straggler: true,
                changed: true
            },
            "the second in a row"
        );
        // However deep, one sample counts for one.
        let mut c = CusumClassifier::default();
        assert!(!c.classify(0.0, t).straggler);
        // A lone deep sample every third tick, healthy samples (at the median) between.
        let mut c = CusumClassifier::default();
        for i in 0..3_000 {
            let score = if i % 3 == 0 { 0.0 } else { t + 2.0 * s };
            assert!(!c.classify(score, t).straggler, "sample {i}");
        }
        // 1.5 sigma below: +1 per tick, flagged on the 8th sample (twice the decision).
        let mut c = CusumClassifier::default();
        let first = (1..=20).find(|_| c.classify(t - 1.5 * s, t).straggler);
        assert_eq!(first, Some(8));
    }

    #[test]
    fn the_cusum_sigma_learns_noise_but_not_from_shortfalls() {
        let mut c = CusumClassifier::default();
        assert_eq!(c.sigma(), SIGMA_FLOOR);
        // Alternating 0.90 / 0.98 above a 0.85 threshold: mean absolute deviation 0.04.
        for i in 0..400 {
            c.classify(if i % 2 == 0 { 0.90 } else { 0.98 }, 0.85);
        }
        let learnt = c.sigma();
        assert!((learnt - 1.2533 * 0.04).abs() < 0.005, "{learnt}");
        // A long slowdown below the threshold does not widen it.
        for _ in 0..400 {
            c.classify(0.5, 0.85);
        }
        assert_eq!(c.sigma(), learnt);
        assert!(c.is_straggler());
    }

    #[test]
    fn hysteresis_band() {
        let mut c = Classifier::new(0.02);
        let v = |c: &mut Classifier, s| {
            let v = c.classify(s, 0.88);
            (v.straggler, v.changed)
        };
        assert_eq!(v(&mut c, 0.90), (false, false));
        assert_eq!(
            v(&mut c, 0.88),
            (false, false),
            "equal to the threshold is healthy"
        );
        assert_eq!(v(&mut c, 0.8799), (true, true));
        assert_eq!(
            v(&mut c, 0.89),
            (true, false),
            "inside the band stays straggler"
        );
        assert_eq!(v(&mut c, 0.8999), (true, false));
        assert_eq!(v(&mut c, 0.90), (false, true), "threshold + h recovers");
        assert_eq!(v(&mut c, 0.95), (false, false));
    }

    #[test]
    fn epsilon_absorbs_float_noise_at_the_boundary() {
        let mut c = Classifier::new(0.02);
        // 0.1 + 0.2 is 0.30000000000000004; a score a hair below the threshold is not a flip.
        assert!(!c.classify(0.3 - 1e-12, 0.1 + 0.2).straggler);
        let mut c = Classifier::new(0.0);
        assert!(c.classify(0.5, 0.6).straggler);
        assert!(
            !c.classify(0.6 - 1e-12, 0.6).straggler,
            "zero hysteresis recovers at the threshold"
        );
    }

    #[test]
    fn emission_rule() {
        let mut c = Classifier::new(0.02);
        assert!(!c.classify(0.9, 0.8).should_emit());
        assert!(c.classify(0.7, 0.8).should_emit());
        assert!(
            c.classify(0.7, 0.8).should_emit(),
            "every straggler tick emits"
        );
        assert!(
            c.classify(0.9, 0.8).should_emit(),
            "the recovery edge emits once"
        );
        assert!(!c.classify(0.9, 0.8).should_emit());
    }

    #[test]
    fn dominant_signal_is_the_largest_relative_drop() {
        let base = SignalSet::new(1000.0, 0.9, 0.8, 0.9);
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.9, 0.45, 0.8, 0.9), &base),
            "compute"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.4, 0.9, 0.8, 0.9), &base),
            "throughput"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.9, 0.2, 0.9), &base),
            "memory"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.9, 0.8, 0.3), &base),
            "cpu"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.95, 0.9, 0.9), &base),
            "unknown"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.0, 0.0, 0.0, 0.0), &SignalSet::default()),
            "unknown"
        );
        // Ties keep the first in fixed order.
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.5, 0.9, 0.4, 0.9), &base),
            "throughput"
        );
    }
}
