//! OTLP/gRPC receiver: the `MetricsService`, `TraceService` and `LogsService` of
//! opentelemetry-proto, with the threshold in response metadata
//! (`ingero-threshold`, `ingero-quorum-met`).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use component::otlp::{ExportMetricsServiceRequest, ExportMetricsServiceResponse, count_points};
use component::wire::{http as wire_http, resource};
use component::{BatchContext, Timestamp};
use ingero_extension::ThresholdStore;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};

use crate::auth::tokens::TokenEntry;
use crate::auth::{Action, ListenerAuth, gate};
use crate::config::model::GrpcServerConfig;
use crate::pipeline::Fanout;
use crate::telemetry::ReceiverCounters;

/// The gRPC side of the `otlp` receiver.
#[derive(Clone)]
pub struct GrpcReceiver {
    pub fanout: Fanout,
    pub thresholds: Option<Arc<ThresholdStore>>,
    pub counters: Arc<ReceiverCounters>,
    /// Bearer-token gate (`auth:`); `None` = no authentication.
    pub auth: Option<ListenerAuth>,
}

impl std::fmt::Debug for GrpcReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcReceiver").finish()
    }
}

/// The cluster named in request metadata: `cluster_id`, else `ingero.cluster.id`.
fn metadata_cluster(md: &MetadataMap) -> Result<Option<Arc<str>>, Status> {
    for key in [
        wire_http::PARAM_CLUSTER_ID,
        wire_http::REQUEST_HEADER_CLUSTER_ID,
    ] {
        if let Some(v) = md.get(key) {
            let v = ingero_extension::header_cluster_id(v.as_bytes())
                .map_err(|e| Status::invalid_argument(format!("{key} metadata: {e}")))?;
            return Ok(Some(Arc::from(v)));
        }
    }
    Ok(None)
}

impl GrpcReceiver {
    /// The metadata cluster of a traces/logs export, read only when authentication is on
    /// (it is then checked against the token's scope).
    fn metadata_cluster_checked(&self, md: &MetadataMap) -> Result<Option<Arc<str>>, Status> {
        if self.auth.is_none() {
            return Ok(None);
        }
        metadata_cluster(md).inspect_err(|_| self.counters.reject("bad_cluster_id"))
    }

    /// Token, rate limit and metadata cluster; `Ok(None)` when authentication is off.
    fn authenticate<T>(
        &self,
        request: &Request<T>,
        action: Action,
        cluster: Option<&str>,
    ) -> Result<Option<Arc<TokenEntry>>, Status> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let md = request.metadata();
        let mut values = md.get_all("authorization").iter();
        let first = values.next().map(|v| v.as_bytes());
        let header = if values.next().is_some() {
            Err(gate::RepeatedHeader)
        } else {
            Ok(first)
        };
        auth.check(header, request.remote_addr(), action, cluster)
            .map(Some)
            .map_err(|d| {
                self.counters.reject(d.outcome().as_str());
                gate::grpc_status(d)
            })
    }

    /// Check the clusters a decoded payload names; records the decision.
    fn payload_allowed<'a>(
        &self,
        entry: Option<&TokenEntry>,
        peer: Option<std::net::SocketAddr>,
        action: Action,
        cluster: Option<&str>,
        resources: impl Iterator<Item = Option<&'a str>>,
    ) -> Result<(), Status> {
        let (Some(e), Some(auth)) = (entry, &self.auth) else {
            return Ok(());
        };
        match auth.check_payload(e, peer, action, cluster, resources) {
            Ok(()) => {
                auth.allowed(e, peer, action, cluster);
                Ok(())
            }
            Err(d) => {
                self.counters.reject(d.outcome().as_str());
                Err(gate::grpc_status(d))
            }
        }
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let started = Instant::now();
        let cluster = match metadata_cluster(request.metadata()) {
            Ok(c) => c,
            Err(s) => {
                self.counters.reject("bad_cluster_id");
                return Err(s);
            }
        };
        let entry = self.authenticate(&request, Action::PushMetrics, cluster.as_deref())?;
        let peer = request.remote_addr();
        let req = request.into_inner();
        self.payload_allowed(
            entry.as_deref(),
            peer,
            Action::PushMetrics,
            cluster.as_deref(),
            req.resource_metrics.iter().map(|rm| {
                component::otlp::get_str(component::otlp::resource_attrs(rm), resource::CLUSTER_ID)
            }),
        )?;
        let points = count_points(&req.resource_metrics);
        let header_cluster = cluster.clone().or_else(|| {
            req.resource_metrics.iter().find_map(|rm| {
                component::otlp::get_str(component::otlp::resource_attrs(rm), resource::CLUSTER_ID)
                    .filter(|c| ingero_extension::validate_cluster_id(c).is_ok())
                    .map(Arc::from)
            })
        });
        let ctx = BatchContext {
            cluster_id: cluster,
            received_at: Timestamp::now(),
        };
        let outcome = match self.fanout.consume_metrics(req.resource_metrics, &ctx) {
            Ok(o) => o,
            Err(e) => {
                self.counters.metrics.refused.fetch_add(points, Relaxed);
                return Err(Status::internal(e.to_string()));
            }
        };
        let rejected = outcome.rejected_points.min(points);
        self.counters
            .metrics
            .accepted
            .fetch_add(points - rejected, Relaxed);
        self.counters.metrics.refused.fetch_add(rejected, Relaxed);
        let mut msg = ExportMetricsServiceResponse::default();
        if rejected > 0 {
            msg.partial_success = Some(ExportMetricsPartialSuccess {
                rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                error_message: outcome.message.unwrap_or_default(),
            });
        }
        let mut resp = Response::new(msg);
        if let (Some(store), Some(c)) = (&self.thresholds, header_cluster.as_deref())
            && let Some(h) = store.push_headers(c)
        {
            for (key, value) in h.grpc_pairs() {
                if let Ok(v) = MetadataValue::try_from(value.as_bytes()) {
                    resp.metadata_mut().insert(key, v);
                }
            }
        }
        self.counters.latency.observe(started.elapsed());
        Ok(resp)
    }
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let cluster = self.metadata_cluster_checked(request.metadata())?;
        let entry = self.authenticate(&request, Action::PushTraces, cluster.as_deref())?;
        let peer = request.remote_addr();
        let req = request.into_inner();
        self.payload_allowed(
            entry.as_deref(),
            peer,
            Action::PushTraces,
            cluster.as_deref(),
            req.resource_spans
                .iter()
                .map(|r| super::http::resource_cluster(r.resource.as_ref())),
        )?;
        let n: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.fanout.consume_traces(&req);
        self.counters.traces.accepted.fetch_add(n as u64, Relaxed);
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let cluster = self.metadata_cluster_checked(request.metadata())?;
        let entry = self.authenticate(&request, Action::PushLogs, cluster.as_deref())?;
        let peer = request.remote_addr();
        let req = request.into_inner();
        self.payload_allowed(
            entry.as_deref(),
            peer,
            Action::PushLogs,
            cluster.as_deref(),
            req.resource_logs
                .iter()
                .map(|r| super::http::resource_cluster(r.resource.as_ref())),
        )?;
        let n: usize = req
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        self.fanout.consume_logs(&req);
        self.counters.logs.accepted.fetch_add(n as u64, Relaxed);
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

/// Serve the three OTLP services (over TLS when `tls` is set) until `shutdown`, then
/// drain for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    cfg: GrpcServerConfig,
    receiver: GrpcReceiver,
    shutdown: watch::Receiver<bool>,
    drain: Duration,
    tls: Option<Arc<crate::tls::ListenerTls>>,
    stats: Arc<crate::server::ListenerStats>,
) -> Result<(), tonic::transport::Error> {
    let max = usize::try_from(cfg.max_recv_msg_size_mib.saturating_mul(1024 * 1024))
        .unwrap_or(usize::MAX);
    let metrics = MetricsServiceServer::new(receiver.clone())
        .max_decoding_message_size(max)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Deflate)
        .send_compressed(CompressionEncoding::Gzip);
    let traces = TraceServiceServer::new(receiver.clone())
        .max_decoding_message_size(max)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Deflate);
    let shed = super::grpc_shed::ShedLayer {
        permits: (cfg.max_concurrent_requests > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_requests))),
        retry_after: cfg.retry_after,
        counters: receiver.counters.clone(),
    };
    let counters = receiver.counters.clone();
    let logs = LogsServiceServer::new(receiver)
        .max_decoding_message_size(max)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Deflate);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(cfg.max_concurrent_streams)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .layer(shed)
        .add_service(metrics)
        .add_service(traces)
        .add_service(logs);
    use super::grpc_conn_cap::cap;
    let max_conns = cfg.max_connections;
    let lifecycle = cfg.lifecycle();
    match tls {
        None => {
            let incoming = crate::conn_guard::grpc_plain_incoming(
                listener,
                lifecycle,
                stats.clone(),
                shutdown.clone(),
            );
            let incoming = cap(incoming, max_conns, counters, stats);
            serve_until(router, incoming, shutdown, drain).await
        }
        Some(tls) => {
            let incoming = crate::tls::grpc_incoming(
                listener,
                tls,
                lifecycle,
                stats.clone(),
                shutdown.clone(),
            );
            let incoming = cap(incoming, max_conns, counters, stats);
            serve_until(router, incoming, shutdown, drain).await
        }
    }
}

/// Run `router` on `incoming` until `shutdown`, then drain for at most `drain`.
async fn serve_until<I, IO>(
    router: tonic::transport::server::Router<
        tower::layer::util::Stack<super::grpc_shed::ShedLayer, tower::layer::util::Identity>,
    >,
    incoming: I,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) -> Result<(), tonic::transport::Error>
where
    I: tokio_stream::Stream<Item = Result<IO, std::io::Error>>,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
{
    let (drain_tx, mut drain_rx) = watch::channel(false);
    let server = router.serve_with_incoming_shutdown(incoming, async move {
        let _ = shutdown.wait_for(|v| *v).await;
        let _ = drain_tx.send(true);
    });
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r,
        _ = async {
            let _ = drain_rx.wait_for(|v| *v).await;
            tokio::time::sleep(drain).await;
        } => {
            tracing::warn!("gRPC drain timed out; closing remaining streams");
            Ok(())
        }
    }
}
