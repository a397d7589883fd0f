//! `ingero-agent export --format perfetto`: the store as Chrome Trace Event JSON (the
//! Perfetto UI and chrome://tracing load it). One process track per node, one thread track
//! per OS process under it; CUDA, driver and NCCL calls as complete (`X`) slices; the host
//! layers as counter (`C`) tracks (run-queue delay, off-CPU time, block I/O per second);
//! causal chains as instant (`i`) markers coloured by severity.

use std::collections::BTreeMap;
use std::io::Write;

use rusqlite::Connection;
use serde_json::{Value, json};

use super::InvestigateError;
use crate::store::schema::has_column;

fn severity_colour(s: &str) -> &'static str {
    match s {
        "HIGH" => "terrible",
        "MEDIUM" => "bad",
        _ => "yellow",
    }
}

/// Write the trace to `out`; returns the number of trace events written.
pub fn perfetto(
    conn: &Connection,
    since_ns: Option<i64>,
    out: &mut dyn Write,
) -> Result<u64, InvestigateError> {
    let since = since_ns.unwrap_or(i64::MIN);
    let has_node = has_column(conn, "events", "node")?;
    let has_comm = has_column(conn, "events", "comm")?;
    let node_col = if has_node { "e.node" } else { "''" };
    let comm_col = if has_comm { "e.comm" } else { "''" };
    let mut node_ids: BTreeMap<String, u64> = BTreeMap::new();
    let mut threads: BTreeMap<(u64, u32), String> = BTreeMap::new();
    let mut events: Vec<Value> = Vec::new();
    let node_id = |n: &str, ids: &mut BTreeMap<String, u64>| {
        let next = ids.len() as u64 + 1;
        *ids.entry(n.to_string()).or_insert(next)
    };
    let mut st = conn.prepare(&format!(
        "SELECT e.timestamp, e.duration, e.pid, {node_col}, {comm_col}, e.source, e.op,
                COALESCE(o.name, 'op' || e.source || '.' || e.op), e.arg0, e.ret_code
         FROM events e LEFT JOIN ops o ON o.source_id = e.source AND o.op_id = e.op
         WHERE e.timestamp >= ?1 AND e.source IN (1, 4, 9) ORDER BY e.timestamp"
    ))?;
    let mut rows = st.query([since])?;
    while let Some(r) = rows.next()? {
        let (ts, dur, pid, node, comm, src, name, arg0, ret): (
            i64,
            i64,
            u32,
            String,
            String,
            i64,
            String,
            i64,
            i64,
        ) = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(7)?,
            r.get(8)?,
            r.get(9)?,
        );
        let p = node_id(&node, &mut node_ids);
        threads.entry((p, pid)).or_insert(comm);
        let cat = match src {
            1 => "cuda",
            4 => "driver",
            _ => "nccl",
        };
        events.push(json!({
            "name": name, "cat": cat, "ph": "X", "pid": p, "tid": pid,
            "ts": ts as f64 / 1000.0, "dur": dur as f64 / 1000.0,
            "args": {"arg0": arg0, "ret_code": ret}
        }));
    }
    let agg_node = if has_column(conn, "event_aggregates", "node")? {
        "node"
    } else {
        "''"
    };
    let mut st = conn.prepare(&format!(
        "SELECT bucket, {agg_node}, source, op, sum(count), sum(sum_dur), sum(sum_arg0)
         FROM event_aggregates WHERE bucket >= ?1 AND source IN (3, 5)
         GROUP BY bucket, {agg_node}, source, op ORDER BY bucket"
    ))?;
    let mut rows = st.query([since])?;
    while let Some(r) = rows.next()? {
        let (b, node, src, op, count, sum_dur, sum_arg0): (i64, String, i64, i64, i64, i64, i64) = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
        );
        let p = node_id(&node, &mut node_ids);
        let (name, args) = match (src, op) {
            (3, 1) => (
                "off-CPU ms/s",
                json!({"off_cpu_ms": sum_dur as f64 / 1e6, "involuntary": sum_arg0}),
            ),
            (3, 2) => (
                "run-queue delay ms/s",
                json!({"runq_ms": sum_dur as f64 / 1e6}),
            ),
            (5, _) => (
                "block I/O",
                json!({"ops": count, "mb": sum_arg0 as f64 / 1e6, "latency_ms": sum_dur as f64 / 1e6}),
            ),
            _ => continue,
        };
        events.push(
            json!({"name": name, "ph": "C", "pid": p, "ts": b as f64 / 1000.0, "args": args}),
        );
    }
    let chain_node = if has_column(conn, "causal_chains", "node")? {
        "node"
    } else {
        "''"
    };
    let mut st = conn.prepare(&format!(
        "SELECT detected_at, {chain_node}, severity, summary, root_cause, id FROM causal_chains WHERE detected_at >= ?1"
    ))?;
    let mut rows = st.query([since])?;
    while let Some(r) = rows.next()? {
        let (ts, node, sev, summary, root, id): (i64, String, String, String, String, String) = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        );
        let p = node_id(&node, &mut node_ids);
        events.push(json!({
            "name": format!("[{sev}] {root}"), "cat": "causal_chain", "ph": "i", "s": "p",
            "pid": p, "tid": 0, "ts": ts as f64 / 1000.0, "cname": severity_colour(&sev),
            "args": {"id": id, "summary": summary}
        }));
    }
    let mut meta = Vec::new();
    for (node, p) in &node_ids {
        let label = if node.is_empty() {
            "(no node)"
        } else {
            node.as_str()
        };
        meta.push(json!({"name": "process_name", "ph": "M", "pid": p, "args": {"name": label}}));
    }
    for ((p, pid), comm) in &threads {
        let label = if comm.is_empty() {
            format!("pid {pid}")
        } else {
            format!("{comm} ({pid})")
        };
        meta.push(json!({"name": "thread_name", "ph": "M", "pid": p, "tid": pid, "args": {"name": label}}));
    }
    let n = (meta.len() + events.len()) as u64;
    meta.extend(events);
    let doc = json!({"traceEvents": meta, "displayTimeUnit": "ms"});
    serde_json::to_writer(&mut *out, &doc)
        .map_err(|e| InvestigateError::Io("export".into(), e.into()))?;
    out.flush()
        .map_err(|e| InvestigateError::Io("export".into(), e))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::investigate::fixtures::{self, Layout};

    /// The structure the trace viewers require of each event kind.
    fn check_event(e: &Value) {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["pid"].is_u64(), "{e}");
        match ph {
            "M" => {
                assert!(["process_name", "thread_name"].contains(&e["name"].as_str().unwrap()));
                assert!(e["args"]["name"].is_string());
            }
            "X" => {
                assert!(e["ts"].is_f64() || e["ts"].is_u64());
                assert!(e["dur"].as_f64().unwrap() >= 0.0);
                assert!(e["tid"].is_u64() && e["name"].is_string());
            }
            "C" => assert!(
                e["args"]
                    .as_object()
                    .unwrap()
                    .values()
                    .all(Value::is_number),
                "{e}"
            ),
            "i" => {
                assert_eq!(e["s"], "p");
                assert!(["terrible", "bad", "yellow"].contains(&e["cname"].as_str().unwrap()));
            }
            other => panic!("unexpected phase {other}"),
        }
    }

    #[test]
    fn a_merged_database_exports_one_process_per_node_with_slices_counters_and_chains() {
        let dir = fixtures::tmp_dir("export");
        let a = dir.join("a.db");
        let b = dir.join("b.db");
        fixtures::write_node_db(
            &a,
            "gpu-node-01",
            Layout::Current,
            &fixtures::clean_events(0),
        );
        fixtures::write_node_db(
            &b,
            "gpu-node-07",
            Layout::Current,
            &fixtures::contended_events(0),
        );
        let c = crate::store::open_for_writing(&b).unwrap();
        let r = crate::investigate::explain::explain(
            &c,
            &crate::investigate::explain::ExplainOptions {
                since: std::time::Duration::from_secs(3600),
                per_process: false,
            },
        )
        .unwrap();
        crate::investigate::explain::store_chains(&c, &r.chains).unwrap();
        let m = dir.join("m.db");
        crate::investigate::merge::merge(&[a, b], &m, None).unwrap();
        let conn = crate::store::open_read_only(&m).unwrap();
        let mut buf = Vec::new();
        let n = perfetto(&conn, None, &mut buf).unwrap();
        let doc: Value = serde_json::from_slice(&buf).unwrap();
        let evs = doc["traceEvents"].as_array().unwrap();
        assert_eq!(evs.len() as u64, n);
        evs.iter().for_each(check_event);
        let procs: Vec<&str> = evs
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(procs, vec!["gpu-node-01", "gpu-node-07"]);
        let slices = evs.iter().filter(|e| e["ph"] == "X").count() as i64;
        let stored: i64 = conn
            .query_row(
                "SELECT count(*) FROM events WHERE source IN (1, 4, 9)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(slices, stored);
        assert!(evs.iter().any(|e| e["ph"] == "C"));
        let marks: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "i").collect();
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0]["cname"], "terrible");
        // The chain's marker is on gpu-node-07's track.
        assert_eq!(marks[0]["pid"], 2);
    }

    #[test]
    fn an_old_database_exports() {
        let dir = fixtures::tmp_dir("export-old");
        let p = dir.join("old.db");
        fixtures::write_node_db(&p, "x", Layout::GoBeforeNode, &fixtures::clean_events(0));
        let conn = crate::store::open_read_only(&p).unwrap();
        let mut buf = Vec::new();
        perfetto(&conn, None, &mut buf).unwrap();
        let doc: Value = serde_json::from_slice(&buf).unwrap();
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .for_each(check_event);
    }
}
