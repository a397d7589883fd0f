//! Putting a node's monotonic NCCL timestamps on the host's wall-clock axis.
//!
//! The Ingero agent stamps NCCL points with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, time
//! since boot), which is not comparable across nodes. What the processor does know is when
//! each batch arrived (host wall clock). Every point satisfies
//! `arrival = ts + offset + delay` with `delay >= 0` (export buffering + network), so
//! `arrival - max_ts_in_batch` is an *upper bound* of the node's offset, and the smallest
//! such bound over recent batches is the estimate (the same one-way minimum filter NTP
//! uses). Its error is the smallest delivery delay seen, i.e. the time between a batch's
//! newest collective and its arrival, at best one network latency.
//!
//! Limits, stated plainly: with `ingero trace` exporting every 10 s the newest point of a
//! batch can be up to one collective interval old, so the estimate is only as good as the
//! smallest such gap seen over the last `offset_window` batches; it improves as export and
//! collective phases drift relative to each other and never gets better than the network
//! latency. The error is a per-node constant that adds to (or subtracts from) that node's
//! lag. The estimate is windowed (not an all-time minimum) so clock drift and reboots (the
//! monotonic clock restarts) are followed; a reboot is also detected directly when the
//! node's timestamps go backwards and resets the window.

use std::collections::VecDeque;

use component::Timestamp;

/// Timestamps below this (2001-09-09 in Unix ns) are monotonic since-boot values: an
/// uptime would need 31 years to reach it, and no wall clock is still before it.
pub const WALL_CLOCK_MIN_NS: u64 = 1_000_000_000_000_000_000;

/// A monotonic timestamp that moves back by more than this means the clock restarted.
const REBOOT_BACKSTEP_NS: u64 = 1_000_000_000;

/// True when a raw point timestamp is a wall-clock (Unix) time.
pub fn is_wall_clock(ts: u64) -> bool {
    ts >= WALL_CLOCK_MIN_NS
}

/// Offset estimate of one node's monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct NodeClock {
    samples: VecDeque<i64>,
    offset: i64,
    batches: u64,
    last_max_ts: u64,
    pub last_seen: Timestamp,
}

impl NodeClock {
    /// Record one delivery: the batch arrived at `arrival` and its newest monotonic NCCL
    /// timestamp is `max_ts`. `window` is how many deliveries the minimum looks back over.
    pub fn observe(&mut self, arrival: Timestamp, max_ts: u64, window: usize) {
        if max_ts.saturating_add(REBOOT_BACKSTEP_NS) < self.last_max_ts {
            // The monotonic clock restarted (reboot): old samples describe another epoch.
            self.samples.clear();
            self.batches = 0;
        }
        self.last_max_ts = max_ts;
        self.last_seen = self.last_seen.max(arrival);
        let sample = (arrival.as_nanos() as i64).saturating_sub(max_ts as i64);
        self.samples.push_back(sample);
        while self.samples.len() > window.max(1) {
            self.samples.pop_front();
        }
        self.offset = self.samples.iter().copied().min().unwrap_or(sample);
        self.batches = self.batches.saturating_add(1);
    }

    /// Deliveries observed since the last reset.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The current offset estimate (add to a monotonic timestamp to get Unix ns).
    pub fn offset_ns(&self) -> i64 {
        self.offset
    }

    /// `ts` on the wall-clock axis.
    pub fn align(&self, ts: u64) -> i64 {
        (ts as i64).saturating_add(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: u64 = 1_760_000_000_000_000_000; // wall time of the node's boot

    #[test]
    fn classifies_monotonic_and_wall_timestamps() {
        assert!(!is_wall_clock(3_600_000_000_000)); // an hour of uptime
        assert!(!is_wall_clock(30 * 365 * 86_400 * 1_000_000_000)); // 30 years of uptime
        assert!(is_wall_clock(BOOT));
    }

    #[test]
    fn minimum_delivery_delay_wins_and_is_an_upper_bound() {
        let mut c = NodeClock::default();
        // Batches arrive at 10 s intervals; the newest point is 300, 40, 120 ms old.
        for (i, delay_ms) in [300u64, 40, 120].iter().enumerate() {
            let mono = 50_000_000_000 + i as u64 * 10_000_000_000;
            let arrival = Timestamp(BOOT + mono + delay_ms * 1_000_000);
            c.observe(arrival, mono, 8);
        }
        assert_eq!(c.batches(), 3);
        assert_eq!(c.offset_ns(), BOOT as i64 + 40_000_000);
        // Aligned times are never earlier than the truth.
        assert_eq!(c.align(1_000), BOOT as i64 + 40_000_000 + 1_000);
    }

    #[test]
    fn window_forgets_old_samples() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 1_000 + 5), 1_000, 2);
        c.observe(Timestamp(BOOT + 2_000 + 50), 2_000, 2);
        c.observe(Timestamp(BOOT + 3_000 + 70), 3_000, 2);
        assert_eq!(c.offset_ns(), BOOT as i64 + 50);
    }

    #[test]
    fn reboot_resets_the_estimate() {
        let mut c = NodeClock::default();
        c.observe(Timestamp(BOOT + 900_000_000_000), 900_000_000_000, 32);
        c.observe(Timestamp(BOOT + 910_000_000_000), 910_000_000_000, 32);
        // Rebooted at BOOT + 1000 s: monotonic starts again from 0.
        let reboot = BOOT + 1_000_000_000_000;
        c.observe(Timestamp(reboot + 20_000_000_000), 20_000_000_000, 32);
        assert_eq!(c.batches(), 1);
        assert_eq!(c.offset_ns(), reboot as i64);
    }
}
