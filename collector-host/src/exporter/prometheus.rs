//! `prometheus` exporter: the pull endpoint. Received data points (translated by
//! `fleet-prometheus`) plus the self-metrics of the Fleet components.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::otlp::count_points;
use component::{MetricFamily, ProcessOutcome, ResourceMetrics, Timestamp};
use fleet_prometheus::PrometheusExporter;

use crate::pipeline::Exporter;
use crate::telemetry::{ExporterCounters, Signal};

/// Where the exporter gets the component self-metrics it appends to every scrape.
pub type FamilySource = Arc<dyn Fn() -> Vec<MetricFamily> + Send + Sync>;

pub struct PromExporter {
    pub inner: Arc<PrometheusExporter>,
    pub counters: Arc<ExporterCounters>,
}

impl std::fmt::Debug for PromExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromExporter").finish()
    }
}

impl Exporter for PromExporter {
    fn consume_metrics(&self, data: &[ResourceMetrics]) {
        self.consume_metrics_outcome(data);
    }

    fn consume_metrics_outcome(&self, data: &[ResourceMetrics]) -> ProcessOutcome {
        self.consume_as(data, None)
    }

    fn deliver_metrics_as(
        &self,
        data: &[ResourceMetrics],
        tenant: Option<&str>,
    ) -> (ProcessOutcome, crate::pipeline::Delivery) {
        (
            self.consume_as(data, tenant),
            crate::pipeline::Delivery::Done,
        )
    }
}

impl PromExporter {
    fn consume_as(&self, data: &[ResourceMetrics], tenant: Option<&str>) -> ProcessOutcome {
        let stats = self.inner.consume_as(data, Timestamp::now(), tenant);
        self.counters.sent[ExporterCounters::idx(Signal::Metrics)]
            .fetch_add(count_points(data), Relaxed);
        let mut outcome = ProcessOutcome::default();
        if stats.lost > 0 {
            outcome.reject(stats.lost, || {
                format!(
                    "prometheus exporter dropped {} data point(s) (mostly {}; {} has every reason)",
                    stats.lost,
                    stats.loss_reason.map_or("unknown", |r| r.as_str()),
                    fleet_prometheus::metrics::spec::POINTS_DROPPED
                        .name_in(self.inner.metric_prefix())
                )
            });
        }
        outcome
    }
}
