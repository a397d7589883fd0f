//! The idle GPU-seconds of one collective instance (definitions in the parent module).

use std::collections::HashMap;
use std::sync::Arc;

use super::{Instance, NodeCost, PriceKey, UNKNOWN_MODEL};

/// Add one collective instance's idle GPU-seconds to `slice`.
pub(super) fn cost_instance(
    inst: &Instance,
    nodes: &HashMap<Arc<str>, NodeCost>,
    mix: &[(PriceKey, f64)],
    mix_total: f64,
    slice: &mut HashMap<PriceKey, f64>,
) {
    // Slowest rank: largest lag, lowest rank on ties (deterministic).
    let mut slowest: Option<(u32, f64)> = None;
    for (rank, (lag, _)) in &inst.ranks {
        if !lag.is_finite() {
            continue;
        }
        let better = match slowest {
            None => true,
            Some((r, l)) => *lag > l || (*lag == l && *rank < r),
        };
        if better {
            slowest = Some((*rank, *lag));
        }
    }
    let Some((slow_rank, max_lag_ms)) = slowest else {
        return;
    };
    let lag_s = max_lag_ms.max(0.0) / 1000.0;
    let n = (inst.nranks as usize).max(inst.ranks.len());
    if lag_s <= 0.0 || n < 2 {
        return;
    }
    let waiting = n - 1;
    let mut attributed = 0usize;
    for (rank, (_, node)) in &inst.ranks {
        if *rank == slow_rank {
            continue;
        }
        let known = node
            .as_ref()
            .and_then(|id| nodes.get(id))
            .and_then(|n| n.gpu.as_ref().map(|(m, _)| (&n.provider, m)));
        if let Some((provider, model)) = known {
            *slice
                .entry(PriceKey {
                    provider: Arc::clone(provider),
                    gpu_model: Arc::clone(model),
                })
                .or_default() += lag_s;
            attributed += 1;
        }
    }
    let rest = waiting.saturating_sub(attributed) as f64;
    if rest <= 0.0 {
        return;
    }
    if mix_total > 0.0 {
        for (price, weight) in mix {
            *slice.entry(price.clone()).or_default() += lag_s * rest * weight / mix_total;
        }
    } else {
        *slice
            .entry(PriceKey {
                provider: Arc::clone(&inst.provider),
                gpu_model: Arc::from(UNKNOWN_MODEL),
            })
            .or_default() += lag_s * rest;
    }
}
