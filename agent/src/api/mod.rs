//! The agent's query API (`api.enabled`, off by default): read-only HTTPS endpoints over the
//! node's event store, for `ingero-agent query|explain|export --nodes ...` and MCP's
//! `query_fleet` on another machine.
//!
//! - TLS 1.3 only. The certificate is `api.tls_cert`/`api.tls_key`, or an ECDSA P-256
//!   certificate generated at start (its PEM written to `api.generated_cert_path`, for the
//!   clients' `--ca-cert`). `api.client_ca` requires a client certificate signed by it
//!   (mTLS); `api.token_file` requires `Authorization: Bearer <token>`.
//! - Plaintext only with `api.no_tls`, and then only on a loopback address unless
//!   `api.allow_plaintext_non_loopback` forces it.
//! - Read-only: the store is opened read-only per request, SQL goes through the same
//!   authorizer as `ingero-agent query`.
//! - Bounded: rows per answer, time per query (SQLite is interrupted), request body size,
//!   queries at once (the rest are answered 503), and the size of an export.
//!
//! Endpoints (JSON): `GET /api/v1/time`, `POST /api/v1/query`, `GET /api/v1/chains`,
//! `GET /api/v1/ops`, `GET /api/v1/overview`, `GET /api/v1/export` (Perfetto JSON).

pub mod handlers;
pub mod server;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

use component::config::{ConfigErrors, duration};
use serde::{Deserialize, Serialize};

pub use server::{ApiServer, ServeOptions};

/// Default listen address when the API is enabled.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
pub const DEFAULT_GENERATED_CERT_PATH: &str = "/var/lib/ingero/api-cert.pem";
pub const DEFAULT_MAX_ROWS: usize = 10_000;
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 * 1024;
pub const DEFAULT_MAX_CONCURRENT_QUERIES: usize = 4;
pub const DEFAULT_MAX_RESPONSE_MB: u64 = 64;

/// `api` in the agent's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Serve the query API (the agent is outbound-only without it).
    pub enabled: bool,
    /// `ip:port` to listen on.
    pub listen: String,
    /// Server certificate chain (PEM); with `tls_key`. Neither: a generated one.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Where the generated certificate's PEM is written (empty: not written).
    pub generated_cert_path: PathBuf,
    /// CA (PEM) that client certificates must chain to (mTLS); absent: no client certificate.
    pub client_ca: Option<PathBuf>,
    /// File holding the bearer token every request must carry.
    pub token_file: Option<PathBuf>,
    /// Serve plain HTTP (only on a loopback address unless forced).
    pub no_tls: bool,
    /// With `no_tls`: allow a non-loopback listen address.
    pub allow_plaintext_non_loopback: bool,
    /// Rows per query answer at most (a request may ask for fewer).
    pub max_rows: usize,
    /// Time one query, chain analysis or export may take.
    #[serde(with = "duration")]
    pub query_timeout: Duration,
    /// Largest request body.
    pub max_request_bytes: usize,
    /// Store reads running at once; more are answered 503.
    pub max_concurrent_queries: usize,
    /// Largest export answer (MiB).
    pub max_response_mb: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            enabled: false,
            listen: DEFAULT_LISTEN.into(),
            tls_cert: None,
            tls_key: None,
            generated_cert_path: PathBuf::from(DEFAULT_GENERATED_CERT_PATH),
            client_ca: None,
            token_file: None,
            no_tls: false,
            allow_plaintext_non_loopback: false,
            max_rows: DEFAULT_MAX_ROWS,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_concurrent_queries: DEFAULT_MAX_CONCURRENT_QUERIES,
            max_response_mb: DEFAULT_MAX_RESPONSE_MB,
        }
    }
}

impl ApiConfig {
    /// Every problem, with its key path.
    pub fn validate_into(&self, errs: &mut ConfigErrors) {
        if !self.enabled {
            return;
        }
        let addr: Option<std::net::SocketAddr> = match self.listen.parse() {
            Ok(a) => Some(a),
            Err(e) => {
                errs.push(
                    "api.listen",
                    format!("{:?}: {e} (want ip:port)", self.listen),
                );
                None
            }
        };
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            errs.push(
                "api.tls_cert",
                "tls_cert and tls_key must be given together",
            );
        }
        if self.no_tls {
            if self.tls_cert.is_some() || self.client_ca.is_some() {
                errs.push(
                    "api.no_tls",
                    "cannot be combined with tls_cert or client_ca",
                );
            }
            if let Some(a) = addr
                && !a.ip().is_loopback()
                && !self.allow_plaintext_non_loopback
            {
                errs.push(
                    "api.no_tls",
                    format!(
                        "plaintext only on a loopback address ({a} is not); use TLS, or set api.allow_plaintext_non_loopback"
                    ),
                );
            }
        }
        if self.max_rows == 0 {
            errs.push("api.max_rows", "must be > 0");
        }
        if self.query_timeout < Duration::from_millis(10) {
            errs.push("api.query_timeout", "must be >= 10ms");
        }
        if self.max_request_bytes < 1024 {
            errs.push("api.max_request_bytes", "must be >= 1024");
        }
        if self.max_concurrent_queries == 0 {
            errs.push("api.max_concurrent_queries", "must be > 0");
        }
        if self.max_response_mb == 0 {
            errs.push("api.max_response_mb", "must be > 0");
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Config(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("listen {0}: {1}")]
    Listen(String, std::io::Error),
}

/// Wall-clock now in Unix ns.
pub fn now_ns() -> i64 {
    i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(i64::MAX)
}

/// Parse a `since` duration text (`5m`, `250ms`); bounded to 10 years so the cut-off stays in
/// range.
pub fn parse_since(s: &str) -> Result<Duration, String> {
    let d = component::config::parse_duration(s).map_err(|e| format!("since: {e}"))?;
    if d > Duration::from_secs(10 * 365 * 86_400) {
        return Err(format!("since: {s:?} is longer than 10 years"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_only_on_loopback_unless_forced() {
        let mut c = ApiConfig {
            enabled: true,
            no_tls: true,
            listen: "0.0.0.0:8080".into(),
            ..Default::default()
        };
        let mut e = ConfigErrors::new();
        c.validate_into(&mut e);
        assert!(e.to_string().contains("api.no_tls"), "{e}");
        c.allow_plaintext_non_loopback = true;
        let mut e = ConfigErrors::new();
        c.validate_into(&mut e);
        assert!(e.is_empty(), "{e}");
        c.allow_plaintext_non_loopback = false;
        c.listen = "127.0.0.9:8080".into();
        let mut e = ConfigErrors::new();
        c.validate_into(&mut e);
        assert!(e.is_empty(), "{e}");
    }

    #[test]
    fn since_is_bounded() {
        assert_eq!(parse_since("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_since("100000000h").unwrap_err().contains("10 years"));
        assert!(parse_since("soon").is_err());
    }
}
