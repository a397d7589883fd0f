//! The node's event store: an embedded SQLite database in the Go Ingero agent's schema
//! ([`schema`]), written by one background thread in batched transactions so the probe
//! drain never waits on the disk. Bounded by size (the file is rolled over to `<path>.1`)
//! and by age (older rows are deleted). Every record that could not be queued or written is
//! counted ([`StoreCounters`]), never dropped silently.

pub mod schema;

use std::collections::HashMap;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, params};

/// One row of `events`. The writer gives it its id (`{node}:{seq}`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventRow {
    /// Wall clock, Unix ns.
    pub timestamp: i64,
    pub pid: u32,
    pub tid: u32,
    pub source: i64,
    pub op: i64,
    pub duration: i64,
    pub arg0: i64,
    pub arg1: i64,
    pub ret_code: i64,
    pub cgroup_id: u64,
    pub comm: String,
    /// The GPU a row is about (NVML samples); 0 otherwise.
    pub gpu_id: i64,
}

/// One row of `event_aggregates`: counts added to the row with the same key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AggregateRow {
    /// Bucket start, Unix ns.
    pub bucket: i64,
    pub source: i64,
    pub op: i64,
    pub pid: u32,
    pub count: i64,
    pub sum_dur: i64,
    pub max_dur: i64,
    pub sum_arg0: i64,
    /// Of `count`, the calls that also have an `events` row (timed calls beyond the
    /// per-second budget are only counted); 0 for counts without rows (launches, host).
    pub stored: i64,
}

/// Store settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub path: PathBuf,
    pub node: String,
    /// Rolled over to `<path>.1` once the file is at least this large.
    pub max_bytes: u64,
    /// Rows older than this are deleted.
    pub max_age: Duration,
    /// Records queued for the writer; beyond that they are counted as dropped.
    pub queue: usize,
    /// Rank identity written with every event (from the watched process's environment).
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// Written to `sessions.pid_filter` / `flags`.
    pub pid_filter: String,
    pub flags: String,
}

impl StoreOptions {
    pub fn new(path: impl Into<PathBuf>, node: impl Into<String>) -> Self {
        StoreOptions {
            path: path.into(),
            node: node.into(),
            max_bytes: 1 << 30,
            max_age: Duration::from_secs(24 * 3600),
            queue: 262_144,
            rank: None,
            local_rank: None,
            world_size: None,
            pid_filter: String::new(),
            flags: String::new(),
        }
    }
}

/// What the writer did, shared with the agent's status and logs.
#[derive(Debug, Default)]
pub struct StoreCounters {
    pub events_written: AtomicU64,
    pub aggregates_written: AtomicU64,
    /// Records refused because the writer's queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Records lost because a write failed.
    pub dropped_write_error: AtomicU64,
    pub rollovers: AtomicU64,
    pub rows_expired: AtomicU64,
}

enum Msg {
    Event(EventRow),
    Aggregate(AggregateRow),
    Flush(SyncSender<()>),
    /// Commit, close the session and end the thread (other sinks may still be alive).
    Stop,
}

/// The handle the probe side holds: queuing never blocks.
#[derive(Debug, Clone)]
pub struct StoreSink {
    tx: SyncSender<Msg>,
    counters: Arc<StoreCounters>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl StoreSink {
    pub fn event(&self, e: EventRow) {
        self.send(Msg::Event(e));
    }

    pub fn aggregate(&self, a: AggregateRow) {
        self.send(Msg::Aggregate(a));
    }

    fn send(&self, m: Msg) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(m) {
            self.counters
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wait until everything queued before this call is committed.
    pub fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(30));
        }
    }

    pub fn counters(&self) -> &Arc<StoreCounters> {
        &self.counters
    }
}

/// The running writer; dropping it (or [`Store::close`]) commits what is queued.
#[derive(Debug)]
pub struct Store {
    sink: Option<StoreSink>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<StoreCounters>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("store {0}: {1}")]
    Io(String, std::io::Error),
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sqlite {
        path: path.display().to_string(),
        source,
    }
}

/// Open (creating it and its directory if needed) a database for writing.
pub fn open_for_writing(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.display().to_string(), e))?;
    }
    let conn = Connection::open(path).map_err(sql_err(path))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(sql_err(path))?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
        .map_err(sql_err(path))?;
    schema::apply(&conn).map_err(sql_err(path))?;
    Ok(conn)
}

/// Open an existing database read-only (the investigation commands).
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    if !path.exists() {
        return Err(StoreError::Io(
            path.display().to_string(),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such database"),
        ));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err(path))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(sql_err(path))?;
    Ok(conn)
}

impl Store {
    /// Open the database and start the writer thread.
    pub fn start(opts: StoreOptions) -> Result<Store, StoreError> {
        let conn = open_for_writing(&opts.path)?;
        let counters = Arc::new(StoreCounters::default());
        let (tx, rx) = sync_channel(opts.queue.max(1));
        let mut w = Writer::new(conn, opts, counters.clone())?;
        let thread = std::thread::Builder::new()
            .name("ingero-store".into())
            .spawn(move || w.run(rx))
            .map_err(|e| StoreError::Io("writer thread".into(), e))?;
        Ok(Store {
            sink: Some(StoreSink {
                tx,
                counters: counters.clone(),
            }),
            thread: Some(thread),
            counters,
        })
    }

    pub fn sink(&self) -> StoreSink {
        self.sink
            .clone()
            .unwrap_or_else(|| unreachable_sink(&self.counters))
    }

    pub fn counters(&self) -> &Arc<StoreCounters> {
        &self.counters
    }

    /// Commit what is queued, mark the session stopped and stop the thread.
    pub fn close(mut self) {
        self.close_inner();
    }

    fn close_inner(&mut self) {
        if let Some(sink) = self.sink.take() {
            // Blocks while the queue is full: the writer is draining it.
            let _ = sink.tx.send(Msg::Stop);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn unreachable_sink(counters: &Arc<StoreCounters>) -> StoreSink {
    let (tx, _rx) = sync_channel(0);
    StoreSink {
        tx,
        counters: counters.clone(),
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close_inner();
    }
}

const BATCH: usize = 4096;
const FLUSH_EVERY: Duration = Duration::from_millis(200);
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(5);

struct Writer {
    conn: Connection,
    opts: StoreOptions,
    counters: Arc<StoreCounters>,
    seq: u64,
    session: i64,
    pending: Vec<Msg>,
    names: HashMap<u32, String>,
    /// Rank identity per process, read once from its environment.
    ranks: HashMap<u32, RankIdentity>,
    /// Where `<pid>/environ` is read (`/proc`; a test may point elsewhere).
    proc_root: PathBuf,
    last_housekeeping: Instant,
}

/// A process's place in a distributed job, as torchrun and the other launchers export it:
/// `RANK`, `LOCAL_RANK`, `WORLD_SIZE`. Each is `None` when absent or not a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankIdentity {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

impl RankIdentity {
    /// From an environment block (`NUL`-separated `KEY=VALUE`, as `/proc/<pid>/environ`).
    pub fn from_environ(environ: &[u8]) -> Self {
        let mut id = RankIdentity::default();
        for kv in environ.split(|b| *b == 0) {
            let Some(eq) = kv.iter().position(|b| *b == b'=') else {
                continue;
            };
            let (k, v) = (&kv[..eq], &kv[eq + 1..]);
            let slot = match k {
                b"RANK" => &mut id.rank,
                b"LOCAL_RANK" => &mut id.local_rank,
                b"WORLD_SIZE" => &mut id.world_size,
                _ => continue,
            };
            *slot = std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok());
        }
        id
    }

    /// The process's own values where its environment has them, else `fallback`'s (the
    /// configured identity).
    fn or(self, fallback: RankIdentity) -> Self {
        RankIdentity {
            rank: self.rank.or(fallback.rank),
            local_rank: self.local_rank.or(fallback.local_rank),
            world_size: self.world_size.or(fallback.world_size),
        }
    }
}

fn now_ns() -> i64 {
    i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(i64::MAX)
}

impl Writer {
    fn new(
        conn: Connection,
        opts: StoreOptions,
        counters: Arc<StoreCounters>,
    ) -> Result<Self, StoreError> {
        let mut w = Writer {
            conn,
            opts,
            counters,
            seq: 0,
            session: 0,
            pending: Vec::with_capacity(BATCH),
            names: Default::default(),
            ranks: Default::default(),
            proc_root: PathBuf::from("/proc"),
            last_housekeeping: Instant::now(),
        };
        w.begin_session().map_err(sql_err(&w.opts.path.clone()))?;
        Ok(w)
    }

    /// Continue the node's sequence after the largest id already in the file, and open a
    /// `sessions` row.
    fn begin_session(&mut self) -> rusqlite::Result<()> {
        let prefix_len = i64::try_from(self.opts.node.len() + 2).unwrap_or(i64::MAX);
        let max: Option<i64> = self.conn.query_row(
            "SELECT MAX(CAST(substr(id, ?1) AS INTEGER)) FROM events WHERE node = ?2",
            params![prefix_len, self.opts.node],
            |r| r.get(0),
        )?;
        self.seq = self.seq.max(u64::try_from(max.unwrap_or(0)).unwrap_or(0));
        self.conn.execute(
            "INSERT INTO sessions (started_at, node, rank, local_rank, world_size, ingero_ver, pid_filter, flags, kernel, cpu_cores)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                now_ns(),
                self.opts.node,
                self.opts.rank,
                self.opts.local_rank,
                self.opts.world_size,
                concat!("ingero-agent ", env!("CARGO_PKG_VERSION")),
                self.opts.pid_filter,
                self.opts.flags,
                kernel_release(),
                std::thread::available_parallelism().map_or(0, |n| n.get() as i64),
            ],
        )?;
        self.session = self.conn.last_insert_rowid();
        Ok(())
    }

    fn run(&mut self, rx: Receiver<Msg>) {
        let mut last_flush = Instant::now();
        loop {
            let timeout = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
            match rx.recv_timeout(timeout) {
                Ok(Msg::Stop) => break,
                Ok(Msg::Flush(done)) => {
                    self.commit();
                    last_flush = Instant::now();
                    let _ = done.send(());
                }
                Ok(m) => {
                    self.pending.push(m);
                    if self.pending.len() >= BATCH {
                        self.commit();
                        last_flush = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.commit();
                    last_flush = Instant::now();
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.last_housekeeping.elapsed() >= HOUSEKEEPING_EVERY {
                self.housekeeping();
            }
        }
        self.commit();
        let _ = self.conn.execute(
            "UPDATE sessions SET stopped_at = ?1 WHERE id = ?2",
            params![now_ns(), self.session],
        );
    }

    fn commit(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        let n = batch.len() as u64;
        match self.write(&batch) {
            Ok((ev, agg)) => {
                self.counters
                    .events_written
                    .fetch_add(ev, Ordering::Relaxed);
                self.counters
                    .aggregates_written
                    .fetch_add(agg, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(error = %e, records = n, "store write failed");
                self.counters
                    .dropped_write_error
                    .fetch_add(n, Ordering::Relaxed);
            }
        }
        self.pending = batch;
        self.pending.clear();
    }

    fn write(&mut self, batch: &[Msg]) -> rusqlite::Result<(u64, u64)> {
        let tx = self.conn.transaction()?;
        let (mut ev, mut agg) = (0u64, 0u64);
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO events (id, timestamp, pid, tid, source, op, duration, arg0, arg1, ret_code, cgroup_id, node, rank, local_rank, world_size, comm, gpu_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )?;
            let mut up = tx.prepare_cached(
                "INSERT INTO event_aggregates (bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur, sum_arg0, node)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?10, ?6, 0, ?7, ?8, ?9)
                 ON CONFLICT (bucket, source, op, pid, node) DO UPDATE SET
                   count = count + excluded.count, stored = stored + excluded.stored,
                   sum_dur = sum_dur + excluded.sum_dur,
                   max_dur = max(max_dur, excluded.max_dur), sum_arg0 = sum_arg0 + excluded.sum_arg0",
            )?;
            let mut name = tx.prepare_cached(
                "INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?1, ?2, ?3)",
            )?;
            for m in batch {
                match m {
                    Msg::Event(e) => {
                        let configured = RankIdentity {
                            rank: self.opts.rank,
                            local_rank: self.opts.local_rank,
                            world_size: self.opts.world_size,
                        };
                        let rk = if e.pid == 0 {
                            configured
                        } else {
                            rank_of(&mut self.ranks, &self.proc_root, configured, e.pid)
                        };
                        let o = &self.opts;
                        self.seq += 1;
                        let id = format!("{}:{}", o.node, self.seq);
                        ins.execute(params![
                            id,
                            e.timestamp,
                            e.pid,
                            e.tid,
                            e.source,
                            e.op,
                            e.duration,
                            e.arg0,
                            e.arg1,
                            e.ret_code,
                            e.cgroup_id as i64,
                            o.node,
                            rk.rank,
                            rk.local_rank,
                            rk.world_size,
                            e.comm,
                            e.gpu_id
                        ])?;
                        if !e.comm.is_empty() && self.names.get(&e.pid) != Some(&e.comm) {
                            name.execute(params![e.pid, e.comm, e.timestamp])?;
                            self.names.insert(e.pid, e.comm.clone());
                        }
                        ev += 1;
                    }
                    Msg::Aggregate(a) => {
                        up.execute(params![
                            a.bucket,
                            a.source,
                            a.op,
                            a.pid,
                            a.count,
                            a.sum_dur,
                            a.max_dur,
                            a.sum_arg0,
                            self.opts.node,
                            a.stored
                        ])?;
                        agg += 1;
                    }
                    Msg::Flush(_) | Msg::Stop => {}
                }
            }
        }
        tx.commit()?;
        Ok((ev, agg))
    }

    /// Age bound (delete old rows) and size bound (roll the file over).
    fn housekeeping(&mut self) {
        self.last_housekeeping = Instant::now();
        let cutoff = now_ns()
            .saturating_sub(i64::try_from(self.opts.max_age.as_nanos()).unwrap_or(i64::MAX));
        let mut expired = 0usize;
        for sql in [
            "DELETE FROM events WHERE timestamp < ?1",
            "DELETE FROM event_aggregates WHERE bucket < ?1",
            "DELETE FROM causal_chains WHERE detected_at < ?1",
        ] {
            match self.conn.execute(sql, [cutoff]) {
                Ok(n) => expired += n,
                Err(e) => tracing::warn!(error = %e, "store expiry failed"),
            }
        }
        self.counters
            .rows_expired
            .fetch_add(expired as u64, Ordering::Relaxed);
        if let Err(e) = self.maybe_roll() {
            tracing::warn!(error = %e, "store rollover failed");
        }
    }

    fn size(&self) -> u64 {
        let page = |p: &str| -> i64 {
            self.conn
                .query_row(&format!("PRAGMA {p}"), [], |r| r.get(0))
                .unwrap_or(0)
        };
        u64::try_from(page("page_count") * page("page_size")).unwrap_or(0)
    }

    fn maybe_roll(&mut self) -> Result<(), StoreError> {
        if self.size() < self.opts.max_bytes {
            return Ok(());
        }
        let path = self.opts.path.clone();
        let _ = self.conn.execute(
            "UPDATE sessions SET stopped_at = ?1 WHERE id = ?2",
            params![now_ns(), self.session],
        );
        // Fold the WAL into the main file so the rolled file is complete on its own.
        self.conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .map_err(sql_err(&path))?;
        let old = rolled_path(&path);
        let fresh = Connection::open_in_memory().map_err(sql_err(&path))?;
        drop(std::mem::replace(&mut self.conn, fresh));
        std::fs::rename(&path, &old).map_err(|e| StoreError::Io(path.display().to_string(), e))?;
        for ext in ["-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(ext);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        self.conn = open_for_writing(&path)?;
        self.names.clear();
        self.ranks.clear();
        self.begin_session().map_err(sql_err(&path))?;
        self.counters.rollovers.fetch_add(1, Ordering::Relaxed);
        tracing::info!(rolled = %old.display(), "store rolled over");
        Ok(())
    }
}

/// The rank identity of a process: `RANK`, `LOCAL_RANK` and `WORLD_SIZE` from its
/// environment, read once per process (cached in `ranks`); what it lacks comes from the
/// configured identity.
fn rank_of(
    ranks: &mut HashMap<u32, RankIdentity>,
    proc_root: &Path,
    configured: RankIdentity,
    pid: u32,
) -> RankIdentity {
    if let Some(id) = ranks.get(&pid) {
        return *id;
    }
    if ranks.len() >= 65_536 {
        ranks.clear();
    }
    let own = std::fs::read(proc_root.join(pid.to_string()).join("environ"))
        .map(|env| RankIdentity::from_environ(&env))
        .unwrap_or_default();
    let id = own.or(configured);
    ranks.insert(pid, id);
    id
}

/// Where a rolled-over file goes (one is kept; the previous one is replaced).
pub fn rolled_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    PathBuf::from(p)
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Node identity: the flag, else the config, else the host name.
pub fn node_identity(flag: Option<&str>, config: &str) -> String {
    if let Some(f) = flag.filter(|f| !f.is_empty()) {
        return f.to_string();
    }
    if !config.is_empty() {
        return config.to_string();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ingero-store-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d.join("ingero.db")
    }

    fn ev(ts: i64, pid: u32, dur: i64) -> EventRow {
        EventRow {
            timestamp: ts,
            pid,
            tid: pid,
            source: schema::source::CUDA,
            op: schema::op::CUDA_STREAM_SYNC,
            duration: dur,
            comm: "train".into(),
            ..Default::default()
        }
    }

    #[test]
    fn events_get_node_namespaced_ids_continuing_across_restarts() {
        let path = tmp("ids");
        for round in 0..2 {
            let mut o = StoreOptions::new(&path, "gpu-node-01");
            o.rank = Some(3);
            let s = Store::start(o).unwrap();
            let sink = s.sink();
            for i in 0..5 {
                sink.event(ev(now_ns() + i, 42, 1000 + round));
            }
            s.close();
        }
        let c = open_read_only(&path).unwrap();
        let mut ids: Vec<String> = c
            .prepare("SELECT id FROM events ORDER BY timestamp")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        ids.sort_by_key(|s| s.rsplit(':').next().unwrap().parse::<u64>().unwrap());
        let want: Vec<String> = (1..=10).map(|i| format!("gpu-node-01:{i}")).collect();
        assert_eq!(ids, want);
        let (node, rank, name): (String, i64, String) = c
            .query_row(
                "SELECT e.node, e.rank, p.name FROM events e JOIN process_names p ON p.pid = e.pid LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (node.as_str(), rank, name.as_str()),
            ("gpu-node-01", 3, "train")
        );
        let stopped: i64 = c
            .query_row(
                "SELECT count(*) FROM sessions WHERE stopped_at > started_at",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(stopped, 2);
    }

    #[test]
    fn rank_identity_comes_from_each_process_environment() {
        let env = b"PATH=/usr/bin\0LOCAL_RANK=3\0RANK=11\0WORLD_SIZE=16\0RANKX=9\0";
        assert_eq!(
            RankIdentity::from_environ(env),
            RankIdentity {
                rank: Some(11),
                local_rank: Some(3),
                world_size: Some(16)
            }
        );
        assert_eq!(
            RankIdentity::from_environ(b"LOCAL_RANK=x\0WORLD_SIZE=\0"),
            RankIdentity::default()
        );

        // Two real processes of one node, each with its own torchrun environment, and one
        // without: its rows carry the configured identity.
        let path = tmp("ranks");
        let spawn = |env: &[(&str, &str)]| {
            let mut c = std::process::Command::new("sleep");
            c.arg("30").env_remove("RANK").env_remove("LOCAL_RANK");
            c.env_remove("WORLD_SIZE");
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        };
        let mut r0 = spawn(&[("RANK", "8"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "16")]);
        let mut r1 = spawn(&[("RANK", "9"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "16")]);
        let mut plain = spawn(&[]);
        let mut o = StoreOptions::new(&path, "n1");
        o.rank = Some(2);
        o.world_size = Some(4);
        let s = Store::start(o).unwrap();
        let sink = s.sink();
        for p in [&r0, &r1, &plain] {
            sink.event(ev(now_ns(), p.id(), 10));
        }
        s.close();
        for c in [&mut r0, &mut r1, &mut plain] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let c = open_read_only(&path).unwrap();
        let row = |pid: u32| -> (Option<i64>, Option<i64>, Option<i64>) {
            c.query_row(
                "SELECT rank, local_rank, world_size FROM events WHERE pid = ?1",
                [pid],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
        };
        assert_eq!(row(r0.id()), (Some(8), Some(0), Some(16)));
        assert_eq!(row(r1.id()), (Some(9), Some(1), Some(16)));
        assert_eq!(row(plain.id()), (Some(2), None, Some(4)));
    }

    #[test]
    fn aggregates_with_the_same_key_add_up() {
        let path = tmp("agg");
        let s = Store::start(StoreOptions::new(&path, "n1")).unwrap();
        let sink = s.sink();
        for d in [10, 30] {
            sink.aggregate(AggregateRow {
                bucket: 1_000_000_000,
                source: schema::source::HOST,
                op: schema::op::HOST_SCHED_SWITCH,
                pid: 7,
                count: 2,
                sum_dur: d,
                max_dur: d,
                sum_arg0: 1,
                stored: 0,
            });
        }
        sink.flush();
        let c = open_read_only(&path).unwrap();
        let row: (i64, i64, i64, i64) = c
            .query_row(
                "SELECT count, sum_dur, max_dur, sum_arg0 FROM event_aggregates",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(row, (4, 40, 30, 2));
        s.close();
    }

    #[test]
    fn a_full_queue_counts_its_drops() {
        let path = tmp("queue");
        let mut o = StoreOptions::new(&path, "n1");
        o.queue = 1;
        let s = Store::start(o).unwrap();
        let sink = s.sink();
        let sent = 20_000u64;
        for i in 0..sent {
            sink.event(ev(now_ns() + i as i64, 1, 1));
        }
        sink.flush();
        let c = s.counters();
        let written = c.events_written.load(Ordering::Relaxed);
        let dropped = c.dropped_queue_full.load(Ordering::Relaxed);
        assert_eq!(
            written + dropped,
            sent,
            "every record is written or counted"
        );
        let rows: i64 = open_read_only(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows as u64, written);
        s.close();
    }

    #[test]
    fn the_size_bound_rolls_the_file_over_and_the_age_bound_expires_rows() {
        let path = tmp("roll");
        let mut w = Writer::new(
            open_for_writing(&path).unwrap(),
            StoreOptions {
                max_bytes: 64 * 1024,
                max_age: Duration::from_secs(3600),
                ..StoreOptions::new(&path, "n1")
            },
            Arc::new(StoreCounters::default()),
        )
        .unwrap();
        let old = now_ns() - 2 * 3600 * 1_000_000_000;
        w.pending.push(Msg::Event(ev(old, 1, 5)));
        for i in 0..3000 {
            w.pending.push(Msg::Event(ev(now_ns() + i, 1, 5)));
        }
        w.commit();
        w.housekeeping();
        assert_eq!(w.counters.rows_expired.load(Ordering::Relaxed), 1);
        assert_eq!(w.counters.rollovers.load(Ordering::Relaxed), 1);
        let rolled = open_read_only(&rolled_path(&path)).unwrap();
        let n: i64 = rolled
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3000);
        // The new file is in the same schema and its ids continue the node's sequence, so
        // the rolled file and the new one merge without a collision.
        w.pending.push(Msg::Event(ev(now_ns(), 1, 5)));
        w.commit();
        let id: String = w
            .conn
            .query_row("SELECT id FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(id, "n1:3002");
    }
}
