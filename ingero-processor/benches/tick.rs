//! Hot paths of the `ingero` processor.
//!
//! - `tick/<n>`: one tick over one cluster of `n` active nodes (copy-out, median/MAD by
//!   selection, EMA/panic, CUSUM per node, diagnostics, straggler metrics, publish to a
//!   no-op sink). About 0.1 % of the nodes are deep stragglers, so the output path runs.
//! - `record_push`: `process` of one agent health push (9 metrics, the agent's shape) for a
//!   known node of a 10k-node cluster.
//! - `median_mad/100000`: the statistic alone (two quickselects and a deviation pass).
//!
//! Every benchmark runs twice: with criterion's wall clock (`tick/...`) and with the
//! benchmark thread's CPU time (`cpu/tick/...`, `CLOCK_THREAD_CPUTIME_ID`). On the shared
//! 2-core build machine the wall clock also counts the time other engineers' builds hold the
//! core; the CPU-time figure is the cost of our code.
//!
//! `cargo bench -p ingero-processor -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use component::otlp::{self, NumberValue, ResourceMetrics};
use component::{
    BatchContext, ComponentId, Extension, Host, Processor, StartError, StaticHost, Timestamp,
};
use ingero_wire::{ClusterReport, ThresholdSink};
use ingero_wire::{attr, metric, resource};

use criterion::measurement::Measurement;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ingero_processor::IngeroProcessor;
use ingero_processor::config::IngeroConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::cpu_time::ThreadCpuTime;

const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);

struct NoopSink;
impl ThresholdSink for NoopSink {
    fn publish(&self, reports: Vec<ClusterReport>, _: Timestamp) {
        black_box(reports);
    }
}
struct NoopExt;
impl Extension for NoopExt {
    fn start(&self, _: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }
    fn shutdown(&self) {}
    fn provides(
        &self,
        interface: std::any::TypeId,
    ) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        component::provide::<Arc<dyn ThresholdSink>>(interface, || Arc::new(NoopSink))
    }
}

/// One push in the agent's shape (`internal/health/emitter.go`).
fn agent_push(cluster: &str, node: &str, score: f64) -> ResourceMetrics {
    let dp = |extra: Vec<otlp::KeyValue>, v: f64| {
        let mut attrs = vec![
            otlp::kv_str(attr::NODE_STATE, "active"),
            otlp::kv_str(attr::WORKLOAD_TYPE, "training"),
        ];
        attrs.extend(extra);
        otlp::point_f64(attrs, NOW.as_nanos(), v)
    };
    let mut metrics = vec![otlp::gauge_f64(
        metric::HEALTH_SCORE,
        "1",
        vec![dp(
            vec![otlp::kv_str(attr::CGROUP_PATH_HASH, "8a5edab282632443")],
            score,
        )],
    )];
    for name in [
        metric::THROUGHPUT_RATIO,
        metric::COMPUTE_EFFICIENCY,
        metric::MEMORY_HEADROOM,
        metric::CPU_AVAILABILITY,
    ] {
        metrics.push(otlp::gauge_f64(name, "1", vec![dp(vec![], 0.9)]));
    }
    let mut warn = otlp::gauge_f64(metric::DEGRADATION_WARNING, "1", vec![dp(vec![], 0.0)]);
    if let Some(otlp::MetricKind::Gauge(g)) = &mut warn.data {
        g.data_points[0].value = Some(NumberValue::AsInt(0));
    }
    metrics.push(warn);
    metrics.push(otlp::gauge_f64(
        metric::DETECTION_MODE,
        "1",
        vec![otlp::point_f64(
            vec![otlp::kv_str(attr::DETECTION_MODE, "fleet")],
            1,
            1.0,
        )],
    ));
    metrics.push(otlp::gauge_f64(
        metric::FLEET_REACHABLE,
        "1",
        vec![otlp::point_f64(vec![], 1, 1.0)],
    ));
    metrics.push(otlp::gauge_f64(
        metric::NODE_WORLD_SIZE,
        "1",
        vec![otlp::point_f64(vec![], 1, 0.0)],
    ));
    otlp::resource_metrics(
        vec![
            otlp::kv_str(resource::NODE_ID, node),
            otlp::kv_str(resource::CLUSTER_ID, cluster),
        ],
        "ingero.health",
        metrics,
    )
}

fn health_only(node: &str, score: f64) -> ResourceMetrics {
    otlp::resource_metrics(
        vec![
            otlp::kv_str(resource::NODE_ID, node),
            otlp::kv_str(resource::CLUSTER_ID, "bench"),
        ],
        "ingero.health",
        vec![otlp::gauge_f64(
            metric::HEALTH_SCORE,
            "1",
            vec![otlp::point_f64(
                vec![otlp::kv_str(attr::NODE_STATE, "active")],
                0,
                score,
            )],
        )],
    )
}

fn processor_with(nodes: usize) -> IngeroProcessor {
    let mut cfg = IngeroConfig::default();
    let cap = u32::try_from(nodes + 1).unwrap().max(65_536);
    cfg.limits.max_nodes_per_cluster = cap;
    cfg.limits.max_nodes_total = cap;
    let p = IngeroProcessor::new(cfg).unwrap();
    let host = StaticHost {
        extensions: vec![(
            ComponentId::new("ingero_threshold"),
            Arc::new(NoopExt) as Arc<dyn Extension>,
        )],
    };
    p.start(&host).unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    let ctx = BatchContext {
        cluster_id: None,
        received_at: NOW,
        tenant: None,
    };
    for i in 0..nodes {
        let score = if i % 1000 == 7 {
            0.3
        } else {
            0.95 + rng.random_range(-0.03..0.03)
        };
        let out = p.process(&mut vec![health_only(&format!("node-{i:07}"), score)], &ctx);
        assert_eq!(out.rejected_points, 0, "{:?}", out.message);
    }
    p
}

fn bench_tick<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let mut g = c.benchmark_group(format!("{prefix}tick"));
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        g.throughput(Throughput::Elements(n as u64));
        if n >= 100_000 {
            g.sample_size(10);
        }
        // Built on first use, so a filtered run does not fill a million nodes.
        let mut p: Option<IngeroProcessor> = None;
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let p = p.get_or_insert_with(|| {
                let p = processor_with(n);
                // Two warm ticks: a threshold exists and the stragglers are flagged.
                p.tick(NOW);
                assert!(!p.tick(NOW).is_empty());
                p
            });
            b.iter(|| black_box(p.tick(black_box(NOW))))
        });
    }
    g.finish();
}

fn bench_record_push<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let p = processor_with(10_000);
    let mut batch = vec![agent_push("bench", "node-0005000", 0.93)];
    let ctx = BatchContext {
        cluster_id: Some(Arc::from("bench")),
        received_at: NOW,
        tenant: None,
    };
    let mut g = c.benchmark_group(format!("{prefix}record_push"));
    g.throughput(Throughput::Elements(otlp::count_points(&batch)));
    g.bench_function("agent_push_known_node", |b| {
        b.iter(|| black_box(p.process(black_box(&mut batch), &ctx)))
    });
    g.finish();
}

fn bench_stats<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let n = 100_000usize;
    let mut rng = StdRng::seed_from_u64(7);
    let v: Vec<f64> = (0..n)
        .map(|_| 0.95 + rng.random_range(-0.03..0.03))
        .collect();
    let mut scratch = v.clone();
    let mut g = c.benchmark_group(format!("{prefix}median_mad"));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::from_parameter(n), |b| {
        b.iter(|| {
            scratch.copy_from_slice(&v);
            black_box(ingero_processor::stats::RobustStats::compute(&mut scratch))
        })
    });
    g.finish();
}

fn wall(c: &mut Criterion) {
    bench_tick(c, "");
    bench_record_push(c, "");
    bench_stats(c, "");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    bench_tick(c, "cpu/");
    bench_record_push(c, "cpu/");
    bench_stats(c, "cpu/");
}

criterion_group!(wall_clock, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_clock, cpu_time);
