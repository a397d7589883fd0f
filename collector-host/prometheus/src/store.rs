//! Series storage: sharded by resource label set, one exact-size slice of 24-byte series
//! per resource.
//!
//! A series is (family id, data-point label-set id, value, point time, last update), all
//! in `u32`s plus one 8-byte payload: the `f64` value for gauges and counters, or an index
//! into the resource's slab of histogram/summary states. The resource's own labels are the
//! map key (an interned label set), so they are stored once per resource, not per series.
//! A 64-bit mask of the families (ids below 64) present in each resource lets the renderer
//! skip resources without touching their series.

use hashbrown::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cluster_usage::{self, ClusterCaps, ClusterUsage};
use crate::intern::{FamilyId, FamilyKind, Interner, NONE, SetId};

/// Why a data point was not stored. The telemetry label is [`DropReason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// It would have created a series beyond `max_series`.
    SeriesLimit,
    /// A metric type the exporter cannot translate (none today: every OTLP type is
    /// translated; kept so the telemetry label set stays stable).
    UnsupportedType,
    /// A sum or histogram with unspecified aggregation temporality.
    InvalidTemporality,
    /// Another metric already owns the Prometheus name with a different type.
    TypeConflict,
    /// The metric name cannot be made valid.
    InvalidMetricName,
    /// An attribute key cannot be made a valid label name, or becomes a reserved `__` name.
    InvalidLabelName,
    /// `le` on a histogram or `quantile` on a summary.
    ReservedLabel,
    /// Older than the value already held for the series.
    OutOfOrder,
    /// No value, or flagged "no recorded value".
    NoValue,
    /// Bucket counts that do not match the bounds, or bounds not strictly increasing.
    InvalidHistogram,
    /// More metric families than [`MAX_FAMILIES`].
    FamilyLimit,
    /// The intern tables reached their 4 GiB address space (practically unreachable).
    InternerFull,
    /// It would have created a series beyond `max_series_per_cluster` for its resource's
    /// `ingero.cluster.id`.
    ClusterSeriesLimit,
    /// It would have taken its cluster's estimated bytes beyond `max_bytes_per_cluster`
    /// (see [`crate::cluster_usage`]).
    ClusterBytesLimit,
    /// The metric would translate to the name of a family the host or the distribution's
    /// components write ([`crate::translate::Settings::is_reserved_family`], or a
    /// self-metric the page already carries).
    ReservedName,
    /// It would have taken the clusters of its tenant (the bearer token whose push
    /// created the cluster) beyond `max_series_per_tenant`.
    TenantSeriesLimit,
    /// ... beyond `max_bytes_per_tenant` estimated bytes.
    TenantBytesLimit,
    /// It would have taken every cluster's estimated bytes together beyond `max_bytes`.
    BytesLimit,
}

impl DropReason {
    pub const ALL: [DropReason; 18] = [
        DropReason::SeriesLimit,
        DropReason::UnsupportedType,
        DropReason::InvalidTemporality,
        DropReason::TypeConflict,
        DropReason::InvalidMetricName,
        DropReason::InvalidLabelName,
        DropReason::ReservedLabel,
        DropReason::OutOfOrder,
        DropReason::NoValue,
        DropReason::InvalidHistogram,
        DropReason::FamilyLimit,
        DropReason::InternerFull,
        DropReason::ClusterSeriesLimit,
        DropReason::ClusterBytesLimit,
        DropReason::ReservedName,
        DropReason::TenantSeriesLimit,
        DropReason::TenantBytesLimit,
        DropReason::BytesLimit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::SeriesLimit => "series_limit",
            DropReason::UnsupportedType => "unsupported_type",
            DropReason::InvalidTemporality => "invalid_temporality",
            DropReason::TypeConflict => "type_conflict",
            DropReason::InvalidMetricName => "invalid_metric_name",
            DropReason::InvalidLabelName => "invalid_label_name",
            DropReason::ReservedLabel => "reserved_label",
            DropReason::OutOfOrder => "out_of_order",
            DropReason::NoValue => "no_value",
            DropReason::InvalidHistogram => "invalid_histogram",
            DropReason::FamilyLimit => "family_limit",
            DropReason::InternerFull => "interner_full",
            DropReason::ClusterSeriesLimit => "cluster_series_limit",
            DropReason::ClusterBytesLimit => "cluster_bytes_limit",
            DropReason::ReservedName => "reserved_name",
            DropReason::TenantSeriesLimit => "tenant_series_limit",
            DropReason::TenantBytesLimit => "tenant_bytes_limit",
            DropReason::BytesLimit => "bytes_limit",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the client should hear of it (OTLP partial success): every reason but a
    /// point with no value (a staleness marker: nothing to store) and one older than the
    /// value held (superseded by newer data, as the threshold processor's `superseded`).
    pub fn is_loss(self) -> bool {
        !matches!(self, DropReason::NoValue | DropReason::OutOfOrder)
    }
}

/// Most metric families held; points of further families are dropped and counted.
pub const MAX_FAMILIES: usize = 100_000;

/// Per-call drop tally, committed to the exporter's counters once the call is done.
#[derive(Debug, Default, Clone)]
pub struct DropCounts(pub [u64; DropReason::ALL.len()]);

impl DropCounts {
    pub fn add(&mut self, r: DropReason, n: u64) {
        if let Some(c) = self.0.get_mut(r.index()) {
            *c += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn get(&self, r: DropReason) -> u64 {
        self.0.get(r.index()).copied().unwrap_or(0)
    }
}

/// An explicit-bucket histogram, buckets not cumulative (as OTLP sends them).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: Box<[f64]>,
    /// `bounds.len() + 1` counts, or empty when the point carried no buckets.
    pub counts: Box<[u64]>,
    pub sum: f64,
    pub count: u64,
}

/// A summary: (quantile, value) sorted by quantile.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub quantiles: Box<[(f64, f64)]>,
    pub sum: f64,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Complex {
    Histogram(Histogram),
    Summary(Summary),
}

/// One stored series (24 bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Series {
    /// Family id; bit 31 set when `payload` is a slab index (histogram, summary).
    fam: u32,
    /// Data-point label set.
    pub labels: SetId,
    /// `f64` bits (gauge, counter) or slab index (histogram, summary).
    pub payload: u64,
    /// Point time, Unix seconds.
    pub time_s: u32,
    /// Last update as given by the host's `now`, Unix seconds.
    pub seen_s: u32,
}

const COMPLEX_BIT: u32 = 1 << 31;

impl Series {
    pub fn family(&self) -> FamilyId {
        self.fam & !COMPLEX_BIT
    }

    pub fn is_complex(&self) -> bool {
        self.fam & COMPLEX_BIT != 0
    }

    /// Renumber the family, keeping the payload kind.
    pub fn set_family(&mut self, f: FamilyId) {
        self.fam = (f & !COMPLEX_BIT) | (self.fam & COMPLEX_BIT);
    }

    pub fn value(&self) -> f64 {
        f64::from_bits(self.payload)
    }
}

const _: () = assert!(std::mem::size_of::<Series>() == 24);

/// Whether a series last updated at `seen_s` is still live at `now_s`.
pub fn is_live(seen_s: u32, now_s: u32, exp_s: u32) -> bool {
    now_s < seen_s.saturating_add(exp_s)
}

const _: () = assert!(std::mem::size_of::<ResourceEntry>() == 48);

/// The series of one resource label set.
#[derive(Debug)]
pub struct ResourceEntry {
    pub series: Box<[Series]>,
    /// Bit f set when a series of family f (< 64) is present.
    pub mask: u64,
    /// `target_info` label set, or NONE.
    pub target_info: SetId,
    /// Bytes charged to `cluster` for the resource itself (not its series).
    charged: u32,
    /// Histogram and summary states, indexed by `Series::payload`.
    pub complex: Option<Box<Vec<Option<Complex>>>>,
    /// What the resource's cluster holds (None: no cluster, or caps not applied).
    cluster: Option<Arc<ClusterUsage>>,
}

impl ResourceEntry {
    fn new() -> Self {
        ResourceEntry {
            series: Box::default(),
            mask: 0,
            target_info: NONE,
            charged: 0,
            complex: None,
            cluster: None,
        }
    }

    /// Give back to the cluster everything this entry was charged (it is being removed).
    fn release_all(&self, interner: &Interner) {
        if let Some(c) = &self.cluster {
            let bytes: usize = self
                .series
                .iter()
                .map(|s| cluster_usage::series_bytes(interner, s.family(), s.labels))
                .sum();
            c.release(self.series.len(), bytes + self.charged as usize);
        }
    }

    pub fn has_family(&self, f: FamilyId) -> bool {
        f >= 64 || self.mask & (1u64 << f) != 0
    }

    pub fn complex(&self, slot: u64) -> Option<&Complex> {
        self.complex
            .as_ref()
            .and_then(|c| c.get(usize::try_from(slot).ok()?))
            .and_then(Option::as_ref)
    }

    fn put_complex(&mut self, c: Complex) -> u64 {
        let slab = self.complex.get_or_insert_with(Default::default);
        if let Some(i) = slab.iter().position(Option::is_none) {
            slab[i] = Some(c);
            i as u64
        } else {
            slab.push(Some(c));
            (slab.len() - 1) as u64
        }
    }

    fn take_complex(&mut self, slot: u64) -> Option<Complex> {
        let slab = self.complex.as_mut()?;
        let c = slab.get_mut(usize::try_from(slot).ok()?)?.take();
        if slab.iter().all(Option::is_none) {
            self.complex = None;
        }
        c
    }

    pub fn recompute_mask(&mut self) {
        self.mask = self
            .series
            .iter()
            .map(Series::family)
            .filter(|f| *f < 64)
            .fold(0, |m, f| m | (1u64 << f));
    }
}

/// A value to store.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateValue {
    Number { value: f64, delta: bool },
    Histogram { hist: Box<Histogram>, delta: bool },
    Summary(Summary),
}

/// One translated data point.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub family: FamilyId,
    pub kind: FamilyKind,
    pub labels: SetId,
    pub time_s: u32,
    pub value: UpdateValue,
}

/// Everything one `ResourceMetrics` translated to.
#[derive(Debug, Default)]
pub struct ResourcePlan {
    pub resource: SetId,
    pub target_info: SetId,
    pub updates: Vec<Update>,
}

impl ResourcePlan {
    pub fn clear(&mut self) {
        self.resource = NONE;
        self.target_info = NONE;
        self.updates.clear();
    }
}

/// Global limits and counts the shards share, and the plan's cluster.
#[derive(Debug)]
pub struct Limits<'a> {
    pub max_series: usize,
    pub series: &'a AtomicUsize,
    pub resources: &'a AtomicUsize,
    /// The resource's cluster, charged for what it creates (None: no per-cluster caps).
    pub cluster: Option<&'a Arc<ClusterUsage>>,
    pub cluster_caps: ClusterCaps,
    /// The intern tables the plan's ids refer to (the caller holds them), for the byte
    /// estimate of what is created.
    pub interner: &'a Interner,
}

fn bump(counts: &mut Vec<u32>, f: FamilyId, up: bool) {
    let i = f as usize;
    if counts.len() <= i {
        counts.resize(i + 1, 0);
    }
    if let Some(c) = counts.get_mut(i) {
        *c = if up {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
    }
}

/// One shard of resources.
#[derive(Debug, Default)]
pub struct Shard {
    pub resources: HashMap<SetId, ResourceEntry>,
    /// Live series per family id in this shard (lets the renderer skip whole shards).
    pub family_counts: Vec<u32>,
}

impl Shard {
    pub fn family_count(&self, f: FamilyId) -> u32 {
        self.family_counts.get(f as usize).copied().unwrap_or(0)
    }

    fn bump_family(&mut self, f: FamilyId, up: bool) {
        bump(&mut self.family_counts, f, up);
    }

    /// Store a plan. Returns the number of points stored; drops go to `drops`.
    pub fn apply(
        &mut self,
        plan: &mut ResourcePlan,
        now_s: u32,
        exp_s: u32,
        limits: &Limits<'_>,
        drops: &mut DropCounts,
    ) -> u64 {
        if plan.updates.is_empty() {
            return 0;
        }
        let Shard {
            resources,
            family_counts,
        } = self;
        let mut is_new = false;
        let entry = resources.entry(plan.resource).or_insert_with(|| {
            is_new = true;
            ResourceEntry::new()
        });
        if is_new && let Some(c) = limits.cluster {
            let bytes =
                cluster_usage::resource_bytes(limits.interner, plan.resource, plan.target_info);
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            if let Err(reason) = c.charge(0, bytes as usize, limits.cluster_caps) {
                // Every point of a new resource would be a new series.
                drops.add(reason, plan.updates.len() as u64);
                plan.updates.clear();
                resources.remove(&plan.resource);
                return 0;
            }
            entry.cluster = Some(c.clone());
            entry.charged = bytes;
        }
        // Worked on as a Vec, kept as an exact-size boxed slice (16 bytes, no spare room).
        let mut series = std::mem::take(&mut entry.series).into_vec();
        if is_new {
            series.reserve_exact(plan.updates.len());
        }
        if plan.target_info != NONE && plan.target_info != entry.target_info {
            if !is_new && let Some(c) = &entry.cluster {
                // Charged whatever the cap: the resource's labels are already held.
                let now =
                    cluster_usage::resource_bytes(limits.interner, plan.resource, plan.target_info);
                let now = u32::try_from(now).unwrap_or(u32::MAX);
                c.release(0, entry.charged as usize);
                c.force_bytes(now as usize);
                entry.charged = now;
            }
            entry.target_info = plan.target_info;
        }
        let mut stored = 0;
        // A resource's points usually come in the order of its series (both follow its
        // pushes): try the slot after the last match before searching. A resource holds
        // one series per (family, labels), so either way finds the same one.
        let mut next = 0;
        for u in plan.updates.drain(..) {
            let same = |s: &Series| s.family() == u.family && s.labels == u.labels;
            let existing = match series.get(next) {
                Some(s) if same(s) => Some(next),
                _ => series.iter().position(same),
            };
            match existing {
                Some(i) => {
                    next = i + 1;
                    let Some(s) = series.get(i).copied() else {
                        continue;
                    };
                    if u.time_s < s.time_s {
                        drops.add(DropReason::OutOfOrder, 1);
                        continue;
                    }
                    let live = is_live(s.seen_s, now_s, exp_s);
                    let payload = match u.value {
                        UpdateValue::Number { value, delta } => {
                            if delta && live {
                                (s.value() + value).to_bits()
                            } else {
                                value.to_bits()
                            }
                        }
                        UpdateValue::Histogram { hist, delta } => {
                            let merged = match entry.take_complex(s.payload) {
                                Some(Complex::Histogram(mut old))
                                    if delta
                                        && live
                                        && old.bounds == hist.bounds
                                        && old.counts.len() == hist.counts.len() =>
                                {
                                    for (o, n) in old.counts.iter_mut().zip(hist.counts.iter()) {
                                        *o = o.saturating_add(*n);
                                    }
                                    old.sum += hist.sum;
                                    old.count = old.count.saturating_add(hist.count);
                                    old
                                }
                                _ => *hist,
                            };
                            entry.put_complex(Complex::Histogram(merged))
                        }
                        UpdateValue::Summary(sum) => {
                            entry.take_complex(s.payload);
                            entry.put_complex(Complex::Summary(sum))
                        }
                    };
                    if let Some(slot) = series.get_mut(i) {
                        slot.payload = payload;
                        slot.time_s = u.time_s;
                        slot.seen_s = now_s;
                    }
                    stored += 1;
                }
                None => {
                    let bytes = match &entry.cluster {
                        Some(c) => {
                            let bytes =
                                cluster_usage::series_bytes(limits.interner, u.family, u.labels);
                            if let Err(reason) = c.charge(1, bytes, limits.cluster_caps) {
                                drops.add(reason, 1);
                                continue;
                            }
                            bytes
                        }
                        None => 0,
                    };
                    let prev = limits.series.fetch_add(1, Ordering::Relaxed);
                    if prev >= limits.max_series {
                        limits.series.fetch_sub(1, Ordering::Relaxed);
                        if let Some(c) = &entry.cluster {
                            c.release(1, bytes);
                        }
                        drops.add(DropReason::SeriesLimit, 1);
                        continue;
                    }
                    let complex = !matches!(u.value, UpdateValue::Number { .. });
                    let payload = match u.value {
                        UpdateValue::Number { value, .. } => value.to_bits(),
                        UpdateValue::Histogram { hist, .. } => {
                            entry.put_complex(Complex::Histogram(*hist))
                        }
                        UpdateValue::Summary(sum) => entry.put_complex(Complex::Summary(sum)),
                    };
                    series.push(Series {
                        fam: (u.family & !COMPLEX_BIT) | if complex { COMPLEX_BIT } else { 0 },
                        labels: u.labels,
                        payload,
                        time_s: u.time_s,
                        seen_s: now_s,
                    });
                    if u.family < 64 {
                        entry.mask |= 1u64 << u.family;
                    }
                    bump(family_counts, u.family, true);
                    stored += 1;
                }
            }
        }
        let empty = series.is_empty();
        entry.series = series.into_boxed_slice();
        if empty {
            entry.release_all(limits.interner);
            resources.remove(&plan.resource);
        } else if is_new {
            limits.resources.fetch_add(1, Ordering::Relaxed);
        }
        stored
    }

    /// Remove series not updated within `exp_s` of `now_s`, and resources left empty,
    /// releasing what their clusters were charged (`interner`: the tables the ids refer
    /// to). Returns (series removed, resources removed).
    pub fn expire(&mut self, now_s: u32, exp_s: u32, interner: &Interner) -> (usize, usize) {
        let mut removed_series = 0;
        let mut removed_resources = 0;
        let mut gone_families: Vec<FamilyId> = Vec::new();
        self.resources.retain(|_, e| {
            if e.series.iter().all(|s| is_live(s.seen_s, now_s, exp_s)) {
                return true;
            }
            let before = e.series.len();
            let mut dead_slots = Vec::new();
            let mut dead_bytes = 0;
            let charged = e.cluster.is_some();
            let mut series = std::mem::take(&mut e.series).into_vec();
            series.retain(|s| {
                let live = is_live(s.seen_s, now_s, exp_s);
                if !live {
                    gone_families.push(s.family());
                    if s.is_complex() {
                        dead_slots.push(s.payload);
                    }
                    if charged {
                        dead_bytes += cluster_usage::series_bytes(interner, s.family(), s.labels);
                    }
                }
                live
            });
            e.series = series.into_boxed_slice();
            let dead = before - e.series.len();
            removed_series += dead;
            for slot in dead_slots {
                e.take_complex(slot);
            }
            e.recompute_mask();
            let gone = e.series.is_empty();
            if let Some(c) = &e.cluster {
                let resource = if gone { e.charged as usize } else { 0 };
                c.release(dead, dead_bytes + resource);
            }
            if gone {
                removed_resources += 1;
                false
            } else {
                true
            }
        });
        for f in gone_families {
            self.bump_family(f, false);
        }
        (removed_series, removed_resources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(family: FamilyId, labels: SetId, t: u32, v: f64, delta: bool) -> Update {
        Update {
            family,
            kind: FamilyKind::Gauge,
            labels,
            time_s: t,
            value: UpdateValue::Number { value: v, delta },
        }
    }

    fn plan(resource: SetId, updates: Vec<Update>) -> ResourcePlan {
        ResourcePlan {
            resource,
            target_info: NONE,
            updates,
        }
    }

    const NO_CAPS: ClusterCaps = ClusterCaps {
        max_series: usize::MAX,
        max_bytes: usize::MAX,
    };

    #[test]
    fn a_cluster_at_its_cap_updates_but_creates_nothing_and_expiry_gives_room_back() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let usage = Arc::new(ClusterUsage::default());
        let limits = Limits {
            max_series: 100,
            series: &series,
            resources: &resources,
            cluster: Some(&usage),
            cluster_caps: ClusterCaps {
                max_series: 2,
                max_bytes: usize::MAX,
            },
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        let updates = |t| {
            vec![
                num(0, 0, t, 1.0, false),
                num(1, 0, t, 2.0, false),
                num(2, 0, t, 3.0, false),
            ]
        };
        assert_eq!(
            shard.apply(&mut plan(1, updates(10)), 10, 60, &limits, &mut drops),
            2
        );
        assert_eq!(usage.series(), 2);
        // Resource and series records, no text (nothing interned here).
        assert_eq!(
            usage.bytes(),
            cluster_usage::RESOURCE_BYTES + 2 * cluster_usage::SERIES_BYTES
        );
        assert_eq!(drops.get(DropReason::ClusterSeriesLimit), 1);
        assert_eq!(drops.get(DropReason::SeriesLimit), 0);
        // The next push: the two held series still update, the third is refused again.
        assert_eq!(
            shard.apply(&mut plan(1, updates(11)), 11, 60, &limits, &mut drops),
            2
        );
        assert_eq!(drops.get(DropReason::ClusterSeriesLimit), 2);
        assert_eq!(series.load(Ordering::Relaxed), 2);
        // Expiry gives everything back: series, series bytes and the resource's bytes.
        assert_eq!(shard.expire(100, 60, &interner), (2, 1));
        assert_eq!((usage.series(), usage.bytes()), (0, 0));
        assert_eq!(Arc::strong_count(&usage), 1, "the removed entry let go");
    }

    #[test]
    fn a_cluster_at_its_byte_cap_creates_nothing_and_a_refused_resource_is_not_charged() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let usage = Arc::new(ClusterUsage::default());
        let per_series = cluster_usage::SERIES_BYTES;
        let limits = Limits {
            max_series: 100,
            series: &series,
            resources: &resources,
            cluster: Some(&usage),
            cluster_caps: ClusterCaps {
                max_series: 100,
                max_bytes: cluster_usage::RESOURCE_BYTES + 2 * per_series,
            },
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        let three = vec![
            num(0, 0, 10, 1.0, false),
            num(1, 0, 10, 2.0, false),
            num(2, 0, 10, 3.0, false),
        ];
        assert_eq!(
            shard.apply(&mut plan(1, three.clone()), 10, 60, &limits, &mut drops),
            2
        );
        assert_eq!(drops.get(DropReason::ClusterBytesLimit), 1);
        assert_eq!(usage.bytes(), limits.cluster_caps.max_bytes);
        // A second resource of the cluster does not fit at all: nothing is held for it.
        assert_eq!(
            shard.apply(&mut plan(2, three), 10, 60, &limits, &mut drops),
            0
        );
        assert_eq!(drops.get(DropReason::ClusterBytesLimit), 4);
        assert!(!shard.resources.contains_key(&2));
        assert_eq!(resources.load(Ordering::Relaxed), 1);
        assert_eq!(usage.series(), 2);
        // The global cap refusing a series gives the cluster's charge back.
        let tight = Limits {
            max_series: 2,
            cluster_caps: NO_CAPS,
            ..limits
        };
        assert_eq!(
            shard.apply(
                &mut plan(1, vec![num(5, 0, 11, 1.0, false)]),
                11,
                60,
                &tight,
                &mut drops
            ),
            0
        );
        assert_eq!(drops.get(DropReason::SeriesLimit), 1);
        assert_eq!(usage.series(), 2);
        assert_eq!(usage.bytes(), limits.cluster_caps.max_bytes);
    }

    #[test]
    fn updates_in_place_and_caps_new_series() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let limits = Limits {
            max_series: 3,
            series: &series,
            resources: &resources,
            cluster: None,
            cluster_caps: NO_CAPS,
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        let n = shard.apply(
            &mut plan(
                1,
                vec![num(0, 0, 10, 1.0, false), num(1, 0, 10, 2.0, false)],
            ),
            10,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(n, 2);
        let n = shard.apply(
            &mut plan(
                1,
                vec![
                    num(0, 0, 11, 5.0, false),
                    num(2, 0, 11, 3.0, false),
                    num(3, 0, 11, 4.0, false),
                ],
            ),
            11,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(n, 2);
        assert_eq!(drops.get(DropReason::SeriesLimit), 1);
        assert_eq!(series.load(Ordering::Relaxed), 3);
        assert_eq!(resources.load(Ordering::Relaxed), 1);
        let e = &shard.resources[&1];
        assert_eq!(e.series.len(), 3);
        assert_eq!(e.series[0].value(), 5.0);
        assert_eq!(e.mask, 0b111);
        assert_eq!(shard.family_count(2), 1);
        // A new resource refused entirely leaves no empty entry behind.
        let n = shard.apply(
            &mut plan(2, vec![num(0, 0, 11, 1.0, false)]),
            11,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(n, 0);
        assert!(!shard.resources.contains_key(&2));
        assert_eq!(resources.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn deltas_accumulate_until_the_series_expires() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let limits = Limits {
            max_series: 10,
            series: &series,
            resources: &resources,
            cluster: None,
            cluster_caps: NO_CAPS,
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        shard.apply(
            &mut plan(1, vec![num(0, 0, 10, 2.0, true)]),
            10,
            60,
            &limits,
            &mut drops,
        );
        shard.apply(
            &mut plan(1, vec![num(0, 0, 20, 3.0, true)]),
            20,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(shard.resources[&1].series[0].value(), 5.0);
        // Not updated for longer than the expiration: the next delta starts over.
        shard.apply(
            &mut plan(1, vec![num(0, 0, 100, 4.0, true)]),
            100,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(shard.resources[&1].series[0].value(), 4.0);
        // Out of order points are refused.
        shard.apply(
            &mut plan(1, vec![num(0, 0, 99, 7.0, true)]),
            101,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(drops.get(DropReason::OutOfOrder), 1);
        assert_eq!(shard.resources[&1].series[0].value(), 4.0);
    }

    #[test]
    fn expiry_removes_series_and_empty_resources() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let limits = Limits {
            max_series: 10,
            series: &series,
            resources: &resources,
            cluster: None,
            cluster_caps: NO_CAPS,
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        shard.apply(
            &mut plan(
                1,
                vec![num(0, 0, 10, 1.0, false), num(1, 0, 10, 1.0, false)],
            ),
            10,
            60,
            &limits,
            &mut drops,
        );
        shard.apply(
            &mut plan(2, vec![num(0, 0, 10, 1.0, false)]),
            10,
            60,
            &limits,
            &mut drops,
        );
        shard.apply(
            &mut plan(1, vec![num(0, 0, 50, 1.0, false)]),
            50,
            60,
            &limits,
            &mut drops,
        );
        assert_eq!(shard.expire(69, 60, &interner), (0, 0));
        assert_eq!(shard.expire(70, 60, &interner), (2, 1));
        let e = &shard.resources[&1];
        assert_eq!(e.series.len(), 1);
        assert_eq!(e.mask, 0b1);
        assert_eq!(shard.family_count(0), 1);
        assert_eq!(shard.family_count(1), 0);
        assert!(!shard.resources.contains_key(&2));
    }

    #[test]
    fn histogram_slots_are_reused_and_freed() {
        let series = AtomicUsize::new(0);
        let resources = AtomicUsize::new(0);
        let interner = Interner::default();
        let limits = Limits {
            max_series: 10,
            series: &series,
            resources: &resources,
            cluster: None,
            cluster_caps: NO_CAPS,
            interner: &interner,
        };
        let mut shard = Shard::default();
        let mut drops = DropCounts::default();
        let h = |c: u64| Update {
            family: 0,
            kind: FamilyKind::Histogram,
            labels: 0,
            time_s: 10,
            value: UpdateValue::Histogram {
                hist: Box::new(Histogram {
                    bounds: vec![1.0].into(),
                    counts: vec![c, 1].into(),
                    sum: 1.0,
                    count: c + 1,
                }),
                delta: true,
            },
        };
        shard.apply(&mut plan(1, vec![h(1)]), 10, 60, &limits, &mut drops);
        shard.apply(&mut plan(1, vec![h(2)]), 10, 60, &limits, &mut drops);
        let e = &shard.resources[&1];
        let Some(Complex::Histogram(got)) = e.complex(e.series[0].payload) else {
            panic!()
        };
        assert_eq!(&*got.counts, &[3, 2]);
        assert_eq!(got.count, 5);
        assert_eq!(e.complex.as_ref().unwrap().len(), 1);
        shard.expire(1000, 60, &interner);
        assert!(shard.resources.is_empty());
    }
}
