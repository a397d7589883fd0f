//! The SQL sandbox of `fleet.cluster.run_analysis`.
//!
//! A query runs only when all of these hold:
//! 1. DuckDB's own parser, on a private in-memory database with the same (empty) schema,
//!    external access off and extension autoload/autoinstall off, extracts exactly one
//!    statement from the text, and binding it there says it is a `SELECT`. Nothing is run
//!    before this check: a naive `prepare` of `COMMIT; INSERT ...; SELECT 42` would execute
//!    the first two statements.
//! 2. It then runs on a reader connection of the writer's instance (which sees every
//!    commit), inside `BEGIN TRANSACTION READ ONLY`, on an instance opened with external
//!    access off, autoload and autoinstall off and its configuration locked (no `SET`).
//! 3. At most `max_rows` rows are read; a query running past `timeout` is interrupted.

use std::ffi::{CStr, CString};
use std::ptr;
use std::time::Duration;

use duckdb::ffi;
use parking_lot::Mutex;

use crate::store::{SCHEMA, Store};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SandboxError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("query failed: {0}")]
    Failed(String),
    #[error("query interrupted after the {0:?} time limit")]
    Timeout(Duration),
}

/// DuckDB's parser and binder on a private, empty, in-memory database.
pub struct Parser {
    db: ffi::duckdb_database,
    con: ffi::duckdb_connection,
}

// SAFETY: DuckDB databases and connections may be used from any thread, one call at a time;
// `Parser` is only used behind a mutex (`SqlSandbox::parser`).
unsafe impl Send for Parser {}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parser")
    }
}

fn c_string(s: &str) -> Result<CString, SandboxError> {
    CString::new(s).map_err(|_| SandboxError::Refused("the query contains a NUL byte".into()))
}

/// A C string owned by DuckDB (may be null), as an owned Rust string.
fn c_message(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: DuckDB returns NUL-terminated strings that live until the owning object is
    // destroyed, which happens after this copy.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl Parser {
    /// Open the private database and create the store's schema in it.
    pub fn open() -> Result<Parser, String> {
        let mut config: ffi::duckdb_config = ptr::null_mut();
        // SAFETY: out-pointer to a local; destroyed below on every path.
        if unsafe { ffi::duckdb_create_config(&mut config) } != ffi::DuckDBSuccess {
            return Err("cannot create a DuckDB config".into());
        }
        for (k, v) in [
            ("enable_external_access", "false"),
            ("autoload_known_extensions", "false"),
            ("autoinstall_known_extensions", "false"),
            ("max_memory", "64MB"),
            ("threads", "1"),
        ] {
            let (k, v) = (
                c_string(k).map_err(|e| e.to_string())?,
                c_string(v).map_err(|e| e.to_string())?,
            );
            // SAFETY: valid config and NUL-terminated strings.
            unsafe { ffi::duckdb_set_config(config, k.as_ptr(), v.as_ptr()) };
        }
        let mut db: ffi::duckdb_database = ptr::null_mut();
        let mut err: *mut std::os::raw::c_char = ptr::null_mut();
        // SAFETY: a null path opens an in-memory database; out-pointers are locals.
        let rc = unsafe { ffi::duckdb_open_ext(ptr::null(), &mut db, config, &mut err) };
        // SAFETY: the config is no longer needed once the database is open (or not).
        unsafe { ffi::duckdb_destroy_config(&mut config) };
        if rc != ffi::DuckDBSuccess {
            let msg = c_message(err);
            if !err.is_null() {
                // SAFETY: an error string from duckdb_open_ext is freed with duckdb_free.
                unsafe { ffi::duckdb_free(err.cast()) };
            }
            return Err(format!("cannot open the parser database: {msg}"));
        }
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: `db` is open; `con` is a local out-pointer.
        if unsafe { ffi::duckdb_connect(db, &mut con) } != ffi::DuckDBSuccess {
            // SAFETY: closes the database opened above.
            unsafe { ffi::duckdb_close(&mut db) };
            return Err("cannot connect to the parser database".into());
        }
        let p = Parser { db, con };
        let schema = c_string(SCHEMA).map_err(|e| e.to_string())?;
        // SAFETY: valid connection and query; a null result pointer is allowed.
        if unsafe { ffi::duckdb_query(p.con, schema.as_ptr(), ptr::null_mut()) }
            != ffi::DuckDBSuccess
        {
            return Err("cannot create the schema in the parser database".into());
        }
        Ok(p)
    }

    /// The statement types DuckDB finds in `sql` (one per statement), binding each one
    /// against the schema. Nothing is executed.
    pub fn statement_types(
        &self,
        sql: &str,
    ) -> Result<Vec<ffi::duckdb_statement_type>, SandboxError> {
        let q = c_string(sql)?;
        let mut extracted: ffi::duckdb_extracted_statements = ptr::null_mut();
        // SAFETY: valid connection and query; `extracted` is destroyed below.
        let n = unsafe { ffi::duckdb_extract_statements(self.con, q.as_ptr(), &mut extracted) };
        let result = if n == 0 {
            // SAFETY: the error lives until `extracted` is destroyed.
            let msg = c_message(unsafe { ffi::duckdb_extract_statements_error(extracted) });
            Err(SandboxError::Refused(format!("not valid SQL: {msg}")))
        } else {
            let mut types = Vec::new();
            let mut failure = None;
            for i in 0..n {
                let mut stmt: ffi::duckdb_prepared_statement = ptr::null_mut();
                // SAFETY: index < n; the statement is destroyed right after use.
                let rc = unsafe {
                    ffi::duckdb_prepare_extracted_statement(self.con, extracted, i, &mut stmt)
                };
                if rc == ffi::DuckDBSuccess {
                    // SAFETY: `stmt` was prepared successfully.
                    types.push(unsafe { ffi::duckdb_prepared_statement_type(stmt) });
                } else if failure.is_none() {
                    // SAFETY: the error lives until the statement is destroyed.
                    failure = Some(c_message(unsafe { ffi::duckdb_prepare_error(stmt) }));
                }
                // SAFETY: destroying a (possibly failed) prepared statement is required.
                unsafe { ffi::duckdb_destroy_prepare(&mut stmt) };
            }
            match failure {
                Some(msg) if n == 1 => Err(SandboxError::Refused(msg)),
                _ => Ok(types),
            }
        };
        // SAFETY: always destroyed, even when nothing was extracted.
        unsafe { ffi::duckdb_destroy_extracted(&mut extracted) };
        result
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        // SAFETY: both handles were opened by `Parser::open` and are closed once.
        unsafe {
            ffi::duckdb_disconnect(&mut self.con);
            ffi::duckdb_close(&mut self.db);
        }
    }
}

/// The checked result of a query.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
    /// More rows existed than `max_rows`.
    pub truncated: bool,
}

/// The sandbox of one store.
#[derive(Debug)]
pub struct SqlSandbox {
    parser: Mutex<Parser>,
}

impl SqlSandbox {
    pub fn new() -> Result<SqlSandbox, String> {
        Ok(SqlSandbox {
            parser: Mutex::new(Parser::open()?),
        })
    }

    /// Check `sql` (one `SELECT`, by DuckDB's parser and binder) without running it.
    pub fn check(&self, sql: &str) -> Result<(), SandboxError> {
        if sql.len() > 64 * 1024 {
            return Err(SandboxError::Refused(
                "the query is longer than 64 KiB".into(),
            ));
        }
        let types = self.parser.lock().statement_types(sql)?;
        match types.as_slice() {
            [t] if *t == ffi::duckdb_statement_type_DUCKDB_STATEMENT_TYPE_SELECT => Ok(()),
            [_] => Err(SandboxError::Refused(
                "only a SELECT statement is allowed".into(),
            )),
            many => Err(SandboxError::Refused(format!(
                "exactly one statement is allowed; found {}",
                many.len()
            ))),
        }
    }

    /// Check, then run `sql` read-only on `store` with the row and time limits.
    pub fn run(
        &self,
        store: &Store,
        sql: &str,
        max_rows: usize,
        timeout: Duration,
    ) -> Result<QueryResult, SandboxError> {
        self.check(sql)?;
        let conn = store
            .connection()
            .map_err(|e| SandboxError::Failed(e.to_string()))?;
        let interrupt = conn.interrupt_handle();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let timer = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(timeout) {
                interrupt.interrupt();
                true
            } else {
                false
            }
        });
        let out = run_read_only(&conn, sql, max_rows);
        let _ = done_tx.send(());
        let timed_out = timer.join().unwrap_or(false);
        let _ = conn.execute_batch("ROLLBACK");
        match out {
            Err(_) if timed_out => Err(SandboxError::Timeout(timeout)),
            other => other,
        }
    }
}

fn run_read_only(
    conn: &duckdb::Connection,
    sql: &str,
    max_rows: usize,
) -> Result<QueryResult, SandboxError> {
    let failed = |e: duckdb::Error| SandboxError::Failed(e.to_string());
    conn.execute_batch("BEGIN TRANSACTION READ ONLY")
        .map_err(failed)?;
    let mut st = conn.prepare(sql).map_err(failed)?;
    let mut rows = st.query([]).map_err(failed)?;
    let columns: Vec<String> = rows.as_ref().map(|s| s.column_names()).unwrap_or_default();
    let n = columns.len();
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(row) = rows.next().map_err(failed)? {
        if out.len() >= max_rows {
            truncated = true;
            break;
        }
        let mut vals = Vec::with_capacity(n);
        for i in 0..n {
            vals.push(crate::query::value_json(row.get_ref(i).map_err(failed)?));
        }
        out.push(vals);
    }
    Ok(QueryResult {
        columns,
        rows: out,
        truncated,
    })
}
