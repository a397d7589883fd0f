//! `fleet-loadgen`: simulates Ingero agents pushing to a Fleet over OTLP/HTTP and reports
//! throughput, latency percentiles and the server's CPU per push.
//!
//! Two modes:
//! - closed loop (default): `--connections C` keep-alive connections push back to back for
//!   `--duration`, cycling through `--agents N` node identities (raw throughput);
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
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.connections.max(1))
        .build_http();
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = args.server_pid.and_then(cpu_seconds);
    let t0 = Instant::now();
    let base = args.endpoint.trim_end_matches('/').to_string();

    let workers = if args.interval.is_some() {
        args.agents
    } else {
        args.connections
    };
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
        let conns = args.connections.max(1);
        handles.push(tokio::spawn(async move {
            let mut i = w;
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
                match interval {
                    Some(iv) => {
                        let jitter =
                            0.9 + 0.2 * ((i.wrapping_mul(2654435761) % 1000) as f64 / 1000.0);
                        tokio::time::sleep(iv.mul_f64(jitter)).await;
                    }
                    None => i += conns,
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
