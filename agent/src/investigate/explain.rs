//! `ingero-agent explain`: causal chains from a store.
//!
//! The range (`--since`, back from the newest record of each node) is cut into one-second
//! windows. A GPU-side symptom is a timed CUDA, driver or NCCL op whose call rate in a
//! window fell below 70 % of its usual rate (the 90th percentile of its windows), or whose
//! window held calls slower than three times its median while its p99 is at least three
//! times its p50. It is worth explaining when the rate in those windows is at least 15 %
//! lower than usual or the p99 at least five times the p50.
//!
//! A host layer is a cause when, in the symptom windows, it took at least 10 % of the time
//! and a quarter more of it than in the other windows, and its extra time (over what the
//! other windows spent per call) accounts for at least half of the time the op lost (its
//! rate drop) and at least 5 % of the time:
//! - CPU contention: the watched processes waiting runnable (run-queue delay); involuntary
//!   switches and off-CPU time are reported with it. For databases with individual
//!   `sched_switch` rows and no run-queue data: at least 50 switches/s and twice the rate
//!   of the other windows;
//! - block I/O: the processes' block requests in flight (summed latency); or, since a
//!   synchronous write also costs the wake-up after it, their I/O moving at least 1 MiB/s
//!   in the symptom windows and twice as much as in the others.
//!
//! A symptom lasts at least three windows, and needs a baseline: at least three windows
//! outside it, and at most two thirds of
//! the windows in it. A condition present through the whole range (a node contended from
//! start to end) is therefore not a change, and not reported.
//!
//! A symptom with no such layer is reported as "no cause found"; nothing is invented.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::InvestigateError;
use crate::store::schema::{self, has_column, op, source};

const WINDOW_NS: i64 = 1_000_000_000;
const MIN_CALLS: usize = 20;
/// Symptom windows needed: a slowdown of at least three seconds.
const MIN_WINDOWS: usize = 3;

#[derive(Debug, Clone)]
pub struct ExplainOptions {
    pub since: Duration,
    pub per_process: bool,
}

/// One entry of a chain's timeline (the Go agent's `timeline` JSON shape).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimelineEntry {
    pub layer: String,
    pub op: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dur_us: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    #[serde(rename = "cpu_contention")]
    CpuContention,
    #[serde(rename = "block_io")]
    BlockIo,
}

/// A causal chain as `explain` prints it and writes it to `causal_chains`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chain {
    pub id: String,
    pub node: String,
    pub pid: Option<u32>,
    pub detected_at: i64,
    pub severity: String,
    pub causes: Vec<Cause>,
    pub summary: String,
    pub root_cause: String,
    pub explanation: String,
    pub recommendations: Vec<String>,
    pub cuda_op: String,
    pub cuda_p50_us: i64,
    pub cuda_p99_us: i64,
    pub tail_ratio: f64,
    pub rate_drop: f64,
    pub first_window: i64,
    pub last_window: i64,
    pub timeline: Vec<TimelineEntry>,
}

/// A symptom without a cause, reported as such.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unexplained {
    pub node: String,
    pub pid: Option<u32>,
    pub cuda_op: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Report {
    pub nodes: Vec<String>,
    pub chains: Vec<Chain>,
    pub unexplained: Vec<Unexplained>,
    /// Timed GPU-side calls looked at.
    pub calls: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Host {
    runq_ns: i64,
    wakeups: i64,
    switches: i64,
    involuntary: i64,
    offcpu_ns: i64,
    io_ops: i64,
    io_bytes: i64,
    io_lat_ns: i64,
    io_max_ns: i64,
    has_runq: bool,
}

impl Host {
    fn add(&mut self, o: &Host) {
        self.runq_ns += o.runq_ns;
        self.wakeups += o.wakeups;
        self.switches += o.switches;
        self.involuntary += o.involuntary;
        self.offcpu_ns += o.offcpu_ns;
        self.io_ops += o.io_ops;
        self.io_bytes += o.io_bytes;
        self.io_lat_ns += o.io_lat_ns;
        self.io_max_ns = self.io_max_ns.max(o.io_max_ns);
        self.has_runq |= o.has_runq;
    }
}

/// Calls of one op: (window, duration).
type Calls = Vec<(i64, i64)>;

struct NodeData {
    /// (pid or 0, source, op) -> calls
    calls: BTreeMap<(u32, i64, i64), Calls>,
    /// (pid or 0, window) -> host layers
    host: HashMap<(u32, i64), Host>,
}

fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn op_label(conn: &Connection, s: i64, o: i64) -> String {
    conn.query_row(
        "SELECT name FROM ops WHERE source_id = ?1 AND op_id = ?2",
        params![s, o],
        |r| r.get::<_, String>(0),
    )
    .ok()
    .or_else(|| schema::op_name(s, o).map(str::to_string))
    .unwrap_or_else(|| format!("op{s}.{o}"))
}

/// The nodes in a database ("" for a database written before node identity).
pub fn nodes(conn: &Connection) -> Result<Vec<String>, InvestigateError> {
    if !has_column(conn, "events", "node")? {
        return Ok(vec![String::new()]);
    }
    let mut set = BTreeSet::new();
    let mut st = conn.prepare("SELECT DISTINCT node FROM events")?;
    for n in st.query_map([], |r| r.get::<_, String>(0))? {
        set.insert(n?);
    }
    if has_column(conn, "event_aggregates", "node")? {
        let mut st = conn.prepare("SELECT DISTINCT node FROM event_aggregates")?;
        for n in st.query_map([], |r| r.get::<_, String>(0))? {
            set.insert(n?);
        }
    }
    if set.is_empty() {
        set.insert(String::new());
    }
    Ok(set.into_iter().collect())
}

fn node_filter(has_node: bool) -> &'static str {
    if has_node { "node = ?1" } else { "?1 = ?1" }
}

fn load(
    conn: &Connection,
    node: &str,
    since: Duration,
    per_process: bool,
) -> Result<Option<NodeData>, InvestigateError> {
    let ev_node = has_column(conn, "events", "node")?;
    let agg_node = has_column(conn, "event_aggregates", "node")?;
    let f_ev = node_filter(ev_node);
    let f_agg = node_filter(agg_node);
    let newest_ev: Option<i64> = conn.query_row(
        &format!("SELECT MAX(timestamp) FROM events WHERE {f_ev}"),
        [node],
        |r| r.get(0),
    )?;
    let newest_agg: Option<i64> = conn.query_row(
        &format!("SELECT MAX(bucket) FROM event_aggregates WHERE {f_agg}"),
        [node],
        |r| r.get(0),
    )?;
    let Some(end) = newest_ev.max(newest_agg.map(|b| b + WINDOW_NS)) else {
        return Ok(None);
    };
    let start = end.saturating_sub(i64::try_from(since.as_nanos()).unwrap_or(i64::MAX));
    let key_pid = |pid: u32| if per_process { pid } else { 0 };
    let mut d = NodeData {
        calls: BTreeMap::new(),
        host: HashMap::new(),
    };
    let mut st = conn.prepare(&format!(
        "SELECT timestamp, pid, source, op, duration, arg0 FROM events
         WHERE {f_ev} AND timestamp >= ?2 AND timestamp <= ?3"
    ))?;
    let mut rows = st.query(params![node, start, end])?;
    while let Some(r) = rows.next()? {
        let (ts, pid, s, o, dur, arg0): (i64, u32, i64, i64, i64, i64) = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        );
        let w = ts.div_euclid(WINDOW_NS);
        match s {
            source::CUDA | source::DRIVER | source::NCCL => {
                let launch = (s == source::CUDA && o == op::CUDA_LAUNCH_KERNEL)
                    || (s == source::DRIVER && o == op::DRIVER_LAUNCH_KERNEL);
                if !launch {
                    d.calls
                        .entry((key_pid(pid), s, o))
                        .or_default()
                        .push((w, dur));
                }
            }
            // Individual host rows, as the Go agent stores them.
            source::HOST if o == op::HOST_SCHED_SWITCH => {
                let h = d.host.entry((key_pid(pid), w)).or_default();
                h.switches += 1;
                h.offcpu_ns += dur;
            }
            source::IO => {
                let h = d.host.entry((key_pid(pid), w)).or_default();
                h.io_ops += 1;
                h.io_lat_ns += dur;
                h.io_max_ns = h.io_max_ns.max(dur);
                h.io_bytes += arg0;
            }
            _ => {}
        }
    }
    let mut st = conn.prepare(&format!(
        "SELECT bucket, pid, source, op, count, sum_dur, max_dur, sum_arg0 FROM event_aggregates
         WHERE {f_agg} AND bucket >= ?2 AND bucket <= ?3 AND source IN (3, 5)"
    ))?;
    let mut rows = st.query(params![node, start.saturating_sub(WINDOW_NS), end])?;
    while let Some(r) = rows.next()? {
        let (b, pid, s, o, count, sum_dur, max_dur, sum_arg0): (
            i64,
            u32,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        );
        let h = d
            .host
            .entry((key_pid(pid), b.div_euclid(WINDOW_NS)))
            .or_default();
        match (s, o) {
            (source::HOST, op::HOST_SCHED_SWITCH) => {
                h.switches += count;
                h.offcpu_ns += sum_dur;
                h.involuntary += sum_arg0;
            }
            (source::HOST, op::HOST_SCHED_WAKEUP) => {
                h.wakeups += count;
                h.runq_ns += sum_dur;
                h.has_runq = true;
            }
            (source::IO, _) => {
                h.io_ops += count;
                h.io_lat_ns += sum_dur;
                h.io_max_ns = h.io_max_ns.max(max_dur);
                h.io_bytes += sum_arg0;
            }
            _ => {}
        }
    }
    Ok(Some(d))
}

struct Symptom {
    windows: BTreeSet<i64>,
    all_windows: BTreeSet<i64>,
    p50: i64,
    p99: i64,
    tail: f64,
    usual_rate: f64,
    symptom_rate: f64,
}

fn symptom(calls: &Calls) -> Option<Symptom> {
    if calls.len() < MIN_CALLS {
        return None;
    }
    let mut durs: Vec<i64> = calls.iter().map(|c| c.1).collect();
    durs.sort_unstable();
    let p50 = percentile(&durs, 0.5);
    let p99 = percentile(&durs, 0.99);
    let tail = if p50 > 0 {
        p99 as f64 / p50 as f64
    } else {
        0.0
    };
    let first = calls.iter().map(|c| c.0).min()?;
    let last = calls.iter().map(|c| c.0).max()?;
    // Whole windows only: the first and last are partial.
    let mut per: BTreeMap<i64, (i64, i64)> = (first + 1..last).map(|w| (w, (0, 0))).collect();
    for (w, dur) in calls {
        if let Some(e) = per.get_mut(w) {
            e.0 += 1;
            e.1 = e.1.max(*dur);
        }
    }
    if per.len() < 3 {
        return None;
    }
    let mut counts: Vec<i64> = per.values().map(|v| v.0).collect();
    counts.sort_unstable();
    let usual = percentile(&counts, 0.9) as f64;
    let slow_call = (3 * p50).max(p50 + 1_000_000);
    let mut slow: BTreeMap<i64, i64> = BTreeMap::new();
    for (w, dur) in calls {
        if *dur >= slow_call {
            *slow.entry(*w).or_default() += 1;
        }
    }
    // The symptom windows: those whose rate fell below 70 % of usual (the throughput moved);
    // without any, and with a tail (p99 >= 3x p50), those where at least 5 % of the calls
    // (and two) took three times the median.
    let by_rate: BTreeSet<i64> = per
        .iter()
        .filter(|(_, (n, _))| (*n as f64) < 0.7 * usual)
        .map(|(w, _)| *w)
        .collect();
    let rate_of = |ws: &BTreeSet<i64>| {
        ws.iter().map(|w| per[w].0).sum::<i64>() as f64 / ws.len().max(1) as f64
    };
    let windows = if !by_rate.is_empty() {
        by_rate
    } else if tail >= 3.0 {
        per.iter()
            .filter(|(w, (n, _))| {
                let s = slow.get(w).copied().unwrap_or(0);
                s >= 2 && s as f64 >= 0.05 * *n as f64
            })
            .map(|(w, _)| *w)
            .collect()
    } else {
        BTreeSet::new()
    };
    // A slowdown lasts: at least three windows (a one-second blip is not explained). A change
    // needs something to change from: at least three windows outside the symptom and no
    // more than two thirds of them in it.
    let others = per.len() - windows.len();
    if windows.len() < MIN_WINDOWS || others < 3 || windows.len() * 3 > per.len() * 2 {
        return None;
    }
    let symptom_rate = rate_of(&windows);
    Some(Symptom {
        all_windows: per.keys().copied().collect(),
        windows,
        p50,
        p99,
        tail,
        usual_rate: usual,
        symptom_rate,
    })
}

fn host_over(d: &NodeData, pid: u32, windows: impl Iterator<Item = i64>) -> (Host, usize) {
    let mut h = Host::default();
    let mut n = 0;
    for w in windows {
        n += 1;
        if pid == 0 {
            for ((_, hw), v) in d.host.iter().filter(|((_, hw), _)| *hw == w) {
                let _ = hw;
                h.add(v);
            }
        } else if let Some(v) = d.host.get(&(pid, w)) {
            h.add(v);
        }
    }
    (h, n)
}

fn share(ns: i64, windows: usize) -> f64 {
    if windows == 0 {
        0.0
    } else {
        ns as f64 / (windows as f64 * WINDOW_NS as f64)
    }
}

fn per_s(v: i64, windows: usize) -> f64 {
    if windows == 0 {
        0.0
    } else {
        v as f64 / windows as f64
    }
}

fn fmt_us(ns: i64) -> String {
    if ns >= 10_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{}us", ns / 1000)
    }
}

/// Analyse every node of the database (or of the range) and return the chains.
pub fn explain(conn: &Connection, opts: &ExplainOptions) -> Result<Report, InvestigateError> {
    let mut report = Report::default();
    let detected_at = i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(0);
    for node in nodes(conn)? {
        report.nodes.push(node.clone());
        let Some(d) = load(conn, &node, opts.since, opts.per_process)? else {
            continue;
        };
        report.calls += d.calls.values().map(|c| c.len() as u64).sum::<u64>();
        // The strongest symptom per process (or per node): the largest rate drop, then tail.
        let mut best: BTreeMap<u32, ((i64, i64), Symptom)> = BTreeMap::new();
        for (&(pid, s, o), calls) in &d.calls {
            let Some(sym) = symptom(calls) else { continue };
            let score = |x: &Symptom| {
                (1.0 - x.symptom_rate / x.usual_rate.max(1.0)).max(0.0) + x.tail / 100.0
            };
            if best.get(&pid).is_none_or(|(_, b)| score(&sym) > score(b)) {
                best.insert(pid, ((s, o), sym));
            }
        }
        for (pid, ((s, o), sym)) in best {
            let name = op_label(conn, s, o);
            let (a, na) = host_over(&d, pid, sym.windows.iter().copied());
            let (n, nn) = host_over(&d, pid, sym.all_windows.difference(&sym.windows).copied());
            let mut causes = Vec::new();
            let mut timeline = Vec::new();
            let mut recs: Vec<String> = Vec::new();
            let mut root = Vec::new();
            let rate_drop = (1.0 - sym.symptom_rate / sym.usual_rate.max(1.0)).max(0.0);
            if rate_drop < 0.15 && sym.tail < 5.0 {
                continue;
            }
            // A layer explains the symptom when its extra share of the time covers at least
            // half of the time the op lost. "Extra" is over what the other windows spent per
            // call, at the symptom windows' call rate (fewer calls, less of the usual wait).
            let scale = (sym.symptom_rate / sym.usual_rate.max(1.0)).min(1.0);
            let explains = |in_a: f64, elsewhere: f64| {
                in_a >= 0.10
                    && in_a >= 1.25 * elsewhere
                    && in_a - elsewhere * scale >= 0.05_f64.max(0.5 * rate_drop)
            };
            let runq_a = share(a.runq_ns, na);
            let runq_n = share(n.runq_ns, nn);
            let cpu = if a.has_runq {
                explains(runq_a, runq_n)
            } else {
                let (sa, sn) = (per_s(a.switches, na), per_s(n.switches, nn));
                sa >= 50.0 && sa >= 2.0 * sn
            };
            if cpu {
                causes.push(Cause::CpuContention);
                let detail = if a.has_runq {
                    format!(
                        "run-queue delay {:.0}% of the time (vs {:.0}% otherwise), {} involuntary switches, {} off-CPU",
                        runq_a * 100.0,
                        runq_n * 100.0,
                        a.involuntary,
                        fmt_us(a.offcpu_ns)
                    )
                } else {
                    format!(
                        "{} sched_switch events, {} off-CPU",
                        a.switches,
                        fmt_us(a.offcpu_ns)
                    )
                };
                root.push(format!("CPU contention ({detail})"));
                timeline.push(TimelineEntry {
                    layer: "HOST".into(),
                    op: "sched_switch".into(),
                    detail,
                    dur_us: a.runq_ns / 1000,
                });
                recs.push("Pin the training process to dedicated cores (taskset -c, or a Kubernetes static CPU policy) and move other work off them".into());
                recs.push("Run background jobs at low priority (nice -n 19) or in a cgroup with a small cpu.weight".into());
            }
            let io_a = share(a.io_lat_ns, na);
            let io_n = share(n.io_lat_ns, nn);
            let bw_a = per_s(a.io_bytes, na);
            let bw_n = per_s(n.io_bytes, nn);
            let io = a.io_ops > 0
                && ((io_a >= 0.05 && io_a >= 2.0 * io_n)
                    || (bw_a >= 1_048_576.0 && bw_a >= 2.0 * bw_n));
            if io {
                causes.push(Cause::BlockIo);
                let detail = format!(
                    "{} block requests, {:.1} MB, latency {:.0}% of the time (vs {:.0}% otherwise), peak {}",
                    a.io_ops,
                    a.io_bytes as f64 / 1e6,
                    io_a * 100.0,
                    io_n * 100.0,
                    fmt_us(a.io_max_ns)
                );
                root.push(format!("block I/O ({detail})"));
                timeline.push(TimelineEntry {
                    layer: "IO".into(),
                    op: "block_rq".into(),
                    detail,
                    dur_us: a.io_lat_ns / 1000,
                });
                recs.push("Move synchronous writes (checkpoints, logs) off the training loop: write asynchronously or from another thread, to local NVMe".into());
                recs.push("Prefetch input data (DataLoader num_workers, pin_memory) so the step never waits on the disk".into());
            }
            let symptom_detail = format!(
                "{:.0} calls/s in {} window(s) against {:.0}/s usually ({:.0}% lower); p99={} ({:.1}x p50={})",
                sym.symptom_rate,
                sym.windows.len(),
                sym.usual_rate,
                rate_drop * 100.0,
                fmt_us(sym.p99),
                sym.tail,
                fmt_us(sym.p50)
            );
            if causes.is_empty() {
                report.unexplained.push(Unexplained {
                    node: node.clone(),
                    pid: (pid != 0).then_some(pid),
                    cuda_op: name,
                    detail: symptom_detail,
                });
                continue;
            }
            timeline.push(TimelineEntry {
                layer: if s == source::DRIVER {
                    "DRIVER"
                } else if s == source::NCCL {
                    "NCCL"
                } else {
                    "CUDA"
                }
                .into(),
                op: name.clone(),
                detail: symptom_detail.clone(),
                dur_us: sym.p99 / 1000,
            });
            let severity = if rate_drop >= 0.3 || sym.tail >= 10.0 {
                "HIGH"
            } else if rate_drop >= 0.15 || sym.tail >= 3.0 {
                "MEDIUM"
            } else {
                "LOW"
            };
            let root_cause = root.join(" + ");
            let kinds: Vec<&str> = causes
                .iter()
                .map(|c| match c {
                    Cause::CpuContention => "cpu",
                    Cause::BlockIo => "io",
                })
                .collect();
            let pid_part = if pid != 0 {
                format!("-pid{pid}")
            } else {
                String::new()
            };
            let first_window = sym.windows.first().copied().unwrap_or(0) * WINDOW_NS;
            let last_window = sym.windows.last().copied().unwrap_or(0) * WINDOW_NS;
            report.chains.push(Chain {
                id: format!("{node}:{}-{name}{pid_part}", kinds.join("+")),
                node: node.clone(),
                pid: (pid != 0).then_some(pid),
                detected_at,
                severity: severity.into(),
                causes,
                summary: format!("{name} {symptom_detail} - {root_cause}"),
                explanation: format!(
                    "In {} of {} one-second windows {name} ran slower or less often than usual; in those windows {}. The other windows do not show it to the same degree.",
                    sym.windows.len(),
                    sym.all_windows.len(),
                    root.join(" and ")
                ),
                root_cause,
                recommendations: recs,
                cuda_op: name,
                cuda_p50_us: sym.p50 / 1000,
                cuda_p99_us: sym.p99 / 1000,
                tail_ratio: sym.tail,
                rate_drop,
                first_window,
                last_window,
                timeline,
            });
        }
    }
    Ok(report)
}

/// Write the chains to `causal_chains` (replacing chains with the same id).
pub fn store_chains(conn: &Connection, chains: &[Chain]) -> Result<(), InvestigateError> {
    let has_node = has_column(conn, "causal_chains", "node")?;
    let tx = conn.unchecked_transaction()?;
    for c in chains {
        let recs = serde_json::to_string(&c.recommendations).unwrap_or_else(|_| "[]".into());
        let tl = serde_json::to_string(&c.timeline).unwrap_or_else(|_| "[]".into());
        let base = params![
            c.id,
            c.detected_at,
            c.severity,
            c.summary,
            c.root_cause,
            c.explanation,
            recs,
            c.cuda_op,
            c.cuda_p99_us,
            c.cuda_p50_us,
            c.tail_ratio,
            tl,
            c.node
        ];
        if has_node {
            tx.execute(
                "INSERT OR REPLACE INTO causal_chains (id, detected_at, severity, summary, root_cause, explanation, recommendations, cuda_op, cuda_p99_us, cuda_p50_us, tail_ratio, timeline, node)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                base,
            )?;
        } else {
            tx.execute(
                "INSERT OR REPLACE INTO causal_chains (id, detected_at, severity, summary, root_cause, explanation, recommendations, cuda_op, cuda_p99_us, cuda_p50_us, tail_ratio, timeline)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                &base[..12],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The text report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    for c in &r.chains {
        let node = if c.node.is_empty() {
            "(no node)"
        } else {
            &c.node
        };
        let pid = c.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
        s.push_str(&format!("[{}] {node}{pid}: {}\n", c.severity, c.summary));
        s.push_str(&format!("  Root cause: {}\n", c.root_cause));
        for f in &c.recommendations {
            s.push_str(&format!("  Fix: {f}\n"));
        }
        for t in &c.timeline {
            s.push_str(&format!("  {:<7}{:<16} {}\n", t.layer, t.op, t.detail));
        }
        s.push('\n');
    }
    for u in &r.unexplained {
        let node = if u.node.is_empty() {
            "(no node)"
        } else {
            &u.node
        };
        let pid = u.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
        s.push_str(&format!(
            "{node}{pid}: {} {} - no cause found in the host, CPU or I/O layers\n",
            u.cuda_op, u.detail
        ));
    }
    if r.chains.is_empty() && r.unexplained.is_empty() {
        s.push_str(&format!(
            "no cause found: no slowdown in {} GPU-side calls on {} node(s)\n",
            r.calls,
            r.nodes.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::investigate::fixtures::{self, Layout};

    fn opts() -> ExplainOptions {
        ExplainOptions {
            since: Duration::from_secs(3600),
            per_process: false,
        }
    }

    #[test]
    fn cpu_contention_is_named_and_a_clean_node_has_no_cause() {
        let dir = fixtures::tmp_dir("explain-cpu");
        let hot = dir.join("hot.db");
        let clean = dir.join("clean.db");
        fixtures::write_node_db(
            &hot,
            "gpu-node-07",
            Layout::Current,
            &fixtures::contended_events(0),
        );
        fixtures::write_node_db(
            &clean,
            "gpu-node-01",
            Layout::Current,
            &fixtures::clean_events(0),
        );
        let c = crate::store::open_for_writing(&hot).unwrap();
        let r = explain(&c, &opts()).unwrap();
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        let ch = &r.chains[0];
        assert_eq!(ch.causes, vec![Cause::CpuContention]);
        assert_eq!(ch.node, "gpu-node-07");
        assert_eq!(ch.severity, "HIGH");
        assert_eq!(ch.cuda_op, "cudaStreamSync");
        assert!(ch.root_cause.contains("run-queue delay"));
        assert!(render(&r).contains("Fix: Pin the training process"));
        store_chains(&c, &r.chains).unwrap();
        let (id, node, tl): (String, String, String) = c
            .query_row("SELECT id, node, timeline FROM causal_chains", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert!(id.starts_with("gpu-node-07:cpu-"));
        assert_eq!(node, "gpu-node-07");
        let tl: serde_json::Value = serde_json::from_str(&tl).unwrap();
        assert_eq!(tl[0]["layer"], "HOST");

        let c = crate::store::open_read_only(&clean).unwrap();
        let r = explain(&c, &opts()).unwrap();
        assert!(
            r.chains.is_empty() && r.unexplained.is_empty(),
            "{}",
            render(&r)
        );
        assert!(render(&r).starts_with("no cause found"));
    }

    #[test]
    fn block_io_is_named() {
        let dir = fixtures::tmp_dir("explain-io");
        let p = dir.join("io.db");
        fixtures::write_node_db(&p, "n2", Layout::Current, &fixtures::io_events(0));
        let c = crate::store::open_read_only(&p).unwrap();
        let r = explain(&c, &opts()).unwrap();
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::BlockIo]);
    }

    #[test]
    fn a_slowdown_without_host_evidence_is_no_cause_found() {
        let dir = fixtures::tmp_dir("explain-none");
        let p = dir.join("n.db");
        let mut evs = fixtures::contended_events(0);
        evs.aggregates.clear();
        fixtures::write_node_db(&p, "n3", Layout::Current, &evs);
        let c = crate::store::open_read_only(&p).unwrap();
        let r = explain(&c, &opts()).unwrap();
        assert!(r.chains.is_empty());
        assert_eq!(r.unexplained.len(), 1);
        assert!(render(&r).contains("no cause found"));
    }

    #[test]
    fn an_old_go_database_without_node_columns_is_explained() {
        let dir = fixtures::tmp_dir("explain-old");
        let p = dir.join("old.db");
        fixtures::write_node_db(
            &p,
            "ignored",
            Layout::GoBeforeNode,
            &fixtures::contended_events(0),
        );
        let c = crate::store::open_read_only(&p).unwrap();
        let r = explain(&c, &opts()).unwrap();
        assert_eq!(r.nodes, vec![String::new()]);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::CpuContention]);
    }

    #[test]
    fn per_process_names_the_contended_process_only() {
        let dir = fixtures::tmp_dir("explain-pp");
        let p = dir.join("pp.db");
        let mut evs = fixtures::contended_events(0);
        let other = fixtures::clean_events(0);
        for mut e in other.events {
            e.pid = 999;
            e.tid = 999;
            evs.events.push(e);
        }
        fixtures::write_node_db(&p, "n4", Layout::Current, &evs);
        let c = crate::store::open_read_only(&p).unwrap();
        let r = explain(
            &c,
            &ExplainOptions {
                per_process: true,
                ..opts()
            },
        )
        .unwrap();
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].pid, Some(fixtures::PID));
    }
}
