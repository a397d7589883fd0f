//! The cost snapshot as Prometheus metric families.

use component::MetricFamily;

use crate::cost::{CostSnapshot, SeriesKey};
use crate::metrics as m;

/// The cost families of a snapshot.
pub(crate) fn cost_families(snap: &CostSnapshot) -> Vec<MetricFamily> {
    let mut idle_rate = m::spec::COST_BARRIER_IDLE_RATE.family();
    let mut idle_gpus = m::spec::COST_BARRIER_IDLE_GPUS.family();
    for r in &snap.barrier {
        idle_rate.push(
            &[
                ("cluster_id", &r.cluster),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
                ("currency", &r.currency),
            ],
            r.rate_per_hour,
        );
        idle_gpus.push(
            &[
                ("cluster_id", &r.cluster),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
            ],
            r.idle_gpus,
        );
    }
    let mut straggler_rate = m::spec::COST_STRAGGLER_RATE.family();
    for r in &snap.stragglers {
        straggler_rate.push(
            &[
                ("cluster_id", &r.cluster),
                ("node_id", &r.node),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
                ("currency", &r.currency),
            ],
            r.rate_per_hour,
        );
    }
    let mut idle_total = m::spec::COST_BARRIER_IDLE_TOTAL.family();
    let mut idle_gpu_s = m::spec::COST_BARRIER_IDLE_GPU_SECONDS_TOTAL.family();
    let mut straggler_total = m::spec::COST_STRAGGLER_TOTAL.family();
    for (key, t) in &snap.totals {
        match key {
            SeriesKey::Barrier {
                cluster,
                price,
                currency,
            } => {
                idle_total.push(
                    &[
                        ("cluster_id", cluster),
                        ("provider", &price.provider),
                        ("gpu_model", &price.gpu_model),
                        ("currency", currency),
                    ],
                    t.money,
                );
                idle_gpu_s.push(
                    &[
                        ("cluster_id", cluster),
                        ("provider", &price.provider),
                        ("gpu_model", &price.gpu_model),
                    ],
                    t.gpu_seconds,
                );
            }
            SeriesKey::Straggler {
                cluster,
                node,
                price,
                currency,
            } => straggler_total.push(
                &[
                    ("cluster_id", cluster),
                    ("node_id", node),
                    ("provider", &price.provider),
                    ("gpu_model", &price.gpu_model),
                    ("currency", currency),
                ],
                t.money,
            ),
        }
    }
    let mut hourly = m::spec::GPU_HOURLY_RATE.family();
    for (price, currency, rate) in &snap.gpu_rates {
        hourly.push(
            &[
                ("provider", &price.provider),
                ("gpu_model", &price.gpu_model),
                ("currency", currency),
            ],
            *rate,
        );
    }
    let mut nodes = m::spec::PROVIDER_NODES.family();
    for (cluster, provider, n) in &snap.provider_nodes {
        nodes.push(
            &[("cluster_id", cluster), ("provider", provider)],
            *n as f64,
        );
    }
    let mut stragglers = m::spec::PROVIDER_STRAGGLERS.family();
    for (cluster, n) in &snap.straggler_counts {
        stragglers.push(&[("cluster_id", cluster)], *n as f64);
    }
    vec![
        idle_rate,
        idle_gpus,
        idle_total,
        idle_gpu_s,
        straggler_rate,
        straggler_total,
        hourly,
        nodes,
        stragglers,
    ]
}
