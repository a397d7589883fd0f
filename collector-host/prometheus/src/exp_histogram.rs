//! OTLP exponential histograms as classic Prometheus histograms.
//!
//! otelcol's `prometheusexporter` turns an exponential histogram into a Prometheus native
//! histogram; the text exposition format (0.0.4, what this exporter serves) cannot carry
//! native buckets, and client_golang writes such a histogram in text as `_sum`, `_count`
//! and a lone `+Inf` bucket. Here the buckets are kept instead, as classic `le` buckets at
//! the exponential histogram's own boundaries, so nothing is invented and
//! `histogram_quantile` works:
//!
//! - positive bucket `k` (values in `(base^k, base^(k+1)]`, `base = 2^(2^-scale)`) becomes
//!   the bucket `le = base^(k+1)`;
//! - negative bucket `k` (values in `[-base^(k+1), -base^k)`) becomes `le = -base^k`;
//! - the zero bucket becomes `le = zero_threshold` (0 when the threshold is 0);
//! - `+Inf` holds what `count` has beyond the buckets.
//!
//! A point with more than [`MAX_BUCKETS`] populated-range buckets is first scaled down
//! (adjacent buckets merged, `scale - 1`, exactly as the SDKs' own downscaling) until it
//! fits, which bounds the series one point makes. Boundaries that overflow `f64` go to
//! `+Inf`; boundaries that round onto their neighbour merge into it. A scale outside the
//! OTLP range `-10..=20`, or bucket counts adding up to more than `count`, is an invalid
//! point ([`DropReason::InvalidHistogram`]).
//!
//! Delta exponential histograms accumulate like delta classic histograms: while the
//! boundaries stay the same (see `store.rs`).

use opentelemetry_proto::tonic::metrics::v1::ExponentialHistogramDataPoint;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;

use crate::store::{DropReason, Histogram};

/// Most buckets (negative, zero and positive) one point becomes, besides `+Inf`: the
/// OpenTelemetry SDKs' default `max_size`.
pub const MAX_BUCKETS: usize = 160;

/// (first bucket index, counts) of one side, scaled down by `shift` (`index >> shift`).
fn side(b: Option<&Buckets>, shift: u32) -> (i64, Vec<u64>) {
    let Some(b) = b.filter(|b| !b.bucket_counts.is_empty()) else {
        return (0, Vec::new());
    };
    let first = i64::from(b.offset) >> shift;
    let last = (i64::from(b.offset) + b.bucket_counts.len() as i64 - 1) >> shift;
    let mut counts = vec![0u64; usize::try_from(last - first + 1).unwrap_or(0)];
    for (i, c) in b.bucket_counts.iter().enumerate() {
        let k = (i64::from(b.offset) + i as i64) >> shift;
        if let Some(slot) = usize::try_from(k - first)
            .ok()
            .and_then(|j| counts.get_mut(j))
        {
            *slot = slot.saturating_add(*c);
        }
    }
    (first, counts)
}

/// `base^exp` for `base = 2^(2^-scale)`, i.e. `2^(exp * 2^-scale)`.
fn power(scale: i32, exp: i64) -> f64 {
    (exp as f64 * (-f64::from(scale)).exp2()).exp2()
}

/// The classic histogram of an exponential histogram point.
pub fn classic(dp: &ExponentialHistogramDataPoint) -> Result<Histogram, DropReason> {
    if !(-10..=20).contains(&dp.scale) {
        return Err(DropReason::InvalidHistogram);
    }
    // Scale down until the populated range fits.
    let mut shift = 0u32;
    let (pos, neg) = loop {
        let pos = side(dp.positive.as_ref(), shift);
        let neg = side(dp.negative.as_ref(), shift);
        let scale = dp.scale - shift as i32;
        if pos.1.len() + neg.1.len() < MAX_BUCKETS || scale <= -10 {
            break (pos, neg);
        }
        shift += 1;
    };
    let scale = dp.scale - shift as i32;

    // (upper bound, count) in ascending order of bounds.
    let mut entries: Vec<(f64, u64)> = Vec::with_capacity(pos.1.len() + neg.1.len() + 1);
    for (j, c) in neg.1.iter().enumerate().rev() {
        entries.push((-power(scale, neg.0 + j as i64), *c));
    }
    let zero = if dp.zero_threshold.is_finite() && dp.zero_threshold > 0.0 {
        dp.zero_threshold
    } else {
        0.0
    };
    entries.push((zero, dp.zero_count));
    for (j, c) in pos.1.iter().enumerate() {
        entries.push((power(scale, pos.0 + j as i64 + 1), *c));
    }

    let mut bounds: Vec<f64> = Vec::with_capacity(entries.len());
    let mut counts: Vec<u64> = Vec::with_capacity(entries.len() + 1);
    let mut carry = 0u64; // buckets below every finite bound so far
    let mut overflow = 0u64; // buckets above every finite bound
    let mut in_buckets = 0u64;
    for (b, c) in entries {
        in_buckets = in_buckets.saturating_add(c);
        if b == f64::NEG_INFINITY {
            carry = carry.saturating_add(c);
        } else if !b.is_finite() {
            overflow = overflow.saturating_add(c);
        } else if bounds.last().is_none_or(|last| b > *last) {
            bounds.push(b);
            counts.push(c.saturating_add(std::mem::take(&mut carry)));
        } else if let Some(last) = counts.last_mut() {
            *last = last.saturating_add(c);
        }
    }
    if in_buckets > dp.count {
        return Err(DropReason::InvalidHistogram);
    }
    counts.push(
        overflow
            .saturating_add(carry)
            .saturating_add(dp.count - in_buckets),
    );
    Ok(Histogram {
        bounds: bounds.into_boxed_slice(),
        counts: counts.into_boxed_slice(),
        sum: dp.sum.unwrap_or(0.0),
        count: dp.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        scale: i32,
        pos: (i32, Vec<u64>),
        neg: (i32, Vec<u64>),
        zero: u64,
    ) -> ExponentialHistogramDataPoint {
        let count = pos.1.iter().chain(&neg.1).sum::<u64>() + zero;
        ExponentialHistogramDataPoint {
            scale,
            count,
            sum: Some(1.0),
            zero_count: zero,
            positive: Some(Buckets {
                offset: pos.0,
                bucket_counts: pos.1,
            }),
            negative: Some(Buckets {
                offset: neg.0,
                bucket_counts: neg.1,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn scale_zero_buckets_are_powers_of_two() {
        // Values 3 (bucket 1: (2, 4]) and 5, 6 (bucket 2: (4, 8]); one zero; -3 (bucket 1).
        let h = classic(&point(0, (1, vec![1, 2]), (1, vec![1]), 1)).unwrap();
        assert_eq!(&*h.bounds, &[-2.0, 0.0, 4.0, 8.0]);
        assert_eq!(&*h.counts, &[1, 1, 1, 2, 0]);
        assert_eq!(h.count, 5);
    }

    #[test]
    fn positive_scale_boundaries_are_roots_of_two() {
        // scale 1: base sqrt(2); bucket 0 is (1, sqrt 2], bucket 1 is (sqrt 2, 2].
        let h = classic(&point(1, (0, vec![4, 6]), (0, vec![]), 0)).unwrap();
        assert_eq!(h.bounds.len(), 3);
        assert_eq!(h.bounds[0], 0.0);
        assert!((h.bounds[1] - std::f64::consts::SQRT_2).abs() < 1e-12);
        assert!((h.bounds[2] - 2.0).abs() < 1e-12);
        assert_eq!(&*h.counts, &[0, 4, 6, 0]);
    }

    #[test]
    fn a_wide_point_is_scaled_down_to_the_bucket_cap() {
        let h = classic(&point(20, (-1000, vec![1; 1000]), (0, vec![]), 0)).unwrap();
        assert!(h.bounds.len() <= MAX_BUCKETS + 1, "{}", h.bounds.len());
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);
        assert!(h.bounds.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn counts_beyond_count_or_scale_out_of_range_are_invalid() {
        let mut p = point(0, (0, vec![3]), (0, vec![]), 0);
        p.count = 2;
        assert_eq!(classic(&p), Err(DropReason::InvalidHistogram));
        let p = point(21, (0, vec![1]), (0, vec![]), 0);
        assert_eq!(classic(&p), Err(DropReason::InvalidHistogram));
    }

    #[test]
    fn an_empty_point_is_all_in_inf() {
        let p = ExponentialHistogramDataPoint {
            count: 3,
            sum: Some(2.5),
            ..Default::default()
        };
        let h = classic(&p).unwrap();
        assert_eq!((&*h.bounds, &*h.counts), (&[0.0][..], &[0, 3][..]));
    }

    #[test]
    fn huge_bucket_indices_overflow_into_inf() {
        // scale -10: base 2^1024 overflows f64 for every bucket but the lowest.
        let h = classic(&point(-10, (0, vec![1, 1]), (0, vec![]), 0)).unwrap();
        assert!(h.bounds.iter().all(|b| b.is_finite()));
        assert_eq!(h.counts.iter().sum::<u64>(), 2);
        assert_eq!(*h.counts.last().unwrap(), 2);
    }
}
