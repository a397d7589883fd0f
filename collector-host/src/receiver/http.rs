//! OTLP/HTTP receiver: `/v1/metrics`, `/v1/traces`, `/v1/logs` in protobuf or JSON, with
//! the threshold middleware on metrics responses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use component::otlp::{ExportMetricsServiceRequest, ExportMetricsServiceResponse, count_points};
use component::wire::{http as wire_http, resource};
use component::{BatchContext, Timestamp};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use ingero_extension::ThresholdStore;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use super::decode::{self, BodyEncoding, DecodeError};
use crate::auth::tokens::TokenEntry;
use crate::auth::{Action, Denial, ListenerAuth, gate};
use crate::config::model::HttpServerConfig;
use crate::pipeline::Fanout;
use crate::server::{Body, Handler, response};
use crate::telemetry::{ReceiverCounters, Signal};

/// Everything the HTTP receiver needs per request.
pub struct HttpReceiver {
    pub cfg: HttpServerConfig,
    pub fanout: Fanout,
    /// Threshold middleware: the store whose values go into metrics push responses.
    pub thresholds: Option<Arc<ThresholdStore>>,
    pub counters: Arc<ReceiverCounters>,
    /// Permits for requests in flight (`max_concurrent_requests`; `None` = unlimited).
    pub in_flight: Option<Arc<tokio::sync::Semaphore>>,
    /// Bearer-token gate (`auth:`); `None` = no authentication.
    pub auth: Option<ListenerAuth>,
}

/// The caller of one request, once authenticated.
struct Caller {
    entry: Arc<TokenEntry>,
    peer: SocketAddr,
    action: Action,
}

impl std::fmt::Debug for HttpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpReceiver")
            .field("endpoint", &self.cfg.endpoint)
            .finish()
    }
}

/// Which OTLP path a request addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    Traces,
    Logs,
}

impl HttpReceiver {
    pub fn handler(self: Arc<Self>) -> Handler {
        Arc::new(move |req, peer| {
            let me = self.clone();
            Box::pin(async move { me.handle(req, peer).await })
        })
    }

    fn route(&self, path: &str) -> Option<Route> {
        if path == self.cfg.metrics_url_path {
            Some(Route::Metrics)
        } else if path == self.cfg.traces_url_path {
            Some(Route::Traces)
        } else if path == self.cfg.logs_url_path {
            Some(Route::Logs)
        } else {
            None
        }
    }

    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let started = Instant::now();
        let resp = self.handle_inner(req, peer).await;
        self.counters.latency.observe(started.elapsed());
        resp
    }

    async fn handle_inner(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let Some(route) = self.route(req.uri().path()) else {
            return error(
                None,
                404,
                "unknown path; OTLP/HTTP paths are /v1/metrics, /v1/traces, /v1/logs",
            );
        };
        if req.method() != Method::POST {
            let mut r = error(None, 405, "OTLP/HTTP accepts POST only");
            r.headers_mut()
                .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
            return r;
        }
        // Threshold middleware: the cluster comes from the query (or a request header)
        // before the body is read, as the Go middleware sees it. A malformed cluster id is
        // refused outright: it must never reach a response header.
        let mut cluster = None;
        // Bearer token, rate limit and the request's cluster, all before the body is read.
        let caller = match &self.auth {
            None => None,
            Some(auth) => {
                let action = match route {
                    Route::Metrics => Action::PushMetrics,
                    Route::Traces => Action::PushTraces,
                    Route::Logs => Action::PushLogs,
                };
                let named = request_cluster(req.uri().query(), req.headers())
                    .ok()
                    .flatten();
                match auth.check(
                    gate::authorization(req.headers()),
                    Some(peer),
                    action,
                    named.as_deref(),
                ) {
                    Ok(entry) => Some(Caller {
                        entry,
                        peer,
                        action,
                    }),
                    Err(d) => {
                        self.counters.reject(d.outcome().as_str());
                        let enc = BodyEncoding::from_content_type(content_type(req.headers()));
                        return denial(enc, d);
                    }
                }
            }
        };
        if route == Route::Metrics || caller.is_some() {
            match request_cluster(req.uri().query(), req.headers()) {
                Ok(c) => cluster = c,
                Err(msg) => {
                    self.counters.reject("bad_cluster_id");
                    return error(
                        BodyEncoding::from_content_type(content_type(req.headers())),
                        400,
                        &msg,
                    );
                }
            }
        }
        // Load shedding before the body is read: a refused request costs no body memory.
        let _permit = match &self.in_flight {
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    self.counters.reject("overloaded");
                    let mut r = error(
                        BodyEncoding::from_content_type(content_type(req.headers())),
                        503,
                        "too many requests in flight; retry after the Retry-After delay",
                    );
                    let secs = self.cfg.retry_after.as_secs().max(1);
                    if let Ok(v) = http::HeaderValue::from_str(&secs.to_string()) {
                        r.headers_mut().insert(http::header::RETRY_AFTER, v);
                    }
                    return self.with_thresholds(r, cluster.as_deref());
                }
            },
            None => None,
        };
        let enc = match BodyEncoding::from_content_type(content_type(req.headers())) {
            Some(e) => e,
            None => {
                self.counters.reject("unsupported_content_type");
                let r = error(
                    None,
                    415,
                    "unsupported Content-Type: use application/x-protobuf or application/json",
                );
                return self.with_thresholds(r, cluster.as_deref());
            }
        };
        let limit = self.cfg.max_request_body_size;
        if let Some(len) = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && len > limit
        {
            self.counters.reject("body_too_large");
            let r = error(
                Some(enc),
                413,
                &format!("request body of {len} bytes exceeds the {limit}-byte limit"),
            );
            return self.with_thresholds(r, cluster.as_deref());
        }
        let content_encoding = req
            .headers()
            .get(http::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut collect = std::pin::pin!(
            Limited::new(
                req.into_body(),
                usize::try_from(limit).unwrap_or(usize::MAX),
            )
            .collect()
        );
        // A small push usually arrives with its headers: one poll reads it all, and the
        // read timeout's timer (registered in and removed from the runtime's shared timer
        // wheel, under a lock both workers take) is only set when the body is still
        // arriving.
        let read = match std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => tokio::time::timeout(self.cfg.read_timeout, collect).await,
        };
        let body: Bytes = match read {
            Err(_) => {
                self.counters.reject("read_timeout");
                return error(Some(enc), 408, "timed out reading the request body");
            }
            Ok(Err(e)) => {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    self.counters.reject("body_too_large");
                    let r = error(
                        Some(enc),
                        413,
                        &format!("request body exceeds the {limit}-byte limit"),
                    );
                    return self.with_thresholds(r, cluster.as_deref());
                }
                self.counters.reject("read_error");
                return error(
                    Some(enc),
                    400,
                    &format!("failed to read the request body: {e}"),
                );
            }
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        let body = match decode::decompress(content_encoding.as_deref(), body, limit) {
            Ok(b) => b,
            Err(e) => return self.decode_failed(route, enc, &e, cluster.as_deref()),
        };
        match route {
            Route::Metrics => self.metrics(enc, &body, cluster, caller.as_ref()),
            Route::Traces => match decode::decode::<ExportTraceServiceRequest>(enc, &body) {
                Ok(req) => {
                    if let Err(r) = self.payload_allowed(
                        caller.as_ref(),
                        cluster.as_deref(),
                        req.resource_spans
                            .iter()
                            .map(|r| resource_cluster(r.resource.as_ref())),
                    ) {
                        return denial(Some(enc), r);
                    }
                    let n: usize = req
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .map(|s| s.spans.len())
                        .sum();
                    self.fanout.consume_traces(&req);
                    self.counters.traces.accepted.fetch_add(n as u64, Relaxed);
                    ok(enc, &ExportTraceServiceResponse::default())
                }
                Err(e) => self.decode_failed(route, enc, &e, None),
            },
            Route::Logs => match decode::decode::<ExportLogsServiceRequest>(enc, &body) {
                Ok(req) => {
                    if let Err(r) = self.payload_allowed(
                        caller.as_ref(),
                        cluster.as_deref(),
                        req.resource_logs
                            .iter()
                            .map(|r| resource_cluster(r.resource.as_ref())),
                    ) {
                        return denial(Some(enc), r);
                    }
                    let n: usize = req
                        .resource_logs
                        .iter()
                        .flat_map(|r| &r.scope_logs)
                        .map(|s| s.log_records.len())
                        .sum();
                    self.fanout.consume_logs(&req);
                    self.counters.logs.accepted.fetch_add(n as u64, Relaxed);
                    ok(enc, &ExportLogsServiceResponse::default())
                }
                Err(e) => self.decode_failed(route, enc, &e, None),
            },
        }
    }

    fn decode_failed(
        &self,
        route: Route,
        enc: BodyEncoding,
        e: &DecodeError,
        cluster: Option<&str>,
    ) -> Response<Body> {
        self.counters.reject(e.reason());
        let sig = match route {
            Route::Metrics => Signal::Metrics,
            Route::Traces => Signal::Traces,
            Route::Logs => Signal::Logs,
        };
        self.counters.signal(sig).failed.fetch_add(1, Relaxed);
        let r = error(Some(enc), e.status(), &e.to_string());
        if route == Route::Metrics {
            self.with_thresholds(r, cluster)
        } else {
            r
        }
    }

    /// Check the clusters a decoded payload names against the caller's token, and record
    /// the decision. `Err` is the refusal to send; nothing of the batch has been consumed.
    fn payload_allowed<'a>(
        &self,
        caller: Option<&Caller>,
        cluster: Option<&str>,
        resources: impl Iterator<Item = Option<&'a str>>,
    ) -> Result<(), Denial> {
        let (Some(c), Some(auth)) = (caller, &self.auth) else {
            return Ok(());
        };
        match auth.check_payload(&c.entry, Some(c.peer), c.action, cluster, resources) {
            Ok(()) => {
                auth.allowed(&c.entry, Some(c.peer), c.action, cluster);
                Ok(())
            }
            Err(d) => {
                self.counters.reject(d.outcome().as_str());
                Err(d)
            }
        }
    }

    fn metrics(
        &self,
        enc: BodyEncoding,
        body: &[u8],
        cluster: Option<Arc<str>>,
        caller: Option<&Caller>,
    ) -> Response<Body> {
        let req = match decode::decode_metrics(enc, body) {
            Ok(r) => r,
            Err(e) => return self.decode_failed(Route::Metrics, enc, &e, cluster.as_deref()),
        };
        if let Err(r) = self.payload_allowed(
            caller,
            cluster.as_deref(),
            req.resource_metrics.iter().map(|rm| {
                component::otlp::get_str(component::otlp::resource_attrs(rm), resource::CLUSTER_ID)
            }),
        ) {
            return denial(Some(enc), r);
        }
        let points = count_points(&req.resource_metrics);
        // Clients without the query parameter (OTel SDKs, `ingero trace`) still get the
        // threshold of the cluster their resource names.
        let header_cluster = cluster.clone().or_else(|| payload_cluster(&req));
        let ctx = BatchContext {
            cluster_id: cluster,
            received_at: Timestamp::now(),
        };
        let resp = match self.fanout.consume_metrics(req.resource_metrics, &ctx) {
            Ok(outcome) => {
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
                ok(enc, &msg)
            }
            Err(e) => {
                self.counters.metrics.refused.fetch_add(points, Relaxed);
                error(Some(enc), 500, &e.to_string())
            }
        };
        self.with_thresholds(resp, header_cluster.as_deref())
    }

    /// Attach `X-Ingero-Threshold` and `X-Ingero-Quorum-Met` (both or neither).
    fn with_thresholds(&self, mut r: Response<Body>, cluster: Option<&str>) -> Response<Body> {
        if let (Some(store), Some(c)) = (&self.thresholds, cluster)
            && let Some(h) = store.push_headers(c)
        {
            for (name, value) in h.pairs() {
                r.headers_mut().insert(name, value.clone());
            }
        }
        r
    }
}

fn content_type(h: &HeaderMap) -> Option<&str> {
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// The cluster a push names at the HTTP layer: the `cluster_id` query parameter, else the
/// `ingero.cluster.id` request header. `Err` for a present but malformed value.
pub fn request_cluster(
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Option<Arc<str>>, String> {
    let header = headers
        .get(wire_http::REQUEST_HEADER_CLUSTER_ID)
        .map(|h| h.as_bytes());
    ingero_extension::push_cluster(query, header).map(|c| c.map(|c| Arc::from(c.as_ref())))
}

/// The first `ingero.cluster.id` resource attribute of a batch, if well formed.
fn payload_cluster(req: &ExportMetricsServiceRequest) -> Option<Arc<str>> {
    req.resource_metrics.iter().find_map(|rm| {
        component::otlp::get_str(component::otlp::resource_attrs(rm), resource::CLUSTER_ID)
            .filter(|c| ingero_extension::validate_cluster_id(c).is_ok())
            .map(Arc::from)
    })
}

/// The `ingero.cluster.id` attribute of a resource, if any.
pub(crate) fn resource_cluster(
    r: Option<&opentelemetry_proto::tonic::resource::v1::Resource>,
) -> Option<&str> {
    component::otlp::get_str(&r?.attributes, resource::CLUSTER_ID)
}

/// A 401/403/429 in the request's encoding (never with threshold headers).
fn denial(enc: Option<BodyEncoding>, d: Denial) -> Response<Body> {
    let mut r = error(enc, gate::status(d), gate::message(d));
    gate::decorate(&mut r, d);
    r
}

fn ok<T: prost::Message + serde::Serialize>(enc: BodyEncoding, msg: &T) -> Response<Body> {
    response(200, enc.content_type(), decode::encode(enc, msg))
}

fn error(enc: Option<BodyEncoding>, status: u16, message: &str) -> Response<Body> {
    let (body, ct) = decode::error_body(enc, status, message);
    response(status, ct, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_from_query_then_header() {
        let mut h = HeaderMap::new();
        assert_eq!(
            request_cluster(Some("cluster_id=prod"), &h)
                .unwrap()
                .as_deref(),
            Some("prod")
        );
        assert_eq!(request_cluster(None, &h).unwrap(), None);
        h.insert("ingero.cluster.id", http::HeaderValue::from_static("hdr"));
        assert_eq!(request_cluster(None, &h).unwrap().as_deref(), Some("hdr"));
        assert_eq!(
            request_cluster(Some("cluster_id=q"), &h)
                .unwrap()
                .as_deref(),
            Some("q")
        );
    }

    #[test]
    fn malformed_cluster_ids_are_refused() {
        let h = HeaderMap::new();
        for q in [
            "cluster_id=",
            "cluster_id=a%0d%0aX-Evil:%201",
            "cluster_id=a&cluster_id=b",
            "cluster_id=%00",
            "cluster_id=%ff%fe",
            "cluster_id=a%zz",
        ] {
            assert!(request_cluster(Some(q), &h).is_err(), "{q}");
        }
    }
}
