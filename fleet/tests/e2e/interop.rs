//! Real clients against the real binary: OTLP protobuf over HTTP, OTLP/gRPC (tonic) with
//! threshold metadata, `promtool check metrics`, the Python OpenTelemetry SDK, and a
//! restart that rebuilds state from pushes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use testkit::AgentPush;

fn fill(f: &Fleet, cluster: &str) {
    for i in 0..6 {
        let r = post(
            f.http(),
            &format!("/v1/metrics?cluster_id={cluster}"),
            "application/x-protobuf",
            &AgentPush::new(cluster, &format!("n{i}"), 0.95 - 0.004 * i as f64).to_proto_bytes(),
            &[],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("Content-Type"), Some("application/x-protobuf"));
    }
}

#[test]
fn protobuf_over_http_and_grpc_get_thresholds() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let t = wait_for(Duration::from_secs(15), || {
        fill(&f, "pb");
        let r = post(
            f.http(),
            "/v1/metrics?cluster_id=pb",
            "application/x-protobuf",
            &AgentPush::new("pb", "n0", 0.95).to_proto_bytes(),
            &[],
        );
        std::thread::sleep(Duration::from_millis(200));
        r.header("X-Ingero-Threshold").map(str::to_string)
    })
    .expect("protobuf pushes get the threshold header");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let grpc = f.grpc();
    rt.block_on(async move {
        let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        let mut req = tonic::Request::new(AgentPush::new("pb", "grpc-node", 0.95).to_proto());
        req.metadata_mut()
            .insert("cluster_id", "pb".parse().unwrap());
        let resp = client.export(req).await.unwrap();
        let md = resp.metadata();
        assert_eq!(
            md.get("ingero-threshold").and_then(|v| v.to_str().ok()),
            Some(t.as_str())
        );
        assert_eq!(
            md.get("ingero-quorum-met").and_then(|v| v.to_str().ok()),
            Some("true")
        );
        assert!(resp.into_inner().partial_success.is_none());

        // Without metadata, the resource's cluster attribute selects the threshold.
        let resp = client
            .export(tonic::Request::new(
                AgentPush::new("pb", "grpc-node-2", 0.95).to_proto(),
            ))
            .await
            .unwrap();
        assert!(resp.metadata().get("ingero-threshold").is_some());

        // A malformed cluster in metadata is refused.
        let mut req = tonic::Request::new(AgentPush::new("pb", "x", 0.9).to_proto());
        req.metadata_mut().insert("cluster_id", "".parse().unwrap());
        let err = client.export(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    });
    let m = get(f.telemetry(), "/metrics").text();
    assert!(
        prom_value(
            &m,
            "otelcol_receiver_accepted_metric_points_total{receiver=\"otlp\",transport=\"grpc\"}"
        )
        .unwrap_or(0.0)
            >= 18.0
    );
}

fn promtool() -> Option<String> {
    let ok = Command::new("promtool")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then(|| "promtool".to_string())
}

/// `promtool check metrics`: exit 1 is a format error; exit 3 means only lint advice.
/// Lint findings must be among the documented exceptions: the agent's
/// `ingero.node.cpu_stall_nanos_total` (unit `ns`, a wire-contract name) translated with
/// the OTel unit rule (promtool prefers base units).
fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    const ALLOWED: [&str; 1] = [
        "ingero_node_cpu_stall_nanos_nanoseconds_total use base unit \"seconds\" instead of \"nanoseconds\"",
    ];
    let ok = match out.status.code() {
        Some(0) => true,
        Some(3) => report
            .lines()
            .filter(|l| !l.trim().is_empty())
            .all(|l| ALLOWED.contains(&l.trim())),
        _ => false,
    };
    (ok, report)
}

#[test]
fn prometheus_and_telemetry_endpoints_pass_promtool() {
    let Some(_) = promtool() else {
        eprintln!(
            "SKIP: promtool not installed (scripts/test-all.sh installs the Debian package prometheus)"
        );
        return;
    };
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    wait_for(Duration::from_secs(15), || {
        fill(&f, "prom");
        let p = get(f.prometheus(), "/metrics").text();
        p.contains("ingero_fleet_threshold{cluster_id=\"prom\"")
            .then_some(())
    })
    .expect("threshold series appears");
    let mut push = AgentPush::new("prom", "n9", 0.93).gpu("NVIDIA H100 80GB HBM3", 8);
    push.with_cgroup_sums = true;
    assert_eq!(push_json(f.http(), "prom", &push.to_json()).status, 200);
    let p = get(f.prometheus(), "/metrics");
    assert!(
        p.header("Content-Type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = p.text();
    let (ok, out) = promtool_check(&text);
    // promtool lints (e.g. naming advice) print but only real format errors fail the check.
    assert!(ok, "promtool check metrics failed:\n{out}\n---\n{text}");
    assert!(
        text.contains("ingero_node_health_score"),
        "pushed data is exported:\n{text}"
    );
    assert!(
        text.contains("ingero_cluster_id=\"prom\""),
        "resource attributes become labels"
    );
    let t = get(f.telemetry(), "/metrics").text();
    let (ok, out) = promtool_check(&t);
    assert!(ok, "telemetry endpoint fails promtool:\n{out}\n---\n{t}");
    assert!(t.contains("ingero_fleet_push_duration_seconds_bucket"));
}

#[test]
fn python_otel_sdk_pushes_over_http_and_grpc_reach_prometheus() {
    if !python_has_otel() {
        eprintln!(
            "SKIP: Python opentelemetry-sdk/exporters not installed (scripts/test-all.sh installs them)"
        );
        return;
    }
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let script = format!("{}/tests/otel_sdk_client.py", env!("CARGO_MANIFEST_DIR"));
    for (proto, endpoint) in [
        ("http", format!("http://{}/v1/metrics", f.http())),
        ("grpc", format!("http://{}", f.grpc())),
    ] {
        let out = Command::new("python3")
            .args([&script, proto, &endpoint])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{proto} client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = get(f.prometheus(), "/metrics").text();
    for proto in ["http", "grpc"] {
        let series = "sdk_requests_total{";
        let found = text.lines().any(|l| {
            l.starts_with(series)
                && l.contains(&format!("transport=\"{proto}\""))
                && l.ends_with(" 7")
        });
        assert!(
            found,
            "{proto} SDK counter with value 7 on the Prometheus endpoint:\n{text}"
        );
    }
    assert!(
        text.contains("service_name=\"sdk-test\"") || text.contains("job=\"sdk-test\""),
        "SDK resource identity present"
    );
}

#[test]
fn restart_serves_thresholds_again_within_one_interval_of_pushes_resuming() {
    let cfg = test_config("1s", &[]);
    let f = Fleet::start_with(&cfg, &[]);
    let addr = f.http();
    let port_cfg = cfg.replacen(
        "      http:\n        endpoint: 127.0.0.1:0",
        &format!("      http:\n        endpoint: {addr}"),
        1,
    );
    let push_all = |a| {
        let mut last = None;
        for i in 0..6 {
            let r = push_json(
                a,
                "rs",
                &AgentPush::new("rs", &format!("n{i}"), 0.95 - 0.004 * i as f64).to_json(),
            );
            last = r.header("X-Ingero-Threshold").map(str::to_string);
        }
        last
    };
    wait_for(Duration::from_secs(15), || {
        let x = push_all(addr);
        std::thread::sleep(Duration::from_millis(200));
        x
    })
    .expect("threshold before restart");
    drop(f); // SIGKILL: no graceful anything
    let f2 = Fleet::start_with(&port_cfg, &[]);
    assert_eq!(f2.http(), addr);
    let resumed = Instant::now();
    let got = wait_for(Duration::from_secs(10), || {
        let x = push_all(addr);
        std::thread::sleep(Duration::from_millis(100));
        x
    });
    let took = resumed.elapsed();
    assert!(got.is_some(), "threshold served again after restart");
    // One push interval (1s) plus one tick (1s), with scheduling slack.
    assert!(
        took < Duration::from_millis(3500),
        "state rebuilt from pushes in {took:?}"
    );
    eprintln!("restart: first valid threshold {took:?} after pushes resumed");
}
