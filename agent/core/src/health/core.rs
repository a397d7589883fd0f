//! One health tick, pure: observation -> state -> baseline -> score -> mode -> verdict.
//!
//! Order (spec 1.6): collect, state transition, signals from the baseline *before* this
//! sample, baseline update, score, mode evaluation from the cache as it stood before this
//! tick's push, degradation warning, (push), classification. The threshold a push brings
//! back is therefore first used on the next tick.

use component::Timestamp;

use super::SignalSet;
use super::baseline::{BaselineConfig, Baseliner};
use super::classifier::{AnyClassifier, Rule, dominant_signal_str};
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
    pub rule: Rule,
    /// Samples at the single-sample depth the `cusum` rule needs to flag
    /// ([`super::classifier::AGENT_EVIDENCE`] by default).
    pub evidence: u8,
    /// Level of the `cusum` rule's shallow-drop sum that flags (0: that part off; Fleet's
    /// `classifier.shallow_decision` default).
    pub shallow_decision: f64,
    /// Ticks after a wake from IDLE whose signal window still covers idle time: the first
    /// is not pushed, none is classified or folded into the baseline. `ceil(signal window /
    /// push interval)`, at least 1.
    pub settle_ticks: u32,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            baseline: BaselineConfig::default(),
            state: StateConfig::default(),
            mode: ModeConfig::default(),
            hysteresis: super::classifier::DEFAULT_HYSTERESIS,
            rule: Rule::default(),
            evidence: super::classifier::AGENT_EVIDENCE,
            shallow_decision: ingero_stats::cusum::DEFAULT_SHALLOW_DECISION,
            settle_ticks: 1,
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
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TickInput {
    /// `None` when events could not be read.
    pub raw: Option<SignalSet>,
    /// Kernel launches in the signal window.
    pub kernel_launches: i64,
    /// Evidence of GPU work besides counted launches (time in CUDA calls, NVML
    /// utilization): keeps the node out of IDLE.
    pub other_work: bool,
    /// When the sample was taken (normally `now`).
    pub observed_at: Timestamp,
    /// Fraction of the interval this node's ranks spent blocked at NCCL barriers (the
    /// `nccl.collective.barrier_wait_ms` the agent measures), in [0, 1); 0 without NCCL.
    pub sync_wait: f64,
}

/// Most of an interval that can count as barrier wait: the throughput correction is at
/// most 1 / (1 - 0.9) = 10x.
pub const MAX_SYNC_WAIT: f64 = 0.9;

/// Throughput per second *not* spent waiting at a barrier. In synchronous training every
/// rank's step rate falls when one rank is slow, because the others wait for it at the
/// collective; their launches per non-waiting second stay as they were, while the slow
/// rank, which waits least, shows the whole drop. So the score names the slow rank.
pub fn sync_corrected(raw: SignalSet, sync_wait: f64) -> SignalSet {
    let w = if sync_wait.is_finite() {
        sync_wait.clamp(0.0, MAX_SYNC_WAIT)
    } else {
        0.0
    };
    SignalSet {
        throughput: raw.throughput / (1.0 - w),
        ..raw
    }
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
    classifier: AnyClassifier,
    mode: DetectionMode,
    last_report: Option<HealthReport>,
    settle_left: u32,
}

impl HealthCore {
    pub fn new(cfg: CoreConfig) -> Self {
        HealthCore {
            cfg,
            baseliner: Baseliner::new(cfg.baseline),
            state: StateMachine::new(cfg.state),
            classifier: AnyClassifier::new(cfg.rule, cfg.hysteresis, cfg.evidence)
                .with_shallow_decision(cfg.shallow_decision),
            mode: DetectionMode::None,
            last_report: None,
            settle_left: 0,
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
            other_work: input.other_work,
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
            if let Some(raw) = input.raw.map(|r| sync_corrected(r, input.sync_wait)) {
                self.baseliner.update(raw);
            }
            return out;
        }
        let Some(raw) = input.raw.map(|r| sync_corrected(r, input.sync_wait)) else {
            // Stale, or a failed read on its way there: the agent does not know its score.
            return out;
        };
        if transition.next == NodeState::Stale {
            return out;
        }
        if transition.is_wake() {
            // This tick's window is partly idle: its throughput means nothing yet.
            self.settle_left = self.cfg.settle_ticks.saturating_sub(1);
            return out;
        }
        let settling = self.settle_left > 0;
        self.settle_left = self.settle_left.saturating_sub(1);

        let signals = self.baseliner.signals(raw);
        let before = self.baseliner.current();
        // IDLE freezes the baseline (waking finds it as it was); so does settling.
        if transition.next != NodeState::Idle && !settling {
            self.baseliner.update(raw);
        }
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

        if let (NodeState::Active, Some(threshold), false) =
            (transition.next, decision.threshold, settling)
        {
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
        } else if transition.next == NodeState::Idle && self.classifier.reset_on_idle() {
            // As Fleet does for a node that is not active: the verdict is cleared, and the
            // consumers hear it (a resolved event) instead of a straggler that never ends.
            out.straggler = Some(StragglerEmission {
                straggler: false,
                edge: true,
                score: score.value,
                threshold: decision.threshold.unwrap_or(0.0),
                mode: decision.mode,
                dominant_signal: "unknown",
            });
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
            other_work: false,
            observed_at: at,
            sync_wait: 0.0,
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

        // Throughput drops to 60 %: ratio 0.6, score 0.78 < 0.88 -> straggler on the second
        // such tick (the agent's two deep samples of evidence), dominant throughput.
        now = now.saturating_add(Duration::from_secs(10));
        let out = core.tick(input(600.0, 6_000, now), fleet(0.88, now), now);
        assert!(
            out.straggler.is_none(),
            "one deep sample is half the evidence"
        );
        now = now.saturating_add(Duration::from_secs(10));
        let out = core.tick(input(600.0, 6_000, now), fleet(0.88, now), now);
        let s = out.straggler.unwrap();
        assert!(s.straggler && s.edge);
        // (The slowdown reference has moved a little toward the slow rate after one tick.)
        assert!((s.score - 0.78).abs() < 1e-3, "{}", s.score);
        assert_eq!(
            (s.threshold, s.mode, s.dominant_signal),
            (0.88, DetectionMode::Fleet, "throughput")
        );

        // Recovery: the first healthy tick is well above the clear margin, so the edge fires
        // once on it (the sum restarts at 0), then silence.
        let baseline = core.baseliner().reference();
        now = now.saturating_add(Duration::from_secs(10));
        let out = core.tick(input(baseline, 10_000, now), fleet(0.88, now), now);
        let s = out.straggler.unwrap();
        assert!(!s.straggler && s.edge);
        now = now.saturating_add(Duration::from_secs(10));
        assert!(
            core.tick(input(baseline, 10_000, now), fleet(0.88, now), now)
                .straggler
                .is_none()
        );
    }

    #[test]
    fn the_one_sample_rule_flips_on_single_samples() {
        let cfg = CoreConfig {
            rule: Rule::OneSample,
            ..CoreConfig::default().with_warmup(2)
        };
        let mut core = HealthCore::new(cfg);
        let mut now = T0;
        let mut tick = |core: &mut HealthCore, tp: f64| {
            now = now.saturating_add(Duration::from_secs(10));
            core.tick(input(tp, 10, now), fleet(0.88, now), now)
                .straggler
        };
        for _ in 0..3 {
            assert!(tick(&mut core, 1000.0).is_none());
        }
        // One sample 0.01 below the threshold flags (the CUSUM would wait: 0.7 sigma).
        let s = tick(&mut core, 1000.0 * 0.825).unwrap();
        assert!(s.straggler && s.edge);
        let s = tick(&mut core, 1000.0).unwrap();
        assert!(!s.straggler && s.edge);
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
    fn idle_freezes_the_baseline_and_a_wake_is_active_at_once() {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(2));
        let mut now = T0;
        let mut tick = |core: &mut HealthCore, tp: f64, launches: i64| {
            now = now.saturating_add(Duration::from_secs(10));
            core.tick(input(tp, launches, now), fleet(0.5, now), now)
        };
        for _ in 0..5 {
            tick(&mut core, 500.0, 5);
        }
        let reference = core.baseliner().reference();
        // Three workless ticks: idle. (The two before the transition are folded in as a
        // slowdown, at the slow rate.)
        for _ in 0..3 {
            tick(&mut core, 0.0, 0);
        }
        assert_eq!(core.state(), NodeState::Idle);
        let frozen = core.baseliner().sample_count();
        for _ in 0..20 {
            let out = tick(&mut core, 0.0, 0);
            assert_eq!(out.report.unwrap().state, NodeState::Idle, "idle is pushed");
        }
        assert_eq!(core.baseliner().sample_count(), frozen, "frozen while idle");
        assert!(core.baseliner().reference() > 0.99 * reference);
        // Work resumes: ACTIVE on that very tick, not pushed (its window is partly idle).
        let out = tick(&mut core, 50.0, 3);
        assert_eq!(
            (out.transition.prev, out.transition.next),
            (NodeState::Idle, NodeState::Active)
        );
        assert!(out.report.is_none() && out.straggler.is_none());
        assert_eq!(core.baseliner().sample_count(), frozen);
        // The next tick is pushed as active and scored against the old baseline.
        let out = tick(&mut core, 500.0, 5);
        let r = out.report.unwrap();
        assert_eq!(r.state, NodeState::Active);
        assert!(r.score.signals.throughput > 0.99, "{:?}", r.score.signals);
        // The two workless ACTIVE ticks before IDLE scored 0.27 < 0.5 and the second was
        // flagged; the verdict was cleared when the node went IDLE (checked below), so
        // nothing here.
        assert!(out.straggler.is_none());
    }

    #[test]
    fn going_idle_clears_a_straggler_verdict_once() {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(2));
        let mut now = T0;
        let mut tick = |core: &mut HealthCore, tp: f64, launches: i64| {
            now = now.saturating_add(Duration::from_secs(10));
            core.tick(input(tp, launches, now), fleet(0.5, now), now)
        };
        for _ in 0..5 {
            tick(&mut core, 500.0, 5);
        }
        // A workless active tick scores 0.27: one such sample is half the agent's evidence,
        // the second flags.
        assert!(tick(&mut core, 0.0, 0).straggler.is_none());
        let a = tick(&mut core, 0.0, 0).straggler.unwrap();
        assert!(a.straggler && a.edge, "the second workless tick");
        let out = tick(&mut core, 0.0, 0);
        assert_eq!(out.transition.next, NodeState::Idle);
        let s = out.straggler.unwrap();
        assert!(!s.straggler && s.edge);
        assert_eq!((s.threshold, s.dominant_signal), (0.5, "unknown"));
        assert!(!core.is_straggler());
        for _ in 0..5 {
            assert!(tick(&mut core, 0.0, 0).straggler.is_none(), "once");
        }
    }

    #[test]
    fn a_long_signal_window_settles_for_several_ticks_after_a_wake() {
        let cfg = CoreConfig {
            settle_ticks: 3,
            ..CoreConfig::default().with_warmup(2)
        };
        let mut core = HealthCore::new(cfg);
        let mut now = T0;
        let mut tick = |core: &mut HealthCore, tp: f64, launches: i64| {
            now = now.saturating_add(Duration::from_secs(10));
            core.tick(input(tp, launches, now), fleet(0.88, now), now)
        };
        for _ in 0..5 {
            tick(&mut core, 1000.0, 5);
        }
        for _ in 0..3 {
            tick(&mut core, 0.0, 0);
        }
        assert_eq!(core.state(), NodeState::Idle);
        let samples = core.baseliner().sample_count();
        // Wake (not pushed), then two ramping ticks pushed but neither classified nor folded in.
        assert!(tick(&mut core, 100.0, 1).report.is_none());
        for tp in [300.0, 600.0] {
            let out = tick(&mut core, tp, 5);
            assert_eq!(out.report.unwrap().state, NodeState::Active);
            assert!(
                out.straggler.is_none(),
                "a ramping window is not a straggler"
            );
        }
        assert_eq!(core.baseliner().sample_count(), samples);
        // Settled: classified again (a real slowdown is flagged, on its second sample).
        assert!(tick(&mut core, 400.0, 5).straggler.is_none());
        let out = tick(&mut core, 400.0, 5);
        assert!(out.straggler.is_some_and(|s| s.straggler));
        assert_eq!(core.baseliner().sample_count(), samples + 2);
    }

    #[test]
    fn cuda_call_time_alone_keeps_the_node_active() {
        // The H100 case: cuBLAS kernels launched through the driver from a static runtime
        // (not counted), the host waiting in torch.cuda.synchronize (time in CUDA calls).
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(2));
        let mut now = T0;
        for i in 0..50 {
            now = now.saturating_add(Duration::from_secs(1));
            let inp = TickInput {
                other_work: true,
                ..input(
                    if i < 5 { 300.0 } else { 0.0 },
                    if i < 5 { 300 } else { 0 },
                    now,
                )
            };
            core.tick(inp, fleet(0.5, now), now);
            assert_ne!(core.state(), NodeState::Idle, "tick {i}");
        }
    }

    #[test]
    fn failed_reads_push_nothing_and_go_stale() {
        let mut core = HealthCore::new(CoreConfig::default());
        let fail = TickInput {
            raw: None,
            kernel_launches: 0,
            other_work: false,
            observed_at: T0,
            sync_wait: 0.0,
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
