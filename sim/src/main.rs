//! `fleet-sim`: virtual Ingero agents against a real Fleet.
//!
//! - `fleet-sim demo`: Fleet (embedded default) plus a simulated 64-node cluster; prints
//!   the live-view URL and each event as it happens, runs until Ctrl-C (or `--duration`)
//!   and prints the report on exit;
//! - `fleet-sim run --scenario <name|file>`: one scenario, in process on a simulated clock
//!   (default), against an embedded Fleet over HTTP (`--embedded`), or against a Fleet
//!   already running (`--otlp`, `--admin`, `--exporter`);
//! - `fleet-sim quality`: the fixed set behind `docs/detection-quality.md`;
//! - `fleet-sim scenarios`: the bundled scenarios.

// A command-line tool: its output goes to stdout.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use fleet_sim::live::{EmbeddedFleet, Endpoints, LiveOptions, run_live, view_url};
use fleet_sim::record::{Event, EventKind, Report, Side, median_p95};
use fleet_sim::run::{node_name, run_in_process};
use fleet_sim::scenario::{BUNDLED, Scenario, bundled};
use testkit::push::Encoding;

#[derive(Debug, Parser)]
#[command(
    name = "fleet-sim",
    version,
    about = "Virtual Ingero agents (the agent's own scoring and payload code) against a real Fleet"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Enc {
    Json,
    Protobuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start Fleet (embedded default config) and a simulated 64-node cluster; a 15 %
    /// straggler and a late NCCL rank appear after the warm-up. No GPU, no root, no files.
    Demo {
        /// Every listener on a free port instead of the default ones (4318, 8081, ...).
        #[arg(long)]
        auto_ports: bool,
        /// Print the final report as JSON.
        #[arg(long)]
        json: bool,
        /// Stop after this long (`90s`, `10m`) instead of at Ctrl-C.
        #[arg(long, value_parser = component::config::parse_duration)]
        duration: Option<std::time::Duration>,
    },
    /// Run one scenario (a bundled name or a TOML file).
    Run {
        #[arg(long)]
        scenario: String,
        /// Start Fleet in this process and push to it over HTTP on wall-clock time.
        #[arg(long)]
        embedded: bool,
        /// With --embedded: every listener on a free port.
        #[arg(long)]
        auto_ports: bool,
        /// Push to a Fleet already running at this OTLP/HTTP address (host:port).
        #[arg(long)]
        otlp: Option<String>,
        /// That Fleet's admin listener (diagnostics).
        #[arg(long, default_value = "127.0.0.1:8081")]
        admin: String,
        /// That Fleet's Prometheus exporter (named NCCL ranks).
        #[arg(long, default_value = "127.0.0.1:8889")]
        exporter: String,
        /// Connections the agents share in live mode.
        #[arg(long, default_value_t = 4)]
        connections: usize,
        #[arg(long, value_enum, default_value_t = Enc::Protobuf)]
        encoding: Enc,
        /// Print every detection as it happens.
        #[arg(long)]
        verbose: bool,
        #[arg(long)]
        json: bool,
    },
    /// Run the fixed scenario set and print the detection-quality tables (Markdown).
    Quality {
        /// The short set (what the test runs).
        #[arg(long)]
        short: bool,
    },
    /// List the bundled scenarios.
    Scenarios,
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fleet-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load(name_or_path: &str) -> anyhow::Result<Scenario> {
    let text = match bundled(name_or_path) {
        Some(t) => t.to_string(),
        None => std::fs::read_to_string(name_or_path).map_err(|e| {
            anyhow::anyhow!("{name_or_path}: not a bundled scenario and not readable: {e}")
        })?,
    };
    Ok(Scenario::from_toml(&text)?)
}

fn real_main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Scenarios => {
            for (name, text) in BUNDLED {
                let s = Scenario::from_toml(text)?;
                println!("{name:14} {}", s.description);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Quality { short } => {
            let size = if short {
                fleet_sim::quality::Size::SHORT
            } else {
                fleet_sim::quality::Size::FULL
            };
            let started = Instant::now();
            let q = fleet_sim::quality::run_all(size, |p| {
                eprintln!("[{:6.1}s] {p}", started.elapsed().as_secs_f64())
            })
            .map_err(anyhow::Error::msg)?;
            println!("{}", q.markdown);
            if !q.missed.is_empty() {
                println!("### Goals missed\n");
                for m in &q.missed {
                    println!("- {m}");
                }
            }
            eprintln!(
                "quality set: {:.1} s wall-clock",
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            scenario,
            embedded,
            auto_ports,
            otlp,
            admin,
            exporter,
            connections,
            encoding,
            verbose,
            json,
        } => {
            let s = load(&scenario)?;
            let print = |e: &Event| {
                if verbose {
                    println!("{}", describe(e));
                }
            };
            let report = if embedded || otlp.is_some() {
                let mut fleet = if embedded {
                    Some(EmbeddedFleet::start(s.push_interval, auto_ports)?)
                } else {
                    None
                };
                let endpoints = match (&fleet, otlp) {
                    (Some(f), _) => f.endpoints.clone(),
                    (None, Some(otlp_http)) => Endpoints {
                        otlp_http,
                        admin,
                        exporter,
                    },
                    (None, None) => Endpoints::default(),
                };
                let opts = LiveOptions {
                    endpoints,
                    connections,
                    stop_when_caught: false,
                    stop: None,
                    duration: None,
                    encoding: match encoding {
                        Enc::Json => Encoding::Json,
                        Enc::Protobuf => Encoding::Protobuf,
                    },
                };
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let r = rt.block_on(run_live(
                    &s,
                    &opts,
                    || match fleet.as_mut() {
                        Some(f) => f.restart(),
                        None => {
                            eprintln!("fleet-sim: cannot restart an external Fleet; skipped");
                            Ok(())
                        }
                    },
                    print,
                ))?;
                if let Some(mut f) = fleet {
                    f.stop()?;
                }
                r
            } else {
                run_in_process(&s, print).map_err(anyhow::Error::msg)?
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_summary(&s, &report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            auto_ports,
            json,
            duration,
        } => demo(auto_ports, json, duration),
    }
}

/// One line per event, as it happens.
fn describe(e: &Event) -> String {
    let who = match e.side {
        Side::Fleet => "FLEET",
        Side::Agent => "AGENT",
    };
    let what = match &e.kind {
        EventKind::Detected { after_s, .. } => match e.side {
            Side::Fleet => format!(
                "{} flagged as a straggler, {after_s:.1} s after its drop",
                node_name(e.node)
            ),
            Side::Agent => format!(
                "{} classifies itself as a straggler against Fleet's threshold, {after_s:.1} s after the drop",
                node_name(e.node)
            ),
        },
        EventKind::Cleared => format!("{} no longer flagged", node_name(e.node)),
        EventKind::FalsePositive => {
            format!("{} flagged but healthy (false positive)", node_name(e.node))
        }
        EventKind::NcclNamed {
            lag_ms,
            period_steps,
        } => match period_steps {
            Some(p) => format!(
                "NCCL rank {} named: {lag_ms:.1} ms behind its peers every {p} steps",
                e.node
            ),
            None => format!(
                "NCCL rank {} named: {lag_ms:.1} ms behind its peers on its collectives",
                e.node
            ),
        },
        EventKind::Quorum {
            met: true,
            threshold,
        } => format!(
            "quorum met: Fleet serves threshold {}",
            threshold.map_or("-".into(), |t| format!("{t:.4}"))
        ),
        EventKind::Quorum { met: false, .. } => "quorum lost".to_string(),
    };
    format!("[{:5.1}s] {who}  {what}", e.at_s)
}

fn print_summary(s: &Scenario, r: &Report) {
    println!(
        "scenario {} ({} mode): {} nodes, {:.0} s, {} pushes ({} failed, {} points refused)",
        s.name, r.mode, r.nodes, r.seconds, r.pushes, r.push_errors, r.rejected_points
    );
    let f: Vec<f64> = r.episodes.iter().filter_map(|e| e.fleet_detect_s).collect();
    let a: Vec<f64> = r.episodes.iter().filter_map(|e| e.agent_detect_s).collect();
    let n = r.episodes.len();
    let mp = |v: &[f64]| {
        median_p95(v).map_or("-".to_string(), |(m, p)| {
            format!("median {m:.1} s, p95 {p:.1} s")
        })
    };
    if n > 0 {
        println!(
            "  stragglers: Fleet {}/{n} ({}), agent {}/{n} ({})",
            f.len(),
            mp(&f),
            a.len(),
            mp(&a)
        );
    }
    println!(
        "  false positives: Fleet {} of {} healthy node-ticks ({:.2} per million), agent {} of {} ({:.2} per million)",
        r.fleet.false_positive_node_ticks,
        r.fleet.healthy_node_ticks,
        r.fleet.per_million(),
        r.agent.false_positive_node_ticks,
        r.agent.healthy_node_ticks,
        r.agent.per_million()
    );
    if r.panic_ticks > 0 {
        println!(
            "  panic mode: {} of {} Fleet ticks",
            r.panic_ticks, r.fleet_ticks
        );
    }
    for x in &r.nccl {
        println!(
            "  NCCL rank {} ({:.0} ms every {} steps): {}",
            x.rank,
            x.injected_lag_ms,
            x.injected_every,
            match (x.named_after_s, x.reported_lag_ms) {
                (Some(t), Some(l)) => format!(
                    "named {t:.0} s after onset, {l:.1} ms{}{}",
                    x.reported_period_steps
                        .map_or(String::new(), |p| format!(", every {p} steps")),
                    if x.lag_within_10_percent {
                        " (within 10 %)"
                    } else {
                        " (off by more than 10 %)"
                    }
                ),
                _ => "not named".into(),
            }
        );
    }
    if !r.nccl_wrongly_named.is_empty() {
        println!(
            "  NCCL ranks named that were never late: {:?}",
            r.nccl_wrongly_named
        );
    }
}

fn demo(
    auto_ports: bool,
    json: bool,
    duration: Option<std::time::Duration>,
) -> anyhow::Result<ExitCode> {
    let s = Scenario::from_toml(bundled("demo").unwrap_or(""))?;
    let started = Instant::now();
    let mut fleet = EmbeddedFleet::start(s.push_interval, auto_ports)?;
    let e = fleet.endpoints.clone();
    let episode = s.stragglers.first();
    let onset = episode.map_or(0.0, |x| x.onset.as_secs_f64());
    let recover = episode.and_then(|x| x.recover).map(|r| r.as_secs_f64());
    println!(
        "Ingero Fleet demo: Fleet (embedded default config, push_interval {} s) and {} simulated nodes ({} x {} on {})",
        s.push_interval.as_secs_f64(),
        s.total_nodes(),
        fleet_sim::agent::GPU_COUNT,
        fleet_sim::agent::GPU_MODEL,
        fleet_sim::agent::PROVIDER,
    );
    println!("  live view:    {}", view_url(&e.admin));
    println!(
        "  diagnostics:  http://{}/api/v1/diagnostics?cluster_id={}",
        e.admin, s.cluster_id
    );
    println!(
        "  OTLP/HTTP:    http://{}   metrics: http://{}/metrics",
        e.otlp_http, e.exporter
    );
    let late = s
        .nccl
        .as_ref()
        .and_then(|n| n.late.first())
        .map_or(0.0, |l| l.onset.as_secs_f64());
    println!(
        "  {} agents calibrate for {} pushes; from {late:.0} s NCCL rank 41 is 80 ms late on every all-reduce; at {onset:.0} s {} drops 15 %{}",
        s.total_nodes(),
        s.warmup_samples,
        node_name(23),
        recover.map_or(String::new(), |r| format!(" and recovers at {r:.0} s")),
    );
    match duration {
        Some(d) => println!(
            "  (runs {:.0} s; Ctrl-C stops it earlier and prints the report)",
            d.as_secs_f64()
        ),
        None => println!("  (runs until Ctrl-C, then prints the report)"),
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opts = LiveOptions {
        endpoints: e,
        connections: 4,
        encoding: Encoding::Protobuf,
        stop_when_caught: false,
        stop: Some(stop.clone()),
        duration,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Ctrl-C (SIGINT) ends the run at its next step; the report follows.
    rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let report = rt.block_on(run_live(
        &s,
        &opts,
        || fleet.restart(),
        |ev| println!("{}", describe(ev)),
    ))?;
    fleet.stop()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&s, &report);
    }
    let caught = report.fleet_detected() == report.episodes.len()
        && report.nccl.iter().all(|n| n.lag_within_10_percent);
    println!(
        "{} ({:.0} s wall-clock)",
        if caught {
            "demo: straggler and late rank caught"
        } else {
            "demo: NOT everything was caught (see above)"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(if caught {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
