//! Straggler classification: a one-sided CUSUM on each node's shortfall below its cohort's
//! threshold, in units of the cohort's robust standard deviation. Fleet's `ingero`
//! processor runs it for every node of a cluster; the agent runs the same code on its own
//! scores.
//!
//! Per tick and active node: `z = (threshold - score) / sigma` (a healthy node sits near
//! `z = -k`, i.e. `k` sigmas above the bar), then
//!
//! ```text
//! S = clamp(S + z - drift, 0, decision)
//! healthy   -> straggler when S >= decision
//! straggler -> healthy   when S == 0
//!                        or at once when z <= -clear_margin, if the episode is "clean"
//! ```
//!
//! A single sample at least `decision + drift` sigmas below the threshold flags at once;
//! smaller shortfalls must persist (a node `z` sigmas below needs `decision / (z - drift)`
//! samples); healthy noise has a drift of about `-(k + drift)` per sample and never
//! accumulates. The cap at `decision` bounds how long a recovered node stays flagged by
//! the drain alone: about `decision / (k + drift)` ticks once it is back at the median (2
//! with the defaults).
//!
//! **Clearing at once.** A flagged node whose score is back `clear_margin` sigmas above the
//! threshold (1 with the defaults: halfway to the median, which sits about `k = 2` above)
//! clears on that tick instead of waiting for the sum to drain, and its sum restarts at 0.
//! That is the tick after the slowdown ends, or after the one whose signal window straddles
//! its end. Hysteresis has two parts:
//! - the margin: a score oscillating around the threshold, or a marginal straggler a little
//!   below it, never reaches `threshold + clear_margin * sigma` and only clears by the
//!   drain, which one bad sample among good ones refills;
//! - the hold-off: only an episode that began after at least `clear_holdoff` unflagged
//!   ticks since the previous clear (a clean record) may clear at once. A node that falls
//!   again within the hold-off (a straggler swinging between far below and well above the
//!   threshold) clears only by the drain, as without the rule, so its verdict does not
//!   follow every swing: one early clear, then the drain's hysteresis.
//!
//! Clearing at once cannot add a flagged tick: it leaves the sum at 0, never above what the
//! drain would hold, and the CUSUM step is monotone in the sum, so a node is flagged with
//! the rule only on ticks it would be flagged without it. Detection is unchanged (the rule
//! acts only on flagged nodes). What it can add is a second, separate flag where the drain
//! would have kept one long one (a new sample deep enough to flag on its own right after
//! the clear): the hold-off makes the next episode drain.
//!
//! **Evidence.** Under heavy-tailed noise one healthy sample now and then lands deeper than
//! `decision + drift` sigmas below the threshold, and a rule that flags on one such sample
//! flags healthy nodes. With `evidence = n` a single sample adds at most `decision` to the
//! sum (its shortfall is clipped at `decision + drift`) and a flag needs `n * decision`
//! (which is also the cap): `n` consecutive samples each as deep as one sample had to be,
//! or more, shallower ones. `evidence = 1` is the rule above, unchanged. Fleet picks the
//! evidence per cluster from the noise it sees ([`TailEstimate`]); a deep sample that is
//! back above that depth on the node's next sample (a "lone deep sample") is what it counts.
//!
//! **Shallow drops.** The sigma above is floored (`threshold.mad_floor`), and the threshold
//! sits `k` of those sigmas below the median, so a node a few percent slower than its peers
//! is barely below the threshold even where the cohort's real spread is much narrower: a
//! 5 % drop among nodes with 1 % noise needed eight or more samples. Beside the sum above,
//! each node keeps a second one on its residual against the cohort's median in units of
//! the cohort's own spread (`s = max(1.4826 * MAD, SHALLOW_MIN_GAP * median /
//! SHALLOW_REFERENCE)`, not floored by `mad_floor`):
//!
//! ```text
//! r = (median - score) / s
//! x = min(r, SHALLOW_CAP) - SHALLOW_REFERENCE
//! R = clamp(R + (x if x >= 0, else SHALLOW_DRAIN * x), 0, shallow_decision)
//! ```
//!
//! and a node is flagged when either sum reaches its level. A sample adds at most
//! `SHALLOW_CAP - SHALLOW_REFERENCE` (5) to `R`, and `shallow_decision` (11 by default) is
//! more than two of those, so no two samples flag on their own however deep: one-tick
//! benign dips, even two in a row, never do, and under heavy tails it takes three
//! consecutive deep samples (a few per hundred million node-ticks under Student-t with 3
//! degrees of freedom). A sample within the reference takes away twice what it lacks
//! (`SHALLOW_DRAIN`): a healthy sample at the median between dips (two dips, one good
//! sample, a third dip) takes 6 of the 10 the dips added, so dips in quick succession do
//! not add up either. A node about 7 spreads below the median (a 5 % drop among 1 %
//! noise) is flagged on its third sample. The reference sits at least `SHALLOW_MIN_GAP`
//! (2 %) below the median whatever the spread, so a node a percent or so slower than its
//! peers (hardware bias) never accumulates. The rule acts only where the cohort has
//! quorum of its own and is not in panic mode; `classifier.shallow_decision: 0` turns it
//! off.

/// Smallest sigma the classifier divides by (a zero MAD floor with a uniform fleet).
pub const MIN_SIGMA: f64 = 1e-9;

/// Default allowance per sample, in sigmas (`processors.ingero.classifier.drift`).
pub const DEFAULT_DRIFT: f64 = 0.5;
/// Default decision interval, in sigmas (`classifier.decision`).
pub const DEFAULT_DECISION: f64 = 4.0;
/// Default margin above the threshold, in sigmas, at which a flagged node with a clean
/// episode clears at once (`classifier.clear_margin`).
pub const DEFAULT_CLEAR_MARGIN: f64 = 1.0;
/// Default unflagged ticks after a clear before an episode is clean again
/// (`classifier.clear_holdoff`).
pub const DEFAULT_CLEAR_HOLDOFF: u8 = 10;
/// Default level of the shallow-drop sum that flags, in spreads
/// (`classifier.shallow_decision`).
pub const DEFAULT_SHALLOW_DECISION: f64 = 11.0;

/// CUSUM parameters, in robust standard deviations (the hold-off in ticks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CusumParams {
    pub drift: f64,
    pub decision: f64,
    /// A flagged node clears at once on a tick at least this many sigmas above the threshold
    /// (if its episode began after a clean record: see `clear_holdoff`).
    pub clear_margin: f64,
    /// Unflagged ticks after a clear before the node's next episode may clear at once.
    pub clear_holdoff: u8,
    /// Samples at the single-sample depth a flag needs (1: one sample flags).
    pub evidence: u8,
    /// Level of the shallow-drop sum that flags, in spreads (0: the rule is off).
    pub shallow_decision: f64,
}

impl CusumParams {
    /// The defaults of `processors.ingero.classifier` (the agent's `cusum` rule uses them too).
    pub const DEFAULT: CusumParams = CusumParams {
        drift: DEFAULT_DRIFT,
        decision: DEFAULT_DECISION,
        clear_margin: DEFAULT_CLEAR_MARGIN,
        clear_holdoff: DEFAULT_CLEAR_HOLDOFF,
        evidence: 1,
        shallow_decision: DEFAULT_SHALLOW_DECISION,
    };

    /// The shallow-drop rule is on.
    pub fn shallow(&self) -> bool {
        self.shallow_decision > 0.0
    }

    /// The same parameters needing `evidence` samples (at least 1).
    pub fn with_evidence(mut self, evidence: u8) -> Self {
        self.evidence = evidence.max(1);
        self
    }

    /// The level the sum must reach to flag: `evidence * decision`.
    pub fn flag_level(&self) -> f64 {
        f64::from(self.evidence.max(1)) * self.decision
    }

    /// The ceiling of the cumulative sum: the flag level itself, so a recovered node
    /// drains in `evidence * decision / (k + drift)` ticks.
    pub fn cap(&self) -> f64 {
        self.flag_level()
    }

    /// The shortfall (sigmas below the threshold) at which one sample flags on its own
    /// with `evidence` 1, and the most one sample counts for with more.
    pub fn deep(&self) -> f64 {
        self.decision + self.drift
    }
}

impl Default for CusumParams {
    fn default() -> Self {
        CusumParams::DEFAULT
    }
}

/// Spreads below the cohort's median a sample must be to add to the shallow-drop sum.
pub const SHALLOW_REFERENCE: f64 = 3.0;
/// The most spreads below the median one sample counts for in the shallow-drop sum.
pub const SHALLOW_CAP: f64 = 8.0;
/// A sample within the shallow reference takes this many times its margin off the sum.
pub const SHALLOW_DRAIN: f64 = 2.0;
/// The shallow-drop reference sits at least this far below the median, as a fraction of
/// it, however narrow the cohort's spread: the spread is floored at
/// `SHALLOW_MIN_GAP * median / SHALLOW_REFERENCE`.
pub const SHALLOW_MIN_GAP: f64 = 0.02;

/// The spread the shallow-drop residual is measured in, for a cohort with `median` and raw
/// (unscaled) `mad`.
pub fn shallow_spread(median: f64, mad: f64) -> f64 {
    (1.4826 * mad)
        .max(SHALLOW_MIN_GAP * median.abs() / SHALLOW_REFERENCE)
        .max(MIN_SIGMA)
}

/// A classification edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Entered,
    Cleared,
}

/// One node's classifier state (12 bytes: the tick keeps one per node). The sums are
/// stored as `f32`: they live in [0, 3 * decision] and [0, shallow_decision], where that
/// precision is ample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShortfallCusum {
    sum: f32,
    /// The shallow-drop sum (see the module docs).
    shallow: f32,
    straggler: bool,
    /// The current episode began after a clean record: it may clear at once.
    clean_episode: bool,
    /// Unflagged ticks still to go, since the last clear, before a new episode counts as
    /// clean.
    holdoff: u8,
    /// Consecutive samples at least [`CusumParams::deep`] below the threshold (saturating).
    deep_run: u8,
}

const _: () = assert!(std::mem::size_of::<ShortfallCusum>() == 12);

/// Lone deep samples per healthy node-sample above which a cluster's noise counts as
/// heavy-tailed: the false-positive budget of the one-sample rule, 10 per million.
pub const TAIL_RATE_LIMIT: f64 = 1e-5;
/// Per-tick decay of the tail estimate's counts: a memory of about 2,048 ticks (5.7 hours
/// at 10 s pushes).
pub const TAIL_DECAY: f64 = 1.0 - 1.0 / 2048.0;
/// Evidence a cluster with heavy-tailed noise needs.
pub const HEAVY_TAIL_EVIDENCE: u8 = 2;

/// How heavy one cluster's noise tails are, from its own healthy samples: the rate of lone
/// deep samples (a node's one sample at least [`CusumParams::deep`] sigmas below the
/// threshold, back above it on its next sample) per node-sample classified, both counts
/// decaying by [`TAIL_DECAY`] per tick. Under Gaussian noise with the default `k`,
/// `drift` and `decision` such a sample is 6.5 sigmas below the median: about 4e-11 per
/// sample, so a quiet cluster never sees one; under Student-t noise with 3 degrees of
/// freedom it is a few per ten thousand. A straggler is deep on consecutive samples and
/// does not count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TailEstimate {
    lone_deep: f64,
    samples: f64,
}

impl TailEstimate {
    /// Fold in one tick: `lone_deep` lone deep samples among `samples` classified.
    pub fn observe(&mut self, lone_deep: u64, samples: u64) {
        self.lone_deep = self.lone_deep * TAIL_DECAY + lone_deep as f64;
        self.samples = self.samples * TAIL_DECAY + samples as f64;
    }

    /// Lone deep samples per node-sample (0 before any sample).
    pub fn rate(&self) -> f64 {
        if self.samples > 0.0 {
            self.lone_deep / self.samples
        } else {
            0.0
        }
    }

    /// The noise has flagged, or would have flagged, healthy nodes on single samples more
    /// often than [`TAIL_RATE_LIMIT`].
    pub fn heavy(&self) -> bool {
        self.lone_deep > 0.0 && self.rate() > TAIL_RATE_LIMIT
    }

    /// The evidence to classify with: `configured` when it is set (1-3), else 1 for light
    /// tails and [`HEAVY_TAIL_EVIDENCE`] for heavy ones.
    pub fn evidence(&self, configured: u32) -> u8 {
        match configured {
            0 => {
                if self.heavy() {
                    HEAVY_TAIL_EVIDENCE
                } else {
                    1
                }
            }
            n => u8::try_from(n.min(3)).unwrap_or(1),
        }
    }
}

impl ShortfallCusum {
    pub fn is_straggler(&self) -> bool {
        self.straggler
    }

    /// Flagged, and back `clear_margin` sigmas above the threshold would clear it at once.
    pub fn may_clear_at_once(&self) -> bool {
        self.straggler && self.clean_episode
    }

    /// Sum 0, not flagged, no hold-off running: a shortfall within the drift leaves it
    /// unchanged.
    #[inline]
    pub fn at_rest(&self) -> bool {
        self.sum == 0.0
            && self.shallow == 0.0
            && !self.straggler
            && self.holdoff == 0
            && self.deep_run == 0
    }

    /// Consecutive samples, up to the last one, at least [`CusumParams::deep`] sigmas
    /// below the threshold. A step from 1 to 0 ends a lone deep sample.
    pub fn deep_run(&self) -> u8 {
        self.deep_run
    }

    pub fn sum(&self) -> f64 {
        f64::from(self.sum)
    }

    /// The shallow-drop sum.
    pub fn shallow_sum(&self) -> f64 {
        f64::from(self.shallow)
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

    /// Fold in one standardised shortfall `z = (threshold - score) / sigma`, without a
    /// shallow-drop residual (that sum drains).
    #[inline]
    pub fn observe_z(&mut self, p: &CusumParams, z: f64) -> Option<Transition> {
        self.observe_zr(p, z, f64::NEG_INFINITY)
    }

    /// Fold in one standardised shortfall `z = (threshold - score) / sigma` and the
    /// shallow-drop residual `r = (median - score) / spread` (`-inf` or NaN: none).
    #[inline]
    pub fn observe_zr(&mut self, p: &CusumParams, z: f64, r: f64) -> Option<Transition> {
        // At rest (sums 0, not flagged, no hold-off) a shortfall within the drift and a
        // residual within the shallow reference leave the state as it is: exactly what the
        // general step below computes (0 + z - drift <= 0 clamps to 0), without its
        // floating-point chain. Nearly every healthy node takes this path.
        let shallow_in = p.shallow() && r > SHALLOW_REFERENCE;
        if self.at_rest() && z <= p.drift && !shallow_in {
            return None;
        }
        let deep = p.deep();
        self.deep_run = if z >= deep {
            self.deep_run.saturating_add(1)
        } else {
            0
        };
        // One sample counts for at most what flags alone with evidence 1.
        let next = f64::from(self.sum) + z.min(deep) - p.drift;
        // NaN cannot arise from finite inputs; `max`/`min` would drop it anyway.
        let mut sum = next.max(0.0).min(p.cap());
        let mut shallow = if p.shallow() && r > f64::NEG_INFINITY {
            // (NaN fails the comparison above.)
            let x = r.min(SHALLOW_CAP) - SHALLOW_REFERENCE;
            let x = if x >= 0.0 { x } else { SHALLOW_DRAIN * x };
            (f64::from(self.shallow) + x)
                .max(0.0)
                .min(p.shallow_decision)
        } else {
            0.0
        };
        let transition = if !self.straggler {
            if sum >= p.flag_level() || (p.shallow() && shallow >= p.shallow_decision) {
                self.straggler = true;
                self.clean_episode = self.holdoff == 0;
                Some(Transition::Entered)
            } else {
                self.holdoff = self.holdoff.saturating_sub(1);
                None
            }
        } else if (sum <= 0.0 && shallow <= 0.0) || (self.clean_episode && z <= -p.clear_margin) {
            sum = 0.0;
            shallow = 0.0;
            self.straggler = false;
            self.clean_episode = false;
            self.holdoff = p.clear_holdoff;
            Some(Transition::Cleared)
        } else {
            None
        };
        let stored = sum as f32;
        // Healthy nodes stay at 0: skipping the unchanged store keeps their cache lines clean.
        if stored != self.sum {
            self.sum = stored;
        }
        let stored = shallow as f32;
        if stored != self.shallow {
            self.shallow = stored;
        }
        transition
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

    const P: CusumParams = CusumParams::DEFAULT;
    /// The same without clearing at once: the drain alone.
    const DRAIN_ONLY: CusumParams = CusumParams {
        clear_margin: f64::INFINITY,
        ..CusumParams::DEFAULT
    };

    #[test]
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(
            (
                P.drift,
                P.decision,
                P.clear_margin,
                P.clear_holdoff,
                P.evidence,
                P.shallow_decision
            ),
            (0.5, 4.0, 1.0, 10, 1, 11.0)
        );
    }

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

    /// Detection does not depend on the clear rule: shortfalls of every size from a fresh
    /// state are flagged on the same sample with and without it.
    #[test]
    fn detection_latency_is_unchanged_by_the_clear_rule() {
        let ticks = |p: &CusumParams, z: f64| {
            let mut c = ShortfallCusum::default();
            (1..=100).find(|_| c.observe_z(p, z) == Some(Transition::Entered))
        };
        for tenths in 6..=100 {
            let z = f64::from(tenths) / 10.0;
            assert_eq!(ticks(&P, z), ticks(&DRAIN_ONLY, z), "z = {z}");
        }
        // decision / (z - drift) samples.
        for (z, n) in [(4.5, 1), (2.5, 2), (1.5, 4), (1.0, 8)] {
            assert_eq!(ticks(&P, z), Some(n), "z = {z}");
        }
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

    /// The recovery of a slowdown: full (the sum at its cap), then one tick back at the
    /// cohort's median (`k` = 2 sigmas above the threshold) clears it.
    #[test]
    fn a_straggler_back_at_the_median_clears_on_its_first_good_tick() {
        let mut c = ShortfallCusum::default();
        for _ in 0..100 {
            c.observe(&P, 0.5, 0.9, 0.01);
        }
        assert_eq!(c.sum(), P.cap());
        assert!(c.may_clear_at_once());
        assert_eq!(c.observe(&P, 0.92, 0.9, 0.01), Some(Transition::Cleared));
        assert_eq!(c.sum(), 0.0);
        // Exactly `clear_margin` above the threshold is enough ...
        let mut c = ShortfallCusum::default();
        c.observe(&P, 0.5, 0.9, 0.01);
        assert_eq!(c.observe_z(&P, -1.0), Some(Transition::Cleared));
        // ... a bit less is not: the drain goes on (4 - 0.99 - 0.5 = 2.51 left).
        let mut c = ShortfallCusum::default();
        c.observe(&P, 0.5, 0.9, 0.01);
        assert_eq!(c.observe_z(&P, -0.99), None);
        assert!(c.is_straggler());
        assert!((c.sum() - 2.51).abs() < 1e-6);
    }

    #[test]
    fn without_the_clear_rule_recovery_drains_to_zero_and_is_bounded_by_the_cap() {
        let mut c = ShortfallCusum::default();
        for _ in 0..100 {
            c.observe(&DRAIN_ONLY, 0.5, 0.9, 0.01);
        }
        assert_eq!(c.sum(), P.cap(), "capped, so recovery time is bounded");
        // Back at the median (k = 2 sigma above threshold): -2.5 per tick, 4 -> 0 in 2 ticks.
        let mut ticks = 0;
        loop {
            ticks += 1;
            if c.observe(&DRAIN_ONLY, 0.92, 0.9, 0.01) == Some(Transition::Cleared) {
                break;
            }
            assert!(c.is_straggler());
        }
        assert_eq!(ticks, 2);
        // With the rule, a score above the threshold but short of the margin drains too:
        // half a sigma above, -1 per tick, 4 ticks.
        let mut c = ShortfallCusum::default();
        c.observe(&P, 0.5, 0.9, 0.01);
        let ticks = (1..=10)
            .find(|_| c.observe_z(&P, -0.5) == Some(Transition::Cleared))
            .unwrap_or(0);
        assert_eq!(ticks, 4);
    }

    /// A score oscillating around the threshold, within the margin: once flagged it stays
    /// flagged (the drain's hysteresis), as without the rule.
    #[test]
    fn a_score_oscillating_around_the_threshold_does_not_flap() {
        for p in [P, DRAIN_ONLY] {
            let mut c = ShortfallCusum::default();
            let mut edges = Vec::new();
            for i in 0..1_000 {
                // 3 sigmas below, then 0.9 above: +2.5, -1.4 per pair.
                let z = if i % 2 == 0 { 3.0 } else { -0.9 };
                if let Some(t) = c.observe_z(&p, z) {
                    edges.push((i, t));
                }
            }
            assert_eq!(edges, [(4, Transition::Entered)], "{p:?}");
        }
    }

    /// A straggler swinging between far below the threshold (flagged on one sample) and
    /// the median: the first episode clears at once, the node falls again within the
    /// hold-off, and from then on only the drain clears it, which the swings never empty.
    #[test]
    fn a_straggler_swinging_to_the_median_and_back_does_not_flap() {
        let mut c = ShortfallCusum::default();
        let mut edges = Vec::new();
        for i in 0..1_000 {
            let z = if i % 2 == 0 { 6.0 } else { -2.0 };
            if let Some(t) = c.observe_z(&P, z) {
                edges.push((i, t));
            }
        }
        assert_eq!(
            edges,
            [
                (0, Transition::Entered),
                (1, Transition::Cleared),
                (2, Transition::Entered)
            ]
        );
        assert!(c.is_straggler());
    }

    /// After a clean spell of `clear_holdoff` unflagged ticks the next episode may clear at
    /// once again; one tick short of it, it drains.
    #[test]
    fn the_holdoff_ends_after_its_unflagged_ticks() {
        let holdoff = usize::from(P.clear_holdoff);
        for (quiet, at_once) in [(holdoff, true), (holdoff - 1, false)] {
            let mut c = ShortfallCusum::default();
            assert_eq!(c.observe_z(&P, 10.0), Some(Transition::Entered));
            assert_eq!(c.observe_z(&P, -2.0), Some(Transition::Cleared));
            assert!(!c.at_rest(), "the hold-off keeps it out of the rest path");
            for _ in 0..quiet {
                assert_eq!(c.observe_z(&P, -2.0), None);
            }
            assert_eq!(c.at_rest(), at_once);
            assert_eq!(c.observe_z(&P, 10.0), Some(Transition::Entered));
            assert_eq!(c.may_clear_at_once(), at_once, "after {quiet} quiet ticks");
            let cleared = c.observe_z(&P, -2.0) == Some(Transition::Cleared);
            assert_eq!(cleared, at_once);
        }
    }

    #[test]
    fn reset_clears_and_reports_the_edge_once() {
        let mut c = ShortfallCusum::default();
        c.observe(&P, 0.0, 0.9, 0.01);
        assert!(c.is_straggler());
        assert_eq!(c.reset(), Some(Transition::Cleared));
        assert_eq!(c.reset(), None);
        assert!(c.at_rest());
    }

    /// With two samples of evidence one sample counts for at most one, however deep; two
    /// in a row flag; a lone one drains.
    #[test]
    fn two_samples_of_evidence_need_two_deep_samples() {
        let p2 = P.with_evidence(2);
        assert_eq!((p2.flag_level(), p2.cap(), p2.deep()), (8.0, 8.0, 4.5));
        let mut c = ShortfallCusum::default();
        assert_eq!(c.observe_z(&p2, 1e6), None, "one sample, however deep");
        assert_eq!(c.sum(), 4.0);
        assert_eq!(c.deep_run(), 1);
        assert_eq!(c.observe_z(&p2, 4.5), Some(Transition::Entered));
        assert_eq!(c.deep_run(), 2);
        // A lone deep sample every third one, healthy ones (at the median, z = -2) between,
        // never flags: +4, -2.5, -2.5. (Every other one would: +4 - 2.5 a pair accumulates.)
        let mut c = ShortfallCusum::default();
        for i in 0..3_000 {
            let z = if i % 3 == 0 { 50.0 } else { -2.0 };
            assert_eq!(c.observe_z(&p2, z), None, "sample {i}");
        }
        // Shallower shortfalls accumulate to twice the decision: 1.5 sigmas, +1 per tick.
        let mut c = ShortfallCusum::default();
        let first = (1..=20).find(|_| c.observe_z(&p2, 1.5) == Some(Transition::Entered));
        assert_eq!(first, Some(8));
        // Evidence 1 is the one-sample rule, unchanged.
        for z in [4.5, 2.5, 1.5, 1.0, 100.0] {
            let ticks = |p: &CusumParams| {
                let mut c = ShortfallCusum::default();
                (1..=100).find(|_| c.observe_z(p, z) == Some(Transition::Entered))
            };
            assert_eq!(ticks(&P), ticks(&P.with_evidence(1)), "z = {z}");
        }
    }

    #[test]
    fn the_deep_run_ends_a_lone_deep_sample_and_keeps_the_node_restless() {
        let mut c = ShortfallCusum::default();
        c.observe_z(&P.with_evidence(2), 4.5);
        assert!(!c.at_rest());
        c.observe_z(&P.with_evidence(2), -10.0);
        assert_eq!(c.deep_run(), 0);
        assert!(c.at_rest());
    }

    #[test]
    fn the_tail_estimate_turns_heavy_on_lone_deep_samples_and_forgets_them() {
        let mut t = TailEstimate::default();
        assert_eq!(t.evidence(0), 1, "no sample yet: light");
        for _ in 0..10_000 {
            t.observe(0, 64);
        }
        assert!(!t.heavy());
        assert_eq!(t.evidence(0), 1);
        // Student-t-like: a lone deep sample every 50 ticks of 64 nodes (3e-4).
        for i in 0..10_000 {
            t.observe(u64::from(i % 50 == 0), 64);
        }
        assert!(t.heavy(), "rate {}", t.rate());
        assert_eq!(t.evidence(0), HEAVY_TAIL_EVIDENCE);
        // The operator's setting wins either way.
        assert_eq!(t.evidence(1), 1);
        assert_eq!(t.evidence(3), 3);
        // Quiet again: forgotten within a few memories.
        for _ in 0..20_000 {
            t.observe(0, 64);
        }
        assert!(!t.heavy(), "rate {}", t.rate());
        // One lone deep sample in a long quiet record of 64 nodes stays under the limit.
        t.observe(1, 64);
        assert!(!t.heavy(), "rate {}", t.rate());
    }

    /// A node 7 spreads below its cohort's median (a 5 % drop among 1 % noise) but only
    /// one floored sigma below the threshold: the shallow-drop sum flags it on its third
    /// sample; without that rule it takes eight.
    #[test]
    fn a_shallow_persistent_drop_is_flagged_on_its_third_sample() {
        let first = |p: &CusumParams| {
            let mut c = ShortfallCusum::default();
            (1..=50).find(|_| c.observe_zr(p, 1.0, 7.0) == Some(Transition::Entered))
        };
        assert_eq!(first(&P), Some(3));
        let off = CusumParams {
            shallow_decision: 0.0,
            ..P
        };
        assert!(!off.shallow());
        assert_eq!(first(&off), Some(8), "the one-sample rule's sum alone");
        // Evidence does not slow the shallow rule down.
        assert_eq!(first(&P.with_evidence(2)), Some(3));
    }

    /// A sample adds at most 5 to the shallow sum and a flag needs 11: two samples however
    /// deep (two benign dips in a row) never flag; pairs of them a few samples apart
    /// drain in between.
    #[test]
    fn two_deep_samples_never_flag_on_the_shallow_sum() {
        let mut c = ShortfallCusum::default();
        for i in 0..6_000 {
            // Two samples 100 spreads below the median, then four at the median.
            let r = if i % 6 < 2 { 100.0 } else { 0.0 };
            assert_eq!(c.observe_zr(&P, -2.0, r), None, "sample {i}");
        }
        // Two, a good one at the median (-6), a third: 9, still short.
        let mut c = ShortfallCusum::default();
        for r in [100.0, 100.0, 0.0, 100.0] {
            assert_eq!(c.observe_zr(&P, -2.0, r), None);
        }
        assert_eq!(c.shallow_sum(), 9.0);
        // A third in a row does.
        let mut c = ShortfallCusum::default();
        assert_eq!(c.observe_zr(&P, -2.0, 100.0), None);
        assert_eq!(c.observe_zr(&P, -2.0, 100.0), None);
        assert_eq!(c.shallow_sum(), 10.0);
        assert_eq!(c.observe_zr(&P, -2.0, 100.0), Some(Transition::Entered));
    }

    #[test]
    fn the_shallow_sum_rests_within_the_reference_and_drains_without_a_residual() {
        let mut c = ShortfallCusum::default();
        // Within the reference: the rest path, nothing changes.
        assert_eq!(c.observe_zr(&P, -2.0, SHALLOW_REFERENCE), None);
        assert!(c.at_rest());
        assert_eq!(c.observe_zr(&P, -2.0, 6.0), None);
        assert_eq!(c.shallow_sum(), 3.0);
        assert!(!c.at_rest());
        // No residual (no median, or the rule off for this cohort): the sum drains to 0.
        assert_eq!(c.observe_z(&P, -2.0), None);
        assert_eq!(c.shallow_sum(), 0.0);
        assert!(c.at_rest());
        assert_eq!(c.observe_zr(&P, -2.0, 6.0), None);
        assert_eq!(c.observe_zr(&P, -2.0, f64::NAN), None);
        assert!(c.at_rest(), "NaN counts as no residual");
    }

    /// Flagged by the shallow sum alone, a node back at the median clears at once (its
    /// episode began after a clean record); short of the margin, both sums must drain.
    #[test]
    fn a_shallow_straggler_clears_at_once_or_when_both_sums_drain() {
        let mut c = ShortfallCusum::default();
        for _ in 0..3 {
            c.observe_zr(&P, 0.5, 8.0);
        }
        assert!(c.is_straggler());
        assert_eq!(c.sum(), 0.0, "the one-sample sum never moved");
        assert_eq!(c.observe_zr(&P, -2.0, 0.0), Some(Transition::Cleared));
        assert_eq!((c.sum(), c.shallow_sum()), (0.0, 0.0));
        // Drain: 11 at the cap, 2 spreads below the median (-2 a sample), just short of
        // the margin: flagged until the shallow sum is back at 0.
        let drain = CusumParams {
            clear_margin: f64::INFINITY,
            ..P
        };
        let mut c = ShortfallCusum::default();
        for _ in 0..10 {
            c.observe_zr(&drain, 0.5, 8.0);
        }
        assert_eq!(c.shallow_sum(), drain.shallow_decision);
        let ticks = (1..=20)
            .find(|_| c.observe_zr(&drain, -0.9, 2.0) == Some(Transition::Cleared))
            .unwrap_or(0);
        assert_eq!(ticks, 6);
    }

    /// The spread is the cohort's robust one, floored so the reference sits at least
    /// `SHALLOW_MIN_GAP` below the median: in a uniform fleet a node 1.5 % slower never
    /// accumulates; 3 % slower does.
    #[test]
    fn the_shallow_spread_is_floored_at_a_gap_below_the_median() {
        assert!((shallow_spread(0.9, 0.01) - 0.014826).abs() < 1e-12);
        let floor = shallow_spread(0.9, 0.0);
        assert!((floor - 0.006).abs() < 1e-12);
        assert!(shallow_spread(0.0, 0.0) >= MIN_SIGMA);
        let r = |below: f64| 0.9 * below / floor;
        let mut c = ShortfallCusum::default();
        for _ in 0..10_000 {
            assert_eq!(c.observe_zr(&P, -1.0, r(0.015)), None);
        }
        assert!(c.at_rest());
        assert!((1..=20).any(|_| c.observe_zr(&P, -1.0, r(0.03)) == Some(Transition::Entered)));
    }

    #[test]
    fn zero_sigma_does_not_produce_nan() {
        let mut c = ShortfallCusum::default();
        assert_eq!(c.observe(&P, 0.9, 0.9, 0.0), None);
        assert_eq!(c.sum(), 0.0);
        assert_eq!(c.observe(&P, 0.899, 0.9, 0.0), Some(Transition::Entered));
    }
}
