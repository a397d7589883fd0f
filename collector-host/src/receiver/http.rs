//! OTLP/HTTP receiver: `/v1/metrics`, `/v1/traces`, `/v1/logs` in protobuf or JSON. An
//! adapter over [`crate::ingest`]: it reads the HTTP request (path, method, headers, body),
//! decodes it, and writes the answer; middlewares and pipelines are the seam's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use component::middleware::{Refusal, Signal};
use component::scope::{RequestScope, ScopeSource};
use http::{HeaderMap, Method, Request, Response};
use hyper::body::Incoming;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::body::{ReadBody, ReadError};
use super::decode::{self, BodyEncoding, DecodeError};
use crate::auth::gate;
use crate::config::model::HttpServerConfig;
use crate::ingest::{Admitted, Ingest, Refused};
use crate::server::{Body, Handler, response};

/// Everything the HTTP receiver needs per request.
pub struct HttpReceiver {
    pub cfg: HttpServerConfig,
    pub ingest: Ingest,
    /// Permits for requests in flight (`max_concurrent_requests`; `None` = unlimited).
    pub in_flight: Option<Arc<tokio::sync::Semaphore>>,
}

impl std::fmt::Debug for HttpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpReceiver")
            .field("endpoint", &self.cfg.endpoint)
            .finish()
    }
}

impl HttpReceiver {
    pub fn handler(self: Arc<Self>) -> Handler {
        // The request's future itself is boxed (no wrapping async block to copy it into).
        Arc::new(move |req, peer| Box::pin(self.clone().handle(req, peer)))
    }

    fn signal(&self, path: &str) -> Option<Signal> {
        if path == self.cfg.metrics_url_path {
            Some(Signal::Metrics)
        } else if path == self.cfg.traces_url_path {
            Some(Signal::Traces)
        } else if path == self.cfg.logs_url_path {
            Some(Signal::Logs)
        } else {
            None
        }
    }

    /// One request, timed. The steps run in this future itself rather than in a nested
    /// one: a nested future is built and then moved into its parent's state, a copy of
    /// several hundred bytes per request.
    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let started = Instant::now();
        let resp = 'answer: {
            let adm = match self.admit(&req, peer) {
                Ok(a) => a,
                Err(r) => break 'answer r,
            };
            // Load shedding before the body is read: a refused request costs no body memory.
            let _permit = match &self.in_flight {
                Some(sem) => match sem.clone().try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => break 'answer self.overloaded(req.headers(), adm.cluster.as_deref()),
                },
                None => None,
            };
            let (enc, body) = match self
                .read_body(req, adm.signal, adm.cluster.as_deref())
                .await
            {
                Ok(b) => b,
                Err(r) => break 'answer r,
            };
            self.export(adm, enc, &body).await
        };
        self.ingest.counters.latency.observe(started.elapsed());
        resp
    }

    /// Path, method, then the seam's pipeline check and admission (before the body).
    #[allow(clippy::result_large_err)]
    fn admit(&self, req: &Request<Incoming>, peer: SocketAddr) -> Result<Admitted, Response<Body>> {
        let Some(signal) = self.signal(req.uri().path()) else {
            return Err(error(
                None,
                404,
                "unknown path; OTLP/HTTP paths are /v1/metrics, /v1/traces, /v1/logs",
            ));
        };
        let enc = || BodyEncoding::from_content_type(content_type(req.headers()));
        if let Err(Refused::NoPipeline(s)) = self.ingest.route(signal) {
            return Err(error(enc(), 404, &Refused::no_pipeline_message(s)));
        }
        if req.method() != Method::POST {
            let mut r = error(None, 405, "OTLP/HTTP accepts POST only");
            r.headers_mut()
                .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
            return Err(r);
        }
        // The cluster comes from the query (or a request header) before the body is read.
        // A malformed cluster id is refused outright: it must never reach a response header.
        self.ingest
            .admit(
                signal,
                Some(peer),
                gate::authorization(req.headers()),
                || request_cluster(&*self.ingest.scope, req.uri().query(), req.headers()),
            )
            .map_err(|r| match r {
                Refused::Middleware(r) => denial(enc(), &r),
                Refused::BadCluster(msg) => error(enc(), 400, &msg),
                Refused::NoPipeline(s) => error(enc(), 404, &Refused::no_pipeline_message(s)),
            })
    }

    /// 503 with `Retry-After`: `max_concurrent_requests` are in flight.
    fn overloaded(&self, headers: &HeaderMap, cluster: Option<&str>) -> Response<Body> {
        self.ingest.counters.reject("overloaded");
        let mut r = error(
            BodyEncoding::from_content_type(content_type(headers)),
            503,
            "too many requests in flight; retry after the Retry-After delay",
        );
        let secs = self.cfg.retry_after.as_secs().max(1);
        if let Ok(v) = http::HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        self.with_metadata(r, cluster)
    }

    /// Content type, size limit, the body within `read_timeout`, then decompression.
    async fn read_body(
        &self,
        req: Request<Incoming>,
        signal: Signal,
        cluster: Option<&str>,
    ) -> Result<(BodyEncoding, Bytes), Response<Body>> {
        let counters = &self.ingest.counters;
        let headers = BodyHeaders::of(req.headers());
        let Some(enc) =
            BodyEncoding::from_content_type(headers.content_type.and_then(|v| v.to_str().ok()))
        else {
            counters.reject("unsupported_content_type");
            let r = error(
                None,
                415,
                "unsupported Content-Type: use application/x-protobuf or application/json",
            );
            return Err(self.with_metadata(r, cluster));
        };
        let limit = self.cfg.max_request_body_size;
        if let Some(len) = headers
            .content_length
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && len > limit
        {
            counters.reject("body_too_large");
            let r = error(
                Some(enc),
                413,
                &format!("request body of {len} bytes exceeds the {limit}-byte limit"),
            );
            return Err(self.with_metadata(r, cluster));
        }
        let content_encoding = headers
            .content_encoding
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut read = std::pin::pin!(ReadBody::new(
            req.into_body(),
            usize::try_from(limit).unwrap_or(usize::MAX),
        ));
        // A small push usually arrives with its headers: one poll reads it all, and the
        // read timeout's timer (registered in and removed from the runtime's shared timer
        // wheel, under a lock both workers take) is only set when the body is still
        // arriving.
        let read = match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => tokio::time::timeout(self.cfg.read_timeout, read).await,
        };
        let body: Bytes = match read {
            Err(_) => {
                counters.reject("read_timeout");
                return Err(error(Some(enc), 408, "timed out reading the request body"));
            }
            Ok(Err(ReadError::TooLarge)) => {
                counters.reject("body_too_large");
                let r = error(
                    Some(enc),
                    413,
                    &format!("request body exceeds the {limit}-byte limit"),
                );
                return Err(self.with_metadata(r, cluster));
            }
            Ok(Err(ReadError::Read(e))) => {
                counters.reject("read_error");
                return Err(error(
                    Some(enc),
                    400,
                    &format!("failed to read the request body: {e}"),
                ));
            }
            Ok(Ok(body)) => body,
        };
        // Decompression failures are counted with the decode failures of the signal.
        match decode::decompress(content_encoding.as_deref(), body, limit) {
            Ok(b) => Ok((enc, b)),
            Err(e) => Err(self.decode_failed(signal, enc, &e, cluster)),
        }
    }

    /// Decode for the admitted signal and hand the export to the seam.
    async fn export(&self, adm: Admitted, enc: BodyEncoding, body: &[u8]) -> Response<Body> {
        match adm.signal {
            Signal::Metrics => {
                let req = match decode::decode_metrics(enc, body) {
                    Ok(r) => r,
                    Err(e) => {
                        return self.decode_failed(
                            Signal::Metrics,
                            enc,
                            &e,
                            adm.cluster.as_deref(),
                        );
                    }
                };
                // The JSON decoder names the batch it issued, so that it can tell the
                // batch back unchanged from the pipeline (see `otlp_json::take_origin`).
                let origin = match enc {
                    BodyEncoding::Json => super::otlp_json::take_origin(),
                    _ => None,
                };
                let export = match self.ingest.export_metrics_from(adm, req, origin).await {
                    Ok(x) => x,
                    Err(r) => return denial(Some(enc), &r),
                };
                let resp = match export.result {
                    // The usual answer (nothing refused) is the same bytes every time:
                    // encoded once, not per push.
                    Ok(msg) if msg == ExportMetricsServiceResponse::default() => {
                        static EMPTY: std::sync::LazyLock<[Vec<u8>; 2]> =
                            std::sync::LazyLock::new(|| {
                                [BodyEncoding::Protobuf, BodyEncoding::Json].map(|e| {
                                    decode::encode(e, &ExportMetricsServiceResponse::default())
                                })
                            });
                        let body: &'static [u8] = &EMPTY[usize::from(enc == BodyEncoding::Json)];
                        response(200, enc.content_type(), Bytes::from_static(body))
                    }
                    Ok(msg) => ok(enc, &msg),
                    Err(e) => error(Some(enc), 500, &e.to_string()),
                };
                self.with_metadata(resp, export.response_cluster.as_deref())
            }
            Signal::Traces => match decode::decode::<ExportTraceServiceRequest>(enc, body) {
                Ok(req) => match self.ingest.export_traces(adm, req).await {
                    Ok(msg) => ok(enc, &msg),
                    Err(r) => denial(Some(enc), &r),
                },
                Err(e) => self.decode_failed(Signal::Traces, enc, &e, None),
            },
            Signal::Logs => match decode::decode::<ExportLogsServiceRequest>(enc, body) {
                Ok(req) => match self.ingest.export_logs(adm, req).await {
                    Ok(msg) => ok(enc, &msg),
                    Err(r) => denial(Some(enc), &r),
                },
                Err(e) => self.decode_failed(Signal::Logs, enc, &e, None),
            },
        }
    }

    fn decode_failed(
        &self,
        signal: Signal,
        enc: BodyEncoding,
        e: &DecodeError,
        cluster: Option<&str>,
    ) -> Response<Body> {
        self.ingest.decode_failed(signal, e.reason());
        let r = error(Some(enc), e.status(), &e.to_string());
        if signal == Signal::Metrics {
            self.with_metadata(r, cluster)
        } else {
            r
        }
    }

    /// Attach the response middlewares' headers (the threshold pair: both or neither).
    /// A name the middleware declared is inserted in its parsed form (a name given as a
    /// string is parsed and lower-cased on every insert).
    fn with_metadata(&self, mut r: Response<Body>, cluster: Option<&str>) -> Response<Body> {
        let known = &self.ingest.http_header_names;
        self.ingest.response_metadata(cluster, &mut |name, value| {
            match known.iter().find(|(n, _)| *n == name) {
                Some((_, parsed)) => r.headers_mut().insert(parsed.clone(), value.clone()),
                None => r.headers_mut().insert(name, value.clone()),
            };
        });
        r
    }
}

/// The scope a push names at the HTTP layer (`scope` reads the query string and the
/// headers; Fleet: the `cluster_id` query parameter, else a request header). `Err` for a
/// present but malformed value.
pub fn request_cluster(
    scope: &dyn RequestScope,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Option<Arc<str>>, String> {
    scope
        .request_scope(ScopeSource::Http { query, headers })
        .map(|c| c.map(|c| Arc::from(c.as_ref())))
}

/// The headers the body read depends on, found in one pass over the request's headers
/// (a push has a handful; three map lookups cost more). Each is the header's first
/// value, as `HeaderMap::get` would give.
#[derive(Default)]
struct BodyHeaders<'a> {
    content_type: Option<&'a http::HeaderValue>,
    content_length: Option<&'a http::HeaderValue>,
    content_encoding: Option<&'a http::HeaderValue>,
}

impl<'a> BodyHeaders<'a> {
    fn of(h: &'a HeaderMap) -> Self {
        let mut b = BodyHeaders::default();
        for (name, value) in h {
            let slot = if name == http::header::CONTENT_TYPE {
                &mut b.content_type
            } else if name == http::header::CONTENT_LENGTH {
                &mut b.content_length
            } else if name == http::header::CONTENT_ENCODING {
                &mut b.content_encoding
            } else {
                continue;
            };
            slot.get_or_insert(value);
        }
        b
    }
}

fn content_type(h: &HeaderMap) -> Option<&str> {
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// A middleware's refusal (401/403/429/400) in the request's encoding, never with the
/// response middlewares' headers.
fn denial(enc: Option<BodyEncoding>, r: &Refusal) -> Response<Body> {
    let mut resp = error(enc, r.code.http_status(), &r.message);
    let h = resp.headers_mut();
    if let Some(c) = r.challenge {
        h.insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static(c),
        );
    }
    if let Some(secs) = r.retry_after_secs {
        h.insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    resp
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
    use component::scope::NoScope;
    use ingero_wire::scope::ClusterScope;

    /// One pass finds what three `get`s would: each header's first value, whatever the
    /// order and however many other headers there are.
    #[test]
    fn body_headers_are_the_first_values_of_each() {
        let mut h = HeaderMap::new();
        assert!(BodyHeaders::of(&h).content_type.is_none());
        h.append("x-other", http::HeaderValue::from_static("1"));
        h.append(
            http::header::CONTENT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
        h.append(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        h.append(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
        h.append(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from_static("12"),
        );
        let b = BodyHeaders::of(&h);
        for (found, name) in [
            (b.content_type, http::header::CONTENT_TYPE),
            (b.content_length, http::header::CONTENT_LENGTH),
            (b.content_encoding, http::header::CONTENT_ENCODING),
        ] {
            assert_eq!(found, h.get(&name), "{name}");
        }
        assert_eq!(content_type(&h), Some("application/json"));
    }

    #[test]
    fn cluster_from_query_then_header() {
        let mut h = HeaderMap::new();
        let fleet = |q, h: &HeaderMap| request_cluster(&ClusterScope, q, h);
        assert_eq!(
            fleet(Some("cluster_id=prod"), &h).unwrap().as_deref(),
            Some("prod")
        );
        assert_eq!(fleet(None, &h).unwrap(), None);
        h.insert("ingero.cluster.id", http::HeaderValue::from_static("hdr"));
        assert_eq!(fleet(None, &h).unwrap().as_deref(), Some("hdr"));
        assert_eq!(
            fleet(Some("cluster_id=q"), &h).unwrap().as_deref(),
            Some("q")
        );
        // Without a registered scope nothing names one, and nothing is malformed.
        assert_eq!(
            request_cluster(&NoScope, Some("cluster_id=q"), &h),
            Ok(None)
        );
        assert_eq!(request_cluster(&NoScope, Some("cluster_id="), &h), Ok(None));
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
            assert!(request_cluster(&ClusterScope, Some(q), &h).is_err(), "{q}");
        }
    }
}
