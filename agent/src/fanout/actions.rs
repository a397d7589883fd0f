//! The fan-out actions the CLI and MCP share: SQL, chains, ops, overview, Perfetto export.

use std::time::Duration;

use http::Method;
use serde_json::Value;

use super::FanoutClient;
use super::merge::{self, Outcome};
use crate::api::handlers::{QueryAnswer, QueryRequest};
use crate::investigate::explain::Report;
use crate::investigate::query::Table;

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A `since` the agents will accept, checked here first so a bad one fails once, clearly.
pub fn check_since(since: &str) -> Result<(), String> {
    crate::api::parse_since(since).map(|_| ())
}

/// The same statement on every node; one table with a `node` column.
pub async fn sql(
    c: &FanoutClient,
    nodes: &[String],
    statement: &str,
    since: Option<&str>,
    limit: Option<usize>,
    threshold: Duration,
) -> Result<(Table, bool, Outcome), String> {
    if let Some(s) = since {
        check_since(s)?;
    }
    if statement.trim().is_empty() {
        return Err("empty SQL statement".into());
    }
    let body = serde_json::to_vec(&QueryRequest {
        sql: statement.to_string(),
        limit,
        since: since.map(str::to_string),
    })
    .map_err(|e| e.to_string())?;
    let mut answers = c
        .fan_out::<QueryAnswer>(nodes, Method::POST, "/api/v1/query", Some(body))
        .await;
    let (t, truncated) = merge::table(&mut answers);
    Ok((t, truncated, Outcome::of(&answers, threshold)))
}

/// Every node's chains on this host's clock.
pub async fn chains(
    c: &FanoutClient,
    nodes: &[String],
    since: &str,
    per_process: bool,
    threshold: Duration,
) -> Result<(Report, Outcome), String> {
    check_since(since)?;
    let path = format!(
        "/api/v1/chains?since={}{}",
        enc(since),
        if per_process { "&per_process=1" } else { "" }
    );
    let mut answers = c.fan_out::<Value>(nodes, Method::GET, &path, None).await;
    let r = merge::chains(&mut answers);
    Ok((r, Outcome::of(&answers, threshold)))
}

/// A JSON endpoint's answer per node (`ops`, `overview`).
pub async fn per_node(
    c: &FanoutClient,
    nodes: &[String],
    path: &str,
    threshold: Duration,
) -> (Vec<(String, Value)>, Outcome) {
    let answers = c.fan_out::<Value>(nodes, Method::GET, path, None).await;
    let o = Outcome::of(&answers, threshold);
    let ok = answers
        .into_iter()
        .filter_map(|a| a.result.ok().map(|v| (a.node, v)))
        .collect();
    (ok, o)
}

pub async fn ops(
    c: &FanoutClient,
    nodes: &[String],
    since: &str,
    threshold: Duration,
) -> Result<(Vec<(String, Value)>, Outcome), String> {
    check_since(since)?;
    Ok(per_node(
        c,
        nodes,
        &format!("/api/v1/ops?since={}", enc(since)),
        threshold,
    )
    .await)
}

pub async fn overview(
    c: &FanoutClient,
    nodes: &[String],
    threshold: Duration,
) -> (Vec<(String, Value)>, Outcome) {
    per_node(c, nodes, "/api/v1/overview", threshold).await
}

/// One Perfetto trace of every node.
pub async fn perfetto(
    c: &FanoutClient,
    nodes: &[String],
    since: Option<&str>,
    threshold: Duration,
) -> Result<(Value, Outcome), String> {
    let path = match since {
        Some(s) => {
            check_since(s)?;
            format!("/api/v1/export?format=perfetto&since={}", enc(s))
        }
        None => "/api/v1/export?format=perfetto".to_string(),
    };
    let mut answers = c.fan_out::<Value>(nodes, Method::GET, &path, None).await;
    let v = merge::perfetto(&mut answers);
    Ok((v, Outcome::of(&answers, threshold)))
}
