//! The Rust half of the Go shim's data path: one `ingero_processor_process` call per batch
//! of agent pushes (protobuf decode + the processor), against prost decoding alone.
//!
//! `cargo bench -p ingero-ffi -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use component::otlp::ExportMetricsServiceRequest;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ingero_fleet::buf::ingero_buf_free;
use ingero_fleet::processor::{
    ingero_process_result, ingero_processor, ingero_processor_free, ingero_processor_new,
    ingero_processor_process,
};
use ingero_fleet::{ingero_buf, ingero_result};
use prost::Message;
use testkit::AgentPush;

fn batch(nodes: usize) -> Vec<u8> {
    let scores = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.60];
    let mut req = ExportMetricsServiceRequest::default();
    for i in 0..nodes {
        req.resource_metrics.extend(
            AgentPush::new(
                "bench",
                &format!("bench-node-{i:04}"),
                scores[i % scores.len()],
            )
            .to_proto()
            .resource_metrics,
        );
    }
    req.encode_to_vec()
}

/// One `ingero_processor_process` call on `data` (cluster `bench`), its output freed.
fn process_once(p: *mut ingero_processor, data: &[u8]) {
    let mut r = ingero_process_result {
        modified: false,
        data: ingero_buf {
            ptr: std::ptr::null_mut(),
            len: 0,
        },
        rejected_points: 0,
    };
    let c = "bench";
    let rc = unsafe {
        ingero_processor_process(p, data.as_ptr(), data.len(), c.as_ptr(), c.len(), 1, &mut r)
    };
    assert_eq!(rc, ingero_result::INGERO_OK);
    unsafe { ingero_buf_free(&mut r.data) };
}

fn processor(id: &str) -> *mut ingero_processor {
    let mut p = std::ptr::null_mut();
    let rc = unsafe { ingero_processor_new(id.as_ptr(), id.len(), std::ptr::null(), 0, &mut p) };
    assert_eq!(rc, ingero_result::INGERO_OK);
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("process");
    for nodes in [1usize, 8, 64] {
        let data = batch(nodes);
        let points = ExportMetricsServiceRequest::decode(data.as_slice())
            .map(|r| component::otlp::count_points(&r.resource_metrics))
            .unwrap_or(0);
        g.throughput(Throughput::Elements(points));
        g.bench_function(format!("pushes={nodes}/prost_decode_only"), |b| {
            b.iter(|| {
                black_box(ExportMetricsServiceRequest::decode(black_box(
                    data.as_slice(),
                )))
            })
        });
        for id in ["ingero", "nccl_peer_lag", "provider_lookup"] {
            let p = processor(id);
            g.bench_function(format!("pushes={nodes}/abi_{id}"), |b| {
                b.iter(|| process_once(p, &data))
            });
            unsafe { ingero_processor_free(p) };
        }
    }
    // Three pushes as the Go shim passes them (pdata's Go marshaler writes every message's
    // fields last to first; the batches above are prost's, first to last).
    let go = include_bytes!("../tests/data/go_pdata_3_pushes.pb");
    let p = processor("ingero");
    g.bench_function("go_pdata_pushes=3/abi_ingero", |b| {
        b.iter(|| process_once(p, go))
    });
    unsafe { ingero_processor_free(p) };
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
