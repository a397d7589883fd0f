//! NCCL collectives to Fleet (spec 5.3, plus two additions).
//!
//! Each traced collective becomes one point of `nccl.collective.duration_ms` (double, ms) and
//! one of `nccl.collective.bytes` (int, element count, as the Go agent sends), with the
//! spec's attributes. Two things the Go agent lacks:
//! - `timeUnixNano` is wall-clock time (the kernel's monotonic entry time plus the
//!   monotonic-to-realtime offset), so points from different nodes are comparable;
//! - `nccl.op_seq` (int): the 1-based position of this collective among the collectives this
//!   rank issued on the communicator (for Send/Recv: among its sends, or receives, to that
//!   peer), counted in the kernel at call entry, so ring-buffer drops cannot shift it. Ranks
//!   of one communicator call collectives in the same order, so equal `(comm_id_hash,
//!   op_seq)` means the same operation on every rank. Absent when the agent did not see
//!   the communicator's init.
//!
//! `nccl.peer_rank` is sent for every Send/Recv, peer 0 included (the Go agent drops 0).

use component::Timestamp;
use component::otlp::{ExportMetricsServiceRequest, KeyValue};
use ingero_wire::{attr, metric};

use crate::payload::{self, Identity, double_point, gauge, int_point, kv_int, kv_str};

/// NCCL operation codes in events (spec 5.2).
pub mod op {
    pub const COMM_INIT_RANK: u8 = 1;
    pub const COMM_DESTROY: u8 = 2;
    pub const ALL_REDUCE: u8 = 3;
    pub const ALL_GATHER: u8 = 4;
    pub const REDUCE_SCATTER: u8 = 5;
    pub const BCAST: u8 = 6;
    pub const SEND: u8 = 7;
    pub const RECV: u8 = 8;
    pub const COMM_INIT_ALL: u8 = 9;
}

/// `nccl.op_type` value of an op code.
pub fn op_name(code: u8) -> String {
    match code {
        op::COMM_INIT_RANK => "ncclCommInitRank".into(),
        op::COMM_DESTROY => "ncclCommDestroy".into(),
        op::ALL_REDUCE => "ncclAllReduce".into(),
        op::ALL_GATHER => "ncclAllGather".into(),
        op::REDUCE_SCATTER => "ncclReduceScatter".into(),
        op::BCAST => "ncclBcast".into(),
        op::SEND => "ncclSend".into(),
        op::RECV => "ncclRecv".into(),
        op::COMM_INIT_ALL => "ncclCommInitAll".into(),
        n => format!("nccl_op_{n}"),
    }
}

/// One collective as exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclPoint {
    /// Wall-clock entry time.
    pub time: Timestamp,
    pub op: u8,
    pub comm_id_hash: u64,
    pub rank: u32,
    pub nranks: u32,
    pub datatype: u32,
    pub reduce_op: u32,
    pub peer_rank: u32,
    /// Element count.
    pub count: u64,
    pub duration_ns: u64,
    /// 0: unknown (communicator init not seen).
    pub op_seq: u64,
    /// Time blocked in the stream synchronize that followed, when observed.
    pub barrier_wait_ns: Option<u64>,
}

impl NcclPoint {
    /// Init/destroy are lifecycle events, not collectives: not exported.
    pub fn exported(&self) -> bool {
        !matches!(self.op, op::COMM_INIT_RANK | op::COMM_DESTROY)
    }

    fn attributes(&self) -> Vec<KeyValue> {
        let mut a = vec![
            kv_str(attr::NCCL_OP_TYPE, &op_name(self.op)),
            kv_str(
                attr::NCCL_COMM_ID_HASH,
                &format!("{:016x}", self.comm_id_hash),
            ),
            kv_int(attr::NCCL_RANK, i64::from(self.rank)),
            kv_int(attr::NCCL_NRANKS, i64::from(self.nranks)),
            kv_int(attr::NCCL_DATATYPE, i64::from(self.datatype)),
            kv_int(attr::NCCL_REDUCE_OP, i64::from(self.reduce_op)),
        ];
        if matches!(self.op, op::SEND | op::RECV) {
            a.push(kv_int(attr::NCCL_PEER_RANK, i64::from(self.peer_rank)));
        }
        if self.op_seq > 0 {
            a.push(kv_int(
                attr::NCCL_OP_SEQ,
                i64::try_from(self.op_seq).unwrap_or(i64::MAX),
            ));
        }
        a
    }
}

/// The OTLP request for a batch of points (no provider attribute, scope `ingero.nccl`).
pub fn nccl_request(id: &Identity, points: &[NcclPoint]) -> ExportMetricsServiceRequest {
    let mut durations = Vec::with_capacity(points.len());
    let mut bytes = Vec::with_capacity(points.len());
    let mut barrier = Vec::new();
    for p in points.iter().filter(|p| p.exported()) {
        let attrs = p.attributes();
        durations.push(double_point(
            attrs.clone(),
            p.time,
            p.duration_ns as f64 / 1e6,
        ));
        if let Some(w) = p.barrier_wait_ns {
            barrier.push(double_point(attrs.clone(), p.time, w as f64 / 1e6));
        }
        bytes.push(int_point(
            attrs,
            p.time,
            i64::try_from(p.count).unwrap_or(i64::MAX),
        ));
    }
    let mut metrics = vec![
        gauge(metric::NCCL_DURATION_MS, "ms", durations),
        gauge(metric::NCCL_BYTES, "By", bytes),
    ];
    if !barrier.is_empty() {
        metrics.push(gauge(metric::NCCL_BARRIER_WAIT_MS, "ms", barrier));
    }
    payload::request(
        payload::resource_attrs(id, None),
        (payload::NCCL_SCOPE_NAME, env!("CARGO_PKG_VERSION")),
        metrics,
    )
}

/// Fraction of `elapsed` this node's ranks spent blocked at NCCL barriers, from the points
/// drained over that interval: the sum of `barrier_wait_ns` divided by `elapsed` times the
/// number of ranks seen (distinct `rank` values among the points of the widest
/// communicator). 0 without points, without waits, or with no elapsed time; at most 1.
pub fn sync_wait_fraction(points: &[NcclPoint], elapsed: std::time::Duration) -> f64 {
    let span = elapsed.as_nanos() as f64;
    let Some(widest) = points.iter().map(|p| p.nranks).max() else {
        return 0.0;
    };
    if span <= 0.0 {
        return 0.0;
    }
    let mut ranks: Vec<u32> = points
        .iter()
        .filter(|p| p.nranks == widest)
        .map(|p| p.rank)
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    let wait: u64 = points.iter().filter_map(|p| p.barrier_wait_ns).sum();
    (wait as f64 / (span * ranks.len().max(1) as f64)).clamp(0.0, 1.0)
}

/// Time constant with which a rank's baseline synchronize follows shorter ones.
pub const SYNC_BASELINE_DOWN: std::time::Duration = std::time::Duration::from_secs(1);
/// Time constant with which it follows longer ones: a slowdown elsewhere that lasts minutes
/// stays a wait (the throughput reference drifts on the same scale).
pub const SYNC_BASELINE_UP: std::time::Duration = std::time::Duration::from_secs(600);
/// Most ranks (communicator, rank) tracked; beyond, the oldest is forgotten.
pub const MAX_SYNC_BASELINES: usize = 256;

/// The part of each barrier wait that is waiting for peers.
///
/// The synchronize after a collective also waits for the rank's own GPU work: in a
/// GPU-bound loop the host spends most of each step there (PyTorch's `.item()`), so the raw
/// `barrier_wait_ns` is a large share of every healthy interval, and the throughput
/// correction `1 / (1 - share)` would amplify its noise (or hit its cap and stop
/// correcting). What a slow peer adds is the excess over what the same rank's synchronize
/// takes when nobody is late. Per (communicator, rank) this tracks that baseline: a low
/// quantile of the waits, following shorter ones within about a second and longer ones over
/// ten minutes, and replaces each wait with its excess over the baseline before the
/// sample. In a steady job the excess is about 0; when a peer stalls `s` per step, the
/// waiting ranks' excess is `s` per step and `rate / (1 - share)` gives back their rate
/// exactly, while the slow rank, whose synchronize does not grow, gets no correction.
#[derive(Debug, Default)]
pub struct SyncBaselines {
    ranks: Vec<SyncBaseline>,
}

#[derive(Debug, Clone, Copy)]
struct SyncBaseline {
    comm: u64,
    rank: u32,
    base_ns: f64,
    last: Timestamp,
}

impl SyncBaselines {
    /// The point with `barrier_wait_ns` replaced by its excess over the rank's baseline
    /// (points without a wait unchanged); learns from the wait.
    pub fn excess(&mut self, mut p: NcclPoint) -> NcclPoint {
        let Some(wait) = p.barrier_wait_ns else {
            return p;
        };
        let w = wait as f64;
        let i = match self
            .ranks
            .iter()
            .position(|b| b.comm == p.comm_id_hash && b.rank == p.rank)
        {
            Some(i) => i,
            None => {
                if self.ranks.len() >= MAX_SYNC_BASELINES {
                    let oldest = (0..self.ranks.len())
                        .min_by_key(|&i| self.ranks[i].last)
                        .unwrap_or(0);
                    self.ranks.swap_remove(oldest);
                }
                self.ranks.push(SyncBaseline {
                    comm: p.comm_id_hash,
                    rank: p.rank,
                    base_ns: w,
                    last: p.time,
                });
                self.ranks.len() - 1
            }
        };
        let b = &mut self.ranks[i];
        let excess = (w - b.base_ns).max(0.0);
        let dt = p.time.since(b.last).as_secs_f64();
        let tau = if w < b.base_ns {
            SYNC_BASELINE_DOWN
        } else {
            SYNC_BASELINE_UP
        };
        b.base_ns += (w - b.base_ns) * (dt / tau.as_secs_f64()).min(1.0);
        b.last = b.last.max(p.time);
        p.barrier_wait_ns = Some(excess as u64);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{get_i64, get_str, number_points, point_value};

    #[test]
    fn sync_wait_is_the_share_of_the_interval_spent_at_barriers() {
        use std::time::Duration;
        let at = |rank: u32, nranks: u32, wait_ms: Option<u64>| NcclPoint {
            rank,
            nranks,
            barrier_wait_ns: wait_ms.map(|m| m * 1_000_000),
            ..p(op::ALL_REDUCE, 1)
        };
        let sec = Duration::from_secs(1);
        assert_eq!(sync_wait_fraction(&[], sec), 0.0);
        // One rank: 250 ms of waits in 1 s (one point without an observed wait).
        let one = [at(0, 8, Some(100)), at(0, 8, Some(150)), at(0, 8, None)];
        assert!((sync_wait_fraction(&one, sec) - 0.25).abs() < 1e-12);
        // Two ranks of the 8-wide communicator on this node: averaged. A 2-wide
        // sub-communicator's rank numbers do not add ranks.
        let two = [at(0, 8, Some(300)), at(1, 8, Some(100)), at(1, 2, Some(0))];
        assert!((sync_wait_fraction(&two, sec) - 0.2).abs() < 1e-12);
        // Never above 1; nothing over no time.
        assert_eq!(sync_wait_fraction(&[at(0, 2, Some(5_000))], sec), 1.0);
        assert_eq!(sync_wait_fraction(&one, Duration::ZERO), 0.0);
    }
    /// A rank's synchronizes every 2 ms from `t0_ms`, each `wait_ms`; the excesses.
    fn waits(
        b: &mut SyncBaselines,
        rank: u32,
        t0_ms: u64,
        n: u64,
        wait_ms: impl Fn(u64) -> f64,
    ) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let pt = NcclPoint {
                    time: Timestamp::from_nanos((t0_ms + 2 * i) * 1_000_000),
                    rank,
                    barrier_wait_ns: Some((wait_ms(i) * 1e6) as u64),
                    ..p(op::ALL_REDUCE, i + 1)
                };
                b.excess(pt).barrier_wait_ns.unwrap() as f64 / 1e6
            })
            .collect()
    }

    #[test]
    fn the_excess_wait_is_what_a_late_peer_adds_to_the_synchronize() {
        let mut b = SyncBaselines::default();
        // Healthy: a 1.8-2.2 ms synchronize (own GPU work) every step for 10 s.
        let jitter = |i: u64| 1.8 + 0.4 * ((i * 7919) % 100) as f64 / 100.0;
        let healthy = waits(&mut b, 0, 0, 5000, jitter);
        let late: Vec<f64> = healthy[2500..].to_vec();
        let mean = late.iter().sum::<f64>() / late.len() as f64;
        assert!(
            mean < 0.3,
            "healthy excess {mean} ms of a ~2 ms synchronize"
        );
        // A peer stalls 1 ms per step for 5 minutes: the excess stays about 1 ms.
        let stalled = waits(&mut b, 0, 10_000, 150_000, |i| jitter(i) + 1.0);
        let first = stalled[..500].iter().sum::<f64>() / 500.0;
        let last = stalled[149_500..].iter().sum::<f64>() / 500.0;
        assert!(
            (first - 1.0).abs() < 0.35,
            "first second of the stall: {first}"
        );
        assert!(
            last > 0.5,
            "after 5 minutes the wait is still most of the stall: {last}"
        );
        // Another rank is tracked on its own: its first wait is its baseline.
        assert_eq!(waits(&mut b, 1, 310_000, 1, |_| 9.0), vec![0.0]);
    }

    #[test]
    fn one_short_synchronize_does_not_reset_the_baseline() {
        let mut b = SyncBaselines::default();
        waits(&mut b, 0, 0, 1000, |_| 2.0);
        // One unrelated 10 µs synchronize, then the usual ones.
        let after = waits(&mut b, 0, 2000, 100, |i| if i == 0 { 0.01 } else { 2.0 });
        assert!(
            after[1..].iter().all(|&x| x < 0.05),
            "the baseline barely moved: {after:?}"
        );
        // Points without a wait pass unchanged.
        let none = p(op::ALL_REDUCE, 1);
        assert_eq!(b.excess(none), none);
    }

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
    fn points_carry_the_spec_attributes_and_op_seq() {
        let id = Identity {
            node_id: "n".into(),
            cluster_id: "c".into(),
            ..Default::default()
        };
        let mut recv = p(op::RECV, 3);
        recv.barrier_wait_ns = Some(1_000_000);
        let req = nccl_request(&id, &[p(op::ALL_REDUCE, 7), p(op::COMM_INIT_RANK, 0), recv]);
        let m = &req.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(
            m.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            [
                metric::NCCL_DURATION_MS,
                metric::NCCL_BYTES,
                metric::NCCL_BARRIER_WAIT_MS
            ]
        );
        let d = number_points(&m[0]);
        assert_eq!(d.len(), 2, "init is not exported");
        assert_eq!(point_value(&d[0]), Some(2.5));
        assert_eq!(d[0].time_unix_nano, 1_779_185_472_000_000_000);
        let a = &d[0].attributes;
        assert_eq!(get_str(a, attr::NCCL_OP_TYPE), Some("ncclAllReduce"));
        assert_eq!(
            get_str(a, attr::NCCL_COMM_ID_HASH),
            Some("0000000000000abc")
        );
        assert_eq!(get_i64(a, attr::NCCL_RANK), Some(1));
        assert_eq!(get_i64(a, attr::NCCL_NRANKS), Some(4));
        assert_eq!(get_i64(a, attr::NCCL_DATATYPE), Some(7));
        assert_eq!(get_i64(a, attr::NCCL_OP_SEQ), Some(7));
        assert_eq!(
            get_i64(a, attr::NCCL_PEER_RANK),
            None,
            "collectives have no peer"
        );
        let r = &d[1].attributes;
        assert_eq!(
            get_i64(r, attr::NCCL_PEER_RANK),
            Some(0),
            "peer 0 is kept for Send/Recv"
        );
        assert_eq!(point_value(&number_points(&m[1])[0]), Some(1024.0));
        assert_eq!(point_value(&number_points(&m[2])[0]), Some(1.0));
        let no_seq = nccl_request(&id, &[p(op::ALL_GATHER, 0)]);
        let a =
            &number_points(&no_seq.resource_metrics[0].scope_metrics[0].metrics[0])[0].attributes;
        assert_eq!(get_i64(a, attr::NCCL_OP_SEQ), None);
    }
    #[test]
    fn op_names() {
        assert_eq!(op_name(op::REDUCE_SCATTER), "ncclReduceScatter");
        assert_eq!(op_name(op::COMM_INIT_ALL), "ncclCommInitAll");
        assert_eq!(op_name(42), "nccl_op_42");
    }
}
