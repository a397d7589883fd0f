//! Interning: every label name and (escaped) label value is stored once and named by a
//! `u32` symbol; every label set (a name-sorted list of symbol pairs) is stored once and
//! named by a `u32` id; every metric family once, named by a `u32` id.
//!
//! Strings live back to back in one arena (`String`) addressed by their end offset, so a
//! symbol costs 4 bytes of offset plus ~5 bytes of hash index plus its text, with no
//! per-string allocation. Label sets live the same way in one `Vec` of pairs. The indexes are
//! `hashbrown::HashTable`s of ids that hash through the arena, so no text is stored twice.
//!
//! Nothing is removed one by one: [`Interner::compact`] rebuilds the tables keeping only
//! what the caller marked live and returns the old-to-new id maps.

use hashbrown::hash_map::HashMap;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use crate::naming::NameKind;
use crate::store::DropReason;

/// A string symbol.
pub type Sym = u32;
/// A label-set id.
pub type SetId = u32;
/// A metric-family id.
pub type FamilyId = u32;
/// A label: (name symbol, escaped value symbol).
pub type Pair = [Sym; 2];

/// Marker for "no id".
pub const NONE: u32 = u32::MAX;

/// Make room for `additional` more elements, growing by a quarter rather than doubling:
/// these arenas hold most of the exporter's memory, and doubling would leave up to half
/// of it unused. Growth stays geometric, so appends stay amortised O(1).
fn grow<T>(v: &mut Vec<T>, additional: usize) {
    if v.capacity() - v.len() < additional {
        v.reserve_exact((v.capacity() / 4).max(additional).max(64));
    }
}

fn grow_string(s: &mut String, additional: usize) {
    if s.capacity() - s.len() < additional {
        s.reserve_exact((s.capacity() / 4).max(additional).max(256));
    }
}

/// Where entry `id` ends in its arena; it starts where `id - 1` ends. Entries are stored
/// back to back in id order, so 4 bytes per entry locate it.
fn span(ends: &[u32], id: u32) -> Option<std::ops::Range<usize>> {
    let end = *ends.get(id as usize)? as usize;
    let start = match id.checked_sub(1) {
        Some(prev) => *ends.get(prev as usize)? as usize,
        None => 0,
    };
    Some(start..end)
}

/// Interned texts.
#[derive(Debug, Default)]
pub struct StrTable {
    arena: String,
    ends: Vec<u32>,
    index: HashTable<Sym>,
    hasher: DefaultHashBuilder,
}

impl StrTable {
    pub fn get(&self, s: &str) -> Option<Sym> {
        let h = self.hasher.hash_one(s);
        self.index.find(h, |&id| self.resolve(id) == s).copied()
    }

    /// The symbol of `s`, inserting it if new. `None` only if the arena would pass 4 GiB.
    pub fn insert(&mut self, s: &str) -> Option<Sym> {
        if let Some(id) = self.get(s) {
            return Some(id);
        }
        let end = u32::try_from(self.arena.len().checked_add(s.len())?).ok()?;
        let id = Sym::try_from(self.ends.len())
            .ok()
            .filter(|&id| id != NONE)?;
        grow_string(&mut self.arena, s.len());
        self.arena.push_str(s);
        grow(&mut self.ends, 1);
        self.ends.push(end);
        let h = self.hasher.hash_one(s);
        let (arena, ends, hasher) = (&self.arena, &self.ends, &self.hasher);
        self.index
            .insert_unique(h, id, |&i| hasher.hash_one(span_str(arena, ends, i)));
        Some(id)
    }

    pub fn resolve(&self, id: Sym) -> &str {
        span_str(&self.arena, &self.ends, id)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Heap bytes held (capacities).
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.ends.capacity() * 4 + self.index.capacity() * 5
    }
}

fn span_str<'a>(arena: &'a str, ends: &[u32], id: Sym) -> &'a str {
    span(ends, id).and_then(|r| arena.get(r)).unwrap_or("")
}

/// Interned label sets.
#[derive(Debug, Default)]
pub struct SetTable {
    pairs: Vec<Pair>,
    ends: Vec<u32>,
    index: HashTable<SetId>,
    hasher: DefaultHashBuilder,
}

impl SetTable {
    pub fn get(&self, set: &[Pair]) -> Option<SetId> {
        let h = self.hasher.hash_one(set);
        self.index.find(h, |&id| self.resolve(id) == set).copied()
    }

    pub fn insert(&mut self, set: &[Pair]) -> Option<SetId> {
        if let Some(id) = self.get(set) {
            return Some(id);
        }
        let end = u32::try_from(self.pairs.len().checked_add(set.len())?).ok()?;
        let id = SetId::try_from(self.ends.len())
            .ok()
            .filter(|&id| id != NONE)?;
        grow(&mut self.pairs, set.len());
        self.pairs.extend_from_slice(set);
        grow(&mut self.ends, 1);
        self.ends.push(end);
        let h = self.hasher.hash_one(set);
        let (pairs, ends, hasher) = (&self.pairs, &self.ends, &self.hasher);
        self.index
            .insert_unique(h, id, |&i| hasher.hash_one(span_pairs(pairs, ends, i)));
        Some(id)
    }

    pub fn resolve(&self, id: SetId) -> &[Pair] {
        span_pairs(&self.pairs, &self.ends, id)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn heap_bytes(&self) -> usize {
        self.pairs.capacity() * 8 + self.ends.capacity() * 4 + self.index.capacity() * 5
    }
}

fn span_pairs<'a>(pairs: &'a [Pair], ends: &[u32], id: SetId) -> &'a [Pair] {
    span(ends, id).and_then(|r| pairs.get(r)).unwrap_or(&[])
}

/// Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyKind {
    Gauge,
    Counter,
    Histogram,
    Summary,
}

impl FamilyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyKind::Gauge => "gauge",
            FamilyKind::Counter => "counter",
            FamilyKind::Histogram => "histogram",
            FamilyKind::Summary => "summary",
        }
    }
}

/// One Prometheus metric family.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: Box<str>,
    pub help: Box<str>,
    pub kind: FamilyKind,
}

/// Cache key of an OTLP metric's translation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MetricKey {
    name: Box<str>,
    unit: Box<str>,
    kind: NameKind,
}

#[derive(Hash)]
struct MetricKeyRef<'a> {
    name: &'a str,
    unit: &'a str,
    kind: NameKind,
}

impl hashbrown::Equivalent<MetricKey> for MetricKeyRef<'_> {
    fn equivalent(&self, key: &MetricKey) -> bool {
        self.kind == key.kind && *self.name == *key.name && *self.unit == *key.unit
    }
}

/// Most cached translations of attribute keys and of metric (name, unit, kind) triples.
/// Beyond it translations are computed each time (slower, never wrong).
pub const MAX_CACHE_ENTRIES: usize = 16_384;

/// Everything interned, behind one lock in the exporter.
#[derive(Debug, Default)]
pub struct Interner {
    pub strings: StrTable,
    pub sets: SetTable,
    pub families: Vec<Family>,
    family_by_name: HashMap<Box<str>, FamilyId>,
    /// Attribute key -> label-name symbol (`None`: the key cannot become a label).
    label_keys: HashMap<Box<str>, Option<Sym>>,
    /// OTLP (name, unit, kind) -> family, or why its points are dropped.
    metrics: HashMap<MetricKey, Result<FamilyId, DropReason>>,
    /// Encoded data-point attributes -> their label set, so a push of a known shape skips
    /// most lookups. First come, first kept, up to [`MAX_MEMO_ENTRIES`] and
    /// [`MAX_MEMO_BYTES`]: the shared shapes (state/workload, detection mode, GPU info) are
    /// met on the very first pushes.
    dsets: HashMap<Box<[u8]>, SetId>,
    /// Heap bytes of `dsets` as [`memo_cost`] counts them.
    dset_bytes: usize,
    /// Point plans per metric layout (`translate::layout_key`). Behind its own lock so a
    /// translation holding only the shared view can fill it: lookups (and the fill from a
    /// hit) share it, offers take it alone. Compaction clears it.
    pub layouts: parking_lot::RwLock<LayoutMemo>,
    /// Resource label sets by the exact encoding of the resource's attributes, each with
    /// the layout the resource sent last. Behind its own lock for the same reason as
    /// `layouts`. Compaction renumbers it.
    pub resources: parking_lot::RwLock<ResourceMemo>,
}

/// What translation decided for one data point of a memoised layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointPlan {
    pub family: FamilyId,
    pub kind: FamilyKind,
    pub labels: SetId,
    pub delta: bool,
}

/// The per-point decisions for one metric layout, valid for any resource label set that
/// uses none of `names`.
#[derive(Debug)]
pub struct LayoutPlan {
    /// One per data point, in the order the points appear in the `ResourceMetrics`.
    pub points: Box<[PointPlan]>,
    /// Label names of the points' label sets, sorted and deduplicated. A resource label
    /// set with one of these names collides with a point, and the merge then depends on
    /// the resource, so such a resource takes the full path.
    pub names: Box<[Sym]>,
}

/// Heap bytes the layout memo may hold (keys plus plans); beyond it nothing new is kept.
pub const MAX_LAYOUT_BYTES: usize = 1 << 20;

/// Slots of the admission filter (see [`LayoutMemo::offer`]).
const LAYOUT_FILTER_SLOTS: usize = 1024;

/// Layout key (exact bytes) to point plans. Agents of one fleet send the same metrics with
/// the same point attributes (nothing per node is a point attribute: the node is the
/// resource), so a few entries serve every node. A layout is kept only once a second
/// resource has sent it: a fleet whose layouts are unique per node (a per-node point
/// attribute) leaves the memo empty instead of filling it with one entry per node.
#[derive(Debug, Default)]
pub struct LayoutMemo {
    /// (layout key, plan), in the order they were kept; an entry's index names it for the
    /// per-resource hints ([`ResourceMemo`]).
    entries: Vec<(Box<[u8]>, LayoutPlan)>,
    /// Indexes into `entries`, hashed by key.
    index: HashTable<u32>,
    bytes: usize,
    /// (hash of a layout key, resource set that sent it) of layouts seen once, direct-mapped
    /// by hash. Empty until the first offer.
    seen: Vec<(u64, SetId)>,
    hasher: DefaultHashBuilder,
}

impl LayoutMemo {
    /// The plan of layout `key` and its entry index.
    pub fn get(&self, key: &[u8]) -> Option<(u32, &LayoutPlan)> {
        let h = self.hasher.hash_one(key);
        let entries = &self.entries;
        let &i = self.index.find(h, |&i| {
            entries
                .get(i as usize)
                .is_some_and(|(k, _)| k.as_ref() == key)
        })?;
        entries.get(i as usize).map(|(_, p)| (i, p))
    }

    /// Entry `i`: its layout key and plan (a hint may name an entry that is gone or has
    /// changed: the caller checks the key).
    pub fn entry(&self, i: u32) -> Option<(&[u8], &LayoutPlan)> {
        self.entries.get(i as usize).map(|(k, p)| (k.as_ref(), p))
    }

    /// A clean translation of layout `key` by `resource`: keep its plan (built by `plan`)
    /// if another resource sent the same layout before and the memo has room. Returns
    /// whether it was kept.
    pub fn offer(
        &mut self,
        key: &[u8],
        resource: SetId,
        plan: impl FnOnce() -> Option<LayoutPlan>,
    ) -> bool {
        // The filter first: on the common miss (a layout seen once) that is one hash of
        // the key, not two.
        let h = self.hasher.hash_one(key);
        if self.seen.is_empty() {
            self.seen = vec![(0, NONE); LAYOUT_FILTER_SLOTS];
        }
        let Some(slot) = self.seen.get_mut((h % LAYOUT_FILTER_SLOTS as u64) as usize) else {
            return false;
        };
        if slot.0 != h || slot.1 == resource || slot.1 == NONE {
            *slot = (h, resource);
            return false;
        }
        // Already kept (a resource that collides with it took the full path).
        if self.get(key).is_some() {
            return false;
        }
        let Some(plan) = plan() else { return false };
        let cost = key.len()
            + std::mem::size_of_val(&*plan.points)
            + std::mem::size_of_val(&*plan.names)
            + 64;
        if self.bytes + cost > MAX_LAYOUT_BYTES {
            return false;
        }
        let Ok(i) = u32::try_from(self.entries.len()) else {
            return false;
        };
        self.bytes += cost;
        self.entries.push((key.into(), plan));
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(h, i, |&j| {
            hasher.hash_one(entries.get(j as usize).map_or(&[][..], |(k, _)| k.as_ref()))
        });
        true
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes held (keys, plans, the admission filter).
    pub fn heap_bytes(&self) -> usize {
        self.bytes + self.seen.capacity() * std::mem::size_of::<(u64, SetId)>()
    }

    fn clear(&mut self) {
        self.entries = Vec::new();
        self.index = HashTable::new();
        self.bytes = 0;
        self.seen = Vec::new();
    }
}

/// Heap bytes the resource memo may hold; beyond it nothing new is kept, and further
/// resources take the full path (a few hundred bytes of work per push). At ~75 bytes per
/// resource (two attributes) it holds a few thousand nodes; the exporter's memory budget
/// per series leaves no room for more.
pub const MAX_RESOURCE_MEMO_BYTES: usize = 256 << 10;

/// Resource label sets by an exact encoding of the resource's attributes
/// ([`resource_key`]), each with the layout the resource sent last: a known node's push
/// skips building its resource labels and encoding its layout. The label set is a function
/// of the attributes and the exporter's settings alone, so an entry stays right until
/// compaction renumbers the sets. First come, first kept. Keys live back to back in one
/// arena, as the interned strings do.
#[derive(Debug, Default)]
pub struct ResourceMemo {
    arena: Vec<u8>,
    /// Per entry: where its key ends in `arena`, its label set, and the index of the
    /// layout-memo entry it hit last ([`NONE`] if none). The layout index is only a hint:
    /// the entry's key is checked against the push before its plan is used.
    ends: Vec<u32>,
    sets: Vec<SetId>,
    layouts: Vec<std::sync::atomic::AtomicU32>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

/// What one resource-memo entry costs besides its key: end, set, hint, index slot.
const RESOURCE_ENTRY_BYTES: usize = 4 + 4 + 4 + 5;

/// A resource-memo lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceLookup {
    /// The resource's label set and its layout hint (an index into the layout memo, or
    /// [`NONE`]); `entry` names the memo entry for [`ResourceMemo::set_layout`].
    Hit { set: SetId, layout: u32, entry: u32 },
    /// Not known; `room`: whether the memo would keep it.
    Miss { room: bool },
}

impl ResourceMemo {
    fn key(&self, i: u32) -> &[u8] {
        span(&self.ends, i)
            .and_then(|r| self.arena.get(r))
            .unwrap_or(&[])
    }

    fn find(&self, key: &[u8], h: u64) -> Option<u32> {
        self.index.find(h, |&i| self.key(i) == key).copied()
    }

    pub fn lookup(&self, key: &[u8]) -> ResourceLookup {
        let h = self.hasher.hash_one(key);
        match self.find(key, h) {
            Some(i) => ResourceLookup::Hit {
                set: self.sets.get(i as usize).copied().unwrap_or(NONE),
                layout: self
                    .layouts
                    .get(i as usize)
                    .map_or(NONE, |l| l.load(std::sync::atomic::Ordering::Relaxed)),
                entry: i,
            },
            None => ResourceLookup::Miss {
                room: self.room(key.len()),
            },
        }
    }

    fn room(&self, key_len: usize) -> bool {
        self.arena.len() + key_len + (self.ends.len() + 1) * RESOURCE_ENTRY_BYTES
            <= MAX_RESOURCE_MEMO_BYTES
    }

    /// Remember the layout entry `layout` for memo entry `entry`.
    pub fn set_layout(&self, entry: u32, layout: u32) {
        if let Some(l) = self.layouts.get(entry as usize) {
            l.store(layout, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Remember that attributes encoding to `key` give label set `set`, if there is room.
    pub fn insert(&mut self, key: &[u8], set: SetId) {
        let h = self.hasher.hash_one(key);
        if !self.room(key.len()) || self.find(key, h).is_some() {
            return;
        }
        let (Ok(end), Ok(id)) = (
            u32::try_from(self.arena.len() + key.len()),
            u32::try_from(self.ends.len()),
        ) else {
            return;
        };
        grow(&mut self.arena, key.len());
        self.arena.extend_from_slice(key);
        grow(&mut self.ends, 1);
        self.ends.push(end);
        grow(&mut self.sets, 1);
        self.sets.push(set);
        grow(&mut self.layouts, 1);
        self.layouts.push(std::sync::atomic::AtomicU32::new(NONE));
        let (arena, ends, hasher) = (&self.arena, &self.ends, &self.hasher);
        self.index.insert_unique(h, id, |&i| {
            hasher.hash_one(span(ends, i).and_then(|r| arena.get(r)).unwrap_or(&[]))
        });
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + (self.ends.capacity() + self.sets.capacity() + self.layouts.capacity()) * 4
            + self.index.capacity() * 5
    }

    /// Renumber the label sets after a compaction (`map`: old id -> new id or NONE),
    /// forgetting resources whose set is gone.
    fn remap(&mut self, map: &[u32]) {
        let old = std::mem::take(self);
        self.hasher = old.hasher.clone();
        for i in 0..old.ends.len() as u32 {
            let set = remap(map, old.sets.get(i as usize).copied().unwrap_or(NONE));
            if set != NONE {
                self.insert(old.key(i), set);
            }
        }
    }
}

/// The resource memo's key: every attribute (none skipped), each piece self-delimiting
/// (varint lengths, typed values), so two different attribute lists never share a key.
pub(crate) fn resource_key(attrs: &[component::otlp::KeyValue], out: &mut Vec<u8>) {
    use component::otlp::AnyValueKind as V;
    fn varint(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    out.clear();
    for kv in attrs {
        varint(out, kv.key.len());
        out.extend_from_slice(kv.key.as_bytes());
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            None => out.push(0),
            Some(V::StringValue(s)) => {
                out.push(1);
                varint(out, s.len());
                out.extend_from_slice(s.as_bytes());
            }
            Some(V::IntValue(i)) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Some(V::DoubleValue(d)) => {
                out.push(3);
                out.extend_from_slice(&d.to_bits().to_le_bytes());
            }
            Some(V::BoolValue(b)) => {
                out.push(4);
                out.push(u8::from(*b));
            }
            Some(_) => {
                let mut text = String::new();
                crate::value::write_value(kv.value.as_ref(), &mut text);
                out.push(5);
                varint(out, text.len());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
}

/// Most memoised data-point attribute lists.
pub const MAX_MEMO_ENTRIES: usize = 4096;

/// Heap bytes the data-point attribute memo may hold. Its keys are the attributes as
/// sent, so without a byte bound 4,096 lists at the payload limits (32 attributes of
/// 4 KiB) would pin about 540 MiB outside every cluster's estimate.
pub const MAX_MEMO_BYTES: usize = 1 << 20;

/// What one memo entry costs: its key, the key's box and the map slot.
fn memo_cost(key: &[u8]) -> usize {
    key.len() + 32
}

impl Interner {
    pub fn family(&self, id: FamilyId) -> Option<&Family> {
        self.families.get(id as usize)
    }

    pub fn family_by_name(&self, name: &str) -> Option<FamilyId> {
        self.family_by_name.get(name).copied()
    }

    /// Add a family (caller checked the name is new).
    pub fn add_family(&mut self, family: Family) -> Option<FamilyId> {
        let id = FamilyId::try_from(self.families.len())
            .ok()
            .filter(|&id| id != NONE)?;
        self.family_by_name.insert(family.name.clone(), id);
        self.families.push(family);
        Some(id)
    }

    pub fn cached_label_key(&self, key: &str) -> Option<Option<Sym>> {
        self.label_keys.get(key).copied()
    }

    pub fn cache_label_key(&mut self, key: &str, sym: Option<Sym>) {
        if self.label_keys.len() < MAX_CACHE_ENTRIES {
            self.label_keys.insert(key.into(), sym);
        }
    }

    /// Forget every memoised decision (metric -> family, layouts): the next push of each
    /// metric is decided again (after the reserved names changed).
    pub fn forget_decisions(&mut self) {
        self.metrics.clear();
        self.layouts.get_mut().clear();
    }

    pub fn cached_metric(
        &self,
        name: &str,
        unit: &str,
        kind: NameKind,
    ) -> Option<Result<FamilyId, DropReason>> {
        self.metrics
            .get(&MetricKeyRef { name, unit, kind })
            .copied()
    }

    pub fn cache_metric(
        &mut self,
        name: &str,
        unit: &str,
        kind: NameKind,
        v: Result<FamilyId, DropReason>,
    ) {
        if self.metrics.len() < MAX_CACHE_ENTRIES {
            self.metrics.insert(
                MetricKey {
                    name: name.into(),
                    unit: unit.into(),
                    kind,
                },
                v,
            );
        }
    }

    pub fn memo_dset(&self, key: &[u8]) -> Option<SetId> {
        self.dsets.get(key).copied()
    }

    pub fn memoize_dset(&mut self, key: &[u8], set: SetId) {
        let cost = memo_cost(key);
        if self.dsets.len() < MAX_MEMO_ENTRIES && self.dset_bytes + cost <= MAX_MEMO_BYTES {
            self.dset_bytes += cost;
            if self.dsets.insert(key.into(), set).is_some() {
                self.dset_bytes -= cost;
            }
        }
    }

    /// Heap bytes held by the tables (approximate for the hash maps).
    pub fn heap_bytes(&self) -> usize {
        let fam: usize = self
            .families
            .iter()
            .map(|f| f.name.len() * 2 + f.help.len() + 48)
            .sum();
        let keys: usize = self.label_keys.keys().map(|k| k.len() + 24).sum();
        let metrics: usize = self
            .metrics
            .keys()
            .map(|k| k.name.len() + k.unit.len() + 48)
            .sum();
        let memo = self.dset_bytes;
        let layouts = self.layouts.read().heap_bytes() + self.resources.read().heap_bytes();
        self.strings.heap_bytes() + self.sets.heap_bytes() + fam + keys + metrics + memo + layouts
    }

    /// Strings used by the marked label sets or by the label-key cache.
    pub fn live_strings(&self, live_sets: &[bool]) -> Vec<bool> {
        let mut live = vec![false; self.strings.len()];
        for (id, l) in live_sets.iter().enumerate() {
            if *l {
                for p in self.sets.resolve(id as SetId) {
                    for s in p {
                        if let Some(x) = live.get_mut(*s as usize) {
                            *x = true;
                        }
                    }
                }
            }
        }
        for sym in self.label_keys.values().flatten() {
            if let Some(x) = live.get_mut(*sym as usize) {
                *x = true;
            }
        }
        live
    }

    /// Rebuild keeping only the marked sets and families (and the strings they use, plus
    /// cached label-key symbols). Returns (set map, family map): old id -> new id or NONE.
    pub fn compact(&mut self, live_sets: &[bool], live_families: &[bool]) -> (Vec<u32>, Vec<u32>) {
        let live_strings = self.live_strings(live_sets);

        let mut strings = StrTable::default();
        let mut str_map = vec![NONE; self.strings.len()];
        for (old, live) in live_strings.iter().enumerate() {
            if *live && let Some(new) = strings.insert(self.strings.resolve(old as Sym)) {
                str_map[old] = new;
            }
        }

        let mut sets = SetTable::default();
        let mut set_map = vec![NONE; self.sets.len()];
        let mut buf: Vec<Pair> = Vec::new();
        for (old, live) in live_sets.iter().enumerate() {
            if !*live {
                continue;
            }
            buf.clear();
            buf.extend(
                self.sets
                    .resolve(old as SetId)
                    .iter()
                    .map(|[n, v]| [remap(&str_map, *n), remap(&str_map, *v)]),
            );
            if let Some(new) = sets.insert(&buf) {
                set_map[old] = new;
            }
        }

        let mut fam_map = vec![NONE; self.families.len()];
        let old_families = std::mem::take(&mut self.families);
        self.family_by_name.clear();
        for (old, fam) in old_families.into_iter().enumerate() {
            if live_families.get(old).copied().unwrap_or(false)
                && let Some(new) = self.add_family(fam)
            {
                fam_map[old] = new;
            }
        }

        self.label_keys.retain(|_, v| {
            if let Some(s) = v {
                *s = remap(&str_map, *s);
                *s != NONE
            } else {
                true
            }
        });
        // Conflicts are re-derived against the surviving families on next use.
        self.metrics.retain(|_, v| match v {
            Ok(f) => {
                *f = remap(&fam_map, *f);
                *f != NONE
            }
            Err(_) => false,
        });
        self.dsets.retain(|_, v| {
            *v = remap(&set_map, *v);
            *v != NONE
        });
        self.dset_bytes = self.dsets.keys().map(|k| memo_cost(k)).sum();
        self.dsets.shrink_to_fit();
        // Ids inside the layout plans are stale now; they are rebuilt on the next pushes.
        self.layouts.get_mut().clear();
        self.resources.get_mut().remap(&set_map);
        self.label_keys.shrink_to_fit();
        self.metrics.shrink_to_fit();
        self.family_by_name.shrink_to_fit();
        self.strings = strings;
        self.sets = sets;
        (set_map, fam_map)
    }
}

/// `map[old]`, or NONE when out of range.
pub fn remap(map: &[u32], old: u32) -> u32 {
    map.get(old as usize).copied().unwrap_or(NONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_intern_once() {
        let mut t = StrTable::default();
        let a = t.insert("alpha").unwrap();
        let b = t.insert("beta").unwrap();
        assert_ne!(a, b);
        assert_eq!(t.insert("alpha"), Some(a));
        assert_eq!(t.get("beta"), Some(b));
        assert_eq!(t.get("gamma"), None);
        assert_eq!(t.resolve(a), "alpha");
        assert_eq!(t.resolve(b), "beta");
        assert_eq!(t.len(), 2);
        // Many inserts: the index rehashes through the arena.
        let ids: Vec<_> = (0..10_000)
            .map(|i| t.insert(&format!("s{i}")).unwrap())
            .collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(t.resolve(*id), format!("s{i}"));
            assert_eq!(t.get(&format!("s{i}")), Some(*id));
        }
    }

    #[test]
    fn sets_intern_once() {
        let mut t = SetTable::default();
        let a = t.insert(&[[1, 2], [3, 4]]).unwrap();
        let empty = t.insert(&[]).unwrap();
        assert_eq!(t.insert(&[[1, 2], [3, 4]]), Some(a));
        assert_eq!(t.get(&[[1, 2]]), None);
        assert_eq!(t.resolve(a), &[[1, 2], [3, 4]]);
        assert_eq!(t.resolve(empty), &[] as &[Pair]);
        assert_eq!(t.get(&[]), Some(empty));
    }

    #[test]
    fn compaction_keeps_marked_and_renumbers() {
        let mut i = Interner::default();
        let n1 = i.strings.insert("n").unwrap();
        let dead = i.strings.insert("dead").unwrap();
        let v1 = i.strings.insert("v").unwrap();
        let s_dead = i.sets.insert(&[[n1, dead]]).unwrap();
        let s_live = i.sets.insert(&[[n1, v1]]).unwrap();
        let f_dead = i
            .add_family(Family {
                name: "a".into(),
                help: "".into(),
                kind: FamilyKind::Gauge,
            })
            .unwrap();
        let f_live = i
            .add_family(Family {
                name: "b".into(),
                help: "".into(),
                kind: FamilyKind::Gauge,
            })
            .unwrap();
        i.cache_metric("a", "", NameKind::Gauge, Ok(f_dead));
        i.cache_metric("b", "", NameKind::Gauge, Ok(f_live));
        let mut live_sets = vec![false; 2];
        live_sets[s_live as usize] = true;
        let mut live_fams = vec![false; 2];
        live_fams[f_live as usize] = true;
        let (sm, fm) = i.compact(&live_sets, &live_fams);
        assert_eq!(sm[s_dead as usize], NONE);
        assert_eq!(fm[f_dead as usize], NONE);
        let new_set = sm[s_live as usize];
        let pairs = i.sets.resolve(new_set).to_vec();
        assert_eq!(i.strings.resolve(pairs[0][0]), "n");
        assert_eq!(i.strings.resolve(pairs[0][1]), "v");
        assert_eq!(i.strings.get("dead"), None);
        assert_eq!(i.strings.len(), 2);
        assert_eq!(i.family_by_name("a"), None);
        assert_eq!(i.family_by_name("b"), Some(fm[f_live as usize]));
        assert_eq!(i.cached_metric("a", "", NameKind::Gauge), None);
        assert_eq!(
            i.cached_metric("b", "", NameKind::Gauge),
            Some(Ok(fm[f_live as usize]))
        );
    }

    #[test]
    fn resource_keys_tell_values_types_and_boundaries_apart() {
        use component::otlp::{kv_f64, kv_i64, kv_str};
        let key = |attrs: &[component::otlp::KeyValue]| {
            let mut out = Vec::new();
            resource_key(attrs, &mut out);
            out
        };
        let long = "n".repeat(200);
        let distinct = [
            key(&[kv_str("node", "a")]),
            key(&[kv_str("node", "b")]),
            key(&[kv_str("node", "")]),
            key(&[kv_str("node", "8")]),
            key(&[kv_i64("node", 8)]),
            key(&[kv_f64("node", 8.0)]),
            key(&[kv_str("node8", "")]),
            key(&[kv_str("node", ""), kv_str("8", "")]),
            key(&[kv_str("a", "1"), kv_str("b", "2")]),
            key(&[kv_str("b", "2"), kv_str("a", "1")]),
            key(&[kv_str(&long, "x")]),
            key(&[kv_str(&long[1..], "x")]),
            key(&[]),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn the_resource_memo_is_bounded_and_renumbered_by_compaction() {
        let mut m = ResourceMemo::default();
        let key = |i: u32| format!("node-{i:08}").into_bytes();
        let mut kept = 0;
        for i in 0..100_000u32 {
            m.insert(&key(i), i);
            if m.len() as u32 == i + 1 {
                kept = i + 1;
            }
        }
        assert!(kept > 1000 && (kept as usize) < 100_000, "{kept}");
        assert!(m.heap_bytes() <= MAX_RESOURCE_MEMO_BYTES * 5 / 4 + 1024);
        assert_eq!(m.lookup(&key(kept)), ResourceLookup::Miss { room: false });
        let ResourceLookup::Hit { set, layout, entry } = m.lookup(&key(7)) else {
            panic!("node 7 is kept");
        };
        assert_eq!((set, layout), (7, NONE));
        m.set_layout(entry, 3);
        assert!(matches!(
            m.lookup(&key(7)),
            ResourceLookup::Hit { layout: 3, .. }
        ));
        // Compaction: even sets survive, renumbered to half; odd ones are forgotten.
        let map: Vec<u32> = (0..kept)
            .map(|s| if s % 2 == 0 { s / 2 } else { NONE })
            .collect();
        m.remap(&map);
        assert_eq!(m.len() as u32, kept.div_ceil(2));
        assert!(matches!(
            m.lookup(&key(8)),
            ResourceLookup::Hit { set: 4, .. }
        ));
        assert_eq!(m.lookup(&key(7)), ResourceLookup::Miss { room: true });
    }
}
