//! Median and median absolute deviation by selection (O(n), no full sort), and the
//! MAD threshold formula. Pure functions over `f64` slices; callers guarantee finite input
//! (the processor rejects non-finite scores before they are stored).

use component::wire::MAD_SCALE;

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

/// The median of `values` (average of the two middle values for even lengths). Reorders
/// the slice. `None` when empty. O(n): see [`middle_pair`].
pub fn median_in_place(values: &mut [f64]) -> Option<f64> {
    let (lower, upper) = middle_pair(values)?;
    Some(lower + (upper - lower) / 2.0)
}

/// The values at sorted ranks `(n-1)/2` and `n/2`. Long inputs try a bracketing pass
/// first; anything it cannot settle goes to quickselect (`select_nth_unstable`), so the
/// result is always exact.
fn middle_pair(values: &mut [f64]) -> Option<(f64, f64)> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (r1, r2) = ((n - 1) / 2, n / 2);
    if n >= BRACKET_MIN_LEN
        && let Some(pair) = bracketed_pair(values, r1, r2)
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

/// Floyd-Rivest-style selection of ranks `r1 <= r2`: a strided sample of the input gives a
/// narrow value bracket `[lo, hi]` that almost surely contains both ranks; one branch-light
/// pass counts the values below `lo` and gathers those inside the bracket (a few percent of
/// the input), and a quickselect over that small buffer finishes. `None` when the bracket
/// missed or overflowed (then the caller quickselects the whole input).
fn bracketed_pair(values: &[f64], r1: usize, r2: usize) -> Option<(f64, f64)> {
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
    let mut buf = vec![0.0f64; cap];
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
    let inside = buf.get_mut(..len)?;
    let v1 = select(inside, r1 - below)?;
    let v2 = if r2 == r1 {
        v1
    } else {
        select(inside, r2 - below)?
    };
    Some((v1, v2))
}

fn select(v: &mut [f64], k: usize) -> Option<f64> {
    if k >= v.len() {
        return None;
    }
    let (_, x, _) = v.select_nth_unstable_by(k, f64::total_cmp);
    Some(*x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::statistics::{Data, Median};

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
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
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
