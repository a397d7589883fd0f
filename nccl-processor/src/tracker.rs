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
use crate::clock::{NodeClock, is_wall_clock};
use crate::ingest::NcclPoint;
use crate::lag::{LagScratch, StepLags, compute_lags};
use crate::metrics::{CollectiveOutcome, Counts, DropReason, Outcome};
use crate::settings::Settings;
use crate::stats::{RankWindow, RecentKeys, Step};

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
}

impl CommState {
    fn new(nranks: u32, n_ops: usize, now: Timestamp) -> Self {
        CommState {
            nranks,
            last_seen: now,
            rank_nodes: Vec::new(),
            exact: ExactInstances::default(),
            streams: (0..n_ops).map(|_| None).collect(),
        }
    }

    fn stream_mut(&mut self, op: u8) -> Option<&mut StreamState> {
        let slot = self.streams.get_mut(op as usize)?;
        Some(slot.get_or_insert_with(Box::default))
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

    fn node(&self, rank: u32) -> Option<Arc<str>> {
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
    /// Collective instances emitted.
    pub steps: u64,
    /// Points refused because their instance already had that rank.
    pub duplicates: u64,
    /// Rolling statistics per rank (index = rank), created on a rank's first step.
    pub ranks: Vec<Option<Box<RankWindow>>>,
    /// Keys of the newest emitted instances (for the stream's step spacing).
    pub recent: RecentKeys,
    /// Ranks currently named (chronic or periodic).
    pub named: Vec<u32>,
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

/// Transitions kept between ticks; more are counted, not stored.
pub const MAX_TRANSITIONS: usize = 256;

/// Scratch space and output queue used when an instance is finalised.
#[derive(Debug, Default)]
struct Emitter {
    output: Vec<LagRecord>,
    transitions: Vec<Transition>,
    transitions_dropped: u64,
    scratch: LagScratch,
    step: StepLags,
    times: Vec<i64>,
}

/// How a node's monotonic points can be aligned in the current batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MonoClock {
    Ready(i64),
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
            let (t, wall) = if is_wall_clock(p.ts) {
                (p.ts as i64, true)
            } else {
                match mono {
                    MonoClock::Ready(offset) => ((p.ts as i64).saturating_add(offset), false),
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
            self.place(
                p,
                node,
                Entry {
                    rank: p.rank,
                    t,
                    wall,
                },
                now,
                s,
                counts,
            );
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
            MonoClock::Ready(clock.offset_ns())
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
            .or_insert_with(|| CommState::new(p.nranks, s.ops.len(), now));
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
                    self.emitter
                        .close_expired(comm_id, comm, inst, Some(seq), s, counts);
                }
            }
            for op in 0..comm.streams.len() {
                let Some(st) = comm.streams.get_mut(op).and_then(|x| x.as_deref_mut()) else {
                    continue;
                };
                let expired: Vec<Instance> = expired_keys(&st.buckets.open, now, s.grace_ns)
                    .into_iter()
                    .filter_map(|k| st.buckets.take(k, &mut self.budget))
                    .collect();
                for inst in expired {
                    self.emitter
                        .close_expired(comm_id, comm, inst, None, s, counts);
                }
            }
        }
        let budget = &mut self.budget;
        self.comms.retain(|_, c| {
            let idle = now.as_nanos().saturating_sub(c.last_seen.as_nanos()) >= s.comm_idle_ns;
            if idle {
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

impl Emitter {
    /// An instance whose grace period ran out: emit it if it has a quorum.
    fn close_expired(
        &mut self,
        comm_id: u64,
        comm: &mut CommState,
        inst: Instance,
        seq: Option<i64>,
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
                s,
                counts,
            );
        } else {
            counts.collective(CollectiveOutcome::UnderQuorum);
            counts.drop_points(DropReason::UnderQuorum, inst.len() as u64);
        }
    }

    /// Compute the lags of a closed instance and queue one record per rank.
    #[allow(clippy::too_many_arguments)]
    fn finalize(
        &mut self,
        comm_id: u64,
        comm: &mut CommState,
        inst: Instance,
        seq: Option<i64>,
        outcome: CollectiveOutcome,
        s: &Settings,
        counts: &mut Counts,
    ) {
        self.times.clear();
        self.times.extend(inst.entries.iter().map(|e| e.t));
        if compute_lags(&self.times, s.lag, &mut self.scratch, &mut self.step).is_none() {
            return;
        }
        counts.collective(outcome);
        let wall = inst.all_wall();
        let time_ns = if wall {
            u64::try_from(self.step.median_ns).ok()
        } else {
            None
        };
        let key = seq.unwrap_or(self.step.median_ns);
        let params = s.rank_params();
        if let Some(st) = comm.stream_mut(inst.op) {
            st.steps += 1;
            st.recent.push(key);
            let StreamState {
                ranks,
                recent,
                named,
                ..
            } = st;
            let mut stride: Option<f64> = None;
            for (e, &lag_ms) in inst.entries.iter().zip(&self.step.lags_ms) {
                let r = e.rank as usize;
                if ranks.len() <= r {
                    ranks.resize_with(r + 1, || None);
                }
                let Some(slot) = ranks.get_mut(r) else {
                    continue;
                };
                let w = slot.get_or_insert_with(Box::default);
                let was_named = w.is_named(&params);
                let step = Step {
                    key,
                    lag_ms: lag_ms as f32,
                    behind: self.step.is_behind(lag_ms),
                };
                w.record(step, &params, &mut || {
                    *stride.get_or_insert_with(|| recent.stride())
                });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NcclConfig;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_760_000_000_000_000_000;

    fn settings() -> Settings {
        Settings::new(&NcclConfig::default())
    }

    fn pt(rank: u32, nranks: u32, seq: i64, ts: u64) -> NcclPoint {
        NcclPoint {
            op: 0,
            comm: 0xc0,
            rank,
            nranks,
            ts,
            op_seq: Some(seq),
        }
    }

    fn node(i: u32) -> Arc<str> {
        Arc::from(format!("node-{i}").as_str())
    }

    #[test]
    fn exact_instance_emits_when_all_ranks_arrive() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let arrival = Timestamp(T0 + 1_000 * MS);
        for r in 0..4u32 {
            let late = if r == 2 { 150 * MS } else { 0 };
            t.ingest(
                Some(&node(r)),
                &[pt(r, 4, 7, T0 + u64::from(r) * MS + late)],
                arrival,
                &s,
                &mut c,
            );
        }
        assert_eq!(c.collectives[CollectiveOutcome::Complete as usize], 1);
        assert_eq!(t.open_instances(), 0);
        let out = t.drain();
        assert_eq!(out.len(), 4);
        let r2 = out.iter().find(|r| r.rank == 2).unwrap();
        // Entries 0, 1, 152, 3 ms: median 2 ms -> rank 2 lags 150 ms.
        assert!((r2.lag_ms - 150.0).abs() < 1e-9, "{r2:?}");
        assert_eq!(r2.op_seq, Some(7));
        assert_eq!(r2.node.as_deref(), Some("node-2"));
        assert!(r2.wall_clock);
        assert_eq!(r2.time_ns, Some(T0 + 2 * MS));
        // A straggler's point after emission is late, not a new instance.
        t.ingest(None, &[pt(1, 4, 7, T0)], arrival, &s, &mut c);
        assert_eq!(c.dropped(DropReason::Late), 1);
        assert_eq!(t.open_instances(), 0);
    }

    #[test]
    fn incomplete_instance_waits_for_grace_then_needs_quorum() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let arrival = Timestamp(T0);
        // seq 1: 6 of 8 ranks (quorum 6); seq 2: 5 of 8.
        for r in 0..6 {
            t.ingest(None, &[pt(r, 8, 1, T0 + u64::from(r))], arrival, &s, &mut c);
        }
        for r in 0..5 {
            t.ingest(None, &[pt(r, 8, 2, T0 + u64::from(r))], arrival, &s, &mut c);
        }
        t.tick(Timestamp(T0 + s.grace_ns - 1), &s, &mut c);
        assert_eq!(t.open_instances(), 2);
        assert!(t.drain().is_empty());
        t.tick(Timestamp(T0 + s.grace_ns), &s, &mut c);
        assert_eq!(t.open_instances(), 0);
        assert_eq!(t.buffered_points(), 0);
        let out = t.drain();
        assert_eq!(out.len(), 6);
        assert!(out.iter().all(|r| r.op_seq == Some(1)));
        assert_eq!(c.collectives[CollectiveOutcome::Partial as usize], 1);
        assert_eq!(c.collectives[CollectiveOutcome::UnderQuorum as usize], 1);
        assert_eq!(c.dropped(DropReason::UnderQuorum), 5);
    }

    #[test]
    fn nranks_disagreement_and_comm_cap_are_counted() {
        let mut cfg = NcclConfig::default();
        cfg.limits.max_comms_per_cluster = 1;
        let s = Settings::new(&cfg);
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let a = Timestamp(T0);
        t.ingest(None, &[pt(0, 4, 1, T0)], a, &s, &mut c);
        t.ingest(None, &[pt(1, 5, 1, T0)], a, &s, &mut c);
        let mut other = pt(0, 4, 1, T0);
        other.comm = 0xc1;
        t.ingest(None, &[other], a, &s, &mut c);
        assert_eq!(c.dropped(DropReason::Invalid), 1);
        assert_eq!(c.dropped(DropReason::CapComms), 1);
        assert_eq!(t.tracked_comms(), 1);
        assert_eq!(t.buffered_points(), 1);
        // Once idle long enough, the communicator is forgotten and frees the cap.
        t.tick(Timestamp(T0 + s.comm_idle_ns), &s, &mut c);
        assert_eq!(t.tracked_comms(), 0);
        t.ingest(None, &[other], Timestamp(T0 + s.comm_idle_ns), &s, &mut c);
        assert_eq!(t.tracked_comms(), 1);
    }

    #[test]
    fn monotonic_points_wait_for_the_clock_then_align() {
        let s = settings(); // min_batches 3
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let n = node(0);
        let boot = T0; // the node booted at T0
        for i in 0..3u64 {
            let mono = 100_000 * MS + i * 10_000 * MS;
            // delivered 5 ms after the newest point
            t.ingest(
                Some(&n),
                &[pt(0, 2, i as i64, mono)],
                Timestamp(boot + mono + 5 * MS),
                &s,
                &mut c,
            );
        }
        assert_eq!(c.dropped(DropReason::ClockWarmup), 2);
        assert_eq!(c.outcomes[Outcome::Accepted as usize], 1);
        // A wall-clock rank of the same collective joins it on one axis.
        let mono = 120_000 * MS;
        t.ingest(
            None,
            &[pt(1, 2, 2, boot + mono + 5 * MS + 40 * MS)],
            Timestamp(boot + mono + 50 * MS),
            &s,
            &mut c,
        );
        let out = t.drain();
        assert_eq!(out.len(), 2);
        let r1 = out.iter().find(|r| r.rank == 1).unwrap();
        assert!((r1.lag_ms - 20.0).abs() < 1e-6, "{r1:?}");
        assert!(!r1.wall_clock);
        assert_eq!(r1.time_ns, None);
        // Without a node id a monotonic point cannot be aligned.
        t.ingest(None, &[pt(0, 2, 9, 5)], Timestamp(boot), &s, &mut c);
        assert_eq!(c.dropped(DropReason::Invalid), 1);
    }

    fn tpt(rank: u32, nranks: u32, ts: u64) -> NcclPoint {
        NcclPoint {
            op_seq: None,
            ..pt(rank, nranks, 0, ts)
        }
    }

    #[test]
    fn time_bucket_collective_with_a_straddling_straggler_is_one_instance() {
        let s = settings(); // window 1 s, skew 0.5
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        // T0 is a whole second; peers enter 900..907 ms into the bucket, rank 3 290 ms later
        // (190 ms past the boundary), and its batch arrives first.
        let base = T0 + 900 * MS;
        t.ingest(
            Some(&node(3)),
            &[tpt(3, 8, base + 3 * MS + 290 * MS)],
            Timestamp(T0),
            &s,
            &mut c,
        );
        assert_eq!(t.open_instances(), 1);
        let peers: Vec<_> = (0..8)
            .filter(|r| *r != 3)
            .map(|r| tpt(r, 8, base + u64::from(r) * MS))
            .collect();
        t.ingest(Some(&node(0)), &peers, Timestamp(T0), &s, &mut c);
        assert_eq!(t.open_instances(), 0, "complete -> emitted at once");
        assert_eq!(c.collectives[CollectiveOutcome::Complete as usize], 1);
        let out = t.drain();
        assert_eq!(out.len(), 8);
        let r3 = out.iter().find(|r| r.rank == 3).unwrap();
        // Entries 0,1,2,293,4,5,6,7 ms past base: median 4.5 ms.
        assert!((r3.lag_ms - 288.5).abs() < 1e-6, "{r3:?}");
        assert_eq!(r3.op_seq, None);
        assert_eq!(r3.node.as_deref(), Some("node-3"));
        // A repeat from rank 0 for the emitted bucket is late.
        t.ingest(None, &[tpt(0, 8, base + 2 * MS)], Timestamp(T0), &s, &mut c);
        assert_eq!(c.dropped(DropReason::Late), 1);
    }

    #[test]
    fn time_buckets_expire_with_or_without_quorum() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        // Bucket A: 7 of 8 ranks (quorum 6). Bucket B, 10 s later: 3 of 8.
        let a: Vec<_> = (0..7)
            .map(|r| tpt(r, 8, T0 + 100 * MS + u64::from(r) * MS))
            .collect();
        let b: Vec<_> = (0..3)
            .map(|r| tpt(r, 8, T0 + 10_100 * MS + u64::from(r) * MS))
            .collect();
        t.ingest(None, &a, Timestamp(T0), &s, &mut c);
        t.ingest(None, &b, Timestamp(T0 + 5_000 * MS), &s, &mut c);
        t.tick(Timestamp(T0 + s.grace_ns), &s, &mut c);
        assert_eq!(t.open_instances(), 1, "B is still in its grace period");
        assert_eq!(t.drain().len(), 7);
        t.tick(Timestamp(T0 + 5_000 * MS + s.grace_ns), &s, &mut c);
        assert_eq!(t.open_instances(), 0);
        assert!(t.drain().is_empty());
        assert_eq!(c.dropped(DropReason::UnderQuorum), 3);
        assert_eq!(c.collectives[CollectiveOutcome::Partial as usize], 1);
        // The missing rank of A shows up after A was emitted: late, not a new bucket.
        t.ingest(
            None,
            &[tpt(7, 8, T0 + 107 * MS)],
            Timestamp(T0 + 20_000 * MS),
            &s,
            &mut c,
        );
        assert_eq!(c.dropped(DropReason::Late), 1);
        assert_eq!(t.open_instances(), 0);
    }

    #[test]
    fn two_collectives_in_one_window_are_counted_as_duplicates() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        // Two collectives 200 ms apart inside one 1 s window: the second collides.
        t.ingest(
            None,
            &[tpt(0, 4, T0 + 100 * MS), tpt(0, 4, T0 + 300 * MS)],
            Timestamp(T0),
            &s,
            &mut c,
        );
        assert_eq!(c.dropped(DropReason::Duplicate), 1);
        let st = t.comms().next().unwrap().1.streams[0].as_ref().unwrap();
        assert_eq!(st.duplicates, 1);
    }

    #[test]
    fn naming_transitions_are_reported_once_each_way() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let mut step = |seq: i64, late: bool, t: &mut ClusterTracker| {
            let base = T0 + seq as u64 * 1_000 * MS;
            let pts: Vec<_> = (0..4)
                .map(|r| {
                    pt(
                        r,
                        4,
                        seq,
                        base + u64::from(r) * 100_000 + if late && r == 1 { 80 * MS } else { 0 },
                    )
                })
                .collect();
            t.ingest(None, &pts, Timestamp(base), &s, &mut c);
        };
        for seq in 0..12 {
            step(seq, true, &mut t);
        }
        let (tr, dropped) = t.take_transitions();
        assert_eq!(dropped, 0);
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert!(tr[0].named && tr[0].rank == 1 && tr[0].window == 10);
        assert!((tr[0].median_lag_ms.unwrap() - 80.0).abs() < 0.5);
        // On time from now on: once the behind share drops under half it is un-named.
        for seq in 12..60 {
            step(seq, false, &mut t);
        }
        let (tr, _) = t.take_transitions();
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert!(!tr[0].named && tr[0].rank == 1);
        let st = t.comms().next().unwrap().1.streams[0].as_ref().unwrap();
        assert!(st.named.is_empty());
        assert_eq!(st.steps, 60);
    }

    #[test]
    fn output_cap_drops_and_counts_records() {
        let mut cfg = NcclConfig::default();
        cfg.limits.max_pending_output = 3;
        let s = Settings::new(&cfg);
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        let pts: Vec<_> = (0..4).map(|r| pt(r, 4, 1, T0 + u64::from(r))).collect();
        t.ingest(None, &pts, Timestamp(T0), &s, &mut c);
        assert_eq!(t.pending_output(), 3);
        assert_eq!(c.dropped(DropReason::CapOutput), 1);
        assert_eq!(c.lag_points, 3);
    }

    #[test]
    fn discard_counts_everything_it_throws_away() {
        let s = settings();
        let mut t = ClusterTracker::new(&s);
        let mut c = Counts::default();
        t.ingest(
            None,
            &[pt(0, 4, 1, T0), pt(1, 4, 1, T0)],
            Timestamp(T0),
            &s,
            &mut c,
        );
        let full: Vec<_> = (0..2).map(|r| pt(r, 2, 1, T0)).collect();
        let mut other = full.clone();
        for p in &mut other {
            p.comm = 0xc2;
        }
        t.ingest(None, &other, Timestamp(T0), &s, &mut c);
        t.discard(&mut c);
        assert_eq!(c.dropped(DropReason::Shutdown), 4);
        assert_eq!(
            (t.open_instances(), t.buffered_points(), t.pending_output()),
            (0, 0, 0)
        );
    }
}
