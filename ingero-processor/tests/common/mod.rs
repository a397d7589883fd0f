//! Shared helpers of the integration tests: agent-shaped OTLP pushes, a recording
//! threshold sink, hosts.
#![allow(dead_code)]

use std::sync::Arc;

use component::otlp::{self, NumberValue, ResourceMetrics};
use component::{BatchContext, ComponentId, Extension, Host, StartError, StaticHost, Timestamp};
use ingero_wire::{ClusterReport, ThresholdSink};
use ingero_wire::{attr, metric, resource};
use parking_lot::Mutex;

/// One health push as the agent builds it (`internal/health/emitter.go`): resource with
/// node and cluster id, scope `ingero.health`, the health score with state, workload type
/// and cgroup hash, and the informational gauges.
pub fn agent_push(
    cluster: Option<&str>,
    node: &str,
    score: f64,
    state: &str,
    cohort: &str,
) -> ResourceMetrics {
    let mut res = vec![otlp::kv_str(resource::NODE_ID, node)];
    if let Some(c) = cluster {
        res.push(otlp::kv_str(resource::CLUSTER_ID, c));
    }
    let dp = |extra: Vec<otlp::KeyValue>, v: f64| {
        let mut attrs = vec![
            otlp::kv_str(attr::NODE_STATE, state),
            otlp::kv_str(attr::WORKLOAD_TYPE, "training"),
        ];
        attrs.extend(extra);
        otlp::point_f64(attrs, 1_700_000_000_000_000_000, v)
    };
    let mut metrics = vec![otlp::gauge_f64(
        metric::HEALTH_SCORE,
        "1",
        vec![dp(
            vec![otlp::kv_str(attr::CGROUP_PATH_HASH, cohort)],
            score,
        )],
    )];
    for name in [
        metric::THROUGHPUT_RATIO,
        metric::COMPUTE_EFFICIENCY,
        metric::MEMORY_HEADROOM,
        metric::CPU_AVAILABILITY,
    ] {
        metrics.push(otlp::gauge_f64(name, "1", vec![dp(vec![], 0.9)]));
    }
    let mut warn = otlp::gauge_f64(metric::DEGRADATION_WARNING, "1", vec![dp(vec![], 0.0)]);
    if let Some(otlp::MetricKind::Gauge(g)) = &mut warn.data {
        g.data_points[0].value = Some(NumberValue::AsInt(0));
    }
    metrics.push(warn);
    metrics.push(otlp::gauge_f64(
        metric::DETECTION_MODE,
        "1",
        vec![otlp::point_f64(
            vec![otlp::kv_str(attr::DETECTION_MODE, "fleet")],
            1,
            1.0,
        )],
    ));
    metrics.push(otlp::gauge_f64(
        metric::FLEET_REACHABLE,
        "1",
        vec![otlp::point_f64(vec![], 1, 1.0)],
    ));
    metrics.push(otlp::gauge_f64(
        metric::NODE_WORLD_SIZE,
        "1",
        vec![otlp::point_f64(vec![], 1, 0.0)],
    ));
    otlp::resource_metrics(res, "ingero.health", metrics)
}

/// A health push from an active node in the cluster-wide cohort.
pub fn active(cluster: &str, node: &str, score: f64) -> ResourceMetrics {
    agent_push(Some(cluster), node, score, "active", "")
}

pub fn ctx(cluster: Option<&str>, at: Timestamp) -> BatchContext {
    BatchContext {
        cluster_id: cluster.map(Arc::from),
        received_at: at,
        tenant: None,
    }
}

/// Everything published, in order.
#[derive(Default)]
pub struct RecordingSink {
    pub published: Mutex<Vec<(Vec<ClusterReport>, Timestamp)>>,
}

impl RecordingSink {
    pub fn last(&self) -> Vec<ClusterReport> {
        self.published
            .lock()
            .last()
            .map(|(r, _)| r.clone())
            .unwrap_or_default()
    }

    pub fn last_for(&self, cluster: &str) -> Option<ClusterReport> {
        self.last()
            .into_iter()
            .find(|r| r.cluster_id.as_ref() == cluster)
    }

    pub fn count(&self) -> usize {
        self.published.lock().len()
    }
}

impl ThresholdSink for RecordingSink {
    fn publish(&self, reports: Vec<ClusterReport>, computed_at: Timestamp) {
        self.published.lock().push((reports, computed_at));
    }
}

pub struct SinkExtension(pub Arc<RecordingSink>);

impl Extension for SinkExtension {
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }
    fn shutdown(&self) {}
    fn provides(
        &self,
        interface: std::any::TypeId,
    ) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        component::provide::<Arc<dyn ThresholdSink>>(interface, || self.0.clone())
    }
}

/// A host whose only extension is a recording sink.
pub fn host_with_sink() -> (StaticHost, Arc<RecordingSink>) {
    let sink = Arc::new(RecordingSink::default());
    let host = StaticHost {
        extensions: vec![(
            ComponentId::new("ingero_threshold"),
            Arc::new(SinkExtension(sink.clone())) as Arc<dyn Extension>,
        )],
    };
    (host, sink)
}

/// A push with only the health score (fast to build; the simulation sends 100k of them).
pub fn health_only(cluster: &str, node: &str, score: f64) -> ResourceMetrics {
    let dp = otlp::point_f64(
        vec![
            otlp::kv_str(attr::NODE_STATE, "active"),
            otlp::kv_str(attr::CGROUP_PATH_HASH, ""),
        ],
        0,
        score,
    );
    otlp::resource_metrics(
        vec![
            otlp::kv_str(resource::NODE_ID, node),
            otlp::kv_str(resource::CLUSTER_ID, cluster),
        ],
        "ingero.health",
        vec![otlp::gauge_f64(metric::HEALTH_SCORE, "1", vec![dp])],
    )
}
