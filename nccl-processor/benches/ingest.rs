//! Points processed per second, on one core, through the `Processor` interface exactly as a
//! host drives it: `process` on every delivered batch (arrival order) and `tick` every
//! simulated second (flushing, and building the OTLP lag output).
//!
//! Throughput is counted in input `nccl.collective.duration_ms` points (the `bytes` twins
//! the agent also sends are in the batches but not counted). Time is the benchmark thread's
//! **CPU time** (`CLOCK_THREAD_CPUTIME_ID`), i.e. points per second of one core, so the
//! numbers hold on a machine shared with other work. Run:
//! `cargo bench -p nccl-processor --bench ingest -- --warm-up-time 1 --measurement-time 3`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/it/tracegen.rs"]
mod tracegen;

use std::hint::black_box;
use std::sync::Arc;

use component::config::ConfigValue;
use component::otlp::ResourceMetrics;
use component::{BatchContext, Processor, Timestamp};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use nccl_processor::{NcclPeerLagProcessor, create};
use testkit::cpu_time::ThreadCpuTime;
use tracegen::{Format, Injected, MS, Pattern, Spec, T0, Trace, generate};

fn injected() -> Vec<Injected> {
    vec![
        Injected {
            rank: 5,
            lag_ms: 120.0,
            pattern: Pattern::Fraction(0.7),
        },
        Injected {
            rank: 13,
            lag_ms: 80.0,
            pattern: Pattern::Every {
                period: 7,
                phase: 2,
            },
        },
    ]
}

struct Scenario {
    name: &'static str,
    trace: Trace,
    with_ticks: bool,
}

fn scenarios() -> Vec<Scenario> {
    let exact = Spec {
        steps: 400,
        step_ms: 200.0,
        step_jitter_ms: 20.0,
        entry_jitter_ms: 1.0,
        drop_prob: 0.001,
        injected: injected(),
        with_bytes: false,
        seed: 7,
        ..Spec::new(512, Format::OpSeqWall)
    };
    let buckets = Spec {
        steps: 2000,
        step_ms: 3_500.0,
        step_jitter_ms: 400.0,
        entry_jitter_ms: 2.0,
        drop_prob: 0.001,
        straddle_window_ms: Some(1_000.0),
        straddle_fraction: 0.35,
        injected: injected(),
        with_bytes: false,
        seed: 7,
        ..Spec::new(64, Format::WallNoSeq)
    };
    let mono = Spec {
        format: Format::IngeroMonotonic,
        with_bytes: true,
        ..buckets.clone()
    };
    vec![
        Scenario {
            name: "exact_op_seq_512_ranks",
            trace: generate(&exact),
            with_ticks: true,
        },
        Scenario {
            name: "time_buckets_wall_64_ranks",
            trace: generate(&buckets),
            with_ticks: true,
        },
        Scenario {
            name: "ingero_monotonic_64_ranks_with_bytes",
            trace: generate(&mono),
            with_ticks: true,
        },
        Scenario {
            name: "exact_op_seq_512_ranks_process_only",
            trace: generate(&exact),
            with_ticks: false,
        },
        Scenario {
            name: "time_buckets_wall_64_ranks_process_only",
            trace: generate(&buckets),
            with_ticks: false,
        },
    ]
}

fn big_output() -> ConfigValue {
    component::config::parse_yaml(b"limits: {max_pending_output: 67108864}").unwrap()
}

/// Drive one fresh processor through the whole trace. The input batches and the emitted
/// lag metrics are returned, so criterion drops them outside the timed section (freeing
/// them is the host's work, not the processor's).
fn drive(
    p: &NcclPeerLagProcessor,
    mut batches: Vec<(u64, Vec<ResourceMetrics>)>,
    ticks: bool,
) -> (Vec<(u64, Vec<ResourceMetrics>)>, Vec<ResourceMetrics>) {
    let tick = 1_000 * MS as u64;
    let mut next_tick = T0 + tick;
    let mut emitted = Vec::new();
    let ctx_cluster: Option<Arc<str>> = None;
    for (arrival, batch) in batches.iter_mut() {
        while ticks && next_tick <= *arrival {
            emitted.extend(p.tick(Timestamp(next_tick)));
            next_tick += tick;
        }
        let ctx = BatchContext {
            cluster_id: ctx_cluster.clone(),
            received_at: Timestamp(*arrival),
            tenant: None,
        };
        black_box(p.process(batch, &ctx));
    }
    if ticks {
        emitted.extend(p.tick(Timestamp(next_tick + 60_000 * MS as u64)));
    }
    (batches, emitted)
}

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("nccl_peer_lag");
    g.sample_size(10);
    for sc in scenarios() {
        g.throughput(Throughput::Elements(sc.trace.points as u64));
        let deliveries: Vec<(u64, Vec<ResourceMetrics>)> = sc
            .trace
            .deliveries
            .iter()
            .map(|d| (d.arrival, vec![d.rm.clone()]))
            .collect();
        g.bench_function(sc.name, |b| {
            b.iter_batched(
                || {
                    let p = if sc.with_ticks {
                        create(&ConfigValue::Null).unwrap()
                    } else {
                        create(&big_output()).unwrap()
                    };
                    (p, deliveries.clone())
                },
                |(p, batches)| {
                    let out = drive(&p, batches, sc.with_ticks);
                    (p, out)
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = bench
}
criterion_main!(benches);
