//! CPU time (not wall time) of the hot paths, read from `/proc/thread-self/schedstat`, so
//! the numbers hold on a machine shared with other work (criterion measures wall time).
//!
//!     cargo run --release -p fleet-prometheus --example cpu

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/agent.rs"]
mod agent;

use std::hint::black_box;

use agent::{AgentPush, health_push};
use component::{ResourceMetrics, Timestamp};
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};

const T0: u64 = 1_750_000_000;

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn loaded(nodes: u64) -> PrometheusExporter {
    let e = agent::fleet_exporter(PrometheusExporterConfig::default());
    agent::fill(&e, nodes, true, T0);
    e
}

fn main() {
    // The floor: one node, everything in cache.
    let small = loaded(1);
    let one = health_push(&AgentPush::fleet_node(0, true, (T0 + 10) * 1_000_000_000));
    let start = cpu_ns();
    for _ in 0..100_000 {
        black_box(small.consume(std::slice::from_ref(&one), Timestamp::from_secs(T0 + 10)));
    }
    let per = (cpu_ns() - start) as f64 / 100_000.0;
    println!(
        "consume known node (13 series, 1 node held):     {:.2} us CPU per push",
        per / 1e3
    );

    let e = loaded(100_000);

    // Pushes of known nodes, spread over the fleet, each built just before it is consumed
    // (as a decoder hands it over: in cache), only consume timed.
    let rounds: u64 = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let mut spent = 0;
    let mut n = 0u64;
    for r in 0..rounds {
        let batch: Vec<ResourceMetrics> = (0..64u64)
            .map(|k| {
                let node = (r * 64 + k) * 7919 % 100_000;
                health_push(&AgentPush::fleet_node(
                    node,
                    true,
                    (T0 + 10) * 1_000_000_000,
                ))
            })
            .collect();
        let start = cpu_ns();
        for p in &batch {
            black_box(e.consume(std::slice::from_ref(p), Timestamp::from_secs(T0 + 10)));
        }
        spent += cpu_ns() - start;
        n += batch.len() as u64;
    }
    let per = spent as f64 / n as f64;
    println!(
        "consume known node (13 series, 100k nodes held): {:.2} us CPU per push",
        per / 1e3
    );

    let mut spent = 0;
    let mut n = 0u64;
    for r in 0..300u64 {
        let batch: Vec<ResourceMetrics> = (0..64u64)
            .map(|k| {
                let node = 1_000_000 + r * 64 + k;
                health_push(&AgentPush::fleet_node(
                    node,
                    true,
                    (T0 + 10) * 1_000_000_000,
                ))
            })
            .collect();
        let start = cpu_ns();
        for p in &batch {
            black_box(e.consume(std::slice::from_ref(p), Timestamp::from_secs(T0 + 10)));
        }
        spent += cpu_ns() - start;
        n += batch.len() as u64;
    }
    let per = spent as f64 / n as f64;
    println!(
        "consume new node   (13 series, 100k nodes held): {:.2} us CPU per push",
        per / 1e3
    );
    if std::env::args().any(|a| a == "--consume-only") {
        return;
    }

    for nodes in [10_000u64, 100_000] {
        let e = loaded(nodes);
        let mut out = String::new();
        e.render(Timestamp::from_secs(T0), &[], &mut out);
        let lines = out.lines().filter(|l| !l.starts_with('#')).count();
        let runs = if nodes > 50_000 { 3 } else { 10 };
        let start = cpu_ns();
        for _ in 0..runs {
            out.clear();
            e.render(Timestamp::from_secs(T0), &[], &mut out);
        }
        let per = (cpu_ns() - start) as f64 / runs as f64;
        println!(
            "render {nodes} nodes ({lines} series, {:.1} MiB): {:.1} ms CPU, {:.0} ns per series",
            out.len() as f64 / 1048576.0,
            per / 1e6,
            per / lines as f64
        );
    }

    let start = cpu_ns();
    for _ in 0..10 {
        black_box(e.expire(Timestamp::from_secs(T0 + 60)));
    }
    println!(
        "expire scan, 120k nodes, nothing due: {:.1} ms CPU",
        (cpu_ns() - start) as f64 / 10.0 / 1e6
    );
}
