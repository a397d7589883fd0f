//! One health tick, pure: observation -> state -> baseline -> score -> mode -> verdict.
//!
//! Order (spec 1.6): collect, state transition, signals from the baseline *before* this
//! sample, baseline update, score, mode evaluation from the cache as it stood before this
//! tick's push, degradation warning, (push), classification. The threshold a push brings
//! back is therefore first used on the next tick.

use component::Timestamp;

use super::SignalSet;
use super::baseline::{BaselineConfig, Baseliner};
use super::classifier::{Classifier, dominant_signal_str};
use super::mode::{DetectionMode, ModeConfig, ModeDecision, ModeInputs, evaluate};
use super::score::{Anomaly, Score, compute};
use super::state::{NodeState, Observation, StateConfig, StateMachine, Transition};
use super::threshold::CachedThreshold;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreConfig {
    pub baseline: BaselineConfig,
    pub state: StateConfig,
    pub mode: ModeConfig,
    pub hysteresis: f64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            baseline: BaselineConfig::default(),
            state: StateConfig::default(),
            mode: ModeConfig::default(),
            hysteresis: super::classifier::DEFAULT_HYSTERESIS,
        }
    }
}

impl CoreConfig {
    /// Warm-up samples apply to both the baseline and the state machine.
    pub fn with_warmup(mut self, samples: u64) -> Self {
        self.baseline.warmup_samples = samples;
        self.state.warmup_samples = samples;
        self
    }
}

/// What the signal source produced this tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickInput {
    /// `None` when events could not be read.
    pub raw: Option<SignalSet>,
    /// Kernel launches in the signal window.
    pub kernel_launches: i64,
    /// When the sample was taken (normally `now`).
    pub observed_at: Timestamp,
}

/// Fleet-side facts as the agent believes them before this tick's push.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetView {
    pub cached: Option<CachedThreshold>,
    pub fleet_reachable: bool,
}

/// The content of one health push.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthReport {
    pub state: NodeState,
    pub score: Score,
    pub mode: ModeDecision,
    pub degraded: bool,
    pub fleet_reachable: bool,
}

/// A straggler event to emit (OTLP point and UDS line).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StragglerEmission {
    /// True while a straggler (value 1, UDS `straggler_state`); false once on recovery
    /// (value 0, UDS `straggler_resolved`).
    pub straggler: bool,
    /// First tick of a new verdict.
    pub edge: bool,
    pub score: f64,
    pub threshold: f64,
    pub mode: DetectionMode,
    pub dominant_signal: &'static str,
}

/// Everything one tick decided.
#[derive(Debug, Clone, PartialEq)]
pub struct TickOutcome {
    pub transition: Transition,
    /// `None`: nothing is pushed this tick (stale, re-calibration tick, failed read).
    pub report: Option<HealthReport>,
    pub straggler: Option<StragglerEmission>,
    /// `(previous, new)` when the detection mode changed.
    pub mode_change: Option<(DetectionMode, DetectionMode)>,
    pub anomalies: Vec<Anomaly>,
    /// The degradation warning turned on this tick.
    pub degradation_edge: bool,
}

#[derive(Debug, Clone)]
pub struct HealthCore {
    cfg: CoreConfig,
    baseliner: Baseliner,
    state: StateMachine,
    classifier: Classifier,
    mode: DetectionMode,
    last_report: Option<HealthReport>,
}

impl HealthCore {
    pub fn new(cfg: CoreConfig) -> Self {
        HealthCore {
            cfg,
            baseliner: Baseliner::new(cfg.baseline),
            state: StateMachine::new(cfg.state),
            classifier: Classifier::new(cfg.hysteresis),
            mode: DetectionMode::None,
            last_report: None,
        }
    }

    /// Start from a restored baseline: ACTIVE right away. On error nothing changes.
    pub fn restore(
        &mut self,
        snap: &super::baseline::BaselineSnapshot,
    ) -> Result<(), super::baseline::RestoreError> {
        self.baseliner.restore(snap)?;
        self.state = StateMachine::restored(self.cfg.state);
        Ok(())
    }

    pub fn baseliner(&self) -> &Baseliner {
        &self.baseliner
    }

    pub fn state(&self) -> NodeState {
        self.state.current()
    }

    pub fn mode(&self) -> DetectionMode {
        self.mode
    }

    pub fn is_straggler(&self) -> bool {
        self.classifier.is_straggler()
    }

    pub fn last_report(&self) -> Option<&HealthReport> {
        self.last_report.as_ref()
    }

    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    pub fn tick(&mut self, input: TickInput, fleet: FleetView, now: Timestamp) -> TickOutcome {
        let obs = Observation {
            kernel_launches: input.kernel_launches,
            read_ok: input.raw.is_some(),
            timestamp: input.observed_at,
        };
        let transition = self.state.observe(obs, now);
        let mut out = TickOutcome {
            transition,
            report: None,
            straggler: None,
            mode_change: None,
            anomalies: Vec::new(),
            degradation_edge: false,
        };
        if transition.is_recalibration() {
            // A fresh phase: forget the old baseline and seed it with this sample. The
            // score of a just-reset baseline would be meaningless, so nothing is pushed.
            self.baseliner.reset();
            if let Some(raw) = input.raw {
                self.baseliner.update(raw);
            }
            return out;
        }
        let Some(raw) = input.raw else {
            // Stale, or a failed read on its way there: the agent does not know its score.
            return out;
        };
        if transition.next == NodeState::Stale {
            return out;
        }

        let signals = self.baseliner.signals(raw);
        let before = self.baseliner.current();
        self.baseliner.update(raw);
        let (score, anomalies) = compute(signals);
        out.anomalies = anomalies;

        let decision = evaluate(
            &self.cfg.mode,
            &ModeInputs {
                cached: fleet.cached,
                fleet_reachable: fleet.fleet_reachable,
                baseline_samples: self.baseliner.sample_count(),
                warmup_samples: self.cfg.baseline.warmup_samples,
            },
            now,
        );
        if decision.mode != self.mode {
            out.mode_change = Some((self.mode, decision.mode));
            self.mode = decision.mode;
        }

        let degradation = self.baseliner.degradation_warning();
        out.degradation_edge = degradation.rising_edge;

        let report = HealthReport {
            state: transition.next,
            score,
            mode: decision,
            degraded: degradation.warning,
            fleet_reachable: fleet.fleet_reachable,
        };
        out.report = Some(report);
        self.last_report = Some(report);

        if let (NodeState::Active, Some(threshold)) = (transition.next, decision.threshold) {
            let verdict = self.classifier.classify(score.value, threshold);
            if verdict.should_emit() {
                out.straggler = Some(StragglerEmission {
                    straggler: verdict.straggler,
                    edge: verdict.changed,
                    score: score.value,
                    threshold,
                    mode: decision.mode,
                    dominant_signal: dominant_signal_str(&score.signals, &before),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T0: Timestamp = Timestamp::from_secs(1_000_000);

    fn input(throughput: f64, launches: i64, at: Timestamp) -> TickInput {
        TickInput {
            raw: Some(SignalSet::new(throughput, 0.9, 0.9, 0.9)),
            kernel_launches: launches,
            observed_at: at,
        }
    }

    fn fleet(threshold: f64, at: Timestamp) -> FleetView {
        FleetView {
            cached: Some(CachedThreshold {
                value: threshold,
                quorum_met: true,
                received_at: at,
            }),
            fleet_reachable: true,
        }
    }

    #[test]
    fn calibrates_then_classifies_against_the_fleet_threshold() {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(5));
        let mut now = T0;
        let mut states = Vec::new();
        for _ in 0..6 {
            now = now.saturating_add(Duration::from_secs(10));
            let out = core.tick(input(1000.0, 10_000, now), fleet(0.88, now), now);
            let r = out.report.unwrap();
            states.push(r.state.as_str());
            assert_eq!(r.mode.mode, DetectionMode::Fleet);
            assert!(out.straggler.is_none());
        }
        assert_eq!(
            states,
            [
                "calibrating",
                "calibrating",
                "calibrating",
                "calibrating",
                "active",
                "active"
            ]
        );
        // Healthy steady state: 0.4 + 0.25*0.9 + 0.2*0.9 + 0.15*0.9 = 0.94.
        let r = *core.last_report().unwrap();
        assert!((r.score.value - 0.94).abs() < 1e-9, "{}", r.score.value);

        // Throughput drops to 60 %: ratio 0.6, score 0.78 < 0.88 -> straggler, dominant throughput.
        now = now.saturating_add(Duration::from_secs(10));
        let out = core.tick(input(600.0, 6_000, now), fleet(0.88, now), now);
        let s = out.straggler.unwrap();
        assert!(s.straggler && s.edge);
        assert!((s.score - 0.78).abs() < 1e-9, "{}", s.score);
        assert_eq!(
            (s.threshold, s.mode, s.dominant_signal),
            (0.88, DetectionMode::Fleet, "throughput")
        );

        // Recovery edge fires once, then silence.
        now = now.saturating_add(Duration::from_secs(10));
        let baseline = core.baseliner().current().throughput;
        let out = core.tick(input(baseline * 2.0, 10_000, now), fleet(0.88, now), now);
        let s = out.straggler.unwrap();
        assert!(!s.straggler && s.edge);
        now = now.saturating_add(Duration::from_secs(10));
        assert!(
            core.tick(input(2000.0, 10_000, now), fleet(0.88, now), now)
                .straggler
                .is_none()
        );
    }

    #[test]
    fn calibrating_nodes_are_never_classified() {
        let mut core = HealthCore::new(CoreConfig::default());
        let out = core.tick(input(1.0, 1, T0), fleet(0.99, T0), T0);
        // First sample: throughput ratio 0 (empty baseline) -> low score, but no verdict.
        assert!(out.report.unwrap().score.value < 0.99);
        assert!(out.straggler.is_none());
    }

    #[test]
    fn idle_wake_up_resets_the_baseline_and_skips_that_push() {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(2));
        let mut now = T0;
        for launches in [5, 5, 0, 0, 0] {
            now = now.saturating_add(Duration::from_secs(10));
            core.tick(input(500.0, launches, now), fleet(0.5, now), now);
        }
        assert_eq!(core.state(), NodeState::Idle);
        assert_eq!(core.baseliner().sample_count(), 5);
        now = now.saturating_add(Duration::from_secs(10));
        let out = core.tick(input(50.0, 3, now), fleet(0.5, now), now);
        assert!(out.transition.is_recalibration());
        assert!(out.report.is_none());
        assert_eq!(
            core.baseliner().sample_count(),
            1,
            "reset, then seeded with the waking sample"
        );
        assert!((core.baseliner().current().throughput - 50.0).abs() < 1e-9);
    }

    #[test]
    fn failed_reads_push_nothing_and_go_stale() {
        let mut core = HealthCore::new(CoreConfig::default());
        let fail = TickInput {
            raw: None,
            kernel_launches: 0,
            observed_at: T0,
        };
        for _ in 0..3 {
            assert!(core.tick(fail, fleet(0.5, T0), T0).report.is_none());
        }
        assert_eq!(core.state(), NodeState::Stale);
        let out = core.tick(input(10.0, 1, T0), fleet(0.5, T0), T0);
        assert!(out.transition.is_recalibration() && out.report.is_none());
    }

    #[test]
    fn mode_changes_are_reported_once() {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(1));
        let unreachable = FleetView {
            cached: None,
            fleet_reachable: false,
        };
        let a = core.tick(input(1.0, 1, T0), unreachable, T0);
        assert_eq!(
            a.mode_change,
            Some((DetectionMode::None, DetectionMode::LocalBaseline))
        );
        let b = core.tick(input(1.0, 1, T0), unreachable, T0);
        assert_eq!(b.mode_change, None);
        assert_eq!(b.report.unwrap().mode.threshold, Some(0.85));
    }
}
