//! Names of the exporter's self-metrics (already in Prometheus form) and their counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::render::ExtraReject;
use crate::store::{DropCounts, DropReason};

/// Gauge: series held.
pub const SERIES: &str = "ingero_fleet_prometheus_series";
/// Gauge: resource label sets held (nodes, for agent data).
pub const RESOURCES: &str = "ingero_fleet_prometheus_resources";
/// Gauge: metric families known.
pub const FAMILIES: &str = "ingero_fleet_prometheus_families";
/// Gauge: heap bytes of the intern tables (strings, label sets, families, caches).
pub const INTERNED_BYTES: &str = "ingero_fleet_prometheus_interned_bytes";
/// Counter: data points received by `consume`.
pub const POINTS_RECEIVED: &str = "ingero_fleet_prometheus_points_received_total";
/// Counter `{reason}`: data points not stored (reasons: [`DropReason::as_str`]).
pub const POINTS_DROPPED: &str = "ingero_fleet_prometheus_points_dropped_total";
/// Counter `{reason="limit"|"expired"}`: series refused at `max_series`, series removed
/// after `metric_expiration`.
pub const SERIES_DROPPED: &str = "ingero_fleet_prometheus_series_dropped_total";
/// Counter: intern-table rebuilds that freed entries no live series used.
pub const COMPACTIONS: &str = "ingero_fleet_prometheus_compactions_total";
/// Counter `{reason}`: self-metric families or samples given to `render` and left out
/// (`invalid_name`, `invalid_label`, `type_conflict`).
pub const SELF_METRICS_REJECTED: &str = "ingero_fleet_prometheus_self_metrics_rejected_total";

/// The exporter's counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub points_received: AtomicU64,
    pub points_dropped: [AtomicU64; DropReason::ALL.len()],
    pub series_expired: AtomicU64,
    pub compactions: AtomicU64,
    pub self_rejected: [AtomicU64; ExtraReject::ALL.len()],
}

impl Counters {
    pub fn commit_drops(&self, d: &DropCounts) {
        for (c, n) in self.points_dropped.iter().zip(d.0.iter()) {
            if *n > 0 {
                c.fetch_add(*n, Relaxed);
            }
        }
    }

    pub fn dropped(&self, r: DropReason) -> u64 {
        self.points_dropped
            .get(r.index())
            .map_or(0, |c| c.load(Relaxed))
    }

    pub fn reject_extra(&self, r: ExtraReject, n: u64) {
        if let Some(c) = self.self_rejected.get(r as usize) {
            c.fetch_add(n, Relaxed);
        }
    }
}
