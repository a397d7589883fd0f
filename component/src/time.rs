//! Time as the components see it: a [`Timestamp`] handed in by the host, and a [`Clock`]
//! the host reads. Components never read the system clock themselves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (the unit of OTLP `timeUnixNano`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);

    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    pub fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self + d`, saturating at `u64::MAX`.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at zero.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_nanos(d)))
    }

    /// Time elapsed from `earlier` to `self`; zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The current wall-clock time.
    pub fn now() -> Self {
        SystemClock.now()
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of the current time. The host owns one; tests use [`ManualClock`].
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_nanos)
            .unwrap_or(0);
        Timestamp(nanos)
    }
}

/// A clock that moves only when told to. Shareable across threads.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            nanos: AtomicU64::new(start.0),
        }
    }

    pub fn set(&self, t: Timestamp) {
        self.nanos.store(t.0, Ordering::SeqCst);
    }

    pub fn advance(&self, d: Duration) -> Timestamp {
        let add = duration_nanos(d);
        let prev = self.nanos.fetch_add(add, Ordering::SeqCst);
        Timestamp(prev.saturating_add(add))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advances_only_when_told() {
        let c = ManualClock::new(Timestamp::from_secs(100));
        assert_eq!(c.now(), Timestamp::from_secs(100));
        let t = c.advance(Duration::from_millis(1500));
        assert_eq!(t, Timestamp::from_nanos(101_500_000_000));
        assert_eq!(c.now(), t);
    }

    #[test]
    fn since_saturates_instead_of_panicking() {
        let a = Timestamp::from_secs(10);
        let b = Timestamp::from_secs(5);
        assert_eq!(a.since(b), Duration::from_secs(5));
        assert_eq!(b.since(a), Duration::ZERO);
        assert_eq!(b.saturating_sub(Duration::from_secs(60)), Timestamp::ZERO);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > Timestamp::from_secs(1_577_836_800));
    }
}
