//! The push path: OTLP resources in -> validated `ingero.node.health_score` points -> the
//! node's latest score in its cluster's [`NodeTable`].
//!
//! Every point of a resource is validated before any shared state is touched; a bad point
//! is counted under its [`RejectReason`], reported as OTLP partial success and never stored,
//! and the good points of the same resource are still stored. Caps (clusters, nodes per
//! cluster, nodes in total) refuse points with a [`DropReason`] and partial success.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use component::otlp::{self, Metric, MetricKind, NumberDataPoint, ResourceMetrics};
use component::{BatchContext, ProcessOutcome, Timestamp};
use ingero_wire::{attr, metric, resource};
use parking_lot::{Mutex, RwLock};

use crate::metrics::{Counters, DropReason, RejectReason};
use crate::table::{
    NodeBudget, NodeState, NodeTable, RecordOutcome, ScoreUpdate, TableLimits, TenantNodes,
};

/// Longest accepted `ingero.cluster.id` / `ingero.node.id`, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest accepted `ingero.cgroup_path_hash`, in bytes (the agent sends 16 hex digits).
pub const MAX_COHORT_BYTES: usize = 64;
/// Minimum spacing of rejected-point warnings.
const REJECT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One cluster's node table, shared by the push path and the tick.
pub type SharedTable = Arc<Mutex<NodeTable>>;

/// The caps of the push path, with the config values its error messages quote.
#[derive(Debug, Clone)]
pub struct IngestLimits {
    /// Per-table caps (nodes, cohorts) and the TTL a capped table may reclaim by.
    pub table: TableLimits,
    /// `limits.max_clusters`.
    pub max_clusters: u32,
    /// The effective `limits.max_clusters_per_tenant`: clusters one tenant (bearer token;
    /// every request without one is one tenant) may create and hold.
    pub max_clusters_per_tenant: u32,
    /// `limits.max_nodes_per_cluster` (quoted in the cap message; enforced by `table`).
    pub max_nodes_per_cluster: u32,
    /// `limits.max_nodes_total`.
    pub max_nodes_total: u32,
    /// The effective `limits.reserved_nodes_per_cluster`.
    pub reserved_nodes_per_cluster: u32,
    /// The effective `limits.max_pool_nodes_per_tenant`: records of the shared pool the
    /// clusters of one tenant may hold together.
    pub max_pool_nodes_per_tenant: u32,
}

/// The cluster map and counters of the push path. Every method takes `&self`: a read lock
/// on the map, then one short mutex on the cluster's table.
#[derive(Debug)]
pub struct Ingest {
    limits: IngestLimits,
    clusters: RwLock<HashMap<Arc<str>, SharedTable>>,
    /// Which tenant created each cluster, and how many each holds; changed only under the
    /// write lock of `clusters`.
    owners: Mutex<Owners>,
    budget: NodeBudget,
    counters: Counters,
    last_reject_log: AtomicU64,
    suppressed_reject_logs: AtomicU64,
}

/// The tenant that created each tracked cluster, and the clusters and pool node records
/// each tenant holds.
#[derive(Debug, Default)]
struct Owners {
    of: HashMap<Arc<str>, Arc<str>>,
    held: HashMap<Arc<str>, Held>,
}

/// What one tenant holds: its clusters, and the counter of pool records every table of
/// those clusters charges.
#[derive(Debug, Default)]
struct Held {
    clusters: u32,
    nodes: TenantNodes,
}

impl Owners {
    fn held(&self, tenant: &str) -> u32 {
        self.held.get(tenant).map_or(0, |h| h.clusters)
    }

    fn pool_nodes(&self, tenant: &str) -> usize {
        self.held
            .get(tenant)
            .map_or(0, |h| h.nodes.load(Ordering::Acquire))
    }

    /// Record `cluster` as `tenant`'s; returns the counter its table charges.
    fn add(&mut self, cluster: Arc<str>, tenant: Arc<str>) -> TenantNodes {
        let h = self.held.entry(tenant.clone()).or_default();
        h.clusters += 1;
        let nodes = h.nodes.clone();
        self.of.insert(cluster, tenant);
        nodes
    }

    /// Forget `cluster` (its table is empty, so it charges its tenant nothing).
    fn remove(&mut self, cluster: &str) {
        let Some(tenant) = self.of.remove(cluster) else {
            return;
        };
        if let Some(h) = self.held.get_mut(&tenant) {
            h.clusters -= 1;
            if h.clusters == 0 {
                self.held.remove(&tenant);
            }
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// Validate one health-score point: its score, state and cohort key, or why it is rejected
/// (with the message the client gets in the partial success).
pub fn validate_point(
    dp: &NumberDataPoint,
) -> Result<(f64, NodeState, &str), (RejectReason, String)> {
    let Some(score) = otlp::point_value(dp) else {
        return Err((
            RejectReason::NoValue,
            format!("{}: data point has no value", metric::HEALTH_SCORE),
        ));
    };
    if !score.is_finite() {
        return Err((
            RejectReason::NonFinite,
            format!("{}: score {score} is not in [0, 1]", metric::HEALTH_SCORE),
        ));
    }
    if !(0.0..=1.0).contains(&score) {
        return Err((
            RejectReason::OutOfRange,
            format!("{}: score {score} is not in [0, 1]", metric::HEALTH_SCORE),
        ));
    }
    let state = match otlp::get_str(&dp.attributes, attr::NODE_STATE) {
        Some(s) => NodeState::parse(s).ok_or_else(|| {
            (
                RejectReason::BadState,
                format!(
                    "{}: unknown {} {:?} (want active, idle or calibrating)",
                    metric::HEALTH_SCORE,
                    attr::NODE_STATE,
                    s.chars().take(32).collect::<String>()
                ),
            )
        })?,
        None => {
            return Err((
                RejectReason::BadState,
                format!("{}: missing {}", metric::HEALTH_SCORE, attr::NODE_STATE),
            ));
        }
    };
    let cohort = otlp::get_str(&dp.attributes, attr::CGROUP_PATH_HASH).unwrap_or("");
    if cohort.len() > MAX_COHORT_BYTES {
        return Err((
            RejectReason::IdTooLong,
            format!(
                "{}: {} longer than {MAX_COHORT_BYTES} bytes",
                metric::HEALTH_SCORE,
                attr::CGROUP_PATH_HASH
            ),
        ));
    }
    Ok((score, state, cohort))
}

impl Ingest {
    pub fn new(limits: IngestLimits) -> Self {
        Ingest {
            budget: NodeBudget::with_reserve(
                to_usize(limits.max_nodes_total),
                to_usize(limits.reserved_nodes_per_cluster),
                to_usize(limits.max_clusters),
            )
            .with_tenant_share(to_usize(limits.max_pool_nodes_per_tenant)),
            limits,
            clusters: RwLock::new(HashMap::new()),
            owners: Mutex::new(Owners::default()),
            counters: Counters::default(),
            last_reject_log: AtomicU64::new(0),
            suppressed_reject_logs: AtomicU64::new(0),
        }
    }

    /// Counters of the push path.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Node records held across clusters (the tick releases records through it too).
    pub fn budget(&self) -> &NodeBudget {
        &self.budget
    }

    /// Clusters tracked.
    pub fn cluster_count(&self) -> usize {
        self.clusters.read().len()
    }

    /// Every tracked cluster and its table, for a tick (in map order).
    pub fn clusters(&self) -> Vec<(Arc<str>, SharedTable)> {
        self.clusters
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Forget the clusters of `ids` whose table is still empty (a push may have arrived
    /// since the tick saw them empty); returns the ids forgotten.
    pub fn forget_empty(&self, ids: &[Arc<str>]) -> Vec<Arc<str>> {
        if ids.is_empty() {
            return Vec::new();
        }
        let mut forgotten = Vec::new();
        let mut map = self.clusters.write();
        let mut owners = self.owners.lock();
        for id in ids {
            let still_empty = map.get(id).is_some_and(|t| t.lock().is_empty());
            if still_empty {
                map.remove(id);
                owners.remove(id);
                tracing::debug!(cluster_id = %id, "cluster forgotten: no node seen within quorum.expected_window");
                forgotten.push(id.clone());
            }
        }
        forgotten
    }

    /// The table of `cluster_id`, created for `tenant` if it is new and both the total
    /// and the tenant's share allow it.
    fn cluster_table(
        &self,
        cluster_id: &str,
        tenant: Option<&Arc<str>>,
    ) -> Result<SharedTable, DropReason> {
        if let Some(e) = self.clusters.read().get(cluster_id) {
            return Ok(e.clone());
        }
        let mut map = self.clusters.write();
        if let Some(e) = map.get(cluster_id) {
            return Ok(e.clone());
        }
        if map.len() >= to_usize(self.limits.max_clusters) {
            return Err(DropReason::CapClusters);
        }
        let mut owners = self.owners.lock();
        let tenant = tenant.map_or("", |t| t);
        if owners.held(tenant) >= self.limits.max_clusters_per_tenant {
            return Err(DropReason::CapClustersPerTenant);
        }
        let id: Arc<str> = Arc::from(cluster_id);
        let nodes = owners.add(id.clone(), Arc::from(tenant));
        let e: SharedTable = Arc::new(Mutex::new(NodeTable::for_tenant(nodes)));
        map.insert(id, e.clone());
        Ok(e)
    }

    /// Clusters `tenant` created and still holds (`None`: requests without a token).
    pub fn tenant_clusters(&self, tenant: Option<&str>) -> u32 {
        self.owners.lock().held(tenant.unwrap_or(""))
    }

    /// Records of the shared node pool the clusters `tenant` created hold together.
    pub fn tenant_pool_nodes(&self, tenant: Option<&str>) -> usize {
        self.owners.lock().pool_nodes(tenant.unwrap_or(""))
    }

    fn log_reject(&self, now: Timestamp, reason: RejectReason, message: &str, n: u64) {
        let last = self.last_reject_log.load(Ordering::Relaxed);
        let due = now.as_nanos().saturating_sub(last) >= nanos(REJECT_LOG_INTERVAL) || last == 0;
        if due
            && self
                .last_reject_log
                .compare_exchange(
                    last,
                    now.as_nanos().max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            let suppressed = self.suppressed_reject_logs.swap(0, Ordering::Relaxed);
            tracing::warn!(
                reason = reason.label(),
                points = n,
                suppressed_since_last = suppressed,
                "ingero processor rejected health-score points: {message}"
            );
        } else {
            self.suppressed_reject_logs.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn reject(
        &self,
        out: &mut ProcessOutcome,
        ctx: &BatchContext,
        r: RejectReason,
        msg: String,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        self.counters.reject(r, n);
        self.log_reject(ctx.received_at, r, &msg, n);
        out.reject(n, || msg);
    }

    /// Store the health-score points of one resource; the resource itself is not changed.
    pub fn resource(&self, rm: &ResourceMetrics, ctx: &BatchContext, out: &mut ProcessOutcome) {
        let health: Vec<&Metric> = rm
            .scope_metrics
            .iter()
            .flat_map(|sm| sm.metrics.iter())
            .filter(|m| m.name == metric::HEALTH_SCORE)
            .collect();
        if health.is_empty() {
            return;
        }
        let mut number_points = 0u64;
        for hm in &health {
            match &hm.data {
                Some(MetricKind::Gauge(_)) | Some(MetricKind::Sum(_)) => {
                    number_points += otlp::number_points(hm).len() as u64;
                }
                other => {
                    let n = match other {
                        Some(MetricKind::Histogram(h)) => h.data_points.len(),
                        Some(MetricKind::ExponentialHistogram(h)) => h.data_points.len(),
                        Some(MetricKind::Summary(s)) => s.data_points.len(),
                        _ => 0,
                    } as u64;
                    self.reject(
                        out,
                        ctx,
                        RejectReason::UnsupportedType,
                        format!("{}: not a gauge", metric::HEALTH_SCORE),
                        n,
                    );
                }
            }
        }
        if number_points == 0 {
            return;
        }

        let attrs = otlp::resource_attrs(rm);
        let cluster_id = non_empty(otlp::get_str(attrs, resource::CLUSTER_ID))
            .or_else(|| non_empty(ctx.cluster_id.as_deref()));
        let Some(cluster_id) = cluster_id else {
            self.reject(
                out,
                ctx,
                RejectReason::MissingClusterId,
                "missing cluster id".to_string(),
                number_points,
            );
            return;
        };
        let Some(node_id) = non_empty(otlp::get_str(attrs, resource::NODE_ID)) else {
            self.reject(
                out,
                ctx,
                RejectReason::MissingNodeId,
                format!("missing node id ({})", resource::NODE_ID),
                number_points,
            );
            return;
        };
        if cluster_id.len() > MAX_ID_BYTES || node_id.len() > MAX_ID_BYTES {
            self.reject(
                out,
                ctx,
                RejectReason::IdTooLong,
                format!("cluster or node id longer than {MAX_ID_BYTES} bytes"),
                number_points,
            );
            return;
        }
        // The id character rule (no control, line-break or invisible format characters),
        // also enforced by the Rust host's ingest screen; here for every host.
        if let Err(why) = ingero_wire::cluster_id::validate_cluster_id(cluster_id)
            .and_then(|()| ingero_wire::cluster_id::validate_node_id(node_id))
        {
            self.reject(
                out,
                ctx,
                RejectReason::BadId,
                why.to_string(),
                number_points,
            );
            return;
        }

        // Validate every point before touching shared state.
        let mut valid: Vec<(f64, NodeState, &str)> = Vec::with_capacity(number_points as usize);
        for hm in &health {
            for dp in otlp::number_points(hm) {
                match validate_point(dp) {
                    Ok(v) => valid.push(v),
                    Err((r, msg)) => self.reject(out, ctx, r, msg, 1),
                }
            }
        }
        if valid.is_empty() {
            return;
        }

        let entry = match self.cluster_table(cluster_id, ctx.tenant.as_ref()) {
            Ok(e) => e,
            Err(why) => {
                let n = valid.len() as u64;
                self.counters.drop(why, n);
                self.counters.dropped_points.fetch_add(n, Ordering::Relaxed);
                out.reject(n, || {
                    if why == DropReason::CapClustersPerTenant {
                        format!(
                            "this tenant's cluster share is used up (limits.max_clusters_per_tenant = {}): cluster {:?} not tracked",
                            self.limits.max_clusters_per_tenant, cluster_id
                        )
                    } else {
                        format!(
                            "cluster cap reached (limits.max_clusters = {}): cluster {:?} not tracked",
                            self.limits.max_clusters, cluster_id
                        )
                    }
                });
                return;
            }
        };

        let mut table = entry.lock();
        for (score, state, cohort) in valid {
            let u = ScoreUpdate {
                node_id,
                cohort,
                score,
                state,
                received_at: ctx.received_at.as_nanos(),
            };
            match table.record(&u, &self.limits.table, &self.budget) {
                RecordOutcome::Stored { cohort_capped } => {
                    self.counters.accepted.fetch_add(1, Ordering::Relaxed);
                    if cohort_capped {
                        self.counters.drop(DropReason::CapCohorts, 1);
                    }
                }
                RecordOutcome::Superseded => {
                    self.counters.superseded.fetch_add(1, Ordering::Relaxed);
                }
                RecordOutcome::NodeCap => {
                    self.counters.drop(DropReason::CapNodes, 1);
                    self.counters.dropped_points.fetch_add(1, Ordering::Relaxed);
                    out.reject(1, || {
                        format!(
                            "node cap reached (limits.max_nodes_per_cluster = {}) in cluster {:?}",
                            self.limits.max_nodes_per_cluster, cluster_id
                        )
                    });
                }
                RecordOutcome::TenantCap => {
                    self.counters.drop(DropReason::CapNodesPerTenant, 1);
                    self.counters.dropped_points.fetch_add(1, Ordering::Relaxed);
                    out.reject(1, || {
                        format!(
                            "this tenant's share of the node pool is used up \
                             (limits.max_pool_nodes_per_tenant = {}): new node in cluster {:?} not tracked",
                            self.limits.max_pool_nodes_per_tenant, cluster_id
                        )
                    });
                }
                RecordOutcome::TotalCap => {
                    self.counters.drop(DropReason::CapNodesTotal, 1);
                    self.counters.dropped_points.fetch_add(1, Ordering::Relaxed);
                    out.reject(1, || {
                        format!(
                            "node cap reached (limits.max_nodes_total = {})",
                            self.limits.max_nodes_total
                        )
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
