//! What each endpoint reads from the store. Every function opens the database read-only,
//! installs a deadline (SQLite's progress handler interrupts the statement once it passes)
//! and returns JSON, or an error with the HTTP status it is answered with.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::investigate::{explain, export, query};
use crate::store::schema::has_column;

/// An error answer: status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    pub status: u16,
    pub message: String,
}

impl Fail {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Fail {
            status,
            message: message.into(),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> Fail {
    let m = e.to_string();
    if m.contains("interrupted") {
        Fail::new(504, "query time limit reached (interrupted)")
    } else {
        Fail::new(500, m)
    }
}

fn investigate_fail(e: crate::investigate::InvestigateError) -> Fail {
    use crate::investigate::InvestigateError as E;
    match e {
        E::Refused(m) => Fail::new(400, format!("refused: {m}")),
        E::Sql(e) => {
            let m = e.to_string();
            if m.contains("interrupted") {
                Fail::new(504, "query time limit reached (interrupted)")
            } else {
                Fail::new(400, format!("sql: {m}"))
            }
        }
        other => internal(other),
    }
}

/// Open the store read-only with a deadline.
pub fn open(db: &Path, timeout: Duration) -> Result<Connection, Fail> {
    let conn = crate::store::open_read_only(db)
        .map_err(|e| Fail::new(503, format!("store not readable: {e}")))?;
    let deadline = Instant::now() + timeout;
    conn.progress_handler(1000, Some(move || Instant::now() > deadline));
    Ok(conn)
}

/// The `:since` cut-off: `d` back from the newest event (the same as `ingero-agent query`).
pub fn cutoff(conn: &Connection, d: Option<Duration>) -> Result<Option<i64>, Fail> {
    let Some(d) = d else { return Ok(None) };
    let newest: Option<i64> = conn
        .query_row("SELECT MAX(timestamp) FROM events", [], |r| r.get(0))
        .map_err(internal)?;
    let back = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    Ok(Some(newest.unwrap_or(0).saturating_sub(back)))
}

/// `POST /api/v1/query` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub sql: String,
    /// Rows at most (capped by `api.max_rows`).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Binds `:since` to this far back from the newest event.
    #[serde(default)]
    pub since: Option<String>,
}

/// `POST /api/v1/query` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryAnswer {
    pub node: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    pub truncated: bool,
}

pub fn sql(
    db: &Path,
    node: &str,
    req: &QueryRequest,
    max_rows: usize,
    timeout: Duration,
) -> Result<QueryAnswer, Fail> {
    let since = req
        .since
        .as_deref()
        .map(super::parse_since)
        .transpose()
        .map_err(|e| Fail::new(400, e))?;
    let limit = req.limit.unwrap_or(max_rows).min(max_rows);
    let conn = open(db, timeout)?;
    let since = cutoff(&conn, since)?;
    let (t, truncated) = query::run_bounded(&conn, &req.sql, since.or(Some(i64::MIN)), limit)
        .map_err(investigate_fail)?;
    Ok(QueryAnswer {
        node: node.to_string(),
        columns: t.columns,
        rows: t.rows,
        truncated,
    })
}

/// `GET /api/v1/chains?since=&per_process=`: `explain` over the store (not saved).
pub fn chains(
    db: &Path,
    node: &str,
    since: Duration,
    per_process: bool,
    timeout: Duration,
) -> Result<Value, Fail> {
    let conn = open(db, timeout)?;
    let report = explain::explain(&conn, &explain::ExplainOptions { since, per_process })
        .map_err(investigate_fail)?;
    let mut v = serde_json::to_value(&report).map_err(internal)?;
    v["node"] = json!(node);
    Ok(v)
}

#[derive(Debug, Default)]
struct OpDurations {
    source: String,
    durs: Vec<i64>,
}

fn pct(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `GET /api/v1/ops?since=`: per op, from the timed events (count and percentiles) and from
/// the per-second aggregates (count, total and mean duration).
pub fn ops(db: &Path, node: &str, since: Duration, timeout: Duration) -> Result<Value, Fail> {
    let conn = open(db, timeout)?;
    let cut = cutoff(&conn, Some(since))?.unwrap_or(i64::MIN);
    let mut per: BTreeMap<String, OpDurations> = BTreeMap::new();
    {
        let mut st = conn
            .prepare(
                "SELECT COALESCE(s.name, 'source' || e.source),
                        COALESCE(o.name, 'op' || e.source || '.' || e.op), e.duration
                 FROM events e LEFT JOIN sources s ON s.id = e.source
                 LEFT JOIN ops o ON o.source_id = e.source AND o.op_id = e.op
                 WHERE e.timestamp >= ?1",
            )
            .map_err(internal)?;
        let mut rows = st.query([cut]).map_err(internal)?;
        while let Some(r) = rows.next().map_err(internal)? {
            let (src, name, dur): (String, String, i64) = (
                r.get(0).map_err(internal)?,
                r.get(1).map_err(internal)?,
                r.get(2).map_err(internal)?,
            );
            let e = per.entry(name).or_default();
            e.source = src;
            e.durs.push(dur);
        }
    }
    let mut ops = Vec::new();
    for (name, mut d) in per {
        d.durs.sort_unstable();
        let n = d.durs.len();
        let sum: i128 = d.durs.iter().map(|v| i128::from(*v)).sum();
        ops.push(json!({
            "operation": name, "source": d.source, "count": n, "mode": "events",
            "p50_us": pct(&d.durs, 0.5) / 1000, "p95_us": pct(&d.durs, 0.95) / 1000,
            "p99_us": pct(&d.durs, 0.99) / 1000,
            "avg_us": (sum / (n.max(1) as i128)) as i64 / 1000,
            "min_us": d.durs.first().copied().unwrap_or(0) / 1000,
            "max_us": d.durs.last().copied().unwrap_or(0) / 1000,
        }));
    }
    let mut st = conn
        .prepare(
            "SELECT COALESCE(s.name, 'source' || a.source),
                    COALESCE(o.name, 'op' || a.source || '.' || a.op),
                    SUM(a.count), SUM(a.sum_dur), MAX(a.max_dur)
             FROM event_aggregates a LEFT JOIN sources s ON s.id = a.source
             LEFT JOIN ops o ON o.source_id = a.source AND o.op_id = a.op
             WHERE a.bucket >= ?1 GROUP BY a.source, a.op ORDER BY a.source, a.op",
        )
        .map_err(internal)?;
    let mut rows = st.query([cut]).map_err(internal)?;
    while let Some(r) = rows.next().map_err(internal)? {
        let (src, name, count, sum, max): (String, String, i64, i64, i64) = (
            r.get(0).map_err(internal)?,
            r.get(1).map_err(internal)?,
            r.get(2).map_err(internal)?,
            r.get(3).map_err(internal)?,
            r.get(4).map_err(internal)?,
        );
        ops.push(json!({
            "operation": name, "source": src, "count": count, "mode": "aggregate",
            "sum_us": sum / 1000, "avg_us": sum / count.max(1) / 1000, "max_us": max / 1000,
        }));
    }
    Ok(json!({"node": node, "since_ns": cut, "ops": ops}))
}

/// `GET /api/v1/overview`: counts, time range and the most severe stored chain.
pub fn overview(db: &Path, node: &str, timeout: Duration) -> Result<Value, Fail> {
    let conn = open(db, timeout)?;
    let count = |sql: &str| -> Result<i64, Fail> {
        conn.query_row(sql, [], |r| r.get(0)).map_err(internal)
    };
    let events = count("SELECT count(*) FROM events")?;
    let aggregates = count("SELECT count(*) FROM event_aggregates")?;
    let chains = count("SELECT count(*) FROM causal_chains")?;
    let sessions = count("SELECT count(*) FROM sessions")?;
    let (oldest, newest): (Option<i64>, Option<i64>) = conn
        .query_row(
            "SELECT MIN(timestamp), MAX(timestamp) FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(internal)?;
    let nodes = explain::nodes(&conn).map_err(investigate_fail)?;
    let chain_node = if has_column(&conn, "causal_chains", "node").map_err(internal)? {
        "node"
    } else {
        "''"
    };
    let top: Option<Value> = conn
        .query_row(
            &format!(
                "SELECT id, severity, summary, root_cause, detected_at, {chain_node} FROM causal_chains
                 ORDER BY CASE severity WHEN 'HIGH' THEN 0 WHEN 'MEDIUM' THEN 1 ELSE 2 END,
                 detected_at DESC LIMIT 1"
            ),
            [],
            |r| {
                Ok(json!({
                    "id": r.get::<_, String>(0)?, "severity": r.get::<_, String>(1)?,
                    "summary": r.get::<_, String>(2)?, "root_cause": r.get::<_, String>(3)?,
                    "detected_at": r.get::<_, i64>(4)?, "node": r.get::<_, String>(5)?,
                }))
            },
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(internal(e)),
        })?;
    Ok(json!({
        "node": node, "event_count": events, "aggregate_rows": aggregates,
        "chain_count": chains, "session_count": sessions, "oldest_ns": oldest,
        "newest_ns": newest, "store_nodes": nodes, "top_chain": top,
    }))
}

/// `GET /api/v1/export?since=`: the store as Perfetto JSON, refused over `max_bytes`.
pub fn export(
    db: &Path,
    since: Option<Duration>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<u8>, Fail> {
    let conn = open(db, timeout)?;
    let cut = cutoff(&conn, since)?;
    let mut buf = Vec::new();
    export::perfetto(&conn, cut, &mut buf).map_err(investigate_fail)?;
    if buf.len() > max_bytes {
        return Err(Fail::new(
            413,
            format!(
                "export is {} bytes, over the limit of {max_bytes} (api.max_response_mb); narrow since",
                buf.len()
            ),
        ));
    }
    Ok(buf)
}
