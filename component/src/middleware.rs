//! Ingest middlewares: what extensions add to every OTLP export a receiver takes, whatever
//! the transport (the idea of otelcol's `extensionmiddleware`, for the export calls only).
//!
//! A host's receiver reads the request's metadata ([`RequestMeta`]: transport, signal,
//! peer, `Authorization`, the cluster the request names), then:
//!
//! 1. every [`RequestMiddleware`] admits or refuses the request before its body is read
//!    (e.g. a bearer-token check) and returns an [`Admission`];
//! 2. after decoding, each [`Admission`] checks what the payload names (the clusters of its
//!    resources) before anything of the batch reaches a pipeline;
//! 3. every [`ResponseMiddleware`] adds response metadata (HTTP headers or gRPC metadata)
//!    for the export's cluster (e.g. the threshold headers of the Fleet agent protocol).
//!
//! Middlewares are synchronous and never block: they run on the request path of every push.

use std::borrow::Cow;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

pub use http::{HeaderName, HeaderValue};

/// How a request reached the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Grpc,
}

/// The OTLP signal of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Metrics,
    Traces,
    Logs,
}

impl Signal {
    pub const ALL: [Signal; 3] = [Signal::Metrics, Signal::Traces, Signal::Logs];

    /// `metrics`, `traces`, `logs` (pipeline ids, telemetry labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Metrics => "metrics",
            Signal::Traces => "traces",
            Signal::Logs => "logs",
        }
    }
}

/// More than one `Authorization` header (or metadata entry) on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatedHeader;

/// What a request middleware sees of an export before its body is read.
#[derive(Debug, Clone, Copy)]
pub struct RequestMeta<'a> {
    pub transport: Transport,
    pub signal: Signal,
    pub peer: Option<SocketAddr>,
    /// The single `Authorization` value (`Ok(None)`: absent; `Err`: repeated).
    pub authorization: Result<Option<&'a [u8]>, RepeatedHeader>,
    /// The scope the request names, as the binary's [`crate::scope::RequestScope`] reads
    /// it (Fleet: the cluster, from the `cluster_id` query parameter, a header or gRPC
    /// metadata), when present and well formed.
    pub cluster: Option<&'a str>,
}

/// The class of a refusal; the host maps it to an HTTP status and a gRPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    /// HTTP 401, gRPC `UNAUTHENTICATED`.
    Unauthenticated,
    /// HTTP 403, gRPC `PERMISSION_DENIED`.
    PermissionDenied,
    /// HTTP 429, gRPC `RESOURCE_EXHAUSTED`.
    ResourceExhausted,
    /// HTTP 400, gRPC `INVALID_ARGUMENT`.
    InvalidArgument,
    /// HTTP 503, gRPC `UNAVAILABLE`: the service is behind (e.g. a durable exporter's
    /// writer); the client retries after `retry_after_secs`.
    Unavailable,
}

impl RefusalCode {
    pub fn http_status(self) -> u16 {
        match self {
            RefusalCode::Unauthenticated => 401,
            RefusalCode::PermissionDenied => 403,
            RefusalCode::ResourceExhausted => 429,
            RefusalCode::InvalidArgument => 400,
            RefusalCode::Unavailable => 503,
        }
    }
}

/// A middleware's refusal of an export. Nothing of the batch has reached a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: RefusalCode,
    /// Sent to the client (HTTP body, gRPC status message).
    pub message: Cow<'static, str>,
    /// The host's `reason` label for the refused-requests counter.
    pub reason: &'static str,
    /// `Retry-After` (HTTP header, gRPC `retry-after` metadata), whole seconds.
    pub retry_after_secs: Option<u64>,
    /// `WWW-Authenticate` on an HTTP 401.
    pub challenge: Option<&'static str>,
}

impl Refusal {
    pub fn new(
        code: RefusalCode,
        reason: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Refusal {
            code,
            message: message.into(),
            reason,
            retry_after_secs: None,
            challenge: None,
        }
    }
}

/// A request middleware's state for one admitted export.
pub trait Admission: Send + Sync {
    /// Check the clusters the decoded payload's resources name (`None`: a resource names
    /// none). `Ok` means the export goes on; the middleware may record it as allowed.
    fn check_payload(
        &self,
        request_cluster: Option<&str>,
        resources: &mut dyn Iterator<Item = Option<&str>>,
    ) -> Result<(), Refusal>;

    /// The tenant the export is charged to (the token's identity), if any.
    fn tenant(&self) -> Option<Arc<str>> {
        None
    }
}

/// Admits or refuses exports before their body is read (e.g. bearer tokens).
pub trait RequestMiddleware: Send + Sync {
    fn admit(&self, meta: &RequestMeta<'_>) -> Result<Box<dyn Admission>, Refusal>;
}

/// Adds response metadata to exports.
pub trait ResponseMiddleware: Send + Sync {
    /// Call `out` with each (name, value) pair to attach to the response of an export
    /// whose cluster is `cluster` (the request's, else the first one its payload names).
    /// Names are HTTP header names for [`Transport::Http`] and lower-case gRPC metadata
    /// keys for [`Transport::Grpc`].
    fn response_metadata(
        &self,
        transport: Transport,
        cluster: &str,
        out: &mut dyn FnMut(&'static str, &HeaderValue),
    );

    /// The HTTP header names this middleware passes to `out`, each with its parsed form,
    /// so the host inserts them without parsing a name on every response (a name not
    /// listed here is parsed per insert).
    fn http_header_names(&self) -> &'static [(&'static str, HeaderName)] {
        &[]
    }
}

impl fmt::Debug for dyn RequestMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestMiddleware")
    }
}

impl fmt::Debug for dyn ResponseMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseMiddleware")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes_map_to_http_statuses() {
        let r = Refusal::new(RefusalCode::PermissionDenied, "forbidden", "no");
        assert_eq!(r.code.http_status(), 403);
        assert_eq!(RefusalCode::Unauthenticated.http_status(), 401);
        assert_eq!(RefusalCode::ResourceExhausted.http_status(), 429);
        assert_eq!(RefusalCode::InvalidArgument.http_status(), 400);
        assert_eq!(RefusalCode::Unavailable.http_status(), 503);
        assert_eq!(Signal::Logs.as_str(), "logs");
    }
}
