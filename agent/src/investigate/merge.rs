//! `ingero-agent merge a.db b.db -o cluster.db`: several nodes' stores in one file. Event and
//! chain ids stay node-namespaced (`{node}:{seq}`; an id without its node gets it), stack
//! traces are kept once per hash, aggregates keep their node. A database written before the
//! node column needs `--force-node NAME`.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::InvestigateError;
use crate::store::schema::has_column;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MergeStats {
    pub events: u64,
    /// Events whose id was already in the output (the same file merged twice).
    pub duplicate_events: u64,
    pub chains: u64,
    pub stacks_new: u64,
    pub stacks_shared: u64,
    pub aggregates: u64,
    pub sessions: u64,
}

/// The node of each input: its `events.node` values (one, non-empty) or the forced name.
fn input_node(
    src: &Connection,
    path: &Path,
    force: Option<&str>,
) -> Result<Option<String>, InvestigateError> {
    if let Some(f) = force {
        return Ok(Some(f.to_string()));
    }
    if !has_column(src, "events", "node")? {
        return Err(InvestigateError::Input(format!(
            "{}: written before node identity (no events.node column): give --force-node NAME",
            path.display()
        )));
    }
    let mut st = src.prepare("SELECT DISTINCT node FROM events")?;
    let nodes: Vec<String> = st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    if nodes.iter().any(String::is_empty) {
        return Err(InvestigateError::Input(format!(
            "{}: events without a node: give --force-node NAME",
            path.display()
        )));
    }
    // Several nodes (an already merged file): rows keep their own; aggregates too.
    Ok(if nodes.len() == 1 {
        nodes.into_iter().next()
    } else {
        None
    })
}

fn col_or(
    src: &Connection,
    table: &str,
    col: &str,
    default: &str,
) -> Result<String, InvestigateError> {
    Ok(if has_column(src, table, col)? {
        format!("s.{col}")
    } else {
        default.to_string()
    })
}

/// Merge `inputs` into a new file `out`.
pub fn merge(
    inputs: &[PathBuf],
    out: &Path,
    force_node: Option<&str>,
) -> Result<MergeStats, InvestigateError> {
    if out.exists() {
        return Err(InvestigateError::Input(format!(
            "{} exists: merge writes a new file",
            out.display()
        )));
    }
    if inputs.is_empty() {
        return Err(InvestigateError::Input("no input databases".into()));
    }
    // Check every input before creating anything.
    let mut nodes = Vec::new();
    for p in inputs {
        let src = crate::store::open_read_only(p)?;
        nodes.push(input_node(&src, p, force_node)?);
    }
    let tmp = out.with_extension("merging");
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let dst = crate::store::open_for_writing(&tmp)?;
        let mut stats = MergeStats::default();
        for (p, node) in inputs.iter().zip(&nodes) {
            merge_one(&dst, p, node.as_deref(), &mut stats)?;
        }
        dst.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")?;
        drop(dst);
        Ok::<_, InvestigateError>(stats)
    })();
    match result {
        Ok(stats) => {
            std::fs::rename(&tmp, out)
                .map_err(|e| InvestigateError::Io(out.display().to_string(), e))?;
            Ok(stats)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn merge_one(
    dst: &Connection,
    path: &Path,
    node: Option<&str>,
    stats: &mut MergeStats,
) -> Result<(), InvestigateError> {
    let uri = format!(
        "file:{}?mode=ro",
        percent_encoding::utf8_percent_encode(
            &path.display().to_string(),
            percent_encoding::NON_ALPHANUMERIC
        )
        .to_string()
        .replace("%2F", "/")
    );
    dst.execute("ATTACH DATABASE ?1 AS s", [uri])?;
    let src = crate::store::open_read_only(path)?;
    let node_expr = match node {
        Some(_) => "?1".to_string(),
        None => "s.node".to_string(),
    };
    let node_arg = node.unwrap_or("");
    let r = (|| -> Result<(), InvestigateError> {
        let tx = dst.unchecked_transaction()?;
        // Events: the id gets its node unless it already starts with it.
        let cols = [
            ("cgroup_id", "0"),
            ("rank", "NULL"),
            ("local_rank", "NULL"),
            ("world_size", "NULL"),
            ("comm", "''"),
            ("stack_hash", "0"),
            ("gpu_id", "0"),
        ];
        let mut sel = Vec::new();
        for (c, d) in cols {
            sel.push(col_or(&src, "events", c, d)?);
        }
        let before: i64 = tx.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        let total: i64 = src.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        tx.execute(
            &format!(
                "INSERT OR IGNORE INTO events (id, timestamp, pid, tid, source, op, duration, arg0, arg1, ret_code, node, cgroup_id, rank, local_rank, world_size, comm, stack_hash, gpu_id)
                 SELECT CASE WHEN instr(s.id, {n} || ':') = 1 THEN s.id ELSE {n} || ':' || s.id END,
                        s.timestamp, s.pid, s.tid, s.source, s.op, s.duration, s.arg0, s.arg1, s.ret_code, {n},
                        {sel}
                 FROM s.events s",
                sel = sel.join(", "),
                n = node_expr
            ),
            params_for(node),
        )?;
        let after: i64 = tx.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        stats.events += (after - before) as u64;
        stats.duplicate_events += (total - (after - before)) as u64;

        // Stacks once per hash.
        let frames = col_or(&src, "stack_traces", "frames", "''")?;
        let total: i64 = src.query_row("SELECT count(*) FROM stack_traces", [], |r| r.get(0))?;
        let added = tx.execute(
            &format!("INSERT OR IGNORE INTO stack_traces (hash, ips, frames) SELECT s.hash, s.ips, {frames} FROM s.stack_traces s"),
            [],
        )?;
        stats.stacks_new += added as u64;
        stats.stacks_shared += (total as u64).saturating_sub(added as u64);

        // Chains: namespaced ids and their node.
        let cn = if node.is_some() || !has_column(&src, "causal_chains", "node")? {
            "?1".to_string()
        } else {
            "s.node".to_string()
        };
        let added = tx.execute(
            &format!(
                "INSERT OR REPLACE INTO causal_chains (id, detected_at, severity, summary, root_cause, explanation, recommendations, cuda_op, cuda_p99_us, cuda_p50_us, tail_ratio, timeline, node)
                 SELECT CASE WHEN instr(s.id, {cn} || ':') = 1 THEN s.id ELSE {cn} || ':' || s.id END,
                        s.detected_at, s.severity, s.summary, s.root_cause, s.explanation, s.recommendations, s.cuda_op,
                        s.cuda_p99_us, s.cuda_p50_us, s.tail_ratio, s.timeline, {cn}
                 FROM s.causal_chains s"
            ),
            params_for((cn == "?1").then_some(node_arg)),
        )?;
        stats.chains += added as u64;

        // Aggregates keep their node (part of the key); counts add for the same key.
        let an = if node.is_some() || !has_column(&src, "event_aggregates", "node")? {
            "?1".to_string()
        } else {
            "s.node".to_string()
        };
        let sum_arg0 = col_or(&src, "event_aggregates", "sum_arg0", "0")?;
        let added = tx.execute(
            &format!(
                "INSERT INTO event_aggregates (bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur, sum_arg0, node)
                 SELECT s.bucket, s.source, s.op, s.pid, s.count, s.stored, s.sum_dur, s.min_dur, s.max_dur, {sum_arg0}, {an}
                 FROM s.event_aggregates s WHERE true
                 ON CONFLICT (bucket, source, op, pid, node) DO UPDATE SET
                   count = count + excluded.count, stored = stored + excluded.stored,
                   sum_dur = sum_dur + excluded.sum_dur, max_dur = max(max_dur, excluded.max_dur),
                   sum_arg0 = sum_arg0 + excluded.sum_arg0"
            ),
            params_for((an == "?1").then_some(node_arg)),
        )?;
        stats.aggregates += added as u64;

        let sn = if node.is_some() || !has_column(&src, "sessions", "node")? {
            "?1".to_string()
        } else {
            "s.node".to_string()
        };
        let added = tx.execute(
            &format!(
                "INSERT INTO sessions (started_at, stopped_at, gpu_model, gpu_driver, cpu_model, cpu_cores, mem_total, kernel, os_release, cuda_ver, python_ver, ingero_ver, pid_filter, flags, node)
                 SELECT s.started_at, s.stopped_at, s.gpu_model, s.gpu_driver, s.cpu_model, s.cpu_cores, s.mem_total, s.kernel, s.os_release, s.cuda_ver, s.python_ver, s.ingero_ver, s.pid_filter, s.flags, {sn}
                 FROM s.sessions s"
            ),
            params_for((sn == "?1").then_some(node_arg)),
        )?;
        stats.sessions += added as u64;
        // Process names are per pid without a node: the first file's name is kept.
        tx.execute(
            "INSERT OR IGNORE INTO process_names (pid, name, seen_at) SELECT pid, name, seen_at FROM s.process_names",
            [],
        )?;
        // Ops a newer writer defined that this one lacks.
        tx.execute(
            "INSERT OR IGNORE INTO ops (source_id, op_id, name, description) SELECT source_id, op_id, name, description FROM s.ops",
            [],
        )?;
        tx.commit()?;
        Ok(())
    })();
    dst.execute("DETACH DATABASE s", [])?;
    r
}

/// `?1` bound to the node where the statement uses it.
fn params_for(node: Option<&str>) -> rusqlite::ParamsFromIter<Option<&str>> {
    rusqlite::params_from_iter(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::investigate::explain::{self, Cause, ExplainOptions};
    use crate::investigate::fixtures::{self, Layout};

    fn opts() -> ExplainOptions {
        ExplainOptions {
            since: std::time::Duration::from_secs(3600),
            per_process: false,
        }
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn merging_nodes_keeps_every_event_and_chain_and_each_stack_once() {
        let dir = fixtures::tmp_dir("merge");
        let a = dir.join("a.db");
        let b = dir.join("b.db");
        fixtures::write_node_db(&a, "gpu-node-01", Layout::Current, &fixtures::io_events(0));
        fixtures::write_node_db(
            &b,
            "gpu-node-07",
            Layout::Current,
            &fixtures::contended_events(0),
        );
        // Each node explains itself and keeps its chain.
        for p in [&a, &b] {
            let c = crate::store::open_for_writing(p).unwrap();
            let r = explain::explain(&c, &opts()).unwrap();
            assert_eq!(r.chains.len(), 1);
            explain::store_chains(&c, &r.chains).unwrap();
        }
        let out = dir.join("cluster.db");
        let st = merge(&[a.clone(), b.clone()], &out, None).unwrap();
        let ca = crate::store::open_read_only(&a).unwrap();
        let cb = crate::store::open_read_only(&b).unwrap();
        let m = crate::store::open_read_only(&out).unwrap();
        let ev = |c: &Connection| count(c, "SELECT count(*) FROM events");
        assert_eq!(ev(&m), ev(&ca) + ev(&cb));
        assert_eq!(st.events as i64, ev(&m));
        assert_eq!(count(&m, "SELECT count(*) FROM causal_chains"), 2);
        // Shared stack once, each node's own once: three distinct.
        assert_eq!(count(&m, "SELECT count(*) FROM stack_traces"), 3);
        assert_eq!(st.stacks_shared, 1);
        assert_eq!(
            count(
                &m,
                "SELECT count(*) FROM events WHERE id NOT LIKE node || ':%'"
            ),
            0
        );
        assert_eq!(
            count(&m, "SELECT count(DISTINCT node) FROM event_aggregates"),
            2
        );
        // The merged file explains per node: only the contended one has a cause.
        let r = explain::explain(&m, &opts()).unwrap();
        assert_eq!(r.nodes.len(), 2);
        let by_node: Vec<(String, Vec<Cause>)> = r
            .chains
            .iter()
            .map(|c| (c.node.clone(), c.causes.clone()))
            .collect();
        assert_eq!(
            by_node,
            vec![
                ("gpu-node-01".to_string(), vec![Cause::BlockIo]),
                ("gpu-node-07".to_string(), vec![Cause::CpuContention]),
            ]
        );
        // The output must not exist already.
        assert!(merge(&[a], &out, None).is_err());
    }

    #[test]
    fn a_database_without_the_node_column_needs_force_node() {
        let dir = fixtures::tmp_dir("merge-old");
        let old = dir.join("old.db");
        let cur = dir.join("cur.db");
        fixtures::write_node_db(
            &old,
            "x",
            Layout::GoBeforeNode,
            &fixtures::contended_events(0),
        );
        fixtures::write_node_db(
            &cur,
            "gpu-node-02",
            Layout::Current,
            &fixtures::clean_events(0),
        );
        let out = dir.join("m.db");
        let e = merge(std::slice::from_ref(&old), &out, None).unwrap_err();
        assert!(e.to_string().contains("--force-node"), "{e}");
        assert!(!out.exists(), "a refused merge leaves no file");
        let st = merge(std::slice::from_ref(&old), &out, Some("legacy-node")).unwrap();
        let m = crate::store::open_read_only(&out).unwrap();
        let o = crate::store::open_read_only(&old).unwrap();
        assert_eq!(st.events as i64, count(&o, "SELECT count(*) FROM events"));
        assert_eq!(
            count(
                &m,
                "SELECT count(*) FROM events WHERE id LIKE 'legacy-node:%' AND node = 'legacy-node'"
            ),
            count(&o, "SELECT count(*) FROM events")
        );
        let chain: String = m
            .query_row("SELECT id FROM causal_chains", [], |r| r.get(0))
            .unwrap();
        assert_eq!(chain, "legacy-node:tail-high-cudaStreamSync");
        // A merged file merges again with a current node's file.
        let out2 = dir.join("m2.db");
        let st2 = merge(&[out.clone(), cur.clone()], &out2, None).unwrap();
        let c = crate::store::open_read_only(&cur).unwrap();
        assert_eq!(
            st2.events as i64,
            count(&o, "SELECT count(*) FROM events") + count(&c, "SELECT count(*) FROM events")
        );
    }
}
