//! Putting the nodes' answers together: one table with a `node` column, the chains of all
//! nodes on this host's clock, one Perfetto trace with a process per node.

use serde::Serialize;
use serde_json::{Value, json};

use super::NodeAnswer;
use crate::api::handlers::QueryAnswer;
use crate::investigate::explain::Report;
use crate::investigate::query::Table;

/// Which nodes answered and which did not (and why).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    pub answered: Vec<String>,
    pub failed: Vec<Failure>,
    pub clock_skew: Vec<NodeSkew>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub node: String,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeSkew {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The node's clock minus this host's (ms): the sample with the shortest round trip.
    pub offset_ms: f64,
    /// That sample's round trip (ms); the offset is within half of it.
    pub rtt_ms: f64,
    /// The median offset of the three samples (ms).
    pub median_offset_ms: f64,
}

impl Outcome {
    pub fn of<T>(answers: &[NodeAnswer<T>], threshold: std::time::Duration) -> Outcome {
        let mut o = Outcome {
            warnings: super::skew_warnings(answers, threshold),
            ..Default::default()
        };
        for a in answers {
            match &a.result {
                Ok(_) => o.answered.push(a.node.clone()),
                Err(e) => o.failed.push(Failure {
                    node: a.node.clone(),
                    error: e.clone(),
                }),
            }
            if let Some(s) = a.skew {
                o.clock_skew.push(NodeSkew {
                    node: a.node.clone(),
                    node_id: a.node_id.clone(),
                    offset_ms: s.offset_ns as f64 / 1e6,
                    rtt_ms: s.rtt_ns as f64 / 1e6,
                    median_offset_ms: s.median_offset_ns as f64 / 1e6,
                });
            }
        }
        o
    }

    /// Lines for stderr (or the top of an MCP answer): skew warnings, then failed nodes.
    pub fn notes(&self) -> String {
        let mut s = String::new();
        for w in &self.warnings {
            s.push_str(w);
            s.push('\n');
        }
        for f in &self.failed {
            s.push_str(&format!("FAILED: {}: {}\n", f.node, f.error));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!(
                "{} of {} nodes answered\n",
                self.answered.len(),
                self.answered.len() + self.failed.len()
            ));
        }
        s
    }

    /// 0 all answered, 3 some failed, 1 none answered.
    pub fn exit_code(&self) -> u8 {
        if self.failed.is_empty() {
            0
        } else if self.answered.is_empty() {
            1
        } else {
            3
        }
    }
}

/// One table: the node's address first (`node`, or `node_address` when the statement has
/// a `node` column of its own), then the columns of the first answer. A node whose columns
/// differ is moved to the failures.
pub fn table(answers: &mut [NodeAnswer<QueryAnswer>]) -> (Table, bool) {
    let mut columns: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    let mut truncated = false;
    for a in answers.iter_mut() {
        let Ok(q) = &a.result else { continue };
        match &columns {
            None => columns = Some(q.columns.clone()),
            Some(c) if c != &q.columns => {
                a.result = Err(format!(
                    "answered columns {:?}, not {:?} like the others",
                    q.columns, c
                ));
                continue;
            }
            Some(_) => {}
        }
        truncated |= q.truncated;
        for r in &q.rows {
            let mut row = Vec::with_capacity(r.len() + 1);
            row.push(Value::from(a.node.clone()));
            row.extend(r.iter().cloned());
            rows.push(row);
        }
    }
    let columns = columns.unwrap_or_default();
    let first = if columns.iter().any(|c| c == "node") {
        "node_address"
    } else {
        "node"
    };
    let mut cols = vec![first.to_string()];
    cols.extend(columns);
    (
        Table {
            columns: cols,
            rows,
        },
        truncated,
    )
}

/// The chains of every node, their times moved onto this host's clock, most severe first.
pub fn chains(answers: &mut [NodeAnswer<Value>]) -> Report {
    let mut all = Report::default();
    for a in answers.iter_mut() {
        let Ok(v) = &a.result else { continue };
        let mut r: Report = match serde_json::from_value(v.clone()) {
            Ok(r) => r,
            Err(e) => {
                a.result = Err(format!("unreadable chains: {e}"));
                continue;
            }
        };
        let off = a.offset_ns();
        for c in &mut r.chains {
            c.detected_at = c.detected_at.saturating_sub(off);
            c.first_window = c.first_window.saturating_sub(off);
            c.last_window = c.last_window.saturating_sub(off);
        }
        all.calls += r.calls;
        all.nodes.extend(r.nodes);
        all.chains.extend(r.chains);
        all.unexplained.extend(r.unexplained);
    }
    let rank = |s: &str| match s {
        "HIGH" => 0,
        "MEDIUM" => 1,
        _ => 2,
    };
    all.chains.sort_by(|a, b| {
        rank(&a.severity)
            .cmp(&rank(&b.severity))
            .then(a.first_window.cmp(&b.first_window))
    });
    all
}

/// One trace: each node's processes renumbered apart, every timestamp moved by its node's
/// offset onto this host's clock.
pub fn perfetto(answers: &mut [NodeAnswer<Value>]) -> Value {
    let mut events = Vec::new();
    let mut next_pid: u64 = 1;
    for a in answers.iter_mut() {
        let Ok(v) = &a.result else { continue };
        let Some(evs) = v["traceEvents"].as_array() else {
            a.result = Err("unreadable trace: no traceEvents".into());
            continue;
        };
        let shift_us = a.offset_ns() as f64 / 1000.0;
        let mut map = std::collections::BTreeMap::new();
        for e in evs {
            let mut e = e.clone();
            if let Some(p) = e["pid"].as_u64() {
                let np = *map.entry(p).or_insert_with(|| {
                    let n = next_pid;
                    next_pid += 1;
                    n
                });
                e["pid"] = json!(np);
            }
            if let Some(ts) = e["ts"].as_f64() {
                e["ts"] = json!(ts - shift_us);
            }
            if e["name"] == "process_name" {
                let label = e["args"]["name"].as_str().unwrap_or("").to_string();
                e["args"]["name"] = json!(format!("{label} @ {}", a.node));
            }
            events.push(e);
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}
