//! Typed configs of the host's own components (receivers, exporters, extensions other than
//! the Ingero ones) and of the `service` section, in otelcol's key names.

use std::collections::BTreeMap;
use std::time::Duration;

use component::config::{AuthRef, ComponentConfig, ConfigErrors, check, duration};
use serde::{Deserialize, Deserializer, Serialize};

pub use super::payload_limits::PayloadLimits;
pub use super::tls::ServerTlsConfig;

/// Treat a present key with a null value (`grpc:` in YAML) as "enabled with defaults".
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// A reference to a middleware extension (`middlewares: [{id: ingero_threshold}]`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MiddlewareRef {
    pub id: String,
}

pub const DEFAULT_MAX_REQUEST_BODY_SIZE: u64 = 20 * 1024 * 1024;

/// OTLP/HTTP's default paths (the OTLP specification's, as otelcol serves them).
pub const OTLP_METRICS_PATH: &str = "/v1/metrics";
pub const OTLP_TRACES_PATH: &str = "/v1/traces";
pub const OTLP_LOGS_PATH: &str = "/v1/logs";

/// `receivers.otlp.protocols.http`
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpServerConfig {
    pub endpoint: String,
    /// Cap on the request body, compressed and after decompression (bytes).
    pub max_request_body_size: u64,
    pub metrics_url_path: String,
    pub traces_url_path: String,
    pub logs_url_path: String,
    /// Explicit middleware list. Absent: the service's `ingero_threshold` extension (if
    /// any) is attached automatically.
    pub middlewares: Option<Vec<MiddlewareRef>>,
    #[serde(with = "duration")]
    pub read_header_timeout: Duration,
    /// Time allowed to receive a whole request body.
    #[serde(with = "duration")]
    pub read_timeout: Duration,
    /// How long a keep-alive connection may go without a request in service before it is
    /// closed (each idle HTTP/1.1 connection holds about 16 KiB of buffers); bytes that
    /// carry no request (HTTP/2 PINGs) do not count. hyper has one timer for "idle, then
    /// reading the next request's headers", so the effective limit for both is the
    /// smaller of this and `read_header_timeout`.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Cap on simultaneously open connections (0 = unlimited). At the cap a new
    /// connection evicts an idle one (the least recently used of the address holding the
    /// most), and is closed at accept only when every open one has a request in service.
    pub max_connections: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed.
    #[serde(with = "duration")]
    pub first_byte_timeout: Duration,
    /// Cap on connections open at once from one client address, TLS handshakes in
    /// progress included (0 = unlimited); beyond it a new connection evicts that
    /// address's least recently used idle connection, or is closed at accept when none is
    /// idle.
    pub max_connections_per_client: usize,
    /// Cap on OTLP requests being read and processed at once (0 = unlimited). Beyond it a
    /// request is answered 503 with `Retry-After` at once, before its body is read, so a
    /// flood cannot queue unbounded bodies (at most this many times
    /// `max_request_body_size` bytes are held).
    pub max_concurrent_requests: usize,
    /// `Retry-After` sent with that 503 (whole seconds, 1s to 1h).
    #[serde(with = "duration")]
    pub retry_after: Duration,
    /// Bearer tokens (`auth: {authenticator: ingero_auth}`); absent = no authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthRef>,
    /// Serve HTTPS (and mTLS with `client_ca_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTlsConfig>,
    /// Host names (`fleet.example.com`, or `host:port` for one port only) requests may be
    /// addressed to (Host header or HTTP/2 `:authority`) besides IP addresses; others are
    /// refused with 403 (`<prefix>requests_refused_total{reason="host_not_allowed"}`).
    /// Unset: no such check, except that a loopback listener without `auth` takes only
    /// local names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            endpoint: "127.0.0.1:4318".into(),
            max_request_body_size: DEFAULT_MAX_REQUEST_BODY_SIZE,
            metrics_url_path: OTLP_METRICS_PATH.into(),
            traces_url_path: OTLP_TRACES_PATH.into(),
            logs_url_path: OTLP_LOGS_PATH.into(),
            middlewares: None,
            read_header_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            idle_timeout: crate::conn_guard::DEFAULT_IDLE_TIMEOUT,
            max_connections: 4096,
            first_byte_timeout: crate::conn_guard::DEFAULT_FIRST_BYTE_TIMEOUT,
            max_connections_per_client: crate::conn_guard::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            max_concurrent_requests: 256,
            retry_after: Duration::from_secs(1),
            auth: None,
            tls: None,
            allowed_hosts: None,
        }
    }
}

/// `receivers.otlp.protocols.grpc`
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcServerConfig {
    pub endpoint: String,
    pub max_recv_msg_size_mib: u64,
    pub max_concurrent_streams: u32,
    pub middlewares: Option<Vec<MiddlewareRef>>,
    /// Cap on open connections (0 = unlimited); beyond it a new connection evicts an idle
    /// one (no call in service; the least recently used of the address holding the most),
    /// or is closed at accept when none is idle.
    pub max_connections: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed.
    #[serde(with = "duration")]
    pub first_byte_timeout: Duration,
    /// A connection with no call in service for this long is closed. HTTP/2 PINGs (the
    /// server's keepalive every 30s, or the client's) do not count as activity.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Cap on connections open at once from one client address, TLS handshakes in
    /// progress included (0 = unlimited); beyond it, as for `max_connections`, within
    /// that address.
    pub max_connections_per_client: usize,
    /// Cap on OTLP calls being read and processed at once, over all connections (0 =
    /// unlimited). Beyond it a call is answered `UNAVAILABLE` with a `RetryInfo` delay of
    /// `retry_after`, before its message is read.
    pub max_concurrent_requests: usize,
    /// Delay in that `RetryInfo` (whole seconds, 1s to 1h).
    #[serde(with = "duration")]
    pub retry_after: Duration,
    /// Bearer tokens in `authorization` metadata; absent = no authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthRef>,
    /// Serve gRPC over TLS (ALPN h2; mTLS with `client_ca_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTlsConfig>,
}

impl HttpServerConfig {
    /// The connection lifecycle limits of this listener.
    pub fn lifecycle(&self) -> crate::conn_guard::Lifecycle {
        crate::conn_guard::Lifecycle {
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_connections_per_client: self.max_connections_per_client,
        }
    }
}

impl GrpcServerConfig {
    /// The connection lifecycle limits of this listener.
    pub fn lifecycle(&self) -> crate::conn_guard::Lifecycle {
        crate::conn_guard::Lifecycle {
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_connections_per_client: self.max_connections_per_client,
        }
    }
}

impl Default for GrpcServerConfig {
    fn default() -> Self {
        GrpcServerConfig {
            endpoint: "127.0.0.1:4317".into(),
            max_recv_msg_size_mib: 4,
            max_concurrent_streams: 1024,
            middlewares: None,
            max_connections: 4096,
            first_byte_timeout: crate::conn_guard::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: crate::conn_guard::DEFAULT_IDLE_TIMEOUT,
            max_connections_per_client: crate::conn_guard::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            max_concurrent_requests: 256,
            retry_after: Duration::from_secs(1),
            auth: None,
            tls: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpProtocols {
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcServerConfig>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpServerConfig>,
}

/// `receivers.otlp`
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpReceiverConfig {
    pub protocols: OtlpProtocols,
    /// Sizes a decoded metrics export may carry (an Ingero addition to otelcol's keys).
    pub limits: PayloadLimits,
}

impl ComponentConfig for OtlpReceiverConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        if self.protocols.grpc.is_none() && self.protocols.http.is_none() {
            e.push("protocols", "must enable at least one of grpc, http");
        }
        self.limits.validate(&mut e, "limits");
        if let Some(h) = &self.protocols.http {
            check_endpoint(&mut e, "protocols.http.endpoint", &h.endpoint);
            if h.max_request_body_size == 0 {
                e.push("protocols.http.max_request_body_size", "must be > 0");
            }
            for (k, p) in [
                ("metrics_url_path", &h.metrics_url_path),
                ("traces_url_path", &h.traces_url_path),
                ("logs_url_path", &h.logs_url_path),
            ] {
                if !p.starts_with('/') {
                    e.push(
                        format!("protocols.http.{k}"),
                        format!("must start with '/', got {p:?}"),
                    );
                }
            }
            if h.read_header_timeout.is_zero() {
                e.push("protocols.http.read_header_timeout", "must be > 0");
            }
            if h.idle_timeout.is_zero() {
                e.push("protocols.http.idle_timeout", "must be > 0");
            }
            if h.read_timeout.is_zero() {
                e.push("protocols.http.read_timeout", "must be > 0");
            }
            if h.first_byte_timeout.is_zero() {
                e.push("protocols.http.first_byte_timeout", "must be > 0");
            }
            check_retry_after(&mut e, "protocols.http.retry_after", h.retry_after);
            component::listen_addr::check_allowed_hosts(
                &mut e,
                "protocols.http.allowed_hosts",
                h.allowed_hosts.as_deref(),
            );
        }
        if let Some(g) = &self.protocols.grpc {
            check_endpoint(&mut e, "protocols.grpc.endpoint", &g.endpoint);
            if g.max_recv_msg_size_mib == 0 || g.max_recv_msg_size_mib > 1024 {
                e.push(
                    "protocols.grpc.max_recv_msg_size_mib",
                    "must be in [1, 1024]",
                );
            }
            check_retry_after(&mut e, "protocols.grpc.retry_after", g.retry_after);
            if g.first_byte_timeout.is_zero() {
                e.push("protocols.grpc.first_byte_timeout", "must be > 0");
            }
            if g.idle_timeout.is_zero() {
                e.push("protocols.grpc.idle_timeout", "must be > 0");
            }
        }
        e.into_result()
    }
}

/// `Retry-After` / `RetryInfo` delays: whole seconds from 1s to 1h.
fn check_retry_after(e: &mut ConfigErrors, key: &str, d: Duration) {
    if d < Duration::from_secs(1) || d > Duration::from_secs(3600) || d.subsec_nanos() != 0 {
        e.push(key, "must be whole seconds between 1s and 1h");
    }
}

/// `exporters.debug`
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebugExporterConfig {
    pub verbosity: Verbosity,
}

impl Default for DebugExporterConfig {
    fn default() -> Self {
        DebugExporterConfig {
            verbosity: Verbosity::Basic,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Verbosity {
    Basic,
    Normal,
    Detailed,
}

impl ComponentConfig for DebugExporterConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        Ok(())
    }
}

/// `sending_queue` of the OTLP exporters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub enabled: bool,
    /// Batches held before new ones are dropped (and counted).
    pub queue_size: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            enabled: true,
            queue_size: 1000,
        }
    }
}

/// `retry_on_failure` of the OTLP exporters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub enabled: bool,
    #[serde(with = "duration")]
    pub initial_interval: Duration,
    #[serde(with = "duration")]
    pub max_interval: Duration,
    /// Give up on a batch after this long (0 = never).
    #[serde(with = "duration")]
    pub max_elapsed_time: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            enabled: true,
            initial_interval: Duration::from_secs(5),
            max_interval: Duration::from_secs(30),
            max_elapsed_time: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Gzip,
    None,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Proto,
    Json,
}

/// `tls` of the OTLP exporters. TLS is on unless `insecure: true` or an `http://`
/// endpoint; the server is verified against `ca_file` (PEM, else the system roots), and
/// `cert_file` + `key_file` present a client certificate (mTLS).
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTlsConfig {
    /// Plaintext (gRPC endpoints without a scheme).
    pub insecure: bool,
    /// CA bundle (PEM) the server's certificate must chain to; the system roots if unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Client certificate chain (PEM), with `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// Client private key (PEM), with `cert_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// The name the server's certificate is checked against, instead of the endpoint's host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name_override: Option<String>,
}

impl ClientTlsConfig {
    /// Whether any TLS file or name is set.
    pub fn configured(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name_override.is_some()
    }
}

/// `exporters.otlp` (gRPC) and `exporters.otlphttp`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpExporterConfig {
    pub endpoint: String,
    /// otlphttp only: full URL for metrics (default `endpoint` + `/v1/metrics`).
    pub metrics_endpoint: Option<String>,
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub headers: BTreeMap<String, String>,
    pub compression: Compression,
    /// otlphttp only.
    pub encoding: Encoding,
    pub tls: ClientTlsConfig,
    pub sending_queue: QueueConfig,
    pub retry_on_failure: RetryConfig,
}

impl Default for OtlpExporterConfig {
    fn default() -> Self {
        OtlpExporterConfig {
            endpoint: String::new(),
            metrics_endpoint: None,
            timeout: Duration::from_secs(5),
            headers: BTreeMap::new(),
            compression: Compression::Gzip,
            encoding: Encoding::Proto,
            tls: ClientTlsConfig::default(),
            sending_queue: QueueConfig::default(),
            retry_on_failure: RetryConfig::default(),
        }
    }
}

impl ComponentConfig for OtlpExporterConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        if self.endpoint.is_empty() {
            e.push("endpoint", "is required");
        }
        if self.timeout.is_zero() {
            e.push("timeout", "must be > 0");
        }
        if self.sending_queue.enabled && self.sending_queue.queue_size == 0 {
            e.push(
                "sending_queue.queue_size",
                "must be > 0 when the queue is enabled",
            );
        }
        let r = &self.retry_on_failure;
        if r.enabled && (r.initial_interval.is_zero() || r.max_interval < r.initial_interval) {
            e.push(
                "retry_on_failure",
                "initial_interval must be > 0 and <= max_interval",
            );
        }
        let t = &self.tls;
        if t.cert_file.is_some() != t.key_file.is_some() {
            e.push("tls", "cert_file and key_file go together");
        }
        for (key, f) in [
            ("tls.ca_file", &t.ca_file),
            ("tls.cert_file", &t.cert_file),
            ("tls.key_file", &t.key_file),
            ("tls.server_name_override", &t.server_name_override),
        ] {
            if f.as_deref() == Some("") {
                e.push(key, "must not be empty");
            }
        }
        if t.configured() && (t.insecure || self.endpoint.starts_with("http://")) {
            e.push(
                "tls",
                "ca_file, cert_file, key_file and server_name_override need TLS, but \
                 tls.insecure is true or the endpoint is http://",
            );
        }
        for (k, v) in &self.headers {
            if k.is_empty()
                || k.bytes()
                    .any(|b| b.is_ascii_control() || b == b':' || b == b' ')
            {
                e.push(format!("headers.{k}"), "invalid header name");
            }
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                e.push(
                    format!("headers.{k}"),
                    "header value must not contain CR, LF or NUL",
                );
            }
        }
        e.into_result()
    }
}

/// `extensions.health_check`
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckConfig {
    pub endpoint: String,
    pub path: String,
    /// Bearer tokens (any valid token); absent = open, as probes expect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthRef>,
    /// Open connections beyond which new ones are closed at accept (0 = unlimited).
    pub max_connections: usize,
    /// Connections open at once from one client address (0 = unlimited); beyond it a new
    /// connection evicts that address's least recently used idle one, or is closed at
    /// accept when none is idle.
    pub max_connections_per_client: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed.
    #[serde(with = "duration")]
    pub first_byte_timeout: Duration,
    /// A connection with no request in service this long is closed.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTlsConfig>,
    /// Host names (`fleet.example.com`, or `host:port` for one port only) requests may be
    /// addressed to (Host header or HTTP/2 `:authority`) besides IP addresses; others are
    /// refused with 403 (`<prefix>requests_refused_total{reason="host_not_allowed"}`).
    /// Unset: no such check, except that a loopback listener without `auth` takes only
    /// local names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            endpoint: "127.0.0.1:13133".into(),
            path: "/".into(),
            auth: None,
            max_connections: 1024,
            max_connections_per_client: crate::conn_guard::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            first_byte_timeout: crate::conn_guard::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: crate::conn_guard::DEFAULT_IDLE_TIMEOUT,
            tls: None,
            allowed_hosts: None,
        }
    }
}

impl ComponentConfig for HealthCheckConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        check_endpoint(&mut e, "endpoint", &self.endpoint);
        if !self.path.starts_with('/') {
            e.push("path", "must start with '/'");
        }
        check_lifecycle(&mut e, "", self.first_byte_timeout, self.idle_timeout);
        component::listen_addr::check_allowed_hosts(
            &mut e,
            "allowed_hosts",
            self.allowed_hosts.as_deref(),
        );
        e.into_result()
    }
}

impl HealthCheckConfig {
    /// The connection lifecycle limits of this listener.
    pub fn lifecycle(&self) -> crate::conn_guard::Lifecycle {
        crate::conn_guard::Lifecycle {
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_connections_per_client: self.max_connections_per_client,
        }
    }
}

/// `first_byte_timeout` and `idle_timeout` under `prefix` (`""` or `a.b.`) must be > 0.
pub fn check_lifecycle(e: &mut ConfigErrors, prefix: &str, first_byte: Duration, idle: Duration) {
    for (key, d) in [("first_byte_timeout", first_byte), ("idle_timeout", idle)] {
        if d.is_zero() {
            e.push(format!("{prefix}{key}"), "must be > 0");
        }
    }
}

/// One pipeline under `service.pipelines`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    pub receivers: Vec<String>,
    pub processors: Vec<String>,
    pub exporters: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogEncoding {
    #[default]
    Console,
    Json,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LogsTelemetry {
    pub level: LogLevel,
    pub encoding: LogEncoding,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetricsLevel {
    None,
    Basic,
    #[default]
    Normal,
    Detailed,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromPullExporter {
    pub host: String,
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTlsConfig>,
    /// Bearer-token check (`auth: {authenticator: ingero_auth}`, an Ingero addition): as
    /// on the prometheus exporter, a scrape needs a token scoped to every cluster (`"*"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthRef>,
    /// Connections open at once from one client address (an Ingero addition; 0 =
    /// unlimited); beyond it a new connection evicts that address's least recently used
    /// idle one, or is closed at accept when none is idle.
    pub max_connections_per_client: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed (an Ingero addition).
    #[serde(with = "duration")]
    pub first_byte_timeout: Duration,
    /// A connection with no request in service this long is closed (an Ingero addition).
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Host names (`fleet.example.com`, or `host:port` for one port only) requests may be
    /// addressed to (Host header or HTTP/2 `:authority`) besides IP addresses; others are
    /// refused with 403 (`<prefix>requests_refused_total{reason="host_not_allowed"}`).
    /// Unset: no such check, except that a loopback listener without `auth` takes only
    /// local names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for PromPullExporter {
    fn default() -> Self {
        PromPullExporter {
            host: "127.0.0.1".into(),
            port: 8888,
            tls: None,
            auth: None,
            max_connections_per_client: crate::conn_guard::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            first_byte_timeout: crate::conn_guard::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: crate::conn_guard::DEFAULT_IDLE_TIMEOUT,
            allowed_hosts: None,
        }
    }
}

impl PromPullExporter {
    /// The connection lifecycle limits of this listener.
    pub fn lifecycle(&self) -> crate::conn_guard::Lifecycle {
        crate::conn_guard::Lifecycle {
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_connections_per_client: self.max_connections_per_client,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PullExporter {
    pub prometheus: PromPullExporter,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PullReader {
    pub exporter: PullExporter,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricReader {
    pub pull: PullReader,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsTelemetry {
    pub level: MetricsLevel,
    pub readers: Vec<MetricReader>,
}

impl Default for MetricsTelemetry {
    fn default() -> Self {
        MetricsTelemetry {
            level: MetricsLevel::Normal,
            readers: vec![MetricReader::default()],
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub logs: LogsTelemetry,
    pub metrics: MetricsTelemetry,
}

/// `service`
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Allow listeners without `tls` on non-loopback addresses. Off by default: such a
    /// listener refuses to start (see [`PLAINTEXT_OPT_OUT_KEY`]).
    pub allow_plaintext_listeners: bool,
    pub extensions: Vec<String>,
    pub pipelines: BTreeMap<String, PipelineConfig>,
    pub telemetry: TelemetryConfig,
}

/// The one key that lets plaintext listeners bind non-loopback addresses.
pub const PLAINTEXT_OPT_OUT_KEY: &str = "service.allow_plaintext_listeners";

/// The whole document before component configs are decoded by their owners.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub receivers: BTreeMap<String, component::ConfigValue>,
    pub processors: BTreeMap<String, component::ConfigValue>,
    pub exporters: BTreeMap<String, component::ConfigValue>,
    pub extensions: BTreeMap<String, component::ConfigValue>,
    pub connectors: BTreeMap<String, component::ConfigValue>,
    pub service: ServiceConfig,
}

/// `host:port` where host is an IP, a bracketed IPv6 address or a DNS name, and port is
/// 0-65535.
pub fn check_endpoint(errs: &mut ConfigErrors, path: &str, endpoint: &str) {
    if parse_endpoint(endpoint).is_err() {
        errs.push(
            path,
            format!("must be host:port (e.g. 127.0.0.1:4318), got {endpoint:?}"),
        );
    }
}

/// Split `host:port`; `[::1]:4318` and `:4318` (all interfaces) are accepted.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let (host, port) = endpoint
        .rsplit_once(':')
        .ok_or_else(|| format!("missing port in {endpoint:?}"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("invalid port in {endpoint:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let ok = host.parse::<std::net::IpAddr>().is_ok()
        || (host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            }));
    if !ok {
        return Err(format!("invalid host in {endpoint:?}"));
    }
    Ok((host.to_string(), port))
}

/// Reusable check used by several validators.
pub fn check_positive(errs: &mut ConfigErrors, path: &str, v: f64) {
    check::positive_finite(errs, path, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::{decode, parse_yaml};

    #[test]
    fn null_protocol_means_enabled_with_defaults() {
        let v = parse_yaml(b"protocols:\n  grpc:\n  http:\n").unwrap();
        let c: OtlpReceiverConfig = decode(&v).unwrap();
        assert_eq!(c.protocols.grpc.unwrap().endpoint, "127.0.0.1:4317");
        let h = c.protocols.http.unwrap();
        assert_eq!(h.endpoint, "127.0.0.1:4318");
        assert_eq!(h.max_request_body_size, 20 * 1024 * 1024);
    }

    #[test]
    fn receiver_reports_every_error() {
        let v = parse_yaml(b"protocols:\n  http:\n    endpoint: nope\n    metrics_url_path: v1\n  grpc:\n    endpoint: ':x'\n").unwrap();
        let e = decode::<OtlpReceiverConfig>(&v).unwrap_err();
        let paths: Vec<_> = e.iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "protocols.http.endpoint",
                "protocols.http.metrics_url_path",
                "protocols.grpc.endpoint"
            ]
        );
    }

    #[test]
    fn connection_lifecycle_keys_have_defaults_and_refuse_zero_timeouts() {
        use crate::conn_guard::Lifecycle;
        let v = parse_yaml(b"protocols:\n  grpc:\n  http:\n").unwrap();
        let c: OtlpReceiverConfig = decode(&v).unwrap();
        assert_eq!(c.protocols.http.unwrap().lifecycle(), Lifecycle::default());
        assert_eq!(c.protocols.grpc.unwrap().lifecycle(), Lifecycle::default());
        let v = parse_yaml(b"protocols:\n  http:\n    first_byte_timeout: 2s\n    max_connections_per_client: 7\n  grpc:\n    idle_timeout: 5m\n").unwrap();
        let c: OtlpReceiverConfig = decode(&v).unwrap();
        let h = c.protocols.http.unwrap().lifecycle();
        assert_eq!(h.first_byte_timeout, Duration::from_secs(2));
        assert_eq!(h.max_connections_per_client, 7);
        assert_eq!(
            c.protocols.grpc.unwrap().lifecycle().idle_timeout,
            Duration::from_secs(300)
        );

        let v = parse_yaml(b"protocols:\n  http:\n    first_byte_timeout: 0s\n  grpc:\n    first_byte_timeout: 0s\n    idle_timeout: 0s\n").unwrap();
        let e = decode::<OtlpReceiverConfig>(&v).unwrap_err();
        let paths: Vec<_> = e.iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "protocols.http.first_byte_timeout",
                "protocols.grpc.first_byte_timeout",
                "protocols.grpc.idle_timeout"
            ]
        );

        let v = parse_yaml(b"protocols:\n  grpc:\n    first_byte_timout: 3s\n").unwrap();
        assert!(
            decode::<OtlpReceiverConfig>(&v).is_err(),
            "a misspelt key is refused"
        );
    }

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoint("0.0.0.0:4317").unwrap(),
            ("0.0.0.0".into(), 4317)
        );
        assert_eq!(parse_endpoint("[::1]:8080").unwrap(), ("::1".into(), 8080));
        assert_eq!(
            parse_endpoint("localhost:0").unwrap(),
            ("localhost".into(), 0)
        );
        assert_eq!(parse_endpoint(":9090").unwrap(), ("0.0.0.0".into(), 9090));
        for bad in ["4317", "host:99999", "a b:1", "x:-1"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}
