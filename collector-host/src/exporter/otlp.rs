//! `otlp` (gRPC) and `otlphttp` exporters: forward to another collector through a bounded
//! queue, retrying retryable failures with exponential backoff. A full queue drops the
//! new batch and counts it (`otelcol_exporter_enqueue_failed_*`); it never blocks a push.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use component::ResourceMetrics;
use component::otlp::{ExportMetricsServiceRequest, count_points};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::sync::{Mutex as AsyncMutex, mpsc};

use crate::config::model::{ClientTlsConfig, Compression, Encoding, OtlpExporterConfig};
use crate::pipeline::Exporter;
use crate::telemetry::{ExporterCounters, Signal};

/// One queued batch.
#[derive(Debug, Clone)]
pub enum Batch {
    Metrics(ExportMetricsServiceRequest),
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
}

impl Batch {
    fn signal(&self) -> Signal {
        match self {
            Batch::Metrics(_) => Signal::Metrics,
            Batch::Traces(_) => Signal::Traces,
            Batch::Logs(_) => Signal::Logs,
        }
    }

    fn items(&self) -> u64 {
        match self {
            Batch::Metrics(m) => count_points(&m.resource_metrics),
            Batch::Traces(t) => t
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len() as u64)
                .sum(),
            Batch::Logs(l) => l
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .map(|s| s.log_records.len() as u64)
                .sum(),
        }
    }
}

/// Outcome of one send attempt.
#[derive(Debug)]
pub enum SendError {
    /// Worth retrying, optionally after the server's requested delay.
    Retryable(String, Option<Duration>),
    Permanent(String),
}

/// Transport: OTLP/HTTP or OTLP/gRPC. One value per exporter, so variant size is moot.
#[allow(clippy::large_enum_variant)]
enum Transport {
    Http {
        client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
        base: String,
        metrics_url: String,
    },
    Grpc(Box<GrpcClients>),
}

struct GrpcClients {
    metrics: AsyncMutex<MetricsServiceClient<tonic::transport::Channel>>,
    traces: AsyncMutex<TraceServiceClient<tonic::transport::Channel>>,
    logs: AsyncMutex<LogsServiceClient<tonic::transport::Channel>>,
}

/// The TCP connector under TLS: any scheme (TLS decides), nodelay, the exporter's timeout.
fn tcp(cfg: &OtlpExporterConfig) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(cfg.timeout));
    http
}

/// `tls.server_name_override` as the name the server's certificate is checked against.
fn server_name(
    t: &ClientTlsConfig,
) -> Result<Option<rustls::pki_types::ServerName<'static>>, String> {
    t.server_name_override
        .as_ref()
        .map(|n| {
            rustls::pki_types::ServerName::try_from(n.clone())
                .map_err(|e| format!("tls.server_name_override: {n:?}: {e}"))
        })
        .transpose()
}

/// The rustls client config of an exporter's `tls`: TLS 1.2 or 1.3, the server verified
/// against `ca_file` (else the system roots), a client certificate when `cert_file` and
/// `key_file` are set. Errors name the key (`tls.ca_file: ...`).
pub fn client_tls_config(t: &ClientTlsConfig) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |key: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("tls.{key}: cannot read {path}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(ca) => {
            let pem = read("ca_file", ca)?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("tls.ca_file: {ca}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("tls.ca_file: {ca}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("tls.ca_file: {ca}: no certificate found"));
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // Unparseable system certificates are skipped, as other TLS stacks do.
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("tls: {e}"))?
    .with_root_certificates(roots);
    match (&t.cert_file, &t.key_file) {
        (Some(cert), Some(key)) => {
            let pem = read("cert_file", cert)?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tls.cert_file: {cert}: {e}"))?;
            if chain.is_empty() {
                return Err(format!("tls.cert_file: {cert}: no certificate found"));
            }
            let pem = read("key_file", key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| format!("tls.key_file: {key}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("tls.cert_file/key_file: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// A forwarding exporter (both `otlp` and `otlphttp`).
pub struct OtlpExporter {
    pub id: String,
    tx: mpsc::Sender<Batch>,
    counters: Arc<ExporterCounters>,
    worker: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    direct: bool,
}

impl std::fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpExporter")
            .field("id", &self.id)
            .finish()
    }
}

impl OtlpExporter {
    /// Start an exporter; `grpc` selects the transport. Must run inside a tokio runtime.
    pub fn start(
        id: &str,
        cfg: OtlpExporterConfig,
        grpc: bool,
        counters: Arc<ExporterCounters>,
    ) -> Result<Self, String> {
        let transport = if grpc {
            let ep = if cfg.endpoint.contains("://") {
                cfg.endpoint.clone()
            } else if cfg.tls.insecure {
                format!("http://{}", cfg.endpoint)
            } else {
                format!("https://{}", cfg.endpoint)
            };
            let endpoint = tonic::transport::Endpoint::from_shared(ep.clone())
                .map_err(|e| format!("exporters.{id}.endpoint: {e}"))?
                .timeout(cfg.timeout)
                .connect_timeout(cfg.timeout);
            let channel = if ep.starts_with("https://") {
                let tls = client_tls_config(&cfg.tls).map_err(|e| format!("exporters.{id}.{e}"))?;
                let b = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_only();
                let b = match server_name(&cfg.tls).map_err(|e| format!("exporters.{id}.{e}"))? {
                    Some(n) => {
                        b.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(n))
                    }
                    None => b,
                };
                endpoint.connect_with_connector_lazy(b.enable_http2().wrap_connector(tcp(&cfg)))
            } else if cfg.tls.configured() {
                return Err(format!(
                    "exporters.{id}.tls: files are set but the endpoint {ep:?} is plaintext"
                ));
            } else {
                endpoint.connect_lazy()
            };
            let comp = cfg.compression == Compression::Gzip;
            let mut m = MetricsServiceClient::new(channel.clone());
            let mut t = TraceServiceClient::new(channel.clone());
            let mut l = LogsServiceClient::new(channel);
            if comp {
                m = m.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                t = t.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                l = l.send_compressed(tonic::codec::CompressionEncoding::Gzip);
            }
            Transport::Grpc(Box::new(GrpcClients {
                metrics: AsyncMutex::new(m),
                traces: AsyncMutex::new(t),
                logs: AsyncMutex::new(l),
            }))
        } else {
            let base = if cfg.endpoint.contains("://") {
                cfg.endpoint.trim_end_matches('/').to_string()
            } else if cfg.tls.configured() {
                format!("https://{}", cfg.endpoint.trim_end_matches('/'))
            } else {
                format!("http://{}", cfg.endpoint.trim_end_matches('/'))
            };
            let metrics_url = cfg
                .metrics_endpoint
                .clone()
                .unwrap_or_else(|| format!("{base}/v1/metrics"));
            let https = base.starts_with("https://") || metrics_url.starts_with("https://");
            let tls = if https {
                client_tls_config(&cfg.tls).map_err(|e| format!("exporters.{id}.{e}"))?
            } else if cfg.tls.configured() {
                return Err(format!(
                    "exporters.{id}.tls: files are set but the endpoint {base:?} is plaintext"
                ));
            } else {
                // Never used: every URL is http://.
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("exporters.{id}.tls: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
            };
            let b = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http();
            let b = match server_name(&cfg.tls).map_err(|e| format!("exporters.{id}.{e}"))? {
                Some(n) => {
                    b.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(n))
                }
                None => b,
            };
            let connector = b.enable_http1().enable_http2().wrap_connector(tcp(&cfg));
            Transport::Http {
                client: Client::builder(TokioExecutor::new()).build(connector),
                base,
                metrics_url,
            }
        };
        let capacity = if cfg.sending_queue.enabled {
            cfg.sending_queue.queue_size
        } else {
            1
        };
        counters.queue_capacity.store(capacity as u64, Relaxed);
        let (tx, rx) = mpsc::channel(capacity);
        let worker = tokio::spawn(run_worker(rx, transport, cfg.clone(), counters.clone()));
        Ok(OtlpExporter {
            id: id.to_string(),
            tx,
            counters,
            worker: parking_lot::Mutex::new(Some(worker)),
            direct: !cfg.sending_queue.enabled,
        })
    }

    fn enqueue(&self, b: Batch) {
        let sig = b.signal();
        let items = b.items();
        match self.tx.try_send(b) {
            Ok(()) => {
                self.counters.queue_size.fetch_add(1, Relaxed);
            }
            Err(_) => {
                self.counters.enqueue_failed[ExporterCounters::idx(sig)].fetch_add(items, Relaxed);
                if !self.direct {
                    tracing::warn!(exporter = %self.id, items, "sending queue full; batch dropped");
                }
            }
        }
    }

    /// Stop accepting, and let the worker flush what is queued for at most `drain`.
    pub async fn drain(&self, drain: Duration) {
        let handle = self.worker.lock().take();
        if let Some(h) = handle {
            // Closing happens when the last sender is dropped; ask the worker to stop
            // after the queue empties by sending nothing more and waiting.
            let _ = tokio::time::timeout(drain, async {
                while self.counters.queue_size.load(Relaxed) > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            h.abort();
        }
    }
}

impl Exporter for OtlpExporter {
    fn consume_metrics(&self, data: &[ResourceMetrics]) {
        self.enqueue(Batch::Metrics(ExportMetricsServiceRequest {
            resource_metrics: data.to_vec(),
        }));
    }

    fn consume_traces(&self, data: &ExportTraceServiceRequest) {
        self.enqueue(Batch::Traces(data.clone()));
    }

    fn consume_logs(&self, data: &ExportLogsServiceRequest) {
        self.enqueue(Batch::Logs(data.clone()));
    }
}

async fn run_worker(
    mut rx: mpsc::Receiver<Batch>,
    transport: Transport,
    cfg: OtlpExporterConfig,
    counters: Arc<ExporterCounters>,
) {
    while let Some(batch) = rx.recv().await {
        let idx = ExporterCounters::idx(batch.signal());
        let items = batch.items();
        let started = Instant::now();
        let mut backoff = cfg.retry_on_failure.initial_interval;
        loop {
            match send(&transport, &cfg, &batch).await {
                Ok(()) => {
                    counters.sent[idx].fetch_add(items, Relaxed);
                    break;
                }
                Err(SendError::Permanent(msg)) => {
                    counters.send_failed[idx].fetch_add(items, Relaxed);
                    tracing::warn!(error = %msg, items, "export failed permanently; batch dropped");
                    break;
                }
                Err(SendError::Retryable(msg, after)) => {
                    let r = &cfg.retry_on_failure;
                    let elapsed = started.elapsed();
                    if !r.enabled
                        || (!r.max_elapsed_time.is_zero() && elapsed >= r.max_elapsed_time)
                    {
                        counters.send_failed[idx].fetch_add(items, Relaxed);
                        tracing::warn!(error = %msg, items, "export failed; retries exhausted, batch dropped");
                        break;
                    }
                    let wait = after
                        .unwrap_or(backoff)
                        .min(r.max_interval.max(Duration::from_millis(1)));
                    tracing::debug!(error = %msg, ?wait, "export failed; retrying");
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(r.max_interval);
                }
            }
        }
        counters.queue_size.fetch_sub(1, Relaxed);
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

async fn send(t: &Transport, cfg: &OtlpExporterConfig, batch: &Batch) -> Result<(), SendError> {
    match t {
        Transport::Http {
            client,
            base,
            metrics_url,
        } => {
            let (url, body, ct) = match (batch, cfg.encoding) {
                (Batch::Metrics(m), Encoding::Proto) => (
                    metrics_url.clone(),
                    m.encode_to_vec(),
                    "application/x-protobuf",
                ),
                (Batch::Metrics(m), Encoding::Json) => (
                    metrics_url.clone(),
                    serde_json::to_vec(m).unwrap_or_default(),
                    "application/json",
                ),
                (Batch::Traces(x), Encoding::Proto) => (
                    format!("{base}/v1/traces"),
                    x.encode_to_vec(),
                    "application/x-protobuf",
                ),
                (Batch::Traces(x), Encoding::Json) => (
                    format!("{base}/v1/traces"),
                    serde_json::to_vec(x).unwrap_or_default(),
                    "application/json",
                ),
                (Batch::Logs(x), Encoding::Proto) => (
                    format!("{base}/v1/logs"),
                    x.encode_to_vec(),
                    "application/x-protobuf",
                ),
                (Batch::Logs(x), Encoding::Json) => (
                    format!("{base}/v1/logs"),
                    serde_json::to_vec(x).unwrap_or_default(),
                    "application/json",
                ),
            };
            let mut req = http::Request::post(&url).header(http::header::CONTENT_TYPE, ct);
            let body = if cfg.compression == Compression::Gzip {
                req = req.header(http::header::CONTENT_ENCODING, "gzip");
                gzip(&body)
            } else {
                body
            };
            for (k, v) in &cfg.headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let req = req
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| SendError::Permanent(format!("building request: {e}")))?;
            let resp = tokio::time::timeout(cfg.timeout, client.request(req))
                .await
                .map_err(|_| SendError::Retryable("timeout".into(), None))?
                .map_err(|e| SendError::Retryable(e.to_string(), None))?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let _ = resp.into_body().collect().await;
            match status {
                200..=299 => Ok(()),
                429 | 502 | 503 | 504 => {
                    Err(SendError::Retryable(format!("HTTP {status}"), retry_after))
                }
                _ => Err(SendError::Permanent(format!("HTTP {status}"))),
            }
        }
        Transport::Grpc(c) => {
            let r = match batch {
                Batch::Metrics(m) => c
                    .metrics
                    .lock()
                    .await
                    .export(with_headers(m.clone(), cfg))
                    .await
                    .map(|_| ()),
                Batch::Traces(x) => c
                    .traces
                    .lock()
                    .await
                    .export(with_headers(x.clone(), cfg))
                    .await
                    .map(|_| ()),
                Batch::Logs(x) => c
                    .logs
                    .lock()
                    .await
                    .export(with_headers(x.clone(), cfg))
                    .await
                    .map(|_| ()),
            };
            r.map_err(|s| {
                use tonic::Code::*;
                match s.code() {
                    Cancelled | DeadlineExceeded | Aborted | OutOfRange | Unavailable
                    | DataLoss | ResourceExhausted => SendError::Retryable(s.to_string(), None),
                    _ => SendError::Permanent(s.to_string()),
                }
            })
        }
    }
}

fn with_headers<T>(msg: T, cfg: &OtlpExporterConfig) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    for (k, v) in &cfg.headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()),
            tonic::metadata::MetadataValue::try_from(v.as_str()),
        ) {
            req.metadata_mut().insert(k, v);
        }
    }
    req
}
