//! The health score (spec 3.3): a weighted sum of the four clamped signals times a smooth
//! penalty on the weakest one, so a deep stall in any single signal cannot hide behind the
//! other three.

use super::{Signal, SignalSet};

pub const WEIGHT_THROUGHPUT: f64 = 0.40;
pub const WEIGHT_COMPUTE: f64 = 0.25;
pub const WEIGHT_MEMORY: f64 = 0.20;
pub const WEIGHT_CPU: f64 = 0.15;
/// Minimum signal at or above which no penalty applies.
pub const FLOOR_ZONE: f64 = 0.35;
/// Minimum signal at or below which the full penalty applies.
pub const PENALTY_FLOOR: f64 = 0.25;
/// Multiplier at full penalty.
pub const MAX_DRAG: f64 = 0.5;

/// Why an input was replaced by 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnomalyKind {
    NaN,
    Infinite,
}

impl AnomalyKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::NaN => "nan",
            AnomalyKind::Infinite => "inf",
        }
    }
}

/// A non-finite input, reported so the loop can log it (rate limited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anomaly {
    pub signal: Signal,
    pub kind: AnomalyKind,
}

/// One computed score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// In [0, 1].
    pub value: f64,
    /// The clamped per-signal values (what is pushed as the four signal gauges).
    pub signals: SignalSet,
    /// The floor-penalty multiplier that was applied, in [0.5, 1].
    pub penalty: f64,
}

fn clamp01(x: f64) -> f64 {
    x.clamp(0.0, 1.0)
}

/// The multiplier for the weakest signal `m` (already clamped to [0, 1]).
pub fn floor_penalty(m: f64) -> f64 {
    if m >= FLOOR_ZONE {
        1.0
    } else if m <= PENALTY_FLOOR {
        MAX_DRAG
    } else {
        MAX_DRAG + (1.0 - MAX_DRAG) * (m - PENALTY_FLOOR) / (FLOOR_ZONE - PENALTY_FLOOR)
    }
}

/// Score the signals. Non-finite inputs count as 0 and are returned as anomalies.
pub fn compute(signals: SignalSet) -> (Score, Vec<Anomaly>) {
    let mut anomalies = Vec::new();
    let mut clean = |signal: Signal, v: f64| {
        if v.is_nan() {
            anomalies.push(Anomaly {
                signal,
                kind: AnomalyKind::NaN,
            });
            0.0
        } else if v.is_infinite() {
            anomalies.push(Anomaly {
                signal,
                kind: AnomalyKind::Infinite,
            });
            0.0
        } else {
            clamp01(v)
        }
    };
    let s = SignalSet::new(
        clean(Signal::Throughput, signals.throughput),
        clean(Signal::Compute, signals.compute),
        clean(Signal::Memory, signals.memory),
        clean(Signal::Cpu, signals.cpu),
    );
    let raw = WEIGHT_THROUGHPUT * s.throughput
        + WEIGHT_COMPUTE * s.compute
        + WEIGHT_MEMORY * s.memory
        + WEIGHT_CPU * s.cpu;
    let min = s.throughput.min(s.compute).min(s.memory).min(s.cpu);
    let penalty = floor_penalty(min);
    (
        Score {
            value: clamp01(raw * penalty),
            signals: s,
            penalty,
        },
        anomalies,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn weights_sum_to_one() {
        assert!(close(
            WEIGHT_THROUGHPUT + WEIGHT_COMPUTE + WEIGHT_MEMORY + WEIGHT_CPU,
            1.0
        ));
    }

    #[test]
    fn healthy_node_scores_the_weighted_sum() {
        let (s, a) = compute(SignalSet::new(1.0, 0.9, 0.9, 0.9));
        assert!(a.is_empty());
        assert!(
            close(s.value, 0.40 + 0.25 * 0.9 + 0.20 * 0.9 + 0.15 * 0.9),
            "{}",
            s.value
        );
        assert_eq!(s.penalty, 1.0);
    }

    #[test]
    fn penalty_interpolates_between_the_floor_and_the_zone() {
        assert_eq!(floor_penalty(0.35), 1.0);
        assert_eq!(floor_penalty(0.9), 1.0);
        assert_eq!(floor_penalty(0.25), 0.5);
        assert_eq!(floor_penalty(0.0), 0.5);
        assert!(close(floor_penalty(0.30), 0.75));
        assert!(close(floor_penalty(0.27), 0.6));
        // A stalled throughput (0.3) with everything else perfect: raw 0.72 x 0.75.
        let (s, _) = compute(SignalSet::new(0.3, 1.0, 1.0, 1.0));
        assert!(close(s.value, (0.4 * 0.3 + 0.6) * 0.75), "{}", s.value);
    }

    #[test]
    fn inputs_are_clamped_and_non_finite_inputs_reported() {
        let (s, a) = compute(SignalSet::new(1.7, f64::NAN, f64::INFINITY, -0.2));
        assert_eq!(s.signals, SignalSet::new(1.0, 0.0, 0.0, 0.0));
        assert_eq!(
            a,
            vec![
                Anomaly {
                    signal: Signal::Compute,
                    kind: AnomalyKind::NaN
                },
                Anomaly {
                    signal: Signal::Memory,
                    kind: AnomalyKind::Infinite
                },
            ]
        );
        assert!(close(s.value, 0.4 * 0.5));
    }

    proptest! {
        #[test]
        fn score_is_in_unit_interval(t in -10.0f64..10.0, c in -1.0f64..2.0, m in -1.0f64..2.0, u in -1.0f64..2.0) {
            let (s, _) = compute(SignalSet::new(t, c, m, u));
            prop_assert!((0.0..=1.0).contains(&s.value));
        }

        // Raising any one signal never lowers the score.
        #[test]
        fn score_is_monotone(base in proptest::array::uniform4(0.0f64..1.0), i in 0usize..4, bump in 0.0f64..1.0) {
            let mk = |v: [f64; 4]| SignalSet::new(v[0], v[1], v[2], v[3]);
            let mut up = base;
            up[i] = (up[i] + bump).min(1.0);
            prop_assert!(compute(mk(up)).0.value + 1e-12 >= compute(mk(base)).0.value);
        }
    }
}
