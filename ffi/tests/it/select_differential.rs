//! The selective decoder of the pass-through processors against prost, in two ways:
//!
//! - as decoders: on every batch prost accepts, `decode_selected` equals a full decode cut
//!   down by `project` (on mutated bytes it never panics);
//! - as what the processors see: `ingero` and `nccl_peer_lag` given the full decode and the
//!   selective decode of the same batch return the same outcome and end with the same
//!   telemetry (every counter), diagnostics and tick output. The batches are agent pushes
//!   with noise: extra resource and data-point attributes under every wire key (read ones
//!   too, so duplicates with other values and types come first), other data kinds, units,
//!   scopes and exemplars. This is what shows that each crate's `READS_*` lists name
//!   everything its `process` reads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use component::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, InstrumentationScope, KeyValue,
    MetricKind, NumberDataPoint, Sum,
};
use component::{BatchContext, MetricFamily, ProcessOutcome, Processor, Timestamp};
use ingero_fleet::select::{
    Recycler, Selection, decode_full_then_project, decode_selected, decode_selected_reusing,
};
use ingero_wire::{attr, resource};
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;
use testkit::{AgentPush, NcclPoint, json_to_proto, nccl_export_json};

const INGERO: Selection = Selection {
    metrics: ingero_processor::READS_METRICS,
    resource_attributes: ingero_processor::READS_RESOURCE_ATTRIBUTES,
    point_attributes: ingero_processor::READS_POINT_ATTRIBUTES,
};
const NCCL: Selection = Selection {
    metrics: nccl_processor::READS_METRICS,
    resource_attributes: nccl_processor::READS_RESOURCE_ATTRIBUTES,
    point_attributes: nccl_processor::READS_POINT_ATTRIBUTES,
};
const READERS: [Selection; 3] = [INGERO, NCCL, Selection::NOTHING];

/// When the pushes were received (the agent pushes' own time plus one second).
const RECEIVED: u64 = 1_763_769_601_000_000_000;
const COMM: &str = "00000000deadbeef";

/// One NCCL collective as seen by one rank.
#[derive(Debug, Clone)]
struct Collective {
    rank: u8,
    nranks: u8,
    /// Offset of the rank's entry from `RECEIVED`, in ms (negative: before).
    offset_ms: i16,
    op_seq: Option<u8>,
    op: &'static str,
}

/// A batch of agent health pushes and NCCL exports, in the given order.
fn batch(health: &[(u8, f64)], nccl: &[(u8, f64)]) -> ExportMetricsServiceRequest {
    let mut req = ExportMetricsServiceRequest::default();
    for (i, (node, score)) in health.iter().enumerate() {
        let p = AgentPush::new("c", &format!("node-{node}"), *score);
        req.resource_metrics.extend(p.to_proto().resource_metrics);
        if let Some((rank, ms)) = nccl.get(i) {
            let pts = [NcclPoint::all_reduce(
                COMM,
                i64::from(*rank),
                8,
                *ms,
                1_700_000_000_000_000_000,
            )];
            req.resource_metrics.extend(json_to_proto(&nccl_export_json(
                Some("c"),
                &format!("node-{rank}"),
                &pts,
            )));
        }
    }
    req
}

/// Health pushes with varied content (cluster, state, cohort, score, resource extras).
#[derive(Debug, Clone)]
struct Health {
    cluster: &'static str,
    node: u8,
    score: f64,
    state: &'static str,
    cohort: &'static str,
    world: bool,
}

fn health() -> impl Strategy<Value = Health> {
    (
        prop::sample::select(vec!["c1", "c2", ""]),
        0u8..6,
        prop_oneof![4 => 0.0f64..=1.0, 1 => Just(1.5), 1 => Just(-0.25)],
        prop::sample::select(vec!["active", "active", "idle", "calibrating", "bogus"]),
        prop::sample::select(vec![
            "",
            "8a5edab282632443",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        ]),
        any::<bool>(),
    )
        .prop_map(|(cluster, node, score, state, cohort, world)| Health {
            cluster,
            node,
            score,
            state,
            cohort,
            world,
        })
}

fn collective() -> impl Strategy<Value = Collective> {
    (
        0u8..4,
        prop::sample::select(vec![1u8, 2, 4, 4]),
        -500i16..500,
        prop::option::of(0u8..3),
        prop::sample::select(vec!["ncclAllReduce", "ncclAllReduce", "ncclSend", ""]),
    )
        .prop_map(|(rank, nranks, offset_ms, op_seq, op)| Collective {
            rank,
            nranks,
            offset_ms,
            op_seq,
            op,
        })
}

fn realistic(
    health: &[Health],
    nccl: &[(Option<&'static str>, Vec<Collective>)],
) -> ExportMetricsServiceRequest {
    let mut req = ExportMetricsServiceRequest::default();
    for h in health {
        let mut p = AgentPush::new(h.cluster, &format!("node-{}", h.node), h.score)
            .state(h.state)
            .cohort(h.cohort)
            .provider("aws");
        if h.world {
            p = p.world(4, i64::from(h.node % 4));
        }
        req.resource_metrics.extend(p.to_proto().resource_metrics);
    }
    for (cluster, points) in nccl {
        let Some(first) = points.first() else {
            continue;
        };
        let pts: Vec<NcclPoint> = points
            .iter()
            .map(|c| {
                let t = RECEIVED.saturating_add_signed(i64::from(c.offset_ms) * 1_000_000);
                let mut p =
                    NcclPoint::all_reduce(COMM, i64::from(c.rank), i64::from(c.nranks), 1.5, t);
                p.op_type = c.op.to_string();
                p.op_seq = c.op_seq.map(i64::from);
                p
            })
            .collect();
        req.resource_metrics.extend(json_to_proto(&nccl_export_json(
            *cluster,
            &format!("node-{}", first.rank),
            &pts,
        )));
    }
    req
}

/// Every attribute key on the wire, plus one nobody knows.
const KEYS: &[&str] = &[
    resource::NODE_ID,
    resource::CLUSTER_ID,
    resource::PROVIDER,
    resource::WORLD_SIZE,
    resource::NODE_RANK,
    resource::CLOUD_PROVIDER,
    resource::CLOUD_PLATFORM,
    resource::HOST_TYPE,
    resource::SERVICE_NAME,
    resource::SERVICE_INSTANCE_ID,
    attr::NODE_STATE,
    attr::WORKLOAD_TYPE,
    attr::DETECTION_MODE,
    attr::CGROUP_PATH_HASH,
    attr::GPU_MODEL,
    attr::GPU_COUNT,
    attr::MEMCPY_DIRECTION,
    attr::NCCL_OP_TYPE,
    attr::NCCL_COMM_ID_HASH,
    attr::NCCL_RANK,
    attr::NCCL_NRANKS,
    attr::NCCL_DATATYPE,
    attr::NCCL_REDUCE_OP,
    attr::NCCL_PEER_RANK,
    attr::NCCL_OP_SEQ,
    "unknown.key",
];

fn value() -> impl Strategy<Value = Option<AnyValueKind>> {
    let s = |v: &str| Some(AnyValueKind::StringValue(v.to_string()));
    prop_oneof![
        prop::sample::select(vec![
            "",
            "c1",
            "c2",
            "x",
            "node-1",
            "active",
            "idle",
            "bogus",
            "ncclAllReduce",
            COMM,
            "2",
            "-1",
        ])
        .prop_map(s),
        prop::sample::select(vec![-1i64, 0, 1, 2, 3, 4, 9])
            .prop_map(|v| Some(AnyValueKind::IntValue(v))),
        prop::sample::select(vec![2.0f64, 0.5]).prop_map(|v| Some(AnyValueKind::DoubleValue(v))),
        any::<bool>().prop_map(|v| Some(AnyValueKind::BoolValue(v))),
        Just(None),
    ]
}

/// Something added to or changed in a batch.
#[derive(Debug, Clone)]
enum Noise {
    /// An attribute in the n-th attribute list (resources and points), at a position.
    Attribute(Index, Index, &'static str, Option<AnyValueKind>),
    /// A change to the n-th metric.
    Metric(Index, MetricNoise),
    Scope(Index),
}

#[derive(Debug, Clone, Copy)]
enum MetricNoise {
    UnitAndDescription,
    ToSum,
    ToHistogram,
    NoData,
    Exemplar,
}

fn noise() -> impl Strategy<Value = Noise> {
    prop_oneof![
        6 => (any::<Index>(), any::<Index>(), prop::sample::select(KEYS), value())
            .prop_map(|(l, at, k, v)| Noise::Attribute(l, at, k, v)),
        2 => (
            any::<Index>(),
            prop::sample::select(vec![
                MetricNoise::UnitAndDescription,
                MetricNoise::ToSum,
                MetricNoise::ToHistogram,
                MetricNoise::NoData,
                MetricNoise::Exemplar,
            ])
        )
            .prop_map(|(i, n)| Noise::Metric(i, n)),
        1 => any::<Index>().prop_map(Noise::Scope),
    ]
}

fn apply(req: &mut ExportMetricsServiceRequest, noise: &[Noise]) {
    for n in noise {
        match n {
            Noise::Attribute(list, at, key, v) => {
                let mut lists: Vec<&mut Vec<KeyValue>> = Vec::new();
                for rm in &mut req.resource_metrics {
                    if let Some(r) = &mut rm.resource {
                        lists.push(&mut r.attributes);
                    }
                    for m in rm.scope_metrics.iter_mut().flat_map(|sm| &mut sm.metrics) {
                        let points: &mut [NumberDataPoint] = match &mut m.data {
                            Some(MetricKind::Gauge(g)) => &mut g.data_points,
                            Some(MetricKind::Sum(s)) => &mut s.data_points,
                            _ => &mut [],
                        };
                        lists.extend(points.iter_mut().map(|dp| &mut dp.attributes));
                    }
                }
                if lists.is_empty() {
                    continue;
                }
                let i = list.index(lists.len());
                let attrs = &mut lists[i];
                let kv = KeyValue {
                    key: key.to_string(),
                    value: Some(AnyValue { value: v.clone() }),
                    ..Default::default()
                };
                let pos = at.index(attrs.len() + 1);
                attrs.insert(pos, kv);
            }
            Noise::Metric(i, change) => {
                let mut metrics: Vec<_> = req
                    .resource_metrics
                    .iter_mut()
                    .flat_map(|rm| &mut rm.scope_metrics)
                    .flat_map(|sm| &mut sm.metrics)
                    .collect();
                if metrics.is_empty() {
                    continue;
                }
                let n = metrics.len();
                let m = &mut metrics[i.index(n)];
                let points = match m.data.take() {
                    Some(MetricKind::Gauge(g)) => g.data_points,
                    Some(MetricKind::Sum(s)) => s.data_points,
                    other => {
                        m.data = other;
                        continue;
                    }
                };
                m.data = match change {
                    MetricNoise::UnitAndDescription => {
                        m.unit = "ms".into();
                        m.description = "noise".into();
                        Some(MetricKind::Gauge(component::otlp::Gauge {
                            data_points: points,
                        }))
                    }
                    MetricNoise::ToSum => Some(MetricKind::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: 2,
                        is_monotonic: true,
                    })),
                    MetricNoise::ToHistogram => {
                        // (component::otlp does not name the histogram types.)
                        let mut h = MetricKind::Histogram(Default::default());
                        if let MetricKind::Histogram(h) = &mut h {
                            h.aggregation_temporality = 2;
                            for p in &points {
                                h.data_points.push(Default::default());
                                let last = h.data_points.last_mut().unwrap();
                                last.attributes = p.attributes.clone();
                                last.time_unix_nano = p.time_unix_nano;
                                last.count = 1;
                            }
                        }
                        Some(h)
                    }
                    MetricNoise::NoData => None,
                    MetricNoise::Exemplar => {
                        let mut points = points;
                        for p in &mut points {
                            p.exemplars.push(Default::default());
                            let e = p.exemplars.last_mut().unwrap();
                            e.filtered_attributes =
                                vec![component::otlp::kv_str(attr::NODE_STATE, "idle")];
                            e.span_id = vec![1; 8];
                        }
                        Some(MetricKind::Gauge(component::otlp::Gauge {
                            data_points: points,
                        }))
                    }
                };
            }
            Noise::Scope(i) => {
                let n = req.resource_metrics.len();
                if n == 0 {
                    continue;
                }
                let rm = &mut req.resource_metrics[i.index(n)];
                rm.schema_url = "https://opentelemetry.io/schemas/1.0.0".into();
                for sm in &mut rm.scope_metrics {
                    sm.scope = Some(InstrumentationScope {
                        name: "noise".into(),
                        attributes: vec![component::otlp::kv_str(resource::CLUSTER_ID, "c9")],
                        ..Default::default()
                    });
                }
            }
        }
    }
}

/// Everything observable of a processor after one batch and one tick.
#[derive(Debug, PartialEq)]
struct Observed {
    outcome: ProcessOutcome,
    telemetry_after_process: Vec<MetricFamily>,
    tick_output: Vec<u8>,
    telemetry_after_tick: Vec<MetricFamily>,
    diagnostics: Option<serde_json::Value>,
}

fn observe(
    p: &dyn Processor,
    mut req: ExportMetricsServiceRequest,
    ctx: &BatchContext,
) -> Observed {
    let outcome = p.process(&mut req.resource_metrics, ctx);
    let mut telemetry_after_process = Vec::new();
    p.telemetry(&mut telemetry_after_process);
    let tick = p.tick(Timestamp::from_nanos(RECEIVED + 30_000_000_000));
    let tick_output = ExportMetricsServiceRequest {
        resource_metrics: tick,
    }
    .encode_to_vec();
    let mut telemetry_after_tick = Vec::new();
    p.telemetry(&mut telemetry_after_tick);
    Observed {
        outcome,
        telemetry_after_process,
        tick_output,
        telemetry_after_tick,
        diagnostics: p.diagnostics(),
    }
}

/// The pass-through processors, by what they read.
const PASS_THROUGH: [Selection; 2] = [INGERO, NCCL];

/// A new processor with the default config: `ingero` or `nccl_peer_lag`.
fn fresh(sel: Selection) -> Box<dyn Processor> {
    let defaults = serde_json::Value::Null;
    if sel == INGERO {
        Box::new(ingero_processor::create(&defaults).unwrap())
    } else {
        Box::new(nccl_processor::create(&defaults).unwrap())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn equals_a_projected_full_decode(
        health in prop::collection::vec((any::<u8>(), 0.0f64..1.0), 0..6),
        nccl in prop::collection::vec((0u8..8, 0.1f64..100.0), 0..6),
        noise in prop::collection::vec(noise(), 0..12),
    ) {
        let mut req = batch(&health, &nccl);
        apply(&mut req, &noise);
        let b = req.encode_to_vec();
        for sel in &READERS {
            prop_assert_eq!(
                decode_selected(&b, sel).unwrap(),
                decode_full_then_project(&b, sel).unwrap()
            );
        }
    }

    #[test]
    fn decoding_with_recycled_allocations_equals_a_fresh_decode(
        batches in prop::collection::vec(
            (
                prop::collection::vec((any::<u8>(), 0.0f64..1.0), 0..5),
                prop::collection::vec((0u8..8, 0.1f64..100.0), 0..3),
                prop::collection::vec(noise(), 0..8),
                prop::option::of((any::<Index>(), any::<u8>())),
            ),
            1..6,
        ),
    ) {
        // A sequence of batches of different shapes (some corrupted) through one recycler,
        // as the C ABI decodes them on one thread: each gives what a fresh decode gives.
        let mut r = Recycler::default();
        for (health, nccl, noise, edit) in &batches {
            let mut req = batch(health, nccl);
            apply(&mut req, noise);
            let mut b = req.encode_to_vec();
            if let (Some((at, byte)), false) = (edit, b.is_empty()) {
                let i = at.index(b.len());
                b[i] = *byte;
            }
            for sel in &READERS {
                let fresh = decode_selected(&b, sel);
                match decode_selected_reusing(&b, sel, &mut r) {
                    Ok(reused) => {
                        prop_assert_eq!(&reused, fresh.as_ref().unwrap());
                        r.recycle(reused);
                    }
                    Err(e) => prop_assert_eq!(e.to_string(), fresh.unwrap_err().to_string()),
                }
            }
        }
    }

    #[test]
    fn mutated_bytes_never_panic_and_agree_when_prost_accepts(
        health in prop::collection::vec((any::<u8>(), 0.0f64..1.0), 1..4),
        nccl in prop::collection::vec((0u8..8, 0.1f64..100.0), 0..3),
        edits in prop::collection::vec((any::<Index>(), any::<u8>()), 1..8),
        cut in any::<Index>(),
    ) {
        let mut b = batch(&health, &nccl).encode_to_vec();
        for (at, byte) in edits {
            let i = at.index(b.len());
            b[i] = byte;
        }
        b.truncate(cut.index(b.len() + 1));
        for sel in &READERS {
            let selected = decode_selected(&b, sel);
            if let Ok(full) = decode_full_then_project(&b, sel) {
                // Everything prost accepts decodes selectively to the same batch.
                prop_assert_eq!(selected.unwrap(), full);
            }
        }
    }

    #[test]
    fn processors_see_the_same_batch_through_either_decoder(
        health in prop::collection::vec(health(), 0..8),
        nccl in prop::collection::vec(
            (
                prop::option::of(prop::sample::select(vec!["c1", "c2", ""])),
                prop::collection::vec(collective(), 0..4),
            ),
            0..6,
        ),
        noise in prop::collection::vec(noise(), 0..16),
        ctx_cluster in prop::option::of(prop::sample::select(vec!["c1", "ctx", ""])),
    ) {
        let mut req = realistic(&health, &nccl);
        apply(&mut req, &noise);
        let bytes = req.encode_to_vec();
        let ctx = BatchContext {
            cluster_id: ctx_cluster.map(std::sync::Arc::from),
            received_at: Timestamp::from_nanos(RECEIVED), tenant: None,
        };
        for sel in PASS_THROUGH {
            let full = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
            let selected = decode_selected(&bytes, &sel).unwrap();
            let a = observe(fresh(sel).as_ref(), full, &ctx);
            let b = observe(fresh(sel).as_ref(), selected, &ctx);
            prop_assert_eq!(a, b);
        }
    }
}

/// The generator reaches the interesting outcomes (else the comparison above proves
/// little): accepted and rejected health points, aligned and dropped NCCL points.
#[test]
fn the_processor_comparison_covers_accepted_and_refused_points() {
    let health: Vec<Health> = (0..6)
        .map(|i| Health {
            cluster: "c1",
            node: i,
            score: if i == 5 { 1.5 } else { 0.9 },
            state: if i == 4 { "bogus" } else { "active" },
            cohort: "",
            world: i % 2 == 0,
        })
        .collect();
    let nccl: Vec<(Option<&'static str>, Vec<Collective>)> = (0..4u8)
        .map(|rank| {
            (
                Some("c1"),
                vec![Collective {
                    rank,
                    nranks: 4,
                    offset_ms: i16::from(rank) * 40,
                    op_seq: Some(1),
                    op: if rank == 3 { "" } else { "ncclAllReduce" },
                }],
            )
        })
        .collect();
    let req = realistic(&health, &nccl);
    let ctx = BatchContext {
        cluster_id: None,
        received_at: Timestamp::from_nanos(RECEIVED),
        tenant: None,
    };
    let json = |fams: &[MetricFamily]| serde_json::to_string(fams).unwrap();
    for sel in PASS_THROUGH {
        let bytes = req.encode_to_vec();
        let a = observe(fresh(sel).as_ref(), req.clone(), &ctx);
        let b = observe(
            fresh(sel).as_ref(),
            decode_selected(&bytes, &sel).unwrap(),
            &ctx,
        );
        assert_eq!(a, b);
        let t = json(&a.telemetry_after_tick);
        if sel == INGERO {
            assert_eq!(a.outcome.rejected_points, 2, "{t}");
        } else {
            assert_ne!(a.tick_output, Vec::<u8>::new(), "{t}");
        }
    }
}

/// Three agent pushes exactly as the Go shim passes them: `batchOf(3)` of
/// `go-shim/internal/shimprocessor/bench_test.go` marshalled by pdata's Go `ProtoMarshaler`,
/// which writes the fields of every message from the last to the first (`value` before
/// `key`, a metric's `name` after its data), unlike prost.
const GO_PDATA_3_PUSHES: &[u8] = include_bytes!("../data/go_pdata_3_pushes.pb");

#[test]
fn go_marshalled_pushes_decode_as_prost_decodes_them() {
    let mut r = Recycler::default();
    for _ in 0..2 {
        for sel in &READERS {
            let full = decode_full_then_project(GO_PDATA_3_PUSHES, sel).unwrap();
            assert_eq!(decode_selected(GO_PDATA_3_PUSHES, sel).unwrap(), full);
            let reused = decode_selected_reusing(GO_PDATA_3_PUSHES, sel, &mut r).unwrap();
            assert_eq!(reused, full);
            r.recycle(reused);
        }
    }
    // What `ingero` reads is there: per push its health metric, both ids, the point's state.
    let got = decode_selected(GO_PDATA_3_PUSHES, &INGERO).unwrap();
    assert_eq!(got.resource_metrics.len(), 3);
    for rm in &got.resource_metrics {
        let attrs = component::otlp::resource_attrs(rm);
        assert!(component::otlp::get_str(attrs, ingero_wire::resource::NODE_ID).is_some());
        let metrics: Vec<_> = rm.scope_metrics.iter().flat_map(|sm| &sm.metrics).collect();
        assert_eq!(metrics.len(), 1);
        let points = component::otlp::number_points(metrics[0]);
        assert_eq!(points.len(), 1);
        assert!(
            component::otlp::get_str(&points[0].attributes, ingero_wire::attr::NODE_STATE)
                .is_some()
        );
    }
}
