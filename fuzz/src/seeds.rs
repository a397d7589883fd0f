//! Seed corpora, built from the project's real inputs: agent pushes from `testkit` (JSON
//! and their protobuf encodings, gzip-compressed too), the embedded default config and the
//! example config, and C ABI call sequences that take a processor through pushes and ticks
//! to a published threshold.

use std::io::Write;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use testkit::{AgentPush, NcclPoint};

use crate::ffi::{Op, Writer};

/// One JSON body per metric kind and attribute kind, in the OTLP/JSON spellings the decoder
/// accepts (string and number int64s, snake_case names, `null`, unknown fields).
const ALL_KINDS_JSON: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[
 {"key":"s","value":{"stringValue":"x"}},{"key":"b","value":{"boolValue":true}},
 {"key":"i","value":{"intValue":"-3"}},{"key":"d","value":{"doubleValue":1.5}},
 {"key":"a","value":{"arrayValue":{"values":[{"intValue":1},{"stringValue":"y"}]}}},
 {"key":"k","value":{"kvlistValue":{"values":[{"key":"z","value":{"bytesValue":"AQI="}}]}}}],
 "droppedAttributesCount":0},
 "scopeMetrics":[{"scope":{"name":"s","version":"1","attributes":[]},"schemaUrl":"",
 "metrics":[
 {"name":"g","unit":"1","gauge":{"dataPoints":[{"timeUnixNano":"1","asDouble":0.5,
   "exemplars":[{"timeUnixNano":"1","asInt":"2","spanId":"0102030405060708",
   "traceId":"0102030405060708090a0b0c0d0e0f10","filteredAttributes":[]}]}]}},
 {"name":"s","sum":{"dataPoints":[{"start_time_unix_nano":0,"time_unix_nano":2,"asInt":7,"flags":1}],
   "aggregationTemporality":2,"isMonotonic":true}},
 {"name":"h","histogram":{"dataPoints":[{"count":"3","sum":1.5,"min":0.1,"max":1.0,
   "bucketCounts":["1",2],"explicitBounds":[0.5]}],"aggregationTemporality":1}},
 {"name":"e","exponentialHistogram":{"dataPoints":[{"count":4,"scale":2,"zeroCount":1,
   "positive":{"offset":-1,"bucketCounts":[1,2]},"negative":{"bucketCounts":[]},
   "zeroThreshold":0.0}]}},
 {"name":"q","summary":{"dataPoints":[{"count":2,"sum":3.0,
   "quantileValues":[{"quantile":0.5,"value":"NaN"},{"quantile":"1","value":2}]}]},
   "metadata":[{"key":"m","value":null}],"unknownField":{"x":[1,2,{"y":null}]}}
 ]}]}]}"#;

/// Small configs beside the real ones: TOML, env references, each section's edge.
const CONFIGS: [(&str, &str); 6] = [
    (
        "minimal.yaml",
        "receivers: {otlp: }\nexporters: {debug: }\nservice:\n  pipelines:\n    metrics: {receivers: [otlp], exporters: [debug]}\n",
    ),
    (
        "env.yaml",
        "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: ${env:HOST}:${PORT}\nprocessors:\n  ingero:\n    threshold: {k: \"${env:K}\"}\n    push_interval: ${env:MISSING:-5s}\nexporters:\n  otlphttp:\n    endpoint: http://127.0.0.1:4318\n    headers: {authorization: \"Bearer $$x\"}\nservice:\n  pipelines:\n    metrics/a: {receivers: [otlp], processors: [ingero], exporters: [otlphttp]}\n    traces: {receivers: [otlp], exporters: [otlphttp]}\n",
    ),
    (
        "config.toml",
        "[receivers.otlp.protocols.grpc]\nendpoint = \"127.0.0.1:4317\"\n\n[processors.ingero]\npush_interval = \"10s\"\nttl_multiplier = 5\n[processors.ingero.quorum]\nstatistical_min = 5\n\n[exporters.prometheus]\nendpoint = \"127.0.0.1:8889\"\n\n[service.pipelines.metrics]\nreceivers = [\"otlp\"]\nprocessors = [\"ingero\"]\nexporters = [\"prometheus\"]\n",
    ),
    (
        "errors.yaml",
        "receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:4318, middlewares: [{id: nope}]}}}}\nprocessors: {ingero: {threshold: {k: -1}}, ingero/b: }\nconnectors: {x: }\nexporters: {prometheus: {endpoint: 127.0.0.1:4318}}\nservice:\n  extensions: [missing]\n  pipelines:\n    metrics: {receivers: [otlp, otlp], processors: [ingero, ingero/b], exporters: []}\n    logs: {receivers: [otlp], processors: [ingero], exporters: [prometheus]}\n    bogus: {}\n",
    ),
    (
        "grpc-otlp.yaml",
        "receivers: {otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317, middlewares: [{id: ingero_threshold}]}}}}\nprocessors:\n  nccl_peer_lag: {tick_interval: 5s}\n  provider_lookup:\nextensions: {ingero_threshold: {agent_endpoint: 127.0.0.1:0, admin_endpoint: \"\"}}\nexporters:\n  otlp: {endpoint: 127.0.0.1:4327}\nservice:\n  extensions: [ingero_threshold]\n  telemetry: {logs: {level: debug, encoding: json}, metrics: {level: none}}\n  pipelines:\n    metrics: {receivers: [otlp], processors: [nccl_peer_lag, provider_lookup], exporters: [otlp]}\n",
    ),
    (
        "json.yaml",
        "{\"service\": {\"pipelines\": {\"metrics\": {\"receivers\": [\"otlp\"]}}}, \"receivers\": {\"otlp\": null}}\n",
    ),
];

/// The agent bodies every OTLP seed set starts from.
fn agent_json() -> Vec<(String, String)> {
    let t = testkit::AgentPush::new("prod", "gpu-node-01", 0.92).at(1_763_769_600_000_000_000);
    let mut out = vec![
        ("agent_push.json".to_string(), t.to_json()),
        (
            "agent_push_gpu.json".into(),
            AgentPush::new("prod", "gpu-node-02", 0.41)
                .gpu("NVIDIA H100 80GB HBM3", 8)
                .world(16, 3)
                .provider("aws")
                .state("calibrating")
                .to_json(),
        ),
        (
            "straggler_event.json".into(),
            t.straggler_event_json(1, 0.72, "0f8e2a9c-1b7d-4e1f-9a8b-2c3d4e5f6a7b"),
        ),
        ("all_kinds.json".into(), ALL_KINDS_JSON.to_string()),
    ];
    let mut p = NcclPoint::all_reduce("a1b2c3d4", 2, 8, 3.25, 1_763_769_600_000_000_000);
    p.op_seq = Some(42);
    out.push((
        "nccl.json".into(),
        testkit::nccl_export_json(Some("prod"), "gpu-node-03", &[p]),
    ));
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec does not fail.
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn to_proto(json: &str) -> Vec<u8> {
    collector_host::receiver::otlp_json::decode_metrics(json.as_bytes())
        .unwrap_or_else(|e| panic!("seed JSON does not decode: {e}"))
        .encode_to_vec()
}

/// `(file name, bytes)` seeds of a target.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "otlp_json" => {
            let mut v: Vec<(String, Vec<u8>)> = agent_json()
                .into_iter()
                .map(|(n, j)| (n, j.into_bytes()))
                .collect();
            v.push(("gzip_agent_push.json.gz".into(), gzip(&v[0].1)));
            v.push(("empty_object.json".into(), b"{}".to_vec()));
            v
        }
        "otlp_proto" => {
            let mut v: Vec<(String, Vec<u8>)> = agent_json()
                .into_iter()
                .map(|(n, j)| (n.replace(".json", ".pb"), to_proto(&j)))
                .collect();
            v.push(("gzip_agent_push.pb.gz".into(), gzip(&v[0].1)));
            v.push((
                "one_empty_resource.pb".into(),
                ExportMetricsServiceRequest {
                    resource_metrics: vec![Default::default()],
                }
                .encode_to_vec(),
            ));
            v
        }
        "config" => {
            let mut v = vec![
                (
                    "default.yaml".to_string(),
                    ingero_fleet_dist::EMBEDDED_DEFAULT
                        .as_bytes()
                        .to_vec(),
                ),
                (
                    "fleet-config.yaml".into(),
                    include_bytes!("../../examples/fleet-config.yaml").to_vec(),
                ),
            ];
            v.extend(
                CONFIGS
                    .iter()
                    .map(|(n, c)| (n.to_string(), c.as_bytes().to_vec())),
            );
            v
        }
        "ffi" => ffi_seeds(),
        _ => Vec::new(),
    }
}

fn ffi_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();

    // A threshold published: extension, `ingero` started with it, four rounds of ten
    // agents in two clusters, ticks, reads and routes.
    let mut w = Writer::default();
    w.op(Op::ExtensionNew)
        .ty(3)
        .chunk(b"agent_endpoint: 127.0.0.1:0\nadmin_endpoint: 127.0.0.1:0\n");
    w.op(Op::ProcessorNew)
        .ty(0)
        .chunk(b"push_interval: 1s\nttl_multiplier: 5\n");
    w.op(Op::ProcessorStart).byte(0).byte(1);
    for round in 0..4u8 {
        for c in 0..2u8 {
            w.op(Op::ProcessAgents)
                .byte(0)
                .cluster(c)
                .byte(9)
                .byte(0x80);
            w.time(if c == 0 { 1 } else { 0 });
            for i in 0..10u8 {
                w.byte(if i == 3 { 40 } else { 220 + i + round });
            }
        }
        w.op(Op::Tick).byte(0).time(0);
    }
    w.op(Op::Threshold).byte(0).cluster(0);
    w.op(Op::PushHeaders).byte(0).cluster(1);
    w.op(Op::Route).byte(0).byte(0).byte(0).byte(0).byte(1);
    w.op(Op::Route).byte(0).byte(1).byte(0).byte(1).byte(0);
    w.op(Op::Introspect).byte(0).byte(0);
    out.push(("threshold_published.bin".to_string(), w.bytes.clone()));

    // Every processor type on raw protobuf batches, then ticks and introspection.
    let mut w = Writer::default();
    let batch = AgentPush::new("c0", "n1", 0.8)
        .gpu("NVIDIA A100-SXM4-80GB", 8)
        .provider("gcp")
        .to_proto_bytes();
    let mut p = NcclPoint::all_reduce("ffee", 0, 2, 5.5, crate::ffi::T0);
    p.op_seq = Some(7);
    let nccl = to_proto(&testkit::nccl_export_json(Some("c0"), "n1", &[p]));
    for (i, cfg) in [
        (0u8, &b""[..]),
        (1, b"tick_interval: 5s\n"),
        (2, b"{\"tick_interval\": \"2s\"}"),
    ] {
        w.op(Op::ProcessorNew).ty(i).chunk(cfg);
    }
    for p in 0..3u8 {
        w.op(Op::ProcessorStart).byte(p).byte(0);
        w.op(Op::ProcessBytes)
            .byte(p)
            .chunk(&batch)
            .cluster(0)
            .time(1);
        w.op(Op::ProcessBytes)
            .byte(p)
            .chunk(&nccl)
            .cluster(0)
            .time(1);
        w.op(Op::Tick).byte(p).time(10);
        w.op(Op::Introspect).byte(p).byte(0);
    }
    out.push(("all_processors.bin".into(), w.bytes.clone()));

    // Refusals: bad configs, unknown and wrong-kind types, raw ids, bad batches, cluster
    // ids, NULL arguments.
    let mut w = Writer::default();
    w.op(Op::ProcessorNew)
        .ty(0)
        .chunk(b"threshold: {k: -1}\npush_interval: 0s\nbogus: 1\n");
    w.op(Op::ProcessorNew).ty(3).chunk(b"");
    w.op(Op::ExtensionNew).ty(0).chunk(b"");
    w.op(Op::ProcessorNew).raw_ty("nope/x").chunk(b"");
    w.op(Op::ProcessorNew).raw_ty("ingero/").chunk(b"");
    w.op(Op::ConfigValidate).ty(1).chunk(b"[1, 2");
    w.op(Op::ProcessorNew).ty(4).chunk(b"");
    w.op(Op::ProcessBytes)
        .byte(0)
        .chunk(&batch[..batch.len() / 2])
        .raw_cluster(b"c\x01")
        .time(1);
    w.op(Op::QueryCluster)
        .chunk(b"cluster_id=a%0d%0aX:1&cluster_id=b");
    w.op(Op::QueryCluster)
        .chunk(b"x=1&cluster_id=gpu+cluster%2F7");
    w.op(Op::ValidateClusterIds).chunk(b"prod\t1");
    w.op(Op::ExtensionNew).ty(5).chunk(b"max_clusters: 2\n");
    w.op(Op::Threshold).byte(0).raw_cluster(&[0xff, 0xfe]);
    w.op(Op::Route)
        .byte(0)
        .byte(0)
        .byte(0xff)
        .chunk(b"DELETE")
        .byte(2)
        .byte(0xff)
        .chunk(b"cluster_id=%zz");
    for i in 0..6u8 {
        w.op(Op::NullArguments).byte(i).byte(0);
    }
    w.op(Op::StartShutdown).byte(1).byte(0);
    w.op(Op::StartShutdown).byte(3).byte(0);
    w.op(Op::Free).byte(1).byte(0);
    w.op(Op::Free).byte(0).byte(0);
    out.push(("refusals.bin".into(), w.bytes.clone()));
    out
}
