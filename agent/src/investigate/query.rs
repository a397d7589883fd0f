//! `ingero-agent query`: read-only SQL over a store. The database is opened read-only and an
//! authorizer refuses anything but reading: writes, schema changes, `ATTACH`/`DETACH`,
//! `load_extension` and pragmas other than a few that only read. One statement per call.

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::ValueRef;

use super::InvestigateError;

/// Pragmas that only read whatever their argument (a table or index name).
const INSPECT_PRAGMAS: &[&str] = &[
    "table_info",
    "table_xinfo",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
];

/// Pragmas that only read when called without a value (with one they set it).
const READ_PRAGMAS: &[&str] = &[
    "table_list",
    "user_version",
    "page_count",
    "page_size",
    "schema_version",
    "database_list",
];

fn authorize(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Function { function_name } => {
            if function_name.eq_ignore_ascii_case("load_extension") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Pragma {
            pragma_name,
            pragma_value,
        } => {
            let named = |list: &[&str]| list.iter().any(|p| p.eq_ignore_ascii_case(pragma_name));
            if named(INSPECT_PRAGMAS) || (pragma_value.is_none() && named(READ_PRAGMAS)) {
                Authorization::Allow
            } else {
                Authorization::Deny
            }
        }
        _ => Authorization::Deny,
    }
}

/// Make a connection refuse everything but reading.
pub fn lock_down(conn: &Connection) -> Result<(), InvestigateError> {
    conn.authorizer(Some(authorize));
    // No database may be attached at all (a second line of defence behind the authorizer).
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    Ok(())
}

/// A result: column names and rows of values rendered as JSON values.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// Run one read-only statement. Named parameters `:since` (Unix ns) are bound when the
/// statement uses them.
pub fn run(conn: &Connection, sql: &str, since_ns: Option<i64>) -> Result<Table, InvestigateError> {
    run_bounded(conn, sql, since_ns, usize::MAX).map(|(t, _)| t)
}

/// [`run`] keeping at most `max_rows` rows; `true` when more were there.
pub fn run_bounded(
    conn: &Connection,
    sql: &str,
    since_ns: Option<i64>,
    max_rows: usize,
) -> Result<(Table, bool), InvestigateError> {
    lock_down(conn)?;
    let trimmed = sql.trim().trim_end_matches(';').trim();
    if trimmed.is_empty() {
        return Err(InvestigateError::Refused("empty statement".into()));
    }
    let mut stmt = conn
        .prepare(trimmed)
        .map_err(|e| refused_or(e, "statement"))?;
    if !stmt.readonly() {
        return Err(InvestigateError::Refused(
            "only statements that read are allowed".into(),
        ));
    }
    if let Some(idx) = stmt.parameter_index(":since")? {
        stmt.raw_bind_parameter(idx, since_ns.unwrap_or(0))?;
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let n = columns.len();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(r) = rows.next()? {
        if out.len() >= max_rows {
            truncated = true;
            break;
        }
        let mut row = Vec::with_capacity(n);
        for i in 0..n {
            row.push(match r.get_ref(i)? {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(v) => serde_json::Value::from(v),
                ValueRef::Real(v) => serde_json::Value::from(v),
                ValueRef::Text(t) => {
                    serde_json::Value::from(String::from_utf8_lossy(t).into_owned())
                }
                ValueRef::Blob(b) => serde_json::Value::from(hex::encode(b)),
            });
        }
        out.push(row);
    }
    Ok((Table { columns, rows: out }, truncated))
}

fn refused_or(e: rusqlite::Error, what: &str) -> InvestigateError {
    let msg = e.to_string();
    if msg.contains("not authorized") || msg.contains("too many attached") {
        InvestigateError::Refused(format!("{what} refused: {msg} (query is read-only)"))
    } else {
        InvestigateError::Sql(e)
    }
}

/// The statement the shortcuts (`--since`, `--op`, `--limit`) build when no SQL is given:
/// the newest events with their source and op names.
pub fn shortcut_sql(op: Option<(i64, i64)>, limit: u64) -> String {
    let op_filter = match op {
        Some((s, o)) => format!(" AND e.source = {s} AND e.op = {o}"),
        None => String::new(),
    };
    format!(
        "SELECT e.id, e.timestamp, e.node, e.pid, e.comm, s.name AS source, o.name AS op, \
         e.duration / 1000 AS dur_us, e.arg0, e.arg1, e.ret_code \
         FROM events e LEFT JOIN sources s ON s.id = e.source \
         LEFT JOIN ops o ON o.source_id = e.source AND o.op_id = e.op \
         WHERE e.timestamp >= :since{op_filter} ORDER BY e.timestamp DESC LIMIT {limit}"
    )
}

/// Render as an aligned text table.
pub fn render_table(t: &Table) -> String {
    let cell = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "NULL".into(),
        other => other.to_string(),
    };
    let mut widths: Vec<usize> = t.columns.iter().map(|c| c.len()).collect();
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    for r in &cells {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |vals: &[String]| {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut s = line(&t.columns);
    s.push('\n');
    s.push_str(
        &widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  "),
    );
    s.push('\n');
    for r in &cells {
        s.push_str(&line(r));
        s.push('\n');
    }
    s.push_str(&format!("({} rows)\n", t.rows.len()));
    s
}

/// Render as a JSON array of objects.
pub fn render_json(t: &Table) -> String {
    let arr: Vec<serde_json::Value> = t
        .rows
        .iter()
        .map(|r| {
            serde_json::Value::Object(t.columns.iter().cloned().zip(r.iter().cloned()).collect())
        })
        .collect();
    serde_json::to_string_pretty(&arr).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::investigate::fixtures;

    #[test]
    fn reads_work_and_every_kind_of_write_is_refused() {
        let dir = fixtures::tmp_dir("query");
        let path = dir.join("a.db");
        fixtures::write_node_db(
            &path,
            "n1",
            fixtures::Layout::Current,
            &fixtures::clean_events(0),
        );
        let conn = crate::store::open_read_only(&path).unwrap();
        let t = run(&conn, "SELECT count(*) AS n FROM events", None).unwrap();
        assert_eq!(t.columns, vec!["n"]);
        assert!(t.rows[0][0].as_i64().unwrap() > 0);
        let t = run(&conn, "PRAGMA table_info(events)", None).unwrap();
        assert!(!t.rows.is_empty());
        for bad in [
            "DELETE FROM events",
            "INSERT INTO schema_info VALUES ('x', 'y')",
            "UPDATE events SET pid = 0",
            "DROP TABLE events",
            "CREATE TABLE t (x)",
            "ATTACH DATABASE '/tmp/other.db' AS other",
            "SELECT load_extension('/tmp/x.so')",
            "PRAGMA user_version = 5",
            "PRAGMA journal_mode = DELETE",
            "PRAGMA table_list = 1",
            "WITH x AS (SELECT 1) DELETE FROM events",
            "SELECT 1; DELETE FROM events",
        ] {
            let r = run(&conn, bad, None);
            assert!(r.is_err(), "{bad} was allowed");
        }
        // Nothing changed.
        let n = run(&conn, "SELECT count(*) FROM events", None).unwrap();
        assert_eq!(n.rows[0][0], t_first(&conn));
    }

    fn t_first(conn: &Connection) -> serde_json::Value {
        run(conn, "SELECT count(*) FROM events", None).unwrap().rows[0][0].clone()
    }

    #[test]
    fn shortcuts_filter_by_time_and_op_and_render() {
        let dir = fixtures::tmp_dir("query-short");
        let path = dir.join("a.db");
        let evs = fixtures::clean_events(0);
        fixtures::write_node_db(&path, "n1", fixtures::Layout::Current, &evs);
        let conn = crate::store::open_read_only(&path).unwrap();
        let sql = shortcut_sql(crate::store::schema::op_by_name("cudaStreamSync"), 5);
        let t = run(&conn, &sql, Some(0)).unwrap();
        assert_eq!(t.rows.len(), 5);
        let op_col = t.columns.iter().position(|c| c == "op").unwrap();
        assert!(t.rows.iter().all(|r| r[op_col] == "cudaStreamSync"));
        let t_future = run(&conn, &sql, Some(i64::MAX)).unwrap();
        assert!(t_future.rows.is_empty());
        let text = render_table(&t);
        assert!(text.contains("cudaStreamSync") && text.ends_with("(5 rows)\n"));
        let json: serde_json::Value = serde_json::from_str(&render_json(&t)).unwrap();
        assert_eq!(json.as_array().unwrap().len(), 5);
        assert_eq!(json[0]["node"], "n1");
    }
}
