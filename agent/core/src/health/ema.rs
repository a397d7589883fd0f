//! Exponential moving averages with bias correction (spec 3.2).
//!
//! `s = a*x + (1-a)*s` starting at 0; a read after `t` samples divides by `1 - (1-a)^t`
//! so early reads are not dragged toward the zero start.

/// NaN and infinities become 0 so one bad sample cannot poison an average forever.
pub fn clean_finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// One EMA step over a cleaned sample.
pub fn ema_update(prev: f64, x: f64, alpha: f64) -> f64 {
    alpha * clean_finite(x) + (1.0 - alpha) * prev
}

/// The bias-corrected value after `t` samples (0 when `t` is 0).
pub fn bias_correct(raw: f64, alpha: f64, t: u64) -> f64 {
    if t == 0 {
        return 0.0;
    }
    let exp = i32::try_from(t).unwrap_or(i32::MAX);
    let denom = 1.0 - (1.0 - alpha).powi(exp);
    if denom <= 0.0 { 0.0 } else { raw / denom }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_corrected_read_is_the_first_sample() {
        let s = ema_update(0.0, 42.0, 0.1);
        assert!((s - 4.2).abs() < 1e-12);
        assert!((bias_correct(s, 0.1, 1) - 42.0).abs() < 1e-9);
        assert_eq!(bias_correct(s, 0.1, 0), 0.0);
    }

    #[test]
    fn non_finite_samples_count_as_zero() {
        assert_eq!(ema_update(1.0, f64::NAN, 0.5), 0.5);
        assert_eq!(ema_update(1.0, f64::INFINITY, 0.5), 0.5);
        assert_eq!(ema_update(1.0, f64::NEG_INFINITY, 0.5), 0.5);
    }

    #[test]
    fn known_sequence() {
        // x = 10, 20 with a = 0.1: s1 = 1, s2 = 0.1*20 + 0.9*1 = 2.9; corrected 2.9 / 0.19.
        let s = ema_update(ema_update(0.0, 10.0, 0.1), 20.0, 0.1);
        assert!((s - 2.9).abs() < 1e-12);
        assert!((bias_correct(s, 0.1, 2) - 2.9 / 0.19).abs() < 1e-9);
    }

    proptest! {
        // A constant input reads back as itself at every step once corrected.
        #[test]
        fn constant_input_is_unbiased(x in 0.0f64..1e6, n in 1u64..500, alpha in 0.001f64..0.9) {
            let mut s = 0.0;
            for _ in 0..n { s = ema_update(s, x, alpha); }
            let c = bias_correct(s, alpha, n);
            prop_assert!((c - x).abs() <= 1e-6 * x.max(1.0));
        }

        // The corrected value stays within the range of the inputs.
        #[test]
        fn corrected_value_is_bounded(xs in proptest::collection::vec(0.0f64..100.0, 1..200), alpha in 0.01f64..0.9) {
            let mut s = 0.0;
            for x in &xs { s = ema_update(s, *x, alpha); }
            let c = bias_correct(s, alpha, xs.len() as u64);
            let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(c >= lo - 1e-9 && c <= hi + 1e-9, "{c} not in [{lo}, {hi}]");
        }
    }
}
