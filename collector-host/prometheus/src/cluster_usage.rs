//! What each cluster (tenant, by the resource's `ingero.cluster.id`) holds in the store:
//! series and an estimate of their bytes, charged as series are created and released as
//! they expire, so `max_series_per_cluster` and `max_bytes_per_cluster` are exact.
//!
//! Every resource entry of a cluster keeps an `Arc` of its [`ClusterUsage`]; a charge is
//! a compare-and-swap against the caps, taken under the shard lock as the series is
//! created, so concurrent pushes of one cluster can never hold more than its caps
//! together (a recount on a timer let them overshoot by what one interval created).
//!
//! # The byte estimate
//! What a cluster's series pin in the store, counted as if nothing were shared (strings
//! and label sets are interned once for every cluster, so the estimate is an upper bound
//! of what the cluster alone causes):
//! - a series: [`SERIES_BYTES`] + its family name + its data-point labels;
//! - a resource (node): [`RESOURCE_BYTES`] + its labels (and its `target_info` labels);
//! - a label: its name and escaped value as stored, plus a quarter of that text (the
//!   string arena grows by a quarter at a time, so up to a fifth of its allocation is
//!   reserved room: [`text_bytes`]), + [`LABEL_BYTES`].
//!
//! `tests/memory.rs` checks the estimate from above against the heap the allocator
//! counts, for agent fleets and for series of 64 labels at the payload limits.
//!
//! Histogram and summary states (bucket counts, quantiles) are not counted: their size is
//! bounded per point by the receiver's limits and they can change size with every update.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use hashbrown::HashMap;
use parking_lot::RwLock;

use crate::intern::{FamilyId, Interner, NONE, SetId};
use crate::store::DropReason;

/// Bytes charged per series besides its text: the 24-byte series record.
pub const SERIES_BYTES: usize = 24;
/// Bytes charged per label besides its text, as if both strings were new: the pair of
/// symbols (8, 10 with the pair arena's growth room), and per string its arena offset (4,
/// 5 with growth room) and hash-index slot (5 bytes a bucket, up to 2.3 buckets a string
/// between the index's doublings at 7/8 load: 12).
pub const LABEL_BYTES: usize = 48;
/// Bytes charged per resource besides its labels: its entry (48) and map slot.
pub const RESOURCE_BYTES: usize = 64;

/// Byte room under which [`ClusterUsage::full`] estimates a resource before translating
/// it: more than any resource's labels can take within the receiver's limits (64
/// attributes of 256 + 4096 bytes), so far from the cap a push pays nothing for it.
pub const NEAR_BYTE_CAP: usize = 1 << 20;

/// The per-cluster caps (`max_series_per_cluster`, `max_bytes_per_cluster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterCaps {
    pub max_series: usize,
    pub max_bytes: usize,
}

/// Which budget a [`ClusterUsage`] is: a cluster's, a tenant's share, or the exporter's
/// global one. A refusal names the level that refused.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    #[default]
    Cluster,
    Tenant,
    Global,
}

impl Level {
    fn series_refused(self) -> DropReason {
        match self {
            Level::Cluster => DropReason::ClusterSeriesLimit,
            Level::Tenant => DropReason::TenantSeriesLimit,
            Level::Global => DropReason::SeriesLimit,
        }
    }

    fn bytes_refused(self) -> DropReason {
        match self {
            Level::Cluster => DropReason::ClusterBytesLimit,
            Level::Tenant => DropReason::TenantBytesLimit,
            Level::Global => DropReason::BytesLimit,
        }
    }
}

/// Series and estimated bytes one cluster (or tenant, or the whole exporter) holds. A
/// usage with a parent charges the parent too, all or nothing: a cluster's series count
/// against its tenant's share and the global budget.
#[derive(Debug, Default)]
pub struct ClusterUsage {
    series: AtomicUsize,
    bytes: AtomicUsize,
    level: Level,
    parent: Option<(Arc<ClusterUsage>, ClusterCaps)>,
}

impl ClusterUsage {
    /// An empty usage at `level`, charging `parent` (under its caps) as well.
    pub fn new(level: Level, parent: Option<(Arc<ClusterUsage>, ClusterCaps)>) -> Self {
        ClusterUsage {
            level,
            parent,
            ..ClusterUsage::default()
        }
    }

    /// The budget above this one (its tenant's share, or the global budget).
    pub fn parent(&self) -> Option<&Arc<ClusterUsage>> {
        self.parent.as_ref().map(|(p, _)| p)
    }

    pub fn series(&self) -> usize {
        self.series.load(Relaxed)
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// Whether nothing new of a resource fits: no series left, or fewer bytes left than
    /// `resource_bytes` estimates for the resource (called only near the byte cap). What
    /// is new of this cluster is then refused before it is interned, so a tenant at its
    /// cap cannot fill the intern tables with text it may not keep.
    pub fn full(
        &self,
        caps: ClusterCaps,
        resource_bytes: impl FnOnce() -> usize,
    ) -> Option<DropReason> {
        let mut resource_bytes = Some(resource_bytes);
        let mut estimate = None;
        let mut level = Some((self, caps));
        while let Some((u, caps)) = level {
            let room = caps.max_bytes.saturating_sub(u.bytes());
            if u.series() >= caps.max_series {
                return Some(u.level.series_refused());
            }
            if room < NEAR_BYTE_CAP {
                let need = match estimate {
                    Some(n) => n,
                    None => {
                        let n = resource_bytes.take().map_or(0, |f| f());
                        estimate = Some(n);
                        n
                    }
                };
                if need > room {
                    return Some(u.level.bytes_refused());
                }
            }
            level = u.parent.as_ref().map(|(p, c)| (&**p, *c));
        }
        None
    }

    /// Take `series` series and `bytes` bytes if both stay within `caps` here and within
    /// every parent's caps; otherwise take nothing anywhere and say which cap refused.
    pub fn charge(&self, series: usize, bytes: usize, caps: ClusterCaps) -> Result<(), DropReason> {
        self.charge_here(series, bytes, caps)?;
        if let Some((p, pcaps)) = &self.parent
            && let Err(r) = p.charge(series, bytes, *pcaps)
        {
            self.release_here(series, bytes);
            return Err(r);
        }
        Ok(())
    }

    fn charge_here(
        &self,
        series: usize,
        bytes: usize,
        caps: ClusterCaps,
    ) -> Result<(), DropReason> {
        if series > 0 {
            self.series
                .fetch_update(Relaxed, Relaxed, |n| {
                    n.checked_add(series).filter(|m| *m <= caps.max_series)
                })
                .map_err(|_| self.level.series_refused())?;
        }
        let took = self.bytes.fetch_update(Relaxed, Relaxed, |n| {
            n.checked_add(bytes).filter(|m| *m <= caps.max_bytes)
        });
        if took.is_err() {
            self.sub_series(series);
            return Err(self.level.bytes_refused());
        }
        Ok(())
    }

    /// Add `bytes` whatever the cap (a resource's `target_info` that changed size), here
    /// and in every parent.
    pub fn force_bytes(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Relaxed);
        if let Some((p, _)) = &self.parent {
            p.force_bytes(bytes);
        }
    }

    /// Give back what [`Self::charge`] took, here and in every parent.
    pub fn release(&self, series: usize, bytes: usize) {
        self.release_here(series, bytes);
        if let Some((p, _)) = &self.parent {
            p.release(series, bytes);
        }
    }

    fn release_here(&self, series: usize, bytes: usize) {
        self.sub_series(series);
        if bytes > 0 {
            let _ = self
                .bytes
                .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(bytes)));
        }
    }

    /// Forget everything held (the store was cleared).
    pub fn reset(&self) {
        self.series.store(0, Relaxed);
        self.bytes.store(0, Relaxed);
    }

    fn sub_series(&self, series: usize) {
        if series > 0 {
            let _ = self
                .series
                .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(series)));
        }
    }
}

/// The exporter's global budget and each tenant's share of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// `max_bytes`: estimated bytes of every cluster together.
    pub max_bytes: usize,
    /// `max_series_per_tenant`, `max_bytes_per_tenant`: what the clusters one tenant
    /// created may hold together.
    pub tenant: ClusterCaps,
}

impl Budget {
    /// No bound beyond the per-cluster caps.
    pub const UNLIMITED: Budget = Budget {
        max_bytes: usize::MAX,
        tenant: ClusterCaps {
            max_series: usize::MAX,
            max_bytes: usize::MAX,
        },
    };
}

/// The usage of every cluster that holds something (or is being pushed right now), by its
/// escaped `ingero_cluster_id` label value. An entry lives while a resource entry (or a
/// push in progress) holds its `Arc`: [`ClusterTable::done`] (after a push) and
/// [`ClusterTable::prune`] (after expiry) remove it when nothing does, so the table never
/// holds more clusters than the store holds resources, plus the pushes in flight.
///
/// A cluster is charged to the tenant whose push created its entry (every cluster of a
/// tenant charges that tenant's usage, which charges the global one); the tenant's entry
/// lives while one of its clusters does.
#[derive(Debug)]
pub struct ClusterTable {
    by_id: RwLock<HashMap<Box<str>, Arc<ClusterUsage>>>,
    tenants: RwLock<HashMap<Box<str>, Arc<ClusterUsage>>>,
    global: Arc<ClusterUsage>,
    budget: Budget,
}

impl Default for ClusterTable {
    fn default() -> Self {
        ClusterTable::new(Budget::UNLIMITED)
    }
}

impl ClusterTable {
    pub fn new(budget: Budget) -> Self {
        ClusterTable {
            by_id: RwLock::default(),
            tenants: RwLock::default(),
            global: Arc::new(ClusterUsage::new(Level::Global, None)),
            budget,
        }
    }

    /// The usage of `cluster`, created empty if absent (charged to `tenant`, `""` for
    /// pushes without a token).
    pub fn usage(&self, cluster: &str, tenant: &str) -> Arc<ClusterUsage> {
        if let Some(u) = self.by_id.read().get(cluster) {
            return u.clone();
        }
        let mut map = self.by_id.write();
        if let Some(u) = map.get(cluster) {
            return u.clone();
        }
        let tenant_usage = {
            let mut tenants = self.tenants.write();
            tenants
                .entry(Box::from(tenant))
                .or_insert_with(|| {
                    let global = ClusterCaps {
                        max_series: usize::MAX,
                        max_bytes: self.budget.max_bytes,
                    };
                    Arc::new(ClusterUsage::new(
                        Level::Tenant,
                        Some((self.global.clone(), global)),
                    ))
                })
                .clone()
        };
        let u = Arc::new(ClusterUsage::new(
            Level::Cluster,
            Some((tenant_usage, self.budget.tenant)),
        ));
        map.insert(Box::from(cluster), u.clone());
        u
    }

    /// Series and estimated bytes of every cluster together.
    pub fn global(&self) -> (usize, usize) {
        (self.global.series(), self.global.bytes())
    }

    /// Series and estimated bytes of the clusters `tenant` created, if it holds any.
    pub fn tenant(&self, tenant: &str) -> Option<(usize, usize)> {
        self.tenants
            .read()
            .get(tenant)
            .map(|u| (u.series(), u.bytes()))
    }

    /// Drop tenant entries no cluster holds any more.
    fn prune_tenants(&self) {
        self.tenants.write().retain(|_, u| Arc::strong_count(u) > 1);
    }

    /// A push is done with `usage`: drop the entry when no resource and no other push
    /// holds it (the map's `Arc` and `usage` are the only two).
    pub fn done(&self, cluster: &str, usage: Arc<ClusterUsage>) {
        if Arc::strong_count(&usage) > 2 {
            return;
        }
        let mut map = self.by_id.write();
        // Clones are taken under the lock, so the count cannot rise while it is held.
        if Arc::strong_count(&usage) == 2
            && map.get(cluster).is_some_and(|u| Arc::ptr_eq(u, &usage))
        {
            map.remove(cluster);
            drop(map);
            drop(usage);
            self.prune_tenants();
        }
    }

    /// Drop the entries nothing holds any more (their resources expired).
    pub fn prune(&self) {
        // Clones are taken under the lock, so no count can rise while it is held.
        self.by_id.write().retain(|_, u| Arc::strong_count(u) > 1);
        self.prune_tenants();
    }

    /// Usage of `cluster` (escaped label value) now, without creating an entry.
    pub fn get(&self, cluster: &str) -> Option<(usize, usize)> {
        self.by_id
            .read()
            .get(cluster)
            .map(|u| (u.series(), u.bytes()))
    }

    /// Clusters in the table.
    pub fn len(&self) -> usize {
        self.by_id.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        self.by_id.write().clear();
        self.tenants.write().clear();
        self.global.reset();
    }
}

/// What `len` bytes of interned text cost: the text and the growth room the arena keeps
/// for it (the arena grows by a quarter of itself).
pub const fn text_bytes(len: usize) -> usize {
    len + len / 4
}

/// [`resource_bytes`] of a resource before translation: its attributes' keys and values
/// as sent (string values by length, other values counted as 8 bytes).
pub fn raw_resource_bytes(attrs: &[component::otlp::KeyValue]) -> usize {
    use component::otlp::AnyValueKind;
    RESOURCE_BYTES
        + attrs
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(AnyValueKind::StringValue(s)) => s.len(),
                    Some(AnyValueKind::BytesValue(b)) => b.len(),
                    _ => 8,
                };
                text_bytes(kv.key.len() + v) + LABEL_BYTES
            })
            .sum::<usize>()
}

/// Estimated bytes of a label set's labels.
pub fn label_bytes(i: &Interner, set: SetId) -> usize {
    if set == NONE {
        return 0;
    }
    i.sets
        .resolve(set)
        .iter()
        .map(|[k, v]| {
            text_bytes(i.strings.resolve(*k).len() + i.strings.resolve(*v).len()) + LABEL_BYTES
        })
        .sum()
}

/// Estimated bytes of one series.
pub fn series_bytes(i: &Interner, family: FamilyId, labels: SetId) -> usize {
    SERIES_BYTES + i.family(family).map_or(0, |f| f.name.len()) + label_bytes(i, labels)
}

/// Estimated bytes of a resource besides its series.
pub fn resource_bytes(i: &Interner, resource: SetId, target_info: SetId) -> usize {
    RESOURCE_BYTES + label_bytes(i, resource) + label_bytes(i, target_info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: ClusterCaps = ClusterCaps {
        max_series: 3,
        max_bytes: 100,
    };

    #[test]
    fn a_charge_is_all_or_nothing() {
        let u = ClusterUsage::default();
        assert_eq!(u.charge(2, 60, CAPS), Ok(()));
        // Series fit, bytes do not: neither is taken.
        assert_eq!(u.charge(1, 41, CAPS), Err(DropReason::ClusterBytesLimit));
        assert_eq!((u.series(), u.bytes()), (2, 60));
        assert_eq!(u.full(CAPS, || 0), None);
        assert_eq!(u.full(CAPS, || 41), Some(DropReason::ClusterBytesLimit));
        assert_eq!(u.charge(1, 40, CAPS), Ok(()));
        assert_eq!(u.full(CAPS, || 0), Some(DropReason::ClusterSeriesLimit));
        assert_eq!(u.charge(1, 0, CAPS), Err(DropReason::ClusterSeriesLimit));
        // A resource-only charge (no series) is checked against bytes alone.
        assert_eq!(u.charge(0, 1, CAPS), Err(DropReason::ClusterBytesLimit));
        u.release(3, 100);
        assert_eq!((u.series(), u.bytes()), (0, 0));
        u.release(1, 1);
        assert_eq!((u.series(), u.bytes()), (0, 0), "never below zero");
    }

    #[test]
    fn concurrent_charges_never_pass_the_caps() {
        let caps = ClusterCaps {
            max_series: 1000,
            max_bytes: usize::MAX,
        };
        let u = ClusterUsage::default();
        let taken = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if u.charge(1, 10, caps).is_ok() {
                            taken.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(taken.load(Relaxed), 1000);
        assert_eq!(u.series(), 1000);
        assert_eq!(u.bytes(), 10_000);
    }

    #[test]
    fn the_table_forgets_a_cluster_nothing_holds() {
        let t = ClusterTable::default();
        let u = t.usage("a", "");
        let held = t.usage("a", "");
        assert!(Arc::ptr_eq(&u, &held));
        // Another holder (a resource entry): kept.
        t.done("a", u);
        assert_eq!(t.len(), 1);
        t.done("a", held);
        assert!(t.is_empty());
        // A cluster whose last resource expired: pruned.
        let kept = t.usage("b", "");
        drop(t.usage("c", ""));
        t.prune();
        assert_eq!(t.len(), 1);
        drop(kept);
        t.prune();
        assert!(t.is_empty());
        assert_eq!(t.get("a"), None);
    }
}
