//! The exporter's self-metric families (declared once: name after the host's prefix, type,
//! unit, help, labels) and their counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::render::ExtraReject;
use crate::store::{DropCounts, DropReason};

// The exporter's self-metric families, in exposition order, named under the host's metric
// prefix (the distribution's; see `PrometheusExporter::with_names`).
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    SERIES: gauge prefix + "prometheus_series", unit "1", labels [],
        help "Series held by the Prometheus exporter.";
    /// Resource label sets held (nodes, for agent data).
    RESOURCES: gauge prefix + "prometheus_resources", unit "1", labels [],
        help "Resource label sets (nodes) held by the Prometheus exporter.";
    FAMILIES_KNOWN: gauge prefix + "prometheus_families", unit "1", labels [],
        help "Metric families known to the Prometheus exporter.";
    /// Heap bytes of the intern tables (strings, label sets, families, caches).
    INTERNED_BYTES: gauge prefix + "prometheus_interned_bytes", unit "By", labels [],
        help "Heap bytes of the Prometheus exporter's intern tables.";
    /// Data points received by `consume`.
    POINTS_RECEIVED: counter prefix + "prometheus_points_received_total", unit "1", labels [],
        help "Data points received by the Prometheus exporter.";
    /// Reasons: [`DropReason::as_str`].
    POINTS_DROPPED: counter prefix + "prometheus_points_dropped_total", unit "1",
        labels [LABEL_REASON],
        help "Data points the Prometheus exporter did not store, by reason.";
    /// `reason="limit"|"expired"`: series refused at `max_series`, series removed after
    /// `metric_expiration`.
    SERIES_DROPPED: counter prefix + "prometheus_series_dropped_total", unit "1",
        labels [LABEL_REASON],
        help "Series refused at max_series (limit) or removed after metric_expiration (expired).";
    /// Intern-table rebuilds that freed entries no live series used.
    COMPACTIONS: counter prefix + "prometheus_compactions_total", unit "1", labels [],
        help "Intern-table rebuilds that freed entries no live series used.";
    /// Self-metric families or samples given to `render` and left out (`invalid_name`,
    /// `invalid_label`, `type_conflict`).
    SELF_METRICS_REJECTED: counter prefix + "prometheus_self_metrics_rejected_total", unit "1",
        labels [LABEL_REASON],
        help "Self-metric families or samples given to render and left out, by reason.";
}

/// The label of the families counted by reason.
pub const LABEL_REASON: &str = "reason";

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
