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
//! The other layers:
//! - TCP retransmits of the processes' sockets: at least 5 in the symptom windows, at least
//!   1/s there, and three times the rate of the other windows (a lossy link or a congested
//!   switch beside NCCL's socket transport);
//! - memory reclaim: the processes stalled in direct or cgroup reclaim for at least 5 % of
//!   the time in the symptom windows and twice the share of the other windows;
//! - an OOM kill (of a watched process, or caused by one) in the symptom windows or the two
//!   seconds before them;
//! - NVML, per GPU: a thermal, power or hardware-slowdown clock reason in at least half of
//!   the GPU's samples in the symptom windows and at most half that share in the others
//!   (a GPU throttled from start to end is not a change); an XID event, or a new
//!   uncorrected ECC error, in the symptom windows or the two seconds before them.
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
    #[serde(rename = "tcp_retransmits")]
    TcpRetransmits,
    #[serde(rename = "memory_reclaim")]
    MemoryReclaim,
    #[serde(rename = "oom_kill")]
    OomKill,
    #[serde(rename = "gpu_thermal_throttle")]
    GpuThermal,
    #[serde(rename = "gpu_power_throttle")]
    GpuPower,
    #[serde(rename = "gpu_hw_slowdown")]
    GpuHwSlowdown,
    #[serde(rename = "gpu_xid")]
    GpuXid,
    #[serde(rename = "gpu_ecc")]
    GpuEcc,
}

impl Cause {
    /// The short name used in chain ids.
    fn short(self) -> &'static str {
        match self {
            Cause::CpuContention => "cpu",
            Cause::BlockIo => "io",
            Cause::TcpRetransmits => "net",
            Cause::MemoryReclaim => "reclaim",
            Cause::OomKill => "oom",
            Cause::GpuThermal => "thermal",
            Cause::GpuPower => "power",
            Cause::GpuHwSlowdown => "hwslow",
            Cause::GpuXid => "xid",
            Cause::GpuEcc => "ecc",
        }
    }
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
    retransmits: i64,
    reclaim_stalls: i64,
    reclaim_ns: i64,
    reclaim_pages: i64,
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
        self.retransmits += o.retransmits;
        self.reclaim_stalls += o.reclaim_stalls;
        self.reclaim_ns += o.reclaim_ns;
        self.reclaim_pages += o.reclaim_pages;
    }
}

/// Calls of one op: (window, duration).
type Calls = Vec<(i64, i64)>;

struct NodeData {
    /// (pid or 0, source, op) -> calls
    calls: BTreeMap<(u32, i64, i64), Calls>,
    /// (pid or 0, window) -> host layers
    host: HashMap<(u32, i64), Host>,
    /// Calls counted but not stored one by one (beyond the recorder's per-second budget):
    /// (pid or 0, source, op) -> window -> calls.
    unstored: HashMap<(u32, i64, i64), BTreeMap<i64, i64>>,
    /// OOM kills on the node: (window, victim pid, victim comm, RSS bytes).
    ooms: Vec<(i64, u32, String, i64)>,
    /// (GPU, window) -> NVML samples
    gpus: BTreeMap<(i64, i64), GpuWindow>,
    /// XID events: (window, GPU, XID).
    xids: Vec<(i64, i64, i64)>,
    /// ECC counts as recorded: (timestamp, GPU, uncorrected).
    ecc: Vec<(i64, i64, i64)>,
}

/// One GPU's NVML samples in one window.
#[derive(Debug, Default, Clone, Copy)]
struct GpuWindow {
    samples: i64,
    thermal: i64,
    power: i64,
    hw_slowdown: i64,
    clock_sum: i64,
    clock_n: i64,
    temp_max: i64,
    power_mw_sum: i64,
    power_n: i64,
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
        unstored: HashMap::new(),
        ooms: Vec::new(),
        gpus: BTreeMap::new(),
        xids: Vec::new(),
        ecc: Vec::new(),
    };
    let has_comm = has_column(conn, "events", "comm")?;
    let comm_col = if has_comm { "comm" } else { "''" };
    let mut st = conn.prepare(&format!(
        "SELECT timestamp, pid, source, op, duration, arg0, gpu_id, {comm_col} FROM events
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
            source::NVML => {
                let gpu: i64 = r.get(6)?;
                let g = d.gpus.entry((gpu, w)).or_default();
                match o {
                    op::NVML_CLOCK_REASONS => {
                        use crate::signals::nvml::reasons as rs;
                        let bits = arg0 as u64;
                        g.samples += 1;
                        g.thermal += i64::from(bits & rs::THERMAL != 0);
                        g.power += i64::from(bits & rs::POWER != 0);
                        g.hw_slowdown += i64::from(bits & rs::HW_SLOWDOWN != 0);
                    }
                    op::NVML_SM_CLOCK => {
                        g.clock_sum += arg0;
                        g.clock_n += 1;
                    }
                    op::NVML_TEMPERATURE => g.temp_max = g.temp_max.max(arg0),
                    op::NVML_POWER => {
                        g.power_mw_sum += arg0;
                        g.power_n += 1;
                    }
                    op::NVML_XID => d.xids.push((w, gpu, arg0)),
                    op::NVML_ECC => d.ecc.push((ts, gpu, arg0)),
                    _ => {}
                }
            }
            source::HOST if o == op::HOST_OOM_KILL => {
                let comm: String = r.get(7)?;
                d.ooms.push((w, pid, comm, arg0));
            }
            source::TCP if o == op::TCP_RETRANSMIT => {
                d.host.entry((key_pid(pid), w)).or_default().retransmits += 1;
            }
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
         WHERE {f_agg} AND bucket >= ?2 AND bucket <= ?3 AND source IN (3, 5, 6)"
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
            (source::HOST, op::HOST_RECLAIM_STALL) => {
                h.reclaim_stalls += count;
                h.reclaim_ns += sum_dur;
                h.reclaim_pages += sum_arg0;
            }
            (source::TCP, op::TCP_RETRANSMIT) => h.retransmits += count,
            (source::IO, _) => {
                h.io_ops += count;
                h.io_lat_ns += sum_dur;
                h.io_max_ns = h.io_max_ns.max(max_dur);
                h.io_bytes += sum_arg0;
            }
            _ => {}
        }
    }
    // Timed calls beyond the per-second budget: counted in their second's aggregate only.
    let mut st = conn.prepare(&format!(
        "SELECT bucket, pid, source, op, count - stored FROM event_aggregates
         WHERE {f_agg} AND bucket >= ?2 AND bucket <= ?3 AND source IN (1, 4, 9)
           AND stored > 0 AND count > stored"
    ))?;
    let mut rows = st.query(params![node, start.saturating_sub(WINDOW_NS), end])?;
    while let Some(r) = rows.next()? {
        let (b, pid, s, o, n): (i64, u32, i64, i64, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
        *d.unstored
            .entry((key_pid(pid), s, o))
            .or_default()
            .entry(b.div_euclid(WINDOW_NS))
            .or_default() += n;
    }
    d.ecc.sort_unstable();
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

fn symptom(calls: &Calls, unstored: Option<&BTreeMap<i64, i64>>) -> Option<Symptom> {
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
    // The rate counts every call, stored or not; durations come from the stored ones.
    for (w, n) in unstored.into_iter().flatten() {
        if let Some(e) = per.get_mut(w) {
            e.0 += n;
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
            let Some(sym) = symptom(calls, d.unstored.get(&(pid, s, o))) else {
                continue;
            };
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
            other_layers(
                &d,
                pid,
                &sym,
                (&a, na),
                (&n, nn),
                &mut Found {
                    causes: &mut causes,
                    root: &mut root,
                    timeline: &mut timeline,
                    recs: &mut recs,
                    nccl: s == source::NCCL,
                },
            );
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
            let kinds: Vec<&str> = causes.iter().map(|c| c.short()).collect();
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

/// Where a layer's findings go.
struct Found<'a> {
    causes: &'a mut Vec<Cause>,
    root: &'a mut Vec<String>,
    timeline: &'a mut Vec<TimelineEntry>,
    recs: &'a mut Vec<String>,
    /// The symptom is an NCCL collective's.
    nccl: bool,
}

impl Found<'_> {
    fn add(
        &mut self,
        cause: Cause,
        root: String,
        layer: &str,
        op: &str,
        detail: String,
        recs: &[&str],
    ) {
        self.causes.push(cause);
        self.root.push(root);
        self.timeline.push(TimelineEntry {
            layer: layer.into(),
            op: op.into(),
            detail,
            dur_us: 0,
        });
        self.recs.extend(recs.iter().map(|r| r.to_string()));
    }
}

/// Whether window `w` is in the symptom or up to two windows before it (an event that
/// starts a slowdown comes before its first slow window).
fn near(sym: &Symptom, w: i64) -> bool {
    let (Some(first), Some(last)) = (sym.windows.first(), sym.windows.last()) else {
        return false;
    };
    w >= first - 2 && w <= *last
}

/// The network, memory and GPU layers (see the module's rules).
fn other_layers(
    d: &NodeData,
    pid: u32,
    sym: &Symptom,
    (a, na): (&Host, usize),
    (n, nn): (&Host, usize),
    f: &mut Found<'_>,
) {
    // TCP retransmits.
    let (ra, rn) = (per_s(a.retransmits, na), per_s(n.retransmits, nn));
    if a.retransmits >= 5 && ra >= 1.0 && ra >= 3.0 * rn {
        let detail = format!(
            "{} TCP retransmits ({ra:.1}/s, vs {rn:.1}/s otherwise)",
            a.retransmits
        );
        let mut recs = vec![
            "Check the network path: NIC error and drop counters (ethtool -S, ip -s link), switch port drops, MTU mismatches",
        ];
        if f.nccl {
            recs.push("NCCL is on its socket transport over a lossy path: use RDMA (InfiniBand/RoCE, NCCL_IB_HCA) where the fabric has it, or pin NCCL_SOCKET_IFNAME to the fast interface");
        }
        f.add(
            Cause::TcpRetransmits,
            format!("network packet loss ({detail})"),
            "NET",
            "tcp_retransmit",
            detail,
            &recs,
        );
    }
    // Memory reclaim stalls.
    let (ma, mn) = (share(a.reclaim_ns, na), share(n.reclaim_ns, nn));
    if ma >= 0.05 && ma >= 2.0 * mn {
        let detail = format!(
            "{} reclaim stalls, {:.0}% of the time (vs {:.0}% otherwise), {} pages reclaimed",
            a.reclaim_stalls,
            ma * 100.0,
            mn * 100.0,
            a.reclaim_pages
        );
        f.add(
            Cause::MemoryReclaim,
            format!("memory pressure ({detail})"),
            "HOST",
            "reclaim_stall",
            detail,
            &[
                "Give the job more memory headroom (the pod's or cgroup's memory limit, or less else on the node) so its allocations do not reclaim",
                "Cut host memory use: fewer DataLoader workers or a smaller prefetch_factor, less pinned memory, and drop page cache from checkpoint writes (O_DIRECT, or posix_fadvise DONTNEED)",
            ],
        );
    }
    // OOM kills near the symptom (node-wide: the victim may be another process of the job).
    let ooms: Vec<&(i64, u32, String, i64)> = d.ooms.iter().filter(|o| near(sym, o.0)).collect();
    if !ooms.is_empty() {
        let victims: Vec<String> = ooms
            .iter()
            .map(|(_, p, c, rss)| format!("pid {p} ({c}, {:.0} MB)", *rss as f64 / 1e6))
            .collect();
        let detail = format!("{} OOM kill(s): {}", ooms.len(), victims.join(", "));
        let _ = pid;
        f.add(
            Cause::OomKill,
            format!("out of memory ({detail})"),
            "HOST",
            "oom_kill",
            detail,
            &[
                "Raise the memory limit of the job's pod or cgroup, or lower its host memory use (DataLoader workers, pinned buffers, caches)",
                "Check the kernel log (dmesg) for the OOM report: which cgroup hit its limit and what held the memory",
            ],
        );
    }
    // NVML: per GPU, the clock reasons in the symptom windows against the others.
    let gpus: BTreeSet<i64> = d.gpus.keys().map(|(g, _)| *g).collect();
    let sum = |gpu: i64, ws: &mut dyn Iterator<Item = &i64>| {
        let mut t = GpuWindow::default();
        for w in ws {
            if let Some(g) = d.gpus.get(&(gpu, *w)) {
                t.samples += g.samples;
                t.thermal += g.thermal;
                t.power += g.power;
                t.hw_slowdown += g.hw_slowdown;
                t.clock_sum += g.clock_sum;
                t.clock_n += g.clock_n;
                t.temp_max = t.temp_max.max(g.temp_max);
                t.power_mw_sum += g.power_mw_sum;
                t.power_n += g.power_n;
            }
        }
        t
    };
    let frac = |v: i64, n: i64| if n > 0 { v as f64 / n as f64 } else { 0.0 };
    for gpu in gpus {
        let ga = sum(gpu, &mut sym.windows.iter());
        let gn = sum(gpu, &mut sym.all_windows.difference(&sym.windows));
        if ga.samples < 2 {
            continue;
        }
        let clocks = |g: &GpuWindow| {
            if g.clock_n > 0 {
                format!("{} MHz", g.clock_sum / g.clock_n)
            } else {
                "unknown".into()
            }
        };
        let context = format!(
            "SM clock {} (vs {} otherwise), up to {} C, {:.0} W",
            clocks(&ga),
            clocks(&gn),
            ga.temp_max,
            frac(ga.power_mw_sum, ga.power_n) / 1000.0
        );
        let throttled = |va: i64, vn: i64| {
            let (sa, sn) = (frac(va, ga.samples), frac(vn, gn.samples));
            (sa >= 0.5 && sn <= 0.5 * sa).then_some(sa)
        };
        // (cause, what the samples showed, title, fix) per clock reason.
        let rules = [
            (
                Cause::GpuThermal,
                throttled(ga.thermal, gn.thermal),
                "thermally throttled",
                "GPU thermal throttling",
                "Check the GPU's cooling: fan and airflow, inlet temperature, blocked or failed fans (nvidia-smi -q -d TEMPERATURE,PERFORMANCE); move the job off the node until it is fixed",
            ),
            (
                Cause::GpuPower,
                throttled(ga.power, gn.power),
                "held at its power limit",
                "GPU power capping",
                "Check the GPU's power limit against its default (nvidia-smi -q -d POWER) and the node's power supply; a lowered cap or a power brake slows one GPU and with it every rank",
            ),
            (
                Cause::GpuHwSlowdown,
                throttled(ga.hw_slowdown, gn.hw_slowdown),
                "in hardware slowdown",
                "GPU hardware slowdown",
                "Hardware slowdown comes from the board (temperature, power brake or a failing power supply): check nvidia-smi -q -d PERFORMANCE and the BMC's event log, and drain the node if it persists",
            ),
        ];
        for (cause, share, state, title, fix) in rules {
            let Some(sa) = share else { continue };
            let detail = format!(
                "GPU {gpu} {state} in {:.0}% of its samples; {context}",
                sa * 100.0
            );
            f.add(
                cause,
                format!("{title} ({detail})"),
                "GPU",
                "gpu_clock_reasons",
                detail,
                &[fix],
            );
        }
    }
    let xids: Vec<&(i64, i64, i64)> = d.xids.iter().filter(|x| near(sym, x.0)).collect();
    if !xids.is_empty() {
        let list: Vec<String> = xids
            .iter()
            .map(|(_, g, x)| format!("XID {x} on GPU {g}"))
            .collect();
        let detail = list.join(", ");
        f.add(
            Cause::GpuXid,
            format!("GPU error ({detail})"),
            "GPU",
            "gpu_xid",
            detail,
            &["Look the XID up in NVIDIA's XID catalogue and the kernel log (dmesg | grep -i xid); most need a GPU reset or a node drain"],
        );
    }
    // New uncorrected ECC errors: a count above the GPU's previous one, near the symptom.
    let mut last: HashMap<i64, i64> = HashMap::new();
    let mut new_errors: BTreeMap<i64, i64> = BTreeMap::new();
    for (ts, gpu, u) in &d.ecc {
        if let Some(prev) = last.insert(*gpu, *u)
            && *u > prev
            && near(sym, ts.div_euclid(WINDOW_NS))
        {
            *new_errors.entry(*gpu).or_default() += u - prev;
        }
    }
    if !new_errors.is_empty() {
        let list: Vec<String> = new_errors
            .iter()
            .map(|(g, k)| format!("{k} on GPU {g}"))
            .collect();
        let detail = format!("new uncorrected ECC errors: {}", list.join(", "));
        f.add(
            Cause::GpuEcc,
            format!("GPU memory errors ({detail})"),
            "GPU",
            "gpu_ecc_errors",
            detail,
            &["Uncorrected ECC errors mean a page retirement or row remap and often a GPU reset: drain the node and check nvidia-smi -q -d ECC,ROW_REMAPPER"],
        );
    }
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
            "{node}{pid}: {} {} - no cause found in the CPU, I/O, network, memory or GPU layers\n",
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
    use crate::store::{AggregateRow, EventRow};

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

    /// The contended fixture without its host evidence: a slowdown in seconds 10..19 of 20
    /// that nothing explains yet, and the start of its first second.
    fn bare_slowdown() -> (fixtures::Fixture, i64) {
        let mut evs = fixtures::contended_events(0);
        evs.aggregates.clear();
        let t0 = evs.events[0].timestamp.div_euclid(WINDOW_NS) * WINDOW_NS;
        (evs, t0)
    }

    fn explain_fixture(tag: &str, f: &fixtures::Fixture) -> Report {
        let dir = fixtures::tmp_dir(tag);
        let p = dir.join("n.db");
        fixtures::write_node_db(&p, "n5", Layout::Current, f);
        let c = crate::store::open_read_only(&p).unwrap();
        explain(&c, &opts()).unwrap()
    }

    fn agg(b: i64, src: i64, o: i64, count: i64, sum_dur: i64, arg0: i64) -> AggregateRow {
        AggregateRow {
            bucket: b,
            source: src,
            op: o,
            pid: fixtures::PID,
            count,
            sum_dur,
            max_dur: sum_dur / count.max(1),
            sum_arg0: arg0,
            stored: 0,
        }
    }

    fn nvml(ts: i64, gpu: i64, o: i64, arg0: i64, arg1: i64) -> EventRow {
        EventRow {
            timestamp: ts,
            source: source::NVML,
            op: o,
            arg0,
            arg1,
            gpu_id: gpu,
            ..Default::default()
        }
    }

    /// One NVML sample per second for GPUs 0 and 1; GPU 1 reports `reasons(s)` and
    /// `clock(s)`.
    fn gpu_samples(
        f: &mut fixtures::Fixture,
        t0: i64,
        reasons: impl Fn(i64) -> i64,
        clock: impl Fn(i64) -> i64,
    ) {
        for s in 0..20 {
            let ts = t0 + s * WINDOW_NS + 500_000_000;
            for gpu in 0..2 {
                let (r, c) = if gpu == 1 {
                    (reasons(s), clock(s))
                } else {
                    (0, 1980)
                };
                f.events.push(nvml(ts, gpu, op::NVML_CLOCK_REASONS, r, 0));
                f.events.push(nvml(ts, gpu, op::NVML_SM_CLOCK, c, 0));
                f.events.push(nvml(
                    ts,
                    gpu,
                    op::NVML_TEMPERATURE,
                    if r != 0 { 93 } else { 60 },
                    0,
                ));
                f.events.push(nvml(ts, gpu, op::NVML_POWER, 300_000, 0));
            }
        }
    }

    #[test]
    fn a_rate_drop_above_the_stored_budget_is_seen_through_the_aggregates() {
        // 20 s of 50 synchronizes stored per second, of 200 made (first 10 s) then 100 (the
        // rest): only the aggregates' counts show the halved rate. Run-queue delay rises
        // with it.
        let mut f = fixtures::clean_events(0);
        let t0 = f.events[0].timestamp.div_euclid(WINDOW_NS) * WINDOW_NS;
        f.events
            .retain(|e| (e.timestamp - t0) % WINDOW_NS < WINDOW_NS / 2);
        f.aggregates.retain(|a| a.op != op::HOST_SCHED_WAKEUP);
        for s in 0..20 {
            let b = t0 + s * WINDOW_NS;
            let made = if s < 10 { 200 } else { 100 };
            let stored = f
                .events
                .iter()
                .filter(|e| e.timestamp.div_euclid(WINDOW_NS) * WINDOW_NS == b)
                .count() as i64;
            f.aggregates.push(AggregateRow {
                stored,
                ..agg(b, source::CUDA, op::CUDA_STREAM_SYNC, made, 0, 0)
            });
            let runq = if s < 10 { 10_000_000 } else { 600_000_000 };
            f.aggregates
                .push(agg(b, source::HOST, op::HOST_SCHED_WAKEUP, made, runq, 0));
        }
        let r = explain_fixture("explain-unstored", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::CpuContention]);
        assert!(r.chains[0].rate_drop > 0.4, "{}", render(&r));
        // Without the aggregates' counts the stored rate is flat: no symptom.
        f.aggregates.retain(|a| a.source != source::CUDA);
        let r = explain_fixture("explain-unstored-flat", &f);
        assert!(
            r.chains.is_empty() && r.unexplained.is_empty(),
            "{}",
            render(&r)
        );
    }

    #[test]
    fn tcp_retransmits_beside_the_slowdown_are_named() {
        let (mut f, t0) = bare_slowdown();
        // One retransmit every few seconds throughout (a healthy link), 40/s in the slowdown.
        for s in 0..20 {
            let n = if s >= 10 { 40 } else { i64::from(s % 4 == 0) };
            if n > 0 {
                f.aggregates.push(agg(
                    t0 + s * WINDOW_NS,
                    source::TCP,
                    op::TCP_RETRANSMIT,
                    n,
                    0,
                    0,
                ));
            }
        }
        let r = explain_fixture("explain-tcp", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::TcpRetransmits]);
        assert!(
            r.chains[0].root_cause.contains("TCP retransmits"),
            "{}",
            render(&r)
        );
        assert_eq!(r.chains[0].timeline[0].layer, "NET");
        // The same retransmit rate all along is not a change.
        let (mut f, t0) = bare_slowdown();
        for s in 0..20 {
            f.aggregates.push(agg(
                t0 + s * WINDOW_NS,
                source::TCP,
                op::TCP_RETRANSMIT,
                40,
                0,
                0,
            ));
        }
        let r = explain_fixture("explain-tcp-flat", &f);
        assert!(r.chains.is_empty(), "{}", render(&r));
        assert_eq!(r.unexplained.len(), 1);
    }

    #[test]
    fn reclaim_stalls_and_an_oom_kill_are_named() {
        let (mut f, t0) = bare_slowdown();
        for s in 10..20 {
            f.aggregates.push(agg(
                t0 + s * WINDOW_NS,
                source::HOST,
                op::HOST_RECLAIM_STALL,
                120,
                300_000_000,
                5_000,
            ));
        }
        let r = explain_fixture("explain-reclaim", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::MemoryReclaim]);
        assert!(r.chains[0].root_cause.contains("memory pressure"));

        let (mut f, t0) = bare_slowdown();
        f.events.push(EventRow {
            timestamp: t0 + 9 * WINDOW_NS + 300_000_000,
            pid: 777,
            tid: 777,
            source: source::HOST,
            op: op::HOST_OOM_KILL,
            arg0: 3 << 30,
            arg1: i64::from(fixtures::PID),
            comm: "pt_data_worker".into(),
            ..Default::default()
        });
        let r = explain_fixture("explain-oom", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::OomKill]);
        assert!(
            r.chains[0].root_cause.contains("pid 777 (pt_data_worker"),
            "{}",
            render(&r)
        );

        // An OOM kill long before the slowdown is not its cause.
        let (mut f, t0) = bare_slowdown();
        f.events.push(EventRow {
            timestamp: t0 + WINDOW_NS,
            pid: 777,
            source: source::HOST,
            op: op::HOST_OOM_KILL,
            ..Default::default()
        });
        let r = explain_fixture("explain-oom-early", &f);
        assert!(r.chains.is_empty(), "{}", render(&r));
    }

    #[test]
    fn a_thermally_throttled_gpu_is_named_and_a_gpu_throttled_throughout_is_not() {
        use crate::signals::nvml::reasons;
        let (mut f, t0) = bare_slowdown();
        gpu_samples(
            &mut f,
            t0,
            |s| {
                if s >= 10 {
                    reasons::HW_THERMAL as i64
                } else {
                    0
                }
            },
            |s| if s >= 10 { 1100 } else { 1980 },
        );
        let r = explain_fixture("explain-thermal", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        let ch = &r.chains[0];
        assert_eq!(ch.causes, vec![Cause::GpuThermal]);
        assert!(
            ch.root_cause.contains("GPU 1 thermally throttled"),
            "{}",
            render(&r)
        );
        assert!(
            ch.root_cause.contains("1100 MHz (vs 1980 MHz otherwise)"),
            "{}",
            render(&r)
        );
        assert!(ch.id.contains(":thermal-"), "{}", ch.id);

        // Power capping is told apart from heat.
        let (mut f, t0) = bare_slowdown();
        gpu_samples(
            &mut f,
            t0,
            |s| {
                if s >= 10 {
                    reasons::SW_POWER_CAP as i64
                } else {
                    0
                }
            },
            |_| 1500,
        );
        let r = explain_fixture("explain-power", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::GpuPower]);

        // Throttled from start to end: not what changed.
        let (mut f, t0) = bare_slowdown();
        gpu_samples(&mut f, t0, |_| reasons::HW_THERMAL as i64, |_| 1100);
        let r = explain_fixture("explain-thermal-flat", &f);
        assert!(r.chains.is_empty(), "{}", render(&r));
        assert_eq!(r.unexplained.len(), 1);
    }

    #[test]
    fn an_xid_and_new_ecc_errors_are_named() {
        let (mut f, t0) = bare_slowdown();
        f.events
            .push(nvml(t0 + 10 * WINDOW_NS, 1, op::NVML_XID, 79, 0));
        let r = explain_fixture("explain-xid", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::GpuXid]);
        assert!(r.chains[0].root_cause.contains("XID 79 on GPU 1"));

        // ECC rows come when the counts change: the first is the baseline, the second a new
        // uncorrected error in the slowdown.
        let (mut f, t0) = bare_slowdown();
        f.events.push(nvml(t0 + WINDOW_NS, 0, op::NVML_ECC, 2, 10));
        f.events
            .push(nvml(t0 + 11 * WINDOW_NS, 0, op::NVML_ECC, 3, 10));
        let r = explain_fixture("explain-ecc", &f);
        assert_eq!(r.chains.len(), 1, "{}", render(&r));
        assert_eq!(r.chains[0].causes, vec![Cause::GpuEcc]);
        assert!(
            r.chains[0].root_cause.contains("1 on GPU 0"),
            "{}",
            render(&r)
        );

        // Only corrected errors moved: no cause.
        let (mut f, t0) = bare_slowdown();
        f.events.push(nvml(t0 + WINDOW_NS, 0, op::NVML_ECC, 2, 10));
        f.events
            .push(nvml(t0 + 11 * WINDOW_NS, 0, op::NVML_ECC, 2, 50));
        let r = explain_fixture("explain-ecc-corrected", &f);
        assert!(r.chains.is_empty(), "{}", render(&r));
        assert!(render(&r).contains("no cause found"));
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
