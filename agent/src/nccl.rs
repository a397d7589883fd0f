//! NCCL collectives to Fleet: the bounded outbox the event reader fills and the agent
//! drains once per tick. The points and their OTLP request (spec 5.3) are
//! [`ingero_agent_core::nccl`], re-exported here.
//!
//! Points are buffered up to a cap per export; overflow is dropped and counted.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use component::Timestamp;
use parking_lot::Mutex;

use crate::fleet::client::{PushClient, PushKind};
use crate::fleet::payload::Identity;
pub use ingero_agent_core::nccl::{
    NcclPoint, SyncBaselines, nccl_request, op, op_name, sync_wait_fraction,
};

#[derive(Debug, Default)]
struct Shared {
    buf: Mutex<VecDeque<NcclPoint>>,
    dropped: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
}

/// Producer side: the event reader hands points in here. Never blocks.
#[derive(Debug, Clone)]
pub struct NcclSender {
    shared: Arc<Shared>,
    cap: usize,
}

impl NcclSender {
    /// Queue a point; when the buffer is full the point is dropped and counted.
    pub fn send(&self, p: NcclPoint) {
        if !p.exported() {
            return;
        }
        let mut b = self.shared.buf.lock();
        if b.len() >= self.cap {
            drop(b);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        b.push_back(p);
    }
}

/// Consumer side, owned by the agent; drained once per tick.
#[derive(Debug)]
pub struct NcclOutbox {
    shared: Arc<Shared>,
}

impl NcclOutbox {
    /// A bounded outbox holding at most `cap` points between exports.
    pub fn new(cap: usize) -> (NcclOutbox, NcclSender) {
        let shared = Arc::new(Shared::default());
        (
            NcclOutbox {
                shared: shared.clone(),
            },
            NcclSender { shared, cap },
        )
    }

    /// Take everything queued.
    pub fn drain(&self) -> Vec<NcclPoint> {
        self.shared.buf.lock().drain(..).collect()
    }

    /// `(points exported, points dropped)`.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.shared.exported.load(Ordering::Relaxed),
            self.shared.dropped.load(Ordering::Relaxed),
        )
    }

    /// Push what is queued (nothing when empty). A failed push drops the batch (counted).
    pub async fn export(&mut self, push: &PushClient, id: &Identity, now: Timestamp) {
        let points = self.drain();
        self.export_points(push, id, points, now).await;
    }

    /// Count drained points that will never be exported (no Fleet endpoint).
    pub fn discard(&self, points: &[NcclPoint]) {
        self.shared
            .dropped
            .fetch_add(points.len() as u64, Ordering::Relaxed);
    }

    /// Push points drained earlier with [`Self::drain`]. A failed push drops them (counted).
    pub async fn export_points(
        &mut self,
        push: &PushClient,
        id: &Identity,
        points: Vec<NcclPoint>,
        _now: Timestamp,
    ) {
        if points.is_empty() {
            return;
        }
        let r = push.push(PushKind::Nccl, &nccl_request(id, &points)).await;
        let n = points.len() as u64;
        if r.ok() {
            self.shared.exported.fetch_add(n, Ordering::Relaxed);
        } else {
            self.shared.failed.fetch_add(n, Ordering::Relaxed);
            self.shared.dropped.fetch_add(n, Ordering::Relaxed);
            tracing::debug!(
                points = n,
                error = r.error.as_deref().unwrap_or(""),
                "NCCL export failed; batch dropped"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(op: u8, seq: u64) -> NcclPoint {
        NcclPoint {
            time: Timestamp::from_nanos(1_779_185_472_000_000_000),
            op,
            comm_id_hash: 0xabc,
            rank: 1,
            nranks: 4,
            datatype: 7,
            reduce_op: 0,
            peer_rank: 0,
            count: 1024,
            duration_ns: 2_500_000,
            op_seq: seq,
            barrier_wait_ns: None,
        }
    }
    #[test]
    fn outbox_is_bounded_and_counts_drops() {
        let (out, tx) = NcclOutbox::new(2);
        for i in 1..=5 {
            tx.send(p(op::ALL_REDUCE, i));
        }
        tx.send(p(op::COMM_DESTROY, 0));
        assert_eq!(out.stats(), (0, 3));
        let got = out.drain();
        assert_eq!(got.iter().map(|p| p.op_seq).collect::<Vec<_>>(), [1, 2]);
        assert!(out.drain().is_empty());
    }
}
