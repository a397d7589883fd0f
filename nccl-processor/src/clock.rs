//! Putting a node's monotonic NCCL timestamps on the host's wall-clock axis.
//!
//! The Ingero agent stamps NCCL points with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, time
//! since boot), which is not comparable across nodes. What the processor does know is when
//! each batch arrived (host wall clock). Every point satisfies
//! `arrival = ts + offset + delay` with `delay >= 0` (export buffering + network), so
//! `arrival - max_ts_in_batch` is an *upper bound* of the node's offset; the smallest such
//! bound over the last `monotonic.offset_window` batches is the node's **arrival bound**
//! (the one-way minimum filter NTP uses; windowed so drift is followed). Its error is the
//! smallest delivery delay seen: with `ingero trace` exporting every 10 s the newest point of
//! a batch can be up to one collective interval old, so alone it is good to tens or hundreds
//! of milliseconds at best, and never better than the network latency.
//!
//! **Refinement from the data** (`monotonic.refine`, on by default). Collectives are
//! synchronising operations: most ranks enter most collectives close together. Each closed
//! instance yields, for every monotonic entry, its distance (ms) to the `refine_quantile`
//! (default 0.1) quantile of the *reference* entries of *other* nodes in the instance; every
//! [`REFINE_SAMPLES`] such residuals the node's offset moves so that the same quantile of its
//! residuals becomes zero.
//! - *Other* nodes: a node holding many of an instance's ranks cannot pull its own
//!   reference along.
//! - *Reference* entries: wall-clock entries and entries of settled nodes. When an instance
//!   has none and the cluster has no anchor yet, its node with the most entries becomes the
//!   cluster's **anchor** (settled by definition, never refined). Calibrating nodes never
//!   serve as a reference, so nobody chases a moving target.
//! - The same low quantile on both sides: an on-time node's correction is zero on average,
//!   so refined nodes do not drift together, and a rank or node behind on most steps keeps
//!   its lag as long as it is on time on more than that fraction of them. Ranks on one node
//!   share its clock, so one slow GPU among the node's eight is unaffected. What cannot be
//!   told apart from a clock offset is a **whole node** behind on (nearly) every collective:
//!   its lag is absorbed into its offset.
//!
//! Relative offsets are all the lags need; the consensus as a whole is then **normalised
//! against the arrival bounds** (each node's tightest bound since its last reset, an upper
//! limit of its true offset): every tick, if some settled node sits more than a tenth of a
//! window later than its bound, or every settled node sits more than a quarter window
//! earlier than its bound, all refined nodes move together so that the tightest bound is met
//! ([`normalise`]). Shifts are rare (bounds only tighten) and each one distrusts the entries
//! in flight (new epoch). That keeps the consensus within the best node's delivery
//! delay of the truth, so nodes joining later (still on their arrival bound) line up with it.
//! A refinement step that would put a node more than half a window later than its tightest
//! bound matched the wrong collective; it is refused and the node starts calibrating again.
//!
//! Until [`SETTLE_STEPS`] consecutive refinement steps move a node by at most
//! `lag.min_lag_ms / 4` each (the node is *settled*), its ranks count towards instance medians but their own lags are not emitted
//! (counted as `clock_warmup`). Entries aligned before a node's offset last jumped (an
//! *epoch* change: reset, normalisation, a large refinement step) are not trusted either. A
//! reboot (timestamps going backwards) resets the node. When clock errors split one
//! collective into two time buckets, the halves are rejoined for refinement only (see
//! `tracker.rs`), which pulls the nodes back together.
//!
//! What remains out of reach: a node whose arrival bound is off by more than half a
//! collective interval can lock onto the neighbouring collective if collectives are spaced
//! very regularly; the bound check catches this only in one direction.

use std::collections::VecDeque;

use component::Timestamp;

/// Timestamps below this (2001-09-09 in Unix ns) are monotonic since-boot values: an
/// uptime would need 31 years to reach it, and no wall clock is still before it.
pub const WALL_CLOCK_MIN_NS: u64 = 1_000_000_000_000_000_000;

/// A monotonic timestamp that moves back by more than this means the clock restarted.
const REBOOT_BACKSTEP_NS: u64 = 1_000_000_000;

/// Lag samples per refinement step.
pub const REFINE_SAMPLES: usize = 64;

/// Consecutive small refinement steps before a node is settled.
pub const SETTLE_STEPS: u32 = 2;

/// Parameters of one refinement step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefineParams {
    /// The quantile of the residuals moved to zero.
    pub quantile: f64,
    /// A step this small (ms) settles the node.
    pub settle_ms: f64,
    /// How far (ns) a refined offset may lie above the node's arrival bound: the bound is
    /// an upper limit of the true offset, the consensus the nodes share may sit later than
    /// the truth by the anchor's own delivery delay, hence a slack (half a window).
    pub max_above_bound_ns: i64,
}

/// True when a raw point timestamp is a wall-clock (Unix) time.
pub fn is_wall_clock(ts: u64) -> bool {
    ts >= WALL_CLOCK_MIN_NS
}

/// Offset estimate of one node's monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct NodeClock {
    samples: VecDeque<i64>,
    /// Windowed minimum of `arrival - max_ts`.
    arrival_offset: i64,
    /// Smallest `arrival - max_ts` since the last reset: the tightest upper bound of the true
    /// offset (monotone, so checks against it do not jump when old samples leave the window).
    best_bound: Option<i64>,
    /// Offset after refinement.
    refined: Option<i64>,
    /// A refinement step moved the offset by less than the settle threshold (or anchor).
    settled: bool,
    /// The cluster's reference clock: settled by definition, never refined from residuals.
    anchor: bool,
    /// Changes when the offset makes a jump (reset, anchor appointed or moved, a refinement
    /// step larger than the settle threshold): entries aligned in an older epoch are not
    /// trusted for lags.
    epoch: u16,
    residuals: Vec<f64>,
    refinements: u64,
    rejected: u64,
    /// Consecutive refinement steps within the settle threshold.
    small_steps: u32,
    generation: u16,
    batches: u64,
    last_max_ts: u64,
    pub last_seen: Timestamp,
}

impl NodeClock {
    /// Record one delivery: the batch arrived at `arrival` and its newest monotonic NCCL
    /// timestamp is `max_ts`. `window` is how many deliveries the minimum looks back over.
    pub fn observe(&mut self, arrival: Timestamp, max_ts: u64, window: usize) {
        if max_ts.saturating_add(REBOOT_BACKSTEP_NS) < self.last_max_ts {
            // The monotonic clock restarted (reboot): old samples describe another epoch.
            self.samples.clear();
            self.batches = 0;
            self.reset_refinement();
        }
        self.last_max_ts = max_ts;
        self.last_seen = self.last_seen.max(arrival);
        let sample = (arrival.as_nanos() as i64).saturating_sub(max_ts as i64);
        self.samples.push_back(sample);
        while self.samples.len() > window.max(1) {
            self.samples.pop_front();
        }
        self.arrival_offset = self.samples.iter().copied().min().unwrap_or(sample);
        self.best_bound = Some(self.best_bound.map_or(sample, |b| b.min(sample)));
        self.batches = self.batches.saturating_add(1);
    }

    fn reset_refinement(&mut self) {
        self.small_steps = 0;
        self.best_bound = None;
        self.epoch = self.epoch.wrapping_add(1);
        self.refined = None;
        self.settled = false;
        self.anchor = false;
        self.residuals.clear();
        self.generation = self.generation.wrapping_add(1);
    }

    /// Deliveries observed since the last reset.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The current offset estimate (add to a monotonic timestamp to get Unix ns).
    pub fn offset_ns(&self) -> i64 {
        self.refined.unwrap_or(self.arrival_offset)
    }

    /// Make this node the reference the others refine against: its offset is fixed at its
    /// arrival bound (then moved only by normalisation), it is settled by definition and
    /// never refined from residuals.
    pub fn make_anchor(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.anchor = true;
        self.settled = true;
        self.refined = Some(self.arrival_offset);
        self.residuals.clear();
        self.generation = self.generation.wrapping_add(1);
    }

    /// Move a refined node (or the anchor) by `delta_ns` together with the rest of the
    /// consensus. Relative offsets do not change, so a settled node stays settled; entries
    /// aligned before (older epoch) and residuals computed before are discarded.
    pub fn shift(&mut self, delta_ns: i64) {
        if let Some(o) = self.refined.as_mut() {
            *o = o.saturating_add(delta_ns);
            self.epoch = self.epoch.wrapping_add(1);
            self.residuals.clear();
            self.generation = self.generation.wrapping_add(1);
        }
    }

    pub fn is_anchor(&self) -> bool {
        self.anchor
    }

    /// The arrival-only bound.
    pub fn arrival_offset_ns(&self) -> i64 {
        self.arrival_offset
    }

    /// The tightest arrival bound since the last reset.
    pub fn best_bound_ns(&self) -> i64 {
        self.best_bound.unwrap_or(self.arrival_offset)
    }

    /// Changes whenever the offset is refined or reset; tags the entries aligned with it.
    pub fn generation(&self) -> u16 {
        self.generation
    }

    /// Changes when the offset jumps (see the field); tags entries for trust.
    pub fn epoch(&self) -> u16 {
        self.epoch
    }

    pub fn is_refined(&self) -> bool {
        self.refined.is_some()
    }

    /// Refined, and the last refinement step was a small correction.
    pub fn is_settled(&self) -> bool {
        self.settled
    }

    pub fn refinements(&self) -> u64 {
        self.refinements
    }

    /// `ts` on the wall-clock axis.
    pub fn align(&self, ts: u64) -> i64 {
        (ts as i64).saturating_add(self.offset_ns())
    }

    /// One residual (ms) of one of this node's ranks against the other nodes (see
    /// `lag::against_other_groups`), computed with the offset of `generation`. Every
    /// [`REFINE_SAMPLES`] samples the offset moves so that the `quantile` of them is 0; the
    /// node is settled once such a step moves it by at most `settle_ms`.
    pub fn add_residual(&mut self, generation: u16, lag_ms: f64, p: RefineParams) {
        if self.anchor || generation != self.generation || !lag_ms.is_finite() {
            return;
        }
        self.residuals.push(lag_ms);
        if self.residuals.len() < REFINE_SAMPLES {
            return;
        }
        let idx = ((self.residuals.len() - 1) as f64 * p.quantile.clamp(0.0, 1.0)).floor() as usize;
        let (_, q, _) = self.residuals.select_nth_unstable_by(idx, f64::total_cmp);
        let q = *q;
        self.residuals.clear();
        self.generation = self.generation.wrapping_add(1);
        let new = self.offset_ns().saturating_sub((q * 1e6) as i64);
        if new > self.best_bound_ns().saturating_add(p.max_above_bound_ns) {
            // Later than the node's own arrival bound allows (points cannot arrive before
            // they happen): this matched the wrong collective. Start calibration over.
            self.refined = None;
            self.settled = false;
            self.small_steps = 0;
            self.epoch = self.epoch.wrapping_add(1);
            self.rejected = self.rejected.saturating_add(1);
            return;
        }
        if self.refined.is_some() && q.abs() <= p.settle_ms {
            self.small_steps = self.small_steps.saturating_add(1);
            if self.small_steps >= SETTLE_STEPS {
                self.settled = true;
            }
        } else if q.abs() > p.settle_ms {
            self.small_steps = 0;
            self.epoch = self.epoch.wrapping_add(1);
        }
        self.refined = Some(new);
        self.refinements = self.refinements.saturating_add(1);
    }

    /// Refinement steps refused because they contradicted the arrival bound.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

/// How far the consensus must move so that the tightest arrival bound is met, judged on the
/// *settled* nodes (anchor included; their offsets are right relative to each other, a node
/// still calibrating may not be): `Some(-x)` when some settled node sits `x > tolerance_ns`
/// later than its bound, `Some(+x)` when all sit more than `early_ns` earlier than theirs
/// (by `x`, the smallest gap), else `None`. The move applies to every refined node.
pub fn normalise<'a>(
    clocks: impl Iterator<Item = &'a NodeClock>,
    tolerance_ns: i64,
    early_ns: i64,
) -> Option<i64> {
    let excess = clocks
        .filter(|c| c.refined.is_some() && c.settled)
        .map(|c| c.offset_ns().saturating_sub(c.best_bound_ns()))
        .max()?;
    if excess > tolerance_ns || excess < -early_ns {
        Some(-excess)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: u64 = 1_760_000_000_000_000_000; // wall time of the node's boot
    const RP: RefineParams = RefineParams {
        quantile: 0.1,
        settle_ms: 5.0,
        max_above_bound_ns: 500_000_000,
    };

    #[test]
    fn classifies_monotonic_and_wall_timestamps() {
        assert!(!is_wall_clock(3_600_000_000_000)); // an hour of uptime
        assert!(!is_wall_clock(30 * 365 * 86_400 * 1_000_000_000)); // 30 years of uptime
        assert!(is_wall_clock(BOOT));
    }

    #[test]
    fn minimum_delivery_delay_wins_and_is_an_upper_bound() {
        let mut c = NodeClock::default();
        // Batches arrive at 10 s intervals; the newest point is 300, 40, 120 ms old.
        for (i, delay_ms) in [300u64, 40, 120].iter().enumerate() {
            let mono = 50_000_000_000 + i as u64 * 10_000_000_000;
            let arrival = Timestamp(BOOT + mono + delay_ms * 1_000_000);
            c.observe(arrival, mono, 8);
        }
        assert_eq!(c.batches(), 3);
        assert_eq!(c.offset_ns(), BOOT as i64 + 40_000_000);
        // Aligned times are never earlier than the truth.
        assert_eq!(c.align(1_000), BOOT as i64 + 40_000_000 + 1_000);
    }

    #[test]
    fn window_forgets_old_samples() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 1_000 + 5), 1_000, 2);
        c.observe(Timestamp(BOOT + 2_000 + 50), 2_000, 2);
        c.observe(Timestamp(BOOT + 3_000 + 70), 3_000, 2);
        assert_eq!(c.offset_ns(), BOOT as i64 + 50);
    }

    #[test]
    fn refinement_moves_the_low_quantile_of_lags_to_zero() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 10_000), 10_000, 8);
        let g = c.generation();
        assert!(!c.is_refined());
        // 64 lags: 56 around +30 ms (the arrival bound was 30 ms too late), 8 stragglers.
        for i in 0..REFINE_SAMPLES {
            let lag = if i % 9 == 0 {
                300.0
            } else {
                30.0 + (i % 5) as f64 * 0.1
            };
            c.add_residual(g, lag, RP);
        }
        assert!(c.is_refined());
        assert!(!c.is_settled(), "the first step is a large correction");
        assert_eq!(c.refinements(), 1);
        assert_ne!(c.generation(), g);
        // The 10 % quantile of the lags is 30.0 ms: the offset moves 30 ms earlier.
        assert_eq!(c.offset_ns(), BOOT as i64 - 30_000_000);
        assert_eq!(c.arrival_offset_ns(), BOOT as i64);
        // Samples of the old generation are ignored.
        for _ in 0..REFINE_SAMPLES {
            c.add_residual(g, 100.0, RP);
        }
        assert_eq!(c.refinements(), 1);
        // Small corrections settle the node, after SETTLE_STEPS of them in a row.
        for i in 0..SETTLE_STEPS {
            assert!(!c.is_settled());
            let g = c.generation();
            for _ in 0..REFINE_SAMPLES {
                c.add_residual(g, if i == 0 { 2.0 } else { 0.0 }, RP);
            }
        }
        assert!(c.is_settled());
        assert_eq!(c.offset_ns(), BOOT as i64 - 32_000_000);
        // Later arrival samples do not move a refined node.
        c.observe(Timestamp(BOOT + 3_000_000_000 + 20_000), 20_000, 1);
        assert!(c.is_settled());
        assert_eq!(c.offset_ns(), BOOT as i64 - 32_000_000);
        assert_eq!(c.arrival_offset_ns(), BOOT as i64 + 3_000_000_000);
    }

    #[test]
    fn anchor_is_settled_fixed_and_never_refined() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 1_000 + 40_000_000), 1_000, 2);
        c.make_anchor();
        assert!(c.is_anchor() && c.is_settled() && c.is_refined());
        assert_eq!(c.offset_ns(), BOOT as i64 + 40_000_000);
        // A better delivery sample improves the bound, not the anchor's offset...
        c.observe(Timestamp(BOOT + 2_000 + 31_000_000), 2_000, 2);
        assert_eq!(c.arrival_offset_ns(), BOOT as i64 + 31_000_000);
        assert_eq!(c.offset_ns(), BOOT as i64 + 40_000_000);
        // ...normalisation does (see below), and residuals never do.
        for _ in 0..REFINE_SAMPLES {
            c.add_residual(c.generation(), 10.0, RP);
        }
        assert_eq!(c.refinements(), 0);
        let e = c.epoch();
        c.shift(-9_000_000);
        assert_eq!(c.offset_ns(), BOOT as i64 + 31_000_000);
        assert!(c.is_settled(), "the anchor stays settled");
        assert_ne!(c.epoch(), e);
    }

    #[test]
    fn normalisation_meets_the_tightest_bound() {
        let node = |bound: u64, refined_ms: Option<i64>| {
            let mut c = NodeClock::default();
            c.observe(Timestamp(BOOT + 1_000 + bound), 1_000, 2);
            if let Some(ms) = refined_ms {
                c.refined = Some(BOOT as i64 + ms * 1_000_000);
                c.settled = true;
            }
            c
        };
        // Bounds at +100, +300, +50 ms; refined offsets at +200, +210, +190 ms: the third is
        // 140 ms later than its bound, so everyone moves 140 ms earlier.
        let a = [
            node(100_000_000, Some(200)),
            node(300_000_000, Some(210)),
            node(50_000_000, Some(190)),
            node(1_000, None), // unrefined nodes do not count
        ];
        assert_eq!(
            normalise(a.iter(), 5_000_000, 250_000_000),
            Some(-140_000_000)
        );
        // All at least 300 ms earlier than their bounds: move later by the smallest gap.
        let b = [node(400_000_000, Some(100)), node(900_000_000, Some(500))];
        assert_eq!(
            normalise(b.iter(), 5_000_000, 250_000_000),
            Some(300_000_000)
        );
        // Within tolerance on both sides: leave it.
        let c = [node(100_000_000, Some(97)), node(900_000_000, Some(500))];
        assert_eq!(normalise(c.iter(), 5_000_000, 250_000_000), None);
        assert_eq!(normalise([node(1, None)].iter(), 5, 5), None);
    }

    #[test]
    fn shifting_moves_refined_nodes_only() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 1_000), 1_000, 2);
        c.shift(-7);
        assert_eq!(
            c.offset_ns(),
            BOOT as i64,
            "an unrefined node keeps its arrival bound"
        );
        for _ in 0..REFINE_SAMPLES {
            c.add_residual(c.generation(), 1.0, RP);
        }
        for _ in 0..SETTLE_STEPS as usize * REFINE_SAMPLES {
            c.add_residual(c.generation(), 0.0, RP);
        }
        assert!(c.is_settled());
        let before = c.offset_ns();
        let g = c.generation();
        let e = c.epoch();
        c.shift(-56_000_000);
        assert_eq!(c.offset_ns(), before - 56_000_000);
        assert!(c.is_settled(), "relative offsets are unchanged");
        assert_ne!(c.generation(), g);
        assert_ne!(c.epoch(), e);
    }

    #[test]
    fn reboot_resets_the_estimate() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 900_000_000_000), 900_000_000_000, 32);
        c.observe(Timestamp(BOOT + 910_000_000_000), 910_000_000_000, 32);
        let g = c.generation();
        for _ in 0..(1 + SETTLE_STEPS as usize) * REFINE_SAMPLES {
            c.add_residual(c.generation(), 1.0, RP);
        }
        assert!(c.is_settled());
        // Rebooted at BOOT + 1000 s: monotonic starts again from 0.
        let reboot = BOOT + 1_000_000_000_000;
        c.observe(Timestamp(reboot + 20_000_000_000), 20_000_000_000, 32);
        assert_eq!(c.batches(), 1);
        assert!(!c.is_refined() && !c.is_settled());
        assert_ne!(c.generation(), g);
        assert_eq!(c.offset_ns(), reboot as i64);
    }
}
