//! The exporter contract: what a pipeline's last stage does with a batch, and how it
//! answers (done, pending until durable, or unavailable for now).
//!
//! An exporter answers each batch with a [`Delivery`]: done, pending (a durable exporter's
//! commit, which the receiver awaits before it answers the client) or unavailable (the
//! exporter is behind: the receiver answers HTTP 503 + `Retry-After` / gRPC `UNAVAILABLE`).
//! A host's built-in exporters and a distribution's own (built by an
//! [`ExporterFactory`](crate::factory::ExporterFactory)) implement the same trait.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::{Host, MetricFamily, ProcessOutcome, ResourceMetrics, StartError};

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
    /// [`Exporter::deliver_metrics`] for a batch `tenant` sent ([`crate::BatchContext::tenant`]);
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
