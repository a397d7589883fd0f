//! The GET fallback (spec 2.2): while push responses carry no threshold headers, ask
//! `GET /api/v1/threshold?cluster_id=..` every poll interval (±20 %). Suspended while the
//! piggyback headers work. Redirects are not followed; bodies over 8 KiB are rejected.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use component::Clock;
use http::{Method, Request};
use http_body_util::Full;
use parking_lot::Mutex;
use rand::Rng;

use super::client::parse_retry_after;
use super::transport::{HttpTransport, SendError};
use crate::health::threshold::{ThresholdCache, classify_body, decode_body};

pub const BODY_CAP: usize = 8 * 1024;

/// What one poll did.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    /// Piggyback headers are working; nothing sent.
    Suspended,
    /// A 2xx body was decoded and applied (value may have been rejected by bounds).
    Applied,
    /// Something went wrong; the cache is unchanged.
    Failed(String),
}

pub struct ThresholdPoller {
    transport: Arc<HttpTransport>,
    url: http::Uri,
    interval: Duration,
    cache: Arc<Mutex<ThresholdCache>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ThresholdPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThresholdPoller")
            .field("url", &self.url)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl ThresholdPoller {
    pub fn new(
        transport: Arc<HttpTransport>,
        url: http::Uri,
        interval: Duration,
        cache: Arc<Mutex<ThresholdCache>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        ThresholdPoller {
            transport,
            url,
            interval,
            cache,
            clock,
        }
    }

    fn jittered(&self) -> Duration {
        self.interval.mul_f64(rand::rng().random_range(0.8..=1.2))
    }

    /// One poll. Returns the outcome and the delay until the next poll.
    pub async fn poll_once(&self) -> (PollOutcome, Duration) {
        if self.cache.lock().piggyback_available() {
            return (PollOutcome::Suspended, self.jittered());
        }
        let req = Request::builder()
            .method(Method::GET)
            .uri(self.url.clone())
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()));
        let req = match req {
            Ok(r) => r,
            Err(e) => return (PollOutcome::Failed(e.to_string()), self.jittered()),
        };
        let resp = match self.transport.send(req, BODY_CAP).await {
            Ok(r) => r,
            Err(e @ SendError::BodyTooLarge(_)) => {
                tracing::warn!(error = %e, "threshold GET rejected");
                return (PollOutcome::Failed(e.to_string()), self.jittered());
            }
            Err(e) => {
                tracing::debug!(error = %e, "threshold GET failed");
                return (PollOutcome::Failed(e.to_string()), self.jittered());
            }
        };
        let now = self.clock.now();
        let status = resp.status.as_u16();
        let retry_after = resp
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, now));
        if resp.status.is_success() {
            return match decode_body(&resp.body) {
                Ok(body) => {
                    if let Some(reason) = self.cache.lock().apply_body(classify_body(body), now) {
                        tracing::warn!(
                            reason = reason.as_str(),
                            threshold = body.threshold,
                            "rejected threshold from GET"
                        );
                    }
                    (PollOutcome::Applied, self.jittered())
                }
                Err(e) => {
                    tracing::warn!(error = %e, "threshold GET body rejected");
                    (PollOutcome::Failed(e), self.jittered())
                }
            };
        }
        let next = match status {
            429 => retry_after.unwrap_or(self.interval * 2),
            500..=599 => retry_after.unwrap_or_else(|| self.jittered()),
            _ => self.jittered(),
        };
        tracing::debug!(status, "threshold GET non-2xx");
        (PollOutcome::Failed(format!("HTTP {status}")), next)
    }

    /// Poll until `shutdown` turns true. The first poll comes after one interval.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut delay = self.jittered();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = crate::httpserve::stopped(&mut shutdown) => return,
            }
            if *shutdown.borrow() {
                return;
            }
            delay = self.poll_once().await.1;
        }
    }
}
