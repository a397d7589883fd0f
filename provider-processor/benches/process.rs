//! Hot paths: tagging a batch of health pushes (rule lookup included), peer-lag batches,
//! worst-case rule evaluation, and a tick over a large fleet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::PathBuf;

use component::config::parse_yaml;
use component::otlp::{self, NumberDataPoint, NumberValue};
use component::{BatchContext, Processor, ResourceMetrics, Timestamp};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ingero_wire::{attr, metric, resource};
use provider_processor::{ProviderLookupProcessor, create};

const H100: &str = "NVIDIA H100 80GB HBM3";

fn rules_file(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("provider-processor-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn processor(rules: Option<&PathBuf>) -> ProviderLookupProcessor {
    let yaml = match rules {
        Some(p) => format!("rules_file: {}\nlimits: {{max_nodes: 100000}}", p.display()),
        None => "limits: {max_nodes: 100000}".to_string(),
    };
    create(&parse_yaml(yaml.as_bytes()).unwrap()).unwrap()
}

/// 4000 literal node rules plus 96 glob/CIDR rules, none of which match `gpu-*` nodes
/// except the literal ones.
fn mixed_rules() -> String {
    let mut s = String::from("rules:\n");
    for i in 0..96 {
        s.push_str(&format!(
            "  - {{provider: lambda, node_id: \"pool{i}-*\", ip_range: 10.{i}.0.0/16}}\n"
        ));
    }
    for i in 0..4000 {
        s.push_str(&format!("  - {{provider: coreweave, node_id: gpu-{i}}}\n"));
    }
    s
}

fn health_push(cluster: &str, node: &str) -> ResourceMetrics {
    let int = |attrs, v| NumberDataPoint {
        attributes: attrs,
        time_unix_nano: 1,
        value: Some(NumberValue::AsInt(v)),
        ..Default::default()
    };
    let mut rm = otlp::resource_metrics(
        vec![
            otlp::kv_str(resource::NODE_ID, node),
            otlp::kv_str(resource::CLUSTER_ID, cluster),
            otlp::kv_i64(resource::WORLD_SIZE, 64),
            otlp::kv_str(resource::PROVIDER, "aws"),
        ],
        "ingero.health",
        vec![otlp::gauge_f64(
            metric::HEALTH_SCORE,
            "1",
            vec![otlp::point_f64(vec![], 1, 0.9)],
        )],
    );
    let ms = &mut rm.scope_metrics[0].metrics;
    let mut info = otlp::gauge_f64(metric::NODE_INFO, "1", vec![]);
    if let Some(otlp::MetricKind::Gauge(g)) = &mut info.data {
        g.data_points.push(int(
            vec![
                otlp::kv_str(attr::GPU_MODEL, H100),
                otlp::kv_i64(attr::GPU_COUNT, 8),
            ],
            1,
        ));
    }
    ms.push(info);
    let mut ws = otlp::gauge_f64(metric::NODE_WORLD_SIZE, "1", vec![]);
    if let Some(otlp::MetricKind::Gauge(g)) = &mut ws.data {
        g.data_points.push(int(vec![], 64));
    }
    ms.push(ws);
    rm
}

fn lag_batch(time: u64) -> Vec<ResourceMetrics> {
    (0..64)
        .map(|rank| {
            otlp::resource_metrics(
                vec![
                    otlp::kv_str(resource::CLUSTER_ID, "prod"),
                    otlp::kv_str(resource::NODE_ID, format!("gpu-{}", rank / 8)),
                ],
                "nccl",
                vec![otlp::gauge_f64(
                    metric::NCCL_PEER_LAG_MS,
                    "ms",
                    vec![otlp::point_f64(
                        vec![
                            otlp::kv_str(attr::NCCL_COMM_ID_HASH, "00000000deadbeef"),
                            otlp::kv_str(attr::NCCL_OP_TYPE, "ncclAllReduce"),
                            otlp::kv_i64(attr::NCCL_RANK, rank),
                            otlp::kv_i64(attr::NCCL_NRANKS, 64),
                        ],
                        time,
                        if rank == 41 { 80.0 } else { 0.5 },
                    )],
                )],
            )
        })
        .collect()
}

fn ctx(t: u64) -> BatchContext {
    BatchContext {
        cluster_id: None,
        received_at: Timestamp::from_secs(t),
        tenant: None,
    }
}

fn bench(c: &mut Criterion) {
    let mixed = rules_file("mixed.yaml", &mixed_rules());
    let p = processor(Some(&mixed));
    let pushes: Vec<ResourceMetrics> = (0..64)
        .map(|i| health_push("prod", &format!("gpu-{i}")))
        .collect();
    c.bench_function("process/64_health_pushes_4096_rules", |b| {
        b.iter_batched(
            || pushes.clone(),
            |mut batch| p.process(black_box(&mut batch), &ctx(1)),
            BatchSize::SmallInput,
        )
    });

    let none = processor(None);
    c.bench_function("process/64_health_pushes_no_rules", |b| {
        b.iter_batched(
            || pushes.clone(),
            |mut batch| none.process(black_box(&mut batch), &ctx(1)),
            BatchSize::SmallInput,
        )
    });

    let lag = lag_batch(7);
    c.bench_function("process/64_rank_peer_lag_instance", |b| {
        b.iter_batched(
            || lag.clone(),
            |mut batch| none.process(black_box(&mut batch), &ctx(1)),
            BatchSize::SmallInput,
        )
    });

    // Worst case: 4096 glob rules, none matching, every resource scans them all.
    let mut globs = String::from("rules:\n");
    for i in 0..4096 {
        globs.push_str(&format!(
            "  - {{provider: gcp, node_id: \"*-pool{i}-*\"}}\n"
        ));
    }
    let g = processor(Some(&rules_file("globs.yaml", &globs)));
    let attrs = vec![
        otlp::kv_str(resource::NODE_ID, "gpu-node-0042-rack-7"),
        otlp::kv_str(resource::CLUSTER_ID, "prod"),
    ];
    c.bench_function("resolve/4096_glob_rules_no_match", |b| {
        b.iter(|| g.resolve(black_box(&attrs)))
    });

    // A tick over 4096 nodes (8 GPUs each), 64 stragglers, one 64-rank collective pending,
    // 10 s apart as the host ticks; every node pushes between ticks (setup, not timed).
    let big = processor(None);
    let fleet: Vec<Vec<ResourceMetrics>> = (0..64)
        .map(|chunk| {
            (0..64)
                .map(|i| health_push("prod", &format!("n{}", chunk * 64 + i)))
                .collect()
        })
        .collect();
    let stragglers: Vec<ResourceMetrics> = (0..64)
        .map(|i| {
            let mut rm = health_push("prod", &format!("n{i}"));
            rm.scope_metrics[0].metrics = vec![otlp::gauge_f64(
                provider_processor::metrics::INPUT_FLEET_NODE_STRAGGLER,
                "1",
                vec![otlp::point_f64(vec![], 1, 1.0)],
            )];
            rm
        })
        .collect();
    let mut t = 1u64;
    c.bench_function("tick/4096_nodes_64_stragglers", |b| {
        b.iter_batched(
            || {
                t += 10;
                for batch in &fleet {
                    big.process(&mut batch.clone(), &ctx(t));
                }
                big.process(&mut stragglers.clone(), &ctx(t));
                big.process(&mut lag_batch(t), &ctx(t));
                t + 5
            },
            |now| big.tick(Timestamp::from_secs(black_box(now))),
            BatchSize::PerIteration,
        )
    });
    let mut fams = Vec::new();
    c.bench_function("telemetry/4096_nodes", |b| {
        b.iter(|| {
            fams.clear();
            big.telemetry(&mut fams);
            black_box(fams.len())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
