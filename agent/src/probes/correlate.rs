//! `nccl.collective.barrier_wait_ms`: how long the rank's host then blocked in the first
//! synchronize of the same process that began within 1 s after the collective returned: a
//! stream synchronize on any stream, or a device / context synchronize. Fast ranks wait long
//! for the slow one; the straggler waits little. Both timestamps are the kernel's monotonic
//! clock (the Go agent compared a monotonic with a wall-clock time, spec 5.3).
//!
//! Why any stream: the host rarely synchronizes the collective's own stream. PyTorch runs
//! NCCL on its own streams and makes the compute stream wait for the collective on the GPU
//! (an event, no host call); the host then blocks at the next `.item()` (a synchronize of
//! the compute stream) or `torch.cuda.synchronize()` (the device), which is where a fast
//! rank waits for the slow one. A synchronize of an unrelated stream in between (a side
//! stream that does not wait for the collective) is taken as well and gives a short wait:
//! the agent does not trace the GPU-side dependencies (`cudaStreamWaitEvent`).
//!
//! One synchronize is the barrier of one collective: when several collectives precede it
//! (DDP's gradient buckets), the earliest takes it and the others are released without a
//! value, so the wait is counted once. A synchronize seen at both layers (the runtime's
//! calling the driver's on the same thread) is one synchronize: the outer call is kept.
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
/// How far back a new synchronize is compared with earlier ones of its thread for nesting.
const NESTING_LOOKBACK: usize = 8;

/// One host synchronize as the probes recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncCall {
    pub pid: u32,
    pub tid: u32,
    pub start: u64,
    pub duration: u64,
}

impl SyncCall {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.duration)
    }

    /// One call inside the other on the same thread (the runtime's synchronize and the
    /// driver's it called).
    fn nests_with(&self, other: &SyncCall) -> bool {
        self.pid == other.pid
            && self.tid == other.tid
            && ((self.start <= other.start && other.end() <= self.end())
                || (other.start <= self.start && self.end() <= other.end()))
    }
}

/// A remembered synchronize; `used` once it gave a collective its barrier wait (kept, so
/// that the outer record of the same call, if it arrives later, merges into it instead of
/// serving a second collective).
#[derive(Debug, Clone, Copy)]
struct Held {
    call: SyncCall,
    used: bool,
}

#[derive(Debug, Default)]
pub struct BarrierCorrelator {
    pending: VecDeque<NcclEvent>,
    syncs: VecDeque<Held>,
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

    /// Remember a synchronize. One nested in another of the same thread merges into the
    /// outer one (records arrive in the order the calls returned: the inner one first).
    pub fn on_sync(&mut self, s: SyncCall) {
        let recent = self.syncs.len().saturating_sub(NESTING_LOOKBACK);
        if let Some(i) = (recent..self.syncs.len())
            .rev()
            .find(|&i| self.syncs[i].call.nests_with(&s))
        {
            let held = &mut self.syncs[i].call;
            if s.duration > held.duration {
                *held = s;
            }
            return;
        }
        if self.syncs.len() >= MAX_SYNCS {
            self.syncs.pop_front();
        }
        self.syncs.push_back(Held {
            call: s,
            used: false,
        });
    }

    /// Release matched collectives and those that waited long enough, at monotonic `now`.
    pub fn release(&mut self, now: u64, out: &mut Vec<(NcclEvent, Option<u64>)>) {
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(e) = self.pending.pop_front() {
            let end = e.timestamp_ns.saturating_add(e.duration_ns);
            // The first synchronize after the collective; already the barrier of an earlier
            // collective, it gives this one none (the wait is counted once).
            let first = self
                .syncs
                .iter_mut()
                .filter(|h| {
                    let s = &h.call;
                    s.pid == e.pid && s.start >= end && s.start - end <= MATCH_WINDOW_NS
                })
                .min_by_key(|h| h.call.start);
            if let Some(h) = first {
                let wait = (!h.used).then_some(h.call.duration);
                h.used = true;
                out.push((e, wait));
            } else if now.saturating_sub(e.timestamp_ns) > HOLD_NS {
                out.push((e, None));
            } else {
                keep.push_back(e);
            }
        }
        self.pending = keep;
        // Synchronizes older than any collective could still match are forgotten.
        let horizon = now.saturating_sub(HOLD_NS + MATCH_WINDOW_NS);
        while self.syncs.front().is_some_and(|h| h.call.start < horizon) {
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

    fn sync(pid: u32, tid: u32, start: u64, duration: u64) -> SyncCall {
        SyncCall {
            pid,
            tid,
            start,
            duration,
        }
    }

    #[test]
    fn the_first_sync_of_the_process_after_the_collective_gives_the_barrier_wait() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, MS), &mut out);
        c.on_nccl(coll(2, 7, 1000 * MS, MS), &mut out);
        // Recorded in the order the calls returned; the earliest start wins, on any stream,
        // on any thread of the process (DDP enqueues from the autograd thread).
        c.on_sync(sync(1, 11, 1003 * MS, 80 * MS));
        c.on_sync(sync(1, 12, 1002 * MS, 50 * MS));
        c.release(1100 * MS, &mut out);
        assert_eq!(out, vec![(coll(1, 7, 1000 * MS, MS), Some(50 * MS))]);
        assert_eq!(c.pending(), 1, "pid 2 keeps waiting");
        c.release(1000 * MS + HOLD_NS + 1, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], (coll(2, 7, 1000 * MS, MS), None));
    }

    #[test]
    fn one_sync_after_several_collectives_is_counted_once() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        // DDP: three gradient buckets reduced, then one `.item()`.
        for k in 0..3 {
            c.on_nccl(coll(1, 7, (1000 + k) * MS, MS / 10), &mut out);
        }
        c.on_sync(sync(1, 1, 1010 * MS, 40 * MS));
        c.release(1060 * MS, &mut out);
        let waits: Vec<Option<u64>> = out.iter().map(|(_, w)| *w).collect();
        assert_eq!(waits, vec![Some(40 * MS), None, None]);
        // The next step's synchronize is the next step's collective's, not a leftover's.
        c.on_nccl(coll(1, 7, 1070 * MS, MS / 10), &mut out);
        c.on_sync(sync(1, 1, 1080 * MS, 30 * MS));
        c.release(1120 * MS, &mut out);
        assert_eq!(out[3], (coll(1, 7, 1070 * MS, MS / 10), Some(30 * MS)));
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn a_sync_seen_at_both_layers_is_one_sync() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, MS), &mut out);
        c.on_nccl(coll(1, 7, 1001 * MS, MS), &mut out);
        // The driver's synchronize returns first, inside the runtime's that called it.
        c.on_sync(sync(1, 5, 1010 * MS + 2_000, 60 * MS));
        c.on_sync(sync(1, 5, 1010 * MS, 60 * MS + 5_000));
        c.release(1100 * MS, &mut out);
        assert_eq!(
            out.iter().map(|(_, w)| *w).collect::<Vec<_>>(),
            vec![Some(60 * MS + 5_000), None],
            "the outer call, once"
        );
        // The outer record arriving after the inner one was taken merges into it too.
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, MS), &mut out);
        c.on_sync(sync(1, 5, 1010 * MS + 2_000, 60 * MS));
        c.release(1080 * MS, &mut out);
        c.on_nccl(coll(1, 7, 1005 * MS, MS), &mut out);
        c.on_sync(sync(1, 5, 1010 * MS, 60 * MS + 5_000));
        c.release(1090 * MS, &mut out);
        assert_eq!(
            out.iter().map(|(_, w)| *w).collect::<Vec<_>>(),
            vec![Some(60 * MS), None]
        );
        // Not nested: another thread, or one after the other.
        let a = sync(1, 5, 1000 * MS, 10 * MS);
        assert!(!a.nests_with(&sync(1, 6, 1001 * MS, MS)));
        assert!(!a.nests_with(&sync(1, 5, 1011 * MS, MS)));
        assert!(!a.nests_with(&sync(2, 5, 1001 * MS, MS)));
        assert!(a.nests_with(&sync(1, 5, 1001 * MS, MS)));
    }

    #[test]
    fn a_sync_before_the_collective_returned_or_too_late_does_not_match() {
        let mut c = BarrierCorrelator::default();
        let mut out = Vec::new();
        c.on_nccl(coll(1, 7, 1000 * MS, 10 * MS), &mut out);
        c.on_sync(sync(1, 1, 1005 * MS, 1)); // during the call
        c.on_sync(sync(1, 1, 1010 * MS + MATCH_WINDOW_NS + 1, 1)); // too late
        c.on_sync(sync(2, 1, 1011 * MS, 1)); // another process
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
