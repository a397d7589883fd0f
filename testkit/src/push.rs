//! Plain OTLP/HTTP push connections, as a fleet of agents behind a fixed pool of
//! connections uses them: one HTTP/1.1 keep-alive connection per task, no pool and no
//! shared lock between requests (a pooled client's lock and shared tallies made the
//! generator's own waits part of what it measured). `fleet-loadgen` and `fleet-sim` both
//! push through this.
//!
//! Plain `http://` only: the tools push to a Fleet on loopback.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use ingero_wire::http as names;

/// Why a [`Target`] could not be built or a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("endpoint must be an http:// URL (got {0:?})")]
    NotHttp(String),
    #[error("endpoint has no host:port (got {0:?})")]
    NoAuthority(String),
    #[error("invalid endpoint {0:?}: {1}")]
    Invalid(String, String),
    #[error("connect: {0}")]
    Connect(#[from] std::io::Error),
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
}

/// Where connections go: the socket address and the request target prefix.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub authority: http::HeaderValue,
    /// `<base path>/v1/metrics`.
    pub path: String,
}

impl Target {
    /// From an OTLP/HTTP base URL such as `http://127.0.0.1:4318`.
    pub fn parse(base: &str) -> Result<Self, PushError> {
        let uri: http::Uri = base
            .parse()
            .map_err(|e: http::uri::InvalidUri| PushError::Invalid(base.into(), e.to_string()))?;
        if uri.scheme_str() != Some("http") {
            return Err(PushError::NotHttp(base.into()));
        }
        let Some(auth) = uri.authority() else {
            return Err(PushError::NoAuthority(base.into()));
        };
        let host = format!("{}:{}", auth.host(), auth.port_u16().unwrap_or(80));
        Ok(Target {
            host,
            authority: http::HeaderValue::from_str(auth.as_str())
                .map_err(|e| PushError::Invalid(base.into(), e.to_string()))?,
            path: format!("{}/v1/metrics", uri.path().trim_end_matches('/')),
        })
    }

    /// The request target of a push for `cluster` (`?cluster_id=`, as the agent sends it).
    pub fn uri_for(&self, cluster: &str) -> Option<http::Uri> {
        format!("{}?cluster_id={cluster}", self.path).parse().ok()
    }
}

/// The body encoding of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    pub const fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Protobuf => "application/x-protobuf",
        }
    }
}

/// What Fleet answered to one push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `X-Ingero-Threshold` as received.
    pub threshold: Option<String>,
    /// `X-Ingero-Quorum-Met` as received.
    pub quorum_met: Option<String>,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One HTTP/1.1 connection's request half.
pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Open one connection (`TCP_NODELAY`), its driver spawned on the current runtime.
pub async fn connect(host: &str) -> Result<Sender, PushError> {
    let stream = tokio::net::TcpStream::connect(host).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One push on an open connection; the body is read to the end so the connection can be
/// reused. An error means the connection is gone.
pub async fn push(
    sender: &mut Sender,
    target: &Target,
    uri: &http::Uri,
    body: Bytes,
    encoding: Encoding,
) -> Result<Answer, PushError> {
    let mut req = http::Request::new(Full::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri.clone();
    let h = req.headers_mut();
    h.insert(http::header::HOST, target.authority.clone());
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(encoding.content_type()),
    );
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let answer = Answer {
        status: resp.status().as_u16(),
        threshold: header(names::HEADER_THRESHOLD),
        quorum_met: header(names::HEADER_QUORUM_MET),
    };
    resp.into_body().collect().await?;
    Ok(answer)
}

/// A connection that re-opens itself on the next push after a failure.
#[derive(Debug)]
pub struct Connection {
    target: Target,
    sender: Option<Sender>,
}

impl Connection {
    pub fn new(target: Target) -> Self {
        Connection {
            target,
            sender: None,
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Push once; a failed push (or connect) drops the connection, the next push opens a
    /// new one.
    pub async fn push(
        &mut self,
        uri: &http::Uri,
        body: Bytes,
        encoding: Encoding,
    ) -> Result<Answer, PushError> {
        let sender = match &mut self.sender {
            Some(s) => s,
            None => self.sender.insert(connect(&self.target.host).await?),
        };
        match push(sender, &self.target, uri, body, encoding).await {
            Ok(a) => Ok(a),
            Err(e) => {
                self.sender = None;
                Err(e)
            }
        }
    }
}
