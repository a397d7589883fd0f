//! MCP on the agent (`ingero-agent mcp`), with the official Rust SDK (`rmcp`): stdio, or
//! streamable HTTP on a loopback address.
//!
//! Tools:
//! - `query_fleet(action = chains | sql | ops | overview, since, query, limit)`: the fan-out
//!   to `fleet.nodes` (or `--nodes`); clock-skew warnings and failed nodes come first in the
//!   answer;
//! - this node's store: `get_causal_chains(since, per_process)`, `get_trace_stats(since)`,
//!   `run_sql(query, since, limit)`, `get_overview()`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use crate::api::handlers::{self, QueryRequest};
use crate::fanout::{FanoutClient, FanoutConfig, actions};

/// What the MCP server reads and whom it asks.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// This node's store.
    pub db: PathBuf,
    pub node: String,
    /// The agents `query_fleet` asks.
    pub nodes: Vec<String>,
    pub fanout: FanoutConfig,
    /// Bounds on the local tools (the API's).
    pub max_rows: usize,
    pub query_timeout: Duration,
}

#[derive(Clone)]
pub struct AgentMcp {
    opts: Arc<McpOptions>,
    client: Option<FanoutClient>,
    client_error: Option<String>,
}

impl std::fmt::Debug for AgentMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentMcp")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    }
}

const SINCE_DOC: &str = "How far back from each node's newest record, e.g. 5m, 1h (default 5m)";

pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "query_fleet",
            "Ask every configured Ingero agent at once and merge the answers: chains (causal chains, most severe first, on this host's clock), ops (per-op latency per node), overview (counts per node), sql (one read-only SQL statement, rows with a node column). Nodes that did not answer are named with the reason; clock-skew warnings come first.",
            schema(json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["chains", "ops", "overview", "sql"]},
                    "since": {"type": "string", "description": SINCE_DOC},
                    "query": {"type": "string", "description": "SQL for action sql (SQLite, read-only; :since is bound)"},
                    "sql": {"type": "string", "description": "Alias of query"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Rows per node at most (sql)"}
                },
                "required": ["action"]
            })),
        ),
        Tool::new(
            "get_causal_chains",
            "Causal chains on this node: what its GPU calls waited on (CPU contention, block I/O), with severity, root cause and fix.",
            schema(json!({
                "type": "object",
                "properties": {
                    "since": {"type": "string", "description": SINCE_DOC},
                    "per_process": {"type": "boolean"}
                }
            })),
        ),
        Tool::new(
            "get_trace_stats",
            "Per-operation latency on this node (count, p50/p95/p99 from timed calls; counts and totals from per-second aggregates).",
            schema(json!({
                "type": "object",
                "properties": {"since": {"type": "string", "description": SINCE_DOC}}
            })),
        ),
        Tool::new(
            "run_sql",
            "One read-only SQL statement over this node's store (tables events, event_aggregates, causal_chains, ops, sources, sessions, process_names, stack_traces). :since is bound to the cut-off.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "since": {"type": "string", "description": SINCE_DOC},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["query"]
            })),
        ),
        Tool::new(
            "get_overview",
            "Counts on this node's store: events, aggregates, chains, sessions, time range, the most severe chain.",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ]
}

fn text_result(notes: &str, body: &Value) -> CallToolResult {
    let pretty = serde_json::to_string_pretty(body).unwrap_or_default();
    let mut r = CallToolResult::success(vec![ContentBlock::text(format!("{notes}{pretty}"))]);
    r.structured_content = Some(body.clone());
    r
}

fn tool_error(msg: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(msg.into())])
}

fn arg_str<'a>(a: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    a.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn arg_limit(a: &Map<String, Value>) -> Result<Option<usize>, String> {
    match a.get("limit") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n > 0)
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| format!("limit must be a positive integer, got {v}")),
    }
}

impl AgentMcp {
    pub fn new(opts: McpOptions) -> Self {
        let (client, client_error) = if opts.nodes.is_empty() {
            (None, None)
        } else {
            match FanoutClient::new(&opts.fanout) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(e)),
            }
        };
        AgentMcp {
            opts: Arc::new(opts),
            client,
            client_error,
        }
    }

    async fn local<F>(&self, f: F) -> CallToolResult
    where
        F: FnOnce(&McpOptions) -> Result<Value, handlers::Fail> + Send + 'static,
    {
        let o = self.opts.clone();
        match tokio::task::spawn_blocking(move || f(&o)).await {
            Ok(Ok(v)) => text_result("", &v),
            Ok(Err(e)) => tool_error(e.message),
            Err(e) => tool_error(format!("tool task failed: {e}")),
        }
    }

    async fn query_fleet(&self, a: &Map<String, Value>) -> CallToolResult {
        let Some(c) = &self.client else {
            return tool_error(self.client_error.clone().unwrap_or_else(|| {
                "no fleet nodes configured: set fleet.nodes in the agent's config or pass --nodes"
                    .into()
            }));
        };
        let nodes = &self.opts.nodes;
        let th = self.opts.fanout.clock_skew_threshold;
        let since = arg_str(a, "since").unwrap_or("5m");
        let action = arg_str(a, "action").unwrap_or("").to_ascii_lowercase();
        let (body, outcome) = match action.as_str() {
            "sql" => {
                let Some(q) = arg_str(a, "query").or_else(|| arg_str(a, "sql")) else {
                    return tool_error("action sql needs query (the SQL statement)");
                };
                let limit = match arg_limit(a) {
                    Ok(l) => l,
                    Err(e) => return tool_error(e),
                };
                match actions::sql(c, nodes, q, Some(since), limit, th).await {
                    Ok((t, truncated, o)) => (
                        json!({"columns": t.columns, "rows": t.rows, "truncated": truncated}),
                        o,
                    ),
                    Err(e) => return tool_error(e),
                }
            }
            "chains" => match actions::chains(c, nodes, since, false, th).await {
                Ok((r, o)) => (
                    json!({"chains": r.chains, "unexplained": r.unexplained, "calls": r.calls}),
                    o,
                ),
                Err(e) => return tool_error(e),
            },
            "ops" => match actions::ops(c, nodes, since, th).await {
                Ok((v, o)) => (json!({"nodes": v.into_iter().collect::<Map<_, _>>()}), o),
                Err(e) => return tool_error(e),
            },
            "overview" => {
                let (v, o) = actions::overview(c, nodes, th).await;
                (json!({"nodes": v.into_iter().collect::<Map<_, _>>()}), o)
            }
            other => {
                return tool_error(format!(
                    "unknown action {other:?}: one of chains, sql, ops, overview"
                ));
            }
        };
        let mut body = body;
        body["answered"] = json!(outcome.answered);
        body["failed"] = json!(outcome.failed);
        body["clock_skew"] = json!(outcome.clock_skew);
        body["warnings"] = json!(outcome.warnings);
        if outcome.answered.is_empty() {
            let mut r = text_result(&outcome.notes(), &body);
            r.is_error = Some(true);
            return r;
        }
        text_result(&outcome.notes(), &body)
    }

    async fn call(&self, name: &str, a: Map<String, Value>) -> Result<CallToolResult, ErrorData> {
        let since = match arg_str(&a, "since")
            .map(crate::api::parse_since)
            .transpose()
        {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e)),
        };
        Ok(match name {
            "query_fleet" => self.query_fleet(&a).await,
            "get_causal_chains" => {
                let since = since.unwrap_or(Duration::from_secs(300));
                let pp = a
                    .get("per_process")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.local(move |o| handlers::chains(&o.db, &o.node, since, pp, o.query_timeout))
                    .await
            }
            "get_trace_stats" => {
                let since = since.unwrap_or(Duration::from_secs(300));
                self.local(move |o| handlers::ops(&o.db, &o.node, since, o.query_timeout))
                    .await
            }
            "run_sql" => {
                let Some(q) = arg_str(&a, "query").or_else(|| arg_str(&a, "sql")) else {
                    return Ok(tool_error("query (the SQL statement) is required"));
                };
                let limit = match arg_limit(&a) {
                    Ok(l) => l,
                    Err(e) => return Ok(tool_error(e)),
                };
                let req = QueryRequest {
                    sql: q.to_string(),
                    limit,
                    since: arg_str(&a, "since").map(str::to_string),
                };
                self.local(move |o| {
                    handlers::sql(&o.db, &o.node, &req, o.max_rows, o.query_timeout).and_then(|a| {
                        serde_json::to_value(a).map_err(|e| handlers::Fail::new(500, e.to_string()))
                    })
                })
                .await
            }
            "get_overview" => {
                self.local(move |o| handlers::overview(&o.db, &o.node, o.query_timeout))
                    .await
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        })
    }
}

impl ServerHandler for AgentMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                crate::AGENT_NAME,
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Ingero agent: why a GPU node is slow. query_fleet asks every configured agent; the other tools read this node's store.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        self.call(&request.name, args).await.map(Into::into)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }
}

/// Serve MCP on stdin/stdout until the client closes it.
pub async fn serve_stdio(server: AgentMcp) -> Result<(), String> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("mcp: {e}"))?;
    running.waiting().await.map_err(|e| format!("mcp: {e}"))?;
    Ok(())
}

/// Serve MCP over streamable HTTP at `/mcp` on `listener` (a loopback address: MCP over
/// HTTP has no authentication here) until `shutdown` holds `true`.
pub async fn serve_http(
    server: AgentMcp,
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let ct = tokio_util::sync::CancellationToken::new();
    let mut cfg = StreamableHttpServerConfig::default();
    cfg.cancellation_token = ct.clone();
    let svc = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        cfg,
    );
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = crate::httpserve::stopped(&mut shutdown) => {
                ct.cancel();
                return;
            }
        };
        let Ok((tcp, _)) = accepted else { continue };
        let svc = svc.clone();
        tokio::spawn(async move {
            let hs =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let mut svc = svc.clone();
                    async move {
                        if req.uri().path() != "/mcp" {
                            let mut r = http::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"not found"))
                                    .boxed(),
                            );
                            *r.status_mut() = http::StatusCode::NOT_FOUND;
                            return Ok::<_, std::convert::Infallible>(r);
                        }
                        use tower_service::Service;
                        svc.call(req).await
                    }
                });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tcp), hs)
                .await;
        });
    }
}

/// Bind the MCP HTTP listener, refusing a non-loopback address.
pub async fn bind_http(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    if !addr.ip().is_loopback() {
        return Err(format!(
            "mcp --http {addr}: only a loopback address (MCP over HTTP has no authentication here)"
        ));
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("mcp --http {addr}: {e}"))
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
