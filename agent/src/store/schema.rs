//! The store's tables, in the Go Ingero agent's layout: the same table and column names and
//! the same source and op ids, so a database written by either agent opens in the other's
//! tools. Two additions, both invisible to a reader that names its columns: `node` on
//! `event_aggregates` (part of its key, so merged nodes' aggregates stay apart) and ops the
//! Go agent has no id for (numbered from 50 up within their source).

use rusqlite::Connection;

/// `PRAGMA user_version` this code writes (the Go agent's numbering: schema 0.10 is 10).
pub const USER_VERSION: i64 = 10;

/// Tables created on a new database. Every statement is idempotent.
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS events (
    id         TEXT PRIMARY KEY,
    timestamp  INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    tid        INTEGER NOT NULL,
    source     INTEGER NOT NULL,
    op         INTEGER NOT NULL,
    duration   INTEGER NOT NULL,
    gpu_id     INTEGER NOT NULL DEFAULT 0,
    arg0       INTEGER NOT NULL DEFAULT 0,
    arg1       INTEGER NOT NULL DEFAULT 0,
    ret_code   INTEGER NOT NULL DEFAULT 0,
    stack_hash INTEGER NOT NULL DEFAULT 0,
    cgroup_id  INTEGER NOT NULL DEFAULT 0,
    node       TEXT NOT NULL DEFAULT '',
    rank       INTEGER,
    local_rank INTEGER,
    world_size INTEGER,
    comm       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_events_timestamp ON events(timestamp);
CREATE INDEX IF NOT EXISTS idx_events_pid ON events(pid);
CREATE INDEX IF NOT EXISTS idx_events_source_op_stack ON events(source, op, stack_hash);
CREATE TABLE IF NOT EXISTS stack_traces (
    hash   INTEGER PRIMARY KEY,
    ips    TEXT NOT NULL,
    frames TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS causal_chains (
    id              TEXT PRIMARY KEY,
    detected_at     INTEGER NOT NULL,
    severity        TEXT NOT NULL,
    summary         TEXT NOT NULL,
    root_cause      TEXT NOT NULL,
    explanation     TEXT NOT NULL,
    recommendations TEXT NOT NULL DEFAULT '',
    cuda_op         TEXT NOT NULL DEFAULT '',
    cuda_p99_us     INTEGER NOT NULL DEFAULT 0,
    cuda_p50_us     INTEGER NOT NULL DEFAULT 0,
    tail_ratio      REAL NOT NULL DEFAULT 0,
    timeline        TEXT NOT NULL DEFAULT '',
    node            TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_chains_detected_at ON causal_chains(detected_at);
CREATE INDEX IF NOT EXISTS idx_chains_severity ON causal_chains(severity);
CREATE TABLE IF NOT EXISTS sources (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ops (
    source_id   INTEGER NOT NULL,
    op_id       INTEGER NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    PRIMARY KEY (source_id, op_id)
);
CREATE TABLE IF NOT EXISTS schema_info (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at INTEGER NOT NULL,
    stopped_at INTEGER NOT NULL DEFAULT 0,
    gpu_model  TEXT NOT NULL DEFAULT '',
    gpu_driver TEXT NOT NULL DEFAULT '',
    cpu_model  TEXT NOT NULL DEFAULT '',
    cpu_cores  INTEGER NOT NULL DEFAULT 0,
    mem_total  INTEGER NOT NULL DEFAULT 0,
    kernel     TEXT NOT NULL DEFAULT '',
    os_release TEXT NOT NULL DEFAULT '',
    cuda_ver   TEXT NOT NULL DEFAULT '',
    python_ver TEXT NOT NULL DEFAULT '',
    ingero_ver TEXT NOT NULL DEFAULT '',
    pid_filter TEXT NOT NULL DEFAULT '',
    flags      TEXT NOT NULL DEFAULT '',
    node       TEXT NOT NULL DEFAULT '',
    rank       INTEGER,
    local_rank INTEGER,
    world_size INTEGER
);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at);
CREATE TABLE IF NOT EXISTS process_names (
    pid     INTEGER NOT NULL,
    name    TEXT NOT NULL,
    seen_at INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (pid)
);
CREATE TABLE IF NOT EXISTS event_aggregates (
    bucket   INTEGER NOT NULL,
    source   INTEGER NOT NULL,
    op       INTEGER NOT NULL,
    pid      INTEGER NOT NULL DEFAULT 0,
    count    INTEGER NOT NULL DEFAULT 0,
    stored   INTEGER NOT NULL DEFAULT 0,
    sum_dur  INTEGER NOT NULL DEFAULT 0,
    min_dur  INTEGER NOT NULL DEFAULT 0,
    max_dur  INTEGER NOT NULL DEFAULT 0,
    sum_arg0 INTEGER NOT NULL DEFAULT 0,
    node     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (bucket, source, op, pid, node)
);
CREATE INDEX IF NOT EXISTS idx_aggregates_bucket ON event_aggregates(bucket);
";

/// Source ids (the Go agent's `sources` table).
pub mod source {
    pub const CUDA: i64 = 1;
    pub const HOST: i64 = 3;
    pub const DRIVER: i64 = 4;
    pub const IO: i64 = 5;
    pub const TCP: i64 = 6;
    pub const NET: i64 = 7;
    pub const NCCL: i64 = 9;
    /// GPU health samples and events through NVML (no Go id).
    pub const NVML: i64 = 50;
}

/// Op ids within their source. Those at 50 and above have no Go id.
pub mod op {
    pub const CUDA_MALLOC: i64 = 1;
    pub const CUDA_FREE: i64 = 2;
    pub const CUDA_LAUNCH_KERNEL: i64 = 3;
    pub const CUDA_MEMCPY: i64 = 4;
    pub const CUDA_STREAM_SYNC: i64 = 5;
    pub const CUDA_DEVICE_SYNC: i64 = 6;
    pub const CUDA_MEMCPY_ASYNC: i64 = 7;
    pub const CUDA_GRAPH_LAUNCH: i64 = 50;

    pub const HOST_SCHED_SWITCH: i64 = 1;
    pub const HOST_SCHED_WAKEUP: i64 = 2;
    pub const HOST_PAGE_ALLOC: i64 = 3;
    pub const HOST_OOM_KILL: i64 = 4;
    pub const HOST_RECLAIM_STALL: i64 = 50;

    pub const TCP_RETRANSMIT: i64 = 1;

    pub const NVML_CLOCK_REASONS: i64 = 1;
    pub const NVML_SM_CLOCK: i64 = 2;
    pub const NVML_TEMPERATURE: i64 = 3;
    pub const NVML_POWER: i64 = 4;
    pub const NVML_ECC: i64 = 5;
    pub const NVML_XID: i64 = 6;

    pub const DRIVER_LAUNCH_KERNEL: i64 = 1;
    pub const DRIVER_MEMCPY: i64 = 2;
    pub const DRIVER_MEMCPY_ASYNC: i64 = 3;
    pub const DRIVER_CTX_SYNC: i64 = 4;
    pub const DRIVER_MEM_ALLOC: i64 = 5;
    pub const DRIVER_MEM_FREE: i64 = 50;
    pub const DRIVER_STREAM_SYNC: i64 = 51;
    pub const DRIVER_GRAPH_LAUNCH: i64 = 52;

    pub const IO_READ: i64 = 1;
    pub const IO_WRITE: i64 = 2;
    pub const IO_DISCARD: i64 = 3;
}

const SOURCES: &[(i64, &str, &str)] = &[
    (1, "CUDA", "CUDA Runtime API (libcudart) - uprobes"),
    (
        3,
        "HOST",
        "Host kernel events - tracepoints (scheduler, memory)",
    ),
    (4, "DRIVER", "CUDA Driver API (libcuda) - uprobes"),
    (
        5,
        "IO",
        "Block I/O - tracepoints (block_rq_issue/block_rq_complete)",
    ),
    (6, "TCP", "TCP events - tracepoints"),
    (7, "NET", "Network socket events"),
    (9, "NCCL", "NCCL collectives (libnccl) - uprobes"),
    (
        50,
        "NVML",
        "GPU clocks, throttle reasons, temperature, power, ECC and XID errors - NVML",
    ),
];

const OPS: &[(i64, i64, &str, &str)] = &[
    (1, 1, "cudaMalloc", "GPU memory allocation"),
    (1, 2, "cudaFree", "GPU memory free"),
    (
        1,
        3,
        "cudaLaunchKernel",
        "Kernel launch through the runtime API",
    ),
    (1, 4, "cudaMemcpy", "Synchronous host/device copy"),
    (1, 5, "cudaStreamSync", "Wait for a stream's work"),
    (1, 6, "cudaDeviceSync", "Wait for all work on the device"),
    (1, 7, "cudaMemcpyAsync", "Asynchronous host/device copy"),
    (
        1,
        50,
        "cudaGraphLaunch",
        "CUDA graph launch through the runtime API",
    ),
    (
        3,
        1,
        "sched_switch",
        "Thread descheduled (aggregates: sum_dur = off-CPU ns, sum_arg0 = involuntary switches)",
    ),
    (
        3,
        2,
        "sched_wakeup",
        "Thread woken (aggregates: sum_dur = run-queue delay ns)",
    ),
    (
        3,
        3,
        "mm_page_alloc",
        "Kernel page allocation (arg0 = bytes)",
    ),
    (
        3,
        4,
        "oom_kill",
        "Out-of-memory killer invoked (pid = victim, arg0 = its RSS bytes, arg1 = pid whose allocation invoked it)",
    ),
    (
        3,
        50,
        "reclaim_stall",
        "Direct or cgroup memory reclaim in an allocation (aggregates: count = stalls, sum_dur = stalled ns, sum_arg0 = pages reclaimed)",
    ),
    (
        4,
        1,
        "cuLaunchKernel",
        "Kernel launch through the driver API",
    ),
    (4, 2, "cuMemcpy", "Synchronous copy through the driver API"),
    (
        4,
        3,
        "cuMemcpyAsync",
        "Asynchronous copy through the driver API",
    ),
    (4, 4, "cuCtxSynchronize", "Wait for all work in the context"),
    (
        4,
        5,
        "cuMemAlloc",
        "GPU memory allocation through the driver API",
    ),
    (4, 50, "cuMemFree", "GPU memory free through the driver API"),
    (
        4,
        51,
        "cuStreamSynchronize",
        "Wait for a stream's work (driver API)",
    ),
    (
        4,
        52,
        "cuGraphLaunch",
        "CUDA graph launch through the driver API",
    ),
    (5, 1, "block_read", "Block device read request"),
    (5, 2, "block_write", "Block device write request"),
    (5, 3, "block_discard", "Block device discard request"),
    (6, 1, "tcp_retransmit", "TCP segment retransmission"),
    (
        50,
        1,
        "gpu_clock_reasons",
        "Clock event (throttle) reasons, sampled (arg0 = nvmlClocksEventReasons bitmask)",
    ),
    (50, 2, "gpu_sm_clock", "SM clock, sampled (arg0 = MHz)"),
    (
        50,
        3,
        "gpu_temperature",
        "GPU temperature, sampled (arg0 = C)",
    ),
    (50, 4, "gpu_power", "Power draw, sampled (arg0 = mW)"),
    (
        50,
        5,
        "gpu_ecc_errors",
        "ECC error counts since the driver loaded, when they change (arg0 = uncorrected, arg1 = corrected)",
    ),
    (50, 6, "gpu_xid", "XID (critical error) event (arg0 = XID)"),
    (9, 1, "ncclCommInitRank", "NCCL communicator init"),
    (9, 2, "ncclCommDestroy", "NCCL communicator destroy"),
    (9, 3, "ncclAllReduce", "NCCL all-reduce"),
    (9, 4, "ncclAllGather", "NCCL all-gather"),
    (9, 5, "ncclReduceScatter", "NCCL reduce-scatter"),
    (9, 6, "ncclBroadcast", "NCCL broadcast"),
    (9, 7, "ncclSend", "NCCL send"),
    (9, 8, "ncclRecv", "NCCL receive"),
    (9, 9, "ncclCommInitAll", "NCCL single-process init"),
];

const INFO: &[(&str, &str)] = &[
    ("version", "0.10"),
    ("timestamp_unit", "nanoseconds (Unix epoch)"),
    ("duration_unit", "nanoseconds"),
    (
        "node_note",
        "events.id is {node}:{seq}; causal_chains.id is {node}:{descriptor}",
    ),
    (
        "event_aggregates_note",
        "ingero-agent (Rust) rows: 1-second buckets; sched_switch: count = switches, sum_dur = off-CPU ns, sum_arg0 = involuntary switches; sched_wakeup: sum_dur = run-queue delay ns; block_*: sum_dur = latency ns, sum_arg0 = bytes; tcp_retransmit: count; reclaim_stall: sum_dur = stalled ns, sum_arg0 = pages; timed CUDA/driver/NCCL calls: count, sum_dur, max_dur, stored = those with an events row (at most 2,000 per pid, op and second); kernel launches: count only; NVML samples are events rows with gpu_id",
    ),
    ("writer", "ingero-agent (Rust)"),
];

/// The store's (source, op) of a probe record (`bpf/common.h` codes).
pub fn from_probe(probe_source: u8, probe_op: u8) -> Option<(i64, i64)> {
    use crate::events::{cuda_op as c, source as s};
    let (src, o) = match probe_source {
        s::CUDA_RUNTIME => (
            source::CUDA,
            match probe_op {
                c::LAUNCH_KERNEL => op::CUDA_LAUNCH_KERNEL,
                c::MALLOC => op::CUDA_MALLOC,
                c::FREE => op::CUDA_FREE,
                c::MEMCPY => op::CUDA_MEMCPY,
                c::MEMCPY_ASYNC => op::CUDA_MEMCPY_ASYNC,
                c::STREAM_SYNC => op::CUDA_STREAM_SYNC,
                c::DEVICE_SYNC => op::CUDA_DEVICE_SYNC,
                _ => return None,
            },
        ),
        s::CUDA_DRIVER => (
            source::DRIVER,
            match probe_op {
                c::LAUNCH_KERNEL => op::DRIVER_LAUNCH_KERNEL,
                c::MALLOC => op::DRIVER_MEM_ALLOC,
                c::FREE => op::DRIVER_MEM_FREE,
                c::MEMCPY => op::DRIVER_MEMCPY,
                c::MEMCPY_ASYNC => op::DRIVER_MEMCPY_ASYNC,
                c::STREAM_SYNC => op::DRIVER_STREAM_SYNC,
                c::DEVICE_SYNC => op::DRIVER_CTX_SYNC,
                _ => return None,
            },
        ),
        s::NCCL => (source::NCCL, i64::from(probe_op)),
        _ => return None,
    };
    Some((src, o))
}

/// The name of an op, from the built-in table (the database's own `ops` may have more).
pub fn op_name(source: i64, op: i64) -> Option<&'static str> {
    OPS.iter()
        .find(|(s, o, _, _)| *s == source && *o == op)
        .map(|(_, _, n, _)| *n)
}

/// The (source, op) of a name in the built-in table.
pub fn op_by_name(name: &str) -> Option<(i64, i64)> {
    OPS.iter()
        .find(|(_, _, n, _)| n.eq_ignore_ascii_case(name))
        .map(|(s, o, _, _)| (*s, *o))
}

/// Whether `table` has `column` (older Go databases lack `node` and `comm`).
pub fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let mut rows = stmt.query([table])?;
    while let Some(r) = rows.next()? {
        let name: String = r.get(0)?;
        if name == column {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Add the built-in sources, ops and schema notes (existing rows are kept, the notes
/// replaced).
pub fn insert_lookups(conn: &Connection) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    for (id, name, desc) in SOURCES {
        tx.execute(
            "INSERT OR IGNORE INTO sources (id, name, description) VALUES (?1, ?2, ?3)",
            rusqlite::params![id, name, desc],
        )?;
    }
    for (s, o, name, desc) in OPS {
        tx.execute(
            "INSERT OR IGNORE INTO ops (source_id, op_id, name, description) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![s, o, name, desc],
        )?;
    }
    for (k, v) in INFO {
        tx.execute(
            "INSERT OR REPLACE INTO schema_info (key, value) VALUES (?1, ?2)",
            rusqlite::params![k, v],
        )?;
    }
    tx.commit()
}

/// Create the tables on a new database, or bring an older one (the Go agent's, before
/// the node and comm columns) up to this layout. Lookup rows are added, never replaced.
pub fn apply(conn: &Connection) -> rusqlite::Result<()> {
    let on_disk: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if on_disk > USER_VERSION {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!(
                "database schema version {on_disk} is newer than this agent's {USER_VERSION}"
            )),
        ));
    }
    conn.execute_batch(TABLES)?;
    for (table, col, decl) in [
        ("events", "cgroup_id", "INTEGER NOT NULL DEFAULT 0"),
        ("events", "node", "TEXT NOT NULL DEFAULT ''"),
        ("events", "rank", "INTEGER"),
        ("events", "local_rank", "INTEGER"),
        ("events", "world_size", "INTEGER"),
        ("events", "comm", "TEXT NOT NULL DEFAULT ''"),
        ("events", "stack_hash", "INTEGER NOT NULL DEFAULT 0"),
        ("causal_chains", "node", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "node", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "rank", "INTEGER"),
        ("sessions", "local_rank", "INTEGER"),
        ("sessions", "world_size", "INTEGER"),
        ("event_aggregates", "sum_arg0", "INTEGER NOT NULL DEFAULT 0"),
        ("event_aggregates", "node", "TEXT NOT NULL DEFAULT ''"),
    ] {
        if !has_column(conn, table, col)? {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {col} {decl}"))?;
        }
    }
    insert_lookups(conn)?;
    if on_disk < USER_VERSION {
        conn.execute_batch(&format!("PRAGMA user_version = {USER_VERSION}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_database_has_the_go_tables_and_ids() {
        let c = Connection::open_in_memory().unwrap();
        apply(&c).unwrap();
        for t in [
            "events",
            "stack_traces",
            "causal_chains",
            "sources",
            "ops",
            "schema_info",
            "sessions",
            "process_names",
            "event_aggregates",
        ] {
            let n: i64 = c
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?1",
                    [t],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(n, 1, "{t}");
        }
        let name: String = c
            .query_row(
                "SELECT name FROM ops WHERE source_id = 4 AND op_id = 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(name, "cuLaunchKernel");
        let name: String = c
            .query_row("SELECT name FROM sources WHERE id = 5", [], |r| r.get(0))
            .unwrap();
        assert_eq!(name, "IO");
        assert_eq!(op_by_name("cudastreamsync"), Some((1, 5)));
        // Every probe code has a store id with a name.
        use crate::events::{cuda_op as c, source as s};
        for src in [s::CUDA_RUNTIME, s::CUDA_DRIVER] {
            for o in c::LAUNCH_KERNEL..=c::DEVICE_SYNC {
                let (a, b) = from_probe(src, o).unwrap();
                assert!(op_name(a, b).is_some(), "{src} {o}");
            }
        }
        assert_eq!(from_probe(s::CUDA_DRIVER, c::DEVICE_SYNC), Some((4, 4)));
        assert_eq!(from_probe(s::CUDA_RUNTIME, c::STREAM_SYNC), Some((1, 5)));
        // Applying twice changes nothing and fails nowhere.
        apply(&c).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, USER_VERSION);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        assert!(apply(&c).is_err());
    }
}
