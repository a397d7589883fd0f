//! The tick: per cluster, copy the table out under its lock, compute the threshold and
//! classify every node ([`ClusterTickState`]) without it, then build what the tick reports:
//! the [`ClusterReport`] for the threshold sink, `ingero.fleet.node.straggler` gauges for
//! the current stragglers, bounded transition and panic logs, and the [`ClusterSummary`]
//! that telemetry and diagnostics read until the next tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component::otlp::{self, Gauge, KeyValue, Metric, MetricKind, NumberDataPoint, NumberValue};
use component::{ResourceMetrics, Timestamp};
use ingero_wire::resource;
use ingero_wire::threshold::{ClusterDiagnostics, CohortDiagnostics, NodeDiagnostics};
use ingero_wire::{ClusterReport, ThresholdValue};

use crate::classifier::Transition;
use crate::cluster::{ClusterParams, ClusterTick, ClusterTickState};
use crate::config::IngeroConfig;
use crate::ingest::SharedTable;
use crate::metrics as m;
use crate::table::{CohortId, NodeBudget, NodeSample};
use crate::threshold::PanicEvent;

/// Individual straggler transitions logged per cluster and tick; the rest are summarised.
pub const MAX_TRANSITION_LOGS_PER_TICK: usize = 20;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a tick needs from the config, resolved once.
#[derive(Debug, Clone)]
pub struct TickSettings {
    pub params: ClusterParams,
    /// A node is live while `now - last_seen <= ttl_nanos`.
    pub ttl_nanos: u64,
    /// A record older than this is forgotten (`quorum.expected_window`).
    pub forget_nanos: u64,
}

impl TickSettings {
    pub fn from_config(cfg: &IngeroConfig) -> Self {
        TickSettings {
            params: ClusterParams::from_config(cfg),
            ttl_nanos: nanos(cfg.node_ttl()),
            forget_nanos: nanos(cfg.quorum.expected_window),
        }
    }
}

/// One cluster's state between ticks: the computation state (thresholds, EMA, panic,
/// classifiers) and the transition counts since the cluster was first seen.
#[derive(Debug, Default)]
pub struct ClusterTickSide {
    state: ClusterTickState,
    entered: u64,
    cleared: u64,
    /// Cluster-wide panic edges: entered, exited, rebaselined.
    panic_events: [u64; 3],
}

/// What the last tick published for one cluster, kept for telemetry and diagnostics.
#[derive(Debug, Clone)]
pub struct ClusterSummary {
    pub cluster_id: Arc<str>,
    pub published: Option<ThresholdValue>,
    pub diagnostics: Arc<ClusterDiagnostics>,
    /// Per entry of `diagnostics.cohorts`: (straggler count, panic mode).
    pub cohort_extra: Vec<(u64, bool)>,
    /// Straggler transitions since the cluster was first seen.
    pub entered: u64,
    pub cleared: u64,
    /// Cluster-wide panic edges: entered, exited, rebaselined.
    pub panic_events: [u64; 3],
}

/// The last tick's summaries, sorted by cluster id.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub computed_at: Option<Timestamp>,
    pub clusters: Vec<ClusterSummary>,
}

/// The output of one tick over every cluster.
#[derive(Debug, Default)]
pub struct TickOutput {
    /// One per cluster that still has records, in the order ticked.
    pub summaries: Vec<ClusterSummary>,
    /// Clusters whose tables were empty after expiry (candidates to forget).
    pub empty: Vec<Arc<str>>,
    /// `ingero.fleet.node.straggler` gauges, one resource per current straggler.
    pub metrics: Vec<ResourceMetrics>,
}

/// The tick side of the processor: one [`ClusterTickSide`] per cluster. Ticks are
/// serialised by the caller (this takes `&mut self`).
#[derive(Debug, Default)]
pub struct TickSide {
    clusters: HashMap<Arc<str>, ClusterTickSide>,
}

impl TickSide {
    /// Tick every cluster of `tables`. `declared` gives `quorum.expected_nodes` of a cluster
    /// (0 when not declared).
    pub fn run(
        &mut self,
        settings: &TickSettings,
        tables: &[(Arc<str>, SharedTable)],
        declared: impl Fn(&str) -> u64,
        budget: &NodeBudget,
        now: Timestamp,
    ) -> TickOutput {
        let mut out = TickOutput {
            summaries: Vec::with_capacity(tables.len()),
            ..TickOutput::default()
        };
        for (id, table) in tables {
            let side = self.clusters.entry(id.clone()).or_default();
            let (summary, is_empty) = tick_cluster(
                settings,
                id,
                table,
                side,
                declared(id),
                budget,
                now,
                &mut out.metrics,
            );
            if is_empty {
                out.empty.push(id.clone());
            } else {
                out.summaries.push(summary);
            }
        }
        out
    }

    /// Drop the state of clusters the push path forgot.
    pub fn forget(&mut self, ids: &[Arc<str>]) {
        for id in ids {
            self.clusters.remove(id);
        }
    }

    /// Clusters with tick state.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }
}

/// Tick one cluster. Returns its summary and whether its table was empty after expiry.
#[allow(clippy::too_many_arguments)]
fn tick_cluster(
    settings: &TickSettings,
    cluster_id: &Arc<str>,
    table: &SharedTable,
    side: &mut ClusterTickSide,
    declared: u64,
    budget: &NodeBudget,
    now: Timestamp,
    out_metrics: &mut Vec<ResourceMetrics>,
) -> (ClusterSummary, bool) {
    {
        let mut table = table.lock();
        side.state.load(
            &mut table,
            now.as_nanos(),
            settings.ttl_nanos,
            settings.forget_nanos,
            budget,
        );
    }
    let tick = side.state.compute(&settings.params, declared, now);
    let samples = side.state.samples();
    let diag = &tick.diagnostic_nodes;
    // One short lock: ids (and last-seen times) of exactly the nodes reported below.
    let logged = tick.transitions.len().min(MAX_TRANSITION_LOGS_PER_TICK);
    let (straggler_infos, diag_infos, transition_infos) = {
        let table = table.lock();
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
    log_panic(
        cluster_id,
        "",
        &tick.cluster_wide.panic_event,
        &mut side.panic_events,
    );
    for c in &tick.cohorts {
        let mut ignored = [0u64; 3];
        log_panic(cluster_id, &c.name, &c.update.panic_event, &mut ignored);
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

fn log_panic(cluster: &str, cohort: &str, e: &Option<PanicEvent>, counts: &mut [u64; 3]) {
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

/// The sink's reports for `summaries`, in the same order.
pub fn reports(summaries: &[ClusterSummary]) -> Vec<ClusterReport> {
    summaries
        .iter()
        .map(|s| ClusterReport {
            cluster_id: s.cluster_id.clone(),
            value: s.published,
            diagnostics: s.diagnostics.clone(),
        })
        .collect()
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
pub fn straggler_metric(cluster: &str, node: &str, now: Timestamp) -> ResourceMetrics {
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

#[cfg(test)]
mod tests;
