//! Pipelines: processors in config order, then a fan-out to exporters.
//!
//! A receiver hands a decoded batch to every pipeline of that signal that lists it (the
//! batch is cloned for all but the last). A processor's tick output enters its pipeline
//! right after that processor, so later processors and the exporters see it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::otlp::count_points;
use component::{BatchContext, ComponentId, ProcessOutcome, Processor, ResourceMetrics};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::telemetry::{ProcessorCounters, Telemetry};

/// A host-side exporter. Exporters must not block: slow destinations get a queue.
pub trait Exporter: Send + Sync {
    fn consume_metrics(&self, data: &[ResourceMetrics]);
    /// [`Exporter::consume_metrics`], returning the points the exporter dropped for good
    /// (reported to the client as OTLP partial success, like a processor's rejects).
    fn consume_metrics_outcome(&self, data: &[ResourceMetrics]) -> ProcessOutcome {
        self.consume_metrics(data);
        ProcessOutcome::default()
    }
    fn consume_traces(&self, _data: &ExportTraceServiceRequest) {}
    fn consume_logs(&self, _data: &ExportLogsServiceRequest) {}
    /// Flush and stop within the host's drain budget.
    fn shutdown(&self) {}
}

/// A processor instance with its counters.
pub struct Stage {
    pub id: ComponentId,
    pub processor: Arc<dyn Processor>,
    pub counters: Arc<ProcessorCounters>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage").field("id", &self.id).finish()
    }
}

/// A `metrics` pipeline.
pub struct MetricsPipeline {
    pub name: String,
    pub stages: Vec<Arc<Stage>>,
    pub exporters: Vec<Arc<dyn Exporter>>,
    pub telemetry: Arc<Telemetry>,
}

impl std::fmt::Debug for MetricsPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsPipeline")
            .field("name", &self.name)
            .field("stages", &self.stages)
            .field("exporters", &self.exporters.len())
            .finish()
    }
}

/// A pipeline stage panicked; the batch was dropped and counted.
#[derive(Debug, thiserror::Error)]
#[error("processor {0} failed while processing the batch")]
pub struct StagePanic(pub String);

impl MetricsPipeline {
    /// Run a received batch through every processor and exporter.
    pub fn consume(
        &self,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
    ) -> Result<ProcessOutcome, StagePanic> {
        self.consume_from(0, data, ctx)
    }

    /// Run `data` from stage `start` on (tick outputs enter after their processor).
    pub fn consume_from(
        &self,
        start: usize,
        mut data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
    ) -> Result<ProcessOutcome, StagePanic> {
        let mut outcome = ProcessOutcome::default();
        for stage in self.stages.iter().skip(start) {
            stage
                .counters
                .incoming
                .fetch_add(count_points(&data), Relaxed);
            let r = catch_unwind(AssertUnwindSafe(|| stage.processor.process(&mut data, ctx)));
            match r {
                Ok(o) => outcome.merge(o),
                Err(_) => {
                    self.telemetry.tick_panics.fetch_add(1, Relaxed);
                    tracing::error!(processor = %stage.id, pipeline = %self.name, "processor panicked; batch dropped");
                    return Err(StagePanic(stage.id.to_string()));
                }
            }
            stage
                .counters
                .outgoing
                .fetch_add(count_points(&data), Relaxed);
        }
        if !data.is_empty() {
            for e in &self.exporters {
                outcome.merge(e.consume_metrics_outcome(&data));
            }
        }
        // The batch's strings and vectors go to this thread's pool for the next JSON
        // decode here, instead of being freed now and allocated again then.
        component::recycle::recycle_on_this_thread(data);
        Ok(outcome)
    }

    /// Index of a processor in this pipeline.
    pub fn stage_index(&self, id: &ComponentId) -> Option<usize> {
        self.stages.iter().position(|s| &s.id == id)
    }
}

/// A `traces` or `logs` pipeline: data passes straight to the exporters.
pub struct PassPipeline {
    pub name: String,
    pub exporters: Vec<Arc<dyn Exporter>>,
}

impl std::fmt::Debug for PassPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassPipeline")
            .field("name", &self.name)
            .finish()
    }
}

/// Everything one receiver feeds.
#[derive(Debug, Default, Clone)]
pub struct Fanout {
    pub metrics: Vec<Arc<MetricsPipeline>>,
    pub traces: Vec<Arc<PassPipeline>>,
    pub logs: Vec<Arc<PassPipeline>>,
}

impl Fanout {
    /// Feed a metrics batch to every metrics pipeline; outcomes are merged.
    pub fn consume_metrics(
        &self,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
    ) -> Result<ProcessOutcome, StagePanic> {
        let mut outcome = ProcessOutcome::default();
        let n = self.metrics.len();
        let mut data = Some(data);
        for (i, p) in self.metrics.iter().enumerate() {
            let batch = if i + 1 == n {
                data.take().unwrap_or_default()
            } else {
                data.clone().unwrap_or_default()
            };
            outcome.merge(p.consume(batch, ctx)?);
        }
        Ok(outcome)
    }

    pub fn consume_traces(&self, data: &ExportTraceServiceRequest) {
        for p in &self.traces {
            for e in &p.exporters {
                e.consume_traces(data);
            }
        }
    }

    pub fn consume_logs(&self, data: &ExportLogsServiceRequest) {
        for p in &self.logs {
            for e in &p.exporters {
                e.consume_logs(data);
            }
        }
    }
}
