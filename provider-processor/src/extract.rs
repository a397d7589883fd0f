//! Reading a batch: what each resource says about nodes, stragglers and peer lag, bounded
//! and validated, gathered before the ledger lock is taken.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use component::BatchContext;
use component::otlp::{self, ResourceMetrics};
use ingero_wire::{attr, metric, resource};

use crate::cost::{LagPoint, NodeObservation, StragglerPoint};
use crate::metrics::{self as m, reason};
use crate::rates::MAX_MODEL_LEN;
use crate::resolve::Resolution;

/// Most GPUs one node may report.
pub const MAX_GPUS_PER_NODE: i64 = 1024;
/// Largest world size / communicator size / rank accepted.
pub const MAX_WORLD_SIZE: i64 = 1_000_000;
/// Largest |peer lag| accepted, in ms (one hour).
pub const MAX_LAG_MS: f64 = 3_600_000.0;
/// Longest communicator hash or op type accepted, in bytes.
pub const MAX_LAG_KEY_LEN: usize = 64;
/// Everything one batch contributed, gathered before taking the ledger lock.
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    pub(crate) nodes: Vec<(NodeObservation, Option<Resolution>)>,
    pub(crate) stragglers: HashMap<Arc<str>, Vec<StragglerPoint>>,
    pub(crate) lags: Vec<LagPoint>,
    /// Points seen per (cluster, comm, op, time, op_seq, rank) in this batch.
    lag_occurrences: HashMap<LagSlot, u32>,
    pub(crate) dropped: BTreeMap<&'static str, u64>,
}

type LagSlot = (Arc<str>, Arc<str>, Arc<str>, u64, Option<i64>, u32);

impl Extracted {
    pub(crate) fn drop(&mut self, why: &'static str, n: u64) {
        *self.dropped.entry(why).or_default() += n;
    }
}

/// Read what the processor needs from one resource into `out`; `provider` is the
/// resource's resolved provider.
pub(crate) fn extract(
    rm: &ResourceMetrics,
    provider: &Arc<str>,
    pinned: Option<Resolution>,
    ctx: &BatchContext,
    out: &mut Extracted,
) {
    let attrs = otlp::resource_attrs(rm);
    let cluster: Option<Arc<str>> = otlp::get_str(attrs, resource::CLUSTER_ID)
        .filter(|s| !s.is_empty())
        .map(Arc::from)
        .or_else(|| ctx.cluster_id.clone());
    let node: Option<Arc<str>> = otlp::get_str(attrs, resource::NODE_ID)
        .filter(|s| !s.is_empty())
        .map(Arc::from);
    let mut health_push = false;
    let mut gpu = None;
    let mut world = None;
    for sm in &rm.scope_metrics {
        for met in &sm.metrics {
            match met.name.as_str() {
                metric::NODE_INFO => {
                    health_push = true;
                    for dp in otlp::number_points(met) {
                        let model = otlp::get_str(&dp.attributes, attr::GPU_MODEL)
                            .filter(|s| !s.trim().is_empty() && s.len() <= MAX_MODEL_LEN);
                        let count = otlp::get_i64(&dp.attributes, attr::GPU_COUNT)
                            .filter(|c| (1..=MAX_GPUS_PER_NODE).contains(c))
                            .and_then(|c| u32::try_from(c).ok());
                        match (model, count) {
                            (Some(mo), Some(c)) => gpu = Some((Arc::from(mo), c)),
                            _ => out.drop(reason::INVALID_NODE_INFO, 1),
                        }
                    }
                }
                metric::NODE_WORLD_SIZE => {
                    health_push = true;
                    for dp in otlp::number_points(met) {
                        match otlp::point_value(dp).filter(|v| {
                            v.fract() == 0.0 && (0.0..=MAX_WORLD_SIZE as f64).contains(v)
                        }) {
                            Some(v) => world = Some(v as u32),
                            None => out.drop(reason::INVALID_WORLD_SIZE, 1),
                        }
                    }
                }
                m::INPUT_FLEET_NODE_STRAGGLER => {
                    let points = otlp::number_points(met);
                    let (Some(c), Some(n)) = (&cluster, &node) else {
                        let why = if cluster.is_none() {
                            reason::NO_CLUSTER
                        } else {
                            reason::NO_NODE
                        };
                        out.drop(why, points.len() as u64);
                        continue;
                    };
                    let list = out.stragglers.entry(Arc::clone(c)).or_default();
                    for dp in points {
                        list.push(StragglerPoint {
                            node: Arc::clone(n),
                            provider: Arc::clone(provider),
                            straggler: otlp::point_value(dp).is_some_and(|v| v >= 0.5),
                        });
                    }
                }
                metric::NCCL_PEER_LAG_MS => {
                    let points = otlp::number_points(met);
                    let Some(c) = &cluster else {
                        out.drop(reason::NO_CLUSTER, points.len() as u64);
                        continue;
                    };
                    for dp in points {
                        match lag_point(c, node.as_ref(), provider, dp) {
                            Ok(mut p) => {
                                let slot = (
                                    Arc::clone(&p.cluster),
                                    Arc::clone(&p.comm),
                                    Arc::clone(&p.op),
                                    p.time_unix_nano,
                                    p.op_seq,
                                    p.rank,
                                );
                                let seen = out.lag_occurrences.entry(slot).or_default();
                                p.occurrence = *seen;
                                *seen = seen.saturating_add(1);
                                out.lags.push(p);
                            }
                            Err(why) => out.drop(why, 1),
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if health_push {
        if world.is_none() {
            world = otlp::get_i64(attrs, resource::WORLD_SIZE)
                .filter(|w| (0..=MAX_WORLD_SIZE).contains(w))
                .and_then(|w| u32::try_from(w).ok());
        }
        match (cluster, node) {
            (Some(cluster), Some(node)) => out.nodes.push((
                NodeObservation {
                    cluster,
                    node,
                    provider: Arc::clone(provider),
                    gpu,
                    world_size: world,
                },
                pinned,
            )),
            (None, _) => out.drop(reason::NO_CLUSTER, 1),
            (_, None) => out.drop(reason::NO_NODE, 1),
        }
    }
}

pub(crate) fn lag_point(
    cluster: &Arc<str>,
    node: Option<&Arc<str>>,
    provider: &Arc<str>,
    dp: &otlp::NumberDataPoint,
) -> Result<LagPoint, &'static str> {
    let a = &dp.attributes;
    let key = |k: &str| otlp::get_str(a, k).filter(|s| !s.is_empty() && s.len() <= MAX_LAG_KEY_LEN);
    let comm = key(attr::NCCL_COMM_ID_HASH).ok_or(reason::INVALID_LAG_POINT)?;
    if comm.bytes().all(|b| b == b'0') {
        return Err(reason::UNKNOWN_COMMUNICATOR);
    }
    let op = key(attr::NCCL_OP_TYPE).ok_or(reason::INVALID_LAG_POINT)?;
    let rank = otlp::get_i64(a, attr::NCCL_RANK)
        .filter(|r| (0..MAX_WORLD_SIZE).contains(r))
        .and_then(|r| u32::try_from(r).ok())
        .ok_or(reason::INVALID_LAG_POINT)?;
    let nranks = match otlp::get_i64(a, attr::NCCL_NRANKS) {
        None => 0,
        Some(n) if (0..=MAX_WORLD_SIZE).contains(&n) => u32::try_from(n).unwrap_or(0),
        Some(_) => return Err(reason::INVALID_LAG_POINT),
    };
    let lag_ms = otlp::point_value(dp)
        .filter(|v| v.is_finite() && v.abs() <= MAX_LAG_MS)
        .ok_or(reason::INVALID_LAG_POINT)?;
    Ok(LagPoint {
        cluster: Arc::clone(cluster),
        node: node.cloned(),
        provider: Arc::clone(provider),
        comm: Arc::from(comm),
        op: Arc::from(op),
        time_unix_nano: dp.time_unix_nano,
        op_seq: otlp::get_i64(a, attr::NCCL_OP_SEQ),
        occurrence: 0,
        rank,
        nranks,
        lag_ms,
    })
}
