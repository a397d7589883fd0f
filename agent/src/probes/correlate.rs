//! `nccl.collective.barrier_wait_ms`: how long the rank's host thread then blocked in the
//! first stream synchronize on the same (process, stream), when that synchronize begins
//! within 1 s after the collective returned. Fast ranks wait long for the slow one; the
//! straggler waits little. Both timestamps are the kernel's monotonic clock (the Go agent
//! compared a monotonic with a wall-clock time, spec 5.3).
//!
//! Collectives are held at most [`HOLD_NS`] waiting for their synchronize, then released
//! without a barrier value.

use std::collections::VecDeque;

use crate::events::NcclEvent;
use crate::nccl::op;

/// A synchronize must start within this long after the collective returned.
pub const MATCH_WINDOW_NS: u64 = 1_000_000_000;
/// Longest a collective waits for its synchronize.
pub const HOLD_NS: u64 = 1_200_000_000;
/// Caps of the two queues; beyond them the oldest entries are released / forgotten.
pub const MAX_PENDING: usize = 8192;
pub const MAX_SYNCS: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sync {
    pid: u32,
    stream: u64,
    start: u64,
    duration: u64,
}

#[derive(Debug, Default)]
pub struct BarrierCorrelator {
    pending: VecDeque<NcclEvent>,
    syncs: VecDeque<Sync>,
}

fn is_collective(e: &NcclEvent) -> bool {
    (op::ALL_REDUCE..=op::RECV).contains(&e.op)
}

impl BarrierCorrelator {
    /// Queue a collective; lifecycle events are released at once.
    pub fn on_nccl(&mut self, e: NcclEvent, out: &mut Vec<(NcclEvent, Option<u64>)>) {
        if !is_collective(&e) {
            out.push((e, None));
            return;
        }
        if self.pending.len() >= MAX_PENDING
            && let Some(old) = self.pending.pop_front()
        {
            out.push((old, None));
        }
        self.pending.push_back(e);
    }

    /// Remember a stream synchronize.
    pub fn on_sync(&mut self, pid: u32, stream: u64, start: u64, duration: u64) {
        if self.syncs.len() >= MAX_SYNCS {
            self.syncs.pop_front();
        }
        self.syncs.push_back(Sync {
            pid,
            stream,
            start,
            duration,
        });
    }

    /// Release matched collectives and those that waited long enough, at monotonic `now`.
    pub fn release(&mut self, now: u64, out: &mut Vec<(NcclEvent, Option<u64>)>) {
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(e) = self.pending.pop_front() {
            let end = e.timestamp_ns.saturating_add(e.duration_ns);
            let hit = self.syncs.iter().position(|s| {
                s.pid == e.pid
                    && s.stream == e.stream_handle
                    && s.start >= end
                    && s.start - end <= MATCH_WINDOW_NS
            });
            if let Some(i) = hit {
                let s = self.syncs.remove(i);
                out.push((e, s.map(|s| s.duration)));
            } else if now.saturating_sub(e.timestamp_ns) > HOLD_NS {
                out.push((e, None));
            } else {
                keep.push_back(e);
            }
        }
        self.pending = keep;
        // Synchronizes older than any collective could still match are forgotten.
        let horizon = now.saturating_sub(HOLD_NS + MATCH_WINDOW_NS);
        while self.syncs.front().is_some_and(|s| s.start < horizon) {
            self.syncs.pop_front();
        }
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn coll(pid: u32, stream: u64, ts: u64, dur: u64) -> NcclEvent {
        NcclEvent {
            pid,
            op: op::ALL_REDUCE,
            stream_handle: stream,
            timestamp_ns: ts,
            duration_ns: dur,
            ..Default::default()
        }
    }

    #[test]
    fn the_next_sync_on_the_same_stream_gives_the_barrier_wait() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, MS), &mut out);
        c.on_nccl(coll(2, 7, 1000 * MS, MS), &mut out);
        c.on_sync(1, 8, 1002 * MS, 50 * MS); // other stream
        c.on_sync(1, 7, 1003 * MS, 80 * MS);
        c.release(1010 * MS, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1, Some(80 * MS));
        assert_eq!(c.pending(), 1, "pid 2 keeps waiting");
        c.release(1000 * MS + HOLD_NS + 1, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], (coll(2, 7, 1000 * MS, MS), None));
    }

    #[test]
    fn a_sync_before_the_collective_returned_or_too_late_does_not_match() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, 10 * MS), &mut out);
        c.on_sync(1, 7, 1005 * MS, 1); // during the call
        c.on_sync(1, 7, 1010 * MS + MATCH_WINDOW_NS + 1, 1); // too late
        c.release(1011 * MS, &mut out);
        assert!(out.is_empty());
        c.release(1000 * MS + HOLD_NS + 1, &mut out);
        assert_eq!(out, vec![(coll(1, 7, 1000 * MS, 10 * MS), None)]);
    }

    #[test]
    fn lifecycle_events_pass_straight_through() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        let init = NcclEvent {
            op: op::COMM_INIT_RANK,
            ..Default::default()
        };
        c.on_nccl(init, &mut out);
        assert_eq!(out, vec![(init, None)]);
    }
}
