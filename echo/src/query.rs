//! The query tools, the same set on the HTTP API and over MCP: input structs, the SQL
//! behind each, and the JSON they answer. Every tool takes the caller's [`Scope`]: a
//! cluster outside it answers exactly as an unknown cluster, listings leave it out, and
//! `run_analysis` (arbitrary SQL) needs a token scoped to every cluster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use duckdb::types::ValueRef;
use duckdb::{Connection, params, params_from_iter};
use gpu_rates::provider::ProviderAliases;
use gpu_rates::rates::RateTable;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::QueryConfig;
use crate::rollup::{self, HEALTH_PARTS, health_params};
use crate::sandbox::{SandboxError, SqlSandbox};
use crate::store::{Store, now_ns};

pub const SUMMARY: &str = "fleet.cluster.summary";
pub const EVENT_HISTORY: &str = "fleet.cluster.event_history";
pub const FIND_OUTLIER_NODES: &str = "fleet.cluster.find_outlier_nodes";
pub const NCCL: &str = "fleet.cluster.nccl";
pub const GET_COST: &str = "fleet.cluster.get_cost";
pub const RUN_ANALYSIS: &str = "fleet.cluster.run_analysis";
pub const NCCL_TRACE: &str = "fleet.cluster.nccl_trace";
pub const HISTORY: &str = "fleet.cluster.history";

/// Every tool, in listing order.
pub const TOOLS: [&str; 8] = [
    SUMMARY,
    EVENT_HISTORY,
    FIND_OUTLIER_NODES,
    NCCL,
    GET_COST,
    RUN_ANALYSIS,
    NCCL_TRACE,
    HISTORY,
];

/// The longest window a tool accepts.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// Which clusters a caller may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Clusters(Vec<String>),
}

impl Scope {
    pub fn allows(&self, cluster: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Clusters(c) => c.iter().any(|x| x == cluster),
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Scope::All)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("invalid arguments: {0}")]
    BadArgs(String),
    #[error("unknown cluster {0:?}")]
    UnknownCluster(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Sandbox(SandboxError),
    #[error("store error: {0}")]
    Store(String),
    #[error("the query ran past the {0:?} time limit and was interrupted")]
    Timeout(Duration),
    #[error("{0}")]
    Busy(String),
    #[error(
        "the query was interrupted: Echo's resident memory passed query.memory_budget_mib ({0} MiB) while it ran; ask for less (filter, aggregate, LIMIT) or retry later"
    )]
    OverMemory(u64),
}

impl ToolError {
    /// The HTTP status of the error.
    pub fn status(&self) -> u16 {
        match self {
            ToolError::UnknownTool(_) | ToolError::UnknownCluster(_) => 404,
            ToolError::BadArgs(_) => 400,
            ToolError::Forbidden(_) => 403,
            ToolError::Sandbox(SandboxError::Timeout(_)) => 408,
            ToolError::Sandbox(SandboxError::Refused(_)) => 400,
            ToolError::Sandbox(SandboxError::Failed(_)) => 422,
            ToolError::Store(_) => 500,
            ToolError::Timeout(_) => 408,
            ToolError::Busy(_) | ToolError::OverMemory(_) => 503,
        }
    }
}

impl From<duckdb::Error> for ToolError {
    fn from(e: duckdb::Error) -> Self {
        ToolError::Store(e.to_string())
    }
}

impl From<crate::store::StoreError> for ToolError {
    fn from(e: crate::store::StoreError) -> Self {
        ToolError::Store(e.to_string())
    }
}

/// How long a query that was interrupted has to come back before its caller is answered
/// anyway (a single scalar call, e.g. one huge string, does not see the interrupt until it
/// returns; the query keeps its slot of `max_concurrent` until then).
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryArgs {
    cluster_id: Option<String>,
    window: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterArgs {
    cluster_id: String,
    window: Option<String>,
    node_id: Option<String>,
    op_type: Option<String>,
    limit: Option<usize>,
    step: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnalysisArgs {
    sql: String,
    max_rows: Option<usize>,
}

/// A DuckDB value as JSON: numbers as numbers (NaN and infinities as null), text as text,
/// blobs as hex, times as ISO 8601 text (UTC), lists, arrays and structs as JSON arrays and
/// objects, maps as arrays of `{"key", "value"}`.
pub fn value_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Boolean(b) => json!(b),
        ValueRef::TinyInt(i) => json!(i),
        ValueRef::SmallInt(i) => json!(i),
        ValueRef::Int(i) => json!(i),
        ValueRef::BigInt(i) => json!(i),
        ValueRef::HugeInt(i) => {
            i64::try_from(i).map_or_else(|_| json!(i.to_string()), |i| json!(i))
        }
        ValueRef::UTinyInt(i) => json!(i),
        ValueRef::USmallInt(i) => json!(i),
        ValueRef::UInt(i) => json!(i),
        ValueRef::UBigInt(i) => json!(i),
        ValueRef::Float(f) => {
            serde_json::Number::from_f64(f64::from(f)).map_or(Value::Null, Value::Number)
        }
        ValueRef::Double(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(hex::encode(b)),
        other => owned_json(other.to_owned()),
    }
}

fn owned_json(v: duckdb::types::Value) -> Value {
    use duckdb::types::Value as D;
    match v {
        D::Null => Value::Null,
        D::Boolean(b) => json!(b),
        D::TinyInt(i) => json!(i),
        D::SmallInt(i) => json!(i),
        D::Int(i) => json!(i),
        D::BigInt(i) => json!(i),
        D::HugeInt(i) => i64::try_from(i).map_or_else(|_| json!(i.to_string()), |i| json!(i)),
        D::UHugeInt(i) => u64::try_from(i).map_or_else(|_| json!(i.to_string()), |i| json!(i)),
        D::UTinyInt(i) => json!(i),
        D::USmallInt(i) => json!(i),
        D::UInt(i) => json!(i),
        D::UBigInt(i) => json!(i),
        D::Float(f) => f64_json(Some(f64::from(f))),
        D::Double(f) => f64_json(Some(f)),
        D::Decimal(d) => {
            let exact = d.to_string();
            let short = if exact.contains('.') {
                exact.trim_end_matches('0').trim_end_matches('.')
            } else {
                exact.as_str()
            };
            // A number when a double carries it exactly, else its exact text.
            match short.parse::<f64>() {
                Ok(f) if f.is_finite() && f.to_string() == short => f64_json(Some(f)),
                _ => Value::String(exact),
            }
        }
        D::Timestamp(unit, n) => Value::String(iso_timestamp(to_micros(unit, n))),
        D::Date32(days) => Value::String(civil(i64::from(days))),
        D::Time64(unit, n) => Value::String(time_of_day(to_micros(unit, n))),
        D::Interval {
            months,
            days,
            nanos,
        } => json!({"months": months, "days": days, "nanos": nanos}),
        D::Text(t) | D::Enum(t) => Value::String(t),
        D::Blob(b) | D::Geometry(b) => Value::String(hex::encode(b)),
        D::List(l) | D::Array(l) => Value::Array(l.into_iter().map(owned_json).collect()),
        D::Struct(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), owned_json(v.clone())))
                .collect(),
        ),
        D::Map(m) => Value::Array(
            m.iter()
                .map(|(k, v)| json!({"key": owned_json(k.clone()), "value": owned_json(v.clone())}))
                .collect(),
        ),
        D::Union(v) => owned_json(*v),
        #[allow(unreachable_patterns)]
        other => Value::String(format!("{other:?}")),
    }
}

fn to_micros(unit: duckdb::types::TimeUnit, n: i64) -> i64 {
    use duckdb::types::TimeUnit as U;
    match unit {
        U::Second => n.saturating_mul(1_000_000),
        U::Millisecond => n.saturating_mul(1_000),
        U::Microsecond => n,
        U::Nanosecond => n.div_euclid(1_000),
    }
}

/// The date (`YYYY-MM-DD`) of a day count since 1970-01-01 (proleptic Gregorian).
fn civil(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn time_of_day(micros: i64) -> String {
    let us = micros.rem_euclid(86_400_000_000);
    let (s, frac) = (us / 1_000_000, us % 1_000_000);
    format!("{:02}:{:02}:{:02}.{frac:06}", s / 3600, s / 60 % 60, s % 60)
}

fn iso_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    format!("{}T{}Z", civil(days), time_of_day(micros))
}

/// Cell `i` of a row as JSON; a column of DuckDB's NULL type (`SELECT NULL`) is null
/// (the row accessor has no value for it).
pub fn cell_json(row: &duckdb::Row<'_>, i: usize) -> Result<Value, duckdb::Error> {
    let stmt: &duckdb::Statement<'_> = row.as_ref();
    if matches!(
        stmt.column_type(i),
        duckdb::arrow::datatypes::DataType::Null
    ) {
        return Ok(Value::Null);
    }
    Ok(value_json(row.get_ref(i)?))
}

/// A window or step: a duration (`90s`, `15m`, `1h30m`), or whole days (`7d`).
fn parse_span(s: &str) -> Result<Duration, String> {
    if let Some(days) = s.trim().strip_suffix('d')
        && !days.is_empty()
        && days.bytes().all(|b| b.is_ascii_digit())
    {
        return days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(24 * 3600))
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{s:?}: too many days"));
    }
    component::config::parse_duration(s).map_err(|e| e.to_string())
}

fn f64_json(v: Option<f64>) -> Value {
    v.and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// Every tool of one store.
pub struct Tools {
    store: Arc<Store>,
    sandbox: SqlSandbox,
    cfg: QueryConfig,
    rates: Option<RateTable>,
    /// Spellings of providers (`aws`, `Amazon`) to the rate table's ids (`ec2`).
    aliases: ProviderAliases,
    /// Queries running now (their threads), at most `cfg.max_concurrent`.
    running: AtomicUsize,
    /// `query.memory_budget_mib`, or what its 0 stands for.
    budget_mib: u64,
    /// Queries running now per cluster-scoped caller (see [`Tools::admit`]).
    per_scope: parking_lot::Mutex<std::collections::HashMap<Vec<String>, usize>>,
}

/// A slot of `max_concurrent`, given back when the query's thread ends.
struct Slot {
    tools: Arc<Tools>,
    /// The scope of a cluster-scoped caller, counted in `Tools::per_scope`.
    scope: Option<Vec<String>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.tools.running.fetch_sub(1, Relaxed);
        if let Some(k) = &self.scope {
            let mut m = self.tools.per_scope.lock();
            if let Some(n) = m.get_mut(k) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(k);
                }
            }
        }
    }
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("store", &self.store).finish()
    }
}

fn parse<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, ToolError> {
    let args = if args.is_null() { json!({}) } else { args };
    // The schemas type every argument without `null`: an argument given as null is an
    // error, not an omitted one (serde would read it as `None`).
    if let Some((k, _)) = args
        .as_object()
        .and_then(|m| m.iter().find(|(_, v)| v.is_null()))
    {
        return Err(ToolError::BadArgs(format!(
            "{k}: must not be null (omit it instead)"
        )));
    }
    serde_json::from_value(args).map_err(|e| ToolError::BadArgs(e.to_string()))
}

impl Tools {
    pub fn new(store: Arc<Store>, cfg: QueryConfig) -> Result<Tools, String> {
        let aliases = ProviderAliases::builtin();
        let rates = match RateTable::builtin(&aliases) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "the built-in GPU rate table did not load; get_cost uses no rates");
                None
            }
        };
        let budget_mib = match cfg.memory_budget_mib {
            0 => crate::config::memory_limit_bytes(&store.cfg.memory_limit)
                .map_or(0, |b| (b >> 20) + 512),
            n => n,
        };
        store.watch_memory(budget_mib << 20);
        Ok(Tools {
            budget_mib,
            store,
            sandbox: SqlSandbox::new()?,
            cfg,
            rates,
            aliases,
            running: AtomicUsize::new(0),
            per_scope: Default::default(),
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Run a tool by name with JSON arguments for a caller that sees `scope`, under the
    /// query limits: at most `max_concurrent` queries at once (503 beyond), each on a thread
    /// of its own and interrupted at `timeout` (the SQL check included); the caller is
    /// answered by `timeout` plus a second whatever the query does.
    pub fn call(
        self: &Arc<Self>,
        name: &str,
        args: Value,
        scope: &Scope,
    ) -> Result<Value, ToolError> {
        if !TOOLS.contains(&name) {
            return Err(ToolError::UnknownTool(name.to_string()));
        }
        let slot = self.admit(scope)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let (me, name, scope) = (self.clone(), name.to_string(), scope.clone());
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("echo-query".into())
            .spawn(move || {
                let id = me.store.begin_query();
                let _ = id_tx.send(id);
                let mut out = me.call_now(&name, args, &scope);
                if me.store.end_query(id) && out.is_err() {
                    out = Err(ToolError::OverMemory(me.budget_mib));
                }
                drop(slot);
                let _ = tx.send(out);
            });
        if let Err(e) = spawned {
            return Err(ToolError::Store(format!(
                "cannot start a query thread: {e}"
            )));
        }
        let timeout = self.cfg.timeout;
        match rx.recv_timeout(timeout) {
            Ok(out) => out,
            Err(_) => {
                if let Ok(id) = id_rx.recv() {
                    self.store.interrupt_query(id);
                }
                match rx.recv_timeout(INTERRUPT_GRACE) {
                    Ok(Ok(v)) => Ok(v),
                    _ => Err(ToolError::Timeout(timeout)),
                }
            }
        }
    }

    /// A slot of `max_concurrent`. A cluster-scoped caller (a tenant) holds at most half
    /// of them (at least one), so one tenant's slow queries leave room for the others.
    fn admit(self: &Arc<Self>, scope: &Scope) -> Result<Slot, ToolError> {
        let busy = || {
            ToolError::Busy(format!(
                "{} queries are running (query.max_concurrent); retry later",
                self.cfg.max_concurrent
            ))
        };
        let key = match scope {
            Scope::All => None,
            Scope::Clusters(c) => {
                let share = (self.cfg.max_concurrent / 2).max(1);
                let mut m = self.per_scope.lock();
                let n = m.entry(c.clone()).or_insert(0);
                if *n >= share {
                    return Err(ToolError::Busy(format!(
                        "{share} queries of this token's clusters are running (half of query.max_concurrent); retry later"
                    )));
                }
                *n += 1;
                Some(c.clone())
            }
        };
        // From here on the slot (and the scope's count) is given back on drop.
        let slot = Slot {
            tools: self.clone(),
            scope: key,
        };
        if self.running.fetch_add(1, Relaxed) >= self.cfg.max_concurrent {
            return Err(busy());
        }
        Ok(slot)
    }

    /// The tool itself, on the calling thread, without the limits of [`Tools::call`].
    fn call_now(&self, name: &str, args: Value, scope: &Scope) -> Result<Value, ToolError> {
        match name {
            SUMMARY => {
                let a: SummaryArgs = parse(args)?;
                let w = self.window(a.window.as_deref())?;
                if let Some(c) = &a.cluster_id {
                    self.check_cluster(c, scope)?;
                }
                self.summary(a.cluster_id.as_deref(), w, scope)
            }
            RUN_ANALYSIS => {
                let a: AnalysisArgs = parse(args)?;
                if !scope.is_all() {
                    return Err(ToolError::Forbidden(
                        "run_analysis needs a token scoped to every cluster (\"*\"); scoped tokens use the other tools".into(),
                    ));
                }
                let max = a
                    .max_rows
                    .unwrap_or(self.cfg.max_rows)
                    .min(self.cfg.max_rows);
                if max == 0 {
                    return Err(ToolError::BadArgs("max_rows: must be >= 1".into()));
                }
                let r = self
                    .sandbox
                    .run(&self.store, &a.sql, max, self.cfg.max_result_bytes)
                    .map_err(ToolError::Sandbox)?;
                Ok(json!({"columns": r.columns, "rows": r.rows, "truncated": r.truncated}))
            }
            EVENT_HISTORY | FIND_OUTLIER_NODES | NCCL | GET_COST | NCCL_TRACE | HISTORY => {
                let a: ClusterArgs = parse(args)?;
                let w = self.window(a.window.as_deref())?;
                self.check_cluster(&a.cluster_id, scope)?;
                let limit = a.limit.unwrap_or(self.cfg.max_rows).min(self.cfg.max_rows);
                if limit == 0 {
                    return Err(ToolError::BadArgs("limit: must be >= 1".into()));
                }
                match name {
                    EVENT_HISTORY => {
                        self.event_history(&a.cluster_id, w, a.node_id.as_deref(), limit)
                    }
                    FIND_OUTLIER_NODES => self.find_outlier_nodes(&a.cluster_id, w, limit),
                    NCCL => self.nccl(&a.cluster_id, w, a.op_type.as_deref()),
                    GET_COST => self.get_cost(&a.cluster_id, w),
                    NCCL_TRACE => self.nccl_trace(&a.cluster_id, w, limit),
                    _ => {
                        let step = match a.step.as_deref() {
                            None => (w / 60).max(Duration::from_secs(1)),
                            Some(s) => parse_span(s)
                                .map_err(|e| ToolError::BadArgs(format!("step: {e}")))?,
                        };
                        if step.is_zero() {
                            return Err(ToolError::BadArgs("step: must be > 0".into()));
                        }
                        // Every bucket is a row per node: the window's buckets stay within
                        // the row budget.
                        let buckets = w.as_nanos().div_ceil(step.as_nanos());
                        if buckets > self.cfg.max_rows as u128 {
                            return Err(ToolError::BadArgs(format!(
                                "step: the window holds {buckets} steps; at most {} (query.max_rows) are answered: use a larger step or a shorter window",
                                self.cfg.max_rows
                            )));
                        }
                        self.history(&a.cluster_id, w, step)
                    }
                }
            }
            other => Err(ToolError::UnknownTool(other.to_string())),
        }
    }

    fn window(&self, w: Option<&str>) -> Result<Duration, ToolError> {
        let d = match w {
            None => self.cfg.default_window,
            Some(s) => parse_span(s).map_err(|e| ToolError::BadArgs(format!("window: {e}")))?,
        };
        if d.is_zero() || d > MAX_WINDOW {
            return Err(ToolError::BadArgs(
                "window: must be > 0 and at most 366 days".into(),
            ));
        }
        Ok(d)
    }

    /// A cluster outside the scope answers exactly as one the store never saw.
    fn check_cluster(&self, cluster: &str, scope: &Scope) -> Result<(), ToolError> {
        if !scope.allows(cluster) || !self.known_clusters()?.contains(cluster) {
            return Err(ToolError::UnknownCluster(cluster.to_string()));
        }
        Ok(())
    }

    fn known_clusters(&self) -> Result<HashSet<String>, ToolError> {
        Ok(self.store.with_reader(|c| {
            // Kept by the writer with each commit (see `rollup`): no scan of the points.
            let mut st = c.prepare("SELECT cluster_id FROM clusters")?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<HashSet<_>, _>>()
        })?)
    }

    fn since(w: Duration) -> i64 {
        now_ns().saturating_sub(i64::try_from(w.as_nanos()).unwrap_or(i64::MAX))
    }

    fn interval_s(&self) -> f64 {
        self.cfg.straggler_sample_interval.as_secs_f64()
    }

    fn summary(
        &self,
        cluster: Option<&str>,
        w: Duration,
        scope: &Scope,
    ) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let mut clusters: Vec<String> = match cluster {
            Some(c) => vec![c.to_string()],
            None => {
                let mut v: Vec<String> = self
                    .known_clusters()?
                    .into_iter()
                    .filter(|c| scope.allows(c))
                    .collect();
                v.sort();
                v
            }
        };
        clusters.truncate(self.cfg.max_rows);
        let recent = now_ns().saturating_sub(
            i64::try_from(self.cfg.straggler_sample_interval.as_nanos() * 3).unwrap_or(i64::MAX),
        );
        if cluster.is_none() {
            // Every cluster in three grouped queries: per-cluster queries took minutes for
            // thousands of clusters.
            let out = self.summary_many(&clusters, since, recent)?;
            return Ok(json!({"window_seconds": w.as_secs(), "clusters": out}));
        }
        let mut out = Vec::new();
        for c in &clusters {
            let v = self.store.with_reader(|conn| {
            rollup::snapshot(conn, |flushed| {
                let (nodes, points, avg, min, last): (i64, i64, Option<f64>, Option<f64>, Option<i64>) =
                    conn.query_row(
                        &format!(
                            "WITH {HEALTH_PARTS} SELECT count(DISTINCT node_id), coalesce(sum(n), 0)::BIGINT, \
                             (sum(s) / sum(n))::DOUBLE, min(mn)::DOUBLE, max(last_ns) FROM hp"
                        ),
                        params_from_iter(health_params(c, since, flushed).iter()),
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                    )?;
                let (events, threshold): (i64, Option<f64>) = conn.query_row(
                    "SELECT count(*) FILTER (WHERE value > 0), arg_max(threshold, ts_ns) FILTER (WHERE threshold IS NOT NULL) \
                     FROM straggler_events WHERE cluster_id = ? AND ts_ns >= ?",
                    duckdb::params![c, since],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let mut st = conn.prepare(
                    "SELECT DISTINCT node_id FROM ( \
                       SELECT node_id FROM fleet_stragglers WHERE cluster_id = ? AND ts_ns >= ? AND value > 0 \
                       UNION ALL SELECT node_id FROM straggler_events WHERE cluster_id = ? AND ts_ns >= ? AND value > 0) \
                     WHERE node_id IS NOT NULL ORDER BY node_id",
                )?;
                let now: Vec<String> = st
                    .query_map(duckdb::params![c, recent, c, recent], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                Ok(json!({
                    "cluster_id": c,
                    "nodes": nodes,
                    "health_points": points,
                    "avg_score": f64_json(avg),
                    "min_score": f64_json(min),
                    "last_seen_ns": last,
                    "latest_threshold": f64_json(threshold),
                    "straggler_events": events,
                    "current_stragglers": now,
                }))
                        })
        })?;
            out.push(v);
        }
        Ok(json!({"window_seconds": w.as_secs(), "clusters": out}))
    }

    /// [`Tools::summary`] of `clusters` (sorted), each query grouped by cluster.
    fn summary_many(
        &self,
        clusters: &[String],
        since: i64,
        recent: i64,
    ) -> Result<Vec<Value>, ToolError> {
        type Health = (i64, i64, Option<f64>, Option<f64>, Option<i64>);
        let edge = rollup::minute_ceil(since);
        let (health, events, current) = self.store.with_reader(|conn| {
            rollup::snapshot(conn, |flushed| {
                let mut health: std::collections::HashMap<String, Health> = Default::default();
                let mut st = conn.prepare(
                    "WITH hp AS ( \
                       SELECT cluster_id, node_id, count(*) AS n, sum(score) AS s, min(score) AS mn, max(ts_ns) AS last_ns \
                       FROM health_scores WHERE ts_ns >= ? AND ts_ns < ? GROUP BY ALL \
                       UNION ALL \
                       SELECT cluster_id, node_id, count(*), sum(score), min(score), max(ts_ns) \
                       FROM health_scores WHERE seq > ? AND ts_ns >= ? GROUP BY ALL \
                       UNION ALL \
                       SELECT cluster_id, node_id, sum(samples), sum(score_sum), min(score_min), max(last_ns) \
                       FROM health_minutes WHERE ts_ns >= ? GROUP BY ALL) \
                     SELECT cluster_id, count(DISTINCT node_id), coalesce(sum(n), 0)::BIGINT, (sum(s) / sum(n))::DOUBLE, \
                            min(mn)::DOUBLE, max(last_ns) \
                     FROM hp WHERE cluster_id IS NOT NULL GROUP BY cluster_id",
                )?;
                let rows = st.query_map(duckdb::params![since, edge, flushed, edge, edge], |r| {
                    Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
                })?;
                for r in rows {
                    let (c, h) = r?;
                    health.insert(c, h);
                }
                let mut events: std::collections::HashMap<String, (i64, Option<f64>)> = Default::default();
                let mut st = conn.prepare(
                    "SELECT cluster_id, count(*) FILTER (WHERE value > 0), \
                            arg_max(threshold, ts_ns) FILTER (WHERE threshold IS NOT NULL) \
                     FROM straggler_events WHERE ts_ns >= ? AND cluster_id IS NOT NULL GROUP BY cluster_id",
                )?;
                let rows = st.query_map([since], |r| Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?))))?;
                for r in rows {
                    let (c, e) = r?;
                    events.insert(c, e);
                }
                let mut current: std::collections::HashMap<String, Vec<String>> = Default::default();
                let mut st = conn.prepare(
                    "SELECT DISTINCT cluster_id, node_id FROM ( \
                       SELECT cluster_id, node_id FROM fleet_stragglers WHERE ts_ns >= ? AND value > 0 \
                       UNION ALL SELECT cluster_id, node_id FROM straggler_events WHERE ts_ns >= ? AND value > 0) \
                     WHERE cluster_id IS NOT NULL AND node_id IS NOT NULL ORDER BY cluster_id, node_id",
                )?;
                let rows = st.query_map([recent, recent], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
                for r in rows {
                    let (c, n) = r?;
                    current.entry(c).or_default().push(n);
                }
                Ok((health, events, current))
            })
        })?;
        Ok(clusters
            .iter()
            .map(|c| {
                let (nodes, points, avg, min, last) =
                    health.get(c).copied().unwrap_or((0, 0, None, None, None));
                let (events, threshold) = events.get(c).copied().unwrap_or((0, None));
                json!({
                    "cluster_id": c,
                    "nodes": nodes,
                    "health_points": points,
                    "avg_score": f64_json(avg),
                    "min_score": f64_json(min),
                    "last_seen_ns": last,
                    "latest_threshold": f64_json(threshold),
                    "straggler_events": events,
                    "current_stragglers": current.get(c).cloned().unwrap_or_default(),
                })
            })
            .collect())
    }

    fn event_history(
        &self,
        cluster: &str,
        w: Duration,
        node: Option<&str>,
        limit: usize,
    ) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let node_filter = if node.is_some() {
            "AND node_id = ?"
        } else {
            ""
        };
        let sql = format!(
            "SELECT ts_ns, node_id, source, event_id, value, threshold, score, dominant_signal, detection_mode, rank, causal_chain_id FROM ( \
               SELECT ts_ns, node_id, 'straggler_event' AS source, event_id, value, threshold, score, dominant_signal, detection_mode, rank, causal_chain_id \
               FROM straggler_events WHERE cluster_id = ? AND ts_ns >= ? {node_filter} \
               UNION ALL \
               SELECT ts_ns, node_id, 'fleet_straggler', NULL, value::BIGINT, NULL, NULL, NULL, NULL, NULL, NULL \
               FROM fleet_stragglers WHERE cluster_id = ? AND ts_ns >= ? {node_filter}) \
             ORDER BY ts_ns DESC, node_id LIMIT ?"
        );
        let filter = |p: &mut Vec<Box<dyn duckdb::ToSql>>| {
            p.push(Box::new(cluster.to_string()));
            p.push(Box::new(since));
            if let Some(n) = node {
                p.push(Box::new(n.to_string()));
            }
        };
        let mut p: Vec<Box<dyn duckdb::ToSql>> = Vec::new();
        filter(&mut p);
        filter(&mut p);
        p.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        let budget = self.budget(limit);
        // The chains of the episodes of the answered events only (stored once per episode,
        // at its first event carrying them, which may lie before the window), so their
        // number is bounded by the events' (at most 3 per event).
        let (mut events, mut truncated) =
            self.store.with_reader(|c| rows_json(c, &sql, p, budget))?;
        let episodes: Vec<String> = events
            .iter()
            .filter_map(|ev| ev.get("causal_chain_id").and_then(Value::as_str))
            .map(str::to_string)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let mut chains = Vec::new();
        for part in episodes.chunks(500) {
            let marks = vec!["?"; part.len()].join(", ");
            let chains_sql = format!(
                "SELECT * FROM causal_chains WHERE cluster_id = ? AND causal_chain_id IN ({marks}) \
                 ORDER BY causal_chain_id, position"
            );
            let mut cp: Vec<Box<dyn duckdb::ToSql>> = vec![Box::new(cluster.to_string())];
            cp.extend(
                part.iter()
                    .map(|id| Box::new(id.clone()) as Box<dyn duckdb::ToSql>),
            );
            let (rows, _) = self.store.with_reader(|c| {
                rows_json(
                    c,
                    &chains_sql,
                    cp,
                    Budget {
                        rows: part.len() * crate::chains::MAX_CHAINS,
                        bytes: usize::MAX,
                    },
                )
            })?;
            chains.extend(rows);
        }
        let by_episode = chains_by_episode(chains);
        let mut bytes = 0usize;
        let mut keep = events.len();
        for (i, ev) in events.iter_mut().enumerate() {
            let list = ev
                .get("causal_chain_id")
                .and_then(Value::as_str)
                .and_then(|id| by_episode.get(id))
                .cloned()
                .unwrap_or_default();
            ev["causal_chains"] = Value::Array(list);
            bytes = bytes.saturating_add(crate::sandbox::json_size(ev));
            if bytes > budget.bytes {
                keep = i;
                break;
            }
        }
        if keep < events.len() {
            events.truncate(keep);
            truncated = true;
        }
        Ok(
            json!({"cluster_id": cluster, "window_seconds": w.as_secs(), "events": events, "truncated": truncated}),
        )
    }

    /// The causal chains of `cluster`'s latest straggler episode in the window that has
    /// any (the agent's order: most severe first), and how many episodes of the window
    /// have chains. For the `investigate` prompt; the cluster must be visible to `scope`.
    pub fn latest_chains(
        self: &Arc<Self>,
        cluster: &str,
        window: &str,
        scope: &Scope,
    ) -> Result<(Vec<Value>, i64), ToolError> {
        let w = self.window(Some(window))?;
        let _slot = self.admit(scope)?;
        self.check_cluster(cluster, scope)?;
        let since = Self::since(w);
        let id = self.store.begin_query();
        let out = self.store.with_reader(|c| {
            let episodes: i64 = c.query_row(
                "SELECT count(DISTINCT causal_chain_id) FROM causal_chains WHERE cluster_id = ? AND ts_ns >= ?",
                params![cluster, since],
                |r| r.get(0),
            )?;
            let (rows, _) = rows_json(
                c,
                "SELECT * FROM causal_chains WHERE cluster_id = ? AND causal_chain_id = ( \
                   SELECT causal_chain_id FROM causal_chains WHERE cluster_id = ? AND ts_ns >= ? \
                   ORDER BY ts_ns DESC, causal_chain_id LIMIT 1) \
                 ORDER BY position",
                vec![
                    Box::new(cluster.to_string()),
                    Box::new(cluster.to_string()),
                    Box::new(since),
                ],
                self.budget(crate::chains::MAX_CHAINS),
            )?;
            Ok((rows, episodes))
        });
        self.store.end_query(id);
        let (rows, episodes) = out?;
        Ok((rows.into_iter().map(chain_json).collect(), episodes))
    }

    fn find_outlier_nodes(
        &self,
        cluster: &str,
        w: Duration,
        limit: usize,
    ) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let sql = format!("
            WITH {HEALTH_PARTS},
                 h AS (SELECT node_id, (sum(s) / sum(n))::DOUBLE AS avg_score, min(mn)::DOUBLE AS min_score, sum(n)::BIGINT AS samples
                       FROM hp WHERE node_id IS NOT NULL GROUP BY node_id),
                 med AS (SELECT median(avg_score)::DOUBLE AS m FROM h),
                 f AS (SELECT node_id, count(DISTINCT ts_ns) AS flagged FROM fleet_stragglers
                       WHERE cluster_id = ? AND ts_ns >= ? AND value > 0 AND node_id IS NOT NULL GROUP BY node_id),
                 e AS (SELECT node_id, count(*) AS events, max(threshold - score)::DOUBLE AS depth
                       FROM straggler_events WHERE cluster_id = ? AND ts_ns >= ? AND value > 0 AND node_id IS NOT NULL GROUP BY node_id),
                 n AS (SELECT node_id FROM h UNION SELECT node_id FROM f UNION SELECT node_id FROM e)
            SELECT n.node_id, h.avg_score, h.min_score, coalesce(h.samples, 0), coalesce(f.flagged, 0),
                   coalesce(e.events, 0), e.depth, (SELECT m FROM med)
            FROM n LEFT JOIN h USING (node_id) LEFT JOIN f USING (node_id) LEFT JOIN e USING (node_id)");
        type Row = (
            String,
            Option<f64>,
            Option<f64>,
            i64,
            i64,
            i64,
            Option<f64>,
            Option<f64>,
        );
        let rows: Vec<Row> = self.store.with_reader(|c| {
            rollup::snapshot(c, |flushed| {
                let mut st = c.prepare(&sql)?;
                let mut p = health_params(cluster, since, flushed);
                p.extend([
                    Box::new(cluster.to_string()) as Box<dyn duckdb::ToSql>,
                    Box::new(since),
                    Box::new(cluster.to_string()),
                    Box::new(since),
                ]);
                let it = st.query_map(params_from_iter(p.iter()), |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                })?;
                it.collect()
            })
        })?;
        let interval = self.interval_s();
        let mut nodes: Vec<(f64, f64, Value)> = rows
            .into_iter()
            .map(
                |(node, avg, min, samples, flagged, events, event_depth, median)| {
                    let straggler_seconds = flagged.max(events) as f64 * interval;
                    let peer_depth = match (median, avg) {
                        (Some(m), Some(a)) => Some(m - a),
                        _ => None,
                    };
                    let depth = match (peer_depth, event_depth) {
                        (Some(a), Some(b)) => a.max(b),
                        (a, b) => a.or(b).unwrap_or(0.0),
                    };
                    // NaN and infinities are refused at ingest; rows stored before that
                    // must not turn the answer's number into null.
                    let depth = if depth.is_finite() { depth } else { 0.0 };
                    let v = json!({
                        "node_id": node,
                        "straggler_seconds": straggler_seconds,
                        "depth": depth,
                        "avg_score": f64_json(avg),
                        "min_score": f64_json(min),
                        "cluster_median_score": f64_json(median),
                        "health_samples": samples,
                        "fleet_straggler_samples": flagged,
                        "straggler_events": events,
                        "is_straggler": straggler_seconds > 0.0,
                    });
                    (straggler_seconds, depth, v)
                },
            )
            .collect();
        nodes.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
        nodes.truncate(limit);
        Ok(json!({
            "cluster_id": cluster,
            "window_seconds": w.as_secs(),
            "ranking": "straggler_seconds desc, then depth desc",
            "nodes": nodes.into_iter().map(|(_, _, v)| v).collect::<Vec<_>>(),
        }))
    }

    fn nccl(&self, cluster: &str, w: Duration, op: Option<&str>) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let op_filter = if op.is_some() { "AND op_type = ?" } else { "" };
        let sql = format!(
            "SELECT rank, op_type, metric, count(*), avg(value)::DOUBLE, quantile_cont(value, 0.5)::DOUBLE, \
                    quantile_cont(value, 0.95)::DOUBLE, max(value)::DOUBLE, sum(value)::DOUBLE, \
                    arg_max(node_id, ts_ns) \
             FROM nccl WHERE cluster_id = ? AND ts_ns >= ? {op_filter} \
             GROUP BY rank, op_type, metric ORDER BY rank NULLS LAST, op_type, metric"
        );
        let mut p: Vec<Box<dyn duckdb::ToSql>> =
            vec![Box::new(cluster.to_string()), Box::new(since)];
        if let Some(o) = op {
            p.push(Box::new(o.to_string()));
        }
        type Row = (
            Option<i64>,
            Option<String>,
            String,
            i64,
            f64,
            f64,
            f64,
            f64,
            f64,
            Option<String>,
        );
        let rows: Vec<Row> = self.store.with_reader(|c| {
            let mut st = c.prepare(&sql)?;
            let it = st.query_map(params_from_iter(p.iter()), |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ))
            })?;
            it.collect()
        })?;
        // One entry per (rank, op_type), each metric's rollup under its name.
        type Entry = (Option<i64>, Option<String>, serde_json::Map<String, Value>);
        let mut entries: Vec<Entry> = Vec::new();
        for (rank, op_type, metric, count, avg, p50, p95, max, sum, node) in rows {
            let idx = match entries
                .iter()
                .position(|(r, o, _)| *r == rank && *o == op_type)
            {
                Some(i) => i,
                None => {
                    let mut m = serde_json::Map::new();
                    m.insert("rank".into(), json!(rank));
                    m.insert("op_type".into(), json!(op_type));
                    m.insert("node_id".into(), json!(node));
                    entries.push((rank, op_type.clone(), m));
                    entries.len() - 1
                }
            };
            if let Some((_, _, m)) = entries.get_mut(idx) {
                m.insert(
                    metric.clone(),
                    json!({"count": count, "avg": f64_json(Some(avg)), "p50": f64_json(Some(p50)),
                           "p95": f64_json(Some(p95)), "max": f64_json(Some(max)), "sum": f64_json(Some(sum))}),
                );
            }
        }
        let mut ranks = Vec::new();
        for (_, _, mut m) in entries {
            let elements = m.get("bytes").and_then(|b| b["sum"].as_f64());
            let ms = m.get("duration_ms").and_then(|d| d["sum"].as_f64());
            let bw = match (elements, ms) {
                (Some(e), Some(t)) if t > 0.0 => f64_json(Some(e / t)),
                _ => Value::Null,
            };
            m.insert("elements_per_ms".into(), bw);
            ranks.push(Value::Object(m));
        }
        let slowest = ranks
            .iter()
            .filter(|r| r.get("peer_lag_ms").is_some())
            .max_by(|a, b| {
                let x = a["peer_lag_ms"]["p50"].as_f64().unwrap_or(f64::MIN);
                let y = b["peer_lag_ms"]["p50"].as_f64().unwrap_or(f64::MIN);
                x.total_cmp(&y)
            })
            .map(|r| json!({"rank": r["rank"], "op_type": r["op_type"], "node_id": r["node_id"], "p50_peer_lag_ms": r["peer_lag_ms"]["p50"]}));
        Ok(json!({
            "cluster_id": cluster,
            "window_seconds": w.as_secs(),
            "ranks": ranks,
            "slowest_rank": slowest,
        }))
    }

    fn get_cost(&self, cluster: &str, w: Duration) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let sql = "
            WITH f AS (SELECT node_id, count(DISTINCT ts_ns) AS flagged FROM fleet_stragglers
                       WHERE cluster_id = ? AND ts_ns >= ? AND value > 0 AND node_id IS NOT NULL GROUP BY node_id),
                 e AS (SELECT node_id, count(*) AS events FROM straggler_events
                       WHERE cluster_id = ? AND ts_ns >= ? AND value > 0 AND node_id IS NOT NULL GROUP BY node_id),
                 i AS (SELECT node_id, arg_max(provider, ts_ns) AS provider, arg_max(gpu_model, ts_ns) AS gpu_model,
                              arg_max(gpu_count, ts_ns) AS gpu_count, arg_max(world_size, ts_ns) AS world_size
                       FROM node_info WHERE cluster_id = ? AND node_id IS NOT NULL GROUP BY node_id),
                 n AS (SELECT node_id FROM f UNION SELECT node_id FROM e)
            SELECT n.node_id, coalesce(f.flagged, 0), coalesce(e.events, 0), i.provider, i.gpu_model, i.gpu_count, i.world_size
            FROM n LEFT JOIN f USING (node_id) LEFT JOIN e USING (node_id) LEFT JOIN i USING (node_id)
            ORDER BY n.node_id";
        type Row = (
            String,
            i64,
            i64,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Row> = self.store.with_reader(|c| {
            let mut st = c.prepare(sql)?;
            let it = st.query_map(
                duckdb::params![cluster, since, cluster, since, cluster],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )?;
            it.collect()
        })?;
        let interval = self.interval_s();
        let mut total = 0.0;
        let mut nodes = Vec::new();
        for (node, flagged, events, provider, model, gpus, world) in rows {
            let seconds = flagged.max(events) as f64 * interval;
            let affected = world.or(gpus).unwrap_or(1).max(1);
            let (rate, known) = match (&self.rates, &provider, &model) {
                (Some(t), Some(p), Some(m)) => match self.aliases.normalise(p) {
                    // Agents send the provider as spelled (`aws`); the table's ids are
                    // canonical (`ec2`).
                    Ok(id) => {
                        let l = t.lookup(&id, m);
                        (l.hourly, l.known)
                    }
                    Err(_) => (t.fallback_rate(), false),
                },
                (Some(t), _, _) => (t.fallback_rate(), false),
                (None, _, _) => (0.0, false),
            };
            let cost = seconds / 3600.0 * affected as f64 * rate;
            total += cost;
            nodes.push(json!({
                "node_id": node,
                "straggler_seconds": seconds,
                "affected_gpus": affected,
                "provider": provider,
                "gpu_model": model,
                "hourly_rate_per_gpu": f64_json(Some(rate)),
                "rate_known": known,
                "cost": f64_json(Some(cost)),
            }));
        }
        Ok(json!({
            "cluster_id": cluster,
            "window_seconds": w.as_secs(),
            "currency": self.rates.as_ref().map(|r| r.currency().to_string()),
            "formula": "straggler_seconds / 3600 * affected_gpus (world size, else the node's GPU count) * hourly rate per GPU (provider, GPU model)",
            "total_cost": f64_json(Some(total)),
            "nodes": nodes,
        }))
    }

    /// Chrome trace-event JSON (Perfetto and chrome://tracing open it): one track per rank,
    /// one slice per collective (`duration_ms`), the peer lag as a counter per rank.
    fn nccl_trace(&self, cluster: &str, w: Duration, limit: usize) -> Result<Value, ToolError> {
        let since = Self::since(w);
        type Row = (
            i64,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<String>,
            String,
            f64,
        );
        let rows: Vec<Row> = self.store.with_reader(|c| {
            let mut st = c.prepare(
                "SELECT ts_ns, rank, node_id, op_type, comm_id_hash, metric, value FROM nccl \
                 WHERE cluster_id = ? AND ts_ns >= ? AND metric IN ('duration_ms', 'peer_lag_ms') \
                 ORDER BY ts_ns LIMIT ?",
            )?;
            let it = st.query_map(
                duckdb::params![cluster, since, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )?;
            it.collect()
        })?;
        let mut events = Vec::new();
        let mut named: HashSet<i64> = HashSet::new();
        for (ts, rank, node, op, comm, metric, value) in rows {
            let tid = rank.unwrap_or(-1);
            if named.insert(tid) {
                events.push(json!({
                    "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                    "args": {"name": format!("rank {tid} ({})", node.as_deref().unwrap_or("?"))}
                }));
            }
            let ts_us = ts as f64 / 1000.0;
            if metric == "duration_ms" {
                events.push(json!({
                    "name": op.as_deref().unwrap_or("nccl"), "cat": "nccl", "ph": "X",
                    "ts": ts_us, "dur": value * 1000.0, "pid": 1, "tid": tid,
                    "args": {"node_id": node, "comm_id_hash": comm}
                }));
            } else {
                events.push(json!({
                    "name": format!("peer_lag_ms rank {tid}"), "ph": "C", "ts": ts_us, "pid": 1,
                    "args": {"peer_lag_ms": value}
                }));
            }
        }
        events.push(json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": format!("cluster {cluster}")}}));
        Ok(json!({"traceEvents": events, "displayTimeUnit": "ms"}))
    }

    /// Scores per node and the cluster's threshold, averaged per `step`: at most
    /// `max_rows` rows and `max_result_bytes` each (`truncated` beyond).
    fn history(&self, cluster: &str, w: Duration, step: Duration) -> Result<Value, ToolError> {
        let since = Self::since(w);
        let step_ns = i64::try_from(step.as_nanos()).unwrap_or(i64::MAX).max(1);
        let budget = self.budget(self.cfg.max_rows);
        let cap = i64::try_from(self.cfg.max_rows.saturating_add(1)).unwrap_or(i64::MAX);
        let ((scores, st), (thresholds, tt)) = self.store.with_reader(|c| {
            rollup::snapshot(c, |flushed| {
                let scores = if rollup::buckets_align(step_ns) {
                    let mut p = rollup::bucket_params(cluster, since, step_ns, flushed);
                    p.push(Box::new(cap));
                    rows_json(c, &format!("{} LIMIT ?", rollup::HEALTH_BUCKETS), p, budget)?
                } else {
                    rows_json(
                        c,
                        "SELECT node_id, (ts_ns // ?) * ? AS bucket_ns, avg(score)::DOUBLE AS score, count(*) AS samples \
                         FROM health_scores WHERE cluster_id = ? AND ts_ns >= ? GROUP BY ALL ORDER BY bucket_ns, node_id LIMIT ?",
                        vec![Box::new(step_ns), Box::new(step_ns), Box::new(cluster.to_string()), Box::new(since), Box::new(cap)],
                        budget,
                    )?
                };
                let thresholds = rows_json(
                    c,
                    "SELECT (ts_ns // ?) * ? AS bucket_ns, avg(threshold)::DOUBLE AS threshold \
                     FROM straggler_events WHERE cluster_id = ? AND ts_ns >= ? AND threshold IS NOT NULL \
                     GROUP BY ALL ORDER BY bucket_ns LIMIT ?",
                    vec![Box::new(step_ns), Box::new(step_ns), Box::new(cluster.to_string()), Box::new(since), Box::new(cap)],
                    budget,
                )?;
                Ok((scores, thresholds))
            })
        })?;
        Ok(json!({
            "cluster_id": cluster,
            "window_seconds": w.as_secs(),
            "step_seconds": step.as_secs_f64(),
            "scores": scores,
            "thresholds": thresholds,
            "truncated": st || tt,
        }))
    }

    fn budget(&self, rows: usize) -> Budget {
        Budget {
            rows,
            bytes: self.cfg.max_result_bytes,
        }
    }
}

/// A `causal_chains` row as answered: `causes` and `recommendations` as arrays.
fn chain_json(mut row: Value) -> Value {
    for k in ["causes", "recommendations"] {
        if let Some(text) = row.get(k).and_then(Value::as_str) {
            let list = serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!([]));
            row[k] = list;
        }
    }
    if let Some(o) = row.as_object_mut() {
        o.remove("cluster_id");
    }
    row
}

/// Chain rows grouped by episode, each list in position order.
fn chains_by_episode(rows: Vec<Value>) -> HashMap<String, Vec<Value>> {
    let mut m: HashMap<String, Vec<Value>> = HashMap::new();
    for r in rows {
        if let Some(id) = r.get("causal_chain_id").and_then(Value::as_str) {
            m.entry(id.to_string()).or_default().push(chain_json(r));
        }
    }
    m
}

/// The most rows and (about) bytes of values one list of an answer carries.
#[derive(Debug, Clone, Copy)]
struct Budget {
    rows: usize,
    bytes: usize,
}

/// Rows of a query as JSON objects keyed by column name, within `budget` (`true`: some
/// were left out).
fn rows_json(
    c: &Connection,
    sql: &str,
    p: Vec<Box<dyn duckdb::ToSql>>,
    budget: Budget,
) -> Result<(Vec<Value>, bool), duckdb::Error> {
    let mut st = c.prepare(sql)?;
    let mut rows = st.query(params_from_iter(p.iter()))?;
    let names: Vec<String> = rows.as_ref().map(|s| s.column_names()).unwrap_or_default();
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while let Some(r) = rows.next()? {
        if out.len() >= budget.rows {
            return Ok((out, true));
        }
        let mut m = serde_json::Map::new();
        for (i, n) in names.iter().enumerate() {
            m.insert(n.clone(), cell_json(r, i)?);
        }
        let v = Value::Object(m);
        bytes = bytes.saturating_add(crate::sandbox::json_size(&v));
        if bytes > budget.bytes {
            return Ok((out, true));
        }
        out.push(v);
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::StoreConfig;

    #[test]
    fn a_tenant_holds_at_most_half_of_the_query_slots() {
        let dir = std::env::temp_dir().join(format!("echo-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(StoreConfig {
            data_dir: dir.display().to_string(),
            memory_limit: "128MB".into(),
            ..StoreConfig::default()
        })
        .unwrap();
        let cfg = QueryConfig {
            max_concurrent: 4,
            ..QueryConfig::default()
        };
        let tools = Arc::new(Tools::new(store.clone(), cfg).unwrap());
        let a = Scope::Clusters(vec!["a".into()]);
        let b = Scope::Clusters(vec!["b".into()]);
        let held: Vec<Slot> = (0..2).map(|_| tools.admit(&a).unwrap()).collect();
        assert!(matches!(tools.admit(&a), Err(ToolError::Busy(_))));
        let other = tools.admit(&b).unwrap();
        let ops = tools.admit(&Scope::All).unwrap();
        // Four running: nobody else gets a slot.
        assert!(matches!(tools.admit(&Scope::All), Err(ToolError::Busy(_))));
        drop(held);
        assert!(tools.admit(&a).is_ok());
        drop((other, ops));
        assert_eq!(tools.running.load(Relaxed), 0);
        assert!(tools.per_scope.lock().is_empty());
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
