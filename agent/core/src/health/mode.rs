//! Detection mode (spec 2.3): which threshold, if any, the node classifies itself against.
//!
//! First match wins:
//! 1. fresh (<= 20 s) threshold with quorum -> `fleet`
//! 2. threshold without quorum, <= 5 min old -> `fleet-cached`
//! 3. Fleet unreachable, threshold <= 5 min old -> `local-cached`
//! 4. Fleet unreachable, baseline warmed up -> `local-baseline` at 0.85
//! 5. otherwise `none`
//!
//! A reachable Fleet with quorum whose threshold went stale has no fallback: `none`.

use std::time::Duration;

use component::Timestamp;
use ingero_wire as wire;

use super::threshold::CachedThreshold;

pub const DEFAULT_FRESH_MAX_AGE: Duration = Duration::from_secs(20);
pub const DEFAULT_CACHED_MAX_AGE: Duration = Duration::from_secs(300);
pub const DEFAULT_LOCAL_BASELINE_THRESHOLD: f64 = 0.85;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetectionMode {
    None,
    Fleet,
    FleetCached,
    LocalCached,
    LocalBaseline,
}

impl DetectionMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            DetectionMode::None => wire::mode::NONE,
            DetectionMode::Fleet => wire::mode::FLEET,
            DetectionMode::FleetCached => wire::mode::FLEET_CACHED,
            DetectionMode::LocalCached => wire::mode::LOCAL_CACHED,
            DetectionMode::LocalBaseline => wire::mode::LOCAL_BASELINE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeConfig {
    pub fresh_max_age: Duration,
    pub cached_max_age: Duration,
    pub local_baseline_threshold: f64,
}

impl Default for ModeConfig {
    fn default() -> Self {
        ModeConfig {
            fresh_max_age: DEFAULT_FRESH_MAX_AGE,
            cached_max_age: DEFAULT_CACHED_MAX_AGE,
            local_baseline_threshold: DEFAULT_LOCAL_BASELINE_THRESHOLD,
        }
    }
}

/// A mode and the threshold it brings (`None` only for [`DetectionMode::None`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeDecision {
    pub mode: DetectionMode,
    pub threshold: Option<f64>,
}

/// Inputs of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeInputs {
    pub cached: Option<CachedThreshold>,
    pub fleet_reachable: bool,
    pub baseline_samples: u64,
    pub warmup_samples: u64,
}

/// Age of `at` at `now`; a negative age (clock went backwards) is never fresh.
fn fresh(now: Timestamp, at: Timestamp, max: Duration) -> bool {
    at <= now && at != Timestamp::ZERO && now.since(at) <= max
}

pub fn evaluate(cfg: &ModeConfig, i: &ModeInputs, now: Timestamp) -> ModeDecision {
    let decide = |mode, value| ModeDecision {
        mode,
        threshold: Some(value),
    };
    if let Some(c) = i.cached {
        if c.quorum_met && fresh(now, c.received_at, cfg.fresh_max_age) {
            return decide(DetectionMode::Fleet, c.value);
        }
        if !c.quorum_met && fresh(now, c.received_at, cfg.cached_max_age) {
            return decide(DetectionMode::FleetCached, c.value);
        }
        if !i.fleet_reachable && fresh(now, c.received_at, cfg.cached_max_age) {
            return decide(DetectionMode::LocalCached, c.value);
        }
    }
    if !i.fleet_reachable && i.baseline_samples >= i.warmup_samples {
        return decide(DetectionMode::LocalBaseline, cfg.local_baseline_threshold);
    }
    ModeDecision {
        mode: DetectionMode::None,
        threshold: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(10_000);

    fn cached(value: f64, quorum_met: bool) -> Option<CachedThreshold> {
        Some(CachedThreshold {
            value,
            quorum_met,
            received_at: T0,
        })
    }

    fn eval(c: Option<CachedThreshold>, reachable: bool, samples: u64, age_s: u64) -> ModeDecision {
        let i = ModeInputs {
            cached: c,
            fleet_reachable: reachable,
            baseline_samples: samples,
            warmup_samples: 30,
        };
        evaluate(
            &ModeConfig::default(),
            &i,
            T0.saturating_add(Duration::from_secs(age_s)),
        )
    }

    fn mode(d: ModeDecision) -> (&'static str, Option<f64>) {
        (d.mode.as_str(), d.threshold)
    }

    #[test]
    fn fleet_while_fresh_with_quorum() {
        assert_eq!(
            mode(eval(cached(0.88, true), true, 0, 0)),
            ("fleet", Some(0.88))
        );
        assert_eq!(
            mode(eval(cached(0.88, true), true, 0, 20)),
            ("fleet", Some(0.88))
        );
        // 21 s old, still reachable: no fallback applies.
        assert_eq!(
            mode(eval(cached(0.88, true), true, 100, 21)),
            ("none", None)
        );
        // Unreachable: cached value for up to 5 minutes, then the local baseline.
        assert_eq!(
            mode(eval(cached(0.88, true), false, 100, 21)),
            ("local-cached", Some(0.88))
        );
        assert_eq!(
            mode(eval(cached(0.88, true), false, 100, 300)),
            ("local-cached", Some(0.88))
        );
        assert_eq!(
            mode(eval(cached(0.88, true), false, 100, 301)),
            ("local-baseline", Some(0.85))
        );
        assert_eq!(
            mode(eval(cached(0.88, true), false, 29, 301)),
            ("none", None)
        );
    }

    #[test]
    fn fleet_cached_without_quorum_whether_reachable_or_not() {
        for reachable in [true, false] {
            assert_eq!(
                mode(eval(cached(0.7, false), reachable, 0, 299)),
                ("fleet-cached", Some(0.7))
            );
        }
        assert_eq!(
            mode(eval(cached(0.7, false), true, 100, 301)),
            ("none", None)
        );
        // The cold-start body (0, false) is a fleet-cached threshold of 0: nobody is flagged.
        assert_eq!(
            mode(eval(cached(0.0, false), true, 0, 5)),
            ("fleet-cached", Some(0.0))
        );
    }

    #[test]
    fn local_baseline_only_after_warmup_and_only_when_unreachable() {
        assert_eq!(
            mode(eval(None, false, 30, 0)),
            ("local-baseline", Some(0.85))
        );
        assert_eq!(mode(eval(None, false, 29, 0)), ("none", None));
        assert_eq!(mode(eval(None, true, 1000, 0)), ("none", None));
    }

    #[test]
    fn a_threshold_from_the_future_is_not_fresh() {
        let i = ModeInputs {
            cached: cached(0.88, true),
            fleet_reachable: true,
            baseline_samples: 0,
            warmup_samples: 30,
        };
        let d = evaluate(
            &ModeConfig::default(),
            &i,
            T0.saturating_sub(Duration::from_secs(1)),
        );
        assert_eq!(d.mode, DetectionMode::None);
    }
}
