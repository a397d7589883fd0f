//! Detection-edge traces (spec 1.8): the span `ingero.detection.straggler`, opened on the
//! healthy->straggler edge and ended on the recovery edge, exported over OTLP/HTTP
//! (protobuf, no compression) to `<otlp.endpoint>/v1/traces`.
//!
//! As an OpenTelemetry SDK does, a span is exported once, when it ends: an episode still
//! open is not on the wire (its events and socket messages are). The export runs off the
//! tick on its own task behind a small queue ([`QUEUE`]); a span that finds the queue full
//! is dropped and counted, never waited for. The span carries the same `ingero.event.id`
//! as the straggler event of its rising edge and, when the episode's cause is known by its
//! end, `ingero.causal_chain_id` and `ingero.causal_chains` (the newest chains).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use component::Timestamp;
use http_body_util::Full;
use ingero_agent_core::payload::{EpisodeCause, Identity, kv_str};
use ingero_wire::{attr, resource};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use tokio::sync::mpsc;

use crate::fleet::transport::HttpTransport;
use crate::fleet::url::base_uri;

/// Spans waiting for export; one more is dropped and counted.
pub const QUEUE: usize = 64;
/// The OTLP/HTTP traces path.
pub const TRACES_PATH: &str = "/v1/traces";
/// Span names.
pub const STRAGGLER_SPAN: &str = "ingero.detection.straggler";
/// Scope of the spans.
pub const SCOPE_NAME: &str = "ingero.detection";
/// Schema URL of the resource (semantic conventions 1.26.0).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.26.0";
/// Largest response body read.
const BODY_CAP: usize = 64 * 1024;

/// The traces URL: a bare `host:port` gets `https` (`http` when `insecure`); the path gets
/// `/v1/traces` unless it already ends with it.
pub fn traces_url(endpoint: &str, insecure: bool) -> Result<http::Uri, String> {
    let b = base_uri(endpoint, insecure)?;
    let path = b.path.trim_end_matches('/');
    let path = if path.ends_with(TRACES_PATH) {
        path.to_string()
    } else {
        format!("{path}{TRACES_PATH}")
    };
    let s = format!("{}://{}{}", b.scheme, b.authority, path);
    s.parse::<http::Uri>()
        .map_err(|e| format!("invalid URL {s:?}: {e}"))
}

/// Export counters, for the agent's self-metrics.
#[derive(Debug, Default)]
pub struct SpanStats {
    pub exported: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// Sends ended spans from a task of its own.
#[derive(Debug, Clone)]
pub struct SpanExporter {
    tx: mpsc::Sender<Span>,
    stats: Arc<SpanStats>,
}

impl SpanExporter {
    /// Start the export task (inside a Tokio runtime). `resource`: see [`resource`].
    pub fn start(transport: Arc<HttpTransport>, url: http::Uri, resource: Vec<KeyValue>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Span>(QUEUE);
        let stats = Arc::new(SpanStats::default());
        let st = stats.clone();
        tokio::spawn(async move {
            while let Some(span) = rx.recv().await {
                let body = request(resource.clone(), vec![span]).encode_to_vec();
                let req = http::Request::post(url.clone())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(Full::new(Bytes::from(body)));
                let req = match req {
                    Ok(r) => r,
                    Err(e) => {
                        st.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, "span request not built");
                        continue;
                    }
                };
                match transport.send(req, BODY_CAP).await {
                    Ok(r) if r.status.is_success() => {
                        st.exported.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => {
                        st.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(status = r.status.as_u16(), "span export rejected");
                    }
                    Err(e) => {
                        st.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, "span export failed");
                    }
                }
            }
        });
        SpanExporter { tx, stats }
    }

    /// Queue an ended span; a full queue drops it (counted).
    pub fn export(&self, span: Span) {
        if self.tx.try_send(span).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> &Arc<SpanStats> {
        &self.stats
    }
}

/// The span resource: `service.name`, `service.version`, `k8s.node.name`, `ingero.node.id`,
/// `ingero.cluster.id`.
pub fn resource(id: &Identity) -> Vec<KeyValue> {
    vec![
        kv_str("service.name", "ingero"),
        kv_str("service.version", env!("CARGO_PKG_VERSION")),
        kv_str("k8s.node.name", &id.node_id),
        kv_str(resource::NODE_ID, &id.node_id),
        kv_str(resource::CLUSTER_ID, &id.cluster_id),
    ]
}

/// One request holding `spans` under one resource and scope.
pub fn request(resource: Vec<KeyValue>, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: SCHEMA_URL.into(),
        }],
    }
}

/// A detection span between its edges.
#[derive(Debug, Clone)]
pub struct OpenSpan {
    name: &'static str,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    start: Timestamp,
    attrs: Vec<KeyValue>,
    /// The newest cause seen while open.
    cause: Option<EpisodeCause>,
}

impl OpenSpan {
    /// Open the straggler span on the rising edge whose event carried `event_id`.
    pub fn straggler(
        id: &Identity,
        gpu_model: Option<&str>,
        event_id: &str,
        now: Timestamp,
    ) -> Self {
        let attrs = vec![
            kv_str("ingero.cgroup_path_hash", &id.cgroup_path_hash),
            kv_str("ingero.workload_type", &id.workload_type),
            kv_str("ingero.gpu_model", gpu_model.unwrap_or("")),
            kv_str(resource::CLUSTER_ID, &id.cluster_id),
            kv_str(attr::EVENT_ID, event_id),
        ];
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        while trace_id == [0; 16] {
            rand::fill(&mut trace_id);
        }
        while span_id == [0; 8] {
            rand::fill(&mut span_id);
        }
        OpenSpan {
            name: STRAGGLER_SPAN,
            trace_id,
            span_id,
            start: now,
            attrs,
            cause: None,
        }
    }

    /// Keep the newest cause known (a `None` keeps the one before).
    pub fn note_cause(&mut self, cause: Option<EpisodeCause>) {
        if cause.is_some() {
            self.cause = cause;
        }
    }

    /// End the span at `now`: the `outcome` event (`status=resolved`) and the chains.
    pub fn end(mut self, now: Timestamp) -> Span {
        if let Some(c) = &self.cause {
            self.attrs.push(kv_str(attr::CAUSAL_CHAIN_ID, &c.chain_id));
            self.attrs.push(kv_str(attr::CAUSAL_CHAINS, &c.chains_json));
        }
        let end = now.as_nanos().max(self.start.as_nanos());
        Span {
            trace_id: self.trace_id.to_vec(),
            span_id: self.span_id.to_vec(),
            name: self.name.into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: self.start.as_nanos(),
            end_time_unix_nano: end,
            attributes: self.attrs,
            events: vec![Event {
                time_unix_nano: end,
                name: "outcome".into(),
                attributes: vec![kv_str("status", "resolved")],
                dropped_attributes_count: 0,
            }],
            status: Some(Status::default()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_urls_get_the_sdk_path() {
        let u = |e, i| traces_url(e, i).unwrap().to_string();
        assert_eq!(
            u("collector:4318", false),
            "https://collector:4318/v1/traces"
        );
        assert_eq!(u("collector:4318", true), "http://collector:4318/v1/traces");
        assert_eq!(u("http://c:4318", false), "http://c:4318/v1/traces");
        assert_eq!(u("https://c:4318/", true), "https://c:4318/v1/traces");
        assert_eq!(
            u("http://c:4318/otlp", false),
            "http://c:4318/otlp/v1/traces"
        );
        assert_eq!(
            u("http://c:4318/v1/traces", false),
            "http://c:4318/v1/traces"
        );
        assert!(traces_url("", true).is_err());
        assert!(traces_url("grpc://c:4317", true).is_err());
    }

    /// A full queue drops the span and counts it; the tick never waits. On a current-thread
    /// runtime the export task cannot take a span before the test yields, so exactly the
    /// spans past [`QUEUE`] are dropped.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_drops_and_counts() {
        // A loopback listener that never answers: nothing leaves the machine.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = traces_url(&l.local_addr().unwrap().to_string(), true).unwrap();
        let t = Arc::new(
            HttpTransport::new(
                &Default::default(),
                std::time::Duration::from_secs(30),
                None,
            )
            .unwrap(),
        );
        let x = SpanExporter::start(t, url, Vec::new());
        let id = Identity::default();
        for i in 0..QUEUE + 5 {
            let s = OpenSpan::straggler(&id, None, "e", Timestamp::from_secs(1));
            x.export(s.end(Timestamp::from_secs(2 + i as u64)));
        }
        assert_eq!(x.stats().dropped.load(Ordering::Relaxed), 5);
        assert_eq!(x.stats().exported.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn ids_are_fresh_and_never_zero() {
        let id = Identity::default();
        let a = OpenSpan::straggler(&id, None, "e", Timestamp::from_secs(1))
            .end(Timestamp::from_secs(2));
        let b = OpenSpan::straggler(&id, None, "e", Timestamp::from_secs(1))
            .end(Timestamp::from_secs(2));
        assert_eq!((a.trace_id.len(), a.span_id.len()), (16, 8));
        assert_ne!(a.trace_id, b.trace_id);
        assert_ne!(a.trace_id, vec![0; 16]);
        assert_ne!(a.span_id, vec![0; 8]);
        assert!(a.parent_span_id.is_empty());
    }
}
