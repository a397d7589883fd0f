//! Property tests of the statistic, the threshold state machine and the classifier.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{active, ctx, host_with_sink};
use component::{Processor, Timestamp};
use ingero_processor::IngeroProcessor;
use ingero_processor::classifier::{CusumParams, ShortfallCusum};
use ingero_processor::cluster::{ClusterParams, ClusterTickState};
use ingero_processor::config::IngeroConfig;
use ingero_processor::stats::RobustStats;
use ingero_processor::table::{NodeSample, NodeState};
use ingero_processor::threshold::{CohortThreshold, ThresholdParams};
use ingero_wire::ThresholdValue;
use ingero_wire::{MAD_SCALE, THRESHOLD_MAX, THRESHOLD_MIN};
use proptest::prelude::*;
use statrs::statistics::{Data, Median};

const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);

fn params() -> ThresholdParams {
    ThresholdParams::from_config(&IngeroConfig::default())
}

fn no_panic() -> ThresholdParams {
    let mut p = params();
    p.panic = None;
    p
}

fn scores(max_len: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(0.0f64..=1.0, 1..max_len)
}

fn sample(score: f64) -> NodeSample {
    NodeSample::new(1, score, 0, NodeState::Active, true)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn median_and_mad_match_statrs(v in scores(300)) {
        let med = Data::new(v.clone()).median();
        let dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
        let mad = Data::new(dev).median();
        let s = RobustStats::compute(&mut v.clone()).unwrap();
        prop_assert!((s.median - med).abs() < 1e-12, "{} vs {}", s.median, med);
        prop_assert!((s.mad - mad).abs() < 1e-12, "{} vs {}", s.mad, mad);
    }

    #[test]
    fn the_threshold_does_not_depend_on_push_order(
        (v, shuffled) in scores(200).prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let p = params();
        let a = CohortThreshold::default().update(&p, &mut v.clone(), true, NOW);
        let b = CohortThreshold::default().update(&p, &mut shuffled.clone(), true, NOW);
        prop_assert_eq!(a.threshold.map(f64::to_bits), b.threshold.map(f64::to_bits));
        prop_assert_eq!(a.raw_threshold.map(f64::to_bits), b.raw_threshold.map(f64::to_bits));
        // And the classification of every node is the same, node by node.
        let cp = ClusterParams::from_config(&IngeroConfig::default());
        let flagged = |order: &[f64]| {
            let mut st = ClusterTickState::default();
            st.set_samples(
                order.iter().map(|s| sample(*s)).collect(),
                vec![Some("".into())],
            );
            st.compute(&cp, 0, NOW);
            let mut f: Vec<u64> = st.samples().iter().filter(|s| s.straggler()).map(|s| s.score.to_bits()).collect();
            f.sort_unstable();
            f
        };
        prop_assert_eq!(flagged(&v), flagged(&shuffled));
    }

    /// With fewer than half of the active nodes replaced by arbitrary outliers, the median
    /// stays within the inliers' range, the MAD stays within their width, and so the raw
    /// threshold is bounded by the inliers alone: the 50 % breakdown point.
    #[test]
    fn fewer_than_half_outliers_cannot_move_the_threshold_out_of_the_inlier_bounds(
        center in 0.3f64..0.97,
        width in 0.0f64..0.06,
        inlier_u in prop::collection::vec(0.0f64..=1.0, 5..120),
        outliers_raw in prop::collection::vec(0.0f64..=1.0, 0..120),
    ) {
        let inliers: Vec<f64> = inlier_u.iter().map(|u| center - width / 2.0 + u * width).collect();
        let n_in = inliers.len();
        let outliers: Vec<f64> = outliers_raw.into_iter().take(n_in - 1).collect(); // m < n_in
        let lo = inliers.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = inliers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut all: Vec<f64> = inliers.iter().chain(outliers.iter()).copied().collect();
        let p = no_panic();
        let s = RobustStats::compute(&mut all.clone()).unwrap();
        prop_assert!(s.median >= lo && s.median <= hi, "median {} outside [{lo}, {hi}]", s.median);
        prop_assert!(s.mad <= hi - lo + 1e-12, "mad {} > width {}", s.mad, hi - lo);
        let raw = s.raw_threshold(p.k, p.mad_floor);
        let floor = lo - p.k * MAD_SCALE * (hi - lo).max(p.mad_floor);
        prop_assert!(raw >= floor - 1e-12 && raw <= hi, "raw {raw} outside [{floor}, {hi}]");
        // The delivered threshold obeys the same bounds after clamping.
        let u = CohortThreshold::default().update(&p, &mut all, true, NOW);
        let t = u.threshold.unwrap();
        prop_assert!(t >= floor.clamp(THRESHOLD_MIN, THRESHOLD_MAX) - 1e-12);
        prop_assert!(t <= hi.clamp(THRESHOLD_MIN, THRESHOLD_MAX) + 1e-12);
    }

    #[test]
    fn quorum_is_exactly_statistical_min_active_nodes(n in 0usize..40, min in 3u64..30) {
        let mut p = params();
        p.statistical_min = min;
        let mut v = vec![0.9; n];
        let u = CohortThreshold::default().update(&p, &mut v, true, NOW);
        prop_assert_eq!(u.quorum_met, n as u64 >= min);
        prop_assert_eq!(u.threshold.is_some(), n as u64 >= min, "cold start until quorum");
    }

    #[test]
    fn nodes_expire_exactly_after_push_interval_times_ttl_multiplier(
        interval_s in 1u64..60,
        mult in 1u32..10,
        extra_ns in 0u64..3,
        before in any::<bool>(),
    ) {
        let mut cfg = IngeroConfig {
            push_interval: Duration::from_secs(interval_s),
            ttl_multiplier: mult,
            ..Default::default()
        };
        cfg.quorum.expected_window = Duration::from_secs(interval_s * u64::from(mult) + 10);
        let ttl_ns = interval_s * u64::from(mult) * 1_000_000_000;
        let p = IngeroProcessor::new(cfg).unwrap();
        let (host, sink) = host_with_sink();
        p.start(&host).unwrap();
        p.process(&mut vec![active("c", "n", 0.9)], &ctx(None, NOW));
        let age = if before { ttl_ns - extra_ns } else { ttl_ns + 1 + extra_ns };
        p.tick(Timestamp::from_nanos(NOW.as_nanos() + age));
        let d = sink.last_for("c").unwrap().diagnostics;
        prop_assert_eq!(d.active_nodes, u64::from(before), "age {} ttl {}", age, ttl_ns);
    }

    #[test]
    fn the_ema_moves_alpha_towards_the_clamped_raw_value(
        levels in prop::collection::vec(0.0f64..=1.0, 1..30),
        alpha in 0.01f64..=1.0,
    ) {
        let mut p = no_panic();
        p.ema_alpha = alpha;
        let mut c = CohortThreshold::default();
        let mut prev: Option<f64> = None;
        for level in levels {
            let u = c.update(&p, &mut [level; 6], true, NOW);
            let target = u.raw_threshold.unwrap().clamp(THRESHOLD_MIN, THRESHOLD_MAX);
            let expected = match prev {
                None => target,
                Some(pv) => pv + alpha * (target - pv),
            };
            let t = u.threshold.unwrap();
            prop_assert!((t - expected).abs() < 1e-12, "{t} vs {expected}");
            if let Some(pv) = prev {
                prop_assert!(t >= pv.min(target) - 1e-12 && t <= pv.max(target) + 1e-12);
            }
            prev = Some(t);
        }
    }

    #[test]
    fn panic_starts_exactly_at_enter_fraction_and_holds_the_threshold(
        n in 10usize..80,
        degraded_share in 0.0f64..0.6,
        depth in 0.2f64..0.8,
    ) {
        let p = params();
        let mut c = CohortThreshold::default();
        let healthy: Vec<f64> = (0..n).map(|i| 0.95 + 0.01 * ((i % 5) as f64 - 2.0)).collect();
        let good = c.update(&p, &mut healthy.clone(), true, NOW).threshold.unwrap();
        let k = ((n as f64) * degraded_share) as usize;
        let mut v = healthy.clone();
        for s in v.iter_mut().take(k) {
            *s = (good - depth).max(0.0);
        }
        let expected_panic = k as f64 / n as f64 >= p.panic.unwrap().enter_fraction;
        let u = c.update(&p, &mut v, true, NOW);
        prop_assert_eq!(u.panic, expected_panic, "{} of {}", k, n);
        if expected_panic {
            prop_assert_eq!(u.threshold, Some(good));
        }
    }

    #[test]
    fn delivered_thresholds_are_always_in_the_agents_range(v in scores(100), ticks in 1usize..5) {
        let p = params();
        let mut c = CohortThreshold::default();
        for _ in 0..ticks {
            let u = c.update(&p, &mut v.clone(), true, NOW);
            if let Some(t) = u.threshold {
                prop_assert!((THRESHOLD_MIN..=THRESHOLD_MAX).contains(&t));
                prop_assert!(ThresholdValue::new(t, u.quorum_met).is_some());
            }
        }
    }

    #[test]
    fn below_quorum_nothing_is_ever_published(n in 0usize..5, ticks in 1usize..6) {
        let p = IngeroProcessor::new(IngeroConfig::default()).unwrap();
        let (host, sink) = host_with_sink();
        p.start(&host).unwrap();
        for t in 0..ticks {
            let at = NOW.saturating_add(Duration::from_secs(10 * t as u64));
            for i in 0..n {
                p.process(&mut vec![active("c", &format!("n{i}"), 0.9)], &ctx(None, at));
            }
            prop_assert!(p.tick(at).is_empty());
            if n > 0 {
                prop_assert_eq!(sink.last_for("c").unwrap().value, None);
            }
        }
    }

    /// A node that never falls more than `drift` sigmas below the threshold never
    /// accumulates anything, whatever the sequence.
    #[test]
    fn shortfalls_within_the_drift_never_accumulate(zs in prop::collection::vec(-5.0f64..=0.5, 1..500)) {
        let p = CusumParams::DEFAULT;
        let mut c = ShortfallCusum::default();
        for z in zs {
            prop_assert_eq!(c.observe(&p, 0.9 - z * 0.01, 0.9, 0.01), None);
            prop_assert!(c.sum() < 1e-9);
        }
    }

    /// Clearing at once never adds a flagged tick and never delays a detection: on any
    /// sequence, a node flagged with the rule is flagged by the drain alone too, and the
    /// first flag comes on the same sample.
    #[test]
    fn clearing_at_once_only_removes_flagged_ticks(
        zs in prop::collection::vec(-4.0f64..8.0, 1..400),
        holdoff in 0u8..20,
        margin in 0.0f64..3.0,
    ) {
        let with = CusumParams { clear_margin: margin, clear_holdoff: holdoff, ..CusumParams::DEFAULT };
        let drain = CusumParams { clear_margin: f64::INFINITY, ..CusumParams::DEFAULT };
        let (mut a, mut b) = (ShortfallCusum::default(), ShortfallCusum::default());
        let (mut first_a, mut first_b) = (None, None);
        for (i, &z) in zs.iter().enumerate() {
            a.observe_z(&with, z);
            b.observe_z(&drain, z);
            prop_assert!(a.sum() <= b.sum());
            prop_assert!(!a.is_straggler() || b.is_straggler(), "sample {}", i);
            if a.is_straggler() && first_a.is_none() { first_a = Some(i); }
            if b.is_straggler() && first_b.is_none() { first_b = Some(i); }
        }
        prop_assert_eq!(first_a, first_b);
    }

    #[test]
    fn a_drop_of_decision_plus_drift_sigmas_flags_on_the_first_sample(
        sigma in 0.001f64..0.05,
        extra in 0.0f64..5.0,
        history in prop::collection::vec(-4.0f64..=0.0, 0..20),
    ) {
        let p = CusumParams::DEFAULT;
        let mut c = ShortfallCusum::default();
        for z in history {
            c.observe(&p, 0.9 - z * sigma, 0.9, sigma);
        }
        let score = 0.9 - (4.5 + extra) * sigma * (1.0 + 1e-9);
        prop_assert!(c.observe(&p, score, 0.9, sigma).is_some());
        prop_assert!(c.is_straggler());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Long inputs (clustered with outliers, as fleets are) agree with the oracle too.
    #[test]
    fn long_inputs_match_statrs(
        center in 0.0f64..=1.0,
        width in 0.0f64..0.2,
        u in prop::collection::vec(0.0f64..=1.0, 4096..9000),
        outlier_every in 2usize..50,
    ) {
        let v: Vec<f64> = u
            .iter()
            .enumerate()
            .map(|(i, x)| if i % outlier_every == 0 { *x } else { (center + width * (x - 0.5)).clamp(0.0, 1.0) })
            .collect();
        let med = Data::new(v.clone()).median();
        let dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
        let mad = Data::new(dev).median();
        let s = RobustStats::compute(&mut v.clone()).unwrap();
        prop_assert!((s.median - med).abs() < 1e-12, "{} vs {}", s.median, med);
        prop_assert!((s.mad - mad).abs() < 1e-12, "{} vs {}", s.mad, mad);
    }
}

/// The contrast that makes the breakdown property meaningful: with half or more of the
/// nodes moved, the median follows them.
#[test]
fn half_outliers_do_break_the_median() {
    let mut v: Vec<f64> = vec![0.95; 10];
    v.extend(vec![0.1; 11]);
    let s = RobustStats::compute(&mut v).unwrap();
    assert!(s.median < 0.2);
}
