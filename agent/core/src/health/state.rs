//! The node lifecycle (spec 3.4): CALIBRATING -> ACTIVE -> IDLE, and STALE from anywhere
//! when events cannot be read. Only `calibrating`, `active` and `idle` go on the wire; a
//! stale node pushes nothing.
//!
//! IDLE means no evidence of GPU work at all for `idle_intervals` ticks: no kernel launch
//! counted at any layer, no time spent in CUDA calls (synchronizations included), no GPU
//! utilization from NVML. One tick with any of them wakes the node. Unlike the spec's Go
//! agent, a node whose baseline finished warming up before it went idle wakes straight into
//! ACTIVE (the baseline was frozen while idle); only a node that never warmed up goes back
//! to CALIBRATING.

use std::time::Duration;

use component::Timestamp;
use ingero_wire as wire;

pub const DEFAULT_IDLE_INTERVALS: u32 = 3;
pub const DEFAULT_STALE_READ_FAILURES: u32 = 3;
/// An observation stamped further than this in the future is treated as a failed read.
pub const FUTURE_TOLERANCE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Calibrating,
    Active,
    Idle,
    Stale,
}

impl NodeState {
    /// The `ingero.node.state` value; `None` for STALE, which is never emitted.
    pub const fn wire(self) -> Option<&'static str> {
        match self {
            NodeState::Calibrating => Some(wire::state::CALIBRATING),
            NodeState::Active => Some(wire::state::ACTIVE),
            NodeState::Idle => Some(wire::state::IDLE),
            NodeState::Stale => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            NodeState::Calibrating => "calibrating",
            NodeState::Active => "active",
            NodeState::Idle => "idle",
            NodeState::Stale => "stale",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateConfig {
    pub warmup_samples: u64,
    pub idle_intervals: u32,
    pub stale_read_failures: u32,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            warmup_samples: super::baseline::DEFAULT_WARMUP_SAMPLES,
            idle_intervals: DEFAULT_IDLE_INTERVALS,
            stale_read_failures: DEFAULT_STALE_READ_FAILURES,
        }
    }
}

/// One tick's input to the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Kernel launches in the signal window. Negative counts are treated as 0.
    pub kernel_launches: i64,
    /// Other evidence that the GPU is working this tick even without a counted launch:
    /// time inside CUDA calls (a synchronize waiting on kernels launched by a layer the
    /// probes do not count), or NVML utilization above 0.
    pub other_work: bool,
    /// False when events could not be read this tick.
    pub read_ok: bool,
    /// When the observation was taken.
    pub timestamp: Timestamp,
}

/// What one observation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub prev: NodeState,
    pub next: NodeState,
    pub reason: Option<&'static str>,
}

impl Transition {
    pub fn changed(&self) -> bool {
        self.prev != self.next
    }

    /// Entering CALIBRATING from STALE: the baseline must be reset. (From IDLE the baseline
    /// was frozen, so it is kept.)
    pub fn is_recalibration(&self) -> bool {
        self.next == NodeState::Calibrating && self.prev == NodeState::Stale
    }

    /// Leaving IDLE because work resumed (into ACTIVE, or CALIBRATING when never warm).
    pub fn is_wake(&self) -> bool {
        self.prev == NodeState::Idle
            && matches!(self.next, NodeState::Active | NodeState::Calibrating)
    }
}

#[derive(Debug, Clone)]
pub struct StateMachine {
    cfg: StateConfig,
    current: NodeState,
    consecutive_zeros: u32,
    consecutive_fails: u32,
    calibrating_seen: u64,
    /// Warm-up finished at least once since the last reset (start or STALE).
    warm: bool,
}

impl StateMachine {
    /// Starts in CALIBRATING.
    pub fn new(cfg: StateConfig) -> Self {
        Self::starting_in(cfg, NodeState::Calibrating)
    }

    /// Starts in ACTIVE: a fresh persisted baseline was restored, no warm-up needed.
    pub fn restored(cfg: StateConfig) -> Self {
        Self::starting_in(cfg, NodeState::Active)
    }

    fn starting_in(cfg: StateConfig, current: NodeState) -> Self {
        StateMachine {
            cfg,
            current,
            consecutive_zeros: 0,
            consecutive_fails: 0,
            calibrating_seen: 0,
            warm: current == NodeState::Active,
        }
    }

    pub fn current(&self) -> NodeState {
        self.current
    }

    /// Observations seen in the current CALIBRATING phase.
    pub fn calibrating_seen(&self) -> u64 {
        self.calibrating_seen
    }

    /// Fold one observation in at `now`.
    pub fn observe(&mut self, obs: Observation, now: Timestamp) -> Transition {
        let working = obs.kernel_launches > 0 || obs.other_work;
        let future = obs.timestamp > now.saturating_add(FUTURE_TOLERANCE);
        let read_ok = obs.read_ok && !future;
        let prev = self.current;

        if read_ok {
            self.consecutive_fails = 0;
        } else {
            self.consecutive_fails = self.consecutive_fails.saturating_add(1);
            if self.consecutive_fails >= self.cfg.stale_read_failures && prev != NodeState::Stale {
                return self.go(NodeState::Stale, "event reads failed repeatedly");
            }
        }

        match prev {
            NodeState::Stale => {
                if read_ok {
                    self.warm = false;
                    let t = self.go(NodeState::Calibrating, "event reads recovered");
                    self.calibrating_seen = 1;
                    return t;
                }
            }
            NodeState::Calibrating => {
                self.count_idle(read_ok, working);
                if self.consecutive_zeros >= self.cfg.idle_intervals {
                    let seen = self.calibrating_seen;
                    let t = self.go(NodeState::Idle, "no GPU work");
                    // Warm-up progress survives the idle spell (the baseline is frozen).
                    self.calibrating_seen = seen;
                    return t;
                }
                self.calibrating_seen = self.calibrating_seen.saturating_add(1);
                if self.calibrating_seen >= self.cfg.warmup_samples {
                    self.warm = true;
                    return self.go(NodeState::Active, "warm-up complete");
                }
            }
            NodeState::Active => {
                self.count_idle(read_ok, working);
                if self.consecutive_zeros >= self.cfg.idle_intervals {
                    return self.go(NodeState::Idle, "no GPU work");
                }
            }
            NodeState::Idle => {
                if read_ok && working {
                    if self.warm {
                        return self.go(NodeState::Active, "GPU work resumed");
                    }
                    let seen = self.calibrating_seen.saturating_add(1);
                    if seen >= self.cfg.warmup_samples {
                        self.warm = true;
                        return self.go(NodeState::Active, "GPU work resumed; warm-up complete");
                    }
                    let t = self.go(NodeState::Calibrating, "GPU work resumed");
                    self.calibrating_seen = seen;
                    return t;
                }
            }
        }
        Transition {
            prev,
            next: prev,
            reason: None,
        }
    }

    fn count_idle(&mut self, read_ok: bool, working: bool) {
        if !read_ok {
            return;
        }
        if !working {
            self.consecutive_zeros = self.consecutive_zeros.saturating_add(1);
        } else {
            self.consecutive_zeros = 0;
        }
    }

    fn go(&mut self, next: NodeState, reason: &'static str) -> Transition {
        let prev = self.current;
        self.current = next;
        self.consecutive_zeros = 0;
        if matches!(next, NodeState::Calibrating | NodeState::Active) {
            self.calibrating_seen = 0;
        }
        Transition {
            prev,
            next,
            reason: Some(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_secs(1_000_000);

    fn ok(launches: i64) -> Observation {
        Observation {
            kernel_launches: launches,
            other_work: false,
            read_ok: true,
            timestamp: NOW,
        }
    }

    /// No counted launch, but time in CUDA calls or NVML utilization.
    fn busy() -> Observation {
        Observation {
            other_work: true,
            ..ok(0)
        }
    }

    fn fail() -> Observation {
        Observation {
            kernel_launches: 0,
            other_work: false,
            read_ok: false,
            timestamp: NOW,
        }
    }

    fn run(sm: &mut StateMachine, obs: &[Observation]) -> Vec<NodeState> {
        obs.iter().map(|o| sm.observe(*o, NOW).next).collect()
    }

    #[test]
    fn calibrating_becomes_active_after_warmup_samples() {
        let mut sm = StateMachine::new(StateConfig::default());
        for i in 1..30 {
            let t = sm.observe(ok(5), NOW);
            assert_eq!(t.next, NodeState::Calibrating, "sample {i}");
        }
        let t = sm.observe(ok(5), NOW);
        assert_eq!(
            (t.prev, t.next),
            (NodeState::Calibrating, NodeState::Active)
        );
    }

    #[test]
    fn active_goes_idle_after_three_workless_intervals_and_wakes_active_in_one_tick() {
        let mut sm = StateMachine::restored(StateConfig::default());
        let states = run(&mut sm, &[ok(0), ok(0), ok(3), ok(0), ok(0), ok(0)]);
        use NodeState::*;
        assert_eq!(states, [Active, Active, Active, Active, Active, Idle]);
        let t = sm.observe(ok(1), NOW);
        assert_eq!((t.prev, t.next), (Idle, Active));
        assert!(t.is_wake() && !t.is_recalibration());
    }

    #[test]
    fn any_evidence_of_gpu_work_keeps_the_node_out_of_idle() {
        use NodeState::*;
        // cuBLAS-style: kernels launched through a layer the probes do not count, but the
        // host waits in a synchronize every tick. Never idle.
        let mut sm = StateMachine::restored(StateConfig::default());
        assert_eq!(run(&mut sm, &[busy(); 100]), [Active; 100]);
        // Mixed evidence: a launch, then only synchronize time, then only launches.
        let mut sm = StateMachine::restored(StateConfig::default());
        let obs = [ok(5), busy(), busy(), ok(0), busy(), ok(0), ok(0), ok(2)];
        assert_eq!(run(&mut sm, &obs), [Active; 8]);
        // Idle, then work seen only through CUDA-call time: back to ACTIVE in one tick.
        let mut sm = StateMachine::restored(StateConfig::default());
        assert_eq!(run(&mut sm, &[ok(0); 3]).last(), Some(&Idle));
        assert_eq!(
            run(&mut sm, &[ok(0); 50]),
            [Idle; 50],
            "idle while nothing runs"
        );
        let t = sm.observe(busy(), NOW);
        assert_eq!((t.prev, t.next), (Idle, Active));
    }

    #[test]
    fn a_node_that_never_warmed_up_resumes_its_warm_up_after_idle() {
        use NodeState::*;
        let cfg = StateConfig {
            warmup_samples: 8,
            ..StateConfig::default()
        };
        let mut sm = StateMachine::new(cfg);
        // Two working samples, then three without work: idle; the two workless samples
        // before it counted toward warm-up, the third did not (4 seen).
        assert_eq!(
            run(&mut sm, &[ok(1), ok(1), ok(0), ok(0), ok(0)]),
            [Calibrating, Calibrating, Calibrating, Calibrating, Idle]
        );
        assert_eq!(sm.calibrating_seen(), 4);
        let t = sm.observe(ok(1), NOW);
        assert_eq!((t.prev, t.next), (Idle, Calibrating));
        assert!(t.is_wake() && !t.is_recalibration());
        assert_eq!(sm.calibrating_seen(), 5, "warm-up resumes where it stopped");
        assert_eq!(
            run(&mut sm, &[ok(1); 3]),
            [Calibrating, Calibrating, Active]
        );
        // Now warm: a later idle spell wakes straight into ACTIVE.
        run(&mut sm, &[ok(0); 3]);
        assert_eq!(sm.current(), Idle);
        assert_eq!(sm.observe(ok(1), NOW).next, Active);
    }

    #[test]
    fn three_failed_reads_make_any_state_stale_and_one_good_read_recovers() {
        use NodeState::*;
        for start in [
            StateMachine::new(StateConfig::default()),
            StateMachine::restored(StateConfig::default()),
        ] {
            let mut sm = start;
            let before = sm.current();
            let states = run(&mut sm, &[fail(), fail()]);
            assert_eq!(states, [before, before]);
            assert_eq!(sm.observe(fail(), NOW).next, Stale);
            assert_eq!(sm.observe(fail(), NOW).next, Stale);
            let t = sm.observe(ok(0), NOW);
            assert_eq!((t.prev, t.next), (Stale, Calibrating));
            assert!(t.is_recalibration());
        }
        // A good read in between resets the failure count.
        let mut sm = StateMachine::restored(StateConfig::default());
        assert_eq!(
            run(&mut sm, &[fail(), fail(), ok(1), fail(), fail()]),
            [Active; 5]
        );
    }

    #[test]
    fn a_far_future_timestamp_counts_as_a_failed_read() {
        let mut sm = StateMachine::restored(StateConfig::default());
        let future = Observation {
            kernel_launches: 9,
            other_work: false,
            read_ok: true,
            timestamp: NOW.saturating_add(Duration::from_secs(61)),
        };
        let near = Observation {
            timestamp: NOW.saturating_add(Duration::from_secs(59)),
            ..future
        };
        assert_eq!(sm.observe(near, NOW).next, NodeState::Active);
        sm.observe(future, NOW);
        sm.observe(future, NOW);
        assert_eq!(sm.observe(future, NOW).next, NodeState::Stale);
    }

    #[test]
    fn negative_launch_counts_are_zero() {
        let mut sm = StateMachine::restored(StateConfig::default());
        assert_eq!(
            run(&mut sm, &[ok(-5), ok(-5), ok(-5)]).last(),
            Some(&NodeState::Idle)
        );
    }

    #[test]
    fn stale_is_never_on_the_wire() {
        assert_eq!(NodeState::Stale.wire(), None);
        assert_eq!(NodeState::Active.wire(), Some("active"));
        assert_eq!(NodeState::Calibrating.wire(), Some("calibrating"));
        assert_eq!(NodeState::Idle.wire(), Some("idle"));
    }
}
