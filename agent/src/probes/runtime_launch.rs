//! Whether the runtime's kernel-launch probes are worth their trap.
//!
//! A runtime launch (`cudaLaunchKernel`) that reaches the **exported** driver entry
//! (`cuLaunchKernel`) is seen twice: by the runtime probe and, nested, by the driver probe.
//! Counting at the driver alone then loses nothing and halves the traps of that path, but a
//! runtime that reaches the driver through a private entry would lose its launches. So the
//! agent calibrates first: with both layers attached it sums, over the launches drained
//! since calibration started, `R` = runtime + runtime graph and `N` = nested. Once `R`
//! reaches the threshold it decides: `N >= 0.99 R` (every runtime launch reached the
//! exported driver entry, with 1 % for the kernel skipping a program under contention)
//! detaches the runtime's launch probes; otherwise both stay and nothing switches for
//! those libraries. A runtime library attached later calibrates again.
//!
//! Pure: no I/O, no logging; the probe thread acts on what [`Calibration::observe`] returns.

use crate::config::RuntimeLaunchProbes;
use crate::events::launch;

/// Runtime launches seen before deciding.
pub const DEFAULT_THRESHOLD: u64 = 20_000;
/// Nested launches needed per 100 runtime launches to count at the driver alone.
pub const MIN_NESTED_PERCENT: u64 = 99;

/// Where the runtime's launch probes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// Both layers counted; `R` and `N` accumulate.
    #[default]
    Calibrating,
    /// Decided to count at the driver alone; the runtime's launch probes are being
    /// detached (both layers may still fire until the kernel has removed them).
    Detaching,
    /// Runtime launches are counted at the driver alone (as `driver` launches).
    Detached,
    /// Both layers stay attached (`always`, or the calibration found launches that do not
    /// reach the exported driver entry).
    Attached,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Calibrating,
        State::Detaching,
        State::Detached,
        State::Attached,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Calibrating => "calibrating",
            State::Detaching => "detaching",
            State::Detached => "detached",
            State::Attached => "attached",
        }
    }
}

/// What calibration decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every runtime launch reached the exported driver entry: detach the runtime's
    /// launch probes.
    Detach,
    /// Keep both layers.
    Keep,
}

/// The verdict for `runtime` launches of which `nested` reached the exported driver entry,
/// or `None` while fewer than `threshold` runtime launches were seen.
pub fn verdict(runtime: u64, nested: u64, threshold: u64) -> Option<Verdict> {
    if runtime == 0 || runtime < threshold {
        return None;
    }
    if u128::from(nested) * 100 >= u128::from(runtime) * u128::from(MIN_NESTED_PERCENT) {
        Some(Verdict::Detach)
    } else {
        Some(Verdict::Keep)
    }
}

/// The state and the calibration's figures, for the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub state: State,
    /// Runtime launches (plain and graph) since calibration started.
    pub runtime: u64,
    /// Nested launches since calibration started.
    pub nested: u64,
    pub threshold: u64,
}

/// The calibration of the runtime's launch probes.
#[derive(Debug, Clone)]
pub struct Calibration {
    mode: RuntimeLaunchProbes,
    status: Status,
}

impl Calibration {
    pub fn new(mode: RuntimeLaunchProbes, threshold: u64) -> Self {
        let state = match mode {
            RuntimeLaunchProbes::Auto => State::Calibrating,
            RuntimeLaunchProbes::Always => State::Attached,
        };
        Calibration {
            mode,
            status: Status {
                state,
                runtime: 0,
                nested: 0,
                threshold: threshold.max(1),
            },
        }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn state(&self) -> State {
        self.status.state
    }

    /// A runtime library's launch probes were attached: calibrate again from zero (the
    /// next verdict covers every runtime library whose launch probes are attached).
    pub fn restart(&mut self) {
        if self.mode == RuntimeLaunchProbes::Always {
            return;
        }
        self.status.state = State::Calibrating;
        self.status.runtime = 0;
        self.status.nested = 0;
    }

    /// Launches drained since the previous call (per counter of `events::launch`). Returns
    /// the verdict once, when it is made.
    pub fn observe(&mut self, launched: &[u64; launch::COUNTERS]) -> Option<Verdict> {
        if self.status.state != State::Calibrating {
            return None;
        }
        let s = &mut self.status;
        s.runtime = s
            .runtime
            .saturating_add(launched[launch::RUNTIME])
            .saturating_add(launched[launch::RUNTIME_GRAPH]);
        s.nested = s.nested.saturating_add(launched[launch::NESTED]);
        let v = verdict(s.runtime, s.nested, s.threshold)?;
        s.state = match v {
            Verdict::Detach => State::Detaching,
            Verdict::Keep => State::Attached,
        };
        Some(v)
    }

    /// The kernel has removed the runtime's launch probes that were being detached.
    pub fn detach_done(&mut self) {
        if self.status.state == State::Detaching {
            self.status.state = State::Detached;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [runtime, runtime graph, driver, driver graph, nested]
    fn counts(rt: u64, rtg: u64, drv: u64, nested: u64) -> [u64; launch::COUNTERS] {
        [rt, rtg, drv, 0, nested]
    }

    #[test]
    fn below_the_threshold_it_keeps_calibrating() {
        let mut c = Calibration::new(RuntimeLaunchProbes::Auto, 1000);
        assert_eq!(c.observe(&counts(600, 0, 50, 600)), None);
        assert_eq!(c.observe(&counts(300, 99, 0, 399)), None);
        let s = c.status();
        assert_eq!(
            (s.state, s.runtime, s.nested),
            (State::Calibrating, 999, 999)
        );
        assert_eq!(
            verdict(0, 0, 0),
            None,
            "no runtime launch, nothing to decide"
        );
    }

    #[test]
    fn every_runtime_launch_nested_detaches_then_done() {
        let mut c = Calibration::new(RuntimeLaunchProbes::Auto, 1000);
        assert_eq!(c.observe(&counts(900, 0, 7, 900)), None);
        assert_eq!(c.observe(&counts(50, 50, 3, 100)), Some(Verdict::Detach));
        assert_eq!(c.state(), State::Detaching);
        // Nothing more accumulates, and the verdict is given once.
        assert_eq!(c.observe(&counts(10, 0, 0, 0)), None);
        assert_eq!((c.status().runtime, c.status().nested), (1000, 1000));
        c.detach_done();
        assert_eq!(c.state(), State::Detached);
    }

    #[test]
    fn the_ratio_boundary_is_99_percent() {
        assert_eq!(verdict(1000, 990, 1000), Some(Verdict::Detach));
        assert_eq!(verdict(1000, 989, 1000), Some(Verdict::Keep));
        assert_eq!(verdict(20_000, 19_800, 20_000), Some(Verdict::Detach));
        assert_eq!(verdict(20_000, 19_799, 20_000), Some(Verdict::Keep));
        // More nested than runtime (a runtime entry calling another) still detaches.
        assert_eq!(verdict(1000, 2000, 1000), Some(Verdict::Detach));
        assert_eq!(verdict(u64::MAX, u64::MAX, 1), Some(Verdict::Detach));
    }

    #[test]
    fn a_private_driver_entry_keeps_both_layers_for_good() {
        let mut c = Calibration::new(RuntimeLaunchProbes::Auto, 1000);
        assert_eq!(c.observe(&counts(1500, 0, 0, 0)), Some(Verdict::Keep));
        assert_eq!(c.state(), State::Attached);
        assert_eq!(c.observe(&counts(100_000, 0, 0, 100_000)), None);
        assert_eq!(c.state(), State::Attached);
        c.detach_done();
        assert_eq!(c.state(), State::Attached);
    }

    #[test]
    fn a_new_runtime_library_calibrates_again() {
        let mut c = Calibration::new(RuntimeLaunchProbes::Auto, 100);
        assert_eq!(c.observe(&counts(100, 0, 0, 100)), Some(Verdict::Detach));
        c.detach_done();
        c.restart();
        let s = c.status();
        assert_eq!((s.state, s.runtime, s.nested), (State::Calibrating, 0, 0));
        assert_eq!(c.observe(&counts(150, 0, 0, 0)), Some(Verdict::Keep));
        // After a keep, a new library calibrates again too.
        c.restart();
        assert_eq!(c.state(), State::Calibrating);
        assert_eq!(c.observe(&counts(100, 0, 0, 100)), Some(Verdict::Detach));
        // A restart while detaching: calibrating again.
        c.restart();
        assert_eq!(c.state(), State::Calibrating);
        c.detach_done();
        assert_eq!(
            c.state(),
            State::Calibrating,
            "an old detach does not end it"
        );
    }

    #[test]
    fn always_never_calibrates() {
        let mut c = Calibration::new(RuntimeLaunchProbes::Always, 1);
        assert_eq!(c.state(), State::Attached);
        assert_eq!(c.observe(&counts(1_000_000, 0, 0, 1_000_000)), None);
        c.restart();
        assert_eq!(c.state(), State::Attached);
    }
}
