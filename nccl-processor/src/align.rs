//! Alignment: gathering the points of one collective instance from every rank.
//!
//! Two ways, chosen per point:
//! - **exact**: the point carries `nccl.op_seq`; the instance key is `(comm, op_seq)`
//!   ([`ExactInstances`]);
//! - **time bucket**: no sequence number; the key is `(comm, op_type, floor(t / window))`
//!   with skew tolerance ([`TimeBuckets`], rules in its docs).
//!
//! Both keep the set of recently *closed* keys ([`ClosedKeys`]) so a point that arrives
//! after its instance was emitted (or discarded) is counted as late instead of opening a
//! new, lonely instance. Nothing here knows about OTLP, clusters or locks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use component::Timestamp;

/// One rank's entry into one collective instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub rank: u32,
    /// Entry time on the cluster-aligned axis (Unix ns; estimated for monotonic clocks).
    pub t: i64,
    /// True when `t` came from the rank's wall clock, false when it was estimated from a
    /// monotonic timestamp and the node's offset.
    pub wall: bool,
    /// Monotonic entries: the node clock's generation the offset came from.
    pub clock_gen: u16,
    /// Monotonic entries: the node clock's epoch the offset came from.
    pub clock_epoch: u16,
    /// Monotonic entries: the node's offset was not refined yet (lag not emitted).
    pub calibrating: bool,
}

impl Entry {
    /// An entry with a wall-clock time.
    pub fn wall(rank: u32, t: i64) -> Self {
        Entry {
            rank,
            t,
            wall: true,
            clock_gen: 0,
            clock_epoch: 0,
            calibrating: false,
        }
    }
}

/// The points gathered so far for one collective instance.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Host arrival time of the first point (grace period runs from here).
    pub opened_at: Timestamp,
    pub nranks: u32,
    /// Index of the operation type in the configured list.
    pub op: u8,
    pub entries: Vec<Entry>,
    seen: Vec<u64>,
}

impl Instance {
    pub fn new(opened_at: Timestamp, nranks: u32, op: u8) -> Self {
        Instance {
            opened_at,
            nranks,
            op,
            entries: Vec::new(),
            seen: vec![0; (nranks as usize).div_ceil(64)],
        }
    }

    pub fn has(&self, rank: u32) -> bool {
        let r = rank as usize;
        self.seen
            .get(r / 64)
            .is_some_and(|w| w & (1u64 << (r % 64)) != 0)
    }

    /// Add an entry. The caller checked `!has(rank)` and `rank < nranks`; an out-of-range
    /// rank is refused (returns false) rather than trusted.
    pub fn push(&mut self, e: Entry) -> bool {
        if e.rank >= self.nranks {
            return false;
        }
        let r = e.rank as usize;
        match self.seen.get_mut(r / 64) {
            Some(w) if *w & (1u64 << (r % 64)) == 0 => {
                *w |= 1u64 << (r % 64);
                self.entries.push(e);
                true
            }
            _ => false,
        }
    }

    fn remove_where(&mut self, mut pred: impl FnMut(&Entry) -> bool) -> Vec<Entry> {
        let mut moved = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            if pred(&self.entries[i]) {
                let e = self.entries.swap_remove(i);
                let r = e.rank as usize;
                if let Some(w) = self.seen.get_mut(r / 64) {
                    *w &= !(1u64 << (r % 64));
                }
                moved.push(e);
            } else {
                i += 1;
            }
        }
        moved
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn is_complete(&self) -> bool {
        self.entries.len() >= self.nranks as usize
    }

    /// True when every entry came from a wall clock (the instance time is then known).
    pub fn all_wall(&self) -> bool {
        self.entries.iter().all(|e| e.wall)
    }
}

/// Per-cluster budget shared by every communicator of the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub open_instances: usize,
    pub max_open_instances: usize,
    pub buffered_points: usize,
    pub max_buffered_points: usize,
}

impl Budget {
    fn can_buffer(&self) -> bool {
        self.buffered_points < self.max_buffered_points
    }

    fn can_open(&self) -> bool {
        self.open_instances < self.max_open_instances && self.can_buffer()
    }
}

/// Where a point went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// Added to the open instance with this key.
    Added { key: i64 },
    /// Its instance was already emitted or discarded.
    Late,
    /// The instance already holds a point of this rank.
    Duplicate,
    /// Exact alignment: the same `op_seq` was seen with another operation type.
    OpMismatch,
    /// The cluster's open-instance or buffered-point cap is full.
    CapBuckets,
}

/// Ring size of [`ClosedKeys`]: keys this far below the newest closed key count as closed.
pub const CLOSED_RING: i64 = 4096;
const RING_WORDS: usize = (CLOSED_RING as usize) / 64;

/// The recently closed keys of one stream, as a ring bitmap anchored at the largest closed
/// key. Keys more than [`CLOSED_RING`] below it are treated as closed (too old to merge).
#[derive(Debug, Clone)]
pub struct ClosedKeys {
    max: Option<i64>,
    bits: Box<[u64; RING_WORDS]>,
}

impl Default for ClosedKeys {
    fn default() -> Self {
        ClosedKeys {
            max: None,
            bits: Box::new([0; RING_WORDS]),
        }
    }
}

impl ClosedKeys {
    fn slot(k: i64) -> (usize, u64) {
        let i = k.rem_euclid(CLOSED_RING) as usize;
        (i / 64, 1u64 << (i % 64))
    }

    pub fn is_closed(&self, k: i64) -> bool {
        match self.max {
            None => false,
            Some(m) if k > m => false,
            Some(m) if m.saturating_sub(k) >= CLOSED_RING => true,
            Some(_) => {
                let (w, b) = Self::slot(k);
                self.bits[w] & b != 0
            }
        }
    }

    pub fn close(&mut self, k: i64) {
        match self.max {
            Some(m) if k <= m => {
                if m.saturating_sub(k) < CLOSED_RING {
                    let (w, b) = Self::slot(k);
                    self.bits[w] |= b;
                }
            }
            Some(m) => {
                let gap = k.saturating_sub(m);
                if gap >= CLOSED_RING {
                    self.bits.fill(0);
                } else {
                    for j in (m + 1)..=k {
                        let (w, b) = Self::slot(j);
                        self.bits[w] &= !b;
                    }
                }
                self.max = Some(k);
                let (w, b) = Self::slot(k);
                self.bits[w] |= b;
            }
            None => {
                self.max = Some(k);
                let (w, b) = Self::slot(k);
                self.bits[w] |= b;
            }
        }
    }
}

/// A fast hasher for integer keys (instance keys are not attacker-chosen in a way that
/// matters: every map they index is capped).
#[derive(Debug, Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // splitmix64 finaliser
        let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }

    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }
}

pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Open instances keyed by `op_seq` (exact alignment), for one communicator.
#[derive(Debug, Default)]
pub struct ExactInstances {
    pub open: IntMap<i64, Instance>,
    pub closed: ClosedKeys,
}

impl ExactInstances {
    pub fn insert(
        &mut self,
        seq: i64,
        op: u8,
        nranks: u32,
        e: Entry,
        now: Timestamp,
        budget: &mut Budget,
    ) -> Placed {
        if self.closed.is_closed(seq) {
            return Placed::Late;
        }
        if let Some(inst) = self.open.get_mut(&seq) {
            if inst.op != op {
                return Placed::OpMismatch;
            }
            if inst.has(e.rank) {
                return Placed::Duplicate;
            }
            if !budget.can_buffer() {
                return Placed::CapBuckets;
            }
            if inst.push(e) {
                budget.buffered_points += 1;
            }
            return Placed::Added { key: seq };
        }
        if !budget.can_open() {
            return Placed::CapBuckets;
        }
        let mut inst = Instance::new(now, nranks, op);
        if inst.push(e) {
            budget.buffered_points += 1;
        }
        budget.open_instances += 1;
        self.open.insert(seq, inst);
        Placed::Added { key: seq }
    }

    /// Remove an open instance and mark its key closed.
    pub fn take(&mut self, seq: i64, budget: &mut Budget) -> Option<Instance> {
        let inst = self.open.remove(&seq)?;
        self.closed.close(seq);
        release(budget, &inst);
        Some(inst)
    }

    pub fn get(&self, seq: i64) -> Option<&Instance> {
        self.open.get(&seq)
    }
}

/// The time-bucket grid: bucket `k` covers `[k * window, (k + 1) * window)`; its first
/// `skew` nanoseconds are the *straddle zone*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRule {
    pub window_ns: i64,
    pub skew_ns: i64,
}

impl BucketRule {
    /// The bucket a time falls in by the grid alone.
    pub fn natural_key(&self, t: i64) -> i64 {
        t.div_euclid(self.window_ns.max(1))
    }

    /// True when `t` lies in the straddle zone of bucket `k`.
    pub fn in_zone(&self, t: i64, k: i64) -> bool {
        let start = k.saturating_mul(self.window_ns);
        t >= start && t.saturating_sub(start) < self.skew_ns
    }
}

/// Open time buckets of one `(comm, op_type)` stream.
///
/// Rules, applied to a point at time `t` of rank `r` with natural bucket `k`:
/// 1. **Skew tolerance**: if `t` is in the straddle zone of `k` (less than
///    `skew_tolerance_fraction * window` past the boundary), and bucket `k - 1` is open (not
///    emitted yet) and has no point of rank `r`, the point joins `k - 1`.
/// 2. Otherwise, if bucket `k` was already closed, the point is late.
/// 3. Otherwise it joins bucket `k` (a second point of rank `r` there is a duplicate), or
///    opens it.
/// 4. **Arrival-order repair**: when bucket `k` is opened and bucket `k + 1` is open, the
///    points of `k + 1` in its straddle zone whose rank is not in `k` move to `k`. Without
///    this, a late rank whose batch arrives before its peers' would open `k + 1` alone and
///    split the collective into two under-quorum buckets.
///
/// Guarantee (property tests in `tests/bucket_props.rs`): a collective whose entries span
/// less than the skew tolerance is never split, whatever the arrival order, and never
/// shares a bucket with another collective, as long as consecutive collectives of the
/// stream start at least `3 * window` apart. Closer collectives can collide (counted as
/// `duplicate`); only `nccl.op_seq` aligns dense collective streams reliably.
#[derive(Debug, Default)]
pub struct TimeBuckets {
    pub open: IntMap<i64, Instance>,
    pub closed: ClosedKeys,
}

impl TimeBuckets {
    pub fn insert(
        &mut self,
        rule: BucketRule,
        op: u8,
        nranks: u32,
        e: Entry,
        now: Timestamp,
        budget: &mut Budget,
    ) -> Placed {
        let k = rule.natural_key(e.t);
        if rule.in_zone(e.t, k)
            && let Some(prev) = self.open.get_mut(&(k - 1))
            && !prev.has(e.rank)
        {
            if !budget.can_buffer() {
                return Placed::CapBuckets;
            }
            if prev.push(e) {
                budget.buffered_points += 1;
            }
            return Placed::Added { key: k - 1 };
        }
        if self.closed.is_closed(k) {
            return Placed::Late;
        }
        if let Some(b) = self.open.get_mut(&k) {
            if b.has(e.rank) {
                return Placed::Duplicate;
            }
            if !budget.can_buffer() {
                return Placed::CapBuckets;
            }
            if b.push(e) {
                budget.buffered_points += 1;
            }
            return Placed::Added { key: k };
        }
        if !budget.can_open() {
            return Placed::CapBuckets;
        }
        let mut inst = Instance::new(now, nranks, op);
        if inst.push(e) {
            budget.buffered_points += 1;
        }
        budget.open_instances += 1;
        if let Some(next) = self.open.get_mut(&(k + 1)) {
            let moved = next.remove_where(|x| rule.in_zone(x.t, k + 1) && !inst.has(x.rank));
            if !moved.is_empty() {
                inst.opened_at = inst.opened_at.min(next.opened_at);
            }
            for m in moved {
                inst.push(m);
            }
            if next.is_empty() {
                self.open.remove(&(k + 1));
                budget.open_instances = budget.open_instances.saturating_sub(1);
            }
        }
        self.open.insert(k, inst);
        Placed::Added { key: k }
    }

    pub fn get(&self, key: i64) -> Option<&Instance> {
        self.open.get(&key)
    }

    /// Remove an open bucket and mark its key closed.
    pub fn take(&mut self, key: i64, budget: &mut Budget) -> Option<Instance> {
        let inst = self.open.remove(&key)?;
        self.closed.close(key);
        release(budget, &inst);
        Some(inst)
    }
}

fn release(budget: &mut Budget, inst: &Instance) {
    budget.open_instances = budget.open_instances.saturating_sub(1);
    budget.buffered_points = budget.buffered_points.saturating_sub(inst.len());
}

/// Keys of open instances whose grace period has run out at `now`, oldest key first.
pub fn expired_keys(open: &IntMap<i64, Instance>, now: Timestamp, grace_ns: u64) -> Vec<i64> {
    let mut keys: Vec<i64> = open
        .iter()
        .filter(|(_, inst)| now.as_nanos().saturating_sub(inst.opened_at.as_nanos()) >= grace_ns)
        .map(|(k, _)| *k)
        .collect();
    keys.sort_unstable();
    keys
}

#[cfg(test)]
mod tests;
