//! Pipelines: processors in config order, then a fan-out to exporters.
//!
//! A receiver hands a decoded batch to every pipeline of that signal that lists it (the
//! batch is cloned for all but the last). A processor's tick output enters its pipeline
//! right after that processor, so later processors and the exporters see it.
//!
//! An exporter answers each batch with a [`Delivery`]: done, pending (a durable exporter's
//! commit, which the receiver awaits before it answers the client) or unavailable (the
//! exporter is behind: the receiver answers HTTP 503 + `Retry-After` / gRPC `UNAVAILABLE`).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use component::otlp::count_points;
use component::{
    BatchContext, ComponentId, Host, MetricFamily, ProcessOutcome, Processor, ResourceMetrics,
    StartError,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::telemetry::{ProcessorCounters, Telemetry};

/// An exporter is behind (its queue is full, its writer busy): the batch was not taken.
/// The receiver answers HTTP 503 with `Retry-After` / gRPC `UNAVAILABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// Sent to the client.
    pub message: String,
    /// When the client should retry (whole seconds on the wire, at least one).
    pub retry_after: Duration,
}

/// Resolves when a pending delivery is settled (`Ok`: durable).
pub type AckFuture = Pin<Box<dyn Future<Output = Result<(), Unavailable>> + Send>>;

/// What an exporter did with one batch.
pub enum Delivery {
    /// Taken (sent, queued or written): nothing to wait for.
    Done,
    /// The receiver answers the client once this resolves (a durable exporter resolves it
    /// after the batch is committed).
    Pending(AckFuture),
    /// Not taken: the exporter is behind.
    Unavailable(Unavailable),
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delivery::Done => f.write_str("Done"),
            Delivery::Pending(_) => f.write_str("Pending"),
            Delivery::Unavailable(u) => write!(f, "Unavailable({u:?})"),
        }
    }
}

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

/// An exporter. Exporters must not block: slow destinations get a queue, and a durable
/// exporter returns [`Delivery::Pending`] instead of waiting for its commit.
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
    /// [`Exporter::consume_metrics_outcome`] with the batch's [`Delivery`].
    fn deliver_metrics(&self, data: &[ResourceMetrics]) -> (ProcessOutcome, Delivery) {
        (self.consume_metrics_outcome(data), Delivery::Done)
    }
    /// [`Exporter::deliver_metrics`] for a batch `tenant` sent ([`BatchContext::tenant`]);
    /// an exporter that shares its memory between tenants charges it to that tenant.
    fn deliver_metrics_as(
        &self,
        data: &[ResourceMetrics],
        _tenant: Option<&str>,
    ) -> (ProcessOutcome, Delivery) {
        self.deliver_metrics(data)
    }
    /// [`Exporter::consume_traces`] with the batch's [`Delivery`].
    fn deliver_traces(&self, data: &ExportTraceServiceRequest) -> Delivery {
        self.consume_traces(data);
        Delivery::Done
    }
    /// [`Exporter::consume_logs`] with the batch's [`Delivery`].
    fn deliver_logs(&self, data: &ExportLogsServiceRequest) -> Delivery {
        self.consume_logs(data);
        Delivery::Done
    }
    /// Called once, after the extensions started and before any receiver listens; find
    /// extensions here. An error stops the service.
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }
    /// Append this exporter's self-metrics.
    fn telemetry(&self, _out: &mut Vec<MetricFamily>) {}
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
                let (o, d) = e.deliver_metrics_as(&data, ctx.tenant.as_deref());
                outcome.merge(o);
                acks.push(d);
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
