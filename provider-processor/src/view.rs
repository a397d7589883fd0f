//! The cost of waiting for the live cluster view: the last tick's cost snapshot, one
//! cluster's rows, read only when the view asks.

use std::sync::Arc;

use ingero_wire::view::{ClusterViewSource, StragglerCost, WaitingCostView};
use parking_lot::Mutex;

use crate::cost::{CostLedger, CostSnapshot};

/// Registered with the live view at `start`; shares the processor's ledger.
#[derive(Debug)]
pub(crate) struct LiveCost {
    pub(crate) ledger: Arc<Mutex<CostLedger>>,
}

impl ClusterViewSource for LiveCost {
    fn waiting_cost(&self, cluster: &str) -> Option<WaitingCostView> {
        let snap = self.ledger.lock().snapshot();
        waiting_cost(&snap, cluster)
    }
}

/// One cluster's barrier and straggler rates from a snapshot; `None` when it has neither.
pub(crate) fn waiting_cost(snap: &CostSnapshot, cluster: &str) -> Option<WaitingCostView> {
    let barrier: Vec<_> = snap
        .barrier
        .iter()
        .filter(|r| &*r.cluster == cluster)
        .collect();
    let mut stragglers: Vec<StragglerCost> = snap
        .stragglers
        .iter()
        .filter(|r| &*r.cluster == cluster)
        .map(|r| StragglerCost {
            node_id: Arc::clone(&r.node),
            provider: Arc::clone(&r.price.provider),
            gpu_model: Arc::clone(&r.price.gpu_model),
            affected_gpus: r.affected_gpus,
            per_hour: r.rate_per_hour,
        })
        .collect();
    let currency = barrier
        .first()
        .map(|r| Arc::clone(&r.currency))
        .or_else(|| {
            snap.stragglers
                .iter()
                .find(|r| &*r.cluster == cluster)
                .map(|r| Arc::clone(&r.currency))
        })?;
    stragglers.sort_by(|a, b| {
        b.per_hour
            .total_cmp(&a.per_hour)
            .then(a.node_id.cmp(&b.node_id))
    });
    Some(WaitingCostView {
        currency,
        barrier_per_hour: barrier.iter().map(|r| r.rate_per_hour).sum(),
        barrier_idle_gpus: barrier.iter().map(|r| r.idle_gpus).sum(),
        stragglers_per_hour: stragglers.iter().map(|s| s.per_hour).sum(),
        stragglers,
        computed_at_unix_nano: snap.computed_at.as_nanos(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{BarrierRow, PriceKey, StragglerRow};
    use component::Timestamp;

    fn price(model: &str) -> PriceKey {
        PriceKey {
            provider: "aws".into(),
            gpu_model: model.into(),
        }
    }

    #[test]
    fn one_clusters_rows_are_summed_and_others_left_out() {
        let snap = CostSnapshot {
            computed_at: Timestamp::from_secs(9),
            barrier: vec![
                BarrierRow {
                    cluster: "a".into(),
                    price: price("H100"),
                    currency: "USD".into(),
                    idle_gpus: 1.5,
                    hourly_rate: 4.0,
                    rate_per_hour: 6.0,
                },
                BarrierRow {
                    cluster: "b".into(),
                    price: price("H100"),
                    currency: "USD".into(),
                    idle_gpus: 9.0,
                    hourly_rate: 4.0,
                    rate_per_hour: 36.0,
                },
            ],
            stragglers: vec![
                StragglerRow {
                    cluster: "a".into(),
                    node: "n1".into(),
                    price: price("A100"),
                    currency: "USD".into(),
                    affected_gpus: 8,
                    hourly_rate: 2.0,
                    rate_per_hour: 16.0,
                },
                StragglerRow {
                    cluster: "a".into(),
                    node: "n2".into(),
                    price: price("H100"),
                    currency: "USD".into(),
                    affected_gpus: 8,
                    hourly_rate: 4.0,
                    rate_per_hour: 32.0,
                },
            ],
            ..CostSnapshot::default()
        };
        let v = waiting_cost(&snap, "a").unwrap();
        assert_eq!(&*v.currency, "USD");
        assert_eq!(v.barrier_per_hour, 6.0);
        assert_eq!(v.barrier_idle_gpus, 1.5);
        assert_eq!(v.stragglers_per_hour, 48.0);
        let nodes: Vec<&str> = v.stragglers.iter().map(|s| &*s.node_id).collect();
        assert_eq!(nodes, ["n2", "n1"]);
        assert_eq!(v.computed_at_unix_nano, 9_000_000_000);
        let b = waiting_cost(&snap, "b").unwrap();
        assert_eq!(b.stragglers_per_hour, 0.0);
        assert_eq!(b.barrier_per_hour, 36.0);
        assert!(waiting_cost(&snap, "c").is_none());
    }
}
