//! Glue: OTLP batches in -> [`NodeTable`]s; ticks -> [`ClusterTickState`] -> threshold sink,
//! straggler metrics, self-telemetry and diagnostics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use component::otlp::{
    self, Gauge, KeyValue, Metric, MetricKind, NumberDataPoint, NumberValue, ResourceMetrics,
};
use component::threshold::{ClusterDiagnostics, CohortDiagnostics, NodeDiagnostics};
use component::wire::{attr, metric, resource};
use component::{
    BatchContext, ClusterReport, ComponentId, ConfigErrors, Host, MetricFamily, ProcessOutcome,
    Processor, StartError, ThresholdSink, ThresholdValue, Timestamp,
};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use crate::classifier::Transition;
use crate::cluster::{ClusterParams, ClusterTick, ClusterTickState};
use crate::config::IngeroConfig;
use crate::metrics::{self as m, Counters, DropReason, RejectReason};
use crate::table::{
    CohortId, NodeBudget, NodeSample, NodeState, NodeTable, RecordOutcome, ScoreUpdate, TableLimits,
};
use crate::threshold::PanicEvent;

/// Longest accepted `ingero.cluster.id` / `ingero.node.id`, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest accepted `ingero.cgroup_path_hash`, in bytes (the agent sends 16 hex digits).
pub const MAX_COHORT_BYTES: usize = 64;
/// Individual straggler transitions logged per cluster and tick; the rest are summarised.
pub const MAX_TRANSITION_LOGS_PER_TICK: usize = 20;
/// Minimum spacing of rejected-point warnings.
const REJECT_LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct ClusterEntry {
    table: Mutex<NodeTable>,
}

#[derive(Debug, Default)]
struct ClusterTickSide {
    state: ClusterTickState,
    entered: u64,
    cleared: u64,
    panic_events: [u64; 3],
}

#[derive(Debug, Default)]
struct TickSide {
    clusters: HashMap<Arc<str>, ClusterTickSide>,
}

/// What the last tick published, kept for telemetry and diagnostics.
#[derive(Debug, Clone)]
struct ClusterSummary {
    cluster_id: Arc<str>,
    published: Option<ThresholdValue>,
    diagnostics: Arc<ClusterDiagnostics>,
    /// Per entry of `diagnostics.cohorts`: (straggler count, panic mode).
    cohort_extra: Vec<(u64, bool)>,
    entered: u64,
    cleared: u64,
    panic_events: [u64; 3],
}

#[derive(Debug, Default)]
struct Snapshot {
    computed_at: Option<Timestamp>,
    clusters: Vec<ClusterSummary>,
}

/// The `ingero` processor: peer-relative MAD threshold per cluster, published into the
/// threshold extension, plus server-side straggler classification.
pub struct IngeroProcessor {
    cfg: IngeroConfig,
    params: ClusterParams,
    limits: TableLimits,
    ttl_nanos: u64,
    forget_nanos: u64,
    clusters: RwLock<HashMap<Arc<str>, Arc<ClusterEntry>>>,
    budget: NodeBudget,
    counters: Counters,
    tick_side: Mutex<TickSide>,
    snapshot: Mutex<Arc<Snapshot>>,
    sink: RwLock<Option<(ComponentId, Arc<dyn ThresholdSink>)>>,
    last_reject_log: AtomicU64,
    suppressed_reject_logs: AtomicU64,
}

impl std::fmt::Debug for IngeroProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngeroProcessor")
            .field("cfg", &self.cfg)
            .field("clusters", &self.clusters.read().len())
            .field("sink", &self.sink.read().as_ref().map(|(id, _)| id.clone()))
            .finish_non_exhaustive()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

enum PointError {
    Reject(RejectReason, String),
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

impl IngeroProcessor {
    /// Build from a config; the config is validated again here.
    pub fn new(cfg: IngeroConfig) -> Result<Self, ConfigErrors> {
        use component::ComponentConfig;
        cfg.validate()?;
        let ttl = cfg.node_ttl();
        Ok(IngeroProcessor {
            params: ClusterParams::from_config(&cfg),
            limits: TableLimits {
                max_nodes: to_usize(cfg.limits.max_nodes_per_cluster),
                max_cohorts: to_usize(cfg.cohorts.max_per_cluster),
                cohorts_enabled: cfg.cohorts.enabled,
                ttl_nanos: nanos(ttl),
            },
            ttl_nanos: nanos(ttl),
            forget_nanos: nanos(cfg.quorum.expected_window),
            clusters: RwLock::new(HashMap::new()),
            budget: NodeBudget::new(to_usize(cfg.limits.max_nodes_total)),
            counters: Counters::default(),
            tick_side: Mutex::new(TickSide::default()),
            snapshot: Mutex::new(Arc::new(Snapshot::default())),
            sink: RwLock::new(None),
            last_reject_log: AtomicU64::new(0),
            suppressed_reject_logs: AtomicU64::new(0),
            cfg,
        })
    }

    /// The tick period the host should use (`push_interval`).
    pub fn push_interval(&self) -> Duration {
        self.cfg.push_interval
    }

    pub fn config(&self) -> &IngeroConfig {
        &self.cfg
    }

    /// Counters of the push path (tests and the host's debug output).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    fn cluster_entry(&self, cluster_id: &str) -> Option<Arc<ClusterEntry>> {
        if let Some(e) = self.clusters.read().get(cluster_id) {
            return Some(e.clone());
        }
        let mut map = self.clusters.write();
        if let Some(e) = map.get(cluster_id) {
            return Some(e.clone());
        }
        if map.len() >= to_usize(self.cfg.limits.max_clusters) {
            return None;
        }
        let e = Arc::new(ClusterEntry::default());
        map.insert(Arc::from(cluster_id), e.clone());
        Some(e)
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

    fn validate_point(dp: &NumberDataPoint) -> Result<(f64, NodeState, &str), PointError> {
        let Some(score) = otlp::point_value(dp) else {
            return Err(PointError::Reject(
                RejectReason::NoValue,
                format!("{}: data point has no value", metric::HEALTH_SCORE),
            ));
        };
        if !score.is_finite() {
            return Err(PointError::Reject(
                RejectReason::NonFinite,
                format!("{}: score {score} is not in [0, 1]", metric::HEALTH_SCORE),
            ));
        }
        if !(0.0..=1.0).contains(&score) {
            return Err(PointError::Reject(
                RejectReason::OutOfRange,
                format!("{}: score {score} is not in [0, 1]", metric::HEALTH_SCORE),
            ));
        }
        let state = match otlp::get_str(&dp.attributes, attr::NODE_STATE) {
            Some(s) => NodeState::parse(s).ok_or_else(|| {
                PointError::Reject(
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
                return Err(PointError::Reject(
                    RejectReason::BadState,
                    format!("{}: missing {}", metric::HEALTH_SCORE, attr::NODE_STATE),
                ));
            }
        };
        let cohort = otlp::get_str(&dp.attributes, attr::CGROUP_PATH_HASH).unwrap_or("");
        if cohort.len() > MAX_COHORT_BYTES {
            return Err(PointError::Reject(
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

    fn process_resource(&self, rm: &ResourceMetrics, ctx: &BatchContext, out: &mut ProcessOutcome) {
        let health: Vec<&Metric> = rm
            .scope_metrics
            .iter()
            .flat_map(|sm| sm.metrics.iter())
            .filter(|m| crate::READS_METRICS.contains(&m.name.as_str()))
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

        // Validate every point before touching shared state.
        let mut valid: Vec<(f64, NodeState, &str)> = Vec::with_capacity(number_points as usize);
        for hm in &health {
            for dp in otlp::number_points(hm) {
                match Self::validate_point(dp) {
                    Ok(v) => valid.push(v),
                    Err(PointError::Reject(r, msg)) => self.reject(out, ctx, r, msg, 1),
                }
            }
        }
        if valid.is_empty() {
            return;
        }

        let Some(entry) = self.cluster_entry(cluster_id) else {
            let n = valid.len() as u64;
            self.counters.drop(DropReason::CapClusters, n);
            self.counters.dropped_points.fetch_add(n, Ordering::Relaxed);
            out.reject(n, || {
                format!(
                    "cluster cap reached (limits.max_clusters = {}): cluster {:?} not tracked",
                    self.cfg.limits.max_clusters, cluster_id
                )
            });
            return;
        };

        let mut table = entry.table.lock();
        for (score, state, cohort) in valid {
            let u = ScoreUpdate {
                node_id,
                cohort,
                score,
                state,
                received_at: ctx.received_at.as_nanos(),
            };
            match table.record(&u, &self.limits, &self.budget) {
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
                            self.cfg.limits.max_nodes_per_cluster, cluster_id
                        )
                    });
                }
                RecordOutcome::TotalCap => {
                    self.counters.drop(DropReason::CapNodesTotal, 1);
                    self.counters.dropped_points.fetch_add(1, Ordering::Relaxed);
                    out.reject(1, || {
                        format!(
                            "node cap reached (limits.max_nodes_total = {})",
                            self.cfg.limits.max_nodes_total
                        )
                    });
                }
            }
        }
    }

    fn tick_cluster(
        &self,
        cluster_id: &Arc<str>,
        entry: &ClusterEntry,
        side: &mut ClusterTickSide,
        now: Timestamp,
        out_metrics: &mut Vec<ResourceMetrics>,
    ) -> (ClusterSummary, bool) {
        {
            let mut table = entry.table.lock();
            side.state.load(
                &mut table,
                now.as_nanos(),
                self.ttl_nanos,
                self.forget_nanos,
                &self.budget,
            );
        }
        let declared = self
            .cfg
            .quorum
            .expected_nodes
            .get(cluster_id.as_ref())
            .copied()
            .unwrap_or(0);
        let tick = side.state.compute(&self.params, declared, now);
        let samples = side.state.samples();
        let diag = &tick.diagnostic_nodes;
        // One short lock: ids (and last-seen times) of exactly the nodes reported below.
        let logged = tick.transitions.len().min(MAX_TRANSITION_LOGS_PER_TICK);
        let (straggler_infos, diag_infos, transition_infos) = {
            let table = entry.table.lock();
            let info = |i: usize| {
                samples
                    .get(i)
                    .and_then(|s| table.node_info(i, s.generation()))
            };
            let a: Vec<_> = tick.stragglers.iter().map(|&i| info(i)).collect();
            let b: Vec<_> = diag.iter().map(|&i| info(i)).collect();
            let c: Vec<_> = tick.transitions[..logged]
                .iter()
                .map(|t| info(t.sample))
                .collect();
            (a, b, c)
        };
        let cohort_of = |c: CohortId| -> Arc<str> {
            side.state
                .cohort_name(c)
                .cloned()
                .unwrap_or_else(|| Arc::from(""))
        };
        let threshold_of = |c: CohortId| side.state.threshold_for(c).unwrap_or(f64::NAN);

        // Straggler metrics for downstream processors and exporters.
        for (node_id, _) in straggler_infos.iter().flatten() {
            out_metrics.push(straggler_metric(cluster_id, node_id, now));
        }

        // Transition logs, bounded per tick.
        for t in &tick.transitions {
            match t.transition {
                Transition::Entered => side.entered += 1,
                Transition::Cleared => side.cleared += 1,
            }
        }
        for (t, info) in tick.transitions.iter().zip(&transition_infos) {
            let Some(s) = samples.get(t.sample) else {
                continue;
            };
            let node = info.as_ref().map_or("?", |(id, _)| id.as_ref());
            let cohort = cohort_of(s.cohort());
            match t.transition {
                Transition::Entered => tracing::info!(
                    cluster_id = %cluster_id,
                    node_id = node,
                    cgroup_path_hash = %cohort,
                    score = s.score,
                    threshold = threshold_of(s.cohort()),
                    "straggler detected"
                ),
                Transition::Cleared => tracing::info!(
                    cluster_id = %cluster_id,
                    node_id = node,
                    cgroup_path_hash = %cohort,
                    score = s.score,
                    state = s.state().as_str(),
                    live = s.live(),
                    "straggler cleared"
                ),
            }
        }
        if tick.transitions.len() > MAX_TRANSITION_LOGS_PER_TICK {
            tracing::info!(
                cluster_id = %cluster_id,
                not_logged = tick.transitions.len() - MAX_TRANSITION_LOGS_PER_TICK,
                "more straggler transitions this tick"
            );
        }
        self.log_panic(
            cluster_id,
            "",
            &tick.cluster_wide.panic_event,
            &mut side.panic_events,
        );
        for c in &tick.cohorts {
            let mut ignored = [0u64; 3];
            self.log_panic(cluster_id, &c.name, &c.update.panic_event, &mut ignored);
        }

        let nodes: Vec<NodeDiagnostics> = diag
            .iter()
            .zip(diag_infos)
            .filter_map(|(&i, info)| {
                let s = samples.get(i)?;
                let (node_id, last_seen) = info?;
                Some(NodeDiagnostics {
                    node_id,
                    cohort: cohort_of(s.cohort()),
                    state: s.state().as_str(),
                    score: s.score,
                    last_seen_unix_nano: last_seen,
                    straggler: s.straggler(),
                })
            })
            .collect();
        let diagnostics = Arc::new(cluster_diagnostics(&tick, nodes, now));
        let published = tick
            .cluster_wide
            .threshold
            .and_then(|t| ThresholdValue::new(t, tick.cluster_wide.quorum_met));
        let empty = samples.iter().all(NodeSample::is_vacant);
        let cohort_extra = std::iter::once((tick.straggler_count, tick.cluster_wide.panic))
            .chain(
                tick.cohorts
                    .iter()
                    .map(|c| (c.straggler_count, c.update.panic)),
            )
            .collect();
        (
            ClusterSummary {
                cluster_id: cluster_id.clone(),
                published,
                diagnostics,
                cohort_extra,
                entered: side.entered,
                cleared: side.cleared,
                panic_events: side.panic_events,
            },
            empty,
        )
    }

    fn log_panic(
        &self,
        cluster: &str,
        cohort: &str,
        e: &Option<PanicEvent>,
        counts: &mut [u64; 3],
    ) {
        let Some(e) = e else { return };
        match e {
            PanicEvent::Entered => {
                counts[0] += 1;
                tracing::warn!(
                    cluster_id = cluster,
                    cgroup_path_hash = cohort,
                    "panic mode: much of the cohort fell below the last good threshold; holding it"
                );
            }
            PanicEvent::Exited => {
                counts[1] += 1;
                tracing::info!(
                    cluster_id = cluster,
                    cgroup_path_hash = cohort,
                    "panic mode ended"
                );
            }
            PanicEvent::Rebaselined => {
                counts[2] += 1;
                tracing::warn!(
                    cluster_id = cluster,
                    cgroup_path_hash = cohort,
                    "panic mode lasted panic.max_duration; accepting the new level"
                );
            }
        }
    }

    fn remove_empty_clusters(&self, empty: &[Arc<str>], side: &mut TickSide) {
        if empty.is_empty() {
            return;
        }
        let mut map = self.clusters.write();
        for id in empty {
            // A push may have arrived since the snapshot: only remove a still-empty table.
            let still_empty = map.get(id).is_some_and(|e| e.table.lock().is_empty());
            if still_empty {
                map.remove(id);
                side.clusters.remove(id);
                tracing::debug!(cluster_id = %id, "cluster forgotten: no node seen within quorum.expected_window");
            }
        }
    }
}

fn cluster_diagnostics(
    t: &ClusterTick,
    nodes: Vec<NodeDiagnostics>,
    now: Timestamp,
) -> ClusterDiagnostics {
    let cw = &t.cluster_wide;
    let mut cohorts = Vec::with_capacity(t.cohorts.len() + 1);
    cohorts.push(CohortDiagnostics {
        cohort: Arc::from(""),
        active_nodes: cw.active as u64,
        median: cw.stats.map(|s| s.median),
        mad: cw.stats.map(|s| s.mad),
        raw_threshold: cw.raw_threshold,
        threshold: cw.threshold,
        quorum_met: cw.quorum_met,
        uses_cluster_fallback: false,
    });
    for c in &t.cohorts {
        cohorts.push(CohortDiagnostics {
            cohort: c.name.clone(),
            active_nodes: c.update.active as u64,
            median: c.update.stats.map(|s| s.median),
            mad: c.update.stats.map(|s| s.mad),
            raw_threshold: c.update.raw_threshold,
            threshold: c.update.threshold,
            quorum_met: c.update.quorum_met,
            uses_cluster_fallback: c.uses_fallback,
        });
    }
    ClusterDiagnostics {
        median: cw.stats.map(|s| s.median),
        mad: cw.stats.map(|s| s.mad),
        raw_threshold: cw.raw_threshold,
        threshold: cw.threshold,
        quorum_met: cw.quorum_met,
        active_nodes: t.active,
        idle_nodes: t.idle,
        calibrating_nodes: t.calibrating,
        expected_nodes: t.expected,
        coverage: t.coverage,
        coverage_low: t.coverage_low,
        panic_mode: cw.panic,
        straggler_count: t.straggler_count,
        cohorts,
        nodes,
        computed_at_unix_nano: now.as_nanos(),
    }
}

/// One straggler's gauge point. No data-point attributes: the score and threshold change
/// every tick and would make a new Prometheus series each time (they are exported as
/// `ingero_node_health_score` and `ingero_fleet_threshold`, and listed in diagnostics).
fn straggler_metric(cluster: &str, node: &str, now: Timestamp) -> ResourceMetrics {
    let point = NumberDataPoint {
        time_unix_nano: now.as_nanos(),
        value: Some(NumberValue::AsInt(1)),
        ..Default::default()
    };
    let metric = Metric {
        name: m::NODE_STRAGGLER_METRIC.to_string(),
        unit: m::NODE_STRAGGLER_UNIT.to_string(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: vec![point],
        })),
        ..Default::default()
    };
    let attrs: Vec<KeyValue> = vec![
        otlp::kv_str(resource::CLUSTER_ID, cluster),
        otlp::kv_str(resource::NODE_ID, node),
    ];
    otlp::resource_metrics(attrs, m::SCOPE_NAME, vec![metric])
}

impl Processor for IngeroProcessor {
    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        let found = component::find_threshold_sink(host);
        match &found {
            Some((id, _)) => {
                tracing::info!(extension = %id, "ingero processor publishes thresholds")
            }
            None => tracing::warn!(
                "no threshold extension (ingero_threshold) found: the ingero processor still \
                 computes thresholds and classifies stragglers, but agents receive no threshold"
            ),
        }
        *self.sink.write() = found;
        Ok(())
    }

    fn process(&self, data: &mut Vec<ResourceMetrics>, ctx: &BatchContext) -> ProcessOutcome {
        let mut out = ProcessOutcome::default();
        for rm in data.iter() {
            self.process_resource(rm, ctx, &mut out);
        }
        out
    }

    fn tick(&self, now: Timestamp) -> Vec<ResourceMetrics> {
        let mut side = self.tick_side.lock();
        let clusters: Vec<(Arc<str>, Arc<ClusterEntry>)> = self
            .clusters
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out_metrics = Vec::new();
        let mut summaries = Vec::with_capacity(clusters.len());
        let mut empty = Vec::new();
        for (id, entry) in &clusters {
            let cs = side.clusters.entry(id.clone()).or_default();
            let (summary, is_empty) = self.tick_cluster(id, entry, cs, now, &mut out_metrics);
            if is_empty {
                empty.push(id.clone());
            } else {
                summaries.push(summary);
            }
        }
        self.remove_empty_clusters(&empty, &mut side);
        drop(side);
        summaries.sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));

        let reports: Vec<ClusterReport> = summaries
            .iter()
            .map(|s| ClusterReport {
                cluster_id: s.cluster_id.clone(),
                value: s.published,
                diagnostics: s.diagnostics.clone(),
            })
            .collect();
        let sink = self.sink.read().as_ref().map(|(_, s)| s.clone());
        if let Some(sink) = sink {
            sink.publish(reports, now);
        }
        *self.snapshot.lock() = Arc::new(Snapshot {
            computed_at: Some(now),
            clusters: summaries,
        });
        out_metrics
    }

    fn shutdown(&self) {
        *self.sink.write() = None;
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        let snap = self.snapshot.lock().clone();
        let mut threshold = MetricFamily::gauge(
            m::THRESHOLD,
            "Smoothed straggler threshold (held when quorum is lost or in panic mode)",
        );
        let mut active = MetricFamily::gauge(m::ACTIVE_NODES, "Active nodes in the statistic");
        let mut idle = MetricFamily::gauge(m::IDLE_NODES, "Nodes reporting state idle");
        let mut calibrating =
            MetricFamily::gauge(m::CALIBRATING_NODES, "Nodes reporting state calibrating");
        let mut expected =
            MetricFamily::gauge(m::EXPECTED_NODES, "Nodes coverage is measured against");
        let mut coverage_low = MetricFamily::gauge(
            m::COVERAGE_LOW,
            "1 if active/expected is below quorum.coverage_fraction",
        );
        let mut coverage_ratio =
            MetricFamily::gauge(m::COVERAGE_RATIO, "Active nodes / expected nodes");
        let mut panic = MetricFamily::gauge(
            m::PANIC_MODE,
            "1 if panic mode holds the last good threshold",
        );
        let mut quorum = MetricFamily::gauge(
            m::QUORUM_MET,
            "1 if at least quorum.statistical_min active nodes",
        );
        let mut median = MetricFamily::gauge(m::MEDIAN, "Median health score of active nodes");
        let mut mad = MetricFamily::gauge(
            m::MAD,
            "Median absolute deviation of active health scores (unscaled)",
        );
        let mut stragglers = MetricFamily::gauge(
            m::STRAGGLER_COUNT,
            "Nodes the server-side classifier flags as stragglers",
        );
        let mut transitions = MetricFamily::counter(
            m::STRAGGLER_TRANSITIONS_TOTAL,
            "Server-side straggler classification edges",
        );
        let mut panic_tr =
            MetricFamily::counter(m::PANIC_TRANSITIONS_TOTAL, "Cluster-wide panic-mode edges");

        let b = |v: bool| if v { 1.0 } else { 0.0 };
        for c in &snap.clusters {
            let d = &c.diagnostics;
            let cid: &str = &c.cluster_id;
            let cl = [(m::LABEL_CLUSTER, cid), (m::LABEL_COHORT, "")];
            idle.push(&cl, d.idle_nodes as f64);
            calibrating.push(&cl, d.calibrating_nodes as f64);
            expected.push(&cl, d.expected_nodes as f64);
            coverage_low.push(&cl, b(d.coverage_low));
            coverage_ratio.push(&cl, d.coverage);
            for (co, (straggler_count, in_panic)) in d.cohorts.iter().zip(&c.cohort_extra) {
                let labels = [
                    (m::LABEL_CLUSTER, cid),
                    (m::LABEL_COHORT, co.cohort.as_ref()),
                ];
                stragglers.push(&labels, *straggler_count as f64);
                panic.push(&labels, b(*in_panic));
                if let Some(t) = co.threshold {
                    threshold.push(&labels, t);
                }
                active.push(&labels, co.active_nodes as f64);
                quorum.push(&labels, b(co.quorum_met));
                if let Some(v) = co.median {
                    median.push(&labels, v);
                }
                if let Some(v) = co.mad {
                    mad.push(&labels, v);
                }
            }
            transitions.push(
                &[(m::LABEL_CLUSTER, cid), (m::LABEL_DIRECTION, "entered")],
                c.entered as f64,
            );
            transitions.push(
                &[(m::LABEL_CLUSTER, cid), (m::LABEL_DIRECTION, "cleared")],
                c.cleared as f64,
            );
            for (i, ev) in ["entered", "exited", "rebaselined"].iter().enumerate() {
                let v = c.panic_events.get(i).copied().unwrap_or(0);
                panic_tr.push(&[(m::LABEL_CLUSTER, cid), (m::LABEL_EVENT, ev)], v as f64);
            }
        }

        let mut points = MetricFamily::counter(m::POINTS_TOTAL, "Health-score points by outcome");
        let ctr = &self.counters;
        points.push(
            &[(m::LABEL_OUTCOME, "accepted")],
            ctr.accepted.load(Ordering::Relaxed) as f64,
        );
        points.push(
            &[(m::LABEL_OUTCOME, "superseded")],
            ctr.superseded.load(Ordering::Relaxed) as f64,
        );
        points.push(
            &[(m::LABEL_OUTCOME, "rejected")],
            ctr.rejected_total() as f64,
        );
        points.push(
            &[(m::LABEL_OUTCOME, "dropped")],
            ctr.dropped_points.load(Ordering::Relaxed) as f64,
        );
        let mut rejected = MetricFamily::counter(
            m::REJECTED_POINTS_TOTAL,
            "Health-score points rejected, by reason",
        );
        for r in RejectReason::ALL {
            rejected.push(&[(m::LABEL_REASON, r.label())], ctr.rejected(r) as f64);
        }
        let mut dropped = MetricFamily::counter(
            m::DROPPED_TOTAL,
            "Points or keys refused by a cap, by reason",
        );
        for r in DropReason::ALL {
            dropped.push(&[(m::LABEL_REASON, r.label())], ctr.dropped(r) as f64);
        }
        let clusters = MetricFamily::gauge(m::CLUSTERS, "Clusters tracked")
            .with(&[], self.clusters.read().len() as f64);
        let records = MetricFamily::gauge(m::NODE_RECORDS, "Node records held across clusters")
            .with(&[], self.budget.used() as f64);

        out.extend([
            threshold,
            active,
            idle,
            calibrating,
            expected,
            coverage_low,
            coverage_ratio,
            panic,
            quorum,
            median,
            mad,
            stragglers,
            transitions,
            panic_tr,
            points,
            rejected,
            dropped,
            clusters,
            records,
        ]);
    }

    fn diagnostics(&self) -> Option<serde_json::Value> {
        #[derive(Serialize)]
        struct ClusterJson<'a> {
            cluster_id: &'a str,
            published_threshold: Option<f64>,
            quorum_met: bool,
            median: Option<f64>,
            mad: Option<f64>,
            raw_threshold: Option<f64>,
            active_nodes: u64,
            idle_nodes: u64,
            calibrating_nodes: u64,
            expected_nodes: u64,
            coverage: f64,
            coverage_low: bool,
            panic_mode: bool,
            straggler_count: u64,
            cohorts: &'a [CohortDiagnostics],
            straggler_transitions_entered: u64,
            straggler_transitions_cleared: u64,
        }
        let snap = self.snapshot.lock().clone();
        let clusters: Vec<ClusterJson<'_>> = snap
            .clusters
            .iter()
            .map(|c| {
                let d = &c.diagnostics;
                ClusterJson {
                    cluster_id: &c.cluster_id,
                    published_threshold: c.published.map(|v| v.threshold()),
                    quorum_met: d.quorum_met,
                    median: d.median,
                    mad: d.mad,
                    raw_threshold: d.raw_threshold,
                    active_nodes: d.active_nodes,
                    idle_nodes: d.idle_nodes,
                    calibrating_nodes: d.calibrating_nodes,
                    expected_nodes: d.expected_nodes,
                    coverage: d.coverage,
                    coverage_low: d.coverage_low,
                    panic_mode: d.panic_mode,
                    straggler_count: d.straggler_count,
                    cohorts: &d.cohorts,
                    straggler_transitions_entered: c.entered,
                    straggler_transitions_cleared: c.cleared,
                }
            })
            .collect();
        let ctr = &self.counters;
        let rejected: serde_json::Map<String, serde_json::Value> = RejectReason::ALL
            .iter()
            .map(|r| (r.label().to_string(), ctr.rejected(*r).into()))
            .collect();
        let dropped: serde_json::Map<String, serde_json::Value> = DropReason::ALL
            .iter()
            .map(|r| (r.label().to_string(), ctr.dropped(*r).into()))
            .collect();
        Some(serde_json::json!({
            "computed_at_unix_nano": snap.computed_at.map(|t| t.as_nanos()),
            "sink": self.sink.read().as_ref().map(|(id, _)| id.to_string()),
            "clusters": clusters,
            "points": {
                "accepted": ctr.accepted.load(Ordering::Relaxed),
                "superseded": ctr.superseded.load(Ordering::Relaxed),
                "rejected": rejected,
                "dropped": dropped,
            },
            "node_records": self.budget.used(),
        }))
    }
}
