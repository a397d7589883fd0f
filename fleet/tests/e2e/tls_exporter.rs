//! The `otlp` and `otlphttp` exporters over TLS: Fleet forwards to a second `ingero-fleet`
//! whose OTLP receivers require mTLS (client certificates of the test CA) and a bearer
//! token, the way Fleet forwards to Echo (whose receivers are the same host code). Both
//! transports deliver; a client without a certificate, or with a wrong token, delivers
//! nothing and the exporter counts the failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::tls_support;

use std::time::Duration;

use common::*;
use testkit::AgentPush;
use tls_support::*;

const TOKEN: &str = "fwd-7c1e2d3f4a5b6c7d8e9f0a1b";

/// The receiving side: OTLP gRPC and HTTP behind mTLS and `ingero_auth`, data to its
/// prometheus exporter (plaintext, loopback).
fn receiver_config(pki: &Pki) -> String {
    let mtls = pki.tls_block(true, "");
    let tokens = pki.p("tokens.yaml");
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        tls: {mtls}
        auth: {{authenticator: ingero_auth}}
      http:
        endpoint: 127.0.0.1:0
        tls: {mtls}
        auth: {{authenticator: ingero_auth}}
extensions:
  ingero_auth:
    tokens_file: {tokens}
exporters:
  prometheus:
    endpoint: 127.0.0.1:0
service:
  extensions: [ingero_auth]
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus: {{host: 127.0.0.1, port: 0}}
"#
    )
}

/// The forwarding side: plaintext OTLP/HTTP in, `exporters` out.
fn forwarder_config(exporters: &str, names: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
exporters:
{exporters}
service:
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [{names}]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus: {{host: 127.0.0.1, port: 0}}
"#
    )
}

fn exporter_block(name: &str, endpoint: &str, tls: &str, token: &str) -> String {
    format!(
        "  {name}:\n    endpoint: {endpoint}\n    tls: {tls}\n    \
         headers: {{Authorization: \"Bearer {token}\"}}\n    timeout: 2s\n    \
         retry_on_failure: {{enabled: false}}\n"
    )
}

fn setup() -> (Pki, Fleet) {
    let pki = Pki::new("exp-tls");
    let client = leaf(&pki.ca, &["fleet-forwarder"], 200, true, Validity::Current);
    write_private(&pki.path("client.pem"), &client.cert_pem);
    write_private(&pki.path("client.key"), &client.key_pem);
    write_private(
        &pki.path("tokens.yaml"),
        &format!("- name: forwarder\n  token: {TOKEN}\n  clusters: ['*']\n"),
    );
    let rx = Fleet::start_with(&receiver_config(&pki), &[]);
    (pki, rx)
}

fn push(f: &Fleet, cluster: &str, node: &str) {
    let body = AgentPush::new(cluster, node, 0.93).to_json();
    let r = post(
        f.http(),
        &format!("/v1/metrics?cluster_id={cluster}"),
        "application/json",
        body.as_bytes(),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

fn counter(f: &Fleet, prefix: &str) -> f64 {
    let page = get(f.telemetry(), "/metrics").text();
    page.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn otlp_and_otlphttp_forward_over_mtls_with_a_bearer_token() {
    let (pki, rx) = setup();
    let tls = format!(
        "{{ca_file: {}, cert_file: {}, key_file: {}}}",
        pki.p("ca.pem"),
        pki.p("client.pem"),
        pki.p("client.key")
    );
    // gRPC without a scheme: TLS by default. HTTP with an https URL.
    let exporters = exporter_block("otlp/rx", &rx.grpc().to_string(), &tls, TOKEN)
        + &exporter_block(
            "otlphttp/rx",
            &format!("https://{}", rx.http()),
            &tls,
            TOKEN,
        );
    let fwd = Fleet::start_with(&forwarder_config(&exporters, "otlp/rx, otlphttp/rx"), &[]);
    push(&fwd, "tls-a", "n0");
    push(&fwd, "tls-a", "n1");
    let page = wait_for(Duration::from_secs(20), || {
        let p = get(rx.prometheus(), "/metrics").text();
        (p.contains("ingero_node_id=\"n0\"") && p.contains("ingero_node_id=\"n1\"")).then_some(p)
    })
    .unwrap_or_else(|| panic!("nothing forwarded; forwarder log:\n{}", fwd.log_text()));
    assert!(page.contains("ingero_cluster_id=\"tls-a\""));
    // Both transports delivered: the receiver accepted the points on each.
    let accepted = |transport: &str| {
        counter(
            &rx,
            &format!(
                "otelcol_receiver_accepted_metric_points_total{{receiver=\"otlp\",transport=\"{transport}\"}}"
            ),
        )
    };
    wait_for(Duration::from_secs(20), || {
        (accepted("grpc") > 0.0 && accepted("http") > 0.0).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "grpc {} http {}; forwarder log:\n{}",
            accepted("grpc"),
            accepted("http"),
            fwd.log_text()
        )
    });
    assert_eq!(accepted("grpc"), accepted("http"));
    assert_eq!(
        counter(&fwd, "otelcol_exporter_send_failed_metric_points_total"),
        0.0
    );
}

#[test]
fn without_a_client_certificate_or_with_a_wrong_token_nothing_is_delivered() {
    let (pki, rx) = setup();
    let ca_only = format!("{{ca_file: {}}}", pki.p("ca.pem"));
    let full = format!(
        "{{ca_file: {}, cert_file: {}, key_file: {}}}",
        pki.p("ca.pem"),
        pki.p("client.pem"),
        pki.p("client.key")
    );
    let exporters = exporter_block("otlp/nocert", &rx.grpc().to_string(), &ca_only, TOKEN)
        + &exporter_block(
            "otlphttp/nocert",
            &format!("https://{}", rx.http()),
            &ca_only,
            TOKEN,
        )
        + &exporter_block(
            "otlphttp/badtoken",
            &format!("https://{}", rx.http()),
            &full,
            "not-the-token-0123456789",
        );
    let fwd = Fleet::start_with(
        &forwarder_config(
            &exporters,
            "otlp/nocert, otlphttp/nocert, otlphttp/badtoken",
        ),
        &[],
    );
    push(&fwd, "tls-b", "n0");
    let failed = |name: &str| {
        counter(
            &fwd,
            &format!("otelcol_exporter_send_failed_metric_points_total{{exporter=\"{name}\"}}"),
        )
    };
    wait_for(Duration::from_secs(20), || {
        (failed("otlp/nocert") > 0.0
            && failed("otlphttp/nocert") > 0.0
            && failed("otlphttp/badtoken") > 0.0)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("failures not counted; forwarder log:\n{}", fwd.log_text()));
    let page = get(rx.prometheus(), "/metrics").text();
    assert!(!page.contains("tls-b"), "{page}");
    assert_eq!(
        counter(&rx, "otelcol_receiver_accepted_metric_points_total"),
        0.0
    );
}

#[test]
fn tls_files_with_a_plaintext_endpoint_fail_validation() {
    let pki = Pki::new("exp-tls-cfg");
    let cfg = forwarder_config(
        &format!(
            "  otlphttp/x:\n    endpoint: http://127.0.0.1:4318\n    tls: {{ca_file: {}}}\n",
            pki.p("ca.pem")
        ),
        "otlphttp/x",
    );
    let path = pki.path("fwd.yaml");
    std::fs::write(&path, cfg).unwrap();
    let out = std::process::Command::new(bin())
        .args(["validate", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exporters.otlphttp/x.tls") && err.contains("the endpoint is http://"),
        "{err}"
    );
}
