//! The SQL sandbox of `fleet.cluster.run_analysis`.
//!
//! A query runs only when all of these hold:
//! 1. DuckDB's own parser, on a private in-memory database with the same (empty) schema,
//!    external access off and extension autoload/autoinstall off, extracts exactly one
//!    statement from the text, and binding it there says it is a `SELECT`. Nothing is run
//!    before this check: a naive `prepare` of `COMMIT; INSERT ...; SELECT 42` would execute
//!    the first two statements.
//!    Table functions that write (`checkpoint()`, `force_checkpoint()`) are refused by name.
//! 2. It then runs as `SELECT * FROM (<query>) LIMIT max_rows + 1` (DuckDB materialises a
//!    result before the first row is read: the limit bounds what it builds) on a reader
//!    connection of the writer's instance (which sees every commit), inside
//!    `BEGIN TRANSACTION READ ONLY`, on an instance opened with external access off,
//!    autoload and autoinstall off and its configuration locked (no `SET`).
//! 3. At most `max_rows` rows and `max_bytes` of JSON values are answered (`truncated`
//!    beyond). The time limit and the interruption are the caller's (`Tools::call` runs the
//!    check and the query under it).

use std::ffi::{CStr, CString};
use std::ptr;
use std::time::Duration;

use duckdb::ffi;

use crate::rollup;
use crate::store::{MIGRATIONS, SCHEMA, Store, StoreError, VIEWS};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SandboxError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("query failed: {0}")]
    Failed(String),
    #[error("query interrupted after the {0:?} time limit")]
    Timeout(Duration),
}

/// Table functions that a `SELECT` may call but that write; refused by name.
const WRITING_FUNCTIONS: [&str; 2] = ["checkpoint", "force_checkpoint"];

/// DuckDB's parser and binder on a private, empty, in-memory database. Each check takes a
/// connection of its own, so checks run side by side (one slow check queues nothing).
pub struct Parser {
    db: ffi::duckdb_database,
    con: ffi::duckdb_connection,
}

// SAFETY: a DuckDB database may be connected to from any thread at once; `con` is used only
// at open and close, each check connecting on its own.
unsafe impl Send for Parser {}
// SAFETY: as above: shared use only connects (`duckdb_connect` is thread-safe).
unsafe impl Sync for Parser {}

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
        // Every table and view SQL users are told about, as `Store::open` leaves them.
        let schema = [
            SCHEMA,
            MIGRATIONS,
            rollup::SCHEMA,
            rollup::SEQ_COLUMN,
            ";",
            rollup::VIEWS,
            VIEWS,
        ]
        .concat();
        let schema = c_string(&schema).map_err(|e| e.to_string())?;
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
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: `self.db` is open until `Parser` drops; `con` is a local out-pointer,
        // disconnected below.
        if unsafe { ffi::duckdb_connect(self.db, &mut con) } != ffi::DuckDBSuccess {
            return Err(SandboxError::Failed(
                "cannot connect to the parser database".into(),
            ));
        }
        // Binding is what tells a SELECT; optimising would also fold constant expressions,
        // i.e. run them, here outside any time limit.
        let pragma = c_string("PRAGMA disable_optimizer")?;
        // SAFETY: valid connection and query; a null result pointer is allowed.
        unsafe { ffi::duckdb_query(con, pragma.as_ptr(), ptr::null_mut()) };
        let result = Self::types_on(con, &q);
        // SAFETY: connected above, disconnected once.
        unsafe { ffi::duckdb_disconnect(&mut con) };
        result
    }

    /// How many statements DuckDB's parser finds in `sql` (nothing bound or run); `None`
    /// when it does not parse.
    pub fn statement_count(&self, sql: &str) -> Result<Option<usize>, SandboxError> {
        let q = c_string(sql)?;
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: as in `statement_types`.
        if unsafe { ffi::duckdb_connect(self.db, &mut con) } != ffi::DuckDBSuccess {
            return Err(SandboxError::Failed(
                "cannot connect to the parser database".into(),
            ));
        }
        let mut extracted: ffi::duckdb_extracted_statements = ptr::null_mut();
        // SAFETY: valid connection and query; `extracted` is destroyed right after.
        let n = unsafe { ffi::duckdb_extract_statements(con, q.as_ptr(), &mut extracted) };
        // SAFETY: always destroyed, then the connection closed, each once.
        unsafe {
            ffi::duckdb_destroy_extracted(&mut extracted);
            ffi::duckdb_disconnect(&mut con);
        }
        Ok((n > 0).then_some(n as usize))
    }

    /// DuckDB's parse tree of `sql` as JSON (`json_serialize_sql`; nothing bound or run).
    pub fn parse_tree(&self, sql: &str) -> Result<String, SandboxError> {
        let q = c_string(sql)?;
        let select = c_string("SELECT json_serialize_sql(?::VARCHAR)")?;
        let failed =
            |m: String| SandboxError::Failed(format!("cannot read the query's parse tree: {m}"));
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: as in `statement_types`.
        if unsafe { ffi::duckdb_connect(self.db, &mut con) } != ffi::DuckDBSuccess {
            return Err(failed("no connection".into()));
        }
        let mut stmt: ffi::duckdb_prepared_statement = ptr::null_mut();
        // SAFETY: `stmt` and `result` are locals destroyed below on every path; every pointer
        // passed is valid for the call; the value read is freed with `duckdb_free`.
        unsafe {
            let mut result: ffi::duckdb_result = std::mem::zeroed();
            let out = if ffi::duckdb_prepare(con, select.as_ptr(), &mut stmt) != ffi::DuckDBSuccess
            {
                Err(failed(c_message(ffi::duckdb_prepare_error(stmt))))
            } else if ffi::duckdb_bind_varchar(stmt, 1, q.as_ptr()) != ffi::DuckDBSuccess {
                Err(failed("cannot bind the query".into()))
            } else if ffi::duckdb_execute_prepared(stmt, &mut result) != ffi::DuckDBSuccess {
                let m = c_message(ffi::duckdb_result_error(&mut result));
                ffi::duckdb_destroy_result(&mut result);
                Err(failed(m))
            } else {
                let v = ffi::duckdb_value_varchar(&mut result, 0, 0);
                let text = if v.is_null() {
                    Err(failed("no parse tree".into()))
                } else {
                    let t = CStr::from_ptr(v).to_string_lossy().into_owned();
                    ffi::duckdb_free(v.cast());
                    Ok(t)
                };
                ffi::duckdb_destroy_result(&mut result);
                text
            };
            ffi::duckdb_destroy_prepare(&mut stmt);
            ffi::duckdb_disconnect(&mut con);
            out
        }
    }

    fn types_on(
        con: ffi::duckdb_connection,
        q: &CStr,
    ) -> Result<Vec<ffi::duckdb_statement_type>, SandboxError> {
        let mut extracted: ffi::duckdb_extracted_statements = ptr::null_mut();
        // SAFETY: valid connection and query; `extracted` is destroyed below.
        let n = unsafe { ffi::duckdb_extract_statements(con, q.as_ptr(), &mut extracted) };
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
                    ffi::duckdb_prepare_extracted_statement(con, extracted, i, &mut stmt)
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
    parser: Parser,
}

/// Whether `sql` calls one of `names` as a function (`name(`, `"name" (`, any case).
fn calls_any(sql: &str, names: &[&str]) -> Option<String> {
    let lower = sql.to_ascii_lowercase().replace('"', " ");
    let bytes = lower.as_bytes();
    for name in names {
        let mut from = 0;
        while let Some(at) = lower[from..].find(name) {
            let start = from + at;
            let end = start + name.len();
            from = end;
            let before_ok = start == 0 || {
                let b = bytes[start - 1];
                !(b.is_ascii_alphanumeric() || b == b'_')
            };
            let after = lower[end..].trim_start();
            if before_ok && after.starts_with('(') {
                return Some((*name).to_string());
            }
        }
    }
    None
}

/// An estimate of the bytes `v` takes in a JSON answer.
pub fn json_size(v: &serde_json::Value) -> usize {
    use serde_json::Value as J;
    match v {
        J::Null | J::Bool(_) => 5,
        J::Number(_) => 24,
        J::String(s) => s.len() + 2,
        J::Array(a) => a.iter().map(json_size).sum::<usize>() + 2,
        J::Object(m) => {
            m.iter()
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
                + 2
        }
    }
}

impl SqlSandbox {
    pub fn new() -> Result<SqlSandbox, String> {
        Ok(SqlSandbox {
            parser: Parser::open()?,
        })
    }

    /// Check `sql` (one `SELECT`, by DuckDB's parser and binder) without running it.
    pub fn check(&self, sql: &str) -> Result<(), SandboxError> {
        if sql.len() > 64 * 1024 {
            return Err(SandboxError::Refused(
                "the query is longer than 64 KiB".into(),
            ));
        }
        if let Some(f) = calls_any(sql, &WRITING_FUNCTIONS) {
            return Err(SandboxError::Refused(format!(
                "{f}() writes to the database; only reading is allowed"
            )));
        }
        // Before binding: binding can evaluate constant expressions (`repeat('x', 3e9)`).
        check_generated(&self.parser.parse_tree(sql)?)?;
        let types = self.parser.statement_types(sql)?;
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

    /// Check, then run `sql` read-only on `store`, reading at most `max_rows` rows and about
    /// `max_bytes` of values. Call inside a registered query ([`Store::begin_query`]) so a
    /// time limit or shutdown can interrupt it.
    pub fn run(
        &self,
        store: &Store,
        sql: &str,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<QueryResult, SandboxError> {
        self.check(sql)?;
        // The text may end in a line comment, hence the line breaks; the wrapped text must
        // still be one statement (an unterminated comment or quote cannot join another).
        let body = sql.trim_end().trim_end_matches(';');
        let wrapped = format!(
            "SELECT * FROM (\n{body}\n) LIMIT {}",
            max_rows.saturating_add(1)
        );
        if self.parser.statement_count(&wrapped)? != Some(1) {
            return Err(SandboxError::Refused(
                "the query cannot be limited to max_rows (unbalanced text)".into(),
            ));
        }
        let out = store.with_reader(|conn| {
            let r = run_read_only(conn, &wrapped, max_rows, max_bytes);
            let _ = conn.execute_batch("ROLLBACK");
            Ok(r)
        });
        match out {
            Ok(r) => r,
            Err(StoreError::Interrupted) => Err(SandboxError::Failed("interrupted".into())),
            Err(e) => Err(SandboxError::Failed(e.to_string())),
        }
    }
}

fn run_read_only(
    conn: &duckdb::Connection,
    sql: &str,
    max_rows: usize,
    max_bytes: usize,
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
    let mut bytes = 0usize;
    while let Some(row) = rows.next().map_err(failed)? {
        if out.len() >= max_rows {
            truncated = true;
            break;
        }
        let mut vals = Vec::with_capacity(n);
        for i in 0..n {
            vals.push(crate::query::cell_json(row, i).map_err(failed)?);
        }
        bytes = bytes.saturating_add(vals.iter().map(json_size).sum::<usize>());
        if bytes > max_bytes {
            truncated = true;
            break;
        }
        out.push(vals);
    }
    Ok(QueryResult {
        columns,
        rows: out,
        truncated,
    })
}

/// The most bytes that the calls of one query whose result size is set by a number (see
/// [`generated_bytes`]) may produce per row, all together. DuckDB builds such a result in
/// one piece, outside its `memory_limit` and without seeing an interrupt, for each row of
/// a 2,048-row vector: this bounds one vector's share to 128 MiB.
pub const MAX_GENERATED_BYTES: u64 = 64 * 1024;

/// Aggregates that concatenate their inputs: as window functions each row's result holds
/// its whole frame (quadratic in the rows), built within one vector.
const CONCATENATING_AGGREGATES: [&str; 8] = [
    "string_agg",
    "group_concat",
    "listagg",
    "list",
    "array_agg",
    "histogram",
    "bitstring_agg",
    "fill",
];

/// Functions whose lambda can grow its accumulator geometrically in one call.
const REDUCING: [&str; 3] = ["list_reduce", "array_reduce", "reduce"];

/// An integer literal of the parse tree (`None`: anything else).
fn literal_int(v: &serde_json::Value) -> Option<i128> {
    if v["class"] != "CONSTANT" || v["value"]["is_null"] != false {
        return None;
    }
    let id = v["value"]["type"]["id"].as_str()?;
    if !matches!(
        id,
        "TINYINT"
            | "SMALLINT"
            | "INTEGER"
            | "BIGINT"
            | "UTINYINT"
            | "USMALLINT"
            | "UINTEGER"
            | "UBIGINT"
    ) {
        return None;
    }
    let n = &v["value"]["value"];
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// A text literal of the parse tree.
fn literal_text(v: &serde_json::Value) -> Option<&str> {
    if v["class"] != "CONSTANT" || v["value"]["type"]["id"] != "VARCHAR" {
        return None;
    }
    v["value"]["value"].as_str()
}

/// The numbers in a `printf` (`%08.3f`) or `format` (`{:>12}`) pattern's conversion specs;
/// `None` where a width or precision comes from an argument (`*`, a nested `{}`).
fn pattern_widths(pattern: &str, printf: bool) -> Option<Vec<u64>> {
    let mut widths = Vec::new();
    let mut push_numbers = |spec: &str| {
        for n in spec
            .split(|c: char| !c.is_ascii_digit())
            .filter(|n| !n.is_empty())
        {
            widths.push(n.parse::<u64>().unwrap_or(u64::MAX));
        }
    };
    let mut chars = pattern.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if printf && c == '%' {
            let rest = &pattern[i + 1..];
            let len = rest
                .find(|c: char| !("-+ #0123456789.*'lhLqjzt".contains(c)))
                .unwrap_or(rest.len());
            let spec = &rest[..len];
            if spec.contains('*') {
                return None;
            }
            push_numbers(spec);
            // `%%` and the conversion letter.
            for _ in 0..=spec.chars().count() {
                chars.next();
            }
        } else if !printf && c == '{' {
            if chars.peek().map(|(_, c)| *c) == Some('{') {
                chars.next();
                continue;
            }
            let rest = &pattern[i + 1..];
            let end = rest.find('}').unwrap_or(rest.len());
            let spec = &rest[..end];
            if spec.contains('{') {
                return None;
            }
            // The argument index before `:` is no width.
            push_numbers(spec.split_once(':').map_or("", |(_, s)| s));
        }
    }
    Some(widths)
}

/// The bytes one call of `name` with `args` may produce, for the functions whose result
/// size a number sets (`repeat`, `lpad`, `range`, ...): `Ok(None)` for any other function,
/// an error where the size is not known from the query text.
fn call_bytes(name: &str, args: &[serde_json::Value]) -> Result<Option<u64>, String> {
    let any_int = |i: usize, what: &str| {
        args.get(i).and_then(literal_int).ok_or_else(|| {
            format!("{name}(): its {what} must be an integer literal, so the size of its result is known before it runs")
        })
    };
    let int = |i: usize, what: &str| {
        any_int(i, what).map(|n| u64::try_from(n.max(0)).unwrap_or(u64::MAX))
    };
    let small_text = |i: usize, what: &str| match args.get(i) {
        None => Ok(0),
        Some(a) => match literal_text(a) {
            Some(t) if t.len() <= 64 => Ok(t.len() as u64),
            _ => Err(format!(
                "{name}(): its {what} must be a text literal of at most 64 bytes"
            )),
        },
    };
    let bytes = match name {
        "repeat" => {
            let text = args.first().and_then(literal_text).ok_or_else(|| {
                format!("{name}(): its first argument must be a text literal, so the size of its result is known before it runs")
            })?;
            (text.len() as u64).saturating_mul(int(1, "count")?)
        }
        // A character takes up to 4 bytes.
        "lpad" | "rpad" => int(1, "length")?.saturating_mul(4),
        "range" | "generate_series" => {
            let n: Vec<i128> = (0..args.len())
                .map(|i| any_int(i, "bounds and step"))
                .collect::<Result<_, _>>()?;
            let count = match n.as_slice() {
                [stop] => *stop,
                [start, stop] => stop - start,
                [start, stop, step] if *step != 0 => (stop - start) / step,
                _ => i128::MAX,
            };
            u64::try_from(count.max(0))
                .unwrap_or(u64::MAX)
                .saturating_add(1)
                .saturating_mul(8)
        }
        "list_resize" | "array_resize" => {
            let fill = small_text(2, "fill value")
                .or_else(|e| args.get(2).and_then(literal_int).map(|_| 8).ok_or(e))?;
            int(1, "length")?.saturating_mul(fill.max(8))
        }
        // Up to 3 bytes per block character.
        "bar" if args.len() >= 4 => int(3, "width")?.saturating_mul(3),
        "bar" => 80 * 3,
        "to_base" if args.len() >= 3 => int(2, "minimum length")?,
        "bitstring" => int(1, "length")? / 8 + 1,
        "printf" | "format" => {
            let pattern = args
                .first()
                .and_then(literal_text)
                .ok_or_else(|| format!("{name}(): its pattern must be a text literal"))?;
            let widths = pattern_widths(pattern, name == "printf").ok_or_else(|| {
                format!("{name}(): widths and precisions must be written in the pattern, not taken from an argument")
            })?;
            widths
                .iter()
                .fold(pattern.len() as u64, |a, w| a.saturating_add(*w))
        }
        "replace" | "regexp_replace" => {
            small_text(2, "replacement")?;
            return Ok(None);
        }
        _ => return Ok(None),
    };
    Ok(Some(bytes))
}

/// Walk DuckDB's parse tree (JSON) and add up what its number-sized calls produce; refuse
/// what no such sum bounds (see [`check_generated`]).
fn walk_tree(v: &serde_json::Value, in_lambda: bool, total: &mut u64) -> Result<(), String> {
    use serde_json::Value as J;
    match v {
        J::Array(a) => a.iter().try_for_each(|x| walk_tree(x, in_lambda, total)),
        J::Object(m) => {
            let class = m.get("class").and_then(J::as_str).unwrap_or("");
            let name = m
                .get("function_name")
                .and_then(J::as_str)
                .unwrap_or("")
                .to_ascii_lowercase();
            if class == "FUNCTION" {
                if REDUCING.contains(&name.as_str()) {
                    return Err(format!(
                        "{name}(): refused (its lambda can grow the result without bound in one call); use list_aggregate or list_transform"
                    ));
                }
                let args = m
                    .get("children")
                    .and_then(J::as_array)
                    .map_or(&[][..], Vec::as_slice);
                if let Some(bytes) = call_bytes(&name, args)? {
                    if in_lambda {
                        return Err(format!(
                            "{name}() inside a lambda: refused (the lambda runs once per list element)"
                        ));
                    }
                    *total = total.saturating_add(bytes);
                    if *total > MAX_GENERATED_BYTES {
                        return Err(format!(
                            "{name}(): calls whose result size a number sets (repeat, lpad, rpad, range, printf, ...) may produce at most {MAX_GENERATED_BYTES} bytes per row in one query; this one asks for {total}"
                        ));
                    }
                }
            }
            if class == "WINDOW" && CONCATENATING_AGGREGATES.contains(&name.as_str()) {
                return Err(format!(
                    "{name}() as a window function: refused (each row would hold its whole frame); use it as an aggregate"
                ));
            }
            for (k, child) in m {
                match (k.as_str(), m.get("type").and_then(J::as_str)) {
                    // A table function streams its rows: its own size is no row's size, its
                    // arguments are checked as usual.
                    ("function", Some("TABLE_FUNCTION")) => {
                        walk_tree(&child["children"], in_lambda, total)?
                    }
                    _ => walk_tree(child, in_lambda || class == "LAMBDA", total)?,
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Refuse a query whose calls could build values beyond [`MAX_GENERATED_BYTES`] per row
/// from numbers in its text (`repeat('x', 3000000000)`), or whose size no text bounds.
fn check_generated(tree: &str) -> Result<(), SandboxError> {
    let tree: serde_json::Value = serde_json::from_str(tree).map_err(|_| {
        SandboxError::Refused(
            "the query is nested too deeply to check; split it into common table expressions"
                .into(),
        )
    })?;
    // Statements that are not SELECTs are refused here, before binding could evaluate any
    // of their constants.
    if tree["error"] == true {
        let msg = tree["error_message"].as_str().unwrap_or("unknown error");
        return Err(SandboxError::Refused(if msg.contains("Only SELECT") {
            "only a SELECT statement is allowed".into()
        } else {
            format!("not valid SQL: {msg}")
        }));
    }
    let mut total = 0;
    walk_tree(&tree["statements"], false, &mut total).map_err(SandboxError::Refused)
}
