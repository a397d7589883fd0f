//! Hot paths of the exporter: one agent push into a full exporter, and a scrape.
//!
//!     cargo bench -p fleet-prometheus -- --warm-up-time 1 --measurement-time 3

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/agent.rs"]
mod agent;

use std::hint::black_box;
use std::time::{Duration, Instant};

use agent::{AgentPush, health_push};
use component::Timestamp;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};

const T0: u64 = 1_750_000_000;

fn loaded(nodes: u64) -> PrometheusExporter {
    let e = agent::fleet_exporter(PrometheusExporterConfig::default());
    agent::fill(&e, nodes, true, T0);
    e
}

fn consume(c: &mut Criterion) {
    let e = loaded(100_000);
    let mut g = c.benchmark_group("consume");
    g.throughput(Throughput::Elements(1));
    // A known node's push, built in the (untimed) setup so it is in cache as a decoder
    // would hand it over, and dropped outside the timing; nodes spread over the fleet so
    // the exporter's side is not in cache.
    let mut k = 0u64;
    g.bench_function("agent_push_13_series_into_100k_nodes", |b| {
        b.iter_batched_ref(
            || {
                k += 1;
                health_push(&AgentPush::fleet_node(
                    k * 7919 % 100_000,
                    true,
                    (T0 + 10) * 1_000_000_000,
                ))
            },
            |p| black_box(e.consume(std::slice::from_ref(p), Timestamp::from_secs(T0 + 10))),
            BatchSize::SmallInput,
        )
    });
    // First push of a node never seen: the write-lock path. Timed in batches of fresh
    // pushes; the exporter is reloaded (untimed) before it nears max_series, so no push
    // is refused at the cap.
    let mut e = e;
    let mut next = 1_000_000u64;
    g.bench_function("new_node_push_13_series_into_100k_nodes", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if e.series_count() > 1_800_000 {
                    e = loaded(100_000);
                }
                let n = left.min(1000);
                let pushes: Vec<_> = (0..n)
                    .map(|_| {
                        next += 1;
                        health_push(&AgentPush::fleet_node(
                            next,
                            true,
                            (T0 + 10) * 1_000_000_000,
                        ))
                    })
                    .collect();
                let start = Instant::now();
                for p in &pushes {
                    black_box(e.consume(std::slice::from_ref(p), Timestamp::from_secs(T0 + 10)));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

fn render(c: &mut Criterion) {
    let mut g = c.benchmark_group("render");
    g.sample_size(10);
    for nodes in [10_000u64, 100_000] {
        let e = loaded(nodes);
        let mut out = String::new();
        e.render(Timestamp::from_secs(T0), &[], &mut out);
        let lines = out.lines().filter(|l| !l.starts_with('#')).count() as u64;
        g.throughput(Throughput::Elements(lines));
        g.bench_function(format!("{nodes}_nodes_{lines}_series"), |b| {
            b.iter(|| {
                out.clear();
                e.render(Timestamp::from_secs(T0), &[], &mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn expire(c: &mut Criterion) {
    let e = loaded(100_000);
    let mut g = c.benchmark_group("expire");
    g.sample_size(10);
    g.bench_function("scan_100k_nodes_nothing_due", |b| {
        b.iter(|| black_box(e.expire(Timestamp::from_secs(T0 + 60))))
    });
    g.finish();
}

criterion_group!(benches, consume, render, expire);
criterion_main!(benches);
