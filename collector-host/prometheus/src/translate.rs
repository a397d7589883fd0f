//! OTLP `ResourceMetrics` to a [`ResourcePlan`]: interned label sets, family ids, values.
//!
//! Labels of a series are the resource's label set R (resource attributes when
//! `resource_to_telemetry_conversion` is on, then `job`/`instance`, then `const_labels`)
//! merged with the data point's label set D; a name in both takes D's value. D is the data
//! point's attributes, except when one of its label names also occurs in R: then the full
//! contrib merge is computed (resource attributes override data-point attributes with the
//! same key; keys that sanitise to the same label name are joined with `;` in key order;
//! `job`, `instance` and `const_labels` override) and D keeps the labels whose value
//! differs from R's. Rendering R merged with D therefore always gives exactly that merge.
//!
//! Translation first runs against a shared (read) view of the intern tables and asks for
//! the write lock only when something is new, so a known node's push takes no write lock.
//! A data point's plain label set is memoised by the exact encoding of its attributes
//! (`labels::raw_key`); the resource-collision check still runs on every point. Above that,
//! a whole layout (every metric's name, unit and type and every point's attributes, see
//! [`layout_key`]) that two resources have sent is memoised with its per-point family and
//! label set (`intern::LayoutMemo`): the next push of that layout, from any node whose
//! resource labels do not collide with the points', skips the per-point lookups. A
//! resource seen before (`intern::ResourceMemo`, by the exact encoding of its attributes)
//! skips building its label set, and its push is first walked against the layout that
//! resource hit last ([`layout_matches`]), so nothing is encoded or hashed per point.

use component::otlp::{KeyValue, Metric, MetricKind, ResourceMetrics};
use hashbrown::HashSet;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, HistogramDataPoint, SummaryDataPoint,
};

use crate::intern::{
    Family, FamilyId, FamilyKind, Interner, LayoutPlan, NONE, Pair, PointPlan, ResourceLookup,
    SetId, Sym, resource_key,
};
use crate::labels::{
    Scratch, add_identity, append_raw_key, attr_labels, is_service_identity, job_instance, raw_key,
};
use crate::naming::{NameKind, label_name, metric_name};
use crate::store::{
    DropCounts, DropReason, Histogram, MAX_FAMILIES, ResourcePlan, Summary, Update, UpdateValue,
};

/// OTLP data-point flag: no recorded value (a staleness marker).
const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// The exporter settings translation needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub with_suffixes: bool,
    pub resource_to_telemetry: bool,
    /// (label name, escaped value), validated names.
    pub const_labels: Vec<(String, String)>,
    /// Attribute keys never turned into labels (`drop_attributes`).
    pub drop_attributes: Vec<String>,
    /// Use the layout and resource memos (on; off only in differential tests).
    pub layout_memo: bool,
    /// Names of the self-metric families the page has carried (besides the reserved
    /// prefixes): data never creates a family of these names.
    pub reserved: std::sync::Arc<parking_lot::RwLock<HashSet<Box<str>>>>,
    /// The prefix of the exporter's own families (the host's): reserved.
    pub own_prefix: component::telemetry::MetricPrefix,
    /// Name prefixes of the families the distribution's components write: reserved.
    pub reserved_prefixes: &'static [&'static str],
    /// OTLP gauges the distribution's processors put into the pipeline under a reserved
    /// name: stored as data (as gauges only).
    pub pipeline_gauges: &'static [&'static str],
}

impl Settings {
    /// Whether a Prometheus family name is one pushed data may not take: under the
    /// exporter's own prefix or one of the distribution's reserved prefixes.
    pub fn is_reserved_family(&self, name: &str) -> bool {
        name.starts_with(self.own_prefix.as_str())
            || self.reserved_prefixes.iter().any(|p| name.starts_with(p))
    }

    /// Whether attribute `key` is left out of every label set.
    #[inline]
    pub fn dropped(&self, key: &str) -> bool {
        !self.drop_attributes.is_empty() && self.drop_attributes.iter().any(|d| d == key)
    }
}

/// Why translation stopped or a unit of data was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// Something is not interned yet: start over with the write lock.
    NeedWrite,
    /// Drop the current unit (resource, metric or point) for this reason.
    Drop(DropReason),
}

impl From<DropReason> for Fail {
    fn from(r: DropReason) -> Self {
        Fail::Drop(r)
    }
}

/// A view of the intern tables: shared (lookups only) or exclusive (inserts).
#[derive(Debug)]
pub enum Lookup<'a> {
    /// `capped`: a series limit is reached (the reason says which), so anything new is
    /// refused rather than interned (a new label set can only mean a new series).
    Read {
        interner: &'a Interner,
        capped: Option<DropReason>,
    },
    Write(&'a mut Interner),
}

impl Lookup<'_> {
    pub fn interner(&self) -> &Interner {
        match self {
            Lookup::Read { interner, .. } => interner,
            Lookup::Write(i) => i,
        }
    }

    fn miss(&self) -> Fail {
        match self {
            Lookup::Read {
                capped: Some(r), ..
            } => Fail::Drop(*r),
            _ => Fail::NeedWrite,
        }
    }

    pub(crate) fn sym(&mut self, s: &str) -> Result<Sym, Fail> {
        let miss = self.miss();
        match self {
            Lookup::Read { interner, .. } => interner.strings.get(s).ok_or(miss),
            Lookup::Write(i) => i
                .strings
                .insert(s)
                .ok_or(Fail::Drop(DropReason::InternerFull)),
        }
    }

    pub(crate) fn set(&mut self, pairs: &[Pair]) -> Result<SetId, Fail> {
        let miss = self.miss();
        match self {
            Lookup::Read { interner, .. } => interner.sets.get(pairs).ok_or(miss),
            Lookup::Write(i) => i
                .sets
                .insert(pairs)
                .ok_or(Fail::Drop(DropReason::InternerFull)),
        }
    }

    /// Label-name symbol of an attribute key; `Drop(InvalidLabelName)` if it has none.
    pub(crate) fn label_key(&mut self, key: &str) -> Result<Sym, Fail> {
        let miss = self.miss();
        let sym = match self.interner().cached_label_key(key) {
            Some(c) => c,
            None => match self {
                Lookup::Read { .. } => return Err(miss),
                Lookup::Write(i) => {
                    let sym = match label_name(key) {
                        Some(n) if !n.starts_with("__") => i.strings.insert(&n),
                        _ => None,
                    };
                    i.cache_label_key(key, sym);
                    sym
                }
            },
        };
        sym.ok_or(Fail::Drop(DropReason::InvalidLabelName))
    }

    fn family(
        &mut self,
        m: &Metric,
        kind: NameKind,
        settings: &Settings,
    ) -> Result<FamilyId, Fail> {
        if let Some(c) = self.interner().cached_metric(&m.name, &m.unit, kind) {
            return c.map_err(Fail::Drop);
        }
        let miss = self.miss();
        let Lookup::Write(i) = self else {
            return Err(miss);
        };
        let result = resolve_family(i, m, kind, settings);
        if result != Err(DropReason::FamilyLimit) {
            i.cache_metric(&m.name, &m.unit, kind, result);
        }
        result.map_err(Fail::Drop)
    }
}

fn resolve_family(
    i: &mut Interner,
    m: &Metric,
    kind: NameKind,
    settings: &Settings,
) -> Result<FamilyId, DropReason> {
    let name = metric_name(
        &m.name,
        &m.unit,
        kind,
        &settings.namespace,
        settings.with_suffixes,
    )
    .map_err(|_| DropReason::InvalidMetricName)?;
    let components_own =
        kind == NameKind::Gauge && settings.pipeline_gauges.contains(&m.name.as_str());
    if !components_own
        && (settings.is_reserved_family(&name) || settings.reserved.read().contains(name.as_str()))
    {
        return Err(DropReason::ReservedName);
    }
    let fk = match kind {
        NameKind::Gauge | NameKind::NonMonotonicCounter => FamilyKind::Gauge,
        NameKind::MonotonicCounter => FamilyKind::Counter,
        NameKind::Histogram => FamilyKind::Histogram,
        NameKind::Summary => FamilyKind::Summary,
    };
    if let Some(id) = i.family_by_name(&name) {
        return match i.family(id) {
            Some(f) if f.kind == fk => Ok(id),
            _ => Err(DropReason::TypeConflict),
        };
    }
    if i.families.len() >= MAX_FAMILIES {
        return Err(DropReason::FamilyLimit);
    }
    let help = if m.description.trim().is_empty() {
        if m.unit.is_empty() {
            format!("OTLP metric {}", m.name)
        } else {
            format!("OTLP metric {}, unit {}", m.name, m.unit)
        }
    } else {
        m.description.clone()
    };
    i.add_family(Family {
        name: name.into(),
        help: help.into(),
        kind: fk,
    })
    .ok_or(DropReason::InternerFull)
}

fn time_secs(time_unix_nano: u64, now_s: u32) -> u32 {
    if time_unix_nano == 0 {
        now_s
    } else {
        u32::try_from(time_unix_nano / 1_000_000_000).unwrap_or(u32::MAX)
    }
}

/// Translation met something not yet interned: retry with the write lock. The plan and the
/// drop tally of the failed attempt must be discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedWrite;

/// Translate one `ResourceMetrics` into `plan`, tallying refused points in `drops`.
pub fn translate(
    lk: &mut Lookup<'_>,
    settings: &Settings,
    rm: &ResourceMetrics,
    now_s: u32,
    sc: &mut Scratch,
    plan: &mut ResourcePlan,
    drops: &mut DropCounts,
) -> Result<(), NeedWrite> {
    plan.clear();
    let res_attrs = component::otlp::resource_attrs(rm);
    let ids = job_instance(res_attrs);

    // A resource seen before: its label set, and the layout it sent last.
    let memo = settings.layout_memo;
    let mut known = ResourceLookup::Miss { room: false };
    if memo {
        resource_key(res_attrs, &mut sc.resource);
        known = lk.interner().resources.read().lookup(&sc.resource);
    }
    let resource = match known {
        ResourceLookup::Hit { set, .. } => Ok(set),
        ResourceLookup::Miss { .. } => resource_labels(lk, settings, res_attrs, &ids, sc),
    };
    let resource = match resource {
        Ok(id) => id,
        Err(Fail::NeedWrite) => return Err(NeedWrite),
        Err(Fail::Drop(reason)) => {
            drops.add(
                reason,
                component::otlp::count_points(std::slice::from_ref(rm)),
            );
            return Ok(());
        }
    };
    plan.resource = resource;
    if known == (ResourceLookup::Miss { room: true }) {
        match lk {
            Lookup::Read { interner, .. } => {
                interner.resources.write().insert(&sc.resource, resource)
            }
            Lookup::Write(i) => i.resources.get_mut().insert(&sc.resource, resource),
        }
    }

    if ids.0.is_some() || ids.1.is_some() {
        let mut ti = std::mem::take(&mut sc.m);
        let r = attr_labels(lk, &[res_attrs], &is_service_identity, sc, &mut ti)
            .and_then(|()| add_identity(lk, &ids, None, sc, &mut ti))
            .and_then(|()| lk.set(&ti));
        sc.m = ti;
        match r {
            Ok(id) => plan.target_info = id,
            Err(Fail::NeedWrite) => return Err(NeedWrite),
            // target_info is best effort; the series themselves still go in.
            Err(Fail::Drop(_)) => {}
        }
    }

    // The layout this resource sent last, checked against the push without encoding it.
    if let ResourceLookup::Hit { layout, .. } = known
        && layout != NONE
    {
        let i = lk.interner();
        let layouts = i.layouts.read();
        if let Some((key, lp)) = layouts.entry(layout)
            && layout_matches(rm, key)
            && fits_resource(i, lp, plan.resource)
        {
            fill_from_layout(lp, rm, now_s, plan, drops);
            return Ok(());
        }
    }

    // A layout other nodes sent before (same metrics, same point attributes) skips the
    // per-point work: its families and label sets are known.
    let memoisable = memo && layout_key(rm, &mut sc.layout);
    if memoisable {
        let i = lk.interner();
        let layouts = i.layouts.read();
        if let Some((idx, lp)) = layouts.get(&sc.layout)
            && fits_resource(i, lp, plan.resource)
        {
            fill_from_layout(lp, rm, now_s, plan, drops);
            drop(layouts);
            if let ResourceLookup::Hit { entry, .. } = known {
                i.resources.read().set_layout(entry, idx);
            }
            return Ok(());
        }
    }

    let drops_before = drops.total();
    sc.collided = false;
    for sm in &rm.scope_metrics {
        for m in &sm.metrics {
            match translate_metric(lk, settings, res_attrs, &ids, m, now_s, sc, plan, drops) {
                Ok(()) => {}
                Err(Fail::NeedWrite) => return Err(NeedWrite),
                Err(Fail::Drop(reason)) => drops.add(reason, metric_points(m)),
            }
        }
    }
    // Only a clean translation is offered: every point became an update, none of them
    // depended on the resource (no collision), all of them numbers.
    if memoisable && !sc.collided && drops.total() == drops_before {
        offer_layout(lk, &sc.layout, plan);
    }
    Ok(())
}

/// The exact bytes the translation of `rm`'s points depends on besides the resource label
/// set and the settings: per metric its type (with monotonicity and temporality for sums),
/// name, unit and point count, per point all its attributes as [`raw_key`] encodes them.
/// Every part is length-prefixed or fixed-size, so two different
/// layouts never share a key. `false` when some metric is a histogram, summary or
/// exponential histogram: those always take the full path.
pub(crate) fn layout_key(rm: &ResourceMetrics, out: &mut Vec<u8>) -> bool {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.clear();
    for sm in &rm.scope_metrics {
        for m in &sm.metrics {
            let points = match &m.data {
                // Translation ignores a metric without data, whatever its name.
                None => {
                    out.push(0);
                    continue;
                }
                Some(MetricKind::Gauge(g)) => {
                    out.push(1);
                    &g.data_points
                }
                Some(MetricKind::Sum(s)) => {
                    out.push(2);
                    out.push(u8::from(s.is_monotonic));
                    out.extend_from_slice(&s.aggregation_temporality.to_le_bytes());
                    &s.data_points
                }
                Some(_) => return false,
            };
            bytes(out, m.name.as_bytes());
            bytes(out, m.unit.as_bytes());
            out.extend_from_slice(&(points.len() as u64).to_le_bytes());
            for dp in points {
                let at = out.len();
                out.extend_from_slice(&[0; 8]);
                // All attributes, dropped ones too: a stricter key than needed, and cheaper.
                append_raw_key(&dp.attributes, |_| false, out);
                let len = (out.len() - at - 8) as u64;
                if let Some(slot) = out.get_mut(at..at + 8) {
                    slot.copy_from_slice(&len.to_le_bytes());
                }
            }
        }
    }
    true
}

/// Whether [`layout_key`] of `rm` would be exactly `key` (and `rm` memoisable), found by
/// walking `rm` against `key` instead of encoding it. Never true for another layout;
/// false also for a point attribute with a composite value (array, map, bytes), whose
/// encoding is its label text: such a push takes the encoding path.
pub(crate) fn layout_matches(rm: &ResourceMetrics, key: &[u8]) -> bool {
    let mut c = KeyCursor(key);
    for sm in &rm.scope_metrics {
        for m in &sm.metrics {
            let points = match &m.data {
                None => {
                    if !c.byte(0) {
                        return false;
                    }
                    continue;
                }
                Some(MetricKind::Gauge(g)) => {
                    if !c.byte(1) {
                        return false;
                    }
                    &g.data_points
                }
                Some(MetricKind::Sum(s)) => {
                    if !(c.byte(2)
                        && c.byte(u8::from(s.is_monotonic))
                        && c.exact(&s.aggregation_temporality.to_le_bytes()[..]))
                    {
                        return false;
                    }
                    &s.data_points
                }
                Some(_) => return false,
            };
            if !(c.bytes(m.name.as_bytes()) && c.bytes(m.unit.as_bytes()) && c.len(points.len())) {
                return false;
            }
            for dp in points {
                if !c.raw_attrs(&dp.attributes) {
                    return false;
                }
            }
        }
    }
    c.0.is_empty()
}

/// The unread rest of a layout key, consumed piece by piece as [`layout_key`] wrote it.
struct KeyCursor<'a>(&'a [u8]);

impl KeyCursor<'_> {
    /// Consume `b` if the key continues with exactly it.
    #[inline]
    fn exact(&mut self, b: &[u8]) -> bool {
        match self.0.split_at_checked(b.len()) {
            Some((head, rest)) if same_bytes(head, b) => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn byte(&mut self, b: u8) -> bool {
        match self.0.split_first() {
            Some((&x, rest)) if x == b => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    /// Eight little-endian bytes.
    #[inline]
    fn word(&mut self, w: u64) -> bool {
        match self.0.split_first_chunk::<8>() {
            Some((head, rest)) if u64::from_le_bytes(*head) == w => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn len(&mut self, n: usize) -> bool {
        self.word(n as u64)
    }

    /// A length-prefixed byte string.
    #[inline]
    fn bytes(&mut self, b: &[u8]) -> bool {
        self.len(b.len()) && self.exact(b)
    }

    /// A point's attributes as `layout_key` writes them: their [`append_raw_key`]
    /// encoding (nothing skipped), prefixed by its length.
    fn raw_attrs(&mut self, attrs: &[KeyValue]) -> bool {
        use component::otlp::AnyValueKind as V;
        let Some((len, rest)) = self.0.split_first_chunk::<8>() else {
            return false;
        };
        let (len, before) = (u64::from_le_bytes(*len), rest.len());
        self.0 = rest;
        for kv in attrs {
            if !self.bytes(kv.key.as_bytes()) {
                return false;
            }
            let ok = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                None => self.byte(0),
                Some(V::StringValue(s)) => self.byte(1) && self.bytes(s.as_bytes()),
                Some(V::IntValue(i)) => self.byte(2) && self.word(*i as u64),
                Some(V::DoubleValue(d)) => self.byte(3) && self.word(d.to_bits()),
                Some(V::BoolValue(b)) => self.byte(4) && self.byte(u8::from(*b)),
                // Composite values are encoded through their label text: not walked here.
                Some(_) => false,
            };
            if !ok {
                return false;
            }
        }
        // The encoding ends exactly where the key said it would.
        (before - self.0.len()) as u64 == len
    }
}

/// `a == b` for two slices of the same length, inline: the pieces of a layout are mostly
/// a few bytes long, where a `memcmp` call costs more than the comparison.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    fn w8(s: &[u8]) -> (u64, u64) {
        let first = s.first_chunk::<8>().map_or(0, |c| u64::from_le_bytes(*c));
        let last = s.last_chunk::<8>().map_or(0, |c| u64::from_le_bytes(*c));
        (first, last)
    }
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        0 => true,
        // First, middle and last byte: every byte of one to three.
        1..4 => {
            let n = a.len();
            a.first() == b.first() && a.get(n / 2) == b.get(n / 2) && a.last() == b.last()
        }
        4..8 => {
            let w4 = |s: &[u8]| {
                let first = s.first_chunk::<4>().map_or(0, |c| u32::from_le_bytes(*c));
                let last = s.last_chunk::<4>().map_or(0, |c| u32::from_le_bytes(*c));
                (first, last)
            };
            w4(a) == w4(b)
        }
        8..=16 => w8(a) == w8(b),
        17..=32 => {
            let n = a.len();
            w8(a.get(..16).unwrap_or(a)) == w8(b.get(..16).unwrap_or(b))
                && w8(a.get(n - 16..).unwrap_or(a)) == w8(b.get(n - 16..).unwrap_or(b))
        }
        _ => a == b,
    }
}

/// Whether `lp` holds for a resource with label set `resource`: no point label name is
/// also a resource label name (a collision makes the point's labels depend on the
/// resource's attributes).
fn fits_resource(i: &Interner, lp: &LayoutPlan, resource: SetId) -> bool {
    i.sets
        .resolve(resource)
        .iter()
        .all(|p| lp.names.binary_search(&p[0]).is_err())
}

/// The plan of `rm` from a memoised layout: the stored family and label set per point,
/// this push's values and times. Points without a value are dropped as in the full path.
fn fill_from_layout(
    lp: &LayoutPlan,
    rm: &ResourceMetrics,
    now_s: u32,
    plan: &mut ResourcePlan,
    drops: &mut DropCounts,
) {
    let mut plans = lp.points.iter();
    plan.updates.reserve(lp.points.len());
    for sm in &rm.scope_metrics {
        for m in &sm.metrics {
            for dp in component::otlp::number_points(m) {
                // The layout key fixes the number of points per metric.
                let Some(p) = plans.next() else { return };
                if dp.flags & FLAG_NO_RECORDED_VALUE != 0 {
                    drops.add(DropReason::NoValue, 1);
                    continue;
                }
                match component::otlp::point_value(dp) {
                    Some(value) => plan.updates.push(Update {
                        family: p.family,
                        kind: p.kind,
                        labels: p.labels,
                        time_s: time_secs(dp.time_unix_nano, now_s),
                        value: UpdateValue::Number {
                            value,
                            delta: p.delta,
                        },
                    }),
                    None => drops.add(DropReason::NoValue, 1),
                }
            }
        }
    }
}

/// Offer the point plans of a clean translation to the layout memo.
fn offer_layout(lk: &mut Lookup<'_>, key: &[u8], plan: &ResourcePlan) {
    let build = |i: &Interner| {
        let mut points = Vec::with_capacity(plan.updates.len());
        let mut names = Vec::new();
        for u in &plan.updates {
            let UpdateValue::Number { delta, .. } = u.value else {
                return None;
            };
            points.push(PointPlan {
                family: u.family,
                kind: u.kind,
                labels: u.labels,
                delta,
            });
            names.extend(i.sets.resolve(u.labels).iter().map(|p| p[0]));
        }
        names.sort_unstable();
        names.dedup();
        Some(LayoutPlan {
            points: points.into_boxed_slice(),
            names: names.into_boxed_slice(),
        })
    };
    match lk {
        Lookup::Read { interner, .. } => interner
            .layouts
            .write()
            .offer(key, plan.resource, || build(interner)),
        Lookup::Write(i) => {
            let i: &mut Interner = i;
            let mut memo = std::mem::take(i.layouts.get_mut());
            let kept = memo.offer(key, plan.resource, || build(i));
            *i.layouts.get_mut() = memo;
            kept
        }
    };
}

fn resource_labels(
    lk: &mut Lookup<'_>,
    settings: &Settings,
    res_attrs: &[KeyValue],
    ids: &(Option<String>, Option<String>),
    sc: &mut Scratch,
) -> Result<SetId, Fail> {
    let mut r = std::mem::take(&mut sc.r);
    let result = (|| {
        if settings.resource_to_telemetry {
            attr_labels(lk, &[res_attrs], &|k| settings.dropped(k), sc, &mut r)?;
        } else {
            r.clear();
        }
        add_identity(lk, ids, Some(settings), sc, &mut r)?;
        lk.set(&r)
    })();
    sc.r = r;
    result
}

fn metric_points(m: &Metric) -> u64 {
    match &m.data {
        Some(MetricKind::Gauge(g)) => g.data_points.len() as u64,
        Some(MetricKind::Sum(s)) => s.data_points.len() as u64,
        Some(MetricKind::Histogram(h)) => h.data_points.len() as u64,
        Some(MetricKind::ExponentialHistogram(h)) => h.data_points.len() as u64,
        Some(MetricKind::Summary(s)) => s.data_points.len() as u64,
        None => 0,
    }
}

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;
const DELTA: i32 = AggregationTemporality::Delta as i32;

#[allow(clippy::too_many_arguments)]
fn translate_metric(
    lk: &mut Lookup<'_>,
    settings: &Settings,
    res_attrs: &[KeyValue],
    ids: &(Option<String>, Option<String>),
    m: &Metric,
    now_s: u32,
    sc: &mut Scratch,
    plan: &mut ResourcePlan,
    drops: &mut DropCounts,
) -> Result<(), Fail> {
    let (kind, delta) = match &m.data {
        None => return Ok(()),
        Some(MetricKind::Gauge(_)) => (NameKind::Gauge, false),
        Some(MetricKind::Sum(s)) => {
            let delta = match s.aggregation_temporality {
                CUMULATIVE => false,
                DELTA => true,
                _ => return Err(DropReason::InvalidTemporality.into()),
            };
            let kind = if s.is_monotonic {
                NameKind::MonotonicCounter
            } else {
                NameKind::NonMonotonicCounter
            };
            (kind, delta)
        }
        Some(MetricKind::Histogram(h)) => {
            let delta = match h.aggregation_temporality {
                CUMULATIVE => false,
                DELTA => true,
                _ => return Err(DropReason::InvalidTemporality.into()),
            };
            (NameKind::Histogram, delta)
        }
        Some(MetricKind::Summary(_)) => (NameKind::Summary, false),
        Some(MetricKind::ExponentialHistogram(h)) => {
            let delta = match h.aggregation_temporality {
                CUMULATIVE => false,
                DELTA => true,
                _ => return Err(DropReason::InvalidTemporality.into()),
            };
            (NameKind::Histogram, delta)
        }
    };
    if metric_points(m) == 0 {
        return Ok(());
    }
    let family = lk.family(m, kind, settings)?;
    let fkind = lk
        .interner()
        .family(family)
        .map(|f| f.kind)
        .unwrap_or(FamilyKind::Gauge);
    let reserved = match fkind {
        FamilyKind::Histogram => Some("le"),
        FamilyKind::Summary => Some("quantile"),
        _ => None,
    };

    // One closure per point kind would borrow `lk` twice; a small macro keeps it flat.
    macro_rules! point {
        ($attrs:expr, $time:expr, $flags:expr, $value:expr) => {{
            let r = point_labels(
                lk,
                settings,
                res_attrs,
                ids,
                $attrs,
                reserved,
                plan.resource,
                sc,
            );
            match r {
                Ok(labels) => {
                    if $flags & FLAG_NO_RECORDED_VALUE != 0 {
                        drops.add(DropReason::NoValue, 1);
                    } else {
                        match $value {
                            Ok(value) => plan.updates.push(Update {
                                family,
                                kind: fkind,
                                labels,
                                time_s: time_secs($time, now_s),
                                value,
                            }),
                            Err(reason) => drops.add(reason, 1),
                        }
                    }
                }
                Err(Fail::NeedWrite) => return Err(Fail::NeedWrite),
                Err(Fail::Drop(reason)) => drops.add(reason, 1),
            }
        }};
    }

    match &m.data {
        Some(MetricKind::Gauge(g)) => {
            for dp in &g.data_points {
                let v = component::otlp::point_value(dp)
                    .map(|value| UpdateValue::Number { value, delta })
                    .ok_or(DropReason::NoValue);
                point!(&dp.attributes, dp.time_unix_nano, dp.flags, v);
            }
        }
        Some(MetricKind::Sum(s)) => {
            for dp in &s.data_points {
                let v = component::otlp::point_value(dp)
                    .map(|value| UpdateValue::Number { value, delta })
                    .ok_or(DropReason::NoValue);
                point!(&dp.attributes, dp.time_unix_nano, dp.flags, v);
            }
        }
        Some(MetricKind::Histogram(h)) => {
            for dp in &h.data_points {
                let v = histogram_value(dp).map(|hist| UpdateValue::Histogram {
                    hist: Box::new(hist),
                    delta,
                });
                point!(&dp.attributes, dp.time_unix_nano, dp.flags, v);
            }
        }
        Some(MetricKind::Summary(s)) => {
            for dp in &s.data_points {
                let v = Ok::<_, DropReason>(UpdateValue::Summary(summary_value(dp)));
                point!(&dp.attributes, dp.time_unix_nano, dp.flags, v);
            }
        }
        Some(MetricKind::ExponentialHistogram(h)) => {
            for dp in &h.data_points {
                let v = crate::exp_histogram::classic(dp).map(|hist| UpdateValue::Histogram {
                    hist: Box::new(hist),
                    delta,
                });
                point!(&dp.attributes, dp.time_unix_nano, dp.flags, v);
            }
        }
        None => {}
    }
    Ok(())
}

/// The data-point label set of one point (see the module docs for the merge rule).
#[allow(clippy::too_many_arguments)]
fn point_labels(
    lk: &mut Lookup<'_>,
    settings: &Settings,
    res_attrs: &[KeyValue],
    ids: &(Option<String>, Option<String>),
    attrs: &[KeyValue],
    reserved: Option<&str>,
    resource: SetId,
    sc: &mut Scratch,
) -> Result<SetId, Fail> {
    let mut d = std::mem::take(&mut sc.d);
    let result = (|| {
        raw_key(attrs, |k: &str| settings.dropped(k), &mut sc.key);
        let memo = lk.interner().memo_dset(&sc.key);
        match memo {
            Some(id) => {
                d.clear();
                d.extend_from_slice(lk.interner().sets.resolve(id));
            }
            None => attr_labels(lk, &[attrs], &|k| settings.dropped(k), sc, &mut d)?,
        }
        let i = lk.interner();
        let r = i.sets.resolve(resource);
        if let Some(word) = reserved
            && d.iter()
                .chain(r.iter())
                .any(|p| i.strings.resolve(p[0]) == word)
        {
            return Err(DropReason::ReservedLabel.into());
        }
        let collides = d.iter().any(|p| r.iter().any(|q| q[0] == p[0]));
        sc.collided |= collides;
        if !collides {
            if let Some(id) = memo {
                return Ok(id);
            }
            let id = lk.set(&d)?;
            if let Lookup::Write(i) = lk {
                i.memoize_dset(&sc.key, id);
            }
            return Ok(id);
        }
        let mut m = std::mem::take(&mut sc.m);
        let lists: &[&[KeyValue]] = if settings.resource_to_telemetry {
            &[attrs, res_attrs]
        } else {
            &[attrs]
        };
        let merged = attr_labels(lk, lists, &|k| settings.dropped(k), sc, &mut m)
            .and_then(|()| add_identity(lk, ids, Some(settings), sc, &mut m));
        if merged.is_ok() {
            let r = lk.interner().sets.resolve(resource);
            d.clear();
            d.extend(m.iter().filter(|p| !r.contains(p)));
        }
        sc.m = m;
        merged?;
        lk.set(&d)
    })();
    sc.d = d;
    result
}

fn histogram_value(dp: &HistogramDataPoint) -> Result<Histogram, DropReason> {
    let bounds = &dp.explicit_bounds;
    let counts = &dp.bucket_counts;
    if !counts.is_empty() && counts.len() != bounds.len() + 1 {
        return Err(DropReason::InvalidHistogram);
    }
    if bounds.iter().any(|b| !b.is_finite()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(DropReason::InvalidHistogram);
    }
    Ok(Histogram {
        bounds: bounds.clone().into_boxed_slice(),
        counts: counts.clone().into_boxed_slice(),
        sum: dp.sum.unwrap_or(0.0),
        count: dp.count,
    })
}

fn summary_value(dp: &SummaryDataPoint) -> Summary {
    let mut q: Vec<(f64, f64)> = Vec::with_capacity(dp.quantile_values.len());
    for v in dp.quantile_values.iter().filter(|v| !v.quantile.is_nan()) {
        match q.iter_mut().find(|(k, _)| *k == v.quantile) {
            Some(e) => e.1 = v.value,
            None => q.push((v.quantile, v.value)),
        }
    }
    q.sort_by(|a, b| a.0.total_cmp(&b.0));
    Summary {
        quantiles: q.into_boxed_slice(),
        sum: dp.sum,
        count: dp.count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{
        AnyValue, AnyValueKind, Gauge, NumberDataPoint, NumberValue, ScopeMetrics, Sum, kv_f64,
        kv_i64, kv_str,
    };
    use opentelemetry_proto::tonic::common::v1::ArrayValue;
    use opentelemetry_proto::tonic::metrics::v1::Histogram as OtlpHistogram;

    fn kv(key: &str, value: Option<AnyValueKind>) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value }),
            ..Default::default()
        }
    }

    /// Point attribute lists that differ in one way each: value, type, order, key/value
    /// boundaries, missing values, composite values.
    fn attr_lists() -> Vec<Vec<KeyValue>> {
        vec![
            vec![],
            vec![kv_str("state", "active")],
            vec![kv_str("state", "idle")],
            vec![kv_str("state", "activ")],
            vec![kv_str("state", "active"), kv_str("wl", "train")],
            vec![kv_str("wl", "train"), kv_str("state", "active")],
            vec![kv_str("n", "8")],
            vec![kv_i64("n", 8)],
            vec![kv_i64("n", 9)],
            vec![kv_f64("n", 8.0)],
            vec![kv("n", Some(AnyValueKind::BoolValue(true)))],
            vec![kv("n", Some(AnyValueKind::BoolValue(false)))],
            vec![kv("n", None)],
            vec![KeyValue {
                key: "n".into(),
                value: None,
                ..Default::default()
            }],
            vec![kv_str("n8", "")],
            vec![kv_str("n", ""), kv_str("8", "")],
            vec![kv(
                "n",
                Some(AnyValueKind::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(AnyValueKind::StringValue("8".into())),
                    }],
                })),
            )],
        ]
    }

    fn gauge(name: &str, unit: &str, points: Vec<Vec<KeyValue>>) -> Metric {
        Metric {
            name: name.into(),
            unit: unit.into(),
            data: Some(MetricKind::Gauge(Gauge {
                data_points: points
                    .into_iter()
                    .map(|attributes| NumberDataPoint {
                        attributes,
                        value: Some(NumberValue::AsDouble(1.0)),
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        }
    }

    fn sum(monotonic: bool, temporality: i32) -> Metric {
        Metric {
            name: "s".into(),
            data: Some(MetricKind::Sum(Sum {
                data_points: vec![NumberDataPoint::default()],
                aggregation_temporality: temporality,
                is_monotonic: monotonic,
            })),
            ..Default::default()
        }
    }

    fn resource(scopes: Vec<Vec<Metric>>) -> ResourceMetrics {
        ResourceMetrics {
            scope_metrics: scopes
                .into_iter()
                .map(|metrics| ScopeMetrics {
                    metrics,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn corpus() -> Vec<ResourceMetrics> {
        let mut out = Vec::new();
        for attrs in attr_lists() {
            out.push(resource(vec![vec![gauge("g", "1", vec![attrs.clone()])]]));
            out.push(resource(vec![vec![
                gauge("g", "1", vec![attrs.clone()]),
                gauge("h", "", vec![vec![kv_str("state", "active")]]),
            ]]));
        }
        out.extend([
            resource(vec![]),
            resource(vec![vec![]]),
            resource(vec![vec![gauge("g", "1", vec![])]]),
            resource(vec![vec![gauge("g", "1", vec![vec![], vec![]])]]),
            resource(vec![vec![gauge("g", "", vec![vec![]])]]),
            resource(vec![vec![gauge("g1", "", vec![vec![]])]]),
            resource(vec![vec![
                gauge("g", "1", vec![vec![]]),
                gauge("h", "", vec![vec![]]),
            ]]),
            // The same metrics split over two scopes: the same layout.
            resource(vec![
                vec![gauge("g", "1", vec![vec![]])],
                vec![gauge("h", "", vec![vec![]])],
            ]),
            resource(vec![vec![
                gauge("h", "", vec![vec![]]),
                gauge("g", "1", vec![vec![]]),
            ]]),
            resource(vec![vec![sum(true, 2)]]),
            resource(vec![vec![sum(false, 2)]]),
            resource(vec![vec![sum(true, 1)]]),
            resource(vec![vec![Metric {
                name: "s".into(),
                ..Default::default()
            }]]),
            resource(vec![vec![Metric {
                name: "x".into(),
                ..Default::default()
            }]]),
            resource(vec![vec![Metric {
                name: "hist".into(),
                data: Some(MetricKind::Histogram(OtlpHistogram::default())),
                ..Default::default()
            }]]),
        ]);
        out
    }

    fn composite(rm: &ResourceMetrics) -> bool {
        format!("{rm:?}").contains("ArrayValue")
    }

    fn key(rm: &ResourceMetrics) -> Option<Vec<u8>> {
        let mut k = Vec::new();
        layout_key(rm, &mut k).then_some(k)
    }

    #[test]
    fn walking_a_push_against_a_layout_key_agrees_with_encoding_it() {
        let corpus = corpus();
        let mut matched = 0;
        for a in &corpus {
            let Some(ka) = key(a) else {
                assert!(!layout_matches(a, &[]));
                continue;
            };
            for b in &corpus {
                let same = key(b).as_deref() == Some(ka.as_slice());
                matched += usize::from(same);
                let walked = same && !composite(b);
                assert_eq!(
                    layout_matches(b, &ka),
                    walked,
                    "{b:?} against the key of {a:?}"
                );
            }
            // A prefix or an extension of the key is another layout.
            for n in 0..ka.len() {
                assert!(!layout_matches(a, &ka[..n]));
            }
            let mut longer = ka.clone();
            longer.push(0);
            assert!(!layout_matches(a, &longer));
        }
        // Each push matches its own key; the two-scope push also the one-scope one.
        assert!(matched > corpus.len());
    }

    #[test]
    fn inline_byte_comparison_sees_every_byte() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|x| x.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()));
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 1;
                assert!(!same_bytes(&a, &b), "length {n}, byte {at}");
            }
            assert!(!same_bytes(&a, &[a.as_slice(), &[0]].concat()));
        }
    }
}
