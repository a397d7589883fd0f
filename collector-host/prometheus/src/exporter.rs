//! [`PrometheusExporter`]: the glue between OTLP batches, the intern tables, the sharded
//! series store and the text renderer.
//!
//! Locks, always taken in this order: `gc` (expire/compaction/shutdown only), `gate`
//! (renders share it; compaction takes it exclusively, so ids never change under a
//! render), `interner` (read for lookups, write only when something is new), then one
//! shard mutex at a time (all of them only during compaction). The cluster table's lock
//! is taken alone (a push holds the interner then, never a shard); a cluster's usage
//! counters are atomics, charged under the shard lock as series are created.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use component::config::ConfigErrors;
use component::telemetry::MetricPrefix;
use component::{ComponentConfig, MetricFamily, ResourceMetrics, Timestamp};
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use crate::cluster_usage::{self, ClusterCaps, ClusterTable, ClusterUsage};
use crate::config::PrometheusExporterConfig;
use crate::intern::{FamilyId, FamilyKind, Interner, NONE, remap};
use crate::labels::Scratch;
use crate::metrics::{self, Counters};
use crate::render::{self, ExtraReject};
use crate::store::{DropCounts, DropReason, Limits, ResourcePlan, Shard};
use crate::text::{escape_label_value, write_header};
use crate::translate::{Lookup, Settings, translate};

/// Number of series shards (resources are spread by label-set id).
pub const SHARDS: usize = 16;

/// Removed series needed before `expire` considers a compaction (together with a quarter
/// of the live series).
const GC_MIN_REMOVED: u64 = 1024;

/// Per-thread translation buffers kept between `consume` calls, so a push allocates
/// nothing in steady state. Dropped instead of kept when a huge batch inflated them.
const MAX_KEPT_UPDATES: usize = 4096;

thread_local! {
    static SCRATCH: RefCell<(Scratch, ResourcePlan)> = RefCell::default();
}

/// What one `consume` call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumeStats {
    /// Data points received.
    pub points: u64,
    /// Data points stored (new or updated series).
    pub stored: u64,
    /// Data points dropped (counted by reason in the telemetry).
    pub dropped: u64,
    /// Of those, the points lost for good ([`DropReason::is_loss`]): what a receiver
    /// reports to its client as partial success.
    pub lost: u64,
    /// The reason of the most frequent loss, for the partial-success message.
    pub loss_reason: Option<DropReason>,
}

#[derive(Debug, Default)]
struct GcState {
    removed_since: u64,
    interned_after: usize,
}

/// The Prometheus exporter. Thread-safe; share it behind an `Arc`.
#[derive(Debug)]
pub struct PrometheusExporter {
    cfg: PrometheusExporterConfig,
    settings: Settings,
    exp_s: u32,
    gc: Mutex<GcState>,
    gate: RwLock<()>,
    interner: RwLock<Interner>,
    shards: Box<[Mutex<Shard>]>,
    series: AtomicUsize,
    resources: AtomicUsize,
    /// Series and estimated bytes held per cluster (escaped `ingero_cluster_id` label
    /// value), charged as series are created and released as they expire.
    clusters: ClusterTable,
    /// The resource attribute that names a resource's cluster (the host's request scope
    /// key, [`Self::with_scope_key`]; `None`, the default: no per-cluster caps beyond the
    /// one shared allowance).
    scope_key: Option<&'static str>,
    counters: Counters,
}

/// The cluster of a resource (its `key` attribute) as its label value is interned
/// (escaped), if it names one.
fn cluster_key<'a>(
    rm: &'a ResourceMetrics,
    key: Option<&str>,
) -> Option<std::borrow::Cow<'a, str>> {
    let c = component::otlp::get_str(component::otlp::resource_attrs(rm), key?)?;
    if !crate::text::needs_escape(c) {
        return Some(std::borrow::Cow::Borrowed(c));
    }
    let mut esc = String::new();
    escape_label_value(c, &mut esc);
    Some(std::borrow::Cow::Owned(esc))
}

fn secs(t: Timestamp) -> u32 {
    u32::try_from(t.as_nanos() / 1_000_000_000).unwrap_or(u32::MAX)
}

fn shard_of(set: u32) -> usize {
    set as usize % SHARDS
}

impl PrometheusExporter {
    /// Build an exporter; the config is validated first (every problem is reported).
    pub fn new(cfg: PrometheusExporterConfig) -> Result<Self, ConfigErrors> {
        cfg.validate()?;
        let const_labels = cfg
            .const_labels
            .iter()
            .map(|(k, v)| {
                let mut esc = String::new();
                escape_label_value(v, &mut esc);
                (k.clone(), esc)
            })
            .collect();
        let settings = Settings {
            namespace: cfg.namespace.clone(),
            with_suffixes: cfg.with_suffixes(),
            resource_to_telemetry: cfg.resource_to_telemetry_conversion.enabled,
            const_labels,
            drop_attributes: cfg.drop_attributes.clone().unwrap_or_default(),
            layout_memo: true,
            reserved: Default::default(),
            own_prefix: component::telemetry::DEFAULT_HOST_PREFIX,
            reserved_prefixes: &[],
            pipeline_gauges: &[],
        };
        let budget = cluster_usage::Budget {
            max_bytes: cfg.max_bytes,
            tenant: cfg.tenant_caps(),
        };
        Ok(PrometheusExporter {
            exp_s: cfg.expiration_secs(),
            cfg,
            settings,
            gc: Mutex::new(GcState::default()),
            gate: RwLock::new(()),
            interner: RwLock::new(Interner::default()),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            series: AtomicUsize::new(0),
            resources: AtomicUsize::new(0),
            clusters: ClusterTable::new(budget),
            scope_key: None,
            counters: Counters::default(),
        })
    }

    /// Charge resources to the cluster their `key` attribute names (the host's request
    /// scope key), or, with `None` (the default), all of them to the one shared allowance.
    pub fn with_scope_key(mut self, key: Option<&'static str>) -> Self {
        self.scope_key = key;
        self
    }

    /// The attribute keys left out of label sets when the config leaves `drop_attributes`
    /// unset (the distribution's: attributes its agents or components put on points whose
    /// values change with every point; none otherwise). A config's own list, `[]`
    /// included, wins.
    pub fn with_default_drop_attributes(mut self, keys: &'static [&'static str]) -> Self {
        if self.cfg.drop_attributes.is_none() {
            self.settings.drop_attributes = keys.iter().map(|k| (*k).to_string()).collect();
        }
        self
    }

    /// OTLP gauges the distribution's processors put into the pipeline under a name its
    /// reserved prefixes ([`Self::with_names`]) would refuse: they are stored as data (as
    /// gauges only; the same name as another type is still refused).
    pub fn with_pipeline_gauges(mut self, names: &'static [&'static str]) -> Self {
        self.settings.pipeline_gauges = names;
        self
    }

    /// The attribute keys left out of label sets: the config's `drop_attributes`, or the
    /// distribution's default when the config leaves it unset.
    pub fn drop_attributes(&self) -> &[String] {
        &self.settings.drop_attributes
    }

    pub fn config(&self) -> &PrometheusExporterConfig {
        &self.cfg
    }

    /// Nothing to start (the host owns the listener); present for the component lifecycle.
    pub fn start(&self) {}

    /// Drop every series and interned entry. Safe to call more than once; `consume` after
    /// it simply starts filling the exporter again. Counters are kept.
    pub fn shutdown(&self) {
        let _gc = self.gc.lock();
        let _gate = self.gate.write();
        let mut interner = self.interner.write();
        *interner = Interner::default();
        for shard in self.shards.iter() {
            *shard.lock() = Shard::default();
        }
        self.series.store(0, Relaxed);
        self.resources.store(0, Relaxed);
        self.clusters.clear();
    }

    /// Series held now (including expired ones `expire` has not removed yet).
    pub fn series_count(&self) -> usize {
        self.series.load(Relaxed)
    }

    /// Resource label sets held now.
    pub fn resource_count(&self) -> usize {
        self.resources.load(Relaxed)
    }

    /// Points dropped so far for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.counters.dropped(reason)
    }

    /// The same exporter with its own families named under `prefix` (the host's metric
    /// prefix, which the distribution gives; [`DEFAULT_HOST_PREFIX`] otherwise), and
    /// pushed data refused under that prefix and under each of `reserved` (the name
    /// prefixes of the families the distribution's components write on the page).
    ///
    /// [`DEFAULT_HOST_PREFIX`]: component::telemetry::DEFAULT_HOST_PREFIX
    pub fn with_names(mut self, prefix: MetricPrefix, reserved: &'static [&'static str]) -> Self {
        self.settings.own_prefix = prefix;
        self.settings.reserved_prefixes = reserved;
        self
    }

    /// Store a batch. Called concurrently from request tasks; never blocks on I/O.
    /// The same exporter without the layout and resource memos (`translate`): every push
    /// takes the full translation. For differential tests; the results must not differ.
    #[doc(hidden)]
    pub fn without_layout_memo(mut self) -> Self {
        self.settings.layout_memo = false;
        self
    }

    /// Layouts in the layout memo (tests).
    #[doc(hidden)]
    pub fn layout_memo_entries(&self) -> usize {
        self.interner.read().layouts.read().len()
    }

    pub fn consume(&self, data: &[ResourceMetrics], now: Timestamp) -> ConsumeStats {
        self.consume_as(data, now, None)
    }

    /// [`Self::consume`] for `tenant` (the identity of the push's bearer token; `None`:
    /// no token): the clusters it creates are charged to its share
    /// (`max_series_per_tenant`, `max_bytes_per_tenant`) and to `max_bytes`.
    pub fn consume_as(
        &self,
        data: &[ResourceMetrics],
        now: Timestamp,
        tenant: Option<&str>,
    ) -> ConsumeStats {
        let tenant = tenant.unwrap_or("");
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buffers) => {
                let (sc, plan) = &mut *buffers;
                let stats = self.consume_with(data, now, tenant, sc, plan);
                if plan.updates.capacity() > MAX_KEPT_UPDATES {
                    *plan = ResourcePlan::default();
                }
                stats
            }
            Err(_) => self.consume_with(
                data,
                now,
                tenant,
                &mut Scratch::default(),
                &mut ResourcePlan::default(),
            ),
        })
    }

    fn consume_with(
        &self,
        data: &[ResourceMetrics],
        now: Timestamp,
        tenant: &str,
        sc: &mut Scratch,
        plan: &mut ResourcePlan,
    ) -> ConsumeStats {
        let now_s = secs(now);
        let mut stats = ConsumeStats::default();
        let mut total = DropCounts::default();
        for rm in data {
            let points = component::otlp::count_points(std::slice::from_ref(rm));
            stats.points += points;
            let mut drops = DropCounts::default();
            // Per-cluster caps only with promoted resource labels (the cluster is a label).
            // Resources that name no cluster share one allowance (the empty cluster), so
            // leaving the id out never escapes the per-cluster caps.
            let cluster = cluster_key(rm, self.scope_key)
                .or(Some(std::borrow::Cow::Borrowed("")))
                .filter(|_| self.settings.resource_to_telemetry);
            let interner = self.interner.read();
            // Looked up under the interner guard: `shutdown` (which clears the table)
            // waits for it, so the usage stays the table's while the plan is applied.
            let mut usage = cluster.as_deref().map(|c| self.clusters.usage(c, tenant));
            let capped = if self.series.load(Relaxed) >= self.cfg.max_series {
                Some(DropReason::SeriesLimit)
            } else {
                usage.as_ref().and_then(|u| {
                    u.full(self.cluster_caps(), || {
                        cluster_usage::raw_resource_bytes(component::otlp::resource_attrs(rm))
                    })
                })
            };
            let mut lk = Lookup::Read {
                interner: &interner,
                capped,
            };
            if translate(&mut lk, &self.settings, rm, now_s, sc, plan, &mut drops).is_ok() {
                stats.stored += self.apply(plan, now_s, usage.as_ref(), &interner, &mut drops);
                drop(interner);
            } else {
                drop(interner);
                drops = DropCounts::default();
                let mut w = self.interner.write();
                usage = cluster.as_deref().map(|c| self.clusters.usage(c, tenant));
                let ok = translate(
                    &mut Lookup::Write(&mut w),
                    &self.settings,
                    rm,
                    now_s,
                    sc,
                    plan,
                    &mut drops,
                )
                .is_ok();
                let r = RwLockWriteGuard::downgrade(w);
                if ok {
                    stats.stored += self.apply(plan, now_s, usage.as_ref(), &r, &mut drops);
                } else {
                    // The write view never asks for itself; count rather than assume.
                    drops = DropCounts::default();
                    drops.add(DropReason::InternerFull, points);
                }
            }
            if let (Some(c), Some(u)) = (cluster, usage) {
                self.clusters.done(&c, u);
            }
            for (t, d) in total.0.iter_mut().zip(drops.0.iter()) {
                *t += d;
            }
        }
        stats.dropped = total.total();
        self.counters
            .points_received
            .fetch_add(stats.points, Relaxed);
        // Nothing dropped (the common push): no loss to name, no counter to move.
        if stats.dropped == 0 {
            return stats;
        }
        let losses = DropReason::ALL
            .iter()
            .filter(|r| r.is_loss())
            .map(|r| (total.get(*r), *r))
            .filter(|(n, _)| *n > 0);
        stats.lost = losses.clone().map(|(n, _)| n).sum();
        stats.loss_reason = losses.max_by_key(|(n, _)| *n).map(|(_, r)| r);
        self.counters.commit_drops(&total);
        stats
    }

    fn cluster_caps(&self) -> ClusterCaps {
        ClusterCaps {
            max_series: self.cfg.max_series_per_cluster,
            max_bytes: self.cfg.max_bytes_per_cluster,
        }
    }

    /// Store a translated plan (`interner`: the caller's guard, so ids are current);
    /// `cluster`: the resource's cluster, charged for what is created. Returns the points
    /// stored.
    fn apply(
        &self,
        plan: &mut ResourcePlan,
        now_s: u32,
        cluster: Option<&std::sync::Arc<ClusterUsage>>,
        interner: &Interner,
        drops: &mut DropCounts,
    ) -> u64 {
        if plan.resource == NONE || plan.updates.is_empty() {
            return 0;
        }
        let limits = Limits {
            max_series: self.cfg.max_series,
            series: &self.series,
            resources: &self.resources,
            cluster,
            cluster_caps: self.cluster_caps(),
            interner,
        };
        let Some(shard) = self.shards.get(shard_of(plan.resource)) else {
            return 0;
        };
        shard.lock().apply(plan, now_s, self.exp_s, &limits, drops)
    }

    /// Series held by `cluster` now (tests, telemetry).
    pub fn cluster_series(&self, cluster: &str) -> usize {
        self.cluster_usage(cluster).0
    }

    /// Estimated bytes held by `cluster` now ([`crate::cluster_usage`]).
    pub fn cluster_bytes(&self, cluster: &str) -> usize {
        self.cluster_usage(cluster).1
    }

    fn cluster_usage(&self, cluster: &str) -> (usize, usize) {
        let mut esc = String::new();
        escape_label_value(cluster, &mut esc);
        self.clusters.get(&esc).unwrap_or((0, 0))
    }

    /// Estimated bytes of every cluster together ([`crate::cluster_usage`]).
    pub fn total_bytes(&self) -> usize {
        self.clusters.global().1
    }

    /// Series and estimated bytes the clusters of `tenant` hold (`None`: pushes without
    /// a token).
    pub fn tenant_usage(&self, tenant: Option<&str>) -> (usize, usize) {
        self.clusters.tenant(tenant.unwrap_or("")).unwrap_or((0, 0))
    }

    /// Clusters with something held (or a push in progress).
    pub fn cluster_count(&self) -> usize {
        self.clusters.len()
    }

    /// Remove series not updated within `metric_expiration` of `now`, then, when enough
    /// was removed or the intern tables grew enough, free interned entries no live series
    /// uses. Call it on a timer. Returns the number of series removed.
    pub fn expire(&self, now: Timestamp) -> usize {
        let now_s = secs(now);
        let mut gc = self.gc.lock();
        let mut removed = 0;
        let mut removed_res = 0;
        {
            // Ids cannot be renumbered under it (compaction waits for `gc`, held here), and
            // the byte estimate of what expires is computed from the same tables it was
            // charged from.
            let interner = self.interner.read();
            for shard in self.shards.iter() {
                let (s, r) = shard.lock().expire(now_s, self.exp_s, &interner);
                removed += s;
                removed_res += r;
            }
        }
        self.series.fetch_sub(removed, Relaxed);
        self.resources.fetch_sub(removed_res, Relaxed);
        if removed_res > 0 {
            self.clusters.prune();
        }
        self.counters
            .series_expired
            .fetch_add(removed as u64, Relaxed);
        gc.removed_since += removed as u64;
        let interned = {
            let i = self.interner.read();
            i.strings.len() + i.sets.len()
        };
        let live = self.series.load(Relaxed) as u64;
        let many_removed =
            gc.removed_since >= GC_MIN_REMOVED && gc.removed_since.saturating_mul(4) >= live;
        let grew = interned > gc.interned_after.saturating_mul(2) + 4096;
        if many_removed || grew {
            self.compact_locked(&mut gc, false);
        }
        removed
    }

    /// Free interned entries no live series uses, whatever the garbage share. `expire`
    /// does this by itself when worthwhile; this is for tests and operators.
    /// Returns whether anything was freed.
    pub fn compact(&self) -> bool {
        let mut gc = self.gc.lock();
        self.compact_locked(&mut gc, true)
    }

    fn compact_locked(&self, gc: &mut GcState, force: bool) -> bool {
        let _gate = self.gate.write();
        let mut interner = self.interner.write();
        let mut shards: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();

        let mut live_sets = vec![false; interner.sets.len()];
        let mut live_fams = vec![false; interner.families.len()];
        let mark = |v: &mut Vec<bool>, id: u32| {
            if let Some(x) = v.get_mut(id as usize) {
                *x = true;
            }
        };
        for shard in shards.iter() {
            for (&r, e) in &shard.resources {
                mark(&mut live_sets, r);
                mark(&mut live_sets, e.target_info);
                for s in &e.series {
                    mark(&mut live_sets, s.labels);
                    mark(&mut live_fams, s.family());
                }
            }
        }
        let dead_sets = live_sets.iter().filter(|l| !**l).count();
        let dead_fams = live_fams.iter().filter(|l| !**l).count();
        let live_strings = interner.live_strings(&live_sets);
        let dead_strings = live_strings.iter().filter(|l| !**l).count();
        let total = live_sets.len() + live_strings.len();
        let garbage = dead_sets + dead_strings;
        gc.removed_since = 0;
        if garbage + dead_fams == 0 || (!force && garbage.saturating_mul(4) < total) {
            gc.interned_after = total;
            return false;
        }

        let (set_map, fam_map) = interner.compact(&live_sets, &live_fams);
        let mut maps: Vec<HashMap<u32, _>> = (0..SHARDS).map(|_| HashMap::new()).collect();
        for shard in shards.iter_mut() {
            for (r, mut e) in shard.resources.drain() {
                let nr = remap(&set_map, r);
                if nr == NONE {
                    continue;
                }
                e.target_info = remap(&set_map, e.target_info);
                for s in e.series.iter_mut() {
                    s.labels = remap(&set_map, s.labels);
                    s.set_family(remap(&fam_map, s.family()));
                }
                e.recompute_mask();
                if let Some(m) = maps.get_mut(shard_of(nr)) {
                    m.insert(nr, e);
                }
            }
        }
        for (shard, map) in shards.iter_mut().zip(maps) {
            let mut counts = vec![0u32; interner.families.len()];
            for e in map.values() {
                for s in &e.series {
                    if let Some(c) = counts.get_mut(s.family() as usize) {
                        *c += 1;
                    }
                }
            }
            shard.resources = map;
            shard.family_counts = counts;
        }
        gc.interned_after = interner.strings.len() + interner.sets.len();
        self.counters.compactions.fetch_add(1, Relaxed);
        true
    }

    /// Append the scrape page: every live series at `now` plus `extra` (self-metrics of
    /// Fleet components, already Prometheus-named). Families are sorted by name, each with
    /// one HELP and TYPE line; an `extra` family with the name of a stored family replaces
    /// it (the components' families own their names: their names are reserved from then
    /// on, and data that would translate to them is refused as
    /// [`DropReason::ReservedName`]).
    pub fn render(&self, now: Timestamp, extra: &[MetricFamily], out: &mut String) {
        self.render_chunked(now, extra, out, &mut |_| true);
    }

    /// [`Self::render`] for a streamed response: `flush` is called at points where the
    /// text in `out` is final (after a family, or after a shard's part of one once the
    /// family has a series), with no shard or intern lock held, so it may block on a slow
    /// client without stalling pushes. It may take any prefix of `out` (typically all of
    /// it, once it passes a chunk size). Returns false (and stops) as soon as `flush` does;
    /// `out` then holds an incomplete page. A page is bounded by the chunk size plus one
    /// shard's part of one family, not by the number of series.
    pub fn render_chunked(
        &self,
        now: Timestamp,
        extra: &[MetricFamily],
        out: &mut String,
        flush: &mut dyn FnMut(&mut String) -> bool,
    ) -> bool {
        let window = render::Window {
            now_s: secs(now),
            exp_s: self.exp_s,
        };
        let groups = render::group_extras(extra, |r, n| self.counters.reject_extra(r, n));
        self.reserve(&groups);
        let _gate = self.gate.read();

        enum Source {
            Stored(FamilyId, FamilyKind),
            TargetInfo,
            None,
        }
        struct Entry<'a> {
            name: String,
            help: String,
            kind: &'static str,
            source: Source,
            extra: Option<&'a render::ExtraGroup<'a>>,
        }

        let mut entries: Vec<Entry<'_>> = {
            let i = self.interner.read();
            i.families
                .iter()
                .enumerate()
                .map(|(id, f)| Entry {
                    name: f.name.to_string(),
                    help: f.help.to_string(),
                    kind: f.kind.as_str(),
                    source: Source::Stored(id as FamilyId, f.kind),
                    extra: None,
                })
                .collect()
        };
        let target_info = if self.settings.namespace.is_empty() {
            "target_info".to_string()
        } else {
            format!("{}_target_info", self.settings.namespace)
        };
        entries.push(Entry {
            name: target_info,
            help: "Target metadata".to_string(),
            kind: "gauge",
            source: Source::TargetInfo,
            extra: None,
        });

        let mut index: HashMap<String, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        for g in &groups {
            match index.get(g.name).and_then(|&i| entries.get_mut(i)) {
                // A family of Fleet's components owns its name: series stored under it
                // (pushed before the name was reserved) are left out, whatever their type.
                Some(e) if matches!(e.source, Source::Stored(..)) => {
                    e.help = g.help.to_string();
                    e.kind = render::type_str(g.kind);
                    e.source = Source::None;
                    e.extra = Some(g);
                }
                Some(e) => {
                    if matches!(e.source, Source::TargetInfo)
                        && g.kind == component::MetricType::Gauge
                    {
                        e.extra = Some(g);
                    } else {
                        self.counters.reject_extra(ExtraReject::TypeConflict, 1);
                    }
                }
                None => {
                    index.insert(g.name.to_string(), entries.len());
                    entries.push(Entry {
                        name: g.name.to_string(),
                        help: g.help.to_string(),
                        kind: render::type_str(g.kind),
                        source: Source::None,
                        extra: Some(g),
                    });
                }
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));

        let mut part = render::Part::default();
        for e in &entries {
            let mark = out.len();
            write_header(out, &e.name, &e.help, e.kind);
            let mut n = 0;
            let stored = !matches!(e.source, Source::None);
            for shard in self.shards.iter().filter(|_| stored) {
                // The shard's lock is held for the copy only; the text is written from the
                // copy, and no lock is held during `flush`.
                {
                    let shard = shard.lock();
                    match e.source {
                        Source::Stored(f, _) if shard.family_count(f) > 0 => {
                            part.copy_family(&shard, f, window)
                        }
                        Source::TargetInfo => part.copy_target_info(&shard, window),
                        _ => continue,
                    }
                }
                if part.is_empty() {
                    continue;
                }
                let wrote = {
                    let i = self.interner.read();
                    match e.source {
                        Source::Stored(_, kind) => part.write_family(out, (&e.name, kind), &i),
                        _ => part.write_target_info(out, &e.name, &i),
                    }
                };
                n += wrote;
                // Once the family has a series its header is final, and so is `out`.
                if wrote > 0 && !flush(out) {
                    return false;
                }
            }
            if let Some(g) = e.extra {
                n += render::write_extra(out, g);
            }
            if n == 0 {
                out.truncate(mark);
            } else if !flush(out) {
                return false;
            }
        }
        true
    }

    /// Reserve the names of the self-metric families about to be rendered: data never
    /// creates a family of these names from now on. A name new to the set forgets the
    /// memoised decisions, so a metric already mapped to it is refused from its next push.
    fn reserve(&self, groups: &[render::ExtraGroup<'_>]) {
        let fresh: Vec<&str> = {
            let r = self.settings.reserved.read();
            groups
                .iter()
                .map(|g| g.name)
                .filter(|n| !self.settings.is_reserved_family(n) && !r.contains(*n))
                .collect()
        };
        if fresh.is_empty() {
            return;
        }
        self.settings
            .reserved
            .write()
            .extend(fresh.into_iter().map(Box::from));
        self.interner.write().forget_decisions();
    }

    /// Append this exporter's self-metrics ([`metrics::FAMILIES`], in order, named under
    /// the host's prefix).
    pub fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        use metrics::{LABEL_REASON as REASON, spec};
        let (bytes, families) = {
            let i = self.interner.read();
            (i.heap_bytes(), i.families.len())
        };
        let family = |s: &component::telemetry::MetricSpec| s.family_in(self.settings.own_prefix);
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed) as f64;
        out.push(family(&spec::SERIES).with(&[], self.series.load(Relaxed) as f64));
        out.push(family(&spec::RESOURCES).with(&[], self.resources.load(Relaxed) as f64));
        out.push(family(&spec::FAMILIES_KNOWN).with(&[], families as f64));
        out.push(family(&spec::INTERNED_BYTES).with(&[], bytes as f64));
        out.push(family(&spec::POINTS_RECEIVED).with(&[], load(&self.counters.points_received)));
        let mut dropped = family(&spec::POINTS_DROPPED);
        for r in DropReason::ALL {
            dropped.push(&[(REASON, r.as_str())], self.counters.dropped(r) as f64);
        }
        out.push(dropped);
        out.push(
            family(&spec::SERIES_DROPPED)
                .with(
                    &[(REASON, "limit")],
                    self.counters.dropped(DropReason::SeriesLimit) as f64,
                )
                .with(&[(REASON, "expired")], load(&self.counters.series_expired)),
        );
        out.push(family(&spec::COMPACTIONS).with(&[], load(&self.counters.compactions)));
        let mut rejected = family(&spec::SELF_METRICS_REJECTED);
        for (r, c) in ExtraReject::ALL
            .iter()
            .zip(self.counters.self_rejected.iter())
        {
            rejected.push(&[(REASON, r.as_str())], load(c));
        }
        out.push(rejected);
    }

    /// The prefix this exporter names its own families under (the host's).
    pub fn metric_prefix(&self) -> MetricPrefix {
        self.settings.own_prefix
    }
}
