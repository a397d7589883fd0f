//! Reusing the strings and vectors of decoded metrics batches.
//!
//! A host decodes a batch, runs it through the pipeline and drops it; the next batch
//! usually has the same shape (an agent push is ~10 metrics of one point each with a few
//! string attributes), so its allocations and frees can become pops and pushes on a
//! per-thread [`Recycler`]. Decoders take empty strings and vectors from it; the host hands
//! the batch back with [`Recycler::recycle`] when it is done. What comes out of a decoder is
//! the same value either way; only where its memory comes from differs.
//!
//! Everything kept is empty, and how much is kept is bounded: at most
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
    let mut pool = POOL.take();
    pool.recycle_resources(data);
    put_thread_pool(pool);
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
