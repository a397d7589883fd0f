//! Test databases built with this crate's own code: the current layout through the real
//! writer, and the Go agent's layout from before node identity (schema 0.8: no `node`,
//! `rank`, `comm` columns) from its column list.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::store::schema::{op, source};
use crate::store::{AggregateRow, EventRow, Store, StoreOptions};

pub const PID: u32 = 4242;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Current,
    GoBeforeNode,
}

#[derive(Debug, Default, Clone)]
pub struct Fixture {
    pub events: Vec<EventRow>,
    pub aggregates: Vec<AggregateRow>,
}

pub fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ingero-inv-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

const SEC: i64 = 1_000_000_000;

fn base() -> i64 {
    // Whole seconds a minute ago: inside the writer's age bound.
    let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(0);
    (now / SEC - 60) * SEC
}

fn sync(ts: i64, dur: i64) -> EventRow {
    EventRow {
        timestamp: ts,
        pid: PID,
        tid: PID,
        source: source::CUDA,
        op: op::CUDA_STREAM_SYNC,
        duration: dur,
        comm: "train".into(),
        ..Default::default()
    }
}

fn host(b: i64, o: i64, count: i64, sum_dur: i64, arg0: i64) -> AggregateRow {
    AggregateRow {
        bucket: b,
        source: source::HOST,
        op: o,
        pid: PID,
        count,
        sum_dur,
        max_dur: sum_dur / count.max(1),
        sum_arg0: arg0,
        stored: 0,
    }
}

/// `secs` seconds of a loop: `rate(s)` synchronizes per second lasting `dur(s, i)`, and
/// per second the host aggregates `runq(s)` ns of run-queue delay, `invol(s)` involuntary
/// switches, `io(s)` = (block writes, bytes, summed latency ns).
fn build(
    secs: i64,
    rate: impl Fn(i64) -> i64,
    dur: impl Fn(i64, i64) -> i64,
    runq: impl Fn(i64) -> i64,
    invol: impl Fn(i64) -> i64,
    io: impl Fn(i64) -> (i64, i64, i64),
) -> Fixture {
    let t0 = base() - secs * SEC;
    let mut f = Fixture::default();
    for s in 0..secs {
        let b = t0 + s * SEC;
        let n = rate(s);
        for i in 0..n {
            f.events.push(sync(b + i * (SEC / n.max(1)), dur(s, i)));
        }
        f.aggregates.push(host(
            b,
            op::HOST_SCHED_SWITCH,
            n + invol(s),
            400_000_000,
            invol(s),
        ));
        f.aggregates
            .push(host(b, op::HOST_SCHED_WAKEUP, n, runq(s), 0));
        let (ops, bytes, lat) = io(s);
        if ops > 0 {
            f.aggregates.push(AggregateRow {
                bucket: b,
                source: source::IO,
                op: op::IO_WRITE,
                pid: PID,
                count: ops,
                sum_dur: lat,
                max_dur: lat / ops,
                sum_arg0: bytes,
                stored: 0,
            });
        }
    }
    f
}

fn jitter(i: i64) -> i64 {
    2_000_000 + (i * 7919 % 13) * 10_000
}

/// 20 s of a steady loop: 100 synchronizes/s of about 2 ms, 1 % run-queue delay.
pub fn clean_events(_seed: u64) -> Fixture {
    build(
        20,
        |_| 100,
        |_, i| jitter(i),
        |_| 10_000_000,
        |_| 2,
        |_| (0, 0, 0),
    )
}

/// 10 clean seconds, then 10 with half the rate, slow calls, 45 % run-queue delay.
pub fn contended_events(_seed: u64) -> Fixture {
    build(
        20,
        |s| if s < 10 { 100 } else { 50 },
        |s, i| {
            if s >= 10 && i % 5 == 0 {
                9_000_000
            } else {
                jitter(i)
            }
        },
        |s| if s < 10 { 10_000_000 } else { 450_000_000 },
        |s| if s < 10 { 2 } else { 300 },
        |_| (0, 0, 0),
    )
}

/// 10 clean seconds, then 10 with 60 % of the rate and 100 synchronous block writes/s.
pub fn io_events(_seed: u64) -> Fixture {
    build(
        20,
        |s| if s < 10 { 100 } else { 60 },
        |_, i| jitter(i),
        |_| 10_000_000,
        |_| 2,
        |s| {
            if s < 10 {
                (0, 0, 0)
            } else {
                (100, 4 << 20, 300_000_000)
            }
        },
    )
}

/// A stack shared by every node's fixture and one that is the node's own.
pub const SHARED_STACK: i64 = 77;

pub fn write_node_db(path: &Path, node: &str, layout: Layout, f: &Fixture) {
    match layout {
        Layout::Current => {
            let s = Store::start(StoreOptions::new(path, node)).expect("store");
            let sink = s.sink();
            for e in &f.events {
                sink.event(e.clone());
            }
            for a in &f.aggregates {
                sink.aggregate(a.clone());
            }
            s.close();
            let c = Connection::open(path).expect("open");
            add_stacks(&c, node);
        }
        Layout::GoBeforeNode => {
            let c = Connection::open(path).expect("open");
            c.execute_batch(GO_0_8).expect("schema");
            crate::store::schema::insert_lookups(&c).expect("lookups");
            c.execute(
                "INSERT OR REPLACE INTO schema_info (key, value) VALUES ('version', '0.8')",
                [],
            )
            .expect("version");
            let tx = c.unchecked_transaction().expect("tx");
            for (i, e) in f.events.iter().enumerate() {
                tx.execute(
                    "INSERT INTO events (id, timestamp, pid, tid, source, op, duration, arg0, arg1, ret_code)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        (i + 1).to_string(), e.timestamp, e.pid, e.tid, e.source, e.op, e.duration,
                        e.arg0, e.arg1, e.ret_code
                    ],
                )
                .expect("event");
            }
            for a in &f.aggregates {
                tx.execute(
                    "INSERT INTO event_aggregates (bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur, sum_arg0)
                     VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 0, ?7, ?8)",
                    params![a.bucket, a.source, a.op, a.pid, a.count, a.sum_dur, a.max_dur, a.sum_arg0],
                )
                .expect("aggregate");
            }
            tx.execute(
                "INSERT INTO causal_chains (id, detected_at, severity, summary, root_cause, explanation)
                 VALUES ('tail-high-cudaStreamSync', ?1, 'HIGH', 's', 'r', 'e')",
                [base()],
            )
            .expect("chain");
            tx.commit().expect("commit");
            add_stacks(&c, node);
        }
    }
}

fn add_stacks(c: &Connection, node: &str) {
    let own = 1000 + node.bytes().map(i64::from).sum::<i64>();
    for h in [SHARED_STACK, own] {
        c.execute(
            "INSERT OR IGNORE INTO stack_traces (hash, ips) VALUES (?1, ?2)",
            params![h, format!("[\"0x{h:x}\"]")],
        )
        .expect("stack");
    }
    c.execute(
        "UPDATE events SET stack_hash = ?1 WHERE rowid % 2 = 0",
        [SHARED_STACK],
    )
    .expect("stack refs");
}

/// The Go agent's tables at schema 0.8 (before node identity and `comm`).
const GO_0_8: &str = "
CREATE TABLE events (
    id TEXT PRIMARY KEY, timestamp INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
    source INTEGER NOT NULL, op INTEGER NOT NULL, duration INTEGER NOT NULL,
    gpu_id INTEGER NOT NULL DEFAULT 0, arg0 INTEGER NOT NULL DEFAULT 0, arg1 INTEGER NOT NULL DEFAULT 0,
    ret_code INTEGER NOT NULL DEFAULT 0, stack_hash INTEGER NOT NULL DEFAULT 0,
    cgroup_id INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE stack_traces (hash INTEGER PRIMARY KEY, ips TEXT NOT NULL, frames TEXT NOT NULL DEFAULT '');
CREATE TABLE causal_chains (
    id TEXT PRIMARY KEY, detected_at INTEGER NOT NULL, severity TEXT NOT NULL, summary TEXT NOT NULL,
    root_cause TEXT NOT NULL, explanation TEXT NOT NULL, recommendations TEXT NOT NULL DEFAULT '',
    cuda_op TEXT NOT NULL DEFAULT '', cuda_p99_us INTEGER NOT NULL DEFAULT 0,
    cuda_p50_us INTEGER NOT NULL DEFAULT 0, tail_ratio REAL NOT NULL DEFAULT 0,
    timeline TEXT NOT NULL DEFAULT ''
);
CREATE TABLE sources (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL);
CREATE TABLE ops (source_id INTEGER NOT NULL, op_id INTEGER NOT NULL, name TEXT NOT NULL,
    description TEXT NOT NULL, PRIMARY KEY (source_id, op_id));
CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started_at INTEGER NOT NULL, stopped_at INTEGER NOT NULL DEFAULT 0,
    gpu_model TEXT NOT NULL DEFAULT '', gpu_driver TEXT NOT NULL DEFAULT '', cpu_model TEXT NOT NULL DEFAULT '',
    cpu_cores INTEGER NOT NULL DEFAULT 0, mem_total INTEGER NOT NULL DEFAULT 0, kernel TEXT NOT NULL DEFAULT '',
    os_release TEXT NOT NULL DEFAULT '', cuda_ver TEXT NOT NULL DEFAULT '', python_ver TEXT NOT NULL DEFAULT '',
    ingero_ver TEXT NOT NULL DEFAULT '', pid_filter TEXT NOT NULL DEFAULT '', flags TEXT NOT NULL DEFAULT ''
);
CREATE TABLE process_names (pid INTEGER NOT NULL, name TEXT NOT NULL, seen_at INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pid));
CREATE TABLE event_aggregates (
    bucket INTEGER NOT NULL, source INTEGER NOT NULL, op INTEGER NOT NULL, pid INTEGER NOT NULL DEFAULT 0,
    count INTEGER NOT NULL DEFAULT 0, stored INTEGER NOT NULL DEFAULT 0, sum_dur INTEGER NOT NULL DEFAULT 0,
    min_dur INTEGER NOT NULL DEFAULT 0, max_dur INTEGER NOT NULL DEFAULT 0, sum_arg0 INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, source, op, pid)
);
";
