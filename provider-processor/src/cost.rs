//! The cost ledger: what GPU spend sits idle at NCCL barriers and what each current
//! straggler costs, accumulated on ticks. Pure: every call takes the time, nothing here
//! reads a clock, a file or logs.
//!
//! Definitions (also in the README, with a worked example):
//!
//! - A *collective instance* is the set of `nccl.collective.peer_lag_ms` points with the
//!   same (cluster, `nccl.comm_id_hash`, `nccl.op_type`, `timeUnixNano`, `nccl.op_seq`
//!   when present). The `nccl_peer_lag` processor stamps every instance it could not put
//!   on the wall clock with its tick time, so several instances of one communicator can
//!   share all of these within one batch: the k-th point of a rank under one such key
//!   belongs to the k-th instance (the producer emits instances in order). Within it the
//!   slowest rank's lag `L = max(lag, 0)` keeps the other `n - 1` ranks waiting, where
//!   `n = max(nccl.nranks, distinct ranks seen)`; one rank is one GPU. The instance adds
//!   `L * (n - 1)` idle GPU-seconds.
//! - Each waiting rank whose point names a node with a known GPU model is priced at that
//!   node's (provider, GPU model). The remaining waiting ranks are split over the cluster's
//!   live nodes in proportion to their GPU counts; with no known node they are priced as
//!   (the lag resource's provider, `unknown`), i.e. at the fallback rate.
//! - An instance is costed at the second tick after its first point arrived, so points
//!   of one instance that arrive in different batches of one tick interval still meet.
//! - Barrier idle rate = idle GPU-seconds of the instances closed within `window` /
//!   `window` seconds (= average idle GPUs) * rate per GPU-hour, per (cluster, provider,
//!   GPU model): currency units per hour.
//! - Straggler rate of a node = affected GPUs * the node's rate per GPU-hour, with affected
//!   GPUs = `ingero.node.world_size` when > 0 (the ranks a straggler holds back, spec
//!   section 6.2), otherwise the node's `ingero.gpu_count` (1 when unknown).
//! - Counters: the barrier total grows by the money of each closed instance slice; the
//!   straggler total grows by `rate * dt` each tick, where dt runs from the later of the
//!   previous tick and the start of the straggler streak, capped at 2 tick intervals.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use component::Timestamp;

use crate::rates::RateTable;
use crate::resolve::Resolution;

/// GPU model label for GPUs whose model is not known.
pub const UNKNOWN_MODEL: &str = "unknown";
/// Most ranks kept for one collective instance.
pub const MAX_RANKS_PER_COLLECTIVE: usize = 16_384;

/// Settings of the ledger (from [`crate::ProviderConfig`]).
#[derive(Debug, Clone)]
pub struct LedgerSettings {
    pub tick_interval: Duration,
    pub window: Duration,
    pub node_ttl: Duration,
    pub straggler_expiry: Duration,
    pub series_retention: Duration,
    pub max_clusters: usize,
    pub max_nodes: usize,
    pub max_pending_collectives: usize,
    pub max_cost_series: usize,
}

impl LedgerSettings {
    pub fn from_config(cfg: &crate::ProviderConfig) -> Self {
        LedgerSettings {
            tick_interval: cfg.tick_interval,
            window: cfg.cost.window,
            node_ttl: cfg.cost.node_ttl,
            straggler_expiry: cfg.straggler_expiry(),
            series_retention: cfg.cost.series_retention,
            max_clusters: cfg.limits.max_clusters,
            max_nodes: cfg.limits.max_nodes,
            max_pending_collectives: cfg.limits.max_pending_collectives,
            max_cost_series: cfg.limits.max_cost_series,
        }
    }
}

/// A price: who sells the GPU and which GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PriceKey {
    pub provider: Arc<str>,
    pub gpu_model: Arc<str>,
}

#[derive(Debug, Clone)]
struct NodeCost {
    provider: Arc<str>,
    /// The provider the node's latest health push resolved to, when a rule or the agent's
    /// own value named it: what the node's other pushes inherit.
    pinned: Option<Resolution>,
    gpu: Option<(Arc<str>, u32)>,
    world_size: Option<u32>,
    last_seen: Timestamp,
}

#[derive(Debug, Clone)]
struct StragglerMark {
    provider: Arc<str>,
    since: Timestamp,
    last_seen: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InstanceKey {
    comm: Arc<str>,
    op: Arc<str>,
    time_unix_nano: u64,
    op_seq: Option<i64>,
    occurrence: u32,
}

#[derive(Debug, Clone)]
struct Instance {
    epoch: u64,
    nranks: u32,
    provider: Arc<str>,
    /// rank -> (lag ms, node)
    ranks: HashMap<u32, (f64, Option<Arc<str>>)>,
}

#[derive(Debug, Clone)]
struct IdleSlice {
    at: Timestamp,
    gpu_seconds: HashMap<PriceKey, f64>,
}

#[derive(Debug, Default)]
struct ClusterCost {
    nodes: HashMap<Arc<str>, NodeCost>,
    stragglers: HashMap<Arc<str>, StragglerMark>,
    pending: HashMap<InstanceKey, Instance>,
    slices: VecDeque<IdleSlice>,
}

impl ClusterCost {
    fn is_idle(&self) -> bool {
        self.nodes.is_empty()
            && self.stragglers.is_empty()
            && self.pending.is_empty()
            && self.slices.is_empty()
    }

    /// Live nodes with a known GPU model, as (price, GPU count), for splitting waiting
    /// ranks that no point names.
    fn gpu_mix(&self) -> Vec<(PriceKey, f64)> {
        let mut mix: BTreeMap<PriceKey, f64> = BTreeMap::new();
        for n in self.nodes.values() {
            if let Some((model, count)) = &n.gpu {
                *mix.entry(PriceKey {
                    provider: Arc::clone(&n.provider),
                    gpu_model: Arc::clone(model),
                })
                .or_default() += f64::from(*count);
            }
        }
        mix.into_iter().collect()
    }
}

/// Which counter series a cost total belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SeriesKey {
    Barrier {
        cluster: Arc<str>,
        price: PriceKey,
        currency: Arc<str>,
    },
    Straggler {
        cluster: Arc<str>,
        node: Arc<str>,
        price: PriceKey,
        currency: Arc<str>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SeriesTotals {
    /// Currency units.
    pub money: f64,
    /// Idle GPU-seconds (barrier series only).
    pub gpu_seconds: f64,
    last_increase: Timestamp,
}

/// The ledger. Not synchronised: the processor wraps it in a mutex.
#[derive(Debug)]
pub struct CostLedger {
    settings: LedgerSettings,
    clusters: HashMap<Arc<str>, ClusterCost>,
    node_count: usize,
    straggler_count: usize,
    pending_count: usize,
    epoch: u64,
    last_tick: Option<Timestamp>,
    series: HashMap<SeriesKey, SeriesTotals>,
    dropped: BTreeMap<DropReason, u64>,
    snapshot: Arc<CostSnapshot>,
}

impl CostLedger {
    pub fn new(settings: LedgerSettings) -> Self {
        CostLedger {
            settings,
            clusters: HashMap::new(),
            node_count: 0,
            straggler_count: 0,
            pending_count: 0,
            epoch: 0,
            last_tick: None,
            series: HashMap::new(),
            dropped: BTreeMap::new(),
            snapshot: Arc::new(CostSnapshot::default()),
        }
    }

    /// Counters of everything refused, by reason (every reason listed).
    pub fn dropped(&self) -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|r| (*r, self.dropped.get(r).copied().unwrap_or(0)))
            .collect()
    }

    /// The snapshot of the last tick.
    pub fn snapshot(&self) -> Arc<CostSnapshot> {
        Arc::clone(&self.snapshot)
    }

    pub fn cluster_count(&self) -> usize {
        self.clusters.len()
    }

    /// Record what a node push said. Fields absent from this push keep their last value.
    pub fn observe_node(&mut self, obs: NodeObservation, at: Timestamp) -> NodeChange {
        let at_cap = self.node_count >= self.settings.max_nodes;
        let Some(c) = ensure_cluster(
            &mut self.clusters,
            &obs.cluster,
            self.settings.max_clusters,
            &mut self.dropped,
        ) else {
            return NodeChange::Dropped;
        };
        match c.nodes.get_mut(&obs.node) {
            Some(n) => {
                let mut change = NodeChange::Same;
                if n.provider != obs.provider {
                    n.provider = Arc::clone(&obs.provider);
                    change = NodeChange::NewInfo;
                }
                if let Some(gpu) = obs.gpu
                    && n.gpu.as_ref() != Some(&gpu)
                {
                    n.gpu = Some(gpu);
                    change = NodeChange::NewInfo;
                }
                if obs.world_size.is_some() {
                    n.world_size = obs.world_size;
                }
                n.last_seen = n.last_seen.max(at);
                change
            }
            None if at_cap => {
                count_drop(&mut self.dropped, DropReason::NodeCap, 1);
                NodeChange::Dropped
            }
            None => {
                c.nodes.insert(
                    obs.node,
                    NodeCost {
                        provider: obs.provider,
                        pinned: None,
                        gpu: obs.gpu,
                        world_size: obs.world_size,
                        last_seen: at,
                    },
                );
                self.node_count += 1;
                NodeChange::NewInfo
            }
        }
    }

    /// Remember the provider a node's health push resolved to by rule or agent value
    /// (`None`: neither named it).
    pub fn set_pinned_provider(&mut self, cluster: &str, node: &str, provider: Option<Resolution>) {
        if let Some(n) = self
            .clusters
            .get_mut(cluster)
            .and_then(|c| c.nodes.get_mut(node))
        {
            n.pinned = provider;
        }
    }

    /// What [`CostLedger::set_pinned_provider`] remembered for a live node.
    pub fn pinned_provider(&self, cluster: &str, node: &str) -> Option<Resolution> {
        self.clusters
            .get(cluster)
            .and_then(|c| c.nodes.get(node))
            .and_then(|n| n.pinned.clone())
    }

    /// The threshold processor's straggler points for one cluster, from one batch: the
    /// nodes marked here are the cluster's stragglers; every other node of the cluster no
    /// longer is.
    pub fn observe_stragglers(
        &mut self,
        cluster: &Arc<str>,
        points: &[StragglerPoint],
        at: Timestamp,
    ) {
        let Some(c) = ensure_cluster(
            &mut self.clusters,
            cluster,
            self.settings.max_clusters,
            &mut self.dropped,
        ) else {
            return;
        };
        let marked: HashSet<&Arc<str>> = points
            .iter()
            .filter(|p| p.straggler)
            .map(|p| &p.node)
            .collect();
        let before = c.stragglers.len();
        c.stragglers.retain(|node, _| marked.contains(node));
        self.straggler_count -= (before - c.stragglers.len()).min(self.straggler_count);
        let mut refused = 0u64;
        for p in points.iter().filter(|p| p.straggler) {
            match c.stragglers.get_mut(&p.node) {
                Some(m) => {
                    m.last_seen = m.last_seen.max(at);
                    m.provider = Arc::clone(&p.provider);
                }
                None if self.straggler_count >= self.settings.max_nodes => refused += 1,
                None => {
                    c.stragglers.insert(
                        Arc::clone(&p.node),
                        StragglerMark {
                            provider: Arc::clone(&p.provider),
                            since: at,
                            last_seen: at,
                        },
                    );
                    self.straggler_count += 1;
                }
            }
        }
        count_drop(&mut self.dropped, DropReason::StragglerCap, refused);
    }

    /// Record one peer-lag point.
    pub fn observe_lag(&mut self, p: LagPoint) {
        let epoch = self.epoch;
        let pending_full = self.pending_count >= self.settings.max_pending_collectives;
        let Some(c) = ensure_cluster(
            &mut self.clusters,
            &p.cluster,
            self.settings.max_clusters,
            &mut self.dropped,
        ) else {
            return;
        };
        let key = InstanceKey {
            comm: p.comm,
            op: p.op,
            time_unix_nano: p.time_unix_nano,
            op_seq: p.op_seq,
            occurrence: p.occurrence,
        };
        if !c.pending.contains_key(&key) {
            if pending_full {
                count_drop(&mut self.dropped, DropReason::PendingCap, 1);
                return;
            }
            self.pending_count += 1;
        }
        let inst = c.pending.entry(key).or_insert_with(|| Instance {
            epoch,
            nranks: 0,
            provider: Arc::clone(&p.provider),
            ranks: HashMap::new(),
        });
        inst.nranks = inst.nranks.max(p.nranks);
        if inst.ranks.len() >= MAX_RANKS_PER_COLLECTIVE && !inst.ranks.contains_key(&p.rank) {
            count_drop(&mut self.dropped, DropReason::RanksCap, 1);
            return;
        }
        // A repeated rank replaces its earlier point: re-delivery does not double.
        inst.ranks.insert(p.rank, (p.lag_ms, p.node));
    }

    /// Advance to `now`: expire, cost closed collectives, accrue straggler spend, and
    /// rebuild the snapshot.
    pub fn tick(&mut self, now: Timestamp, rates: &RateTable) {
        let s = self.settings.clone();
        let currency = Arc::clone(rates.currency());
        let max_dt = s.tick_interval.saturating_mul(2);
        let prev_tick = self.last_tick;
        let epoch = self.epoch;
        let window_start = now.saturating_sub(s.window);

        let mut barrier_increments: Vec<(Arc<str>, PriceKey, f64)> = Vec::new();
        let mut straggler_rows = Vec::new();
        let mut removed_nodes = 0usize;
        let mut removed_stragglers = 0usize;
        let mut closed = 0usize;

        for (cluster_id, c) in &mut self.clusters {
            // Expiry.
            let before = c.nodes.len();
            c.nodes.retain(|_, n| now.since(n.last_seen) <= s.node_ttl);
            removed_nodes += before - c.nodes.len();
            let before = c.stragglers.len();
            c.stragglers
                .retain(|_, m| now.since(m.last_seen) <= s.straggler_expiry);
            removed_stragglers += before - c.stragglers.len();

            // Close collective instances that have waited a full tick interval.
            let mix = c.gpu_mix();
            let mix_total: f64 = mix.iter().map(|(_, w)| w).sum();
            let mut slice: HashMap<PriceKey, f64> = HashMap::new();
            let ready: Vec<InstanceKey> = c
                .pending
                .iter()
                .filter(|(_, i)| i.epoch < epoch)
                .map(|(k, _)| k.clone())
                .collect();
            for key in ready {
                let Some(inst) = c.pending.remove(&key) else {
                    continue;
                };
                closed += 1;
                cost_instance(&inst, &c.nodes, &mix, mix_total, &mut slice);
            }
            if !slice.is_empty() {
                for (price, gpu_s) in &slice {
                    barrier_increments.push((Arc::clone(cluster_id), price.clone(), *gpu_s));
                }
                c.slices.push_back(IdleSlice {
                    at: now,
                    gpu_seconds: slice,
                });
            }
            while c.slices.front().is_some_and(|sl| sl.at <= window_start) {
                c.slices.pop_front();
            }

            // Straggler rates.
            for (node_id, mark) in &c.stragglers {
                let node = c.nodes.get(node_id);
                let provider = node.map_or(&mark.provider, |n| &n.provider);
                let (model, count) = match node.and_then(|n| n.gpu.as_ref()) {
                    Some((m, n)) => (Arc::clone(m), *n),
                    None => (Arc::from(UNKNOWN_MODEL), 1),
                };
                let affected = match node.and_then(|n| n.world_size) {
                    Some(w) if w > 0 => w,
                    _ => count.max(1),
                };
                let hourly = rates.lookup(provider, &model).hourly;
                let dt = match prev_tick {
                    Some(prev) => now.since(prev.max(mark.since)).min(max_dt),
                    None => Duration::ZERO,
                };
                straggler_rows.push((
                    StragglerRow {
                        cluster: Arc::clone(cluster_id),
                        node: Arc::clone(node_id),
                        price: PriceKey {
                            provider: Arc::clone(provider),
                            gpu_model: model,
                        },
                        currency: Arc::clone(&currency),
                        affected_gpus: affected,
                        hourly_rate: hourly,
                        rate_per_hour: f64::from(affected) * hourly,
                    },
                    dt,
                ));
            }
        }
        self.node_count -= removed_nodes.min(self.node_count);
        self.straggler_count -= removed_stragglers.min(self.straggler_count);
        self.pending_count -= closed.min(self.pending_count);

        // Counters.
        for (cluster, price, gpu_s) in barrier_increments {
            let hourly = rates.lookup(&price.provider, &price.gpu_model).hourly;
            let key = SeriesKey::Barrier {
                cluster,
                price,
                currency: Arc::clone(&currency),
            };
            self.add_to_series(key, gpu_s * hourly / 3600.0, gpu_s, now);
        }
        for (row, dt) in &straggler_rows {
            let key = SeriesKey::Straggler {
                cluster: Arc::clone(&row.cluster),
                node: Arc::clone(&row.node),
                price: row.price.clone(),
                currency: Arc::clone(&row.currency),
            };
            self.add_to_series(key, row.rate_per_hour * dt.as_secs_f64() / 3600.0, 0.0, now);
        }
        let retention = s.series_retention;
        self.series
            .retain(|_, t| now.since(t.last_increase) <= retention);
        self.clusters.retain(|_, c| !c.is_idle());

        self.snapshot = Arc::new(self.build_snapshot(now, rates, straggler_rows));
        self.epoch += 1;
        self.last_tick = Some(now);
    }

    fn add_to_series(&mut self, key: SeriesKey, money: f64, gpu_seconds: f64, now: Timestamp) {
        let full = self.series.len() >= self.settings.max_cost_series;
        match self.series.get_mut(&key) {
            Some(t) => {
                t.money += money;
                t.gpu_seconds += gpu_seconds;
                if money > 0.0 || gpu_seconds > 0.0 {
                    t.last_increase = now;
                }
            }
            None if full => count_drop(&mut self.dropped, DropReason::SeriesCap, 1),
            None => {
                self.series.insert(
                    key,
                    SeriesTotals {
                        money,
                        gpu_seconds,
                        last_increase: now,
                    },
                );
            }
        }
    }
}

fn count_drop(dropped: &mut BTreeMap<DropReason, u64>, reason: DropReason, n: u64) {
    if n > 0 {
        *dropped.entry(reason).or_default() += n;
    }
}

/// The cluster's state, created when the cluster cap allows (a refusal is counted).
fn ensure_cluster<'a>(
    clusters: &'a mut HashMap<Arc<str>, ClusterCost>,
    cluster: &Arc<str>,
    max_clusters: usize,
    dropped: &mut BTreeMap<DropReason, u64>,
) -> Option<&'a mut ClusterCost> {
    if !clusters.contains_key(cluster) {
        if clusters.len() >= max_clusters {
            count_drop(dropped, DropReason::ClusterCap, 1);
            return None;
        }
        clusters.insert(Arc::clone(cluster), ClusterCost::default());
    }
    clusters.get_mut(cluster)
}

mod input;
mod instance;
mod snapshot;
pub use input::{DropReason, LagPoint, NodeChange, NodeObservation, StragglerPoint};
use instance::cost_instance;
pub use snapshot::{BarrierRow, CostSnapshot, StragglerRow};

#[cfg(test)]
mod tests;
