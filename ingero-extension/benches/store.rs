//! The push path's header lookup, the GET route and a publish, at 1, 1k and 100k clusters.
//!
//! Run short on the shared machine:
//! `cargo bench -p ingero-extension -- --warm-up-time 1 --measurement-time 3`
//!
//! Every group runs twice: wall time (criterion's default) and, as `<group>_cpu`, the
//! benchmark thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the
//! thread spends descheduled. On a machine shared with other builds the second is the one that
//! measures this code rather than the neighbours.

#![allow(clippy::unwrap_used)] // Bench setup.

use std::hint::black_box;
use std::sync::Arc;

use component::api::ApiRequest;
use component::{ConfigValue, Timestamp};
use criterion::measurement::Measurement;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ingero_extension::{ThresholdExtension, ThresholdStore, create};
use ingero_wire::http::THRESHOLD_API_PATH;
use ingero_wire::threshold::{ClusterDiagnostics, ClusterReport, ThresholdSink, ThresholdValue};
use testkit::cpu_time::{ThreadCpuTime, group_name};

const SIZES: [usize; 3] = [1, 1_000, 100_000];

fn diagnostics() -> Arc<ClusterDiagnostics> {
    Arc::new(ClusterDiagnostics {
        median: Some(0.95),
        mad: Some(0.01),
        raw_threshold: Some(0.92),
        threshold: Some(0.92),
        quorum_met: true,
        active_nodes: 8,
        idle_nodes: 0,
        calibrating_nodes: 0,
        expected_nodes: 8,
        coverage: 1.0,
        coverage_low: false,
        panic_mode: false,
        straggler_count: 0,
        cohorts: Vec::new(),
        nodes: Vec::new(),
        computed_at_unix_nano: 0,
    })
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("gpu-cluster-{i:06}")).collect()
}

fn reports(ids: &[String], diag: &Arc<ClusterDiagnostics>) -> Vec<ClusterReport> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| ClusterReport {
            cluster_id: id.as_str().into(),
            value: ThresholdValue::new(0.5 + (i % 400) as f64 * 1e-3, i % 5 != 0),
            diagnostics: Arc::clone(diag),
        })
        .collect()
}

/// Visit ids in a scattered order (a stride coprime with n), as many agents would.
fn scattered(n: usize) -> impl FnMut() -> usize {
    let stride = 7919 % n.max(1);
    let mut i = 0usize;
    move || {
        i = (i + stride.max(1)) % n;
        i
    }
}

fn extension(n: usize) -> (ThresholdExtension, Vec<String>) {
    let ext = create(&ConfigValue::Null).unwrap();
    let ids = ids(n);
    ingero_wire::threshold::threshold_sink(&ext)
        .unwrap()
        .publish(reports(&ids, &diagnostics()), Timestamp::from_secs(1));
    (ext, ids)
}

fn push_headers<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(group_name::<M>("push_headers"));
    g.throughput(Throughput::Elements(1));
    for n in SIZES {
        let (ext, ids) = extension(n);
        let store: Arc<ThresholdStore> = ext.store();
        // Hot: one cluster asked again and again (every agent of a cluster pushes its id).
        let hot = ids[n / 2].clone();
        g.bench_with_input(BenchmarkId::new("hot", n), &n, |b, _| {
            b.iter(|| black_box(store.push_headers(black_box(&hot))))
        });
        // The value alone (no header clone): the atomic load + hash lookup.
        g.bench_with_input(BenchmarkId::new("get_hot", n), &n, |b, _| {
            b.iter(|| black_box(store.get(black_box(&hot))))
        });
        // Scattered: a different cluster each time, across the whole map (cache-cold at 100k).
        let mut next = scattered(n);
        g.bench_with_input(BenchmarkId::new("scattered", n), &n, |b, _| {
            b.iter(|| black_box(store.push_headers(black_box(&ids[next()]))))
        });
        g.bench_with_input(BenchmarkId::new("miss", n), &n, |b, _| {
            b.iter(|| black_box(store.push_headers(black_box("unknown-cluster"))))
        });
        // The host's one call: strict query parse + validation + lookup.
        let query = format!("cluster_id={hot}");
        g.bench_with_input(BenchmarkId::new("for_query_hot", n), &n, |b, _| {
            b.iter(|| black_box(store.push_headers_for_query(black_box(Some(&query)))))
        });
    }
    g.finish();
}

fn get_route<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(group_name::<M>("route_agent_get"));
    g.throughput(Throughput::Elements(1));
    for n in SIZES {
        let (ext, ids) = extension(n);
        let queries: Vec<String> = ids.iter().map(|id| format!("cluster_id={id}")).collect();
        let hot = queries[n / 2].clone();
        g.bench_with_input(BenchmarkId::new("hot", n), &n, |b, _| {
            b.iter(|| {
                black_box(ext.route_agent(&ApiRequest {
                    method: "GET",
                    path: THRESHOLD_API_PATH,
                    query: Some(black_box(&hot)),
                }))
            })
        });
        let mut next = scattered(n);
        g.bench_with_input(BenchmarkId::new("scattered", n), &n, |b, _| {
            b.iter(|| {
                let q = &queries[next()];
                black_box(ext.route_agent(&ApiRequest {
                    method: "GET",
                    path: THRESHOLD_API_PATH,
                    query: Some(q),
                }))
            })
        });
    }
    g.finish();
}

fn publish<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(group_name::<M>("publish"));
    g.sample_size(10);
    let diag = diagnostics();
    for n in [1_000usize, 100_000] {
        let store = ThresholdStore::new();
        let ids = ids(n);
        let batch = reports(&ids, &diag);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_batched(
                || batch.clone(),
                |r| store.publish(r, Timestamp::from_secs(1)),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(wall, push_headers, get_route, publish);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = push_headers, get_route, publish
}
criterion_main!(wall, cpu);
