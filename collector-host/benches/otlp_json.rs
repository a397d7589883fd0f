//! OTLP/JSON metrics decoding: the generic serde path (`serde_json::from_slice` through
//! opentelemetry-proto's serde impls) against the hand-written decoder the receiver uses
//! (`receiver::otlp_json::decode_metrics`, group name `streaming`), on the bodies agents send: the health push
//! exactly as `fleet-loadgen` builds it, the straggler-event push, and an `ingero trace`
//! NCCL export of 64 collectives.
//!
//! `streaming` runs as the receiver does, each batch handed back unchanged with its origin,
//! so every decode after the first replays the shape of the one before
//! (`reader/tape.rs`); `streaming_full` forgets the shape before each decode, so each is a
//! full decode, recorded.
//!
//! Run short on the shared machine:
//! `cargo bench -p collector-host --bench otlp_json -- --warm-up-time 1 --measurement-time 3`
//!
//! The allocator is mimalloc, as in `ingero-fleet`. `scan_only` is serde_json checking
//! the syntax and building nothing: a reference for the cost of reading the bytes at all.
//! For comparisons between versions on the shared machine, count instructions instead:
//! `valgrind --tool=callgrind --toggle-collect='*decode_metrics*' <bench binary> --bench
//! --profile-time 2 '^otlp_json_metrics/streaming/agent_push$'`, divided by the calls.
//!
//! Every group runs twice: wall time (criterion's default) and, as `<group>_cpu`, the
//! benchmark thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time
//! the thread spends descheduled while other builds run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Bench setup.

use std::hint::black_box;

use collector_host::receiver::otlp_json::{decode_metrics, forget_shape, recycle, take_origin};
use component::recycle::recycle_on_this_thread_from;
use criterion::measurement::Measurement;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use testkit::cpu_time::{ThreadCpuTime, group_name};

// As in `ingero-fleet`'s main.rs: decoding allocates per string and per repeated field.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The bodies, named.
fn bodies() -> Vec<(&'static str, Vec<u8>)> {
    // `fleet-loadgen`'s body for agent 0 (`build_payloads`).
    let push = testkit::AgentPush::new("cluster-0", "node-000000", 0.9)
        .gpu("NVIDIA H100 80GB HBM3", 8)
        .to_json();
    let event = testkit::AgentPush::new("cluster-0", "node-000000", 0.4).straggler_event_json(
        1,
        0.81,
        "5b1f2c3e-7d4a-4b8e-9f00-1a2b3c4d5e6f",
    );
    let points: Vec<_> = (0..64)
        .map(|i| {
            testkit::NcclPoint::all_reduce(
                "9f3a61c2",
                i % 8,
                8,
                12.5 + f64::from(i as u8) * 0.01,
                1_763_769_600_000_000_000 + i as u64,
            )
        })
        .collect();
    let nccl = testkit::nccl_export_json(Some("cluster-0"), "node-000000", &points);
    vec![
        ("agent_push", push.into_bytes()),
        ("straggler_event", event.into_bytes()),
        ("nccl_export_64", nccl.into_bytes()),
    ]
}

fn decode<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(group_name::<M>("otlp_json_metrics"));
    for (name, body) in bodies() {
        // Both paths must read the body the same way, or the comparison is meaningless.
        let old: ExportMetricsServiceRequest = serde_json::from_slice(&body).unwrap();
        assert_eq!(decode_metrics(&body).unwrap(), old, "{name}");
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(BenchmarkId::new("serde_generic", name), &body, |b, body| {
            b.iter(|| {
                black_box(
                    serde_json::from_slice::<ExportMetricsServiceRequest>(black_box(body)).unwrap(),
                )
            })
        });
        // As the receiver runs it: each batch goes back to the thread when done, and
        // every body after the first is replayed against the shape of the one before
        // (`reader::tape`).
        g.bench_with_input(BenchmarkId::new("streaming", name), &body, |b, body| {
            b.iter(|| {
                let req = decode_metrics(black_box(body)).unwrap();
                let origin = take_origin();
                recycle_on_this_thread_from(black_box(req).resource_metrics, origin);
            })
        });
        // The same with the shape forgotten before each decode: a full decode (recorded)
        // each time.
        g.bench_with_input(
            BenchmarkId::new("streaming_full", name),
            &body,
            |b, body| {
                b.iter(|| {
                    forget_shape();
                    let req = decode_metrics(black_box(body)).unwrap();
                    recycle(black_box(req).resource_metrics);
                })
            },
        );
        // The floor: serde_json checking the syntax and building nothing.
        g.bench_with_input(BenchmarkId::new("scan_only", name), &body, |b, body| {
            b.iter(|| {
                black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body)).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group!(wall, decode);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = decode
}
criterion_main!(wall, cpu);
