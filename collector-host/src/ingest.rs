//! The transport-neutral path of one OTLP export: pipeline check, request middlewares,
//! request cluster, payload check, pipeline, counters, partial success and response
//! metadata. `receiver::http` and `receiver::grpc` are adapters over it: they read the
//! transport's request (path, headers or metadata, body) and write its answer.
//!
//! Order of the steps, the same on both transports:
//! 1. [`Ingest::route`]: a signal with no pipeline on this receiver is refused as otelcol
//!    refuses it (HTTP 404, gRPC `UNIMPLEMENTED`), counted as `no_pipeline`;
//! 2. [`Ingest::admit`], before the body is read: every request middleware (the bearer
//!    gate) sees the request's metadata; then a malformed request cluster is refused (the
//!    cluster is read for metrics, and for any signal when a request middleware runs);
//! 3. the adapter reads and decodes the body;
//! 4. [`Ingest::export_metrics`] / [`Ingest::export_traces`] / [`Ingest::export_logs`]:
//!    the payload [`screen`] settles one cluster identity per resource and, for metrics,
//!    applies the payload limits (what breaks either is dropped and counted, and answered
//!    with partial success on every signal), each admission checks
//!    the payload's clusters, the batch goes down the pipelines, points are counted and
//!    rejected ones answered with partial success; the answer waits for the exporters'
//!    pending deliveries (a durable exporter's commit), and an exporter that is behind
//!    turns it into a [`RefusalCode::Unavailable`] refusal (HTTP 503 + `Retry-After`,
//!    gRPC `UNAVAILABLE`), counted as `exporter_unavailable`;
//! 5. [`Ingest::response_metadata`]: the response middlewares (the threshold headers) for
//!    the export's cluster: the request's, else the first well-formed one in the payload.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::middleware::{
    Admission, HeaderName, HeaderValue, Refusal, RefusalCode, RepeatedHeader, RequestMeta,
    RequestMiddleware, ResponseMiddleware, Signal, Transport,
};
use component::otlp::{ExportMetricsServiceRequest, ExportMetricsServiceResponse, count_points};
use component::scope::{RequestScope, ScopeKey};
use component::{BatchContext, Timestamp};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::config::model::PayloadLimits;
use crate::pipeline::{Acks, Fanout, StagePanic, Unavailable};
use crate::telemetry::{self, ReceiverCounters};

pub mod screen;

/// The ingest path of one receiver on one transport.
pub struct Ingest {
    pub transport: Transport,
    pub fanout: Fanout,
    pub counters: Arc<ReceiverCounters>,
    /// Run before the body is read, in order (the bearer gate).
    pub request: Vec<Arc<dyn RequestMiddleware>>,
    /// Add response metadata (the threshold headers).
    pub response: Vec<Arc<dyn ResponseMiddleware>>,
    /// Sizes a metrics export may carry (the [`screen`] drops what exceeds them).
    pub limits: PayloadLimits,
    /// Where a request names its scope and how resources' scopes are settled.
    pub scope: Arc<dyn RequestScope>,
    /// The response middlewares' HTTP header names, parsed once
    /// ([`ResponseMiddleware::http_header_names`]).
    pub http_header_names: Vec<&'static (&'static str, HeaderName)>,
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest")
            .field("transport", &self.transport)
            .field("request_middlewares", &self.request.len())
            .field("response_middlewares", &self.response.len())
            .field("scope", &self.scope)
            .finish()
    }
}

/// Why an export was refused before its payload was looked at.
#[derive(Debug)]
pub enum Refused {
    /// No pipeline of this signal on this receiver.
    NoPipeline(Signal),
    /// The request names a malformed cluster (the message for the client).
    BadCluster(String),
    /// A request middleware refused it.
    Middleware(Refusal),
}

impl Refused {
    /// The client-facing message of a [`Refused::NoPipeline`].
    pub fn no_pipeline_message(signal: Signal) -> String {
        format!("this receiver has no {} pipeline", signal.as_str())
    }
}

/// An export admitted before its body was read.
pub struct Admitted {
    pub signal: Signal,
    /// The cluster the request names (validated).
    pub cluster: Option<Arc<str>>,
    admissions: Vec<Box<dyn Admission>>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("signal", &self.signal)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// A metrics export that reached the pipelines.
#[derive(Debug)]
pub struct MetricsExport {
    /// The response message (with partial success), or the pipeline's failure.
    pub result: Result<ExportMetricsServiceResponse, StagePanic>,
    /// The cluster whose response metadata the answer carries.
    pub response_cluster: Option<Arc<str>>,
}

fn tel(s: Signal) -> telemetry::Signal {
    match s {
        Signal::Metrics => telemetry::Signal::Metrics,
        Signal::Traces => telemetry::Signal::Traces,
        Signal::Logs => telemetry::Signal::Logs,
    }
}

impl Ingest {
    /// Step 1: refuse a signal this receiver feeds no pipeline with (counted).
    pub fn route(&self, signal: Signal) -> Result<(), Refused> {
        let fed = match signal {
            Signal::Metrics => !self.fanout.metrics.is_empty(),
            Signal::Traces => !self.fanout.traces.is_empty(),
            Signal::Logs => !self.fanout.logs.is_empty(),
        };
        if fed {
            Ok(())
        } else {
            self.counters.reject("no_pipeline");
            Err(Refused::NoPipeline(signal))
        }
    }

    /// Step 2, before the body is read: request middlewares, then the request's cluster.
    /// `cluster` reads it from the transport (`Err`: present but malformed, with the
    /// client-facing message); it is called only when something uses the cluster.
    pub fn admit(
        &self,
        signal: Signal,
        peer: Option<std::net::SocketAddr>,
        authorization: Result<Option<&[u8]>, RepeatedHeader>,
        cluster: impl FnOnce() -> Result<Option<Arc<str>>, String>,
    ) -> Result<Admitted, Refused> {
        let cluster = if signal == Signal::Metrics || !self.request.is_empty() {
            cluster()
        } else {
            Ok(None)
        };
        let mut admissions = Vec::new();
        if !self.request.is_empty() {
            let meta = RequestMeta {
                transport: self.transport,
                signal,
                peer,
                authorization,
                cluster: cluster.as_ref().ok().and_then(|c| c.as_deref()),
            };
            for m in &self.request {
                match m.admit(&meta) {
                    Ok(a) => admissions.push(a),
                    Err(r) => {
                        self.counters.reject(r.reason);
                        return Err(Refused::Middleware(r));
                    }
                }
            }
        }
        match cluster {
            Ok(cluster) => Ok(Admitted {
                signal,
                cluster,
                admissions,
            }),
            Err(msg) => {
                self.counters.reject("bad_cluster_id");
                Err(Refused::BadCluster(msg))
            }
        }
    }

    /// Count a body that could not be read, decompressed or decoded (`reason` is the
    /// refused-requests label).
    pub fn decode_failed(&self, signal: Signal, reason: &'static str) {
        self.counters.reject(reason);
        self.counters
            .signal(tel(signal))
            .failed
            .fetch_add(1, Relaxed);
    }

    /// Step 4a: every admission checks the clusters the payload's resources name.
    fn check_payload<'a>(
        &self,
        adm: &Admitted,
        resources: impl Iterator<Item = Option<&'a str>> + Clone,
    ) -> Result<(), Refusal> {
        for a in &adm.admissions {
            if let Err(r) = a.check_payload(adm.cluster.as_deref(), &mut resources.clone()) {
                self.counters.reject(r.reason);
                return Err(r);
            }
        }
        Ok(())
    }

    /// An exporter is behind: the refusal the client gets (counted).
    fn unavailable(&self, u: Unavailable) -> Refusal {
        self.counters.reject("exporter_unavailable");
        let mut r = Refusal::new(RefusalCode::Unavailable, "exporter_unavailable", u.message);
        r.retry_after_secs = Some(u.retry_after.as_secs().max(1));
        r
    }

    /// Wait for the exporters' deliveries of one export.
    async fn settle(&self, acks: Acks) -> Result<(), Refusal> {
        acks.wait().await.map_err(|u| self.unavailable(u))
    }

    /// Count what the screen dropped from a traces or logs export; the partial-success
    /// count and message (`None` when nothing was dropped).
    fn screened(
        &self,
        signal: Signal,
        screened: &screen::Screened,
        items: &str,
    ) -> Option<(i64, String)> {
        for (reason, n) in &screened.by_reason {
            self.counters.drop_items(tel(signal), reason, *n);
        }
        self.counters
            .signal(tel(signal))
            .refused
            .fetch_add(screened.dropped, Relaxed);
        let message = screened.message_of(items)?;
        Some((i64::try_from(screened.dropped).unwrap_or(i64::MAX), message))
    }

    /// Step 4 for metrics. `Err` is a payload refusal (nothing reached a pipeline) or an
    /// exporter that is behind ([`RefusalCode::Unavailable`]).
    pub async fn export_metrics(
        &self,
        adm: Admitted,
        req: ExportMetricsServiceRequest,
    ) -> Result<MetricsExport, Refusal> {
        self.export_metrics_from(adm, req, None).await
    }

    /// [`Self::export_metrics`] for a request its decoder issued as `origin` (see
    /// [`component::recycle::Origin`]): if neither the screen nor a stage changes it, it
    /// goes back to the thread with its origin when the pipeline ends.
    pub async fn export_metrics_from(
        &self,
        adm: Admitted,
        mut req: ExportMetricsServiceRequest,
        origin: Option<component::recycle::Origin>,
    ) -> Result<MetricsExport, Refusal> {
        let points = count_points(&req.resource_metrics);
        let scope = &*self.scope;
        let key = scope.key();
        let screened = screen::metrics(&mut req, adm.cluster.as_deref(), &self.limits, scope);
        self.check_payload(
            &adm,
            req.resource_metrics
                .iter()
                .map(|rm| key.and_then(|k| k.of(component::otlp::resource_attrs(rm)))),
        )?;
        for (reason, n) in &screened.by_reason {
            self.counters.drop_points(reason, *n);
        }
        // Clients without a request cluster (OTel SDKs, `ingero trace`) still get the
        // response metadata of the cluster their resource names.
        let response_cluster = adm.cluster.clone().or_else(|| payload_cluster(&req, scope));
        let ctx = BatchContext {
            cluster_id: adm.cluster,
            received_at: Timestamp::now(),
            tenant: adm.admissions.iter().find_map(|a| a.tenant()),
        };
        let m = &self.counters.metrics;
        let mut acks = Acks::default();
        let origin = origin.filter(|_| !screened.changed);
        let consumed =
            self.fanout
                .consume_metrics_from(req.resource_metrics, origin, &ctx, &mut acks);
        if let Err(r) = self.settle(acks).await {
            m.refused.fetch_add(points, Relaxed);
            return Err(r);
        }
        let result = match consumed {
            Ok(outcome) => {
                let rejected = (outcome.rejected_points + screened.dropped).min(points);
                m.accepted.fetch_add(points - rejected, Relaxed);
                m.refused.fetch_add(rejected, Relaxed);
                let mut msg = ExportMetricsServiceResponse::default();
                // A message with nothing rejected is OTLP's warning form of partial
                // success: stored, with something the sender should know (an exporter
                // that dropped an attribute it could not use).
                if rejected > 0 || outcome.message.is_some() {
                    let message = match (screened.message(), outcome.message) {
                        (Some(a), Some(b)) => format!("{a}; {b}"),
                        (a, b) => a.or(b).unwrap_or_default(),
                    };
                    msg.partial_success = Some(ExportMetricsPartialSuccess {
                        rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                        error_message: message,
                    });
                }
                Ok(msg)
            }
            Err(e) => {
                m.refused.fetch_add(points, Relaxed);
                Err(e)
            }
        };
        Ok(MetricsExport {
            result,
            response_cluster,
        })
    }

    /// Step 4 for traces: the screen (a resource whose cluster identity is refused is
    /// dropped with its spans, answered with partial success), payload check, then every
    /// traces pipeline.
    pub async fn export_traces(
        &self,
        adm: Admitted,
        mut req: ExportTraceServiceRequest,
    ) -> Result<ExportTraceServiceResponse, Refusal> {
        let screened = screen::traces(&mut req, &*self.scope);
        let key = self.scope.key();
        self.check_payload(
            &adm,
            req.resource_spans
                .iter()
                .map(|r| resource_cluster(key, r.resource.as_ref())),
        )?;
        let partial = self.screened(Signal::Traces, &screened, "span(s)");
        let n: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        if !(req.resource_spans.is_empty() && partial.is_some()) {
            let acks = self.fanout.consume_traces(&req);
            if let Err(r) = self.settle(acks).await {
                self.counters.traces.refused.fetch_add(n as u64, Relaxed);
                return Err(r);
            }
        }
        self.counters.traces.accepted.fetch_add(n as u64, Relaxed);
        Ok(ExportTraceServiceResponse {
            partial_success: partial.map(|(rejected_spans, error_message)| {
                ExportTracePartialSuccess {
                    rejected_spans,
                    error_message,
                }
            }),
        })
    }

    /// Step 4 for logs: as [`Self::export_traces`], with log records.
    pub async fn export_logs(
        &self,
        adm: Admitted,
        mut req: ExportLogsServiceRequest,
    ) -> Result<ExportLogsServiceResponse, Refusal> {
        let screened = screen::logs(&mut req, &*self.scope);
        let key = self.scope.key();
        self.check_payload(
            &adm,
            req.resource_logs
                .iter()
                .map(|r| resource_cluster(key, r.resource.as_ref())),
        )?;
        let partial = self.screened(Signal::Logs, &screened, "log record(s)");
        let n: usize = req
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        if !(req.resource_logs.is_empty() && partial.is_some()) {
            let acks = self.fanout.consume_logs(&req);
            if let Err(r) = self.settle(acks).await {
                self.counters.logs.refused.fetch_add(n as u64, Relaxed);
                return Err(r);
            }
        }
        self.counters.logs.accepted.fetch_add(n as u64, Relaxed);
        Ok(ExportLogsServiceResponse {
            partial_success: partial.map(|(rejected_log_records, error_message)| {
                ExportLogsPartialSuccess {
                    rejected_log_records,
                    error_message,
                }
            }),
        })
    }

    /// Step 5: the response middlewares' metadata for `cluster` (nothing without one).
    pub fn response_metadata(
        &self,
        cluster: Option<&str>,
        out: &mut dyn FnMut(&'static str, &HeaderValue),
    ) {
        if let Some(c) = cluster {
            for m in &self.response {
                m.response_metadata(self.transport, c, out);
            }
        }
    }
}

/// The first well-formed scope a resource of the batch names.
fn payload_cluster(
    req: &ExportMetricsServiceRequest,
    scope: &dyn RequestScope,
) -> Option<Arc<str>> {
    let key = scope.key()?;
    req.resource_metrics.iter().find_map(|rm| {
        key.of(component::otlp::resource_attrs(rm))
            .filter(|c| scope.validate_id(c).is_ok())
            .map(Arc::from)
    })
}

/// The scope a trace or log resource names (the screen has already settled it to one
/// attribute under the scope's key and dropped the resources it refused).
fn resource_cluster<'a>(key: Option<&ScopeKey>, r: Option<&'a Resource>) -> Option<&'a str> {
    key?.of(&r?.attributes)
}
