//! The push-side store of one cluster: every node's latest score, state, cohort and
//! last-seen time, in a slab indexed by node id. The push path does one hash lookup and a
//! few stores; the tick copies compact [`NodeSample`]s out and computes without the lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Node state as the agent reports it in `ingero.node.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NodeState {
    Active = 0,
    Idle = 1,
    Calibrating = 2,
}

impl NodeState {
    #[inline]
    fn from_u8(v: u8) -> NodeState {
        match v {
            0 => NodeState::Active,
            1 => NodeState::Idle,
            _ => NodeState::Calibrating,
        }
    }

    pub fn parse(s: &str) -> Option<NodeState> {
        use ingero_wire::state;
        match s {
            state::ACTIVE => Some(NodeState::Active),
            state::IDLE => Some(NodeState::Idle),
            state::CALIBRATING => Some(NodeState::Calibrating),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        use ingero_wire::state;
        match self {
            NodeState::Active => state::ACTIVE,
            NodeState::Idle => state::IDLE,
            NodeState::Calibrating => state::CALIBRATING,
        }
    }
}

/// An interned cohort key within one cluster (`cohorts.max_per_cluster` <= 65535).
pub type CohortId = u16;

/// The cohort id of the cluster-wide cohort (empty `ingero.cgroup_path_hash`, or cohort
/// grouping disabled, or the cohort cap reached).
pub const CLUSTER_WIDE_COHORT: CohortId = 0;

/// A node-record budget shared by every cluster (`limits.max_nodes_total`), with a share
/// reserved for each cluster (`limits.reserved_nodes_per_cluster`): a cluster's first
/// `reserved` nodes never count against the shared pool, so no cluster (or tenant) filling
/// the pool can refuse another cluster's first `reserved` nodes. The pool is what the
/// reservations of `max_clusters` clusters leave of `max_nodes_total`, so the total never
/// exceeds `max_nodes_total`. Which part a node uses depends only on its cluster's count
/// (the first `reserved` are reserved), so taking and giving back stay consistent.
///
/// The records one tenant's clusters take from the pool together are bounded too
/// (`limits.max_pool_nodes_per_tenant`), so one tenant filling nodes as fast as it may
/// always leaves part of the pool to the others' clusters beyond their reserve.
#[derive(Debug)]
pub struct NodeBudget {
    used: AtomicUsize,
    shared_used: AtomicUsize,
    shared_max: usize,
    reserved: usize,
    per_tenant: usize,
}

/// The pool records the clusters of one tenant hold together; every table of a cluster
/// that tenant created holds the same counter.
pub type TenantNodes = Arc<AtomicUsize>;

/// Why a record could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// The shared pool (`max_nodes_total`) is used up.
    Total,
    /// The cluster's tenant holds its share of the pool.
    Tenant,
}

impl NodeBudget {
    /// A budget of `max` records, all shared (no reservation, no tenant share).
    pub fn new(max: usize) -> Self {
        NodeBudget::with_reserve(max, 0, 0)
    }

    /// `max` records in all, `reserved` of them set aside for each of up to `clusters`
    /// clusters (the caller validates `reserved * clusters <= max`).
    pub fn with_reserve(max: usize, reserved: usize, clusters: usize) -> Self {
        NodeBudget {
            used: AtomicUsize::new(0),
            shared_used: AtomicUsize::new(0),
            shared_max: max.saturating_sub(reserved.saturating_mul(clusters)),
            reserved,
            per_tenant: usize::MAX,
        }
    }

    /// At most `per_tenant` pool records for the clusters of one tenant together.
    pub fn with_tenant_share(mut self, per_tenant: usize) -> Self {
        self.per_tenant = per_tenant;
        self
    }

    /// Records of the shared pool (what the reservations leave of the total).
    pub fn pool(&self) -> usize {
        self.shared_max
    }

    /// Take a record for a new node of a cluster holding `held` nodes, whose tenant holds
    /// `tenant` pool records.
    fn try_take(&self, held: usize, tenant: &AtomicUsize) -> Result<(), Refused> {
        if held >= self.reserved {
            self.shared_used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    (u < self.shared_max).then_some(u + 1)
                })
                .map_err(|_| Refused::Total)?;
            if tenant
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    (u < self.per_tenant).then_some(u + 1)
                })
                .is_err()
            {
                self.shared_used.fetch_sub(1, Ordering::AcqRel);
                return Err(Refused::Tenant);
            }
        }
        self.used.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Give back the record of one node of a cluster that held `held` nodes with it.
    fn give_back(&self, held: usize, tenant: &AtomicUsize) {
        if held == 0 {
            return;
        }
        if held > self.reserved {
            self.shared_used.fetch_sub(1, Ordering::AcqRel);
            tenant.fetch_sub(1, Ordering::AcqRel);
        }
        self.used.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Caps and switches the table applies on the push path.
#[derive(Debug, Clone, Copy)]
pub struct TableLimits {
    pub max_nodes: usize,
    pub max_cohorts: usize,
    pub cohorts_enabled: bool,
    /// Records older than this (ns) may be evicted to make room at the node cap.
    pub ttl_nanos: u64,
}

/// One accepted health-score point.
#[derive(Debug, Clone, Copy)]
pub struct ScoreUpdate<'a> {
    pub node_id: &'a str,
    pub cohort: &'a str,
    pub score: f64,
    pub state: NodeState,
    pub received_at: u64,
}

/// What happened to one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Stored. `cohort_capped` when its cohort was folded into the cluster-wide one.
    Stored { cohort_capped: bool },
    /// A newer point for this node was already stored; this one was ignored.
    Superseded,
    /// New node refused: `limits.max_nodes_per_cluster` reached.
    NodeCap,
    /// New node refused: `limits.max_nodes_total` reached.
    TotalCap,
    /// New node refused: the cluster's tenant holds `limits.max_pool_nodes_per_tenant`.
    TenantCap,
}

/// The hot part of a node (24 bytes); its id lives in a parallel vector so the tick's
/// copy-out reads only these. The record holds its tick sample ready-made (flags: `VACANT`
/// for a free slot, else 0), so the copy-out is one 16-byte copy plus the live bit.
#[derive(Debug, Clone)]
struct NodeRecord {
    sample: NodeSample,
    last_seen: u64,
}

impl NodeRecord {
    fn occupied(&self) -> bool {
        !self.sample.is_vacant()
    }
}

const LIVE: u64 = 1;
const STRAGGLER: u64 = 2;
const VACANT: u64 = 4;

// `NodeSample::meta` layout: generation in bits 0..32, cohort 32..48, state 48..56, flags
// 56..64.
const COHORT_SHIFT: u32 = 32;
const STATE_SHIFT: u32 = 48;
const FLAGS_SHIFT: u32 = 56;
const FLAGS_MASK: u64 = 0xff << FLAGS_SHIFT;

/// A compact copy of one table slot for the tick (16 bytes: the tick makes several passes
/// over these). Samples are dense: sample `i` is table slot `i`, and a free slot is a
/// vacant sample. The straggler flag is set by the tick computation.
///
/// Everything but the score is packed into one word, so copying a sample is two moves
/// (a struct of five fields is copied field by field).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeSample {
    pub score: f64,
    meta: u64,
}

impl NodeSample {
    /// An occupied slot. `live`: within the TTL (takes part in the statistic when active).
    pub fn new(
        generation: u32,
        score: f64,
        cohort: CohortId,
        state: NodeState,
        live: bool,
    ) -> Self {
        NodeSample {
            score,
            meta: u64::from(generation)
                | u64::from(cohort) << COHORT_SHIFT
                | (state as u64) << STATE_SHIFT
                | (u64::from(live) * LIVE) << FLAGS_SHIFT,
        }
    }

    /// A free slot.
    pub fn vacant() -> Self {
        NodeSample {
            score: 0.0,
            meta: (NodeState::Idle as u64) << STATE_SHIFT | VACANT << FLAGS_SHIFT,
        }
    }

    /// The slot's occupant (a new occupant of the same slot has the next generation).
    #[inline]
    pub fn generation(&self) -> u32 {
        self.meta as u32
    }

    #[inline]
    pub fn cohort(&self) -> CohortId {
        (self.meta >> COHORT_SHIFT) as CohortId
    }

    #[inline]
    pub fn state(&self) -> NodeState {
        NodeState::from_u8((self.meta >> STATE_SHIFT) as u8)
    }

    pub fn set_generation(&mut self, generation: u32) {
        self.meta = (self.meta & !0xffff_ffff) | u64::from(generation);
    }

    pub fn set_cohort(&mut self, cohort: CohortId) {
        self.meta = (self.meta & !(0xffff << COHORT_SHIFT)) | u64::from(cohort) << COHORT_SHIFT;
    }

    pub fn set_state(&mut self, state: NodeState) {
        self.meta = (self.meta & !(0xff << STATE_SHIFT)) | (state as u64) << STATE_SHIFT;
    }

    #[inline]
    fn flags(&self) -> u64 {
        self.meta >> FLAGS_SHIFT
    }

    /// Replace every flag (the snapshot: an occupied record becomes live or not).
    #[inline]
    fn set_flags(&mut self, flags: u64) {
        self.meta = (self.meta & !FLAGS_MASK) | flags << FLAGS_SHIFT;
    }

    #[inline]
    pub fn is_vacant(&self) -> bool {
        self.flags() & VACANT != 0
    }

    #[inline]
    pub fn live(&self) -> bool {
        self.flags() & LIVE != 0
    }

    #[inline]
    pub fn straggler(&self) -> bool {
        self.flags() & STRAGGLER != 0
    }

    /// Occupied, live and active: the sample enters the statistic and is classified.
    #[inline]
    pub fn live_active(&self) -> bool {
        let both = ((LIVE | VACANT) << FLAGS_SHIFT) | (0xff << STATE_SHIFT);
        let want = (LIVE << FLAGS_SHIFT) | (NodeState::Active as u64) << STATE_SHIFT;
        self.meta & both == want
    }

    /// Occupied, live, active and not flagged as a straggler (one mask compare).
    #[inline]
    pub fn live_active_unflagged(&self) -> bool {
        let both = ((LIVE | VACANT | STRAGGLER) << FLAGS_SHIFT) | (0xff << STATE_SHIFT);
        let want = (LIVE << FLAGS_SHIFT) | (NodeState::Active as u64) << STATE_SHIFT;
        self.meta & both == want
    }

    /// [`Self::live_active_unflagged`] and in cohort `cohort` (one mask compare).
    #[inline]
    pub fn live_active_unflagged_in(&self, cohort: CohortId) -> bool {
        let both = ((LIVE | VACANT | STRAGGLER) << FLAGS_SHIFT)
            | (0xff << STATE_SHIFT)
            | (0xffff << COHORT_SHIFT);
        let want = (LIVE << FLAGS_SHIFT)
            | (NodeState::Active as u64) << STATE_SHIFT
            | u64::from(cohort) << COHORT_SHIFT;
        self.meta & both == want
    }

    pub fn set_live(&mut self, live: bool) {
        self.set(LIVE, live);
    }

    pub fn set_straggler(&mut self, straggler: bool) {
        self.set(STRAGGLER, straggler);
    }

    fn set(&mut self, bit: u64, on: bool) {
        let f = self.flags();
        self.set_flags(if on { f | bit } else { f & !bit });
    }
}

/// Node counts of one tick's samples.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeCounts {
    pub active: u64,
    pub idle: u64,
    pub calibrating: u64,
    /// Past the TTL, within the expected window, last state not idle.
    pub silent: u64,
}

impl NodeCounts {
    /// Count one sample; true when it is active and live, i.e. enters the statistic.
    pub fn add(&mut self, s: &NodeSample) -> bool {
        if s.is_vacant() {
            return false;
        }
        match (s.live(), s.state()) {
            (true, NodeState::Active) => {
                self.active += 1;
                return true;
            }
            (true, NodeState::Idle) => self.idle += 1,
            (true, NodeState::Calibrating) => self.calibrating += 1,
            (false, NodeState::Idle) => {}
            (false, _) => self.silent += 1,
        }
        false
    }
}

/// Interned cohort keys with reference counts; id 0 is the cluster-wide cohort.
#[derive(Debug)]
struct CohortInterner {
    ids: HashMap<Arc<str>, CohortId>,
    names: Vec<Option<Arc<str>>>,
    refs: Vec<u64>,
    free: Vec<CohortId>,
}

impl CohortInterner {
    fn new() -> Self {
        CohortInterner {
            ids: HashMap::new(),
            names: vec![Some(Arc::from(""))],
            refs: vec![0],
            free: Vec::new(),
        }
    }

    /// Id for `name`, taking a reference; `None` when a new key would exceed `max`.
    fn acquire(&mut self, name: &str, max: usize) -> Option<CohortId> {
        if name.is_empty() {
            return Some(CLUSTER_WIDE_COHORT);
        }
        if let Some(&id) = self.ids.get(name) {
            if let Some(r) = self.refs.get_mut(id as usize) {
                *r += 1;
            }
            return Some(id);
        }
        if self.ids.len() >= max {
            return None;
        }
        let name: Arc<str> = Arc::from(name);
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                let id = CohortId::try_from(self.names.len()).ok()?;
                self.names.push(None);
                self.refs.push(0);
                id
            }
        };
        if let (Some(n), Some(r)) = (
            self.names.get_mut(id as usize),
            self.refs.get_mut(id as usize),
        ) {
            *n = Some(name.clone());
            *r = 1;
        }
        self.ids.insert(name, id);
        Some(id)
    }

    fn release(&mut self, id: CohortId) {
        if id == CLUSTER_WIDE_COHORT {
            return;
        }
        let Some(r) = self.refs.get_mut(id as usize) else {
            return;
        };
        *r = r.saturating_sub(1);
        if *r == 0
            && let Some(slot) = self.names.get_mut(id as usize)
            && let Some(name) = slot.take()
        {
            self.ids.remove(&name);
            self.free.push(id);
        }
    }

    fn name(&self, id: CohortId) -> Option<&Arc<str>> {
        self.names.get(id as usize).and_then(Option::as_ref)
    }

    fn len(&self) -> usize {
        self.ids.len()
    }
}

/// What the snapshot records about slots that are not live and active: other states,
/// expiry, free slots.
#[derive(Debug, Default)]
struct RareSlots {
    /// Everything but `active` (the snapshot counts those itself).
    counts: NodeCounts,
    evictable: usize,
    forget: Vec<usize>,
}

impl RareSlots {
    /// `sample`: the slot's stored sample with this tick's live flag.
    #[cold]
    #[inline(never)]
    fn note(&mut self, slot: usize, sample: NodeSample, forgotten: bool, out: &mut NodeSample) {
        if sample.is_vacant() {
            *out = NodeSample::vacant();
            return;
        }
        if forgotten {
            self.forget.push(slot);
            *out = NodeSample::vacant();
            return;
        }
        self.evictable += usize::from(!sample.live());
        self.counts.add(&sample);
        *out = sample;
    }
}

/// Every node of one cluster.
#[derive(Debug)]
pub struct NodeTable {
    index: HashMap<Arc<str>, u32>,
    slots: Vec<NodeRecord>,
    /// Node id per slot (`None` for a free slot), parallel to `slots`.
    ids: Vec<Option<Arc<str>>>,
    free: Vec<u32>,
    cohorts: CohortInterner,
    /// Records past their TTL at the last tick (eviction candidates at the node cap).
    evictable_hint: usize,
    /// The pool records of this cluster's tenant (shared with its other clusters).
    tenant: TenantNodes,
}

impl Default for NodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeTable {
    pub fn new() -> Self {
        NodeTable::for_tenant(TenantNodes::default())
    }

    /// A table whose pool records count against `tenant`'s share.
    pub fn for_tenant(tenant: TenantNodes) -> Self {
        NodeTable {
            index: HashMap::new(),
            slots: Vec::new(),
            ids: Vec::new(),
            free: Vec::new(),
            cohorts: CohortInterner::new(),
            evictable_hint: 0,
            tenant,
        }
    }

    /// Node records held (live or remembered).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Distinct non-empty cohort keys held.
    pub fn cohort_count(&self) -> usize {
        self.cohorts.len()
    }

    /// Store one point. Never allocates for a known node whose cohort is unchanged.
    pub fn record(
        &mut self,
        u: &ScoreUpdate<'_>,
        limits: &TableLimits,
        budget: &NodeBudget,
    ) -> RecordOutcome {
        if let Some(&slot) = self.index.get(u.node_id) {
            let Some(rec) = self.slots.get_mut(slot as usize) else {
                return RecordOutcome::Superseded;
            };
            if u.received_at < rec.last_seen {
                return RecordOutcome::Superseded;
            }
            rec.sample.score = u.score;
            rec.sample.set_state(u.state);
            rec.last_seen = u.received_at;
            let mut cohort_capped = false;
            if limits.cohorts_enabled {
                let current = rec.sample.cohort();
                let same = self
                    .cohorts
                    .name(current)
                    .is_some_and(|n| n.as_ref() == u.cohort);
                if !same {
                    self.cohorts.release(current);
                    let id = self.cohorts.acquire(u.cohort, limits.max_cohorts);
                    cohort_capped = id.is_none();
                    if let Some(rec) = self.slots.get_mut(slot as usize) {
                        rec.sample.set_cohort(id.unwrap_or(CLUSTER_WIDE_COHORT));
                    }
                }
            }
            return RecordOutcome::Stored { cohort_capped };
        }

        // A new node.
        if self.index.len() >= limits.max_nodes
            && !self.evict_one(u.received_at.saturating_sub(limits.ttl_nanos), budget)
        {
            return RecordOutcome::NodeCap;
        }
        if let Err(first) = budget.try_take(self.index.len(), &self.tenant) {
            let retried = if self.evict_one(u.received_at.saturating_sub(limits.ttl_nanos), budget)
            {
                budget.try_take(self.index.len(), &self.tenant)
            } else {
                Err(first)
            };
            match retried {
                Ok(()) => {}
                Err(Refused::Total) => return RecordOutcome::TotalCap,
                Err(Refused::Tenant) => return RecordOutcome::TenantCap,
            }
        }
        let (cohort, cohort_capped) = if limits.cohorts_enabled {
            match self.cohorts.acquire(u.cohort, limits.max_cohorts) {
                Some(id) => (id, false),
                None => (CLUSTER_WIDE_COHORT, true),
            }
        } else {
            (CLUSTER_WIDE_COHORT, false)
        };
        let id: Arc<str> = Arc::from(u.node_id);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let Ok(s) = u32::try_from(self.slots.len()) else {
                    budget.give_back(self.index.len() + 1, &self.tenant);
                    return RecordOutcome::NodeCap;
                };
                self.slots.push(NodeRecord {
                    sample: NodeSample::vacant(),
                    last_seen: 0,
                });
                self.ids.push(None);
                s
            }
        };
        if let (Some(rec), Some(slot_id)) = (
            self.slots.get_mut(slot as usize),
            self.ids.get_mut(slot as usize),
        ) {
            *slot_id = Some(id.clone());
            let generation = rec.sample.generation().wrapping_add(1);
            rec.sample = NodeSample::new(generation, u.score, cohort, u.state, false);
            rec.last_seen = u.received_at;
        }
        self.index.insert(id, slot);
        RecordOutcome::Stored { cohort_capped }
    }

    /// Free one record last seen before `cutoff` (past its TTL), if the last tick saw any.
    fn evict_one(&mut self, cutoff: u64, budget: &NodeBudget) -> bool {
        if self.evictable_hint == 0 {
            return false;
        }
        let found = self
            .slots
            .iter()
            .position(|r| r.occupied() && r.last_seen < cutoff);
        match found {
            Some(slot) => {
                self.remove(slot, budget);
                self.evictable_hint -= 1;
                true
            }
            None => {
                self.evictable_hint = 0;
                false
            }
        }
    }

    fn remove(&mut self, slot: usize, budget: &NodeBudget) {
        let (Some(rec), Some(slot_id)) = (self.slots.get_mut(slot), self.ids.get_mut(slot)) else {
            return;
        };
        let cohort = rec.sample.cohort();
        // Keep the generation: the next occupant takes the one after it.
        rec.sample.set_flags(VACANT);
        if let Some(id) = slot_id.take() {
            let held = self.index.len();
            self.index.remove(&id);
            self.cohorts.release(cohort);
            if let Ok(slot) = u32::try_from(slot) {
                self.free.push(slot);
            }
            budget.give_back(held, &self.tenant);
        }
    }

    /// Copy every slot out for a tick at `now`, densely (`out[i]` is slot `i`): records
    /// older than `forget_nanos` are removed (their slot is vacant), records older than
    /// `ttl_nanos` are copied with `live = false`. In the same pass the active live scores
    /// go to `active_scores` and the states are counted. Returns the counts and the number
    /// of removed records. `cohort_names` receives the interned names by id.
    #[allow(clippy::too_many_arguments)]
    pub fn snapshot(
        &mut self,
        now: u64,
        ttl_nanos: u64,
        forget_nanos: u64,
        budget: &NodeBudget,
        out: &mut Vec<NodeSample>,
        active_scores: &mut Vec<f64>,
        cohort_names: &mut Vec<Option<Arc<str>>>,
    ) -> (NodeCounts, usize) {
        // Both outputs are sized up front and written through slices, and everything a
        // healthy slot does not touch (other states, expiry) sits behind one cold call on
        // a struct in memory: `push` or a handful of rarely used counters in the loop would
        // crowd its registers and spill the hot cursors to the stack on every slot.
        // The buffers are reused from the last tick without clearing: every sample is
        // written below (a free or forgotten slot as vacant), and every score up to
        // `active`; only growth initialises (a memset of 2.4 MB per 100k nodes otherwise).
        let n = self.slots.len();
        let mut samples = std::mem::take(out);
        let mut scores = std::mem::take(active_scores);
        samples.resize(n, NodeSample::vacant());
        samples.truncate(n);
        scores.resize(n, 0.0);
        scores.truncate(n);
        let score_slots = scores.as_mut_slice();
        let mut active = 0usize;
        let mut rare = RareSlots::default();
        for ((slot, rec), out) in self.slots.iter().enumerate().zip(samples.iter_mut()) {
            let age = now.saturating_sub(rec.last_seen);
            let live = age <= ttl_nanos;
            // A free slot keeps its `VACANT` flag: it can never pass as live and active.
            let mut sample = rec.sample;
            sample.set_flags(sample.flags() | (u64::from(live) * LIVE));
            if sample.live_active() && age <= forget_nanos {
                if let Some(s) = score_slots.get_mut(active) {
                    *s = sample.score;
                }
                active += 1;
                *out = sample;
            } else {
                rare.note(slot, sample, age > forget_nanos, out);
            }
        }
        scores.truncate(active);
        let RareSlots {
            mut counts,
            evictable,
            forget,
        } = rare;
        counts.active = active as u64;
        *out = samples;
        *active_scores = scores;
        let removed = forget.len();
        for slot in forget {
            self.remove(slot, budget);
        }
        self.evictable_hint = evictable;
        cohort_names.clear();
        cohort_names.extend(self.cohorts.names.iter().cloned());
        (counts, removed)
    }

    /// The id of the node in `slot`, if it is still the same node (`generation`).
    pub fn node_id(&self, slot: usize, generation: u32) -> Option<Arc<str>> {
        self.node_info(slot, generation).map(|(id, _)| id)
    }

    /// The id and last-seen time (ns) of the node in `slot`, if it is still the same node.
    pub fn node_info(&self, slot: usize, generation: u32) -> Option<(Arc<str>, u64)> {
        let rec = self
            .slots
            .get(slot)
            .filter(|r| r.occupied() && r.sample.generation() == generation)?;
        let id = self.ids.get(slot)?.clone()?;
        Some((id, rec.last_seen))
    }

    /// Number of slots (an upper bound on `NodeSample::slot`).
    pub fn slot_capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn limits() -> TableLimits {
        TableLimits {
            max_nodes: 3,
            max_cohorts: 2,
            cohorts_enabled: true,
            ttl_nanos: 50 * SEC,
        }
    }

    fn up<'a>(node: &'a str, cohort: &'a str, score: f64, t: u64) -> ScoreUpdate<'a> {
        ScoreUpdate {
            node_id: node,
            cohort,
            score,
            state: NodeState::Active,
            received_at: t * SEC,
        }
    }

    fn snap(t: &mut NodeTable, now: u64, b: &NodeBudget) -> Vec<NodeSample> {
        let mut out = Vec::new();
        let mut names = Vec::new();
        t.snapshot(
            now * SEC,
            50 * SEC,
            300 * SEC,
            b,
            &mut out,
            &mut Vec::new(),
            &mut names,
        );
        out
    }

    /// The snapshot reuses its output buffers without clearing them: whatever the last
    /// tick left there (flags, other nodes' scores, more slots), the output equals a
    /// snapshot into fresh buffers, free and forgotten slots included.
    #[test]
    fn a_snapshot_into_reused_buffers_equals_one_into_fresh_buffers() {
        let l = TableLimits {
            max_nodes: 100,
            ..limits()
        };
        // 20 nodes at t=10 in three states; at t=300-320 some of them push again (others
        // go stale or are forgotten at t=360) and a new node arrives.
        let build = |b: &NodeBudget| {
            let mut t = NodeTable::new();
            for i in 0..20 {
                let state = [NodeState::Active, NodeState::Idle, NodeState::Calibrating][i % 3];
                let node = format!("n{i}");
                let u = up(&node, ["", "x"][i % 2], 0.5 + i as f64 / 100.0, 10);
                t.record(&ScoreUpdate { state, ..u }, &l, b);
            }
            t
        };
        let later = |t: &mut NodeTable, b: &NodeBudget| {
            for i in 0..20 {
                match i % 4 {
                    0 => t.record(&up(&format!("n{i}"), "", 0.7, 320), &l, b),
                    1 => t.record(&up(&format!("n{i}"), "", 0.6, 300), &l, b),
                    _ => continue,
                };
            }
            t.record(&up("late", "", 0.3, 320), &l, b);
        };
        let take = |t: &mut NodeTable, now: u64, b: &NodeBudget, out: &mut Vec<NodeSample>| {
            let (mut sc, mut names) = (Vec::new(), Vec::new());
            if !out.is_empty() {
                // Dirty score buffer, longer than needed.
                sc = vec![-1.0; out.len() + 30];
            }
            let r = t.snapshot(now * SEC, 50 * SEC, 300 * SEC, b, out, &mut sc, &mut names);
            (r, sc)
        };

        let b1 = NodeBudget::new(100);
        let mut t1 = build(&b1);
        let mut out = Vec::new();
        take(&mut t1, 10, &b1, &mut out);
        for s in out.iter_mut() {
            s.set_straggler(true);
            s.score = -1.0;
        }
        out.extend([NodeSample::new(9, 0.1, 1, NodeState::Active, true); 5]);
        later(&mut t1, &b1);
        let (reused, reused_scores) = take(&mut t1, 360, &b1, &mut out);

        let b2 = NodeBudget::new(100);
        let mut t2 = build(&b2);
        later(&mut t2, &b2);
        let mut fresh_out = Vec::new();
        let (fresh, fresh_scores) = take(&mut t2, 360, &b2, &mut fresh_out);

        assert_eq!(reused, fresh);
        assert!(reused.1 > 0, "some records were forgotten");
        assert_eq!(out, fresh_out);
        assert_eq!(reused_scores, fresh_scores);
        assert!(out.iter().any(|s| s.is_vacant()));
        assert!(out.iter().all(|s| !s.straggler()));
    }

    #[test]
    fn latest_point_wins_and_older_points_are_superseded() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let l = limits();
        assert!(matches!(
            t.record(&up("a", "", 0.9, 10), &l, &b),
            RecordOutcome::Stored { .. }
        ));
        assert!(matches!(
            t.record(&up("a", "", 0.8, 10), &l, &b),
            RecordOutcome::Stored { .. }
        ));
        assert_eq!(
            t.record(&up("a", "", 0.1, 9), &l, &b),
            RecordOutcome::Superseded
        );
        let s = snap(&mut t, 10, &b);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].score, 0.8);
    }

    #[test]
    fn node_cap_refuses_new_nodes_but_not_known_ones() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let l = limits();
        for n in ["a", "b", "c"] {
            t.record(&up(n, "", 0.9, 10), &l, &b);
        }
        assert_eq!(
            t.record(&up("d", "", 0.9, 10), &l, &b),
            RecordOutcome::NodeCap
        );
        assert!(matches!(
            t.record(&up("a", "", 0.9, 11), &l, &b),
            RecordOutcome::Stored { .. }
        ));
        assert_eq!(b.used(), 3);
    }

    #[test]
    fn at_the_cap_a_node_past_its_ttl_gives_its_slot_away() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let l = limits();
        t.record(&up("old", "", 0.9, 0), &l, &b);
        t.record(&up("b", "", 0.9, 40), &l, &b);
        t.record(&up("c", "", 0.9, 40), &l, &b);
        // Before a tick has seen "old" expire, there is no hint: refused.
        assert_eq!(
            t.record(&up("d", "", 0.9, 60), &l, &b),
            RecordOutcome::NodeCap
        );
        let s = snap(&mut t, 60, &b);
        assert_eq!(s.iter().filter(|s| !s.live()).count(), 1);
        assert!(matches!(
            t.record(&up("d", "", 0.9, 60), &l, &b),
            RecordOutcome::Stored { .. }
        ));
        assert_eq!(t.len(), 3);
        assert_eq!(b.used(), 3);
        let ids: Vec<_> = snap(&mut t, 60, &b)
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_vacant())
            .map(|(slot, s)| t.node_id(slot, s.generation()).unwrap().to_string())
            .collect();
        assert!(!ids.contains(&"old".to_string()));
        assert!(ids.contains(&"d".to_string()));
    }

    #[test]
    fn reserved_records_do_not_count_against_the_shared_pool() {
        // 10 in all, 3 reserved for each of 2 clusters: a pool of 4.
        let b = NodeBudget::with_reserve(10, 3, 2);
        let (t1, t2) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // Cluster one: 3 reserved, then 4 from the pool, then refused.
        for held in 0..7 {
            assert_eq!(b.try_take(held, &t1), Ok(()), "held {held}");
        }
        assert_eq!(b.try_take(7, &t1), Err(Refused::Total));
        // Cluster two still has its 3.
        for held in 0..3 {
            assert_eq!(b.try_take(held, &t2), Ok(()));
        }
        assert_eq!(b.try_take(3, &t2), Err(Refused::Total));
        assert_eq!(b.used(), 10);
        // A refused pool record is not left charged to the tenant.
        assert_eq!(
            (t1.load(Ordering::Acquire), t2.load(Ordering::Acquire)),
            (4, 0)
        );
        // Cluster one gives back a pooled record: cluster two may take it.
        b.give_back(7, &t1);
        assert_eq!(b.try_take(3, &t2), Ok(()));
        assert_eq!(b.used(), 10);
        // Giving back reserved records leaves the pool as it is.
        b.give_back(3, &t2);
        assert_eq!(b.try_take(4, &t1), Err(Refused::Total));
        assert_eq!(b.used(), 9);
    }

    #[test]
    fn a_tenant_holds_at_most_its_share_of_the_pool_across_its_clusters() {
        // 20 in all, 2 reserved for each of 4 clusters: a pool of 12, 9 per tenant.
        let b = NodeBudget::with_reserve(20, 2, 4).with_tenant_share(9);
        assert_eq!(b.pool(), 12);
        let l = TableLimits {
            max_nodes: 100,
            ..limits()
        };
        let greedy = TenantNodes::default();
        let (mut g1, mut g2) = (
            NodeTable::for_tenant(greedy.clone()),
            NodeTable::for_tenant(greedy.clone()),
        );
        let mut stored = 0;
        for i in 0..20 {
            for t in [&mut g1, &mut g2] {
                match t.record(&up(&format!("n{i}"), "", 0.9, 0), &l, &b) {
                    RecordOutcome::Stored { .. } => stored += 1,
                    other => assert_eq!(other, RecordOutcome::TenantCap),
                }
            }
        }
        // Both reserves (2 + 2) and the tenant's 9 of the pool.
        assert_eq!(stored, 13);
        assert_eq!(greedy.load(Ordering::Acquire), 9);
        // Another tenant's cluster takes its reserve and the 3 left in the pool.
        let mut other = NodeTable::for_tenant(TenantNodes::default());
        for i in 0..5 {
            assert!(matches!(
                other.record(&up(&format!("o{i}"), "", 0.9, 0), &l, &b),
                RecordOutcome::Stored { .. }
            ));
        }
        assert_eq!(
            other.record(&up("o5", "", 0.9, 0), &l, &b),
            RecordOutcome::TotalCap
        );
        // Forgetting one of the greedy tenant's clusters (2 reserved nodes and 5 of the
        // pool: the two took pool records in turn) gives its pool records back.
        let empty = snap(&mut g1, 10_000, &b);
        assert!(empty.iter().all(|s| s.is_vacant()));
        assert_eq!(greedy.load(Ordering::Acquire), 4);
        assert_eq!(b.used(), 18 - 7);
        assert!(matches!(
            g2.record(&up("again", "", 0.9, 10_000), &l, &b),
            RecordOutcome::Stored { .. }
        ));
    }

    #[test]
    fn the_total_budget_is_shared_and_returned_on_removal() {
        let b = NodeBudget::new(2);
        let l = limits();
        let mut t1 = NodeTable::new();
        let mut t2 = NodeTable::new();
        t1.record(&up("a", "", 0.9, 0), &l, &b);
        t2.record(&up("b", "", 0.9, 0), &l, &b);
        assert_eq!(
            t2.record(&up("c", "", 0.9, 0), &l, &b),
            RecordOutcome::TotalCap
        );
        // Past the forget window the records go and the budget comes back.
        assert!(snap(&mut t1, 301, &b).iter().all(NodeSample::is_vacant));
        assert!(t1.is_empty());
        assert_eq!(b.used(), 1);
        assert!(matches!(
            t2.record(&up("c", "", 0.9, 301), &l, &b),
            RecordOutcome::Stored { .. }
        ));
    }

    #[test]
    fn ttl_and_forget_boundaries() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        t.record(&up("a", "", 0.9, 100), &limits(), &b);
        assert!(snap(&mut t, 150, &b)[0].live(), "age == ttl is still live");
        let mut out = Vec::new();
        let mut names = Vec::new();
        t.snapshot(
            150 * SEC + 1,
            50 * SEC,
            300 * SEC,
            &b,
            &mut out,
            &mut Vec::new(),
            &mut names,
        );
        assert!(!out[0].live(), "age > ttl expires");
        assert!(
            !snap(&mut t, 400, &b)[0].is_vacant(),
            "age == window is remembered"
        );
        t.snapshot(
            400 * SEC + 1,
            50 * SEC,
            300 * SEC,
            &b,
            &mut out,
            &mut Vec::new(),
            &mut names,
        );
        assert!(out[0].is_vacant(), "age > window is forgotten");
        assert!(t.is_empty());
    }

    #[test]
    fn cohorts_are_interned_capped_and_released() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let mut l = limits();
        l.max_nodes = 10;
        t.record(&up("a", "h1", 0.9, 0), &l, &b);
        t.record(&up("b", "h2", 0.9, 0), &l, &b);
        assert_eq!(
            t.record(&up("c", "h3", 0.9, 0), &l, &b),
            RecordOutcome::Stored {
                cohort_capped: true
            }
        );
        assert_eq!(t.cohort_count(), 2);
        // "b" moves to h1: h2 is released, so h3 now fits.
        t.record(&up("b", "h1", 0.9, 1), &l, &b);
        assert_eq!(t.cohort_count(), 1);
        assert_eq!(
            t.record(&up("c", "h3", 0.9, 1), &l, &b),
            RecordOutcome::Stored {
                cohort_capped: false
            }
        );
        let mut out = Vec::new();
        let mut names = Vec::new();
        t.snapshot(
            SEC,
            50 * SEC,
            300 * SEC,
            &b,
            &mut out,
            &mut Vec::new(),
            &mut names,
        );
        for (slot, s) in out.iter().enumerate() {
            let id = t.node_id(slot, s.generation()).unwrap();
            let cohort = names[s.cohort() as usize].as_deref().unwrap();
            let expected = match id.as_ref() {
                "a" | "b" => "h1",
                _ => "h3",
            };
            assert_eq!(cohort, expected);
        }
    }

    #[test]
    fn samples_are_dense_and_vacant_slots_are_marked() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let mut l = limits();
        l.max_nodes = 10;
        t.record(&up("a", "", 0.9, 0), &l, &b);
        t.record(&up("b", "", 0.8, 260), &l, &b);
        t.record(&up("c", "", 0.7, 260), &l, &b);
        let mut out = Vec::new();
        let mut scores = Vec::new();
        let mut names = Vec::new();
        // "a" is forgotten at 301 s: its slot is vacant, the others keep their positions.
        t.record(
            &ScoreUpdate {
                state: NodeState::Idle,
                ..up("c", "", 0.7, 260)
            },
            &l,
            &b,
        );
        let (counts, removed) = t.snapshot(
            301 * SEC,
            50 * SEC,
            300 * SEC,
            &b,
            &mut out,
            &mut scores,
            &mut names,
        );
        assert_eq!(removed, 1);
        assert_eq!(
            counts,
            NodeCounts {
                active: 1,
                idle: 1,
                calibrating: 0,
                silent: 0
            }
        );
        assert_eq!(
            scores,
            vec![0.8],
            "only active live scores enter the statistic"
        );
        assert_eq!(out.len(), 3);
        assert!(out[0].is_vacant() && !out[0].live());
        assert_eq!((out[1].score, out[2].score), (0.8, 0.7));
        assert_eq!(std::mem::size_of::<NodeSample>(), 16);
    }

    #[test]
    fn the_classifier_fast_path_masks_agree_with_the_field_accessors() {
        for state in [NodeState::Active, NodeState::Idle, NodeState::Calibrating] {
            for cohort in [0, 1, CohortId::MAX] {
                for (live, straggler, vacant) in
                    (0..8).map(|b| (b & 1 != 0, b & 2 != 0, b & 4 != 0))
                {
                    let mut s = if vacant {
                        NodeSample::vacant()
                    } else {
                        NodeSample::new(u32::MAX, 0.5, cohort, state, live)
                    };
                    s.set_state(state);
                    s.set_cohort(cohort);
                    s.set_live(live);
                    s.set_straggler(straggler);
                    let unflagged = s.live_active() && !s.straggler();
                    assert_eq!(s.live_active_unflagged(), unflagged, "{s:?}");
                    assert_eq!(s.live_active_unflagged_in(0), unflagged && cohort == 0);
                    assert_eq!(s.live_active_unflagged_in(1), unflagged && cohort == 1);
                }
            }
        }
    }

    #[test]
    fn packed_sample_fields_round_trip_and_only_occupied_live_active_samples_qualify() {
        let mut s = NodeSample::new(u32::MAX, 0.5, CohortId::MAX, NodeState::Calibrating, true);
        assert_eq!(
            (s.generation(), s.cohort(), s.state(), s.live()),
            (u32::MAX, CohortId::MAX, NodeState::Calibrating, true)
        );
        assert!(!s.live_active());
        s.set_state(NodeState::Active);
        assert!(s.live_active());
        s.set_straggler(true);
        assert!(s.live_active() && s.straggler() && !s.is_vacant());
        s.set_generation(7);
        s.set_cohort(3);
        assert_eq!(
            (s.generation(), s.cohort(), s.state()),
            (7, 3, NodeState::Active)
        );
        s.set_live(false);
        assert!(!s.live_active());
        // A free slot never qualifies, even with the live bit set.
        let mut v = NodeSample::vacant();
        v.set_state(NodeState::Active);
        v.set_live(true);
        assert!(v.is_vacant() && !v.live_active());
    }

    #[test]
    fn cohorts_disabled_store_no_keys() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let mut l = limits();
        l.cohorts_enabled = false;
        t.record(&up("a", "h1", 0.9, 0), &l, &b);
        assert_eq!(t.cohort_count(), 0);
        assert_eq!(snap(&mut t, 0, &b)[0].cohort(), CLUSTER_WIDE_COHORT);
    }

    #[test]
    fn a_reused_slot_has_a_new_generation() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let l = limits();
        t.record(&up("a", "", 0.9, 0), &l, &b);
        let first = snap(&mut t, 0, &b)[0];
        snap(&mut t, 1000, &b);
        t.record(&up("z", "", 0.9, 1000), &l, &b);
        let second = snap(&mut t, 1000, &b);
        assert_eq!(second.len(), 1, "the freed slot was reused");
        assert_ne!(first.generation(), second[0].generation());
        assert_eq!(t.node_id(0, first.generation()), None);
        assert_eq!(t.node_id(0, second[0].generation()).as_deref(), Some("z"));
    }
}
