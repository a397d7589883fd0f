//! Rolling per-rank statistics: who is chronically behind, and who is behind on a beat.
//!
//! Each `(cluster, comm, op_type, rank)` keeps a [`RankWindow`] of its last
//! `chronic.window_steps` steps (a *step* is one emitted instance of that collective the rank
//! took part in) with the lag and whether it was behind (see [`crate::lag`]).
//!
//! - **Chronic**: at least `chronic.min_steps` steps in the window and behind on at least
//!   `chronic.behind_fraction` of them ("rank 5 is 290 ms behind on ncclAllReduce of comm X,
//!   41 of the last 50 steps"). The lag reported for it is the median lag over its behind
//!   steps.
//! - **Periodic**: the behind steps come in episodes (a run of consecutive behind steps is
//!   one episode) that start every `N` steps: at least `periodic.min_repeats` episodes, `N`
//!   the median gap between episode starts, `N >= 2`, at least `periodic.match_fraction` of
//!   the gaps a whole number of periods (`k * N`, within +-`k * N/10`: a missed occurrence
//!   keeps the rhythm), and the pattern current (no more than `2N` steps since the last
//!   episode). Steps are numbered by the position of each instance's key (`op_seq`, or
//!   the median entry time for time buckets) among the stream's recent instances
//!   ([`StepIndex`]), so a rank that missed an instance (dropped point), or an instance
//!   emitted late after its grace period, does not shift the count.
//!
//! A rank is *named* when it is chronic or periodic; only named ranks reach the labelled
//! telemetry gauges, which keeps their cardinality bounded.

use std::collections::VecDeque;

/// One step of one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The instance key: `op_seq`, or the median entry time (ns) for time buckets.
    pub key: i64,
    pub lag_ms: f32,
    pub behind: bool,
}

/// The thresholds of chronic and periodic detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankParams {
    pub window_steps: usize,
    pub min_steps: usize,
    pub behind_fraction: f64,
    pub min_repeats: usize,
    pub match_fraction: f64,
}

/// A detected period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Period {
    pub steps: u32,
    last_event_key: i64,
}

/// Maps an instance key to its position among the stream's recent instances.
pub type Ordinal<'a> = dyn FnMut(i64) -> Option<i64> + 'a;

/// The rolling window of one rank on one `(comm, op_type)`.
#[derive(Debug, Clone, Default)]
pub struct RankWindow {
    steps: VecDeque<Step>,
    behind: usize,
    period: Option<Period>,
    total_steps: u64,
}

impl RankWindow {
    /// Record a step. `ordinal` maps instance keys to stream step numbers; it is used only
    /// when a period is being detected or checked.
    pub fn record(&mut self, step: Step, p: &RankParams, ordinal: &mut Ordinal<'_>) {
        let mut evicted_behind = false;
        while self.steps.len() >= p.window_steps.max(1) {
            if let Some(old) = self.steps.pop_front()
                && old.behind
            {
                self.behind = self.behind.saturating_sub(1);
                evicted_behind = true;
            }
        }
        self.steps.push_back(step);
        self.total_steps = self.total_steps.saturating_add(1);
        if step.behind {
            self.behind += 1;
        }
        if step.behind || evicted_behind {
            self.period = self.detect(p, ordinal);
        } else if let Some(per) = self.period {
            let since = match (ordinal(step.key), ordinal(per.last_event_key)) {
                (Some(now), Some(last)) => now.saturating_sub(last),
                _ => i64::MAX,
            };
            let n = i64::from(per.steps);
            if since > 2 * n + tolerance(n) {
                self.period = None;
            }
        }
    }

    fn detect(&self, p: &RankParams, ordinal: &mut Ordinal<'_>) -> Option<Period> {
        let mut seen: Vec<(i64, bool, i64)> = self
            .steps
            .iter()
            .filter_map(|s| ordinal(s.key).map(|o| (o, s.behind, s.key)))
            .collect();
        seen.sort_unstable_by_key(|x| x.0);
        let latest = seen.last()?.0;
        // Only the last `window_steps` stream steps: a step emitted late (after its grace
        // period) can sit in the window long after its neighbours left it.
        let first = latest.saturating_sub(p.window_steps as i64 - 1);
        seen.retain(|x| x.0 >= first);
        let steps: Vec<(i64, bool)> = seen.iter().map(|x| (x.0, x.1)).collect();
        let (period, last_start) = detect_period(&steps, latest, p.min_repeats, p.match_fraction)?;
        let last_event_key = seen.iter().find(|x| x.0 == last_start)?.2;
        Some(Period {
            steps: period,
            last_event_key,
        })
    }

    /// Steps currently in the window.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Behind steps currently in the window.
    pub fn behind_count(&self) -> usize {
        self.behind
    }

    pub fn behind_ratio(&self) -> f64 {
        if self.steps.is_empty() {
            0.0
        } else {
            self.behind as f64 / self.steps.len() as f64
        }
    }

    pub fn is_chronic(&self, p: &RankParams) -> bool {
        self.steps.len() >= p.min_steps
            && self.behind > 0
            && self.behind_ratio() + 1e-12 >= p.behind_fraction
    }

    pub fn period(&self) -> Option<u32> {
        self.period.map(|p| p.steps)
    }

    /// Chronic or periodic.
    pub fn is_named(&self, p: &RankParams) -> bool {
        self.is_chronic(p) || self.period.is_some()
    }

    /// Median lag over the behind steps in the window.
    pub fn median_behind_lag_ms(&self) -> Option<f64> {
        let mut v: Vec<f64> = self
            .steps
            .iter()
            .filter(|s| s.behind)
            .map(|s| f64::from(s.lag_ms))
            .collect();
        crate::lag::median_f64(&mut v)
    }

    pub fn last_lag_ms(&self) -> Option<f64> {
        self.steps.back().map(|s| f64::from(s.lag_ms))
    }

    /// Steps recorded over the window's life.
    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }
}

/// Allowed deviation of a gap from a period of `n` steps: `n / 10`.
fn tolerance(n: i64) -> i64 {
    n / 10
}

/// Ordinals that start an episode: a behind step whose previous *observed* step was not
/// behind. Steps the rank was not seen in (dropped point, lag not emitted) do not split an
/// episode, so they cannot fake a rhythm.
fn episode_starts(steps: &[(i64, bool)]) -> Vec<i64> {
    let mut out = Vec::new();
    let mut prev_behind = false;
    for &(ord, behind) in steps {
        if behind && !prev_behind {
            out.push(ord);
        }
        prev_behind = behind;
    }
    out
}

/// The period, in steps, of behind episodes among a rank's observed steps `(ordinal,
/// behind)` sorted by ordinal, given the newest stream ordinal `latest`. Returns the period
/// and the ordinal of the last episode start.
pub fn detect_period(
    steps: &[(i64, bool)],
    latest: i64,
    min_repeats: usize,
    match_fraction: f64,
) -> Option<(u32, i64)> {
    let starts = episode_starts(steps);
    if starts.len() < min_repeats.max(3) {
        return None;
    }
    let gaps: Vec<i64> = starts
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    let mut by_size = gaps.clone();
    by_size.sort_unstable();
    let p = *by_size.get(by_size.len() / 2)?;
    if p < 2 {
        return None;
    }
    let tol = tolerance(p);
    // A gap of k periods (an occurrence the rank was not seen in, or was on time for once)
    // still keeps the rhythm.
    let matches = gaps
        .iter()
        .filter(|g| {
            let k = ((**g as f64) / (p as f64)).round().max(1.0) as i64;
            (**g - k * p).abs() <= tol * k
        })
        .count();
    if (matches as f64) + 1e-9 < match_fraction * gaps.len() as f64 {
        return None;
    }
    let last = *starts.last()?;
    if latest.saturating_sub(last) > 2 * p + tol {
        return None;
    }
    Some((u32::try_from(p).ok()?, last))
}

/// The keys of a stream's most recent instances, numbered in key order: the step index
/// periods are counted in (robust to instances emitted out of order, and to ranks that
/// missed an instance).
#[derive(Debug, Clone, Default)]
pub struct StepIndex {
    keys: VecDeque<i64>,
    capacity: usize,
    evicted: i64,
    sorted: Option<Vec<i64>>,
}

impl StepIndex {
    pub fn new(capacity: usize) -> Self {
        StepIndex {
            capacity: capacity.max(2),
            ..StepIndex::default()
        }
    }

    pub fn push(&mut self, key: i64) {
        if self.keys.len() >= self.capacity.max(2) {
            self.keys.pop_front();
            self.evicted = self.evicted.saturating_add(1);
        }
        self.keys.push_back(key);
        self.sorted = None;
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The step number of `key`, if it is one of the recent instances.
    pub fn ordinal(&mut self, key: i64) -> Option<i64> {
        let keys = &self.keys;
        let sorted = self.sorted.get_or_insert_with(|| {
            let mut v: Vec<i64> = keys.iter().copied().collect();
            v.sort_unstable();
            v
        });
        let i = sorted.binary_search(&key).ok()?;
        Some(self.evicted.saturating_add(i as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: RankParams = RankParams {
        window_steps: 50,
        min_steps: 10,
        behind_fraction: 0.5,
        min_repeats: 3,
        match_fraction: 0.8,
    };

    fn feed(w: &mut RankWindow, steps: impl IntoIterator<Item = (i64, f32, bool)>) {
        for (key, lag_ms, behind) in steps {
            w.record(
                Step {
                    key,
                    lag_ms,
                    behind,
                },
                &P,
                &mut Some,
            );
        }
    }

    #[test]
    fn rank_behind_41_of_50_steps_is_chronic_with_its_behind_median() {
        let mut w = RankWindow::default();
        // 60 steps; the last 50 have 41 behind (on time on every 10th and 4 more).
        feed(
            &mut w,
            (0..60).map(|i| {
                let behind = i >= 10 && !(i % 10 == 0 || matches!(i, 13 | 27 | 44 | 58));
                (i, if behind { 290.0 + (i % 3) as f32 } else { 1.0 }, behind)
            }),
        );
        assert_eq!(w.len(), 50);
        assert_eq!(w.behind_count(), 41);
        assert!(w.is_chronic(&P) && w.is_named(&P));
        assert_eq!(w.median_behind_lag_ms(), Some(291.0));
        assert!((w.behind_ratio() - 0.82).abs() < 1e-12);
        assert_eq!(
            w.period(),
            None,
            "behind nearly every step is not a pattern"
        );
    }

    #[test]
    fn occasional_lag_is_neither_chronic_nor_periodic() {
        let mut w = RankWindow::default();
        feed(&mut w, (0..50).map(|i| (i, 0.5, matches!(i, 3 | 17 | 40))));
        assert!(!w.is_chronic(&P));
        assert_eq!(w.period(), None);
        assert!(!w.is_named(&P));
    }

    #[test]
    fn lag_every_14_steps_is_periodic_and_named() {
        let mut w = RankWindow::default();
        feed(
            &mut w,
            (0..50).map(|i| (i, if i % 14 == 5 { 250.0 } else { 0.0 }, i % 14 == 5)),
        );
        assert_eq!(w.period(), Some(14));
        assert!(!w.is_chronic(&P));
        assert!(w.is_named(&P));
        // Runs of two behind steps every 14 steps are one episode each.
        let mut w = RankWindow::default();
        feed(
            &mut w,
            (0..50).map(|i| (i, 0.0, i % 14 == 5 || i % 14 == 6)),
        );
        assert_eq!(w.period(), Some(14));
    }

    #[test]
    fn period_survives_a_missed_instance_and_irregular_keys() {
        // Keys are irregular (time-bucket medians): step i at about 3.5 s * i.
        let keys: Vec<i64> = (0..50i64).map(|i| i * 3_500 + (i * 37) % 400).collect();
        let mut index = StepIndex::new(100);
        let mut w = RankWindow::default();
        for (i, &k) in keys.iter().enumerate() {
            index.push(k);
            if i == 19 {
                continue; // this rank's point of step 19 (a behind one) was dropped
            }
            let behind = i % 7 == 5;
            w.record(
                Step {
                    key: k,
                    lag_ms: 0.0,
                    behind,
                },
                &P,
                &mut |k| index.ordinal(k),
            );
        }
        assert_eq!(w.period(), Some(7));
    }

    #[test]
    fn a_step_emitted_late_does_not_fake_a_period() {
        // A chronic rank; instance 18 was emitted 37 steps late (it waited for a missing
        // rank), so its step sits among steps 52..100 of the window.
        let mut index = StepIndex::new(100);
        let mut w = RankWindow::default();
        let mut order: Vec<i64> = (0..100).filter(|k| *k != 18).collect();
        order.insert(55, 18);
        for k in order {
            index.push(k);
            let behind = k == 18 || (k >= 52 && k != 88);
            w.record(
                Step {
                    key: k,
                    lag_ms: 290.0,
                    behind,
                },
                &P,
                &mut |k| index.ordinal(k),
            );
        }
        assert!(w.is_chronic(&P));
        assert_eq!(w.period(), None);
    }

    #[test]
    fn a_stopped_pattern_goes_stale() {
        let mut w = RankWindow::default();
        feed(&mut w, (0..40).map(|i| (i, 0.0, i % 5 == 0)));
        assert_eq!(w.period(), Some(5));
        // Last episode at 35: up to 2N = 10 steps later the pattern still stands.
        feed(&mut w, (40..46).map(|i| (i, 0.0, false)));
        assert_eq!(w.period(), Some(5));
        feed(&mut w, [(46, 0.0, false)]);
        assert_eq!(w.period(), None);
    }

    /// Every ordinal 0..=latest observed, behind at `events`.
    fn observed(events: &[i64], latest: i64) -> Vec<(i64, bool)> {
        (0..=latest).map(|o| (o, events.contains(&o))).collect()
    }

    #[test]
    fn detect_period_rejects_irregular_gaps() {
        assert_eq!(
            detect_period(&observed(&[0, 14, 28, 42], 45), 45, 3, 0.8),
            Some((14, 42))
        );
        assert_eq!(
            detect_period(&observed(&[0, 14, 30, 42], 45), 45, 3, 0.8),
            None
        );
        assert_eq!(detect_period(&observed(&[0, 14], 20), 20, 3, 0.8), None);
        assert_eq!(
            detect_period(&observed(&[0, 14, 28, 42], 80), 80, 3, 0.8),
            None,
            "stale"
        );
        // +-N/10 tolerance for longer periods.
        let ev = [0, 20, 41, 60, 80];
        assert_eq!(
            detect_period(&observed(&ev, 85), 85, 3, 0.8),
            Some((20, 80))
        );
    }

    #[test]
    fn steps_the_rank_missed_do_not_split_an_episode() {
        // Behind on every observed step; unobserved every 17th step.
        let steps: Vec<(i64, bool)> = (0..50).filter(|o| o % 17 != 3).map(|o| (o, true)).collect();
        assert_eq!(detect_period(&steps, 49, 3, 0.8), None);
        assert_eq!(episode_starts(&steps), vec![0]);
    }

    #[test]
    fn step_index_numbers_keys_in_order_and_slides() {
        let mut x = StepIndex::new(4);
        for k in [10, 30, 20, 40] {
            x.push(k);
        }
        assert_eq!(x.ordinal(20), Some(1));
        assert_eq!(x.ordinal(40), Some(3));
        assert_eq!(x.ordinal(25), None);
        x.push(50); // evicts 10
        assert_eq!(x.ordinal(10), None);
        assert_eq!(x.ordinal(50), Some(4));
        assert_eq!(x.ordinal(20), Some(1));
    }

    proptest! {
        #[test]
        fn injected_period_is_found_for_any_phase_and_period(
            period in 2i64..16,
            phase in 0i64..16,
            stride in 1i64..1000,
        ) {
            let mut index = StepIndex::new(128);
            let mut w = RankWindow::default();
            let params = RankParams { window_steps: 64, ..P };
            for i in 0..64 {
                let behind = i % period == phase % period;
                index.push(i * stride);
                w.record(Step { key: i * stride, lag_ms: 1.0, behind }, &params, &mut |k| index.ordinal(k));
            }
            prop_assert_eq!(w.period(), Some(period as u32));
        }

        #[test]
        fn behind_count_matches_the_window(flags in prop::collection::vec(any::<bool>(), 0..200)) {
            let mut w = RankWindow::default();
            for (i, b) in flags.iter().enumerate() {
                w.record(Step { key: i as i64, lag_ms: 0.0, behind: *b }, &P, &mut |k| Some(k));
            }
            let tail = &flags[flags.len().saturating_sub(50)..];
            prop_assert_eq!(w.len(), tail.len());
            prop_assert_eq!(w.behind_count(), tail.iter().filter(|b| **b).count());
        }
    }
}
