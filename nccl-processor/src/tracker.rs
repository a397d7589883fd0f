//! One cluster's alignment state: its communicators, their open collective instances, the
//! monotonic clock offsets of its nodes, and the lag records waiting for the next tick.
//!
//! Pure and single-threaded: the processor holds one [`ClusterTracker`] per cluster behind
//! a mutex and hands it parsed points, arrival times and `now`.

use std::collections::HashMap;
use std::sync::Arc;

use component::Timestamp;

use crate::align::{
    BucketRule, Budget, Entry, ExactInstances, Instance, IntMap, Placed, TimeBuckets, expired_keys,
};
use crate::clock::{NodeClock, RefineParams, is_wall_clock, normalise};
use crate::emit::{Emitter, split_halves};
pub use crate::emit::{LagRecord, MAX_TRANSITIONS, Transition};
use crate::ingest::NcclPoint;
use crate::metrics::{CollectiveOutcome, Counts, DropReason, Outcome};
use crate::settings::Settings;
use crate::stats::{RankWindow, StepIndex};

/// One communicator (`nccl.comm_id_hash`) of a cluster.
#[derive(Debug)]
pub struct CommState {
    pub nranks: u32,
    pub last_seen: Timestamp,
    /// `ingero.node.id` of each rank, when its points named one.
    pub rank_nodes: Vec<Option<Arc<str>>>,
    pub exact: ExactInstances,
    /// Per operation type (index into the configured list), created on first use.
    pub streams: Vec<Option<Box<StreamState>>>,
    step_index_capacity: usize,
}

impl CommState {
    fn new(nranks: u32, n_ops: usize, now: Timestamp, step_index_capacity: usize) -> Self {
        CommState {
            step_index_capacity,
            nranks,
            last_seen: now,
            rank_nodes: Vec::new(),
            exact: ExactInstances::default(),
            streams: (0..n_ops).map(|_| None).collect(),
        }
    }

    pub(crate) fn stream_mut(&mut self, op: u8) -> Option<&mut StreamState> {
        let slot = self.streams.get_mut(op as usize)?;
        let cap = self.step_index_capacity;
        Some(slot.get_or_insert_with(|| {
            Box::new(StreamState {
                recent: StepIndex::new(cap),
                ..StreamState::default()
            })
        }))
    }

    fn set_node(&mut self, rank: u32, node: &Arc<str>) {
        let r = rank as usize;
        if r >= self.nranks as usize {
            return;
        }
        if self.rank_nodes.len() <= r {
            self.rank_nodes.resize(r + 1, None);
        }
        if let Some(slot) = self.rank_nodes.get_mut(r)
            && slot.as_ref() != Some(node)
        {
            *slot = Some(node.clone());
        }
    }

    pub(crate) fn node(&self, rank: u32) -> Option<Arc<str>> {
        self.rank_nodes.get(rank as usize).cloned().flatten()
    }

    pub fn open_instances(&self) -> usize {
        self.exact.open.len()
            + self
                .streams
                .iter()
                .flatten()
                .map(|st| st.buckets.open.len())
                .sum::<usize>()
    }

    /// Rolling rank windows held by this communicator's streams.
    pub fn rank_series(&self) -> usize {
        self.streams
            .iter()
            .flatten()
            .map(|st| st.ranks.iter().flatten().count())
            .sum()
    }

    /// Every open instance of the communicator (exact and time buckets).
    fn open_iter(&self) -> impl Iterator<Item = &Instance> {
        self.exact.open.values().chain(
            self.streams
                .iter()
                .flatten()
                .flat_map(|st| st.buckets.open.values()),
        )
    }

    fn clear_open(&mut self) {
        self.exact.open.clear();
        for st in self.streams.iter_mut().flatten() {
            st.buckets.open.clear();
        }
    }
}

/// The `(comm, op_type)` stream: where per-rank history lives.
#[derive(Debug, Default)]
pub struct StreamState {
    /// Open time buckets (points without `nccl.op_seq`).
    pub buckets: TimeBuckets,
    /// Collective instances closed with a quorum (including those whose lags were held back
    /// while clocks calibrated).
    pub steps: u64,
    /// Points refused because their instance already had that rank.
    pub duplicates: u64,
    /// Rolling statistics per rank (index = rank), created on a rank's first step.
    pub ranks: Vec<Option<Box<RankWindow>>>,
    /// Keys of the newest emitted instances, numbered (steps periods are counted in).
    pub recent: StepIndex,
    /// Ranks currently named (chronic or periodic).
    pub named: Vec<u32>,
}

/// How a node's monotonic points can be aligned in the current batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MonoClock {
    Ready {
        offset: i64,
        generation: u16,
        epoch: u16,
        calibrating: bool,
    },
    Warmup,
    Cap,
    NoNode,
}

/// All alignment state of one cluster.
#[derive(Debug, Default)]
pub struct ClusterTracker {
    comms: IntMap<u64, CommState>,
    nodes: HashMap<Arc<str>, NodeClock>,
    budget: Budget,
    emitter: Emitter,
    last_now: Timestamp,
}

impl ClusterTracker {
    pub fn new(s: &Settings) -> Self {
        ClusterTracker {
            budget: Budget {
                max_open_instances: s.max_open_instances,
                max_buffered_points: s.max_buffered_points,
                ..Budget::default()
            },
            ..ClusterTracker::default()
        }
    }

    /// The latest time this tracker was told about (arrival or tick).
    pub fn last_now(&self) -> Timestamp {
        self.last_now
    }

    pub fn tracked_comms(&self) -> usize {
        self.comms.len()
    }

    pub fn open_instances(&self) -> usize {
        self.budget.open_instances
    }

    pub fn buffered_points(&self) -> usize {
        self.budget.buffered_points
    }

    /// Rolling per-rank windows held (see `limits.max_rank_series_per_cluster`).
    pub fn rank_series(&self) -> usize {
        self.emitter.rank_series
    }

    pub fn pending_output(&self) -> usize {
        self.emitter.output.len()
    }

    pub fn node_clocks(&self) -> impl Iterator<Item = (&Arc<str>, &NodeClock)> {
        self.nodes.iter()
    }

    pub fn comms(&self) -> impl Iterator<Item = (&u64, &CommState)> {
        self.comms.iter()
    }

    /// True when the tracker holds nothing worth keeping.
    pub fn is_idle(&self) -> bool {
        self.comms.is_empty() && self.nodes.is_empty() && self.emitter.output.is_empty()
    }

    /// Ingest the NCCL points one resource (one node) delivered at `arrival`.
    pub fn ingest(
        &mut self,
        node: Option<&Arc<str>>,
        points: &[NcclPoint],
        arrival: Timestamp,
        s: &Settings,
        counts: &mut Counts,
    ) {
        let now = if arrival == Timestamp::ZERO {
            self.last_now
        } else {
            arrival
        };
        self.last_now = self.last_now.max(now);
        let mono = self.observe_monotonic(node, points, now, s);
        for p in points {
            let entry = if is_wall_clock(p.ts) {
                Entry::wall(p.rank, p.ts as i64)
            } else {
                match mono {
                    MonoClock::Ready {
                        offset,
                        generation,
                        epoch,
                        calibrating,
                    } => Entry {
                        rank: p.rank,
                        t: (p.ts as i64).saturating_add(offset),
                        wall: false,
                        clock_gen: generation,
                        clock_epoch: epoch,
                        calibrating,
                    },
                    MonoClock::Warmup => {
                        counts.refuse(DropReason::ClockWarmup);
                        continue;
                    }
                    MonoClock::Cap => {
                        counts.refuse(DropReason::CapNodes);
                        continue;
                    }
                    MonoClock::NoNode => {
                        counts.refuse(DropReason::Invalid);
                        continue;
                    }
                }
            };
            self.place(p, node, entry, now, s, counts);
        }
        self.apply_residuals(s);
    }

    /// Hand the lags of monotonic entries to their nodes' offset refinement, and appoint a
    /// clock anchor if one was proposed and the cluster has none.
    fn apply_residuals(&mut self, s: &Settings) {
        let Some(q) = s.mono_refine_quantile else {
            self.emitter.residuals.clear();
            self.emitter.anchor_request = None;
            return;
        };
        if let Some(node) = self.emitter.anchor_request.take()
            && !self.nodes.values().any(NodeClock::is_anchor)
            && let Some(c) = self.nodes.get_mut(&node)
        {
            c.make_anchor();
        }
        for (node, generation, lag) in self.emitter.residuals.drain(..) {
            if let Some(c) = self.nodes.get_mut(&node) {
                c.add_residual(
                    generation,
                    lag,
                    RefineParams {
                        quantile: q,
                        settle_ms: s.settle_ms(),
                        max_above_bound_ns: s.window_ns / 2,
                    },
                );
            }
        }
    }

    /// Update the delivering node's clock estimate from this batch's newest monotonic
    /// timestamp, and say whether its monotonic points can be aligned.
    fn observe_monotonic(
        &mut self,
        node: Option<&Arc<str>>,
        points: &[NcclPoint],
        now: Timestamp,
        s: &Settings,
    ) -> MonoClock {
        let Some(max_ts) = points
            .iter()
            .map(|p| p.ts)
            .filter(|t| !is_wall_clock(*t))
            .max()
        else {
            return MonoClock::NoNode;
        };
        let Some(node) = node else {
            return MonoClock::NoNode;
        };
        if !self.nodes.contains_key(node) && self.nodes.len() >= s.max_nodes {
            return MonoClock::Cap;
        }
        let clock = self.nodes.entry(node.clone()).or_default();
        clock.observe(now, max_ts, s.mono_window);
        if clock.batches() < s.mono_min_batches {
            MonoClock::Warmup
        } else {
            MonoClock::Ready {
                offset: clock.offset_ns(),
                generation: clock.generation(),
                epoch: clock.epoch(),
                calibrating: s.mono_refine_quantile.is_some() && !clock.is_settled(),
            }
        }
    }

    fn place(
        &mut self,
        p: &NcclPoint,
        node: Option<&Arc<str>>,
        entry: Entry,
        now: Timestamp,
        s: &Settings,
        counts: &mut Counts,
    ) {
        if !self.comms.contains_key(&p.comm) && self.comms.len() >= s.max_comms {
            counts.refuse(DropReason::CapComms);
            return;
        }
        let comm = self
            .comms
            .entry(p.comm)
            .or_insert_with(|| CommState::new(p.nranks, s.ops.len(), now, s.step_index_capacity()));
        if comm.nranks != p.nranks {
            counts.refuse(DropReason::Invalid);
            return;
        }
        comm.last_seen = comm.last_seen.max(now);
        if let Some(n) = node {
            comm.set_node(p.rank, n);
        }
        let rule = BucketRule {
            window_ns: s.window_ns,
            skew_ns: s.skew_ns,
        };
        let placed = match p.op_seq {
            Some(seq) => comm
                .exact
                .insert(seq, p.op, p.nranks, entry, now, &mut self.budget),
            None => match comm.stream_mut(p.op) {
                Some(st) => st
                    .buckets
                    .insert(rule, p.op, p.nranks, entry, now, &mut self.budget),
                None => Placed::OpMismatch,
            },
        };
        match placed {
            Placed::Added { key } => {
                counts.outcome(Outcome::Accepted, 1);
                let done = match p.op_seq {
                    Some(_) if comm.exact.get(key).is_some_and(Instance::is_complete) => {
                        comm.exact.take(key, &mut self.budget)
                    }
                    None => comm.stream_mut(p.op).and_then(|st| {
                        if st.buckets.get(key).is_some_and(Instance::is_complete) {
                            st.buckets.take(key, &mut self.budget)
                        } else {
                            None
                        }
                    }),
                    Some(_) => None,
                };
                if let Some(inst) = done {
                    let seq = p.op_seq.map(|_| key);
                    self.emitter.finalize(
                        p.comm,
                        comm,
                        inst,
                        seq,
                        CollectiveOutcome::Complete,
                        &self.nodes,
                        s,
                        counts,
                    );
                }
            }
            Placed::Late => counts.refuse(DropReason::Late),
            Placed::Duplicate => {
                counts.refuse(DropReason::Duplicate);
                if let Some(st) = comm.stream_mut(p.op) {
                    st.duplicates += 1;
                }
            }
            Placed::OpMismatch => counts.refuse(DropReason::Invalid),
            Placed::CapBuckets => counts.refuse(DropReason::CapBuckets),
        }
    }

    /// Close instances past their grace period (emit with quorum, else discard), forget
    /// idle communicators and node clocks. Lag records stay queued for [`Self::drain`].
    pub fn tick(&mut self, now: Timestamp, s: &Settings, counts: &mut Counts) {
        self.last_now = self.last_now.max(now);
        for (&comm_id, comm) in self.comms.iter_mut() {
            for seq in expired_keys(&comm.exact.open, now, s.grace_ns) {
                if let Some(inst) = comm.exact.take(seq, &mut self.budget) {
                    self.emitter.close_expired(
                        comm_id,
                        comm,
                        inst,
                        Some(seq),
                        &self.nodes,
                        s,
                        counts,
                    );
                }
            }
            for op in 0..comm.streams.len() {
                let Some(st) = comm.streams.get_mut(op).and_then(|x| x.as_deref_mut()) else {
                    continue;
                };
                let expired: Vec<(i64, Instance)> = expired_keys(&st.buckets.open, now, s.grace_ns)
                    .into_iter()
                    .filter_map(|k| st.buckets.take(k, &mut self.budget).map(|i| (k, i)))
                    .collect();
                let rejoined = match s.mono_refine_quantile {
                    Some(_) => split_halves(&expired, &st.buckets, s),
                    None => Vec::new(),
                };
                if let Some(q) = s.mono_refine_quantile {
                    for merged in &rejoined {
                        self.emitter.refinement_residuals(comm, merged, q);
                    }
                }
                for (_, inst) in expired {
                    self.emitter
                        .close_expired(comm_id, comm, inst, None, &self.nodes, s, counts);
                }
            }
        }
        self.apply_residuals(s);
        // Only a consensus anchored on a monotonic node floats; wall clocks are the truth.
        if s.mono_refine_quantile.is_some()
            && self.nodes.values().any(NodeClock::is_anchor)
            && let Some(delta) = normalise(self.nodes.values(), s.window_ns / 10, s.window_ns / 4)
        {
            for c in self.nodes.values_mut() {
                c.shift(delta);
            }
        }
        let budget = &mut self.budget;
        let series = &mut self.emitter.rank_series;
        self.comms.retain(|_, c| {
            let idle = now.as_nanos().saturating_sub(c.last_seen.as_nanos()) >= s.comm_idle_ns;
            if idle {
                *series = series.saturating_sub(c.rank_series());
                for inst in c.open_iter() {
                    counts.drop_points(DropReason::UnderQuorum, inst.len() as u64);
                    budget.open_instances = budget.open_instances.saturating_sub(1);
                    budget.buffered_points = budget.buffered_points.saturating_sub(inst.len());
                }
            }
            !idle
        });
        self.nodes
            .retain(|_, n| now.as_nanos().saturating_sub(n.last_seen.as_nanos()) < s.comm_idle_ns);
    }

    /// Take the naming transitions since the last call, and how many did not fit.
    pub fn take_transitions(&mut self) -> (Vec<Transition>, u64) {
        let n = std::mem::take(&mut self.emitter.transitions_dropped);
        (std::mem::take(&mut self.emitter.transitions), n)
    }

    /// Take the queued lag records.
    pub fn drain(&mut self) -> Vec<LagRecord> {
        std::mem::take(&mut self.emitter.output)
    }

    /// Discard all open instances and queued output (counted as `shutdown`).
    pub fn discard(&mut self, counts: &mut Counts) {
        counts.drop_points(DropReason::Shutdown, self.budget.buffered_points as u64);
        counts.drop_points(DropReason::Shutdown, self.emitter.output.len() as u64);
        self.emitter.output.clear();
        for c in self.comms.values_mut() {
            c.clear_open();
        }
        self.budget.open_instances = 0;
        self.budget.buffered_points = 0;
    }
}

#[cfg(test)]
mod tests;
