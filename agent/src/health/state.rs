//! The node lifecycle (spec 3.4): CALIBRATING -> ACTIVE -> IDLE, and STALE from anywhere
//! when events cannot be read. Only `calibrating`, `active` and `idle` go on the wire; a
//! stale node pushes nothing.

use std::time::Duration;

use component::Timestamp;
use component::wire;

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

    /// Entering CALIBRATING from IDLE or STALE: the baseline must be reset.
    pub fn is_recalibration(&self) -> bool {
        self.next == NodeState::Calibrating
            && matches!(self.prev, NodeState::Idle | NodeState::Stale)
    }
}

#[derive(Debug, Clone)]
pub struct StateMachine {
    cfg: StateConfig,
    current: NodeState,
    consecutive_zeros: u32,
    consecutive_fails: u32,
    calibrating_seen: u64,
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
        let launches = obs.kernel_launches.max(0);
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
                    let t = self.go(NodeState::Calibrating, "event reads recovered");
                    self.calibrating_seen = 1;
                    return t;
                }
            }
            NodeState::Calibrating => {
                self.calibrating_seen = self.calibrating_seen.saturating_add(1);
                self.count_idle(read_ok, launches);
                if self.calibrating_seen >= self.cfg.warmup_samples {
                    return self.go(NodeState::Active, "warm-up complete");
                }
            }
            NodeState::Active => {
                self.count_idle(read_ok, launches);
                if self.consecutive_zeros >= self.cfg.idle_intervals {
                    return self.go(NodeState::Idle, "no kernel launches");
                }
            }
            NodeState::Idle => {
                if read_ok && launches > 0 {
                    let t = self.go(NodeState::Calibrating, "kernel launches resumed");
                    self.calibrating_seen = 1;
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

    fn count_idle(&mut self, read_ok: bool, launches: i64) {
        if !read_ok {
            return;
        }
        if launches == 0 {
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
            read_ok: true,
            timestamp: NOW,
        }
    }

    fn fail() -> Observation {
        Observation {
            kernel_launches: 0,
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
    fn active_goes_idle_after_three_zero_intervals_and_back_through_calibrating() {
        let mut sm = StateMachine::restored(StateConfig::default());
        let states = run(&mut sm, &[ok(0), ok(0), ok(3), ok(0), ok(0), ok(0)]);
        use NodeState::*;
        assert_eq!(states, [Active, Active, Active, Active, Active, Idle]);
        let t = sm.observe(ok(1), NOW);
        assert!(t.is_recalibration());
        // The waking observation counts toward warm-up: 29 more reach ACTIVE.
        assert_eq!(sm.calibrating_seen(), 1);
        for _ in 0..28 {
            assert_eq!(sm.observe(ok(1), NOW).next, Calibrating);
        }
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
