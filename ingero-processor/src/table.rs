//! The push-side store of one cluster: every node's latest score, state, cohort and
//! last-seen time, in a slab indexed by node id. The push path does one hash lookup and a
//! few stores; the tick copies compact [`NodeSample`]s out and computes without the lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Node state as the agent reports it in `ingero.node.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    Active,
    Idle,
    Calibrating,
}

impl NodeState {
    pub fn parse(s: &str) -> Option<NodeState> {
        use component::wire::state;
        match s {
            state::ACTIVE => Some(NodeState::Active),
            state::IDLE => Some(NodeState::Idle),
            state::CALIBRATING => Some(NodeState::Calibrating),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        use component::wire::state;
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

/// A node-record budget shared by every cluster (`limits.max_nodes_total`).
#[derive(Debug)]
pub struct NodeBudget {
    used: AtomicUsize,
    max: usize,
}

impl NodeBudget {
    pub fn new(max: usize) -> Self {
        NodeBudget {
            used: AtomicUsize::new(0),
            max,
        }
    }

    fn try_take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < self.max).then_some(u + 1)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
        }
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
}

/// The hot part of a node (24 bytes); its id lives in a parallel vector so the tick's
/// copy-out reads only these.
#[derive(Debug, Clone)]
struct NodeRecord {
    score: f64,
    last_seen: u64,
    generation: u32,
    cohort: CohortId,
    state: NodeState,
    occupied: bool,
}

const LIVE: u8 = 1;
const STRAGGLER: u8 = 2;
const VACANT: u8 = 4;

/// A compact copy of one table slot for the tick (16 bytes: the tick makes several passes
/// over these). Samples are dense: sample `i` is table slot `i`, and a free slot is a
/// vacant sample. The straggler flag is set by the tick computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeSample {
    pub score: f64,
    pub generation: u32,
    pub cohort: CohortId,
    pub state: NodeState,
    flags: u8,
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
            generation,
            cohort,
            state,
            flags: if live { LIVE } else { 0 },
        }
    }

    /// A free slot.
    pub fn vacant() -> Self {
        NodeSample {
            score: 0.0,
            generation: 0,
            cohort: CLUSTER_WIDE_COHORT,
            state: NodeState::Idle,
            flags: VACANT,
        }
    }

    pub fn is_vacant(&self) -> bool {
        self.flags & VACANT != 0
    }

    pub fn live(&self) -> bool {
        self.flags & LIVE != 0
    }

    pub fn straggler(&self) -> bool {
        self.flags & STRAGGLER != 0
    }

    pub fn set_live(&mut self, live: bool) {
        self.set(LIVE, live);
    }

    pub fn set_straggler(&mut self, straggler: bool) {
        self.set(STRAGGLER, straggler);
    }

    fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.flags |= bit;
        } else {
            self.flags &= !bit;
        }
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
        match (s.live(), s.state) {
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
}

impl Default for NodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeTable {
    pub fn new() -> Self {
        NodeTable {
            index: HashMap::new(),
            slots: Vec::new(),
            ids: Vec::new(),
            free: Vec::new(),
            cohorts: CohortInterner::new(),
            evictable_hint: 0,
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
            rec.score = u.score;
            rec.state = u.state;
            rec.last_seen = u.received_at;
            let mut cohort_capped = false;
            if limits.cohorts_enabled {
                let current = rec.cohort;
                let same = self
                    .cohorts
                    .name(current)
                    .is_some_and(|n| n.as_ref() == u.cohort);
                if !same {
                    self.cohorts.release(current);
                    let id = self.cohorts.acquire(u.cohort, limits.max_cohorts);
                    cohort_capped = id.is_none();
                    if let Some(rec) = self.slots.get_mut(slot as usize) {
                        rec.cohort = id.unwrap_or(CLUSTER_WIDE_COHORT);
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
        if !budget.try_take()
            && (!self.evict_one(u.received_at.saturating_sub(limits.ttl_nanos), budget)
                || !budget.try_take())
        {
            return RecordOutcome::TotalCap;
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
                    budget.give_back(1);
                    return RecordOutcome::NodeCap;
                };
                self.slots.push(NodeRecord {
                    score: 0.0,
                    last_seen: 0,
                    generation: 0,
                    cohort: CLUSTER_WIDE_COHORT,
                    state: NodeState::Idle,
                    occupied: false,
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
            rec.occupied = true;
            rec.generation = rec.generation.wrapping_add(1);
            rec.score = u.score;
            rec.last_seen = u.received_at;
            rec.state = u.state;
            rec.cohort = cohort;
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
            .position(|r| r.occupied && r.last_seen < cutoff);
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
        rec.occupied = false;
        if let Some(id) = slot_id.take() {
            let cohort = rec.cohort;
            self.index.remove(&id);
            self.cohorts.release(cohort);
            if let Ok(slot) = u32::try_from(slot) {
                self.free.push(slot);
            }
            budget.give_back(1);
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
        // Work on owned locals: with no aliasing through `&mut`, the vectors' lengths stay
        // in registers and each push is a store plus a predictable capacity check.
        let mut samples = std::mem::take(out);
        let mut scores = std::mem::take(active_scores);
        samples.clear();
        samples.reserve(self.slots.len());
        scores.clear();
        scores.reserve(self.index.len());
        let mut counts = NodeCounts::default();
        let mut evictable = 0usize;
        let mut forget = Vec::new();
        for (slot, rec) in self.slots.iter().enumerate() {
            if !rec.occupied {
                samples.push(NodeSample::vacant());
                continue;
            }
            let age = now.saturating_sub(rec.last_seen);
            if age > forget_nanos {
                forget.push(slot);
                samples.push(NodeSample::vacant());
                continue;
            }
            let live = age <= ttl_nanos;
            evictable += usize::from(!live);
            let sample = NodeSample::new(rec.generation, rec.score, rec.cohort, rec.state, live);
            if counts.add(&sample) {
                scores.push(rec.score);
            }
            samples.push(sample);
        }
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
            .filter(|r| r.occupied && r.generation == generation)?;
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
            .map(|(slot, s)| t.node_id(slot, s.generation).unwrap().to_string())
            .collect();
        assert!(!ids.contains(&"old".to_string()));
        assert!(ids.contains(&"d".to_string()));
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
            let id = t.node_id(slot, s.generation).unwrap();
            let cohort = names[s.cohort as usize].as_deref().unwrap();
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
    fn cohorts_disabled_store_no_keys() {
        let b = NodeBudget::new(100);
        let mut t = NodeTable::new();
        let mut l = limits();
        l.cohorts_enabled = false;
        t.record(&up("a", "h1", 0.9, 0), &l, &b);
        assert_eq!(t.cohort_count(), 0);
        assert_eq!(snap(&mut t, 0, &b)[0].cohort, CLUSTER_WIDE_COHORT);
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
        assert_ne!(first.generation, second[0].generation);
        assert_eq!(t.node_id(0, first.generation), None);
        assert_eq!(t.node_id(0, second[0].generation).as_deref(), Some("z"));
    }
}
