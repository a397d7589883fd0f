//! The ledger's state after a tick, as the telemetry shows it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use component::Timestamp;

use super::{CostLedger, PriceKey, SeriesKey, SeriesTotals};
use crate::rates::RateTable;

/// Barrier idle spend of one (cluster, provider, GPU model).
#[derive(Debug, Clone, PartialEq)]
pub struct BarrierRow {
    pub cluster: Arc<str>,
    pub price: PriceKey,
    pub currency: Arc<str>,
    /// Average GPUs idle at barriers over the window.
    pub idle_gpus: f64,
    /// Rate per GPU-hour used.
    pub hourly_rate: f64,
    /// Currency units per hour: `idle_gpus * hourly_rate`.
    pub rate_per_hour: f64,
}

/// Spend attributable to one current straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerRow {
    pub cluster: Arc<str>,
    pub node: Arc<str>,
    pub price: PriceKey,
    pub currency: Arc<str>,
    pub affected_gpus: u32,
    pub hourly_rate: f64,
    /// Currency units per hour: `affected_gpus * hourly_rate`.
    pub rate_per_hour: f64,
}

/// Everything the telemetry shows, as of the last tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostSnapshot {
    pub computed_at: Timestamp,
    pub barrier: Vec<BarrierRow>,
    pub stragglers: Vec<StragglerRow>,
    pub totals: Vec<(SeriesKey, SeriesTotals)>,
    /// (price, currency, rate per GPU-hour) for every live node's GPU.
    pub gpu_rates: Vec<(PriceKey, Arc<str>, f64)>,
    /// (cluster, provider, live nodes).
    pub provider_nodes: Vec<(Arc<str>, Arc<str>, u64)>,
    /// (cluster, current stragglers).
    pub straggler_counts: Vec<(Arc<str>, u64)>,
}

impl CostLedger {
    pub(super) fn build_snapshot(
        &self,
        now: Timestamp,
        rates: &RateTable,
        straggler_rows: Vec<(StragglerRow, Duration)>,
    ) -> CostSnapshot {
        let currency = rates.currency();
        let window_secs = self.settings.window.as_secs_f64();
        // Barrier rates for every retained barrier series, zero when the window is empty.
        let mut idle: BTreeMap<(Arc<str>, PriceKey), f64> = BTreeMap::new();
        for key in self.series.keys() {
            if let SeriesKey::Barrier {
                cluster,
                price,
                currency: cur,
            } = key
                && cur == currency
            {
                idle.entry((Arc::clone(cluster), price.clone()))
                    .or_default();
            }
        }
        for (cluster, c) in &self.clusters {
            for sl in &c.slices {
                for (price, gpu_s) in &sl.gpu_seconds {
                    *idle
                        .entry((Arc::clone(cluster), price.clone()))
                        .or_default() += gpu_s;
                }
            }
        }
        let barrier = idle
            .into_iter()
            .map(|((cluster, price), gpu_s)| {
                let idle_gpus = if window_secs > 0.0 {
                    gpu_s / window_secs
                } else {
                    0.0
                };
                let hourly = rates.lookup(&price.provider, &price.gpu_model).hourly;
                BarrierRow {
                    cluster,
                    price,
                    currency: Arc::clone(currency),
                    idle_gpus,
                    hourly_rate: hourly,
                    rate_per_hour: idle_gpus * hourly,
                }
            })
            .collect();

        let mut stragglers: Vec<StragglerRow> =
            straggler_rows.into_iter().map(|(row, _)| row).collect();
        stragglers.sort_by(|a, b| (&a.cluster, &a.node).cmp(&(&b.cluster, &b.node)));

        let mut totals: Vec<(SeriesKey, SeriesTotals)> =
            self.series.iter().map(|(k, v)| (k.clone(), *v)).collect();
        totals.sort_by(|a, b| a.0.cmp(&b.0));

        let mut gpu_rates: BTreeMap<PriceKey, f64> = BTreeMap::new();
        let mut provider_nodes: BTreeMap<(Arc<str>, Arc<str>), u64> = BTreeMap::new();
        let mut straggler_counts = Vec::new();
        for (cluster, c) in &self.clusters {
            for n in c.nodes.values() {
                *provider_nodes
                    .entry((Arc::clone(cluster), Arc::clone(&n.provider)))
                    .or_default() += 1;
                if let Some((model, _)) = &n.gpu {
                    let price = PriceKey {
                        provider: Arc::clone(&n.provider),
                        gpu_model: Arc::clone(model),
                    };
                    let hourly = rates.lookup(&price.provider, &price.gpu_model).hourly;
                    gpu_rates.insert(price, hourly);
                }
            }
            straggler_counts.push((Arc::clone(cluster), c.stragglers.len() as u64));
        }
        straggler_counts.sort();
        CostSnapshot {
            computed_at: now,
            barrier,
            stragglers,
            totals,
            gpu_rates: gpu_rates
                .into_iter()
                .map(|(p, r)| (p, Arc::clone(currency), r))
                .collect(),
            provider_nodes: provider_nodes
                .into_iter()
                .map(|((c, p), n)| (c, p, n))
                .collect(),
            straggler_counts,
        }
    }
}
