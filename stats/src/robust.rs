//! Median and median absolute deviation by selection (O(n), no full sort), and the
//! MAD threshold formula. Pure functions over `f64` slices; callers guarantee finite input
//! (the processor rejects non-finite scores before they are stored).

use crate::MAD_SCALE;

/// The robust location and spread of one cohort's active scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RobustStats {
    pub n: usize,
    pub median: f64,
    /// Raw median absolute deviation (not scaled by 1.4826, not floored).
    pub mad: f64,
}

impl RobustStats {
    /// Compute median and MAD of `values`. The slice is used as scratch: on return it holds
    /// the absolute deviations in unspecified order. `None` for an empty slice.
    pub fn compute(values: &mut [f64]) -> Option<RobustStats> {
        let median = median_in_place(values)?;
        for v in values.iter_mut() {
            *v = (*v - median).abs();
        }
        let mad = median_in_place(values)?;
        Some(RobustStats {
            n: values.len(),
            median,
            mad,
        })
    }

    /// [`Self::compute`] with the previous tick's statistic as a hint: the same result, bit
    /// for bit, usually cheaper. From [`BRACKET_MIN_LEN`] values, a `seed` brackets the
    /// median at `seed.median +- w` and the MAD at `seed.mad +- w`, where
    /// `w = SEED_HALF_WIDTH * seed.mad / sqrt(n)` (a few percent of the values for a fleet
    /// whose level moved less than about 0.1 MAD at 100k nodes); one read-only pass per
    /// statistic counts the values below the bracket and gathers those inside it into
    /// `scratch`, which a selection finishes. The deviations are computed inside that pass,
    /// never stored. A bracket that misses either rank falls back to [`Self::compute`]'s
    /// path for that statistic, so the result is always exact. `values` is scratch (its
    /// content on return is unspecified); `scratch` is reused across calls.
    pub fn compute_seeded(
        values: &mut [f64],
        seed: Option<RobustStats>,
        scratch: &mut Vec<f64>,
    ) -> Option<RobustStats> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let seed = seed.filter(|s| {
            n >= BRACKET_MIN_LEN && s.median.is_finite() && s.mad.is_finite() && s.mad >= 0.0
        });
        let Some(seed) = seed else {
            return Self::compute_with(values, scratch);
        };
        let (r1, r2) = ((n - 1) / 2, n / 2);
        let w = SEED_HALF_WIDTH * seed.mad / (n as f64).sqrt();
        let median = match gather_pair(
            values,
            (seed.median - w, seed.median + w),
            |x| x,
            (r1, r2),
            scratch,
        ) {
            Some((lower, upper)) => lower + (upper - lower) / 2.0,
            None => median_with(values, scratch)?,
        };
        let mad = match gather_pair(
            values,
            ((seed.mad - w).max(0.0), seed.mad + w),
            |x| (x - median).abs(),
            (r1, r2),
            scratch,
        ) {
            Some((lower, upper)) => lower + (upper - lower) / 2.0,
            None => {
                for v in values.iter_mut() {
                    *v = (*v - median).abs();
                }
                median_with(values, scratch)?
            }
        };
        Some(RobustStats { n, median, mad })
    }

    /// [`Self::compute`] with a reusable scratch buffer for the bracketing pass.
    fn compute_with(values: &mut [f64], scratch: &mut Vec<f64>) -> Option<RobustStats> {
        let median = median_with(values, scratch)?;
        for v in values.iter_mut() {
            *v = (*v - median).abs();
        }
        let mad = median_with(values, scratch)?;
        Some(RobustStats {
            n: values.len(),
            median,
            mad,
        })
    }

    /// The robust standard deviation the threshold and the classifier use:
    /// `1.4826 * max(MAD, mad_floor)`.
    pub fn sigma(&self, mad_floor: f64) -> f64 {
        MAD_SCALE * self.mad.max(mad_floor)
    }

    /// `median - k * 1.4826 * max(MAD, mad_floor)`, before smoothing and clamping.
    pub fn raw_threshold(&self, k: f64, mad_floor: f64) -> f64 {
        self.median - k * self.sigma(mad_floor)
    }
}

/// Inputs at least this long first try [`bracketed_pair`]; shorter ones quickselect.
pub const BRACKET_MIN_LEN: usize = 4096;
/// Evenly strided elements sampled to bracket the median.
const BRACKET_SAMPLE: usize = 1024;
/// Half-width of the bracket in sample ranks (about four standard deviations of the
/// sample rank of the median, `sqrt(1024) / 2 = 16`).
const BRACKET_HALF_WIDTH: usize = 64;
/// Half-width of a seeded bracket ([`RobustStats::compute_seeded`]) in units of
/// `seed.mad / sqrt(n)`. For fresh normal samples of an unchanged fleet, the sampling
/// standard deviation of the median is about `1.9 * MAD / sqrt(n)` and that of the MAD
/// about `1.7 * MAD / sqrt(n)`, so a stationary fleet stays well inside; a level shift of
/// more than `32 * MAD / sqrt(n)` (0.1 MAD at 100k nodes) misses and falls back.
pub const SEED_HALF_WIDTH: f64 = 32.0;

/// The median of `values` (average of the two middle values for even lengths). Reorders
/// the slice. `None` when empty. O(n): see [`middle_pair`].
pub fn median_in_place(values: &mut [f64]) -> Option<f64> {
    median_with(values, &mut Vec::new())
}

fn median_with(values: &mut [f64], scratch: &mut Vec<f64>) -> Option<f64> {
    let (lower, upper) = middle_pair(values, scratch)?;
    Some(lower + (upper - lower) / 2.0)
}

/// The values at sorted ranks `(n-1)/2` and `n/2`. Long inputs try a bracketing pass
/// first; anything it cannot settle goes to quickselect (`select_nth_unstable`), so the
/// result is always exact.
fn middle_pair(values: &mut [f64], scratch: &mut Vec<f64>) -> Option<(f64, f64)> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (r1, r2) = ((n - 1) / 2, n / 2);
    if n >= BRACKET_MIN_LEN
        && let Some(pair) = bracketed_pair_with(values, r1, r2, scratch)
    {
        return Some(pair);
    }
    let (left, upper, _) = values.select_nth_unstable_by(r2, f64::total_cmp);
    let upper = *upper;
    if r1 == r2 {
        return Some((upper, upper));
    }
    // For even n the lower middle value is the largest element left of `r2`.
    let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lower, upper))
}

/// [`bracketed_pair_with`] with a fresh buffer (tests).
#[cfg(test)]
fn bracketed_pair(values: &[f64], r1: usize, r2: usize) -> Option<(f64, f64)> {
    bracketed_pair_with(values, r1, r2, &mut Vec::new())
}

/// Floyd-Rivest-style selection of ranks `r1 <= r2`: a strided sample of the input gives a
/// narrow value bracket `[lo, hi]` that almost surely contains both ranks; one branch-light
/// pass counts the values below `lo` and gathers those inside the bracket (a few percent of
/// the input), and a quickselect over that small buffer finishes. `None` when the bracket
/// missed or overflowed (then the caller quickselects the whole input).
/// The buffer is `scratch`, reused across calls.
fn bracketed_pair_with(
    values: &[f64],
    r1: usize,
    r2: usize,
    scratch: &mut Vec<f64>,
) -> Option<(f64, f64)> {
    let n = values.len();
    let stride = n / BRACKET_SAMPLE;
    if stride == 0 {
        return None;
    }
    let mut sample: Vec<f64> = values
        .iter()
        .step_by(stride)
        .take(BRACKET_SAMPLE)
        .copied()
        .collect();
    sample.sort_unstable_by(f64::total_cmp);
    let m = sample.len();
    // Where ranks r1..=r2 of n fall in the sample, widened by the margin.
    let centre_lo = r1 * m / n;
    let centre_hi = (r2 * m).div_ceil(n);
    let lo = *sample.get(centre_lo.saturating_sub(BRACKET_HALF_WIDTH))?;
    let hi = *sample.get((centre_hi + BRACKET_HALF_WIDTH).min(m - 1))?;
    // Expected share inside the bracket is about 2 * 64 / 1024; allow three times that.
    let cap = n * 3 * (2 * BRACKET_HALF_WIDTH + 1) / m + 64;
    if scratch.len() < cap {
        scratch.resize(cap, 0.0);
    }
    let buf = scratch.get_mut(..cap)?;
    let mut len = 0usize;
    let mut below = 0usize;
    for &x in values {
        below += usize::from(x < lo);
        if let Some(slot) = buf.get_mut(len) {
            *slot = x;
        }
        len += usize::from(x >= lo && x <= hi);
    }
    if len > cap || below > r1 || r2 >= below + len {
        return None;
    }
    select_pair(buf.get_mut(..len)?, r1 - below, r2 - below)
}

/// Values per chunk of [`gather_pair`]'s pass (a power of two).
const GATHER_CHUNK: usize = 8;

/// One read-only pass for a seeded bracket `[lo, hi]` over `map(x)`: counts the mapped
/// values below `lo` and gathers those inside into `scratch` (sized to `values`, so it
/// cannot overflow), then selects ranks `r1 <= r2` among them. `None` when the bracket
/// does not hold both ranks.
fn gather_pair(
    values: &[f64],
    (lo, hi): (f64, f64),
    map: impl Fn(f64) -> f64,
    (r1, r2): (usize, usize),
    scratch: &mut Vec<f64>,
) -> Option<(f64, f64)> {
    let n = values.len();
    if scratch.len() < n + GATHER_CHUNK {
        scratch.resize(n + GATHER_CHUNK, 0.0);
    }
    let buf = scratch.as_mut_slice();
    let mut len = 0usize;
    let mut below = 0usize;
    // In chunks of 8: each value is stored at the chunk's next free position (a fixed
    // array indexed by a masked offset, so no bounds check and no branch per value); the
    // offset advances only for values inside the bracket.
    let mut chunks = values.chunks_exact(GATHER_CHUNK);
    for chunk in &mut chunks {
        let dst = buf
            .get_mut(len..len + GATHER_CHUNK)
            .and_then(|d| <&mut [f64; GATHER_CHUNK]>::try_from(d).ok())?;
        let mut k = 0usize;
        for &x in chunk {
            let y = map(x);
            below += usize::from(y < lo);
            dst[k & (GATHER_CHUNK - 1)] = y;
            k += usize::from(y >= lo && y <= hi);
        }
        len += k;
    }
    for &x in chunks.remainder() {
        let y = map(x);
        below += usize::from(y < lo);
        if let Some(slot) = buf.get_mut(len) {
            *slot = y;
        }
        len += usize::from(y >= lo && y <= hi);
    }
    if below > r1 || r2 >= below + len {
        return None;
    }
    select_pair(buf.get_mut(..len)?, r1 - below, r2 - below)
}

/// The values at ranks `k1 <= k2` of `v` (`k2` at most `k1 + 1`: the two middle ranks).
/// The second is the smallest value right of `k1` after selecting `k1`: a scan, not a
/// second selection.
fn select_pair(v: &mut [f64], k1: usize, k2: usize) -> Option<(f64, f64)> {
    if k1 >= v.len() || k2 >= v.len() {
        return None;
    }
    let (_, x, right) = v.select_nth_unstable_by(k1, f64::total_cmp);
    let v1 = *x;
    if k2 == k1 {
        return Some((v1, v1));
    }
    debug_assert_eq!(k2, k1 + 1);
    let v2 = right.iter().copied().min_by(f64::total_cmp)?;
    Some((v1, v2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::statistics::{Data, Median};

    /// Uniform values in [0, 1) from a xorshift64 generator (deterministic per seed).
    fn uniform(seed: u64) -> impl FnMut() -> f64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn oracle(values: &[f64]) -> (f64, f64) {
        let med = Data::new(values.to_vec()).median();
        let dev: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
        (med, Data::new(dev).median())
    }

    #[test]
    fn matches_statrs_on_odd_and_even_lengths() {
        let cases: [&[f64]; 5] = [
            &[0.5],
            &[0.9, 0.1],
            &[0.95, 0.96, 0.2, 0.97, 0.94],
            &[0.3, 0.3, 0.3, 0.9, 0.9, 0.1],
            &[1.0, 0.0, 0.5, 0.25, 0.75, 0.125, 0.875],
        ];
        for c in cases {
            let (m, d) = oracle(c);
            let mut v = c.to_vec();
            let s = RobustStats::compute(&mut v).unwrap();
            assert!((s.median - m).abs() < 1e-12, "{c:?}: {} vs {m}", s.median);
            assert!((s.mad - d).abs() < 1e-12, "{c:?}: {} vs {d}", s.mad);
            assert_eq!(s.n, c.len());
        }
    }

    #[test]
    fn long_inputs_match_statrs_on_the_bracketed_path_and_its_fallback() {
        let mut next = uniform(0x9E37_79B9_7F4A_7C15);
        let n = BRACKET_MIN_LEN;
        let clustered: Vec<f64> = (0..n + 1).map(|_| 0.95 + 0.02 * (next() - 0.5)).collect();
        let spread: Vec<f64> = (0..n * 3 + 2).map(|_| next()).collect();
        let dupes: Vec<f64> = (0..n * 2).map(|_| (next() * 10.0).floor() / 10.0).collect();
        let equal = vec![0.9; n + 3];
        // The strided sample sees only zeros: the bracket misses and quickselect decides.
        let stride = n / BRACKET_SAMPLE;
        let adversarial: Vec<f64> = (0..n)
            .map(|i| {
                if i % stride == 0 {
                    0.0
                } else {
                    0.5 + 0.4 * next()
                }
            })
            .collect();
        let sorted: Vec<f64> = (0..n * 2).map(|i| i as f64 / (n * 2) as f64).collect();
        // Both paths are really taken.
        let (r1, r2) = ((n - 1) / 2, n / 2);
        assert!(bracketed_pair(&clustered, r1, r2).is_some());
        assert!(bracketed_pair(&adversarial[..n], r1, r2).is_none());
        for c in [clustered, spread, dupes, equal, adversarial, sorted] {
            let (m, d) = oracle(&c);
            let s = RobustStats::compute(&mut c.clone()).unwrap();
            assert!((s.median - m).abs() < 1e-15, "median {} vs {m}", s.median);
            assert!((s.mad - d).abs() < 1e-15, "mad {} vs {d}", s.mad);
        }
    }

    /// Seeded selection gives `compute`'s result bit for bit, whether its brackets hit
    /// (seed = the fleet's own statistic, or close to it) or miss (a seed far off, a zero
    /// MAD, a level shift), on clustered, spread, duplicated, equal and short inputs, and
    /// both statistics match `statrs`.
    #[test]
    fn seeded_selection_equals_the_unseeded_one_and_statrs() {
        let mut next = uniform(0x2545_F491_4F6C_DD1D);
        let n = BRACKET_MIN_LEN;
        let inputs: Vec<Vec<f64>> = vec![
            (0..n * 25).map(|_| 0.95 + 0.06 * (next() - 0.5)).collect(),
            (0..n + 1).map(|_| 0.95 + 0.02 * (next() - 0.5)).collect(),
            (0..n * 3 + 2).map(|_| next()).collect(),
            (0..n * 2).map(|_| (next() * 10.0).floor() / 10.0).collect(),
            vec![0.9; n + 3],
            (0..n * 2).map(|i| i as f64 / (n * 2) as f64).collect(),
            (0..n - 1).map(|_| next()).collect(),
            (0..7).map(|_| next()).collect(),
        ];
        let mut scratch = Vec::new();
        let (mut hits, mut misses, mut mad_misses) = (0, 0, 0);
        for v in &inputs {
            let exact = RobustStats::compute(&mut v.clone()).unwrap();
            let (m, d) = oracle(v);
            assert!((exact.median - m).abs() < 1e-15 && (exact.mad - d).abs() < 1e-15);
            let seeds = [
                None,
                Some(exact),
                Some(RobustStats {
                    median: exact.median + 0.001 * exact.mad,
                    mad: exact.mad * 1.001,
                    ..exact
                }),
                Some(RobustStats {
                    median: exact.median + 0.5,
                    mad: exact.mad * 3.0,
                    ..exact
                }),
                Some(RobustStats {
                    median: exact.median - 0.2,
                    mad: exact.mad * 0.1,
                    ..exact
                }),
                Some(RobustStats { mad: 0.0, ..exact }),
                // The median's bracket holds, the MAD's misses.
                Some(RobustStats {
                    mad: exact.mad * 3.0,
                    ..exact
                }),
                Some(RobustStats {
                    median: f64::NAN,
                    ..exact
                }),
            ];
            for seed in seeds {
                let s = RobustStats::compute_seeded(&mut v.clone(), seed, &mut scratch).unwrap();
                assert_eq!(s.n, v.len());
                assert_eq!(s.median.to_bits(), exact.median.to_bits(), "{seed:?}");
                assert_eq!(s.mad.to_bits(), exact.mad.to_bits(), "{seed:?}");
                if let Some(seed) =
                    seed.filter(|s| v.len() >= BRACKET_MIN_LEN && s.median.is_finite())
                {
                    let nn = v.len();
                    let w = SEED_HALF_WIDTH * seed.mad / (nn as f64).sqrt();
                    let hit = gather_pair(
                        v,
                        (seed.median - w, seed.median + w),
                        |x| x,
                        ((nn - 1) / 2, nn / 2),
                        &mut Vec::new(),
                    )
                    .is_some();
                    if hit {
                        hits += 1;
                        let md = (seed.mad - w).max(0.0);
                        let mad_hit = gather_pair(
                            v,
                            (md, seed.mad + w),
                            |x| (x - exact.median).abs(),
                            ((nn - 1) / 2, nn / 2),
                            &mut Vec::new(),
                        )
                        .is_some();
                        mad_misses += usize::from(!mad_hit);
                    } else {
                        misses += 1
                    }
                }
            }
        }
        // Both the seeded path and its fallback were really taken.
        assert!(hits >= 5 && misses >= 5, "hits {hits}, misses {misses}");
        // And the MAD's fallback after a median found by the seeded path.
        assert!(mad_misses >= 3, "{mad_misses}");
    }

    #[test]
    fn a_seed_from_the_previous_tick_hits_on_a_stationary_fleet() {
        // Fresh noise around the same level each tick: the seeded brackets hold the ranks.
        let mut next = uniform(77);
        let n = 100_000;
        let mut seed = None;
        let mut hits = 0;
        for tick in 0..5 {
            let v: Vec<f64> = (0..n).map(|_| 0.95 + 0.06 * (next() - 0.5)).collect();
            let exact = RobustStats::compute(&mut v.clone()).unwrap();
            if let Some(s) = seed {
                let RobustStats { median, mad, .. } = s;
                let w = SEED_HALF_WIDTH * mad / (n as f64).sqrt();
                let r = ((n - 1) / 2, n / 2);
                let m = gather_pair(&v, (median - w, median + w), |x| x, r, &mut Vec::new());
                let d = gather_pair(
                    &v,
                    ((mad - w).max(0.0), mad + w),
                    |x| (x - exact.median).abs(),
                    r,
                    &mut Vec::new(),
                );
                hits += usize::from(m.is_some() && d.is_some());
            }
            let s = RobustStats::compute_seeded(&mut v.clone(), seed, &mut Vec::new()).unwrap();
            assert_eq!(s, exact, "tick {tick}");
            seed = Some(s);
        }
        assert_eq!(hits, 4);
    }

    #[test]
    fn select_pair_takes_the_next_rank_by_a_scan() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0, 2.0];
        assert_eq!(select_pair(&mut v.clone(), 2, 3), Some((2.0, 3.0)));
        assert_eq!(select_pair(&mut v.clone(), 0, 1), Some((1.0, 2.0)));
        assert_eq!(select_pair(&mut v.clone(), 4, 5), Some((4.0, 5.0)));
        assert_eq!(select_pair(&mut v, 3, 3), Some((3.0, 3.0)));
        assert_eq!(select_pair(&mut [1.0], 0, 1), None);
    }

    #[test]
    fn empty_has_no_statistic() {
        assert!(RobustStats::compute(&mut []).is_none());
        assert!(median_in_place(&mut []).is_none());
    }

    #[test]
    fn threshold_formula_uses_the_floor_only_when_mad_is_smaller() {
        let s = RobustStats {
            n: 5,
            median: 0.957,
            mad: 0.012,
        };
        let expected = 0.957 - 2.0 * 1.4826 * 0.012;
        assert!((s.raw_threshold(2.0, 0.01) - expected).abs() < 1e-12);
        let uniform = RobustStats {
            n: 5,
            median: 0.95,
            mad: 0.0,
        };
        assert!((uniform.raw_threshold(2.0, 0.01) - (0.95 - 2.0 * 1.4826 * 0.01)).abs() < 1e-12);
        assert_eq!(uniform.raw_threshold(2.0, 0.0), 0.95);
    }

    #[test]
    fn a_perfectly_uniform_fleet_keeps_a_floor_margin() {
        // Regression for a uniform fleet (MAD 0): without the floor the threshold equals the
        // median and a 0.001 dip would be below it.
        let mut v = vec![0.95; 10];
        let s = RobustStats::compute(&mut v).unwrap();
        assert_eq!(s.mad, 0.0);
        assert!(0.949 > s.raw_threshold(2.0, 0.01));
    }
}
