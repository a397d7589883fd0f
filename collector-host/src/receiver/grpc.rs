//! OTLP/gRPC receiver: the `MetricsService`, `TraceService` and `LogsService` of
//! opentelemetry-proto. An adapter over [`crate::ingest`]: request metadata in, status or
//! response (with the response middlewares' metadata, e.g. `ingero-threshold`,
//! `ingero-quorum-met`) out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use component::middleware::{Refusal, RefusalCode, RepeatedHeader, Signal};
use component::otlp::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use component::scope::{RequestScope, ScopeSource};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
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

use crate::config::model::GrpcServerConfig;
use crate::ingest::{Admitted, Ingest, Refused};

/// The gRPC side of the `otlp` receiver.
#[derive(Clone)]
pub struct GrpcReceiver {
    pub ingest: Arc<Ingest>,
}

impl std::fmt::Debug for GrpcReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcReceiver").finish()
    }
}

/// The scope named in request metadata, read by the binary's request scope (Fleet:
/// `cluster_id`, else `ingero.cluster.id`).
fn metadata_cluster(
    scope: &dyn RequestScope,
    md: &MetadataMap,
) -> Result<Option<Arc<str>>, String> {
    let get = |key: &str| md.get(key).map(|v| v.as_bytes());
    scope
        .request_scope(ScopeSource::Grpc(&get))
        .map(|c| c.map(|c| Arc::from(c.as_ref())))
}

/// The status of a middleware's refusal (`RESOURCE_EXHAUSTED` carries `retry-after`).
/// The client's address: from the guarded connection's info (every listener of the host),
/// else tonic's own.
fn peer_addr<T>(request: &Request<T>) -> Option<std::net::SocketAddr> {
    use crate::conn_guard::GuardedInfo;
    use tonic::transport::server::TcpConnectInfo;
    request
        .extensions()
        .get::<GuardedInfo<TcpConnectInfo>>()
        .and_then(|i| i.inner.remote_addr())
        .or_else(|| request.remote_addr())
}

fn refusal_status(r: &Refusal) -> Status {
    let msg = r.message.to_string();
    let mut s = match r.code {
        RefusalCode::Unauthenticated => Status::unauthenticated(msg),
        RefusalCode::PermissionDenied => Status::permission_denied(msg),
        RefusalCode::ResourceExhausted => Status::resource_exhausted(msg),
        RefusalCode::InvalidArgument => Status::invalid_argument(msg),
        RefusalCode::Unavailable => match r.retry_after_secs {
            Some(secs) => Status::with_details(
                tonic::Code::Unavailable,
                msg.clone(),
                retry_info_details(tonic::Code::Unavailable, &msg, secs).into(),
            ),
            None => Status::unavailable(msg),
        },
    };
    if let Some(secs) = r.retry_after_secs {
        s.metadata_mut()
            .insert("retry-after", MetadataValue::from(secs));
    }
    s
}

/// `google.rpc.Status` with one `google.rpc.RetryInfo` detail: the retry delay OTLP
/// exporters read from an `UNAVAILABLE` answer (otelcol's `exporterhelper` honours it).
fn retry_info_details(code: tonic::Code, message: &str, secs: u64) -> Vec<u8> {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct Duration {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<Duration>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }
    let info = RetryInfo {
        retry_delay: Some(Duration {
            seconds: i64::try_from(secs).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    };
    RpcStatus {
        code: code as i32,
        message: message.to_string(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}

impl GrpcReceiver {
    /// The seam's pipeline check and admission, from the request's metadata.
    #[allow(clippy::result_large_err)]
    fn admit<T>(&self, request: &Request<T>, signal: Signal) -> Result<Admitted, Status> {
        let refused = |r| match r {
            Refused::NoPipeline(s) => Status::unimplemented(Refused::no_pipeline_message(s)),
            Refused::BadCluster(msg) => Status::invalid_argument(msg),
            Refused::Middleware(r) => refusal_status(&r),
        };
        self.ingest.route(signal).map_err(refused)?;
        let md = request.metadata();
        let mut values = md.get_all("authorization").iter();
        let first = values.next().map(|v| v.as_bytes());
        let authorization = if values.next().is_some() {
            Err(RepeatedHeader)
        } else {
            Ok(first)
        };
        self.ingest
            .admit(signal, peer_addr(request), authorization, || {
                metadata_cluster(&*self.ingest.scope, md)
            })
            .map_err(refused)
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let started = Instant::now();
        let adm = self.admit(&request, Signal::Metrics)?;
        let export = self
            .ingest
            .export_metrics(adm, request.into_inner())
            .await
            .map_err(|r| refusal_status(&r))?;
        let msg = export.result.map_err(|e| Status::internal(e.to_string()))?;
        let mut resp = Response::new(msg);
        self.ingest
            .response_metadata(export.response_cluster.as_deref(), &mut |key, value| {
                if let Ok(v) = MetadataValue::try_from(value.as_bytes()) {
                    resp.metadata_mut().insert(key, v);
                }
            });
        self.ingest.counters.latency.observe(started.elapsed());
        Ok(resp)
    }
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let adm = self.admit(&request, Signal::Traces)?;
        self.ingest
            .export_traces(adm, request.into_inner())
            .await
            .map(Response::new)
            .map_err(|r| refusal_status(&r))
    }
}

#[tonic::async_trait]
impl LogsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let adm = self.admit(&request, Signal::Logs)?;
        self.ingest
            .export_logs(adm, request.into_inner())
            .await
            .map(Response::new)
            .map_err(|r| refusal_status(&r))
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
        counters: receiver.ingest.counters.clone(),
    };
    let counters = receiver.ingest.counters.clone();
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
    let lifecycle = cfg.lifecycle();
    let table = crate::conn_guard::ConnTable::new(
        cfg.max_connections,
        lifecycle.max_connections_per_client,
        Some(counters),
    );
    match tls {
        None => {
            let incoming = crate::conn_guard::grpc_plain_incoming(
                listener,
                lifecycle,
                table,
                stats.clone(),
                shutdown.clone(),
            );
            let incoming = cap(incoming, stats);
            serve_until(router, incoming, shutdown, drain).await
        }
        Some(tls) => {
            let incoming = crate::tls::grpc_incoming(
                listener,
                tls,
                lifecycle,
                table,
                stats.clone(),
                shutdown.clone(),
            );
            let incoming = cap(incoming, stats);
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
