//! The agent's hot paths: folding ring-buffer events into the window (per probed call),
//! one health tick (pure), building and encoding a health push, an NCCL export batch, and
//! the query API's per-request token check beside the request it precedes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use component::Timestamp;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ingero_agent::events::{CudaEvent, cuda_op, source};
use ingero_agent::fleet::payload::{self, CgroupSeries, GpuInfo, HealthContext, Identity};
use ingero_agent::health::SignalSet;
use ingero_agent::health::core::{CoreConfig, FleetView, HealthCore, TickInput};
use ingero_agent::health::threshold::CachedThreshold;
use ingero_agent::nccl::{NcclPoint, nccl_request, op};
use ingero_agent::signals::window::TickAccumulator;
use prost::Message;

fn event_bytes(i: u64) -> Vec<u8> {
    let mut b = vec![0u8; CudaEvent::SIZE];
    b[0..8].copy_from_slice(&(1_000_000 + i).to_ne_bytes());
    b[8..16].copy_from_slice(&3_000u64.to_ne_bytes());
    b[16..20].copy_from_slice(&((i % 8) as u32 + 100).to_ne_bytes());
    b[24] = source::CUDA_RUNTIME;
    b[25] = if i.is_multiple_of(10) {
        cuda_op::STREAM_SYNC
    } else {
        cuda_op::LAUNCH_KERNEL
    };
    b
}

fn events(c: &mut Criterion) {
    let raw: Vec<Vec<u8>> = (0..10_000).map(event_bytes).collect();
    let mut g = c.benchmark_group("probe_events");
    g.throughput(Throughput::Elements(raw.len() as u64));
    g.bench_function("decode_and_accumulate_10k", |b| {
        b.iter(|| {
            let mut acc = TickAccumulator::default();
            for r in &raw {
                acc.on_cuda(&CudaEvent::from_bytes(r).unwrap());
            }
            acc
        })
    });
    g.finish();
}

fn tick(c: &mut Criterion) {
    let view = FleetView {
        cached: Some(CachedThreshold {
            value: 0.88,
            quorum_met: true,
            received_at: Timestamp::from_secs(1_000),
        }),
        fleet_reachable: true,
    };
    c.bench_function("health_core_tick", |b| {
        let mut core = HealthCore::new(CoreConfig::default().with_warmup(1));
        let mut t = Timestamp::from_secs(1_000);
        b.iter(|| {
            t = t.saturating_add(Duration::from_millis(1));
            let input = TickInput {
                raw: Some(SignalSet::new(1000.0, 0.9, 0.8, 0.7)),
                kernel_launches: 60_000,
                other_work: true,
                observed_at: t,
                sync_wait: 0.0,
            };
            core.tick(input, view, Timestamp::from_secs(1_005))
        })
    });
}

fn push(c: &mut Criterion) {
    let mut core = HealthCore::new(CoreConfig::default().with_warmup(1));
    let report = core
        .tick(
            TickInput {
                raw: Some(SignalSet::new(1000.0, 0.9, 0.8, 0.7)),
                kernel_launches: 1,
                other_work: true,
                observed_at: Timestamp::from_secs(1),
                sync_wait: 0.0,
            },
            FleetView {
                cached: None,
                fleet_reachable: false,
            },
            Timestamp::from_secs(1),
        )
        .report
        .unwrap();
    let id = Identity {
        node_id: "gpu-node-01".into(),
        cluster_id: "prod".into(),
        world_size: 64,
        node_rank: 41,
        workload_type: "training".into(),
        cgroup_path_hash: "8a5edab282632443".into(),
    };
    let gpu = GpuInfo {
        model: "NVIDIA H100 80GB HBM3".into(),
        count: 8,
    };
    let cg: Vec<CgroupSeries> = (0..4)
        .map(|i| CgroupSeries {
            cgroup_path_hash: format!("{i:016x}"),
            kernel_launches: 1_000_000,
            cpu_stall_nanos: 5_000,
            memcpy_bytes: vec![("h2d", 1 << 30), ("d2h", 1 << 28)],
        })
        .collect();
    let ctx = HealthContext {
        identity: &id,
        provider: Some("aws"),
        gpu: Some(&gpu),
        per_cgroup: &cg,
        now: Timestamp::from_secs(1),
    };
    c.bench_function("health_push_build_protobuf", |b| {
        b.iter(|| {
            payload::health_request(&report, &ctx)
                .unwrap()
                .encode_to_vec()
        })
    });
    c.bench_function("health_push_build_json", |b| {
        b.iter(|| {
            ingero_agent::fleet::json::encode(&payload::health_request(&report, &ctx).unwrap())
                .unwrap()
        })
    });
    let points: Vec<NcclPoint> = (0..4096)
        .map(|i| NcclPoint {
            time: Timestamp::from_secs(1),
            op: op::ALL_REDUCE,
            comm_id_hash: 0xfeed,
            rank: 3,
            nranks: 8,
            datatype: 7,
            reduce_op: 0,
            peer_rank: 0,
            count: 1 << 20,
            duration_ns: 2_000_000,
            op_seq: i + 1,
            barrier_wait_ns: None,
        })
        .collect();
    let mut g = c.benchmark_group("nccl_export");
    g.throughput(Throughput::Elements(points.len() as u64));
    g.bench_function("build_and_encode_4096_points", |b| {
        b.iter(|| nccl_request(&id, &points).encode_to_vec())
    });
    g.finish();
}

/// The query API's token check (one `stat` of `api.token_file`, the lock, the token) and,
/// for scale, a whole `GET /api/v1/time` with that check on a kept-open loopback
/// connection to an in-process API (plain HTTP: TLS would only make the request dearer).
fn api_token(c: &mut Criterion) {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("ingero-bench-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "bench-token-0123456789abcdef").unwrap();
    let check = ingero_agent::api::server::token(&token).unwrap();
    let mut g = c.benchmark_group("api_token");
    g.bench_function("check_unchanged_file", |b| b.iter(|| check.get()));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let opts = ingero_agent::api::ServeOptions {
        config: ingero_agent::api::ApiConfig {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            no_tls: true,
            token_file: Some(token.clone()),
            ..Default::default()
        },
        db: dir.join("absent.db"),
        node: "bench".into(),
        clock_offset_ns: 0,
    };
    let server = rt
        .block_on(ingero_agent::api::ApiServer::bind(opts))
        .unwrap();
    let addr = server.local_addr;
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    rt.spawn(server.run(stopped));
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_nodelay(true).unwrap();
    let req = b"GET /api/v1/time HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer bench-token-0123456789abcdef\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    g.bench_function("time_request_keepalive_with_check", |b| {
        b.iter(|| {
            conn.write_all(req).unwrap();
            // One small answer: its head and body arrive together on loopback.
            let n = conn.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            n
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, events, tick, push, api_token);
criterion_main!(benches);
