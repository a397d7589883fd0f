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
//!   like the real agent (fleet-scale simulation).
//!
//! With `--server-pid`, the server's CPU time (utime+stime from /proc) is sampled before and
//! after, giving CPU microseconds per push.

// A command-line tool: its report goes to stdout.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;

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
    /// Concurrent connections (closed-loop mode).
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
}

impl Stats {
    fn merge(&self, t: Tally) {
        self.ok.fetch_add(t.ok, Relaxed);
        self.errors.fetch_add(t.errors, Relaxed);
        self.with_headers.fetch_add(t.with_headers, Relaxed);
        self.latencies_us.lock().extend_from_slice(&t.latencies_us);
    }
}

/// One closed-loop connection's counts, merged into [`Stats`] when it stops.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    with_headers: u64,
    latencies_us: Vec<u32>,
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
        Enc::Json => "application/json",
        Enc::Protobuf => "application/x-protobuf",
    };
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = args.server_pid.and_then(cpu_seconds);
    let t0 = Instant::now();
    let base = args.endpoint.trim_end_matches('/').to_string();

    if args.interval.is_none() {
        let target = Target::parse(&base)?;
        let conns = args.connections.max(1);
        let mut loops = Vec::with_capacity(conns);
        for w in 0..conns {
            let (payloads, stop, target) = (payloads.clone(), stop.clone(), target.clone());
            loops.push(tokio::spawn(closed_loop(
                w, conns, target, payloads, ct, stop,
            )));
        }
        tokio::time::sleep(args.duration).await;
        stop.store(true, Relaxed);
        let elapsed = t0.elapsed();
        let cpu1 = args.server_pid.and_then(cpu_seconds);
        // Each loop finishes the request it has in flight; one that hangs is cut off
        // (and its connection's counts are lost, which the report's totals then show).
        for h in loops {
            if let Ok(Ok(t)) = tokio::time::timeout(Duration::from_secs(5), h).await {
                stats.merge(t);
            }
        }
        return report(&args, avg_body, &stats, elapsed, cpu0, cpu1);
    }
    // Paced: one task per agent over a pooled client (agents far outnumber connections).
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.connections.max(1))
        .build_http();
    let workers = args.agents;
    let mut handles = Vec::with_capacity(workers);
    for w in 0..workers {
        let (client, payloads, stats, stop, base) = (
            client.clone(),
            payloads.clone(),
            stats.clone(),
            stop.clone(),
            base.clone(),
        );
        let interval = args.interval;
        let n = payloads.bodies.len();
        handles.push(tokio::spawn(async move {
            let i = w;
            if let Some(iv) = interval {
                // Spread first pushes over one interval.
                let offset = iv.mul_f64((w as f64) / (n.max(1) as f64));
                tokio::time::sleep(offset).await;
            }
            while !stop.load(Relaxed) {
                let (cluster, body) = &payloads.bodies[i % n];
                let req = http::Request::post(format!("{base}/v1/metrics?cluster_id={cluster}"))
                    .header(http::header::CONTENT_TYPE, ct)
                    .body(Full::new(body.clone()));
                let Ok(req) = req else { break };
                let t = Instant::now();
                match client.request(req).await {
                    Ok(resp) => {
                        let okay = resp.status().is_success();
                        if resp.headers().contains_key("x-ingero-threshold") {
                            stats.with_headers.fetch_add(1, Relaxed);
                        }
                        let _ = resp.into_body().collect().await;
                        let us = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
                        stats.latencies_us.lock().push(us);
                        if okay {
                            stats.ok.fetch_add(1, Relaxed);
                        } else {
                            stats.errors.fetch_add(1, Relaxed);
                        }
                    }
                    Err(_) => {
                        stats.errors.fetch_add(1, Relaxed);
                    }
                }
                if let Some(iv) = interval {
                    let jitter = 0.9 + 0.2 * ((i.wrapping_mul(2654435761) % 1000) as f64 / 1000.0);
                    tokio::time::sleep(iv.mul_f64(jitter)).await;
                }
            }
        }));
    }
    tokio::time::sleep(args.duration).await;
    stop.store(true, Relaxed);
    let elapsed = t0.elapsed();
    let cpu1 = args.server_pid.and_then(cpu_seconds);
    for h in handles {
        h.abort();
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
    let mut lat = std::mem::take(&mut *stats.latencies_us.lock());
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let idx = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat[idx.min(lat.len() - 1)] as f64 / 1000.0
    };
    let total = ok + errors;
    let cpu_us = match (cpu0, cpu1) {
        (Some(a), Some(b)) if total > 0 => Some((b - a) * 1e6 / total as f64),
        _ => None,
    };
    let rss = args.server_pid.and_then(rss_bytes);
    let report = serde_json::json!({
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
        "latency_ms": {"p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "p999": pct(0.999), "max": pct(1.0)},
        "server_cpu_us_per_push": cpu_us,
        "server_rss_bytes": rss,
    });
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// Where closed-loop connections go: the socket address and the request target prefix.
#[derive(Clone)]
struct Target {
    host: String,
    authority: http::HeaderValue,
    path: String,
}

impl Target {
    fn parse(base: &str) -> anyhow::Result<Self> {
        let uri: http::Uri = base.parse()?;
        if uri.scheme_str() != Some("http") {
            anyhow::bail!("--endpoint must be an http:// URL (got {base:?})");
        }
        let Some(auth) = uri.authority() else {
            anyhow::bail!("--endpoint has no host:port (got {base:?})");
        };
        let host = format!("{}:{}", auth.host(), auth.port_u16().unwrap_or(80));
        Ok(Target {
            host,
            authority: http::HeaderValue::from_str(auth.as_str())?,
            path: format!("{}/v1/metrics", uri.path().trim_end_matches('/')),
        })
    }
}

/// One connection pushing back to back until `stop`, cycling through the payloads
/// `w, w + conns, w + 2 * conns, ...`. A failed connection counts one error and is
/// re-established after a short pause.
async fn closed_loop(
    w: usize,
    conns: usize,
    target: Target,
    payloads: Arc<Payloads>,
    ct: &'static str,
    stop: Arc<AtomicBool>,
) -> Tally {
    let n = payloads.bodies.len();
    // Request targets, built once for the payloads this connection sends: w, w + conns,
    // ... (at least one, so every connection pushes even with fewer agents than
    // connections).
    let uris: Vec<(http::Uri, Bytes)> = (0..n.div_ceil(conns.max(1)).max(1))
        .filter_map(|k| {
            let (cluster, body) = payloads.bodies.get((w + k * conns) % n.max(1))?;
            let uri = format!("{}?cluster_id={cluster}", target.path)
                .parse()
                .ok()?;
            Some((uri, body.clone()))
        })
        .collect();
    let mut t = Tally {
        latencies_us: Vec::with_capacity(1 << 16),
        ..Tally::default()
    };
    if uris.is_empty() {
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
            let (uri, body) = &uris[i % uris.len()];
            i = i.wrapping_add(1);
            let mut req = http::Request::new(Full::new(body.clone()));
            *req.method_mut() = http::Method::POST;
            *req.uri_mut() = uri.clone();
            let h = req.headers_mut();
            h.insert(http::header::HOST, target.authority.clone());
            h.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(ct),
            );
            let started = Instant::now();
            let sent = async {
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                let headers = resp.headers().contains_key("x-ingero-threshold");
                let ok = resp.status().is_success();
                resp.into_body().collect().await?;
                Ok::<_, hyper::Error>((ok, headers))
            }
            .await;
            match sent {
                Ok((ok, headers)) => {
                    let us = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                    t.latencies_us.push(us);
                    t.with_headers += u64::from(headers);
                    if ok {
                        t.ok += 1;
                    } else {
                        t.errors += 1;
                    }
                }
                Err(_) => {
                    t.errors += 1;
                    break;
                }
            }
        }
    }
    t
}

async fn connect(
    host: &str,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(host).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}
