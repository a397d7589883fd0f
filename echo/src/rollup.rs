//! Per-minute health rollup and the cluster list: what the writer derives from the health
//! scores so the common questions do not scan every stored point.
//!
//! `health_minutes` holds, per cluster, node and minute, the count, sum, minimum and latest
//! time of the health scores, possibly in several partial rows per key that queries add up
//! (exact whatever their number). Every health row carries the sequence number of its
//! commit (`health_scores.seq`). The writer sums committed rows in memory
//! ([`Accumulator`]) and every [`FLUSH_EVERY`] writes the sums and the last sequence number
//! they cover (`rollup_state.flushed_seq`) in one transaction. So the rollup holds exactly
//! the raw rows with `seq <= flushed_seq`; a query adds the raw rows after it (the last
//! seconds of commits, found through the `seq` zone maps) and the raw rows of the window's
//! first, partial minute. After a crash, [`recover`] sums the raw rows after `flushed_seq`
//! at open. Every [`COMPACT_EVERY`] the partial rows of the minutes flushed since the last
//! merge are merged into one row per key. Retention deletes whole minutes from every table
//! (the cutoff is rounded down to a minute) after a flush, so the rollup and the raw rows
//! never disagree. Per commit this costs one more column and a hash-map update per health
//! row; a per-commit insert into the rollup cost about a fifth of the ingest rate.
//!
//! `clusters` holds each cluster that sent metric points with its latest point time (to
//! within a minute, see [`ClusterTimes`]); retention deletes clusters whose points are gone.

use std::collections::HashMap;
use std::time::Duration;

use duckdb::{Connection, params};

use crate::rows::{HealthRow, Rows};

/// The start of the minute of `ts_ns`, in SQL (floor division, negative times included).
macro_rules! minute_sql {
    () => {
        "(ts_ns // 60000000000 - CASE WHEN ts_ns % 60000000000 < 0 THEN 1 ELSE 0 END) * 60000000000"
    };
}

/// One minute in nanoseconds.
pub const MINUTE_NS: i64 = 60_000_000_000;

/// How often the writer writes the sums of the health rows committed since the last flush.
pub const FLUSH_EVERY: Duration = Duration::from_secs(10);

/// How often the writer merges partial rollup rows.
pub const COMPACT_EVERY: Duration = Duration::from_secs(60);

/// The derived tables (idempotent).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS health_minutes (
    ts_ns BIGINT NOT NULL, cluster_id VARCHAR NOT NULL, node_id VARCHAR,
    samples BIGINT NOT NULL, score_sum DOUBLE NOT NULL, score_min DOUBLE NOT NULL,
    last_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS clusters (cluster_id VARCHAR PRIMARY KEY, ts_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS rollup_state (flushed_seq BIGINT NOT NULL);
";

/// `health_minute_totals`: the rollup with its partial rows added up, one row per cluster,
/// node and minute, for SQL users (`run_analysis`). Like `health_minutes` it covers the
/// health rows with `seq <= rollup_state.flushed_seq`.
pub const VIEWS: &str = "
CREATE OR REPLACE VIEW health_minute_totals AS
SELECT ts_ns, cluster_id, node_id, sum(samples)::BIGINT AS samples,
       sum(score_sum)::DOUBLE AS score_sum, min(score_min)::DOUBLE AS score_min,
       (sum(score_sum) / sum(samples))::DOUBLE AS avg_score, max(last_ns)::BIGINT AS last_ns
FROM health_minutes GROUP BY ts_ns, cluster_id, node_id;
";

/// The column `migrate` adds to `health_scores`.
pub const SEQ_COLUMN: &str = "ALTER TABLE health_scores ADD COLUMN IF NOT EXISTS seq BIGINT";

/// Sums raw health rows per minute; `WHERE` clauses are appended.
const SUM_RAW: &str = concat!(
    "INSERT INTO health_minutes SELECT ",
    minute_sql!(),
    ", cluster_id, node_id, count(*), sum(score), min(score), max(ts_ns) \
     FROM health_scores WHERE cluster_id IS NOT NULL"
);

const BACKFILL_CLUSTERS: &str = "
INSERT INTO clusters
SELECT cluster_id, max(ts_ns) FROM (
    SELECT cluster_id, ts_ns FROM points UNION ALL SELECT cluster_id, ts_ns FROM health_scores)
WHERE cluster_id IS NOT NULL GROUP BY cluster_id";

/// The start of the minute holding `ts_ns`.
pub fn minute_floor(ts_ns: i64) -> i64 {
    ts_ns.div_euclid(MINUTE_NS) * MINUTE_NS
}

/// The first minute start at or after `ts_ns`.
pub fn minute_ceil(ts_ns: i64) -> i64 {
    let f = minute_floor(ts_ns);
    if f == ts_ns {
        f
    } else {
        f.saturating_add(MINUTE_NS)
    }
}

fn in_transaction<T>(
    conn: &Connection,
    f: impl FnOnce() -> Result<T, duckdb::Error>,
) -> Result<T, duckdb::Error> {
    conn.execute_batch("BEGIN TRANSACTION")?;
    match f() {
        Ok(v) => {
            conn.execute_batch("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Add `health_scores.seq` and create the derived tables; fill them from the raw tables
/// when they are new (a database written before they existed).
pub fn migrate(conn: &Connection) -> Result<(), duckdb::Error> {
    conn.execute_batch(SEQ_COLUMN)?;
    let existing: i64 = conn.query_row(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() \
         AND schema_name = 'main' AND table_name IN ('health_minutes', 'clusters', 'rollup_state')",
        [],
        |r| r.get(0),
    )?;
    if existing == 3 {
        return conn.execute_batch(VIEWS);
    }
    in_transaction(conn, || {
        conn.execute_batch(
            "DROP TABLE IF EXISTS health_minutes; DROP TABLE IF EXISTS clusters; \
             DROP TABLE IF EXISTS rollup_state;",
        )?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(&format!("{SUM_RAW} GROUP BY ALL"))?;
        conn.execute_batch(BACKFILL_CLUSTERS)?;
        conn.execute_batch(
            "INSERT INTO rollup_state SELECT coalesce(max(seq), 0) FROM health_scores",
        )?;
        conn.execute_batch(VIEWS)
    })
}

/// Sum the raw rows committed after the last flush (the writer stopped before writing
/// them) into the rollup. Returns the sequence number the rollup now covers and the
/// minutes it touched.
pub fn recover(conn: &Connection) -> Result<(i64, Option<(i64, i64)>), duckdb::Error> {
    in_transaction(conn, || {
        let flushed: i64 =
            conn.query_row("SELECT max(flushed_seq) FROM rollup_state", [], |r| {
                r.get(0)
            })?;
        let (last, lo, hi): (Option<i64>, Option<i64>, Option<i64>) = conn.query_row(
            "SELECT max(seq), min(ts_ns), max(ts_ns) FROM health_scores WHERE seq > ?",
            [flushed],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let Some(last) = last else {
            return Ok((flushed, None));
        };
        conn.execute(&format!("{SUM_RAW} AND seq > ? GROUP BY ALL"), [flushed])?;
        conn.execute("UPDATE rollup_state SET flushed_seq = ?", [last])?;
        let range = lo
            .zip(hi)
            .map(|(lo, hi)| (minute_floor(lo), minute_floor(hi)));
        Ok((last, range))
    })
}

/// The sequence number the rollup covers, read in the caller's transaction (queries read it
/// and the tables in one snapshot: [`snapshot`]).
pub fn flushed_seq(conn: &Connection) -> Result<i64, duckdb::Error> {
    conn.query_row("SELECT max(flushed_seq) FROM rollup_state", [], |r| {
        r.get(0)
    })
}

/// Run `f` with the rollup's sequence number, in one read transaction so it matches the
/// tables `f` reads.
pub fn snapshot<T>(
    conn: &Connection,
    f: impl FnOnce(i64) -> Result<T, duckdb::Error>,
) -> Result<T, duckdb::Error> {
    in_transaction(conn, || f(flushed_seq(conn)?))
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sums {
    samples: i64,
    sum: f64,
    min: f64,
    last_ns: i64,
}

/// The writer's sums of the health rows committed since the last flush.
#[derive(Debug, Default)]
pub struct Accumulator {
    sums: HashMap<(String, Option<String>, i64), Sums>,
    /// The last sequence number committed.
    last_seq: i64,
    /// The last sequence number written to the rollup.
    flushed_seq: i64,
}

impl Accumulator {
    /// After [`recover`]: nothing is pending.
    pub fn new(flushed_seq: i64) -> Accumulator {
        Accumulator {
            sums: HashMap::new(),
            last_seq: flushed_seq,
            flushed_seq,
        }
    }

    /// The sequence number of the next commit's health rows.
    pub fn next_seq(&self) -> i64 {
        self.last_seq + 1
    }

    /// Whether committed rows wait for a flush.
    pub fn is_pending(&self) -> bool {
        self.last_seq != self.flushed_seq
    }

    /// After the commit of `health` with `seq`.
    pub fn add(&mut self, seq: i64, health: &[HealthRow]) {
        self.last_seq = self.last_seq.max(seq);
        for h in health {
            let Some(cluster) = &h.cluster_id else {
                continue;
            };
            let key = (cluster.clone(), h.node_id.clone(), minute_floor(h.ts_ns));
            let s = self.sums.entry(key).or_insert(Sums {
                samples: 0,
                sum: 0.0,
                min: f64::INFINITY,
                last_ns: i64::MIN,
            });
            s.samples += 1;
            s.sum += h.score;
            s.min = s.min.min(h.score);
            s.last_ns = s.last_ns.max(h.ts_ns);
        }
    }

    /// Write the sums and the sequence number they cover in one transaction. Returns the
    /// minutes written (for [`Pending`]).
    pub fn flush(&mut self, conn: &Connection) -> Result<Option<(i64, i64)>, duckdb::Error> {
        if !self.is_pending() {
            return Ok(None);
        }
        let last = self.last_seq;
        in_transaction(conn, || {
            if !self.sums.is_empty() {
                let mut a = conn.appender("health_minutes")?;
                for ((cluster, node, minute), s) in &self.sums {
                    a.append_row(params![
                        minute, cluster, node, s.samples, s.sum, s.min, s.last_ns
                    ])?;
                }
                a.flush()?;
            }
            conn.execute("UPDATE rollup_state SET flushed_seq = ?", [last])?;
            Ok(())
        })?;
        let range = self
            .sums
            .keys()
            .map(|k| k.2)
            .fold(None, |r: Option<(i64, i64)>, m| {
                Some(r.map_or((m, m), |(lo, hi)| (lo.min(m), hi.max(m))))
            });
        self.sums.clear();
        self.flushed_seq = last;
        Ok(range)
    }
}

/// Each cluster of a commit's metric points with its latest point time.
pub fn cluster_times(rows: &Rows) -> Vec<(String, i64)> {
    let mut clusters: HashMap<&str, i64> = HashMap::new();
    let seen = rows
        .points
        .iter()
        .map(|p| (p.cluster_id.as_deref(), p.ts_ns))
        .chain(
            rows.health
                .iter()
                .map(|h| (h.cluster_id.as_deref(), h.ts_ns)),
        );
    for (c, ts) in seen {
        if let Some(c) = c {
            let e = clusters.entry(c).or_insert(ts);
            *e = (*e).max(ts);
        }
    }
    let mut out: Vec<(String, i64)> = clusters
        .into_iter()
        .map(|(c, ts)| (c.to_string(), ts))
        .collect();
    out.sort();
    out
}

/// The writer's copy of `clusters`. An upsert cost about 4 ms per commit (dev build), so a
/// cluster's time is stored only when it is new or has advanced by a minute: the stored
/// time lags the latest point by less than [`MINUTE_NS`], and retention deletes a cluster
/// only once its stored time is older than the cutoff by a minute more (see
/// [`ClusterTimes::retention_cutoff`]), so a cluster that still has rows stays listed.
#[derive(Debug, Default)]
pub struct ClusterTimes {
    stored: HashMap<String, i64>,
}

impl ClusterTimes {
    pub fn load(conn: &Connection) -> Result<ClusterTimes, duckdb::Error> {
        let mut st = conn.prepare("SELECT cluster_id, ts_ns FROM clusters")?;
        let stored = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(ClusterTimes { stored })
    }

    /// The commit's clusters whose time must be stored.
    pub fn due(&self, seen: &[(String, i64)]) -> Vec<(String, i64)> {
        seen.iter()
            .filter(|(c, ts)| {
                self.stored
                    .get(c)
                    .is_none_or(|s| *ts >= s.saturating_add(MINUTE_NS))
            })
            .cloned()
            .collect()
    }

    /// After the commit that stored `due`.
    pub fn stored(&mut self, due: Vec<(String, i64)>) {
        for (c, ts) in due {
            let e = self.stored.entry(c).or_insert(ts);
            *e = (*e).max(ts);
        }
    }

    /// Store `due` inside the caller's transaction.
    pub fn write(conn: &Connection, due: &[(String, i64)]) -> Result<(), duckdb::Error> {
        if due.is_empty() {
            return Ok(());
        }
        let values = vec!["(?, ?)"; due.len()].join(", ");
        let sql = format!(
            "INSERT INTO clusters VALUES {values} ON CONFLICT (cluster_id) \
             DO UPDATE SET ts_ns = greatest(clusters.ts_ns, excluded.ts_ns)"
        );
        let p: Vec<&dyn duckdb::ToSql> = due
            .iter()
            .flat_map(|(c, ts)| [c as &dyn duckdb::ToSql, ts as &dyn duckdb::ToSql])
            .collect();
        conn.execute(&sql, p.as_slice())?;
        Ok(())
    }

    /// The cutoff for `clusters` when the raw tables lose the rows before `cutoff`.
    pub fn retention_cutoff(cutoff: i64) -> i64 {
        cutoff.saturating_sub(MINUTE_NS)
    }
}

/// The minutes with partial rows not merged yet, as the writer tracks them.
#[derive(Debug, Default)]
pub struct Pending {
    range: Option<(i64, i64)>,
}

impl Pending {
    pub fn touch(&mut self, (lo, hi): (i64, i64)) {
        self.range = Some(match self.range {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_none()
    }

    /// Merge the partial rows of the pending minutes before `open_minute` (the minute still
    /// receiving points stays pending). Returns the rows removed by the merge.
    pub fn compact(&mut self, conn: &Connection, open_minute: i64) -> Result<usize, duckdb::Error> {
        let Some((lo, hi)) = self.range else {
            return Ok(0);
        };
        let end = (hi.saturating_add(MINUTE_NS)).min(open_minute);
        if end <= lo {
            return Ok(0);
        }
        conn.execute_batch("BEGIN TRANSACTION")?;
        let r = (|| {
            conn.execute(
                "CREATE OR REPLACE TEMP TABLE health_minutes_merge AS \
                 SELECT ts_ns, cluster_id, node_id, sum(samples)::BIGINT AS samples, sum(score_sum) AS score_sum, \
                        min(score_min) AS score_min, max(last_ns) AS last_ns \
                 FROM health_minutes WHERE ts_ns >= ? AND ts_ns < ? GROUP BY ALL",
                params![lo, end],
            )?;
            let before = conn.execute(
                "DELETE FROM health_minutes WHERE ts_ns >= ? AND ts_ns < ?",
                params![lo, end],
            )?;
            let after = conn.execute(
                "INSERT INTO health_minutes SELECT * FROM health_minutes_merge",
                [],
            )?;
            conn.execute_batch("DROP TABLE health_minutes_merge")?;
            Ok(before.saturating_sub(after))
        })();
        match r {
            Ok(n) => {
                conn.execute_batch("COMMIT")?;
                self.range = if hi >= end { Some((end, hi)) } else { None };
                Ok(n)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// Health scores of one cluster since a time, per node (`node_id`, count `n`, sum `s`,
/// minimum `mn`, latest `last_ns`) as the CTE `hp`, possibly several rows per node: the
/// raw rows of the window's first, partial minute, the raw rows after the rollup's sequence
/// number, and the rollup (exact: see the module notes). Parameters: [`health_params`],
/// inside [`snapshot`].
pub const HEALTH_PARTS: &str = "hp AS (
    SELECT node_id, count(*) AS n, sum(score) AS s, min(score) AS mn, max(ts_ns) AS last_ns
    FROM health_scores WHERE cluster_id = ? AND ts_ns >= ? AND ts_ns < ? GROUP BY node_id
    UNION ALL
    SELECT node_id, count(*), sum(score), min(score), max(ts_ns)
    FROM health_scores WHERE seq > ? AND cluster_id = ? AND ts_ns >= ? GROUP BY node_id
    UNION ALL
    SELECT node_id, sum(samples), sum(score_sum), min(score_min), max(last_ns)
    FROM health_minutes WHERE cluster_id = ? AND ts_ns >= ? GROUP BY node_id)";

pub fn health_params(cluster: &str, since: i64, flushed: i64) -> Vec<Box<dyn duckdb::ToSql>> {
    let edge = minute_ceil(since);
    vec![
        Box::new(cluster.to_string()),
        Box::new(since),
        Box::new(edge),
        Box::new(flushed),
        Box::new(cluster.to_string()),
        Box::new(edge),
        Box::new(cluster.to_string()),
        Box::new(edge),
    ]
}

/// Health scores of one cluster since a time per node and bucket of `step_ns` (a multiple
/// of [`MINUTE_NS`]; buckets start at multiples of it): `node_id`, `bucket_ns`, mean
/// `score`, `samples`, ordered by bucket and node. Parameters: [`bucket_params`], inside
/// [`snapshot`].
pub const HEALTH_BUCKETS: &str = "WITH hp AS (
    SELECT node_id, (ts_ns // ?) * ? AS bucket_ns, count(*) AS n, sum(score) AS s
    FROM health_scores WHERE cluster_id = ? AND ts_ns >= ? AND ts_ns < ? GROUP BY ALL
    UNION ALL
    SELECT node_id, (ts_ns // ?) * ? AS bucket_ns, count(*), sum(score)
    FROM health_scores WHERE seq > ? AND cluster_id = ? AND ts_ns >= ? GROUP BY ALL
    UNION ALL
    SELECT node_id, (ts_ns // ?) * ? AS bucket_ns, sum(samples), sum(score_sum)
    FROM health_minutes WHERE cluster_id = ? AND ts_ns >= ? GROUP BY ALL)
SELECT node_id, bucket_ns, (sum(s) / sum(n))::DOUBLE AS score, sum(n)::BIGINT AS samples
FROM hp GROUP BY ALL ORDER BY bucket_ns, node_id";

/// Whether [`HEALTH_BUCKETS`] can answer for buckets of `step_ns`.
pub fn buckets_align(step_ns: i64) -> bool {
    step_ns > 0 && step_ns % MINUTE_NS == 0
}

pub fn bucket_params(
    cluster: &str,
    since: i64,
    step_ns: i64,
    flushed: i64,
) -> Vec<Box<dyn duckdb::ToSql>> {
    let edge = minute_ceil(since);
    vec![
        Box::new(step_ns),
        Box::new(step_ns),
        Box::new(cluster.to_string()),
        Box::new(since),
        Box::new(edge),
        Box::new(step_ns),
        Box::new(step_ns),
        Box::new(flushed),
        Box::new(cluster.to_string()),
        Box::new(edge),
        Box::new(step_ns),
        Box::new(step_ns),
        Box::new(cluster.to_string()),
        Box::new(edge),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::PointRow;

    fn health(ts: i64, cluster: Option<&str>, node: Option<&str>, score: f64) -> HealthRow {
        HealthRow {
            ts_ns: ts,
            cluster_id: cluster.map(str::to_string),
            node_id: node.map(str::to_string),
            score,
            state: None,
            workload_type: None,
            detection_mode: None,
        }
    }

    #[test]
    fn minute_bounds_round_towards_the_right_minute() {
        assert_eq!(minute_floor(0), 0);
        assert_eq!(minute_floor(MINUTE_NS - 1), 0);
        assert_eq!(minute_floor(MINUTE_NS), MINUTE_NS);
        assert_eq!(minute_floor(-1), -MINUTE_NS);
        assert_eq!(minute_ceil(1), MINUTE_NS);
        assert_eq!(minute_ceil(MINUTE_NS), MINUTE_NS);
        assert_eq!(minute_ceil(-1), 0);
        assert!(buckets_align(MINUTE_NS) && buckets_align(5 * MINUTE_NS));
        assert!(
            !buckets_align(MINUTE_NS / 2) && !buckets_align(90_000_000_000) && !buckets_align(0)
        );
    }

    #[test]
    fn a_commit_names_the_latest_time_of_each_cluster() {
        let rows = Rows {
            health: vec![
                health(5, Some("c"), Some("n1"), 0.9),
                health(MINUTE_NS, Some("c"), Some("n1"), 0.7),
                health(9 * MINUTE_NS, None, Some("n1"), 0.1),
            ],
            points: vec![PointRow {
                ts_ns: 3 * MINUTE_NS,
                cluster_id: Some("d".into()),
                node_id: None,
                metric: "m".into(),
                kind: "gauge",
                value: Some(1.0),
                causal_chain_id: None,
                attributes: "{}".into(),
                resource: "{}".into(),
            }],
            ..Rows::default()
        };
        assert_eq!(
            cluster_times(&rows),
            vec![
                ("c".to_string(), MINUTE_NS),
                ("d".to_string(), 3 * MINUTE_NS)
            ]
        );
    }

    /// xorshift64*, enough for test data.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// What the writer does: raw rows with their commit's sequence number, sums kept in
    /// memory, flushes and merges now and then.
    struct Writer {
        c: Connection,
        acc: Accumulator,
        pending: Pending,
        clusters: ClusterTimes,
    }

    impl Writer {
        fn open(c: Connection) -> Writer {
            migrate(&c).unwrap();
            let (flushed, range) = recover(&c).unwrap();
            let mut pending = Pending::default();
            if let Some(r) = range {
                pending.touch(r);
            }
            let clusters = ClusterTimes::load(&c).unwrap();
            Writer {
                c,
                acc: Accumulator::new(flushed),
                pending,
                clusters,
            }
        }

        fn commit(&mut self, rows: &[HealthRow]) {
            let due = self.clusters.due(&cluster_times(&Rows {
                health: rows.to_vec(),
                ..Rows::default()
            }));
            let seq = self.acc.next_seq();
            let c = &self.c;
            c.execute_batch("BEGIN TRANSACTION").unwrap();
            let mut a = c.appender("health_scores").unwrap();
            for h in rows {
                a.append_row(params![
                    h.ts_ns,
                    h.cluster_id,
                    h.node_id,
                    h.score,
                    h.state,
                    h.workload_type,
                    h.detection_mode,
                    seq
                ])
                .unwrap();
            }
            a.flush().unwrap();
            drop(a);
            ClusterTimes::write(c, &due).unwrap();
            c.execute_batch("COMMIT").unwrap();
            self.clusters.stored(due);
            self.acc.add(seq, rows);
        }

        fn flush(&mut self) {
            if let Some(r) = self.acc.flush(&self.c).unwrap() {
                self.pending.touch(r);
            }
        }
    }

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(crate::store::SCHEMA).unwrap();
        c
    }

    fn random_rows(rng: &mut Rng, n: usize, base: i64) -> Vec<HealthRow> {
        (0..n)
            .map(|_| {
                let cluster = ["a", "b"][rng.below(2) as usize];
                let node = match rng.below(7) {
                    6 => None,
                    k => Some(format!("n{k}")),
                };
                let ts = base + i64::try_from(rng.below(6 * MINUTE_NS as u64)).unwrap();
                let score = rng.below(1000) as f64 / 1000.0;
                health(ts, Some(cluster), node.as_deref(), score)
            })
            .collect()
    }

    type Agg = std::collections::BTreeMap<Option<String>, (i64, f64, f64, i64)>;

    fn via_rollup(c: &Connection, cluster: &str, since: i64) -> Agg {
        let sql = format!(
            "WITH {HEALTH_PARTS} SELECT node_id, sum(n)::BIGINT, sum(s)::DOUBLE, min(mn)::DOUBLE, max(last_ns) FROM hp GROUP BY node_id"
        );
        snapshot(c, |flushed| {
            let mut st = c.prepare(&sql)?;
            st.query_map(
                duckdb::params_from_iter(health_params(cluster, since, flushed).iter()),
                |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))),
            )?
            .collect()
        })
        .unwrap()
    }

    fn via_raw(c: &Connection, cluster: &str, since: i64) -> Agg {
        let mut st = c
            .prepare(
                "SELECT node_id, count(*), sum(score)::DOUBLE, min(score)::DOUBLE, max(ts_ns) FROM health_scores \
                 WHERE cluster_id = ? AND ts_ns >= ? GROUP BY node_id",
            )
            .unwrap();
        st.query_map(params![cluster, since], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    type Buckets = Vec<(Option<String>, i64, f64, i64)>;

    fn buckets(c: &Connection, sql: &str, p: Vec<Box<dyn duckdb::ToSql>>) -> Buckets {
        let mut st = c.prepare(sql).unwrap();
        st.query_map(duckdb::params_from_iter(p.iter()), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    fn assert_buckets_exact(c: &Connection, since: i64, what: &str) {
        for step in [MINUTE_NS, 3 * MINUTE_NS] {
            let flushed = flushed_seq(c).unwrap();
            let got = buckets(c, HEALTH_BUCKETS, bucket_params("a", since, step, flushed));
            let want = buckets(
                c,
                "SELECT node_id, (ts_ns // ?) * ? AS bucket_ns, avg(score)::DOUBLE, count(*) FROM health_scores \
                 WHERE cluster_id = ? AND ts_ns >= ? GROUP BY ALL ORDER BY bucket_ns, node_id",
                vec![
                    Box::new(step),
                    Box::new(step),
                    Box::new("a".to_string()),
                    Box::new(since),
                ],
            );
            assert_eq!(
                got.len(),
                want.len(),
                "{what}: buckets of {step} since {since}"
            );
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    (&g.0, g.1, g.3),
                    (&w.0, w.1, w.3),
                    "{what}: step {step} since {since}"
                );
                assert!((g.2 - w.2).abs() < 1e-9, "{what}: mean {g:?} vs {w:?}");
            }
        }
    }

    fn assert_exact(c: &Connection, rng: &mut Rng, base: i64, what: &str) {
        let mut sinces: Vec<i64> = (0..8).map(|k| base + k * MINUTE_NS).collect();
        sinces.extend(
            (0..16).map(|_| {
                base - MINUTE_NS + i64::try_from(rng.below(8 * MINUTE_NS as u64)).unwrap()
            }),
        );
        for since in sinces {
            assert_buckets_exact(c, since, what);
            for cluster in ["a", "b", "none"] {
                let (got, want) = (via_rollup(c, cluster, since), via_raw(c, cluster, since));
                assert_eq!(
                    got.len(),
                    want.len(),
                    "{what}: nodes of {cluster} since {since}"
                );
                for (node, w) in &want {
                    let g = got[node];
                    assert_eq!(
                        (g.0, g.2, g.3),
                        (w.0, w.2, w.3),
                        "{what}: {cluster}/{node:?} since {since}"
                    );
                    assert!(
                        (g.1 - w.1).abs() < 1e-9,
                        "{what}: sum of {cluster}/{node:?} since {since}: {} vs {}",
                        g.1,
                        w.1
                    );
                }
            }
        }
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    const BASE: i64 = 1_700_000_000 * 1_000_000_000 - 17;

    #[test]
    fn queries_answer_exactly_what_the_raw_rows_answer_flushed_or_not_merged_or_not() {
        let mut w = Writer::open(db());
        let mut rng = Rng(0x5eed);
        for i in 0..40 {
            w.commit(&random_rows(&mut rng, 50, BASE));
            if i % 7 == 6 {
                w.flush();
            }
        }
        assert!(w.acc.is_pending(), "the last commits wait for a flush");
        assert_exact(&w.c, &mut rng, BASE, "partly flushed");
        w.flush();
        assert!(!w.acc.is_pending());
        assert_eq!(
            count(
                &w.c,
                "SELECT count(*) FROM health_scores WHERE seq > (SELECT flushed_seq FROM rollup_state)"
            ),
            0
        );
        let partial = count(&w.c, "SELECT count(*) FROM health_minutes");
        assert_exact(&w.c, &mut rng, BASE, "flushed");

        // Merge everything before the fifth minute; the minutes after stay pending.
        let open = minute_floor(BASE) + 4 * MINUTE_NS;
        let merged = w.pending.compact(&w.c, open).unwrap();
        assert!(
            merged > 0,
            "merging removed no row ({partial} partial rows)"
        );
        assert_eq!(
            count(&w.c, "SELECT count(*) FROM health_minutes"),
            partial - merged as i64
        );
        assert_exact(&w.c, &mut rng, BASE, "after a merge");
        let closed_keys = count(
            &w.c,
            &format!(
                "SELECT count(*) FROM (SELECT DISTINCT ts_ns, cluster_id, node_id FROM health_minutes WHERE ts_ns < {open})"
            ),
        );
        let closed_rows = count(
            &w.c,
            &format!("SELECT count(*) FROM health_minutes WHERE ts_ns < {open}"),
        );
        assert_eq!(
            closed_rows, closed_keys,
            "one row per key in the merged minutes"
        );
        assert!(!w.pending.is_empty(), "the open minutes stay pending");

        // Late points for merged minutes, flushed, then everything merged.
        for _ in 0..5 {
            w.commit(&random_rows(&mut rng, 20, BASE));
        }
        assert_exact(&w.c, &mut rng, BASE, "late rows, not flushed");
        w.flush();
        w.pending.compact(&w.c, i64::MAX).unwrap();
        assert!(w.pending.is_empty());
        assert_exact(&w.c, &mut rng, BASE, "after the last merge");

        // Retention cuts whole minutes from every table: still exact.
        let cut = minute_floor(BASE) + 2 * MINUTE_NS;
        for t in ["health_scores", "health_minutes"] {
            w.c.execute(&format!("DELETE FROM {t} WHERE ts_ns < ?"), [cut])
                .unwrap();
        }
        assert_exact(&w.c, &mut rng, BASE, "after retention");
    }

    #[test]
    fn rows_committed_but_not_flushed_before_a_crash_are_summed_at_open() {
        let dir = std::env::temp_dir().join(format!("echo-rollup-crash-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("db.duckdb");
        let mut rng = Rng(99);
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(crate::store::SCHEMA).unwrap();
            let mut w = Writer::open(c);
            for i in 0..12 {
                w.commit(&random_rows(&mut rng, 30, BASE));
                if i == 4 {
                    w.flush();
                }
            }
            assert!(w.acc.is_pending());
            // Dropped without a flush: the sums in memory are lost.
        }
        let c = Connection::open(&path).unwrap();
        c.execute_batch(crate::store::SCHEMA).unwrap();
        let w = Writer::open(c);
        assert_eq!(
            w.acc.next_seq(),
            13,
            "sequence numbers go on after the recovered ones"
        );
        assert_eq!(flushed_seq(&w.c).unwrap(), 12);
        assert!(
            !w.pending.is_empty(),
            "the recovered minutes are merged later"
        );
        assert_exact(&w.c, &mut rng, BASE, "recovered");
        let rows = count(&w.c, "SELECT count(*) FROM health_minutes");
        drop(w);
        let w = Writer::open(Connection::open(&path).unwrap());
        assert_eq!(
            count(&w.c, "SELECT count(*) FROM health_minutes"),
            rows,
            "nothing recovered twice"
        );
        drop(w);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_from_before_the_rollup_is_filled_once_at_open() {
        let c = Connection::open_in_memory().unwrap();
        // The schema before the rollup: no `seq`.
        c.execute_batch(
            "CREATE TABLE health_scores (ts_ns BIGINT NOT NULL, cluster_id VARCHAR, node_id VARCHAR, \
             score DOUBLE NOT NULL, state VARCHAR, workload_type VARCHAR, detection_mode VARCHAR)",
        )
        .unwrap();
        c.execute_batch(crate::store::SCHEMA).unwrap();
        let mut rng = Rng(42);
        for h in random_rows(&mut rng, 500, BASE) {
            c.execute(
                "INSERT INTO health_scores VALUES (?, ?, ?, ?, NULL, NULL, NULL)",
                params![h.ts_ns, h.cluster_id, h.node_id, h.score],
            )
            .unwrap();
        }
        c.execute(
            "INSERT INTO points VALUES (?, 'c', NULL, 'm', 'gauge', 1, NULL, '{}', '{}')",
            [BASE],
        )
        .unwrap();
        let mut w = Writer::open(c);
        assert_exact(&w.c, &mut rng, BASE, "backfilled");
        let rows = count(&w.c, "SELECT count(*) FROM health_minutes");
        migrate(&w.c).unwrap();
        assert_eq!(
            count(&w.c, "SELECT count(*) FROM health_minutes"),
            rows,
            "a second open does not fill again"
        );
        let clusters: Vec<String> =
            w.c.prepare("SELECT cluster_id FROM clusters ORDER BY 1")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(clusters, ["a", "b", "c"]);
        // New rows after the old ones.
        w.commit(&random_rows(&mut rng, 40, BASE));
        assert_exact(&w.c, &mut rng, BASE, "old and new rows");
        w.flush();
        assert_exact(&w.c, &mut rng, BASE, "old and new rows, flushed");
    }

    #[test]
    fn the_cluster_list_keeps_the_latest_point_time() {
        let mut w = Writer::open(db());
        w.commit(&[health(50, Some("a"), Some("n"), 1.0)]);
        w.commit(&[
            health(10, Some("a"), Some("n"), 1.0),
            health(5, Some("b"), None, 1.0),
        ]);
        let got: Vec<(String, i64)> =
            w.c.prepare("SELECT cluster_id, ts_ns FROM clusters ORDER BY 1")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(got, [("a".to_string(), 50), ("b".to_string(), 5)]);
    }

    #[test]
    fn a_cluster_time_is_stored_when_new_or_a_minute_later_and_never_lags_more() {
        let mut ct = ClusterTimes::default();
        let mut rng = Rng(7);
        let mut true_max = i64::MIN;
        let mut writes = 0;
        for _ in 0..2000 {
            let ts = i64::try_from(rng.below(30 * MINUTE_NS as u64)).unwrap();
            true_max = true_max.max(ts);
            let due = ct.due(&[("a".to_string(), ts)]);
            writes += due.len();
            ct.stored(due);
            let stored = ct.stored["a"];
            assert!(
                stored <= true_max && stored > true_max - MINUTE_NS,
                "stored {stored}, latest {true_max}"
            );
            // Retention at any cutoff keeps the cluster while it has a row at or after it.
            assert!(stored >= ClusterTimes::retention_cutoff(true_max));
        }
        assert!(writes < 200, "{writes} upserts for 2000 commits");
    }
}
