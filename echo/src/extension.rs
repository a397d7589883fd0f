//! The `echo_api` extension: one listener with the HTTP+JSON API (`/api/v1/tools/...`,
//! `/openapi.json`) and MCP over streamable HTTP (`/mcp`), behind the host's bearer tokens
//! (`auth:` names an `ingero_auth` instance: constant-time compare, rate limits, audit log
//! with token fingerprints). The `echo` exporter attaches its store at start.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use collector_host::auth::gate::{self, authorization};
use collector_host::auth::tokens::Scope as TokenScope;
use collector_host::auth::{Action, AuthExtension, Denial, ListenerAuth};
use collector_host::server::{self, Body, Handler, ListenerStats, ServerOptions, response};
use collector_host::tls::ListenerTls;
use component::api::ServedListener;
use component::factory::{ExtensionFactory, Kind, Metadata};
use component::{
    ComponentId, ConfigErrors, ConfigValue, Extension, Host, MetricFamily, Stability, StartError,
};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::config::ApiConfig;
use crate::mcp::{self, ToolsSlot};
use crate::query::{Scope, Tools};
use crate::schema;
use crate::store::Store;

pub static METADATA: Metadata = Metadata {
    kind: Kind::Extension,
    type_name: crate::API_TYPE,
    aliases: &[],
    stability: [Some(Stability::Alpha), None, None],
    module: "echo/src/extension.rs",
    singleton: false,
    // The host takes `tls` out of the config, checks it with its own listeners' and hands
    // the acceptor over at start (`served_listeners`, `Host::listener_tls`).
    host_tls: true,
    description: "the HTTP+JSON query API, its OpenAPI 3.1 document and the MCP server over the store",
    reads: None,
};

/// Builds `echo_api` extensions.
#[derive(Debug)]
pub struct EchoApiFactory;

pub static API_FACTORY: EchoApiFactory = EchoApiFactory;

impl ExtensionFactory for EchoApiFactory {
    fn metadata(&self) -> &'static Metadata {
        &METADATA
    }

    fn create(
        &self,
        id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Extension>, ConfigErrors> {
        let cfg: ApiConfig = component::config::decode(cfg)?;
        Ok(Arc::new(EchoApi::new(&id.to_string(), cfg)))
    }
}

/// Time a request body has to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// One `echo_api` instance (its state is shared with the listener's handler).
pub struct EchoApi {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    cfg: ApiConfig,
    tools: ToolsSlot,
    auth: OnceLock<ListenerAuth>,
    shutdown: watch::Sender<bool>,
    started: AtomicBool,
    /// Requests by (route, status).
    requests: Mutex<HashMap<(&'static str, u16), u64>>,
    /// The address the listener bound (the port when configured as 0).
    bound: OnceLock<SocketAddr>,
}

impl std::fmt::Debug for EchoApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoApi")
            .field("id", &self.inner.id)
            .finish()
    }
}

fn json_response(status: u16, v: &Value) -> Response<Body> {
    let mut r = response(status, "application/json", v.to_string());
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    r
}

fn error(status: u16, msg: &str) -> Response<Body> {
    json_response(status, &json!({ "error": msg }))
}

impl EchoApi {
    pub fn new(id: &str, cfg: ApiConfig) -> EchoApi {
        EchoApi {
            inner: Arc::new(Inner {
                id: id.to_string(),
                cfg,
                tools: Arc::new(OnceLock::new()),
                auth: OnceLock::new(),
                shutdown: watch::channel(false).0,
                started: AtomicBool::new(false),
                requests: Mutex::new(HashMap::new()),
                bound: OnceLock::new(),
            }),
        }
    }

    /// The id of the exporter whose store this listener serves.
    pub fn exporter_id(&self) -> &str {
        &self.inner.cfg.exporter
    }

    /// Serve `store` (called by the exporter at its start).
    pub fn attach(&self, store: Arc<Store>) -> Result<(), String> {
        if self.inner.tools.get().is_some() {
            return Ok(());
        }
        let t = Tools::new(store, self.inner.cfg.query.clone())?;
        let _ = self.inner.tools.set(Arc::new(t));
        Ok(())
    }

    /// The tools, once a store is attached (in-process users and tests).
    pub fn tools(&self) -> Option<Arc<Tools>> {
        self.inner.tools.get().cloned()
    }

    /// The address the listener bound (the port when configured as 0).
    pub fn bound(&self) -> Option<SocketAddr> {
        self.inner.bound.get().copied()
    }
}

impl Inner {
    fn count(&self, route: &'static str, status: u16) {
        *self.requests.lock().entry((route, status)).or_default() += 1;
    }

    /// Check the bearer token (when `auth` is configured): the caller's scope, or the
    /// refusal to send.
    #[allow(clippy::result_large_err)]
    fn authorize(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Option<(Arc<collector_host::auth::tokens::TokenEntry>, Scope)>, Response<Body>>
    {
        let Some(auth) = self.auth.get() else {
            return Ok(None);
        };
        match auth.check(authorization(headers), Some(peer), Action::Query, None) {
            Ok(entry) => {
                let scope = match &entry.scope {
                    TokenScope::All => Scope::All,
                    TokenScope::Clusters(set) => {
                        let mut v: Vec<String> = set.iter().map(|c| c.to_string()).collect();
                        v.sort();
                        Scope::Clusters(v)
                    }
                };
                Ok(Some((entry, scope)))
            }
            Err(d) => Err(gate::json_denial(d)),
        }
    }

    /// Audit an authorized request for `cluster` (a cluster outside the scope is recorded
    /// as forbidden; the tool answers it as unknown).
    fn audit(
        &self,
        who: &Option<(Arc<collector_host::auth::tokens::TokenEntry>, Scope)>,
        peer: SocketAddr,
        cluster: Option<&str>,
    ) {
        let (Some(auth), Some((entry, scope))) = (self.auth.get(), who) else {
            return;
        };
        match cluster {
            Some(c) if !scope.allows(c) => {
                auth.deny(entry, Some(peer), Action::Query, Some(c), Denial::Forbidden)
            }
            c => auth.allowed(entry, Some(peer), Action::Query, c),
        }
    }

    /// A browser's `Origin` (sent with every cross-site POST, `text/plain` ones included)
    /// must name an allowed host, as `Host` must for `/mcp`; clients that send none (every
    /// non-browser client) pass. `Origin: null` (sandboxed pages, files) is refused.
    fn origin_allowed(&self, req: &Request<Incoming>) -> bool {
        let Some(origin) = req.headers().get(http::header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let Some((_, rest)) = origin.split_once("://") else {
            return false;
        };
        let authority = rest.split('/').next().unwrap_or("");
        self.name_allowed(authority)
    }

    /// Whether `full` (`host[:port]`, IPv6 in brackets) is a loopback name or, when set, in
    /// `allowed_hosts` (by name or with its port).
    fn name_allowed(&self, full: &str) -> bool {
        let name = if full.starts_with('[') {
            full.split_inclusive(']').next().unwrap_or("").to_string()
        } else {
            full.split(':').next().unwrap_or("").to_string()
        };
        if self.cfg.allowed_hosts.is_empty() {
            matches!(
                name.to_ascii_lowercase().as_str(),
                "localhost" | "127.0.0.1" | "[::1]"
            )
        } else {
            self.cfg
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&name) || h.eq_ignore_ascii_case(full))
        }
    }

    fn host_allowed(&self, req: &Request<Incoming>) -> bool {
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        let Some(full) = host else { return false };
        self.name_allowed(&full)
    }

    #[allow(clippy::result_large_err)]
    async fn body(&self, req: Request<Incoming>) -> Result<Bytes, Response<Body>> {
        let limit = self.cfg.max_request_body_bytes;
        let read =
            tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), limit).collect())
                .await;
        match read {
            Err(_) => Err(error(408, "timed out reading the request body")),
            Ok(Err(_)) => Err(error(
                413,
                &format!("the request body is too large or broken (limit {limit} bytes)"),
            )),
            Ok(Ok(b)) => Ok(b.to_bytes()),
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let (route, resp) = match (method, path.as_str()) {
            (Method::GET, "/openapi.json") => (
                "openapi",
                json_response(200, &schema::openapi(env!("CARGO_PKG_VERSION"))),
            ),
            (Method::GET, "/api/v1/tools") => (
                "list_tools",
                match self.authorize(req.headers(), peer) {
                    Err(r) => r,
                    Ok(who) => {
                        self.audit(&who, peer, None);
                        let tools: Vec<Value> = schema::tools()
                        .into_iter()
                        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input, "output_schema": t.output}))
                        .collect();
                        json_response(200, &json!({ "tools": tools }))
                    }
                },
            ),
            (Method::POST, p) if p.starts_with("/api/v1/tools/") => {
                let name = p.trim_start_matches("/api/v1/tools/").to_string();
                ("tool", self.clone().tool(req, peer, name).await)
            }
            (Method::POST, "/mcp") => ("mcp", self.clone().mcp(req, peer).await),
            (_, "/mcp") => {
                let mut r = error(
                    405,
                    "MCP over streamable HTTP: POST JSON-RPC messages to /mcp (no server-sent stream is offered)",
                );
                r.headers_mut()
                    .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
                ("mcp", r)
            }
            (_, "/openapi.json" | "/api/v1/tools") => {
                let mut r = error(405, "method not allowed");
                r.headers_mut()
                    .insert(http::header::ALLOW, http::HeaderValue::from_static("GET"));
                ("other", r)
            }
            (_, p) if p.starts_with("/api/v1/tools/") => {
                let mut r = error(
                    405,
                    "tools are called with POST and a JSON object of arguments",
                );
                r.headers_mut()
                    .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
                ("tool", r)
            }
            _ => ("other", error(404, "not found; see /openapi.json")),
        };
        self.count(route, resp.status().as_u16());
        resp
    }

    async fn tool(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: SocketAddr,
        name: String,
    ) -> Response<Body> {
        if !self.origin_allowed(&req) {
            return error(
                403,
                "Origin not allowed (a browser page of another site; set extensions.echo_api.allowed_hosts)",
            );
        }
        let who = match self.authorize(req.headers(), peer) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let body = match self.body(req).await {
            Ok(b) => b,
            Err(r) => return r,
        };
        let args: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            match serde_json::from_slice(&body) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return error(400, "the body must be a JSON object of arguments"),
                Err(e) => return error(400, &format!("the body is not JSON: {e}")),
            }
        };
        let cluster = args
            .get("cluster_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.audit(&who, peer, cluster.as_deref());
        let scope = who.map(|(_, s)| s).unwrap_or(Scope::All);
        let Some(tools) = self.tools.get().cloned() else {
            return error(503, "the store is not open yet");
        };
        let out = tokio::task::spawn_blocking(move || tools.call(&name, args, &scope)).await;
        match out {
            Ok(Ok(v)) => json_response(200, &v),
            Ok(Err(e)) => error(e.status(), &e.to_string()),
            Err(_) => error(500, "the query failed"),
        }
    }

    async fn mcp(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        if !self.host_allowed(&req) {
            return error(
                403,
                "Host header not allowed for /mcp (set extensions.echo_api.allowed_hosts)",
            );
        }
        if !self.origin_allowed(&req) {
            return error(
                403,
                "Origin not allowed (a browser page of another site; set extensions.echo_api.allowed_hosts)",
            );
        }
        let who = match self.authorize(req.headers(), peer) {
            Ok(w) => w,
            Err(r) => return r,
        };
        let body = match self.body(req).await {
            Ok(b) => b,
            Err(r) => return r,
        };
        let msg: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return json_response(
                    400,
                    &json!({"jsonrpc": "2.0", "id": null, "error": {"code": mcp::code::PARSE_ERROR, "message": format!("parse error: {e}")}}),
                );
            }
        };
        let cluster = msg
            .pointer("/params/arguments/cluster_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.audit(&who, peer, cluster.as_deref());
        let scope = who.map(|(_, s)| s).unwrap_or(Scope::All);
        let tools = self.tools.clone();
        let out = tokio::task::spawn_blocking(move || mcp::handle(&tools, &msg, &scope)).await;
        match out {
            Ok(Some(v)) => json_response(200, &v),
            Ok(None) => {
                let mut r = response(202, "application/json", "");
                *r.status_mut() = StatusCode::ACCEPTED;
                r
            }
            Err(_) => error(500, "the request failed"),
        }
    }

    fn handler(self: &Arc<Self>) -> Handler {
        let me = self.clone();
        Arc::new(move |req, peer| {
            let me = me.clone();
            Box::pin(async move { me.handle(req, peer).await })
        })
    }
}

impl Extension for EchoApi {
    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        let me = &self.inner;
        if me.started.swap(true, Relaxed) {
            return Ok(());
        }
        if let Some(a) = &me.cfg.auth {
            let id = ComponentId::parse(&a.authenticator).map_err(StartError::Other)?;
            let ext = AuthExtension::find(host, &id)
                .ok_or_else(|| StartError::MissingExtension(a.authenticator.clone()))?;
            let _ = me.auth.set(ext.listener(&format!("{}/http", me.id)));
        }
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            StartError::Other("echo_api must start inside the host's runtime".into())
        })?;
        let std = std::net::TcpListener::bind(&me.cfg.endpoint).map_err(|e| {
            StartError::Other(format!(
                "endpoint: cannot listen on {}: {e}",
                me.cfg.endpoint
            ))
        })?;
        std.set_nonblocking(true)
            .map_err(|e| StartError::Other(format!("endpoint: {e}")))?;
        if let Ok(a) = std.local_addr() {
            let _ = me.bound.set(a);
            tracing::info!(listener = %format!("{}/http", me.id), addr = %a, "listening");
        }
        let listener = {
            let _g = rt.enter();
            tokio::net::TcpListener::from_std(std)
                .map_err(|e| StartError::Other(format!("endpoint: {e}")))?
        };
        let tls = host
            .listener_tls("endpoint")
            .and_then(|t| t.downcast::<ListenerTls>().ok());
        let opts = ServerOptions {
            name: format!("{}/http", me.id),
            header_read_timeout: Duration::from_secs(10),
            max_connections: me.cfg.max_connections,
            tls,
            lifecycle: Default::default(),
        };
        let stats = Arc::new(ListenerStats {
            listener: opts.name.clone(),
            ..Default::default()
        });
        rt.spawn(server::serve(
            listener,
            opts,
            me.handler(),
            me.shutdown.subscribe(),
            Duration::from_secs(5),
            stats,
        ));
        if crate::stdio_mcp_requested() {
            let tools = me.tools.clone();
            rt.spawn(async move {
                mcp::serve_stdio(tools).await;
                crate::stdio_closed_notify();
            });
        }
        Ok(())
    }

    fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
    }

    fn served_listeners(&self) -> Vec<ServedListener> {
        vec![ServedListener {
            name: "http",
            endpoint_key: "endpoint",
            endpoint: self.inner.cfg.endpoint.clone(),
        }]
    }

    fn as_any(self: Arc<Self>) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self)
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        use crate::telemetry::{LABEL_EXTENSION, LABEL_ROUTE, LABEL_STATUS, spec};
        let me = &self.inner;
        let mut f = spec::API_REQUESTS.family();
        let mut all: Vec<((&'static str, u16), u64)> =
            me.requests.lock().iter().map(|(k, v)| (*k, *v)).collect();
        all.sort();
        for ((route, status), n) in all {
            let s = status.to_string();
            f.push(
                &[
                    (LABEL_EXTENSION, me.id.as_str()),
                    (LABEL_ROUTE, route),
                    (LABEL_STATUS, &s),
                ],
                n as f64,
            );
        }
        out.push(f);
    }
}
