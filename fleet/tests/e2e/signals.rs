//! Signals without a pipeline are refused as otelcol refuses them (HTTP 404, gRPC
//! UNIMPLEMENTED) and counted; a logs or traces pipeline to `debug` carries the data. The
//! client is the real OpenTelemetry Python SDK's OTLP exporters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn python_has_otel_exporters() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.exporter.otlp.proto.http.trace_exporter, \
             opentelemetry.exporter.otlp.proto.grpc.trace_exporter, \
             opentelemetry.exporter.otlp.proto.http._log_exporter, \
             opentelemetry.exporter.otlp.proto.grpc._log_exporter",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Metrics to prometheus and logs to debug; no traces pipeline.
fn config() -> String {
    r#"
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:0}
      http: {endpoint: 127.0.0.1:0}
exporters:
  prometheus: {endpoint: 127.0.0.1:0}
  debug: {verbosity: basic}
service:
  pipelines:
    metrics: {receivers: [otlp], exporters: [prometheus]}
    logs: {receivers: [otlp], exporters: [debug]}
  telemetry:
    metrics:
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: 0}}}
"#
    .to_string()
}

/// Run the SDK client; (exit success, stdout + stderr).
fn sdk_export(proto: &str, endpoint: &str, signal: &str) -> (bool, String) {
    let script = format!("{}/tests/otel_sdk_signals.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .args([&script, proto, endpoint, signal])
        .output()
        .expect("run python3");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn traces_without_a_pipeline_are_refused_and_logs_reach_debug() {
    if !python_has_otel_exporters() {
        eprintln!(
            "SKIP: Python opentelemetry-sdk/exporters not installed (scripts/test-all.sh installs them)"
        );
        return;
    }
    let f = Fleet::start_with(&config(), &[]);
    let http_traces = format!("http://{}/v1/traces", f.http());
    let http_logs = format!("http://{}/v1/logs", f.http());
    let grpc = format!("http://{}", f.grpc());

    // What the SDK sees: a failed export on both transports.
    let (ok, out) = sdk_export("http", &http_traces, "traces");
    assert!(!ok && out.contains("FAILURE"), "HTTP traces export: {out}");
    let (ok, out) = sdk_export("grpc", &grpc, "traces");
    assert!(!ok && out.contains("FAILURE"), "gRPC traces export: {out}");

    // What is on the wire: 404 with an OTLP status body, and UNIMPLEMENTED.
    let r = post(
        f.http(),
        "/v1/traces",
        "application/json",
        br#"{"resourceSpans":[]}"#,
        &[],
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("no traces pipeline"), "{}", r.text());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let code = rt.block_on(async {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
        let mut c = TraceServiceClient::connect(grpc.clone()).await.unwrap();
        c.export(ExportTraceServiceRequest::default())
            .await
            .unwrap_err()
            .code()
    });
    assert_eq!(code, tonic::Code::Unimplemented);

    // Logs have a pipeline: both transports succeed and reach the debug exporter.
    for (proto, endpoint) in [("http", &http_logs), ("grpc", &grpc)] {
        let (ok, out) = sdk_export(proto, endpoint, "logs");
        assert!(ok && out.contains("SUCCESS"), "{proto} logs export: {out}");
    }
    let logged = wait_for(Duration::from_secs(5), || {
        let n = f
            .log_text()
            .lines()
            .filter(|l| l.contains("[debug] Logs: resource logs: 1, log records: 1"))
            .count();
        (n == 2).then_some(n)
    });
    assert_eq!(logged, Some(2), "debug exporter output:\n{}", f.log_text());

    let t = get(f.telemetry(), "/metrics").text();
    for transport in ["http", "grpc"] {
        // Two refusals per transport: the SDK's export and the raw one above.
        let series = format!(
            "ingero_fleet_rejected_requests_total{{receiver=\"otlp\",transport=\"{transport}\",reason=\"no_pipeline\"}}"
        );
        assert_eq!(prom_value(&t, &series), Some(2.0), "{series} in:\n{t}");
        let accepted = format!(
            "otelcol_receiver_accepted_log_records_total{{receiver=\"otlp\",transport=\"{transport}\"}}"
        );
        assert_eq!(prom_value(&t, &accepted), Some(1.0), "{accepted} in:\n{t}");
    }
    assert_eq!(
        prom_value(
            &t,
            "otelcol_exporter_sent_log_records_total{exporter=\"debug\"}"
        ),
        Some(2.0),
        "{t}"
    );
}
