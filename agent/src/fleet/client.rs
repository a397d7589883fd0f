//! The push client (spec 1.1, 1.6, 2.1): POST an OTLP request, retry once on a network
//! error, read the threshold headers of every response into the cache, track whether Fleet
//! is reachable (health pushes only), and honour `Retry-After` on 429 / 503.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use component::otlp::ExportMetricsServiceRequest;
use component::{Clock, Timestamp};
use http::{HeaderMap, Method, Request};
use http_body_util::Full;
use ingero_wire::http as names;
use parking_lot::Mutex;
use prost::Message;
use rand::Rng;

use super::transport::{HttpTransport, SendError};
use crate::config::Encoding;
use crate::health::threshold::{ThresholdCache, parse_headers};
use crate::timefmt;

/// Delay before the single retry of a network-class failure (±20 % jitter).
pub const RETRY_DELAY: Duration = Duration::from_millis(200);
/// Consecutive failed health pushes after which Fleet counts as unreachable.
pub const FAILURE_THRESHOLD: u32 = 3;
/// The push reads at most this much of a response body, then discards it.
pub const PUSH_BODY_CAP: usize = 64 * 1024;
/// Longest `Retry-After` the agent honours; a broken server cannot silence it for longer.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What is being pushed. Only health pushes count toward reachability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushKind {
    Health,
    StragglerEvent,
    Nccl,
}

/// Outcome of one push (after the retry, if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushResult {
    /// HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// Server-requested backoff (429 / 503 with a valid `Retry-After`).
    pub retry_after: Option<Duration>,
    /// What went wrong, if it did.
    pub error: Option<String>,
    /// The request was retried after a network error.
    pub retried: bool,
}

impl PushResult {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// Parse `Retry-After`: non-negative delay-seconds, or an HTTP date (past dates give 0).
pub fn parse_retry_after(v: &str, now: Timestamp) -> Option<Duration> {
    let v = v.trim();
    if v.is_empty() {
        return None;
    }
    if v.bytes().all(|b| b.is_ascii_digit())
        || (v.starts_with('+') && v.len() > 1 && v[1..].bytes().all(|b| b.is_ascii_digit()))
    {
        let secs: u64 = v.trim_start_matches('+').parse().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at = timefmt::parse_http_date(v)?;
    Some(at.since(now).min(MAX_RETRY_AFTER))
}

/// Counters for the status view and self-metrics.
#[derive(Debug, Default)]
pub struct PushStats {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub retries: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub last: Mutex<Option<(Timestamp, PushKind, PushResult)>>,
}

pub struct PushClient {
    transport: Arc<HttpTransport>,
    url: http::Uri,
    encoding: Encoding,
    retry_delay_ms: AtomicU64,
    cache: Arc<Mutex<ThresholdCache>>,
    clock: Arc<dyn Clock>,
    consecutive_failures: AtomicU32,
    stats: PushStats,
}

impl std::fmt::Debug for PushClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushClient")
            .field("url", &self.url)
            .field("encoding", &self.encoding)
            .field("consecutive_failures", &self.consecutive_failures)
            .finish_non_exhaustive()
    }
}

impl PushClient {
    pub fn new(
        transport: Arc<HttpTransport>,
        url: http::Uri,
        encoding: Encoding,
        cache: Arc<Mutex<ThresholdCache>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        PushClient {
            transport,
            url,
            encoding,
            retry_delay_ms: AtomicU64::new(RETRY_DELAY.as_millis() as u64),
            cache,
            clock,
            consecutive_failures: AtomicU32::new(0),
            stats: PushStats::default(),
        }
    }

    /// Change the retry delay (tests use a short one).
    pub fn set_retry_delay(&self, d: Duration) {
        self.retry_delay_ms.store(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn url(&self) -> &http::Uri {
        &self.url
    }

    pub fn stats(&self) -> &PushStats {
        &self.stats
    }

    /// Fewer than [`FAILURE_THRESHOLD`] consecutive failed health pushes.
    pub fn reachable(&self) -> bool {
        self.consecutive_failures.load(Ordering::Relaxed) < FAILURE_THRESHOLD
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    fn encode(&self, req: &ExportMetricsServiceRequest) -> Result<(Bytes, &'static str), String> {
        match self.encoding {
            Encoding::Protobuf => Ok((Bytes::from(req.encode_to_vec()), "application/x-protobuf")),
            Encoding::Json => super::json::encode(req)
                .map(|b| (Bytes::from(b), "application/json"))
                .map_err(|e| format!("encode JSON: {e}")),
        }
    }

    fn build(
        &self,
        body: Bytes,
        content_type: &'static str,
    ) -> Result<Request<Full<Bytes>>, String> {
        Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .map_err(|e| e.to_string())
    }

    fn record(&self, kind: PushKind, ok: bool) {
        if ok {
            self.stats.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
        if kind == PushKind::Health {
            if ok {
                self.consecutive_failures.store(0, Ordering::Relaxed);
            } else {
                let _ = self.consecutive_failures.fetch_update(
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                    |n| Some(n.saturating_add(1)),
                );
            }
        }
    }

    fn read_threshold(&self, headers: &HeaderMap) {
        let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
        let parsed = parse_headers(get(names::HEADER_THRESHOLD), get(names::HEADER_QUORUM_MET));
        let now = self.clock.now();
        if let Some(reason) = self.cache.lock().apply_headers(parsed, now) {
            tracing::warn!(
                reason = reason.as_str(),
                threshold = get(names::HEADER_THRESHOLD).unwrap_or(""),
                quorum_met = get(names::HEADER_QUORUM_MET).unwrap_or(""),
                "rejected Fleet threshold headers; keeping the previous value"
            );
        }
    }

    /// Push one request.
    pub async fn push(&self, kind: PushKind, req: &ExportMetricsServiceRequest) -> PushResult {
        let (body, content_type) = match self.encode(req) {
            Ok(b) => b,
            Err(e) => {
                self.record(kind, false);
                return self.finish(
                    kind,
                    PushResult {
                        status: None,
                        retry_after: None,
                        error: Some(e),
                        retried: false,
                    },
                );
            }
        };
        self.stats
            .bytes_sent
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let mut retried = false;
        let result = loop {
            let req = match self.build(body.clone(), content_type) {
                Ok(r) => r,
                Err(e) => break Err(SendError::Network(e)),
            };
            match self.transport.send(req, PUSH_BODY_CAP).await {
                Err(e) if e.is_network() && !retried => {
                    retried = true;
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    let jitter = rand::rng().random_range(0.8..1.2);
                    let delay = Duration::from_millis(self.retry_delay_ms.load(Ordering::Relaxed));
                    tokio::time::sleep(delay.mul_f64(jitter)).await;
                }
                other => break other,
            }
        };
        let out = match result {
            Ok(resp) => {
                self.read_threshold(&resp.headers);
                let status = resp.status.as_u16();
                let ok = resp.status.is_success();
                self.record(kind, ok);
                let retry_after = if status == 429 || status == 503 {
                    resp.headers
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, self.clock.now()))
                } else {
                    None
                };
                PushResult {
                    status: Some(status),
                    retry_after,
                    error: (!ok).then(|| format!("HTTP {status}")),
                    retried,
                }
            }
            Err(e) => {
                self.record(kind, false);
                PushResult {
                    status: None,
                    retry_after: None,
                    error: Some(e.to_string()),
                    retried,
                }
            }
        };
        self.finish(kind, out)
    }

    fn finish(&self, kind: PushKind, r: PushResult) -> PushResult {
        *self.stats.last.lock() = Some((self.clock.now(), kind, r.clone()));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let now = Timestamp::from_secs(784_111_777);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("1.5", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "past dates are 0"
        );
        assert_eq!(
            parse_retry_after("999999", now),
            Some(MAX_RETRY_AFTER),
            "capped"
        );
    }
}
