//! The receivers accept what otelcol's accept, against the real binary (issue 18, item 5):
//! every Content-Encoding (raw OTLP/HTTP requests in each codec, one decompression bomb per
//! codec refused with 413 while the process keeps serving, the Python OpenTelemetry SDK
//! exporting with deflate and gzip over HTTP and gRPC, a tonic client sending zstd over
//! gRPC), and exponential histograms (the SDK's reach Prometheus as bucketed histograms; a
//! point the exporter cannot store is answered as partial success).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use testkit::AgentPush;

fn compress(codec: &str, data: &[u8]) -> Vec<u8> {
    match codec {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "zlib" | "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "zstd" => zstd::stream::encode_all(data, 3).unwrap(),
        "snappy" => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        "x-snappy-framed" => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.into_inner().unwrap()
        }
        "lz4" => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        other => panic!("no compressor for {other}"),
    }
}

const CODECS: [&str; 7] = [
    "gzip",
    "zlib",
    "deflate",
    "zstd",
    "snappy",
    "x-snappy-framed",
    "lz4",
];

fn accepted(f: &Fleet, transport: &str) -> f64 {
    prom_value(
        &get(f.telemetry(), "/metrics").text(),
        &format!(
            "otelcol_receiver_accepted_metric_points_total{{receiver=\"otlp\",transport=\"{transport}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

#[test]
fn every_codec_is_accepted_and_every_bomb_refused_over_http() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    for (i, codec) in CODECS.iter().enumerate() {
        let node = format!("node-{codec}");
        let push = AgentPush::new("codecs", &node, 0.9 - 0.01 * i as f64);
        for (ct, body) in [
            ("application/x-protobuf", push.to_proto_bytes()),
            ("application/json", push.to_json().into_bytes()),
        ] {
            let r = post(
                f.http(),
                "/v1/metrics?cluster_id=codecs",
                ct,
                &compress(codec, &body),
                &[("Content-Encoding", codec)],
            );
            assert_eq!(r.status, 200, "{codec} {ct}: {}", r.text());
        }
    }
    // Each node's health score reached the exporter, so each body decoded to the push.
    let page = wait_for(Duration::from_secs(10), || {
        let p = get(f.prometheus(), "/metrics").text();
        CODECS
            .iter()
            .all(|c| p.contains(&format!("ingero_node_id=\"node-{c}\"")))
            .then_some(p)
    });
    assert!(page.is_some(), "every codec's push on the exporter");

    // A bomb per codec: 64 MiB of spaces, over the default 20 MiB cap once inflated.
    let spaces = vec![b' '; 64 * 1024 * 1024];
    for codec in CODECS {
        let bomb = compress(codec, &spaces);
        assert!(bomb.len() < 4 * 1024 * 1024, "{codec}: {}", bomb.len());
        let r = post(
            f.http(),
            "/v1/metrics?cluster_id=codecs",
            "application/x-protobuf",
            &bomb,
            &[("Content-Encoding", codec)],
        );
        assert_eq!(r.status, 413, "{codec} bomb: {}", r.text());
    }
    // Garbage under a known codec is a 400 that names it; an unknown codec is a 415.
    let r = post(
        f.http(),
        "/v1/metrics",
        "application/x-protobuf",
        b"definitely not lz4",
        &[("Content-Encoding", "lz4")],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("lz4"), "{}", r.text());
    let r = post(
        f.http(),
        "/v1/metrics",
        "application/x-protobuf",
        b"x",
        &[("Content-Encoding", "br")],
    );
    assert_eq!(r.status, 415, "{}", r.text());
    // Still serving after every refusal.
    let r = post(
        f.http(),
        "/v1/metrics?cluster_id=codecs",
        "application/x-protobuf",
        &AgentPush::new("codecs", "after", 0.9).to_proto_bytes(),
        &[],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn tonic_client_sends_zstd_over_grpc() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let grpc = f.grpc();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for enc in [
        tonic::codec::CompressionEncoding::Zstd,
        tonic::codec::CompressionEncoding::Gzip,
    ] {
        rt.block_on(async move {
            let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
                .await
                .unwrap()
                .send_compressed(enc);
            let req = tonic::Request::new(AgentPush::new("z", &format!("{enc:?}"), 0.9).to_proto());
            client.export(req).await.unwrap();
        });
    }
    assert!(
        accepted(&f, "grpc") >= 2.0,
        "both gRPC exports counted as accepted"
    );
    let page = wait_for(Duration::from_secs(10), || {
        let p = get(f.prometheus(), "/metrics").text();
        (p.contains("ingero_node_id=\"Zstd\"") && p.contains("ingero_node_id=\"Gzip\""))
            .then_some(())
    });
    assert!(page.is_some(), "zstd and gzip gRPC pushes on the exporter");
}

#[test]
fn python_otel_sdk_exports_with_deflate_and_gzip() {
    if !python_has_otel() {
        eprintln!(
            "SKIP: Python opentelemetry-sdk/exporters not installed (scripts/test-all.sh installs them)"
        );
        return;
    }
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let script = format!("{}/tests/otel_sdk_client.py", env!("CARGO_MANIFEST_DIR"));
    let cases = [
        ("http", "deflate", format!("http://{}/v1/metrics", f.http())),
        ("http", "gzip", format!("http://{}/v1/metrics", f.http())),
        ("grpc", "deflate", format!("http://{}", f.grpc())),
        ("grpc", "gzip", format!("http://{}", f.grpc())),
    ];
    for (proto, compression, endpoint) in &cases {
        let out = Command::new("python3")
            .args([script.as_str(), proto, endpoint.as_str(), compression])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{proto} {compression} client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = get(f.prometheus(), "/metrics").text();
    for (proto, compression, _) in &cases {
        let found = text.lines().any(|l| {
            l.starts_with("sdk_requests_total{")
                && l.contains(&format!("transport=\"{proto}\""))
                && l.contains(&format!("compression=\"{compression}\""))
                && l.ends_with(" 7")
        });
        assert!(
            found,
            "{proto} {compression} SDK counter on the Prometheus endpoint:\n{text}"
        );
    }
}

#[test]
fn python_sdk_exponential_histogram_reaches_prometheus_as_buckets() {
    if !python_has_otel() {
        eprintln!(
            "SKIP: Python opentelemetry-sdk/exporters not installed (scripts/test-all.sh installs them)"
        );
        return;
    }
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let script = format!(
        "{}/tests/otel_sdk_exp_histogram.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("python3")
        .args([&script, &format!("http://{}/v1/metrics", f.http())])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "SDK export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = get(f.prometheus(), "/metrics").text();
    assert!(
        text.contains("# TYPE sdk_latency_milliseconds histogram"),
        "{text}"
    );
    let series = |suffix: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("sdk_latency_milliseconds_{suffix}{{")))
            .collect()
    };
    let count = series("count");
    assert_eq!(count.len(), 1, "{text}");
    assert!(count[0].ends_with(" 10"), "{}", count[0]);
    assert!(series("sum")[0].ends_with(" 55"), "{text}");
    // Real buckets, not only +Inf: the median is readable from them.
    let buckets = series("bucket");
    assert!(buckets.len() > 5, "{buckets:?}");
    let le_value = |l: &str| -> (f64, f64) {
        let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        (le, l.rsplit(' ').next().unwrap().parse().unwrap())
    };
    let (le5, at5) = buckets
        .iter()
        .map(|l| le_value(l))
        .filter(|(le, _)| *le >= 5.0)
        .fold((f64::INFINITY, 0.0), |a, b| if b.0 < a.0 { b } else { a });
    assert!(le5 < 5.5, "a bucket bound just above 5: {buckets:?}");
    assert_eq!(at5, 5.0, "values 1..=5 are at or below {le5}: {buckets:?}");
}

/// A point the exporter cannot store is answered as OTLP partial success, not silently
/// dropped: here an exponential histogram with a scale outside OTLP's -10..=20.
#[test]
fn a_dropped_exponential_histogram_point_is_reported_as_partial_success() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let body = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"raw"}}]},
      "scopeMetrics":[{"metrics":[
        {"name":"bad.hist","exponentialHistogram":{"aggregationTemporality":2,"dataPoints":[
          {"timeUnixNano":"1700000000000000000","count":"1","sum":1,"scale":25,"positive":{"offset":0,"bucketCounts":["1"]}}]}},
        {"name":"good.gauge","gauge":{"dataPoints":[{"timeUnixNano":"1700000000000000000","asDouble":1}]}}
      ]}]}]}"#;
    let r = post(
        f.http(),
        "/v1/metrics",
        "application/json",
        body.as_bytes(),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    let ps = &j["partialSuccess"];
    let rejected = ps["rejectedDataPoints"]
        .as_str()
        .map(|s| s.parse::<u64>().unwrap())
        .or(ps["rejectedDataPoints"].as_u64());
    assert_eq!(rejected, Some(1), "{j}");
    let msg = ps["errorMessage"].as_str().unwrap_or_default();
    assert!(msg.contains("invalid_histogram"), "{msg}");
    assert!(
        get(f.prometheus(), "/metrics")
            .text()
            .contains("good_gauge"),
        "the good point of the batch is stored"
    );
}

/// The same over gRPC: the `ExportMetricsServiceResponse` carries the partial success.
#[test]
fn a_dropped_point_is_reported_as_partial_success_over_grpc() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
    use opentelemetry_proto::tonic::metrics::v1::{
        ExponentialHistogram, ExponentialHistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics,
        metric,
    };
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let bad = Metric {
        name: "bad.hist".into(),
        data: Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
            aggregation_temporality: 2,
            data_points: vec![ExponentialHistogramDataPoint {
                time_unix_nano: 1_700_000_000_000_000_000,
                count: 1,
                scale: -11,
                positive: Some(Buckets {
                    offset: 0,
                    bucket_counts: vec![1],
                }),
                ..Default::default()
            }],
        })),
        ..Default::default()
    };
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![bad],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let grpc = f.grpc();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resp = rt.block_on(async move {
        let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        client
            .export(tonic::Request::new(req))
            .await
            .unwrap()
            .into_inner()
    });
    let ps = resp.partial_success.expect("partial success");
    assert_eq!(ps.rejected_data_points, 1, "{ps:?}");
    assert!(ps.error_message.contains("invalid_histogram"), "{ps:?}");
}
