//! Pipelines: processors in config order, then a fan-out to exporters.
//!
//! A receiver hands a decoded batch to every pipeline of that signal that lists it (the
//! batch is cloned for all but the last). A processor's tick output enters its pipeline
//! right after that processor, so later processors and the exporters see it.
//!
//! An exporter answers each batch with a [`Delivery`]: done, pending (a durable exporter's
//! commit, which the receiver awaits before it answers the client) or unavailable (the
//! exporter is behind: the receiver answers HTTP 503 + `Retry-After` / gRPC `UNAVAILABLE`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::otlp::count_points;
use component::{BatchContext, ComponentId, ProcessOutcome, Processor, ResourceMetrics};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::telemetry::{ProcessorCounters, Telemetry};

pub use component::exporter::{AckFuture, Delivery, Exporter, Unavailable};

/// The deliveries of one export across its pipelines and exporters.
#[derive(Default)]
pub struct Acks {
    pending: Vec<AckFuture>,
    unavailable: Option<Unavailable>,
}

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acks")
            .field("pending", &self.pending.len())
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

impl Acks {
    pub fn push(&mut self, d: Delivery) {
        match d {
            Delivery::Done => {}
            Delivery::Pending(f) => self.pending.push(f),
            Delivery::Unavailable(u) => {
                if self.unavailable.is_none() {
                    self.unavailable = Some(u);
                }
            }
        }
    }

    /// Wait for every pending delivery; `Err` if any exporter was or became unavailable
    /// (the longest retry delay wins).
    pub async fn wait(self) -> Result<(), Unavailable> {
        let mut worst = self.unavailable;
        for f in self.pending {
            if let Err(u) = f.await {
                worst = match worst {
                    Some(w) if w.retry_after >= u.retry_after => Some(w),
                    _ => Some(u),
                };
            }
        }
        worst.map_or(Ok(()), Err)
    }
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
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        self.consume_from(0, data, ctx, acks)
    }

    /// Run `data` from stage `start` on (tick outputs enter after their processor); the
    /// exporters' deliveries go to `acks`.
    pub fn consume_from(
        &self,
        start: usize,
        mut data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        let mut outcome = ProcessOutcome::default();
        // A stage's outgoing points are the next stage's incoming ones: counted once.
        let mut points = None;
        for stage in self.stages.iter().skip(start) {
            let incoming = points.unwrap_or_else(|| count_points(&data));
            stage.counters.incoming.fetch_add(incoming, Relaxed);
            let r = catch_unwind(AssertUnwindSafe(|| stage.processor.process(&mut data, ctx)));
            match r {
                Ok(o) => outcome.merge(o),
                Err(_) => {
                    self.telemetry.tick_panics.fetch_add(1, Relaxed);
                    tracing::error!(processor = %stage.id, pipeline = %self.name, "processor panicked; batch dropped");
                    return Err(StagePanic(stage.id.to_string()));
                }
            }
            let outgoing = count_points(&data);
            stage.counters.outgoing.fetch_add(outgoing, Relaxed);
            points = Some(outgoing);
        }
        if !data.is_empty() {
            for e in &self.exporters {
                let (o, d) = e.deliver_metrics_as(&data, ctx.tenant.as_deref());
                outcome.merge(o);
                acks.push(d);
            }
        }
        // The batch's strings and vectors go to this thread's pool for the next JSON or
        // protobuf decode here, instead of being freed now and allocated again then.
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
    /// Feed a metrics batch to every metrics pipeline; outcomes are merged, deliveries go
    /// to `acks`.
    pub fn consume_metrics(
        &self,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
        acks: &mut Acks,
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
            outcome.merge(p.consume(batch, ctx, acks)?);
        }
        Ok(outcome)
    }

    pub fn consume_traces(&self, data: &ExportTraceServiceRequest) -> Acks {
        let mut acks = Acks::default();
        for p in &self.traces {
            for e in &p.exporters {
                acks.push(e.deliver_traces(data));
            }
        }
        acks
    }

    pub fn consume_logs(&self, data: &ExportLogsServiceRequest) -> Acks {
        let mut acks = Acks::default();
        for p in &self.logs {
            for e in &p.exporters {
                acks.push(e.deliver_logs(data));
            }
        }
        acks
    }
}
