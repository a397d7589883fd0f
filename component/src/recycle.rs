//! Reusing the strings and vectors of decoded metrics batches.
//!
//! A host decodes a batch, runs it through the pipeline and drops it; the next batch
//! usually has the same shape (an agent push is ~10 metrics of one point each with a few
//! string attributes), so its allocations and frees can become pops and pushes on a
//! per-thread [`Recycler`]. Decoders take empty strings and vectors from it; the host hands
//! the batch back with [`Recycler::recycle`] when it is done. What comes out of a decoder is
//! the same value either way; only where its memory comes from differs.
//!
//! Besides the pools, a thread keeps one whole batch as it was (see
//! [`Recycler::keep_or_recycle`]): a decoder that can write into a used batch in place
//! (the OTLP/JSON decoder does) takes it with [`Recycler::take_tree`] and overwrites it, so
//! a push of the same shape as the last one reuses every string and vector where it lies,
//! without taking the batch apart and putting it together again.
//!
//! Everything in the pools is empty, and how much is kept is bounded: at most
//! [`Recycler::KEEP_STRINGS`] strings of at most [`Recycler::MAX_STRING_BYTES`] each and
//! [`Recycler::KEEP_VECS`] vectors of each kind of at most [`Recycler::MAX_VEC_BYTES`] each
//! (lists of metrics: [`Recycler::MAX_METRIC_VEC_BYTES`]), about 2 MiB per thread at worst.

use crate::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, KeyValue, Metric, MetricKind,
    NumberDataPoint, ResourceMetrics, ScopeMetrics,
};

thread_local! {
    /// This thread's strings and vectors of finished batches, for the next decode here.
    static POOL: std::cell::Cell<Recycler> = const { std::cell::Cell::new(Recycler::EMPTY) };
}

/// Take this thread's pool for a decode; give it back with [`put_thread_pool`].
pub fn take_thread_pool() -> Recycler {
    POOL.take()
}

/// Give this thread's pool back after a decode.
pub fn put_thread_pool(pool: Recycler) {
    // `replace`, not `set`: no lazy-initialisation path for a constant-initialised key.
    let placeholder = POOL.replace(pool);
    if placeholder.owns_nothing() {
        // What `take_thread_pool` left: its drop glue would free nothing.
        std::mem::forget(placeholder);
    }
}

/// Hand a finished batch's strings and vectors to this thread's pool, for the next decode
/// on this thread (instead of freeing them now and allocating them again then). Hosts call
/// this where a batch's pipeline ends.
pub fn recycle_on_this_thread(data: Vec<ResourceMetrics>) {
    recycle_on_this_thread_from(data, None);
}

/// [`recycle_on_this_thread`] for a batch that is, unchanged, the one a decoder issued as
/// `origin` ([`Origin`]; `None` for any other batch, or one a stage may have changed).
pub fn recycle_on_this_thread_from(data: Vec<ResourceMetrics>, origin: Option<Origin>) {
    let mut pool = POOL.take();
    pool.keep_or_recycle_from(data, origin);
    put_thread_pool(pool);
}

/// Names one batch a decoder produced, unique in the process. A host that hands the batch
/// back unchanged, with [`recycle_on_this_thread_from`], lets the decoder that finds it
/// kept ([`Recycler::take_tree_from`]) know it holds exactly what that decode wrote, so
/// the next decode need not write again what it would write the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin(std::num::NonZeroU64);

impl Origin {
    /// A new origin, never handed out before in this process.
    pub fn next() -> Origin {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        /// Blocks of 2^32 origins, one per thread that asks.
        static BLOCKS: AtomicU64 = AtomicU64::new(1);
        thread_local! {
            static NEXT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        NEXT.with(|n| {
            let mut v = n.get();
            if v & 0xFFFF_FFFF == 0 {
                v = BLOCKS.fetch_add(1, Relaxed) << 32 | 1;
            }
            n.set(v + 1);
            Origin(std::num::NonZeroU64::new(v).unwrap_or(std::num::NonZeroU64::MIN))
        })
    }
}

/// Counts of what a [`Recycler`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub strings: usize,
    pub kvs: usize,
    pub points: usize,
    pub metrics: usize,
    pub scopes: usize,
    pub resources: usize,
}

/// Per-thread pools of empty strings and vectors (see the module docs).
#[derive(Debug, Default)]
pub struct Recycler {
    strings: Vec<String>,
    kvs: Vec<Vec<KeyValue>>,
    points: Vec<Vec<NumberDataPoint>>,
    metrics: Vec<Vec<Metric>>,
    scopes: Vec<Vec<ScopeMetrics>>,
    resources: Vec<Vec<ResourceMetrics>>,
    /// One whole batch, kept as it was for a decoder that writes in place (see
    /// [`Recycler::keep_or_recycle`]); empty without capacity when none is kept.
    tree: Vec<ResourceMetrics>,
    /// Whether the last decode on this thread wrote in place (see
    /// [`Recycler::set_writes_in_place`]): only then is a batch kept whole.
    in_place: bool,
    /// The decode that issued the batch kept whole, when it came back unchanged.
    tree_origin: Option<Origin>,
}

/// The most of each part a batch kept whole may have (see [`Recycler::keep_or_recycle`]):
/// with strings of at most [`Recycler::MAX_STRING_BYTES`], such a batch holds about
/// 0.5 MiB at worst.
#[derive(Debug, Clone, Copy)]
struct TreeBudget {
    resources: usize,
    scopes: usize,
    metrics: usize,
    points: usize,
    attributes: usize,
}

impl TreeBudget {
    const FULL: TreeBudget = TreeBudget {
        resources: 8,
        scopes: 16,
        metrics: 128,
        points: 256,
        attributes: 512,
    };
}

impl Recycler {
    /// A pool holding nothing (the thread-local's constant initial value).
    const EMPTY: Recycler = Recycler {
        strings: Vec::new(),
        kvs: Vec::new(),
        points: Vec::new(),
        metrics: Vec::new(),
        scopes: Vec::new(),
        resources: Vec::new(),
        tree: Vec::new(),
        in_place: false,
        tree_origin: None,
    };

    /// How many strings are kept at most.
    pub const KEEP_STRINGS: usize = 1024;
    /// The largest string kept, in bytes of capacity.
    pub const MAX_STRING_BYTES: usize = 256;
    /// How many vectors of each kind are kept at most.
    pub const KEEP_VECS: usize = 256;
    /// The largest vector kept, in bytes of capacity.
    pub const MAX_VEC_BYTES: usize = 1024;
    /// The largest list of metrics kept, in bytes of capacity: room for 16 metrics, so
    /// that a push's list (an agent sends about 11) comes back; [`Self::MAX_VEC_BYTES`]
    /// holds fewer than 8.
    pub const MAX_METRIC_VEC_BYTES: usize = 16 * std::mem::size_of::<Metric>();

    /// An empty string, reused when one is kept.
    #[inline]
    pub fn string(&mut self) -> String {
        self.strings.pop().unwrap_or_default()
    }

    /// `text` in a reused string.
    #[inline]
    pub fn string_from(&mut self, text: &str) -> String {
        let mut s = self.string();
        s.push_str(text);
        s
    }

    /// Set `s` to `text`, in place, giving `s` a kept string's buffer if it has none.
    #[inline]
    pub fn set_string(&mut self, s: &mut String, text: &str) {
        if s.capacity() == 0
            && let Some(kept) = self.strings.pop()
        {
            *s = kept;
        }
        s.clear();
        s.push_str(text);
    }

    #[inline]
    pub fn kvs(&mut self) -> Vec<KeyValue> {
        self.kvs.pop().unwrap_or_default()
    }

    #[inline]
    pub fn points(&mut self) -> Vec<NumberDataPoint> {
        self.points.pop().unwrap_or_default()
    }

    #[inline]
    pub fn metrics(&mut self) -> Vec<Metric> {
        self.metrics.pop().unwrap_or_default()
    }

    #[inline]
    pub fn scopes(&mut self) -> Vec<ScopeMetrics> {
        self.scopes.pop().unwrap_or_default()
    }

    #[inline]
    pub fn resources(&mut self) -> Vec<ResourceMetrics> {
        self.resources.pop().unwrap_or_default()
    }

    /// Whether no vector of this pool has memory (as [`Self::EMPTY`]).
    fn owns_nothing(&self) -> bool {
        self.strings.capacity() == 0
            && self.kvs.capacity() == 0
            && self.points.capacity() == 0
            && self.metrics.capacity() == 0
            && self.scopes.capacity() == 0
            && self.resources.capacity() == 0
            && self.tree.capacity() == 0
    }

    /// How many of each kind are kept now (for tests and bounds checks).
    pub fn kept(&self) -> Kept {
        Kept {
            strings: self.strings.len(),
            kvs: self.kvs.len(),
            points: self.points.len(),
            metrics: self.metrics.len(),
            scopes: self.scopes.len(),
            resources: self.resources.len(),
        }
    }

    /// Say whether the decode that has this pool writes into a kept batch in place (the
    /// OTLP/JSON decoder) or takes its parts from the pools (the protobuf reader): batches
    /// are kept whole only while the thread's decodes write in place, so a thread that
    /// reads protobuf does not check each batch for a decoder that will not use it.
    #[inline]
    pub fn set_writes_in_place(&mut self, yes: bool) {
        self.in_place = yes;
    }

    /// Keep `resources` whole for the next decode that writes in place
    /// ([`Recycler::take_tree`]) if the thread's last decode did
    /// ([`Recycler::set_writes_in_place`]), no batch is kept yet and this one is small and plain:
    /// within [`TreeBudget::FULL`], gauges and sums only, no exemplars or entity refs,
    /// attribute values that are scalars (or unset), every string within
    /// [`Recycler::MAX_STRING_BYTES`] of capacity. Otherwise its parts go to the pools
    /// as with [`Recycler::recycle_resources`].
    pub fn keep_or_recycle(&mut self, resources: Vec<ResourceMetrics>) {
        self.keep_or_recycle_from(resources, None);
    }

    /// [`Recycler::keep_or_recycle`] for a batch that is, unchanged, the one a decoder
    /// issued as `origin` (see [`Origin`]).
    pub fn keep_or_recycle_from(
        &mut self,
        resources: Vec<ResourceMetrics>,
        origin: Option<Origin>,
    ) {
        let mut budget = TreeBudget::FULL;
        if self.in_place
            && self.tree.capacity() == 0
            && resources.capacity() > 0
            && fits(&resources, &mut budget)
        {
            self.tree = resources;
            self.tree_origin = origin;
        } else {
            self.recycle_resources(resources);
        }
    }

    /// The batch kept whole, for a decoder to overwrite in place (empty if none is).
    #[inline]
    pub fn take_tree(&mut self) -> Vec<ResourceMetrics> {
        self.tree_origin = None;
        std::mem::take(&mut self.tree)
    }

    /// [`Recycler::take_tree`], with the origin the batch came back with: `Some` only if
    /// it is, unchanged, the batch that decode issued.
    #[inline]
    pub fn take_tree_from(&mut self) -> (Vec<ResourceMetrics>, Option<Origin>) {
        let origin = self.tree_origin.take();
        (std::mem::take(&mut self.tree), origin)
    }

    /// Whether a batch is kept whole.
    pub fn keeps_tree(&self) -> bool {
        self.tree.capacity() > 0
    }

    /// Move the batch kept whole, if any, into the pools (for a decoder that takes its
    /// strings and vectors from the pools instead of writing in place).
    pub fn spill_tree(&mut self) {
        if self.tree.capacity() > 0 {
            let tree = self.take_tree();
            self.recycle_resources(tree);
        }
    }

    /// Take back what `req` holds (its strings and vectors, emptied) for later decodes.
    pub fn recycle(&mut self, req: ExportMetricsServiceRequest) {
        self.recycle_resources(req.resource_metrics);
    }

    /// [`Recycler::recycle`] for the resource list of a request. Parts it does not pool
    /// (histograms, exemplars, nested attribute values) are dropped.
    pub fn recycle_resources(&mut self, mut resources: Vec<ResourceMetrics>) {
        if self.strings.len() >= Self::KEEP_STRINGS {
            // Full (nothing on this thread takes from the pool, e.g. gRPC-only
            // traffic): a plain drop costs less than the walk.
            return;
        }
        for mut rm in resources.drain(..) {
            if let Some(res) = rm.resource.take() {
                self.kvs_back(res.attributes);
            }
            for mut sm in rm.scope_metrics.drain(..) {
                if let Some(scope) = sm.scope.take() {
                    self.string_back(scope.name);
                    self.string_back(scope.version);
                    self.kvs_back(scope.attributes);
                }
                // Emptied in place and then cleared, rather than moved out one by one.
                for m in &mut sm.metrics {
                    self.string_back(std::mem::take(&mut m.name));
                    self.string_back(std::mem::take(&mut m.description));
                    self.string_back(std::mem::take(&mut m.unit));
                    let points = match m.data.take() {
                        Some(MetricKind::Gauge(g)) => g.data_points,
                        Some(MetricKind::Sum(s)) => s.data_points,
                        _ => continue,
                    };
                    self.points_back(points);
                }
                sm.metrics.clear();
                Self::back_within(&mut self.metrics, sm.metrics, Self::MAX_METRIC_VEC_BYTES);
            }
            Self::back(&mut self.scopes, rm.scope_metrics);
        }
        Self::back(&mut self.resources, resources);
    }

    fn points_back(&mut self, mut points: Vec<NumberDataPoint>) {
        for dp in &mut points {
            self.kvs_back(std::mem::take(&mut dp.attributes));
        }
        points.clear();
        Self::back(&mut self.points, points);
    }

    fn kvs_back(&mut self, mut kvs: Vec<KeyValue>) {
        for kv in kvs.drain(..) {
            self.string_back(kv.key);
            if let Some(AnyValue {
                value: Some(AnyValueKind::StringValue(s)),
            }) = kv.value
            {
                self.string_back(s);
            }
        }
        Self::back(&mut self.kvs, kvs);
    }

    fn string_back(&mut self, mut s: String) {
        if s.capacity() > 0
            && s.capacity() <= Self::MAX_STRING_BYTES
            && self.strings.len() < Self::KEEP_STRINGS
        {
            s.clear();
            self.strings.push(s);
        }
    }

    /// Keep `v` (emptied by the caller) unless the pool is full or `v` is too large.
    fn back<T>(pool: &mut Vec<Vec<T>>, v: Vec<T>) {
        Self::back_within(pool, v, Self::MAX_VEC_BYTES);
    }

    /// [`Self::back`] with its own size limit (`max_bytes` of capacity).
    fn back_within<T>(pool: &mut Vec<Vec<T>>, v: Vec<T>, max_bytes: usize) {
        debug_assert!(v.is_empty());
        if v.capacity() > 0
            && v.capacity().saturating_mul(std::mem::size_of::<T>()) <= max_bytes
            && pool.len() < Self::KEEP_VECS
        {
            pool.push(v);
        }
    }
}

/// Take `n` from a budget; `false` when it does not have that many left.
#[inline]
fn spend(left: &mut usize, n: usize) -> bool {
    match left.checked_sub(n) {
        Some(rest) => {
            *left = rest;
            true
        }
        None => false,
    }
}

/// A string a batch kept whole may hold.
#[inline]
fn small(s: &String) -> bool {
    s.capacity() <= Recycler::MAX_STRING_BYTES
}

/// Whether `resources` may be kept whole (see [`Recycler::keep_or_recycle`]), spending
/// `left` as it goes.
fn fits(resources: &[ResourceMetrics], left: &mut TreeBudget) -> bool {
    if !spend(&mut left.resources, resources.len()) {
        return false;
    }
    resources.iter().all(|rm| {
        small(&rm.schema_url)
            && rm
                .resource
                .as_ref()
                .is_none_or(|r| r.entity_refs.is_empty() && plain_attributes(&r.attributes, left))
            && spend(&mut left.scopes, rm.scope_metrics.len())
            && rm.scope_metrics.iter().all(|sm| {
                small(&sm.schema_url)
                    && sm.scope.as_ref().is_none_or(|s| {
                        small(&s.name) && small(&s.version) && plain_attributes(&s.attributes, left)
                    })
                    && spend(&mut left.metrics, sm.metrics.len())
                    && sm.metrics.iter().all(|m| plain_metric(m, left))
            })
    })
}

fn plain_metric(m: &Metric, left: &mut TreeBudget) -> bool {
    let points = match &m.data {
        None => &[][..],
        Some(MetricKind::Gauge(g)) => &g.data_points[..],
        Some(MetricKind::Sum(s)) => &s.data_points[..],
        Some(_) => return false,
    };
    small(&m.name)
        && small(&m.description)
        && small(&m.unit)
        && plain_attributes(&m.metadata, left)
        && spend(&mut left.points, points.len())
        && points
            .iter()
            .all(|p| p.exemplars.is_empty() && plain_attributes(&p.attributes, left))
}

fn plain_attributes(kvs: &[KeyValue], left: &mut TreeBudget) -> bool {
    spend(&mut left.attributes, kvs.len())
        && kvs.iter().all(|kv| {
            small(&kv.key)
                && match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    None
                    | Some(
                        AnyValueKind::BoolValue(_)
                        | AnyValueKind::IntValue(_)
                        | AnyValueKind::DoubleValue(_)
                        | AnyValueKind::StringValueStrindex(_),
                    ) => true,
                    Some(AnyValueKind::StringValue(s)) => small(s),
                    Some(_) => false,
                }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::{Gauge, InstrumentationScope, NumberValue, Resource};

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(AnyValueKind::StringValue(v.into())),
            }),
            key_strindex: 0,
        }
    }

    fn batch() -> Vec<ResourceMetrics> {
        vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("ingero.node.id", "n1"), kv("ingero.cluster.id", "c1")],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "ingero.node.health_score".into(),
                    unit: "1".into(),
                    data: Some(MetricKind::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: vec![kv("ingero.node.state", "active")],
                            value: Some(NumberValue::AsDouble(0.9)),
                            ..NumberDataPoint::default()
                        }],
                    })),
                    ..Metric::default()
                }],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }]
    }

    #[test]
    fn recycled_parts_come_back_empty_and_reuse_their_buffers() {
        let mut r = Recycler::default();
        let b = batch();
        let name_ptr = b[0].scope_metrics[0].metrics[0].name.as_ptr();
        r.recycle_resources(b);
        // 2 + 1 attribute keys and values, the metric's name and unit.
        assert_eq!(r.kept().strings, 8);
        let reused: Vec<String> = (0..8).map(|_| r.string()).collect();
        assert!(reused.iter().all(String::is_empty));
        assert!(reused.iter().any(|s| s.as_ptr() == name_ptr));
        assert_eq!(r.string().capacity(), 0, "pool empty: a new string");
        for v in [r.kvs(), r.kvs()] {
            assert!(v.is_empty() && v.capacity() > 0);
        }
        assert!(r.points().capacity() > 0 && r.metrics().capacity() > 0);
        assert!(r.scopes().capacity() > 0 && r.resources().capacity() > 0);
        assert_eq!(r.resources().capacity(), 0);
    }

    /// An agent push: a named scope and a list of 11 metrics, room for 16. Every part
    /// of it comes back, so the next decode of the same shape allocates nothing.
    #[test]
    fn a_push_comes_back_with_its_scope_and_metric_list() {
        let mut b = batch();
        let sm = &mut b[0].scope_metrics[0];
        sm.scope = Some(InstrumentationScope {
            name: "ingero.health".into(),
            version: "0.10.0".into(),
            ..InstrumentationScope::default()
        });
        let mut metrics = Vec::with_capacity(16);
        metrics.extend(std::iter::repeat_n(sm.metrics[0].clone(), 11));
        sm.metrics = metrics;
        let mut r = Recycler::default();
        r.recycle_resources(b);
        // 2 resource attributes and, per metric, its name, unit and point attribute (a
        // key and a value each): 4 + 11 * 4, and the scope's name and version.
        assert_eq!(r.kept().strings, 4 + 11 * 4 + 2);
        assert_eq!(r.kept().metrics, 1);
        assert_eq!(r.metrics().capacity(), 16);
    }

    #[test]
    fn a_small_plain_batch_is_kept_whole_and_one_only() {
        let mut r = Recycler::default();
        // Not for a thread whose decodes take parts from the pools.
        r.keep_or_recycle(batch());
        assert!(!r.keeps_tree());
        assert_eq!(r.kept().strings, 8);
        let mut r = Recycler::default();
        r.set_writes_in_place(true);
        let b = batch();
        let name_ptr = b[0].scope_metrics[0].metrics[0].name.as_ptr();
        r.keep_or_recycle(b);
        assert!(r.keeps_tree());
        assert_eq!(r.kept().strings, 0, "nothing taken apart");
        // A second one goes to the pools.
        r.keep_or_recycle(batch());
        assert_eq!(r.kept().strings, 8);
        let tree = r.take_tree();
        assert_eq!(tree[0].scope_metrics[0].metrics[0].name.as_ptr(), name_ptr);
        assert!(!r.keeps_tree());
        // Spilled into the pools, the kept batch's strings are there.
        r.keep_or_recycle(tree);
        r.spill_tree();
        assert!(!r.keeps_tree());
        assert_eq!(r.kept().strings, 16);
    }

    #[test]
    fn only_small_plain_batches_are_kept_whole() {
        let mut not_kept: Vec<(&str, Vec<ResourceMetrics>)> = Vec::new();
        let mut b = batch();
        b[0].scope_metrics[0].metrics[0].data = Some(MetricKind::Histogram(Default::default()));
        not_kept.push(("a histogram", b));
        let mut b = batch();
        if let Some(MetricKind::Gauge(g)) = &mut b[0].scope_metrics[0].metrics[0].data {
            g.data_points[0].exemplars.push(Default::default());
        }
        not_kept.push(("an exemplar", b));
        let mut b = batch();
        b[0].resource.as_mut().unwrap().attributes[0].value = Some(AnyValue {
            value: Some(AnyValueKind::ArrayValue(Default::default())),
        });
        not_kept.push(("a nested attribute value", b));
        let mut b = batch();
        b[0].resource
            .as_mut()
            .unwrap()
            .entity_refs
            .push(Default::default());
        not_kept.push(("an entity ref", b));
        let mut b = batch();
        b[0].scope_metrics[0].metrics[0].unit = "x".repeat(Recycler::MAX_STRING_BYTES + 1);
        not_kept.push(("a large string", b));
        let mut b = batch();
        let m = b[0].scope_metrics[0].metrics[0].clone();
        b[0].scope_metrics[0].metrics = vec![m; TreeBudget::FULL.metrics + 1];
        not_kept.push(("too many metrics", b));
        let mut b = batch();
        let kv = b[0].resource.as_ref().unwrap().attributes[0].clone();
        b[0].resource.as_mut().unwrap().attributes = vec![kv; TreeBudget::FULL.attributes + 1];
        not_kept.push(("too many attributes", b));
        let mut b = batch();
        if let Some(MetricKind::Gauge(g)) = &mut b[0].scope_metrics[0].metrics[0].data {
            g.data_points = vec![g.data_points[0].clone(); TreeBudget::FULL.points + 1];
        }
        not_kept.push(("too many points", b));
        for (what, b) in not_kept {
            let mut r = Recycler::default();
            r.set_writes_in_place(true);
            r.keep_or_recycle(b);
            assert!(!r.keeps_tree(), "{what}");
        }
        // At the budget's edge it is still kept.
        let mut b = batch();
        let m = b[0].scope_metrics[0].metrics[0].clone();
        b[0].scope_metrics[0].metrics = vec![m; TreeBudget::FULL.metrics];
        for m in &mut b[0].scope_metrics[0].metrics {
            m.data = None;
        }
        let mut r = Recycler::default();
        r.set_writes_in_place(true);
        r.keep_or_recycle(b);
        assert!(r.keeps_tree());
    }

    #[test]
    fn pools_are_bounded() {
        let mut r = Recycler::default();
        for _ in 0..Recycler::KEEP_STRINGS {
            r.recycle_resources(batch());
        }
        assert_eq!(r.kept().strings, Recycler::KEEP_STRINGS);
        let big = "x".repeat(Recycler::MAX_STRING_BYTES + 1);
        let mut r = Recycler::default();
        let mut b = batch();
        b[0].scope_metrics[0].metrics[0].name = big;
        b[0].scope_metrics[0].metrics[0].unit = String::new();
        r.recycle_resources(b);
        assert_eq!(
            r.kept().strings,
            6,
            "the oversized name and the empty unit are not kept"
        );
    }
}
