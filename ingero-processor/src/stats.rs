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

/// The median of `values` by quickselect (average of the two middle values for even
/// lengths). Reorders the slice. `None` when empty.
pub fn median_in_place(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (left, upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper);
    }
    // For even n the lower middle value is the largest element left of `mid`.
    let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(lower + (upper - lower) / 2.0)
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
