//! The API's listener: TCP, TLS 1.3 (unless plaintext was opted into), HTTP/1.1, routing,
//! the bearer token, the request-size and concurrency bounds.
//!
//! The token file is looked at (one `stat`) before each request, and read again when it
//! changed, so a rotated Secret takes effect from the next request, on open connections
//! too; a new file that does not give a token (empty, unreadable, not visible ASCII) keeps
//! the previous token (see [`crate::tlsfiles`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::sync::Semaphore;

use super::handlers::{self, Fail, QueryRequest};
use super::{ApiConfig, ApiError};
use crate::httpserve::stopped;
use crate::tlsfiles::{Reloading, Source};

/// A TLS handshake (or a request's headers) must arrive within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the kernel's accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// What a server serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config: ApiConfig,
    /// The store's file.
    pub db: PathBuf,
    /// This node's name (in every answer).
    pub node: String,
    /// Test only: added to the clock `/api/v1/time` reports (ns).
    pub clock_offset_ns: i64,
}

/// The bearer token as it is now: take it for each request.
pub type Token = Reloading<Arc<str>, String>;

/// `api.token_file`'s token, read again before a request when the file changed.
pub fn token(path: &std::path::Path) -> Result<Token, String> {
    let p = path.to_path_buf();
    Reloading::new(Source::ApiToken, vec![p.clone()], move || {
        crate::fleet::transport::read_token(&p)
            .map(Arc::from)
            .map_err(|e| e.to_string())
    })
}

struct State {
    opts: ServeOptions,
    token: Option<Token>,
    queries: Arc<Semaphore>,
}

/// A bound server, ready to [`ApiServer::run`].
pub struct ApiServer {
    listener: tokio::net::TcpListener,
    /// The TLS config, taken for each new connection (it changes when its files do).
    tls: Option<Arc<Reloading<Arc<rustls::ServerConfig>, ApiError>>>,
    state: Arc<State>,
    pub local_addr: SocketAddr,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("local_addr", &self.local_addr)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Check the configuration, build TLS (writing a generated certificate's PEM) and bind.
    pub async fn bind(opts: ServeOptions) -> Result<ApiServer, ApiError> {
        let mut errs = component::config::ConfigErrors::new();
        let mut c = opts.config.clone();
        c.enabled = true;
        c.validate_into(&mut errs);
        if !errs.is_empty() {
            return Err(ApiError::Config(errs.to_string()));
        }
        let addr: SocketAddr = c
            .listen
            .parse()
            .map_err(|e| ApiError::Config(format!("api.listen: {e}")))?;
        let token = match &c.token_file {
            Some(p) => {
                Some(token(p).map_err(|e| ApiError::Config(format!("api.token_file: {e}")))?)
            }
            None => None,
        };
        let tls = if c.no_tls {
            None
        } else {
            let tls = super::tls::server_config(&c, addr)?;
            if let Some(pem) = &tls.generated_pem
                && !c.generated_cert_path.as_os_str().is_empty()
            {
                if let Some(dir) = c.generated_cert_path.parent()
                    && !dir.as_os_str().is_empty()
                {
                    let _ = std::fs::create_dir_all(dir);
                }
                std::fs::write(&c.generated_cert_path, pem).map_err(|e| {
                    ApiError::Tls(format!(
                        "write the generated certificate to {}: {e}",
                        c.generated_cert_path.display()
                    ))
                })?;
            }
            Some(tls.config)
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ApiError::Listen(addr.to_string(), e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| ApiError::Listen(addr.to_string(), e))?;
        let queries = Arc::new(Semaphore::new(c.max_concurrent_queries));
        Ok(ApiServer {
            listener,
            tls,
            state: Arc::new(State {
                opts: ServeOptions { config: c, ..opts },
                token,
                queries,
            }),
            local_addr,
        })
    }

    /// Serve until `shutdown` holds `true`.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let conns = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok(permit) = conns.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = stopped(&mut shutdown) => return,
            };
            let Ok((tcp, _)) = accepted else { continue };
            let _ = tcp.set_nodelay(true);
            let state = self.state.clone();
            let tls = self.tls.clone();
            let conn_shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tls {
                    Some(tls) => {
                        // The files are looked at here, in the connection's task, not in
                        // the accept loop.
                        let a = tokio_rustls::TlsAcceptor::from(tls.get());
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, a.accept(tcp)).await {
                            Ok(Ok(tls)) => {
                                serve_conn(TokioIo::new(tls), state, conn_shutdown).await
                            }
                            Ok(Err(e)) => tracing::debug!(error = %e, "api: TLS handshake refused"),
                            Err(_) => tracing::debug!("api: TLS handshake timed out"),
                        }
                    }
                    None => serve_conn(TokioIo::new(tcp), state, conn_shutdown).await,
                }
            });
        }
    }
}

async fn serve_conn<I>(io: I, state: Arc<State>, mut shutdown: tokio::sync::watch::Receiver<bool>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(handle(req, state).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .max_buf_size(64 * 1024)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
    }
}

fn respond(status: u16, ctype: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    r
}

fn json_ok(v: &impl serde::Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_vec(v) {
        Ok(b) => respond(200, "application/json", b),
        Err(e) => fail(Fail::new(500, e.to_string())),
    }
}

fn fail(f: Fail) -> Response<Full<Bytes>> {
    let body = json!({"error": f.message}).to_string();
    respond(f.status, "application/json", body)
}

/// Constant-time comparison of the presented token.
fn token_ok(req: &Request<hyper::body::Incoming>, want: &str) -> bool {
    let Some(v) = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(got) = v.strip_prefix("Bearer ") else {
        return false;
    };
    let (a, b) = (got.as_bytes(), want.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn query_params(req: &Request<hyper::body::Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8()
                    .ok()
                    .map(|c| c.into_owned())
            };
            Some((dec(k)?, dec(v)?))
        })
        .collect()
}

fn since_param(
    p: &HashMap<String, String>,
    default: Option<&str>,
) -> Result<Option<Duration>, Fail> {
    match p.get("since").map(String::as_str).or(default) {
        Some(s) => super::parse_since(s)
            .map(Some)
            .map_err(|e| Fail::new(400, e)),
        None => Ok(None),
    }
}

/// Run a store read on a blocking thread, under the concurrency bound and the time limit.
async fn read_store<T, F>(state: &Arc<State>, f: F) -> Result<T, Fail>
where
    T: Send + 'static,
    F: FnOnce(&ServeOptions) -> Result<T, Fail> + Send + 'static,
{
    // The permit goes with the blocking task: a read past its deadline (Rust-side work that
    // SQLite's interrupt does not reach) still counts until it really ends.
    let Ok(permit) = state.queries.clone().try_acquire_owned() else {
        return Err(Fail::new(
            503,
            format!(
                "busy: {} queries running (api.max_concurrent_queries)",
                state.opts.config.max_concurrent_queries
            ),
        ));
    };
    let s = state.clone();
    let limit = state.opts.config.query_timeout;
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        f(&s.opts)
    });
    // SQLite is interrupted at the deadline; the extra second covers opening the file.
    match tokio::time::timeout(limit + Duration::from_secs(1), task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(Fail::new(500, format!("query task failed: {e}"))),
        Err(_) => Err(Fail::new(
            504,
            format!("query time limit of {limit:?} reached"),
        )),
    }
}

async fn handle(req: Request<hyper::body::Incoming>, state: Arc<State>) -> Response<Full<Bytes>> {
    if let Some(t) = &state.token
        && !token_ok(&req, &t.get())
    {
        let mut r = fail(Fail::new(401, "missing or wrong bearer token"));
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        return r;
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let params = query_params(&req);
    let cfg = &state.opts.config;
    match (method, path.as_str()) {
        (Method::GET, "/api/v1/time") => {
            let ts = super::now_ns().saturating_add(state.opts.clock_offset_ns);
            json_ok(&json!({"timestamp_ns": ts, "node": state.opts.node}))
        }
        (Method::POST, "/api/v1/query") => {
            let max = cfg.max_request_bytes;
            let body = match Limited::new(req.into_body(), max).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    let m = e.to_string();
                    return if m.contains("length limit") {
                        fail(Fail::new(
                            413,
                            format!("request body over {max} bytes (api.max_request_bytes)"),
                        ))
                    } else {
                        fail(Fail::new(400, format!("request body: {m}")))
                    };
                }
            };
            let q: QueryRequest = match serde_json::from_slice(&body) {
                Ok(q) => q,
                Err(e) => return fail(Fail::new(400, format!("invalid JSON body: {e}"))),
            };
            if q.sql.trim().is_empty() {
                return fail(Fail::new(400, "empty SQL statement"));
            }
            match read_store(&state, move |o| {
                handlers::sql(
                    &o.db,
                    &o.node,
                    &q,
                    o.config.max_rows,
                    o.config.query_timeout,
                )
            })
            .await
            {
                Ok(a) => json_ok(&a),
                Err(f) => fail(f),
            }
        }
        (Method::GET, "/api/v1/chains") => {
            let since = match since_param(&params, Some("5m")) {
                Ok(s) => s.unwrap_or(Duration::from_secs(300)),
                Err(f) => return fail(f),
            };
            let per_process = params
                .get("per_process")
                .is_some_and(|v| v == "1" || v == "true");
            match read_store(&state, move |o| {
                handlers::chains(&o.db, &o.node, since, per_process, o.config.query_timeout)
            })
            .await
            {
                Ok(v) => json_ok(&v),
                Err(f) => fail(f),
            }
        }
        (Method::GET, "/api/v1/ops") => {
            let since = match since_param(&params, Some("5m")) {
                Ok(s) => s.unwrap_or(Duration::from_secs(300)),
                Err(f) => return fail(f),
            };
            match read_store(&state, move |o| {
                handlers::ops(&o.db, &o.node, since, o.config.query_timeout)
            })
            .await
            {
                Ok(v) => json_ok(&v),
                Err(f) => fail(f),
            }
        }
        (Method::GET, "/api/v1/overview") => {
            match read_store(&state, move |o| {
                handlers::overview(&o.db, &o.node, o.config.query_timeout)
            })
            .await
            {
                Ok(v) => json_ok(&v),
                Err(f) => fail(f),
            }
        }
        (Method::GET, "/api/v1/export") => {
            if params.get("format").is_some_and(|f| f != "perfetto") {
                return fail(Fail::new(400, "format: only perfetto"));
            }
            let since = match since_param(&params, None) {
                Ok(s) => s,
                Err(f) => return fail(f),
            };
            let max =
                usize::try_from(cfg.max_response_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
            match read_store(&state, move |o| {
                handlers::export(&o.db, since, max, o.config.query_timeout)
            })
            .await
            {
                Ok(b) => respond(200, "application/json", b),
                Err(f) => fail(f),
            }
        }
        (
            _,
            "/api/v1/time" | "/api/v1/query" | "/api/v1/chains" | "/api/v1/ops"
            | "/api/v1/overview" | "/api/v1/export",
        ) => fail(Fail::new(405, "method not allowed")),
        _ => fail(Fail::new(404, format!("no endpoint {path}"))),
    }
}
