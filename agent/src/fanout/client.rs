//! The fan-out client: the agent's HTTP client (hyper + rustls, per-request timeout, capped
//! body, bearer token) sending one request per node, with the clock samples beside it.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use super::{FanoutConfig, MAX_ANSWER_BYTES, MAX_IN_FLIGHT, SKEW_SAMPLES};
use crate::fleet::transport::{HttpTransport, SendError, TlsFiles};

/// A node's clock against this host's: positive when the node is ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Skew {
    /// The offset of the sample with the shortest round trip (the one used).
    pub offset_ns: i64,
    /// That sample's round trip: the offset is within half of it.
    pub rtt_ns: i64,
    /// The median offset of the samples.
    pub median_offset_ns: i64,
}

/// One node's answer (or why there is none) and its clock.
#[derive(Debug, Clone)]
pub struct NodeAnswer<T> {
    /// The address as given.
    pub node: String,
    /// The node's own name, from its clock answer.
    pub node_id: Option<String>,
    pub result: Result<T, String>,
    pub skew: Option<Skew>,
}

impl<T> NodeAnswer<T> {
    /// The offset to subtract from this node's times (0 when unmeasured).
    pub fn offset_ns(&self) -> i64 {
        self.skew.map(|s| s.offset_ns).unwrap_or(0)
    }
}

#[derive(Clone)]
pub struct FanoutClient {
    http: HttpTransport,
    scheme: &'static str,
    in_flight: Arc<Semaphore>,
    /// Measure clocks beside each request.
    pub measure_skew: bool,
}

impl std::fmt::Debug for FanoutClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanoutClient")
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

/// `host:port` with a port, nothing else (no scheme, path or user info).
pub fn check_address(node: &str) -> Result<http::uri::Authority, String> {
    let a: http::uri::Authority = node
        .parse()
        .map_err(|e| format!("invalid node address {node:?}: {e} (want host:port)"))?;
    if a.port_u16().is_none() || a.as_str().contains('@') || a.host().is_empty() {
        return Err(format!("invalid node address {node:?} (want host:port)"));
    }
    Ok(a)
}

fn now_ns() -> i64 {
    crate::api::now_ns()
}

#[derive(serde::Deserialize)]
struct TimeAnswer {
    timestamp_ns: i64,
    #[serde(default)]
    node: Option<String>,
}

impl FanoutClient {
    pub fn new(cfg: &FanoutConfig) -> Result<Self, String> {
        let tls = TlsFiles {
            ca: cfg.ca_cert.clone(),
            cert: cfg.client_cert.clone(),
            key: cfg.client_key.clone(),
        };
        let http = HttpTransport::new(&tls, cfg.timeout, cfg.token_file.clone())
            .map_err(|e| e.to_string())?;
        Ok(FanoutClient {
            http,
            scheme: if cfg.no_tls { "http" } else { "https" },
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            measure_skew: true,
        })
    }

    /// One request to one node: the body of a 200, else the agent's error message.
    pub async fn request(
        &self,
        node: &str,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, String> {
        let auth = check_address(node)?;
        let uri = format!("{}://{auth}{path_and_query}", self.scheme);
        let mut b = Request::builder().method(method).uri(&uri);
        if body.is_some() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| format!("request {uri}: {e}"))?;
        let _permit = self.in_flight.acquire().await.map_err(|e| e.to_string())?;
        let resp = self
            .http
            .send(req, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| match e {
                SendError::Timeout(d) => format!("no answer within {d:?}"),
                e => e.to_string(),
            })?;
        if resp.status != http::StatusCode::OK {
            let msg = serde_json::from_slice::<serde_json::Value>(&resp.body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&resp.body[..resp.body.len().min(200)]).into_owned()
                });
            return Err(format!("HTTP {}: {msg}", resp.status.as_u16()));
        }
        Ok(resp.body)
    }

    /// Three clock samples in a row, after one uncounted request that opens the connection
    /// (a sample that paid the TCP and TLS handshakes would see the node's clock late by
    /// most of them). Each sample's error is at most half its round trip, whatever the
    /// delays on the way, so the offset kept is that of the sample with the shortest round
    /// trip (NTP's clock filter); the median offset of the three is kept beside it.
    pub async fn measure(&self, node: &str) -> Result<(Skew, Option<String>), String> {
        self.request(node, Method::GET, "/api/v1/time", None)
            .await?;
        let mut samples = Vec::with_capacity(SKEW_SAMPLES);
        let mut id = None;
        for _ in 0..SKEW_SAMPLES {
            let t1 = now_ns();
            let body = self
                .request(node, Method::GET, "/api/v1/time", None)
                .await?;
            let t2 = now_ns();
            let t: TimeAnswer =
                serde_json::from_slice(&body).map_err(|e| format!("time answer: {e}"))?;
            let rtt = t2 - t1;
            samples.push((rtt, t.timestamp_ns - (t1 + rtt / 2)));
            id = t.node;
        }
        let mut offs: Vec<i64> = samples.iter().map(|s| s.1).collect();
        offs.sort_unstable();
        let (rtt_ns, offset_ns) = samples.iter().copied().min().unwrap_or((0, 0));
        Ok((
            Skew {
                offset_ns,
                rtt_ns,
                median_offset_ns: offs[SKEW_SAMPLES / 2],
            },
            id,
        ))
    }

    /// One request to every node, concurrently, each decoded as `T`; clocks measured beside.
    pub async fn fan_out<T: DeserializeOwned + Send + 'static>(
        &self,
        nodes: &[String],
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Vec<NodeAnswer<T>> {
        let mut set = tokio::task::JoinSet::new();
        for (i, n) in nodes.iter().enumerate() {
            let c = self.clone();
            let n = n.clone();
            let (m, p, b) = (method.clone(), path_and_query.to_string(), body.clone());
            set.spawn(async move {
                let ask = async {
                    let body = c.request(&n, m, &p, b).await?;
                    let decode = move || {
                        serde_json::from_slice::<T>(&body)
                            .map_err(|e| format!("unreadable answer: {e}"))
                    };
                    // A large answer is decoded off the runtime's threads, so the clock
                    // samples running beside it are not held up.
                    tokio::task::spawn_blocking(decode)
                        .await
                        .map_err(|e| format!("decode task failed: {e}"))?
                };
                let clock = async {
                    if c.measure_skew {
                        Some(c.measure(&n).await)
                    } else {
                        None
                    }
                };
                let (result, clock) = tokio::join!(ask, clock);
                let (skew, node_id) = match clock {
                    Some(Ok((s, id))) => (Some(s), id),
                    _ => (None, None),
                };
                (
                    i,
                    NodeAnswer {
                        node: n,
                        node_id,
                        result,
                        skew,
                    },
                )
            });
        }
        let mut out: Vec<Option<NodeAnswer<T>>> = (0..nodes.len()).map(|_| None).collect();
        while let Some(r) = set.join_next().await {
            if let Ok((i, a)) = r {
                out[i] = Some(a);
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(i, a)| {
                a.unwrap_or_else(|| NodeAnswer {
                    node: nodes[i].clone(),
                    node_id: None,
                    result: Err("request task failed".into()),
                    skew: None,
                })
            })
            .collect()
    }
}
