//! Straggler classification with hysteresis (spec 4.1).
//!
//! Healthy -> straggler when `score + eps < threshold`; straggler -> healthy when
//! `score + eps >= threshold + h`. One sample flips either way.

use super::{Signal, SignalSet};

pub const DEFAULT_HYSTERESIS: f64 = 0.02;
pub const EPSILON: f64 = 1e-9;

#[derive(Debug, Clone)]
pub struct Classifier {
    hysteresis: f64,
    straggler: bool,
}

/// One classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub straggler: bool,
    /// The verdict differs from the previous one.
    pub changed: bool,
}

impl Verdict {
    /// Straggler ticks emit every time; a recovery emits once, on its edge.
    pub fn should_emit(&self) -> bool {
        self.straggler || self.changed
    }
}

impl Classifier {
    /// `hysteresis` must be in [0, 0.5) (validated by the config).
    pub fn new(hysteresis: f64) -> Self {
        Classifier {
            hysteresis,
            straggler: false,
        }
    }

    pub fn is_straggler(&self) -> bool {
        self.straggler
    }

    pub fn classify(&mut self, score: f64, threshold: f64) -> Verdict {
        let next = if self.straggler {
            score + EPSILON < threshold + self.hysteresis
        } else {
            score + EPSILON < threshold
        };
        let changed = next != self.straggler;
        self.straggler = next;
        Verdict {
            straggler: next,
            changed,
        }
    }
}

/// The signal with the largest relative drop below its baseline, or `None` ("unknown").
///
/// `current` are the score's clamped signals and `baseline` the fast baseline before this
/// tick's update. Throughput is compared as a ratio: its score signal is already
/// `raw / baseline`, so its drop is `1 - ratio`. (The Go agent compares the ratio with the
/// raw kernels/s baseline, which makes `throughput` win almost always; spec 8.3 item 6.)
/// Ties go to the first in the order throughput, compute, memory, cpu.
pub fn dominant_signal(current: &SignalSet, baseline: &SignalSet) -> Option<Signal> {
    let drop = |base: f64, cur: f64| {
        if base <= 0.0 || cur >= base {
            0.0
        } else {
            (base - cur) / base
        }
    };
    let throughput_drop = if baseline.throughput > 0.0 {
        drop(1.0, current.throughput)
    } else {
        0.0
    };
    let candidates = [
        (Signal::Throughput, throughput_drop),
        (Signal::Compute, drop(baseline.compute, current.compute)),
        (Signal::Memory, drop(baseline.memory, current.memory)),
        (Signal::Cpu, drop(baseline.cpu, current.cpu)),
    ];
    let mut best: Option<(Signal, f64)> = None;
    for (s, d) in candidates {
        if d > 0.0 && best.is_none_or(|(_, b)| d > b) {
            best = Some((s, d));
        }
    }
    best.map(|(s, _)| s)
}

/// The wire value of [`dominant_signal`].
pub fn dominant_signal_str(current: &SignalSet, baseline: &SignalSet) -> &'static str {
    dominant_signal(current, baseline).map_or("unknown", Signal::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hysteresis_band() {
        let mut c = Classifier::new(0.02);
        let v = |c: &mut Classifier, s| {
            let v = c.classify(s, 0.88);
            (v.straggler, v.changed)
        };
        assert_eq!(v(&mut c, 0.90), (false, false));
        assert_eq!(
            v(&mut c, 0.88),
            (false, false),
            "equal to the threshold is healthy"
        );
        assert_eq!(v(&mut c, 0.8799), (true, true));
        assert_eq!(
            v(&mut c, 0.89),
            (true, false),
            "inside the band stays straggler"
        );
        assert_eq!(v(&mut c, 0.8999), (true, false));
        assert_eq!(v(&mut c, 0.90), (false, true), "threshold + h recovers");
        assert_eq!(v(&mut c, 0.95), (false, false));
    }

    #[test]
    fn epsilon_absorbs_float_noise_at_the_boundary() {
        let mut c = Classifier::new(0.02);
        // 0.1 + 0.2 is 0.30000000000000004; a score a hair below the threshold is not a flip.
        assert!(!c.classify(0.3 - 1e-12, 0.1 + 0.2).straggler);
        let mut c = Classifier::new(0.0);
        assert!(c.classify(0.5, 0.6).straggler);
        assert!(
            !c.classify(0.6 - 1e-12, 0.6).straggler,
            "zero hysteresis recovers at the threshold"
        );
    }

    #[test]
    fn emission_rule() {
        let mut c = Classifier::new(0.02);
        assert!(!c.classify(0.9, 0.8).should_emit());
        assert!(c.classify(0.7, 0.8).should_emit());
        assert!(
            c.classify(0.7, 0.8).should_emit(),
            "every straggler tick emits"
        );
        assert!(
            c.classify(0.9, 0.8).should_emit(),
            "the recovery edge emits once"
        );
        assert!(!c.classify(0.9, 0.8).should_emit());
    }

    #[test]
    fn dominant_signal_is_the_largest_relative_drop() {
        let base = SignalSet::new(1000.0, 0.9, 0.8, 0.9);
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.9, 0.45, 0.8, 0.9), &base),
            "compute"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.4, 0.9, 0.8, 0.9), &base),
            "throughput"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.9, 0.2, 0.9), &base),
            "memory"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.9, 0.8, 0.3), &base),
            "cpu"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(1.0, 0.95, 0.9, 0.9), &base),
            "unknown"
        );
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.0, 0.0, 0.0, 0.0), &SignalSet::default()),
            "unknown"
        );
        // Ties keep the first in fixed order.
        assert_eq!(
            dominant_signal_str(&SignalSet::new(0.5, 0.9, 0.4, 0.9), &base),
            "throughput"
        );
    }
}
