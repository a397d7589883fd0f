//! `fleet-loadgen`: simulates Ingero agents pushing to a Fleet over OTLP/HTTP and reports
//! throughput, latency percentiles and the server's CPU per push.
//!
//! Two modes:
//! - closed loop (default): `--connections C` keep-alive connections push back to back for
//!   `--duration`, cycling through `--agents N` node identities (raw throughput). Each
//!   connection is its own task with its own HTTP/1.1 connection and its own tallies, so
//!   the generator shares no lock or counter between requests (a pooled client's pool lock
//!   and a shared latency vector made the generator's own waits part of the latencies it
//!   reported);
//! - paced (`--interval 10s`): every agent pushes once per interval with ±10 % jitter,
//!   like the real agent (fleet-scale simulation), over the same fixed set of connections;
//!   the report adds how late pushes left against their schedule (`schedule_lag_ms`).
//!
//! With `--server-pid`, the server's CPU time (utime+stime from /proc) is sampled before and
//! after, giving CPU microseconds per push.

// A command-line tool: its report goes to stdout.
#![allow(clippy::print_stdout)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use parking_lot::Mutex;
use testkit::push::{Encoding, PushError, Sender, Target, connect};

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Enc {
    Json,
    Protobuf,
}

#[derive(Debug, Parser)]
#[command(
    name = "fleet-loadgen",
    about = "Simulated Ingero agents pushing to a Fleet"
)]
struct Args {
    /// OTLP/HTTP base URL of the Fleet.
    #[arg(long, default_value = "http://127.0.0.1:4318")]
    endpoint: String,
    /// Distinct node identities.
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// Clusters the agents are spread over.
    #[arg(long, default_value_t = 4)]
    clusters: usize,
    /// Connections (both modes; in paced mode the agents share them).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Test length.
    #[arg(long, default_value = "10s", value_parser = component::config::parse_duration)]
    duration: Duration,
    /// Paced mode: each agent pushes once per interval (jittered ±10 %).
    #[arg(long, value_parser = component::config::parse_duration)]
    interval: Option<Duration>,
    #[arg(long, value_enum, default_value_t = Enc::Json)]
    encoding: Enc,
    /// PID of the server, to report its CPU per push.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// utime+stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

struct Payloads {
    bodies: Vec<(String, Bytes)>,
}

fn build_payloads(args: &Args) -> Payloads {
    let bodies = (0..args.agents)
        .map(|i| {
            let cluster = format!("cluster-{}", i % args.clusters.max(1));
            let score = 0.9 + (i % 7) as f64 * 0.01;
            let push = testkit::AgentPush::new(&cluster, &format!("node-{i:06}"), score)
                .gpu("NVIDIA H100 80GB HBM3", 8);
            let body = match args.encoding {
                Enc::Json => Bytes::from(push.to_json()),
                Enc::Protobuf => Bytes::from(push.to_proto_bytes()),
            };
            (cluster, body)
        })
        .collect();
    Payloads { bodies }
}

#[derive(Default)]
struct Stats {
    ok: AtomicU64,
    errors: AtomicU64,
    with_headers: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
    lags_us: Mutex<Vec<u32>>,
}

impl Stats {
    fn merge(&self, t: Tally) {
        self.ok.fetch_add(t.ok, Relaxed);
        self.errors.fetch_add(t.errors, Relaxed);
        self.with_headers.fetch_add(t.with_headers, Relaxed);
        self.latencies_us.lock().extend_from_slice(&t.latencies_us);
        self.lags_us.lock().extend_from_slice(&t.lags_us);
    }
}

/// One connection's counts, merged into [`Stats`] when it stops.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    with_headers: u64,
    latencies_us: Vec<u32>,
    /// Paced mode: how late each push went out against its agent's schedule.
    lags_us: Vec<u32>,
}

impl Tally {
    fn answered(&mut self, (ok, headers): (bool, bool), started: Instant) {
        self.latencies_us.push(micros(started.elapsed()));
        self.with_headers += u64::from(headers);
        if ok {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let payloads = Arc::new(build_payloads(&args));
    let avg_body =
        payloads.bodies.iter().map(|(_, b)| b.len()).sum::<usize>() / payloads.bodies.len().max(1);
    let ct = match args.encoding {
        Enc::Json => Encoding::Json,
        Enc::Protobuf => Encoding::Protobuf,
    };
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = args.server_pid.and_then(cpu_seconds);
    let t0 = Instant::now();
    let base = args.endpoint.trim_end_matches('/').to_string();

    // One task per connection, each with its own HTTP/1.1 connection and tallies. Closed
    // loop: back to back over the agents `w, w + conns, ...`. Paced: the same agents, each
    // on its schedule (like a front-end's upstream pool: agents far outnumber connections,
    // the connection count stays fixed however slow the server gets, and lateness shows
    // in the schedule lag instead).
    let target = Target::parse(&base)?;
    let conns = args.connections.max(1);
    let mut loops = Vec::with_capacity(conns);
    for w in 0..conns {
        let (payloads, stop, target) = (payloads.clone(), stop.clone(), target.clone());
        loops.push(match args.interval {
            None => tokio::spawn(closed_loop(w, conns, target, payloads, ct, stop)),
            Some(iv) => tokio::spawn(paced_loop(
                (w, conns),
                target,
                payloads,
                ct,
                (t0, iv, t0 + args.duration),
                stop,
            )),
        });
    }
    tokio::time::sleep(args.duration).await;
    stop.store(true, Relaxed);
    let elapsed = t0.elapsed();
    let cpu1 = args.server_pid.and_then(cpu_seconds);
    // Each loop finishes the request it has in flight; one that hangs is cut off (and its
    // connection's counts are lost, which the report's totals then show).
    for h in loops {
        if let Ok(Ok(t)) = tokio::time::timeout(Duration::from_secs(5), h).await {
            stats.merge(t);
        }
    }
    report(&args, avg_body, &stats, elapsed, cpu0, cpu1)
}

/// The report: throughput, latency percentiles and the server's CPU per push.
fn report(
    args: &Args,
    avg_body: usize,
    stats: &Stats,
    elapsed: Duration,
    cpu0: Option<f64>,
    cpu1: Option<f64>,
) -> anyhow::Result<()> {
    let ok = stats.ok.load(Relaxed);
    let errors = stats.errors.load(Relaxed);
    let lat = sorted(std::mem::take(&mut *stats.latencies_us.lock()));
    let lags = sorted(std::mem::take(&mut *stats.lags_us.lock()));
    let total = ok + errors;
    let cpu_us = match (cpu0, cpu1) {
        (Some(a), Some(b)) if total > 0 => Some((b - a) * 1e6 / total as f64),
        _ => None,
    };
    let rss = args.server_pid.and_then(rss_bytes);
    let mut report = serde_json::json!({
        "mode": if args.interval.is_some() { "paced" } else { "closed-loop" },
        "encoding": format!("{:?}", args.encoding).to_lowercase(),
        "agents": args.agents,
        "connections": args.connections,
        "body_bytes": avg_body,
        "seconds": elapsed.as_secs_f64(),
        "pushes_ok": ok,
        "errors": errors,
        "responses_with_threshold": stats.with_headers.load(Relaxed),
        "pushes_per_second": ok as f64 / elapsed.as_secs_f64(),
        "latency_ms": percentiles(&lat),
        "server_cpu_us_per_push": cpu_us,
        "server_rss_bytes": rss,
    });
    if args.interval.is_some() {
        // How late pushes left against their agents' schedules: near zero while the
        // connections keep up, growing when the server (or the box) falls behind.
        report["schedule_lag_ms"] = percentiles(&lags);
    }
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// p50/p90/p99/p99.9/max of sorted microseconds, in milliseconds (zeros when empty).
fn percentiles(us: &[u32]) -> serde_json::Value {
    let pct = |p: f64| -> f64 {
        if us.is_empty() {
            return 0.0;
        }
        let idx = ((us.len() as f64 - 1.0) * p).round() as usize;
        us[idx.min(us.len() - 1)] as f64 / 1000.0
    };
    serde_json::json!({"p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "p999": pct(0.999), "max": pct(1.0)})
}

/// The request target and body of each payload in `agents`.
fn requests(target: &Target, payloads: &Payloads, agents: &[usize]) -> Vec<(http::Uri, Bytes)> {
    agents
        .iter()
        .filter_map(|&a| {
            let (cluster, body) = payloads.bodies.get(a)?;
            Some((target.uri_for(cluster)?, body.clone()))
        })
        .collect()
}

/// One push: `Ok((2xx, threshold headers present))`, or the error that ended the
/// connection.
async fn push(
    sender: &mut Sender,
    target: &Target,
    (uri, body): &(http::Uri, Bytes),
    enc: Encoding,
) -> Result<(bool, bool), PushError> {
    let a = testkit::push::push(sender, target, uri, body.clone(), enc).await?;
    Ok((a.ok(), a.threshold.is_some()))
}

/// One connection pushing back to back until `stop`, cycling through the payloads
/// `w, w + conns, w + 2 * conns, ...`. A failed connection counts one error and is
/// re-established after a short pause.
async fn closed_loop(
    w: usize,
    conns: usize,
    target: Target,
    payloads: Arc<Payloads>,
    ct: Encoding,
    stop: Arc<AtomicBool>,
) -> Tally {
    let n = payloads.bodies.len().max(1);
    // At least one payload per connection (wrapping around), so every connection pushes
    // even with fewer agents than connections.
    let agents: Vec<usize> = (0..n.div_ceil(conns.max(1)).max(1))
        .map(|k| (w + k * conns) % n)
        .collect();
    let reqs = requests(&target, &payloads, &agents);
    let mut t = Tally {
        latencies_us: Vec::with_capacity(1 << 16),
        ..Tally::default()
    };
    if reqs.is_empty() {
        t.errors += 1;
        return t;
    }
    let mut i = 0usize;
    while !stop.load(Relaxed) {
        let mut sender = match connect(&target.host).await {
            Ok(s) => s,
            Err(_) => {
                t.errors += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        while !stop.load(Relaxed) {
            let req = &reqs[i % reqs.len()];
            i = i.wrapping_add(1);
            let started = Instant::now();
            match push(&mut sender, &target, req, ct).await {
                Ok(answer) => t.answered(answer, started),
                Err(_) => {
                    t.errors += 1;
                    break;
                }
            }
        }
    }
    t
}

/// Paced mode, one connection: pushes for the agents `w, w + conns, ...` (each exactly
/// once per interval, jittered per agent by ±10 %, first pushes spread over one interval by
/// agent index), in due order, one at a time, until `stop`. A push whose time has passed
/// goes out at once and its lateness is recorded. A failed push (or connect) counts one
/// error, the next push re-establishes the connection, and the agent's next push stays on
/// schedule. Pushes due at or after `end` are not sent.
async fn paced_loop(
    (w, conns): (usize, usize),
    target: Target,
    payloads: Arc<Payloads>,
    ct: Encoding,
    (t0, interval, end): (Instant, Duration, Instant),
    stop: Arc<AtomicBool>,
) -> Tally {
    let n = payloads.bodies.len();
    let agents: Vec<usize> = (w..n).step_by(conns.max(1)).collect();
    let reqs = requests(&target, &payloads, &agents);
    let mut t = Tally::default();
    let jitter = |a: usize| 0.9 + 0.2 * ((a.wrapping_mul(2654435761) % 1000) as f64 / 1000.0);
    let mut due: BinaryHeap<Reverse<(Instant, usize)>> = agents
        .iter()
        .take(reqs.len())
        .enumerate()
        .map(|(j, &a)| Reverse((t0 + interval.mul_f64(a as f64 / n as f64), j)))
        .collect();
    let mut sender: Option<Sender> = None;
    while let Some(Reverse((at, j))) = due.pop() {
        if at >= end {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        if stop.load(Relaxed) {
            break;
        }
        due.push(Reverse((at + interval.mul_f64(jitter(agents[j])), j)));
        let s = match &mut sender {
            Some(s) => s,
            None => match connect(&target.host).await {
                Ok(s) => sender.insert(s),
                Err(_) => {
                    // Like an agent whose push fails: this push is lost, the agent's next
                    // one is on schedule.
                    t.errors += 1;
                    continue;
                }
            },
        };
        let started = Instant::now();
        t.lags_us
            .push(micros(started.saturating_duration_since(at)));
        match push(s, &target, &reqs[j], ct).await {
            Ok(answer) => t.answered(answer, started),
            Err(_) => {
                t.errors += 1;
                sender = None;
            }
        }
    }
    t
}
