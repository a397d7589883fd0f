//! Closing a collective instance: the lags against the median entry, the per-rank step
//! statistics, the naming transitions, the residuals for monotonic clock refinement, and
//! the queue of lag records for the next tick.

use std::collections::HashMap;
use std::sync::Arc;

use crate::align::{Instance, TimeBuckets};
use crate::clock::NodeClock;
use crate::lag::{LagScratch, StepLags, against_other_groups, compute_lags};
use crate::metrics::{CollectiveOutcome, Counts, DropReason};
use crate::settings::Settings;
use crate::stats::Step;
use crate::tracker::{CommState, StreamState};

/// One `nccl.collective.peer_lag_ms` value waiting to be emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct LagRecord {
    pub comm: u64,
    pub op: u8,
    pub rank: u32,
    pub nranks: u32,
    /// Set when the instance was aligned exactly by `nccl.op_seq`.
    pub op_seq: Option<i64>,
    pub lag_ms: f64,
    /// The collective's time (median entry, Unix ns) when every entry was wall-clock.
    pub time_ns: Option<u64>,
    pub node: Option<Arc<str>>,
    /// False when at least one entry's time was estimated from a monotonic clock.
    pub wall_clock: bool,
}

/// A rank became named, or stopped being named (logged by the processor at tick).
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub comm: u64,
    pub op: u8,
    pub rank: u32,
    pub named: bool,
    pub median_lag_ms: Option<f64>,
    pub behind: usize,
    pub window: usize,
    pub period: Option<u32>,
}

/// Once every node of an instance is settled, residuals are taken from one instance in this
/// many.
pub const REFINE_SETTLED_EVERY: u64 = 8;

/// Transitions kept between ticks; more are counted, not stored.
pub const MAX_TRANSITIONS: usize = 256;

/// Scratch space and output queue used when an instance is finalised.
#[derive(Debug, Default)]
pub(crate) struct Emitter {
    pub(crate) output: Vec<LagRecord>,
    pub(crate) transitions: Vec<Transition>,
    pub(crate) transitions_dropped: u64,
    scratch: LagScratch,
    step: StepLags,
    times: Vec<i64>,
    /// Lags of monotonic entries, for the offset refinement of their node.
    pub(crate) residuals: Vec<(Arc<str>, u16, f64)>,
    /// Rolling rank windows held by the cluster (capped by `limits.max_rank_series_per_cluster`).
    pub(crate) rank_series: usize,
    /// Instances finalised (for sampling the refinement of settled nodes).
    pub(crate) instances: u64,
    /// A node proposed as the cluster's clock anchor (an instance had no reference entry).
    pub(crate) anchor_request: Option<Arc<str>>,
}

/// Time buckets that look like two halves of one collective split by a clock error larger
/// than the skew tolerance: adjacent keys, disjoint ranks, at least one half under quorum,
/// monotonic entries among them. Each expiring bucket is paired with its open neighbour, or
/// with an expiring neighbour of a larger key (so a pair is counted once). The union is not
/// emitted (which half is right is unknown) but feeds the offset refinement, which is what
/// pulls the halves together.
pub(crate) fn split_halves(
    expired: &[(i64, Instance)],
    buckets: &TimeBuckets,
    s: &Settings,
) -> Vec<Instance> {
    let mut out = Vec::new();
    for (k, inst) in expired {
        let quorum = s.quorum(inst.nranks);
        for nk in [k.saturating_sub(1), k.saturating_add(1)] {
            let partner = match expired.iter().find(|(k2, _)| *k2 == nk) {
                Some((_, i)) if nk > *k => Some(i),
                Some(_) => None,
                None => buckets.get(nk),
            };
            let Some(other) = partner else {
                continue;
            };
            if other.op != inst.op
                || (inst.len() >= quorum && other.len() >= quorum)
                || (inst.all_wall() && other.all_wall())
                || inst.entries.iter().any(|e| other.has(e.rank))
            {
                continue;
            }
            let mut merged = inst.clone();
            for e in &other.entries {
                merged.push(*e);
            }
            out.push(merged);
        }
    }
    out
}

/// Median of `v` (reorders it); the lower middle for an even count, 0 when empty.
fn median_i64(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let mid = (v.len() - 1) / 2;
    *v.select_nth_unstable(mid).1
}

/// True when every entry of the instance has a monotonic time from the same node.
fn single_clock(comm: &CommState, inst: &Instance) -> bool {
    let mut first: Option<Arc<str>> = None;
    for e in &inst.entries {
        if e.wall {
            return false;
        }
        let Some(n) = comm.node(e.rank) else {
            return false;
        };
        match &first {
            None => first = Some(n),
            Some(f) if *f == n => {}
            Some(_) => return false,
        }
    }
    true
}

impl Emitter {
    /// An instance whose grace period ran out: emit it if it has a quorum.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn close_expired(
        &mut self,
        comm_id: u64,
        comm: &mut CommState,
        inst: Instance,
        seq: Option<i64>,
        nodes: &HashMap<Arc<str>, NodeClock>,
        s: &Settings,
        counts: &mut Counts,
    ) {
        if inst.is_complete() {
            self.finalize(
                comm_id,
                comm,
                inst,
                seq,
                CollectiveOutcome::Complete,
                nodes,
                s,
                counts,
            );
        } else if inst.len() >= s.quorum(inst.nranks) {
            self.finalize(
                comm_id,
                comm,
                inst,
                seq,
                CollectiveOutcome::Partial,
                nodes,
                s,
                counts,
            );
        } else {
            counts.collective(CollectiveOutcome::UnderQuorum);
            counts.drop_points(DropReason::UnderQuorum, inst.len() as u64);
        }
    }

    /// Lags of the instance's monotonic entries against the other nodes' median, for the
    /// offset refinement of their nodes.
    pub(crate) fn refinement_residuals(&mut self, comm: &CommState, inst: &Instance, q: f64) {
        let times: Vec<i64> = inst.entries.iter().map(|e| e.t).collect();
        let nodes: Vec<Option<Arc<str>>> = inst.entries.iter().map(|e| comm.node(e.rank)).collect();
        // One group index per distinct node; entries without a node are each their own.
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let groups: Vec<u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| match n {
                Some(n) => {
                    let next = ids.len() as u32;
                    *ids.entry(n.as_ref()).or_insert(next)
                }
                None => u32::MAX - i as u32,
            })
            .collect();
        let mut out = Vec::new();
        let entries = &inst.entries;
        let has_reference = entries.iter().any(|e| !e.calibrating);
        if !has_reference {
            // Nothing to measure against: propose the node with the most entries as anchor.
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for n in nodes.iter().flatten() {
                *counts.entry(n.as_ref()).or_default() += 1;
            }
            let best = counts
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
                .map(|(n, _)| n);
            if self.anchor_request.is_none()
                && let Some(b) = best
            {
                self.anchor_request = nodes.iter().flatten().find(|n| n.as_ref() == b).cloned();
            }
            return;
        }
        against_other_groups(
            &times,
            &groups,
            q,
            |i| entries.get(i).is_some_and(|e| !e.wall),
            |j| entries.get(j).is_some_and(|e| !e.calibrating),
            &mut out,
        );
        for (i, lag) in out {
            if let (Some(Some(node)), Some(e)) = (nodes.get(i), entries.get(i)) {
                self.residuals.push((node.clone(), e.clock_gen, lag));
            }
        }
    }

    /// Compute the lags of a closed instance and queue one record per rank.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finalize(
        &mut self,
        comm_id: u64,
        comm: &mut CommState,
        inst: Instance,
        seq: Option<i64>,
        outcome: CollectiveOutcome,
        nodes: &HashMap<Arc<str>, NodeClock>,
        s: &Settings,
        counts: &mut Counts,
    ) {
        let mut inst = inst;
        counts.collective(outcome);
        // A monotonic entry aligned before its node's offset last jumped is not trusted:
        // treat it like a calibrating one.
        for e in inst
            .entries
            .iter_mut()
            .filter(|e| !e.wall && !e.calibrating)
        {
            let current = comm
                .node(e.rank)
                .and_then(|n| nodes.get(&n))
                .map(NodeClock::epoch);
            if current != Some(e.clock_epoch) {
                e.calibrating = true;
            }
        }
        // Residuals for the offset refinement: from every instance while some node in it is
        // calibrating; once all are settled, from one instance in REFINE_SETTLED_EVERY (that
        // only has to follow slow drift).
        self.instances = self.instances.wrapping_add(1);
        if let Some(q) = s.mono_refine_quantile
            && !inst.all_wall()
            && (inst.entries.iter().any(|e| e.calibrating)
                || self.instances.is_multiple_of(REFINE_SETTLED_EVERY))
        {
            self.refinement_residuals(comm, &inst, q);
        }
        // Entries of a node whose offset is still calibrating take no part in the lags
        // (their times are not trustworthy yet), unless the whole instance comes from that
        // one node's clock (offsets cancel out). What remains must still be a quorum.
        // The step key (`op_seq`, or the median entry time over *all* entries) is fixed
        // before any entry is held back, so the stream's step numbering does not depend on
        // which clocks were trusted.
        self.times.clear();
        self.times.extend(inst.entries.iter().map(|e| e.t));
        let key = match seq {
            Some(k) => k,
            None => median_i64(&mut self.times),
        };
        if let Some(st) = comm.stream_mut(inst.op) {
            st.steps += 1;
            st.recent.push(key);
        }
        if inst.entries.iter().any(|e| e.calibrating) && !single_clock(comm, &inst) {
            let before = inst.entries.len();
            inst.entries.retain(|e| !e.calibrating);
            let held = before - inst.entries.len();
            if inst.entries.len() < s.quorum(inst.nranks) {
                counts.drop_points(DropReason::ClockWarmup, before as u64);
                return;
            }
            counts.drop_points(DropReason::ClockWarmup, held as u64);
        }
        self.times.clear();
        self.times.extend(inst.entries.iter().map(|e| e.t));
        if compute_lags(&self.times, s.lag, &mut self.scratch, &mut self.step).is_none() {
            return;
        }
        let wall = inst.all_wall();
        let time_ns = if wall {
            u64::try_from(self.step.median_ns).ok()
        } else {
            None
        };
        let params = s.rank_params();
        if let Some(st) = comm.stream_mut(inst.op) {
            let StreamState {
                ranks,
                recent,
                named,
                ..
            } = st;
            for (e, &lag_ms) in inst.entries.iter().zip(&self.step.lags_ms) {
                let r = e.rank as usize;
                if ranks.len() <= r {
                    ranks.resize_with(r + 1, || None);
                }
                let Some(slot) = ranks.get_mut(r) else {
                    continue;
                };
                if slot.is_none() {
                    if self.rank_series >= s.max_rank_series {
                        counts.drop_points(DropReason::CapRankSeries, 1);
                        continue;
                    }
                    self.rank_series += 1;
                }
                let w = slot.get_or_insert_with(Box::default);
                let was_named = w.is_named(&params);
                let step = Step {
                    key,
                    lag_ms: lag_ms as f32,
                    behind: self.step.is_behind(lag_ms),
                };
                w.record(step, &params, &mut |k| recent.ordinal(k));
                let is_named = w.is_named(&params);
                if was_named != is_named {
                    if is_named {
                        named.push(e.rank);
                    } else {
                        named.retain(|x| *x != e.rank);
                    }
                    if self.transitions.len() < MAX_TRANSITIONS {
                        self.transitions.push(Transition {
                            comm: comm_id,
                            op: inst.op,
                            rank: e.rank,
                            named: is_named,
                            median_lag_ms: w.median_behind_lag_ms(),
                            behind: w.behind_count(),
                            window: w.len(),
                            period: w.period(),
                        });
                    } else {
                        self.transitions_dropped += 1;
                    }
                }
            }
        }
        for (e, &lag_ms) in inst.entries.iter().zip(&self.step.lags_ms) {
            if self.output.len() >= s.max_pending_output {
                counts.drop_points(DropReason::CapOutput, 1);
                continue;
            }
            counts.lag_points += 1;
            self.output.push(LagRecord {
                comm: comm_id,
                op: inst.op,
                rank: e.rank,
                nranks: inst.nranks,
                op_seq: seq,
                lag_ms,
                time_ns,
                node: comm.node(e.rank),
                wall_clock: wall,
            });
        }
    }
}
