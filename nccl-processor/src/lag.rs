//! Lag math for one collective instance: each rank's entry time against the median entry.
//!
//! Definition: for the ranks present in one instance with aligned entry times `t_r`,
//! `lag_r = t_r - median(t)` (milliseconds). Positive means the rank entered the collective
//! after the median rank (it is behind: its peers wait for it); negative means it was early
//! and waited. For an even count the median is the mean of the two middle entries. The median,
//! not the mean or the earliest entry, is the reference because it stays put when one rank
//! or several (up to half) are late, so a straggler cannot move the bar it is measured by.
//!
//! A rank is *behind* on a step when `lag_r >= max(min_lag_ms, mad_k * 1.4826 * MAD)` where
//! MAD is the median of `|lag|` over the instance: the absolute floor keeps sub-millisecond
//! jitter from counting, the MAD term scales the bar up on noisy communicators.

use ingero_wire::MAD_SCALE;

/// The parameters of the behind test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LagParams {
    pub min_lag_ms: f64,
    pub mad_k: f64,
}

/// Result of [`compute_lags`]; `lags_ms[i]` belongs to `times[i]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepLags {
    /// Median entry time (aligned ns), the collective's time.
    pub median_ns: i64,
    /// Median absolute lag, ms.
    pub mad_ms: f64,
    /// A lag at or above this is "behind".
    pub behind_threshold_ms: f64,
    pub lags_ms: Vec<f64>,
}

impl StepLags {
    pub fn is_behind(&self, lag_ms: f64) -> bool {
        lag_ms >= self.behind_threshold_ms && lag_ms > 0.0
    }
}

/// Buffers reused between calls so the hot path does not allocate.
#[derive(Debug, Default)]
pub struct LagScratch {
    times: Vec<i64>,
    abs: Vec<f64>,
}

/// Lags of every entry against the median entry, written to `out`. Returns `None` (and
/// leaves `out` alone) for an empty slice.
pub fn compute_lags(
    times: &[i64],
    params: LagParams,
    ws: &mut LagScratch,
    out: &mut StepLags,
) -> Option<()> {
    let n = times.len();
    if n == 0 {
        return None;
    }
    let scratch = &mut ws.times;
    scratch.clear();
    scratch.extend_from_slice(times);
    let mid = n / 2;
    let (_, &mut hi, _) = scratch.select_nth_unstable(mid);
    // For an even count the lower middle is the largest of the lower half.
    let lo = if n.is_multiple_of(2) {
        scratch[..mid].iter().copied().max().unwrap_or(hi)
    } else {
        hi
    };
    // median = lo + (hi - lo) / 2, computed relative to `lo` so nanosecond precision survives
    // f64 at epoch-sized magnitudes.
    let half_gap = (hi.saturating_sub(lo)) as f64 / 2.0;
    out.median_ns = lo.saturating_add(hi.saturating_sub(lo) / 2);
    out.lags_ms.clear();
    out.lags_ms.extend(
        times
            .iter()
            .map(|&t| (t.saturating_sub(lo) as f64 - half_gap) / 1e6),
    );
    ws.abs.clear();
    ws.abs.extend(out.lags_ms.iter().map(|l| l.abs()));
    out.mad_ms = median_f64(&mut ws.abs).unwrap_or(0.0);
    out.behind_threshold_ms = params.min_lag_ms.max(params.mad_k * MAD_SCALE * out.mad_ms);
    Some(())
}

/// Median of `values` (reorders them). `None` when empty.
pub fn median_f64(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (lower, &mut hi, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    if !n.is_multiple_of(2) {
        return Some(hi);
    }
    let lo = lower.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(lo + (hi - lo) / 2.0)
}

/// For offset refinement: each entry of a target group (a node) against the `q` quantile of
/// the entries of *all other* groups in the same instance (ms). Comparing against the other
/// groups keeps a node that holds many of an instance's ranks from pulling its own reference
/// along; comparing against the same quantile the refinement zeroes (rather than the
/// median) makes an on-time node's correction zero on average, so nodes that all refine
/// against each other do not drift together. `groups[i]` is entry `i`'s group;
/// `is_target(i)` selects the entries to report, `is_reference(j)` the entries that may serve
/// as the reference. Writes `(entry index, ms)`. A group with no reference entry of another
/// group in the instance reports nothing.
pub fn against_other_groups(
    times: &[i64],
    groups: &[u32],
    q: f64,
    is_target: impl Fn(usize) -> bool,
    is_reference: impl Fn(usize) -> bool,
    out: &mut Vec<(usize, f64)>,
) {
    out.clear();
    let n = times.len().min(groups.len());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| times[i]);
    let mut done: Vec<u32> = Vec::new();
    let mut others: Vec<i64> = Vec::with_capacity(n);
    for i in 0..n {
        let g = groups[i];
        if !is_target(i) || done.contains(&g) {
            continue;
        }
        done.push(g);
        others.clear();
        others.extend(
            order
                .iter()
                .filter(|&&j| groups[j] != g && is_reference(j))
                .map(|&j| times[j]),
        );
        let m = others.len();
        if m == 0 {
            continue;
        }
        let idx = ((m - 1) as f64 * q.clamp(0.0, 1.0)).floor() as usize;
        let Some(&reference) = others.get(idx) else {
            continue;
        };
        for j in 0..n {
            if groups[j] == g && is_target(j) {
                out.push((j, times[j].saturating_sub(reference) as f64 / 1e6));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: LagParams = LagParams {
        min_lag_ms: 20.0,
        mad_k: 5.0,
    };

    fn lags(times: &[i64]) -> StepLags {
        let mut out = StepLags::default();
        compute_lags(times, P, &mut LagScratch::default(), &mut out).unwrap();
        out
    }

    const MS: i64 = 1_000_000;
    const EPOCH: i64 = 1_760_000_000_000_000_000;

    #[test]
    fn one_late_rank_of_eight_is_behind_by_its_delay() {
        let mut t: Vec<i64> = (0..8).map(|i| EPOCH + i * MS / 10).collect();
        t[5] += 290 * MS;
        let s = lags(&t);
        // Median of the seven on-time ranks plus one late: between entries 3 and 4 (0.35 ms).
        assert!(
            (s.lags_ms[5] - (290.5 - 0.35)).abs() < 1e-6,
            "{:?}",
            s.lags_ms
        );
        assert!(s.is_behind(s.lags_ms[5]));
        for (i, l) in s.lags_ms.iter().enumerate() {
            if i != 5 {
                assert!(l.abs() < 1.0 && !s.is_behind(*l), "rank {i}: {l}");
            }
        }
        assert_eq!(s.behind_threshold_ms, 20.0);
    }

    #[test]
    fn even_count_median_is_mean_of_middles() {
        let s = lags(&[EPOCH, EPOCH + 10 * MS, EPOCH + 20 * MS, EPOCH + 30 * MS]);
        assert_eq!(s.median_ns, EPOCH + 15 * MS);
        assert_eq!(s.lags_ms, vec![-15.0, -5.0, 5.0, 15.0]);
        assert_eq!(s.mad_ms, 10.0);
    }

    #[test]
    fn noisy_instance_raises_the_behind_bar() {
        // Spread of +-30 ms: MAD ~ 15 ms, bar = 5 * 1.4826 * MAD > 100 ms.
        let t: Vec<i64> = [-30, -20, -10, 0, 10, 20, 30, 60]
            .iter()
            .map(|d| EPOCH + d * MS)
            .collect();
        let s = lags(&t);
        assert!(s.behind_threshold_ms > 100.0, "{}", s.behind_threshold_ms);
        assert!(!s.is_behind(s.lags_ms[7]));
    }

    #[test]
    fn single_entry_has_zero_lag_and_empty_has_none() {
        let s = lags(&[EPOCH]);
        assert_eq!(s.lags_ms, vec![0.0]);
        assert!(!s.is_behind(0.0));
        let mut out = StepLags::default();
        assert!(compute_lags(&[], P, &mut LagScratch::default(), &mut out).is_none());
    }

    #[test]
    fn median_f64_handles_odd_even_and_empty() {
        assert_eq!(median_f64(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_f64(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median_f64(&mut []), None);
    }

    #[test]
    fn other_groups_are_the_reference() {
        // Node 1 (entries 4..8) is 40 ms late and holds half the ranks.
        let t: Vec<i64> = (0..8)
            .map(|i| EPOCH + i * MS / 10 + if i >= 4 { 40 * MS } else { 0 })
            .collect();
        let g = [0, 0, 0, 0, 1, 1, 1, 1];
        let mut out = Vec::new();
        // Against the others' lower median (entry 1 at 0.1 ms).
        against_other_groups(&t, &g, 0.5, |i| i >= 4, |_| true, &mut out);
        assert_eq!(out.len(), 4);
        for (i, d) in &out {
            assert!(
                (d - (40.0 + *i as f64 / 10.0 - 0.1)).abs() < 1e-9,
                "{i}: {d}"
            );
        }
        // Against the others' minimum.
        against_other_groups(&t, &g, 0.0, |i| i >= 4, |_| true, &mut out);
        assert!((out[0].1 - 40.4).abs() < 1e-9, "{out:?}");
        // Only reference entries count: against entry 3 alone.
        against_other_groups(&t, &g, 0.0, |i| i >= 4, |j| j == 3, &mut out);
        assert!((out[0].1 - 40.1).abs() < 1e-9, "{out:?}");
        // A single-group instance says nothing about that group's offset.
        against_other_groups(&t, &[3; 8], 0.1, |_| true, |_| true, &mut out);
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn lags_are_order_and_shift_invariant(
            deltas in prop::collection::vec(-500_000_000i64..500_000_000, 1..64),
            shift in -1_000_000_000i64..1_000_000_000,
            seed in any::<u64>(),
        ) {
            let t: Vec<i64> = deltas.iter().map(|d| EPOCH + d).collect();
            let base = lags(&t);
            // Permute with a seeded Fisher-Yates.
            let mut idx: Vec<usize> = (0..t.len()).collect();
            let mut s = seed;
            for i in (1..idx.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                idx.swap(i, (s >> 33) as usize % (i + 1));
            }
            let permuted: Vec<i64> = idx.iter().map(|&i| t[i] + shift).collect();
            let p = lags(&permuted);
            for (k, &i) in idx.iter().enumerate() {
                prop_assert!((p.lags_ms[k] - base.lags_ms[i]).abs() < 1e-6);
            }
            prop_assert!((p.mad_ms - base.mad_ms).abs() < 1e-9);
        }

        #[test]
        fn at_most_half_the_ranks_are_behind(
            deltas in prop::collection::vec(-500_000_000i64..500_000_000, 1..64),
        ) {
            let t: Vec<i64> = deltas.iter().map(|d| EPOCH + d).collect();
            let s = lags(&t);
            let positive = s.lags_ms.iter().filter(|l| **l > 0.0).count();
            let negative = s.lags_ms.iter().filter(|l| **l < 0.0).count();
            prop_assert!(positive <= t.len() / 2);
            prop_assert!(negative <= t.len() / 2);
            let behind = s.lags_ms.iter().filter(|l| s.is_behind(**l)).count();
            prop_assert!(behind <= positive);
        }
    }
}
