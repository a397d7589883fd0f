//! NCCL collectives of one communicator: one all-reduce per step over `ranks` nodes (rank
//! `r` on the `r`-th node of the cohort). Each rank enters at the step's time plus a
//! Gaussian jitter, plus its lag on the steps it is late on; its duration is the time it
//! then waits for the last rank plus the transfer itself. The points are the agent's
//! (`ingero_agent_core::nccl::NcclPoint`: wall-clock entry time, `op_seq`), queued on each
//! rank's agent and exported with its next push, as the agent does.

use std::time::Duration;

use component::Timestamp;
use ingero_agent_core::nccl::{NcclPoint, op};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

use crate::scenario::{LateRank, Nccl};

/// `nccl.comm_id_hash` of the simulated communicator.
pub const COMM_ID_HASH: u64 = 0x5eed_0000_c0ff_ee01;
/// Time the all-reduce itself takes once every rank is in.
const TRANSFER: Duration = Duration::from_millis(12);
/// Elements per all-reduce (a 64 MiB bf16 gradient bucket).
const COUNT: u64 = 32 << 20;
/// `ncclBfloat16`.
const DATATYPE_BF16: u32 = 9;

#[derive(Debug)]
pub struct Communicator {
    ranks: u32,
    /// Global node index of rank 0.
    first_node: usize,
    step: Duration,
    jitter: Option<Normal<f64>>,
    late: Vec<LateRank>,
    next_step: u64,
    rng: StdRng,
}

impl Communicator {
    pub fn new(cfg: &Nccl, first_node: usize, seed: u64) -> Self {
        Communicator {
            ranks: cfg.ranks,
            first_node,
            step: cfg.step,
            jitter: (cfg.jitter_ms > 0.0)
                .then(|| Normal::new(0.0, cfg.jitter_ms).ok())
                .flatten(),
            late: cfg.late.clone(),
            next_step: 0,
            rng: StdRng::seed_from_u64(seed ^ COMM_ID_HASH),
        }
    }

    /// The lag (ms) injected on `rank` at step `k` (1-based), starting at `t`.
    pub fn injected_lag(&self, rank: u32, k: u64, t: Duration) -> f64 {
        self.late
            .iter()
            .filter(|l| l.rank == rank && t >= l.onset && k.is_multiple_of(u64::from(l.every)))
            .map(|l| l.lag_ms)
            .fold(0.0, f64::max)
    }

    /// Every step that starts at or before `t` and was not produced yet: `(node, point)`
    /// for each rank whose node `up` says is running. `t0` is the wall-clock time of
    /// simulated time zero.
    pub fn steps_until(
        &mut self,
        t: Duration,
        t0: Timestamp,
        up: impl Fn(usize) -> bool,
    ) -> Vec<(usize, NcclPoint)> {
        let mut out = Vec::new();
        loop {
            let start = self.step * u32::try_from(self.next_step).unwrap_or(u32::MAX);
            if start > t {
                break;
            }
            self.next_step += 1;
            let k = self.next_step;
            let entries: Vec<f64> = (0..self.ranks)
                .map(|r| {
                    let j = self.jitter.map_or(0.0, |n| n.sample(&mut self.rng));
                    // Entries never precede the step (a rank cannot start early).
                    j.abs() + self.injected_lag(r, k, start)
                })
                .collect();
            let last = entries.iter().copied().fold(0.0, f64::max);
            for (r, &e) in (0..self.ranks).zip(&entries) {
                let node = self.first_node + r as usize;
                if !up(node) {
                    continue;
                }
                let entry = t0.saturating_add(start + Duration::from_secs_f64(e / 1e3));
                let wait = Duration::from_secs_f64((last - e) / 1e3);
                out.push((
                    node,
                    NcclPoint {
                        time: entry,
                        op: op::ALL_REDUCE,
                        comm_id_hash: COMM_ID_HASH,
                        rank: r,
                        nranks: self.ranks,
                        datatype: DATATYPE_BF16,
                        reduce_op: 0,
                        peer_rank: 0,
                        count: COUNT,
                        duration_ns: u64::try_from((wait + TRANSFER).as_nanos())
                            .unwrap_or(u64::MAX),
                        op_seq: k,
                        barrier_wait_ns: None,
                    },
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_periodic_late_rank_enters_late_every_nth_step_only() {
        let cfg = Nccl {
            cohort: None,
            ranks: 4,
            step: Duration::from_secs(1),
            jitter_ms: 0.0,
            late: vec![LateRank {
                rank: 2,
                lag_ms: 290.0,
                every: 14,
                onset: Duration::ZERO,
            }],
        };
        let mut c = Communicator::new(&cfg, 10, 1);
        let t0 = Timestamp::from_secs(1_800_000_000);
        let pts = c.steps_until(Duration::from_secs(27), t0, |_| true);
        assert_eq!(pts.len(), 28 * 4);
        for (node, p) in &pts {
            assert_eq!(*node, 10 + p.rank as usize);
            let start = t0.saturating_add(Duration::from_secs(p.op_seq - 1));
            let lag = p.time.since(start);
            if p.rank == 2 && p.op_seq % 14 == 0 {
                assert_eq!(lag, Duration::from_millis(290));
            } else {
                assert_eq!(lag, Duration::ZERO);
            }
        }
        // Nothing twice.
        assert!(
            c.steps_until(Duration::from_secs(27), t0, |_| true)
                .is_empty()
        );
    }
}
