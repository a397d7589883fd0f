//! TLS and mTLS on every listener of the real binary, with certificates made at test time
//! (rcgen): HTTPS pushes get the threshold headers, gRPC over TLS, the threshold API over
//! mTLS, the rejections the Ingero e2e suite checks (missing client certificate, wrong CA,
//! expired client certificate, SAN mismatch), plaintext on a TLS port, certificate reload
//! without restart (config checks: `tls_config.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::tls_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;
use testkit::AgentPush;
use tls_support::*;

// ---------------------------------------------------------------------------------------
// Fleet configs

fn tls_config(pki: &Pki, push_interval: &str) -> String {
    let mtls = pki.tls_block(true, "");
    let tls = pki.tls_block(false, "");
    let health_tls = pki.tls_block(false, ", handshake_timeout: 500ms");
    let tls13 = pki.tls_block(false, ", min_version: \"1.3\"");
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        tls: {mtls}
      http:
        endpoint: 127.0.0.1:0
        tls: {mtls}
processors:
  ingero:
    threshold: {{k: 2.0, ema_alpha: 0.2}}
    quorum: {{statistical_min: 5, coverage_fraction: 0.80}}
    push_interval: {push_interval}
    ttl_multiplier: 3
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: 127.0.0.1:0
    tls: {mtls}
  health_check:
    endpoint: 127.0.0.1:0
    tls: {health_tls}
exporters:
  prometheus:
    endpoint: 127.0.0.1:0
    tls: {tls13}
service:
  extensions: [ingero_threshold, health_check]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [ingero]
      exporters: [prometheus]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus: {{host: 127.0.0.1, port: 0, tls: {tls}}}
"#
    )
}

const SCORES: [f64; 7] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945];

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn https_and_grpc_pushes_get_thresholds_and_every_listener_serves_tls() {
    let pki = Pki::new("tls-main");
    let f = Fleet::start_with(&tls_config(&pki, "1s"), &[]);
    let agent = leaf(&pki.ca, &["node-0"], 200, true, Validity::Current);
    let cfg = client_config(&pki.ca.pem, Some(&agent), &[b"http/1.1"], false);

    // HTTPS pushes from 7 nodes until quorum: then the piggyback headers come.
    let header = wait_for(Duration::from_secs(15), || {
        let mut last = None;
        for (i, s) in SCORES.iter().enumerate() {
            let body = AgentPush::new("tls", &format!("tls-node-{i}"), *s).to_json();
            let x = https(
                f.http(),
                "localhost",
                cfg.clone(),
                &push_req(f.http(), "tls", &body),
            )
            .expect("mTLS push");
            assert_eq!(x.resp.status, 200, "{}", x.resp.text());
            assert_eq!(x.server_fingerprint, pki.server.fingerprint);
            last = x.resp.header("X-Ingero-Threshold").map(str::to_string);
            assert_eq!(
                last.is_some(),
                x.resp.header("X-Ingero-Quorum-Met").is_some(),
                "both headers or neither"
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        last
    })
    .expect("X-Ingero-Threshold over HTTPS once quorum exists");
    let t: f64 = header.parse().unwrap();
    assert!((0.1..=0.99).contains(&t), "{header}");

    // The threshold API over mTLS answers the same value.
    let g = https(
        f.agent_api(),
        "localhost",
        cfg.clone(),
        &get_req(f.agent_api(), "/api/v1/threshold?cluster_id=tls"),
    )
    .expect("threshold GET over mTLS");
    assert_eq!(g.resp.status, 200);
    assert_eq!(g.resp.json()["quorum_met"], true, "{}", g.resp.text());
    let d = https(
        f.admin_api(),
        "localhost",
        cfg.clone(),
        &get_req(f.admin_api(), "/api/v1/diagnostics?cluster_id=tls"),
    )
    .expect("admin API over mTLS");
    assert!(d.resp.status < 500, "{}", d.resp.text());

    // gRPC over TLS (ALPN h2), with the threshold in the response metadata.
    let grpc_cfg = client_config(&pki.ca.pem, Some(&agent), &[b"h2"], false);
    let md = grpc_push(
        f.grpc(),
        grpc_cfg,
        "tls",
        &AgentPush::new("tls", "tls-node-0", 0.95),
    )
    .expect("gRPC export over TLS");
    assert!(md.is_some(), "ingero-threshold metadata over gRPC/TLS");

    // ALPN: HTTP listeners prefer h2 and fall back to http/1.1.
    let both = client_config(&pki.ca.pem, Some(&agent), &[b"h2", b"http/1.1"], false);
    let probe = tls_connect(f.http(), "localhost", both.clone()).expect("handshake");
    assert_eq!(probe.conn.alpn_protocol(), Some(&b"h2"[..]));
    drop(probe);
    let (status, body) = h2_get(f.agent_api(), both, "/api/v1/threshold?cluster_id=tls");
    assert_eq!(status, 200);
    assert!(body.contains("\"quorum_met\":true"), "{body}");
    let h1 = https(
        f.agent_api(),
        "localhost",
        cfg.clone(),
        &get_req(f.agent_api(), "/api/v1/threshold?cluster_id=tls"),
    )
    .unwrap();
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));

    // Listeners with TLS but no client_ca_file need no client certificate.
    let anon = client_config(&pki.ca.pem, None, &[], false);
    let h = https(
        f.addr("health_check"),
        "localhost",
        anon.clone(),
        &get_req(f.addr("health_check"), "/"),
    )
    .unwrap();
    assert_eq!(h.resp.status, 200);
    assert!(h.resp.text().contains("Server available"));
    let m = https(
        f.telemetry(),
        "localhost",
        anon.clone(),
        &get_req(f.telemetry(), "/metrics"),
    )
    .unwrap();
    assert_eq!(m.resp.status, 200);
    let text = m.resp.text();
    assert!(
        prom_value(
            &text,
            "ingero_fleet_tls_handshakes_total{listener=\"otlp/http\",outcome=\"ok\"}"
        )
        .is_some_and(|v| v >= 7.0),
        "handshakes counted"
    );
    let p = https(
        f.prometheus(),
        "localhost",
        anon,
        &get_req(f.prometheus(), "/metrics"),
    )
    .unwrap();
    assert_eq!(p.resp.status, 200);
    assert!(p.resp.text().contains("ingero"), "scrape over TLS");

    // min_version "1.3" on the Prometheus exporter: a TLS 1.2-only client is refused,
    // while the 1.2 default elsewhere accepts it.
    let old = client_config(&pki.ca.pem, None, &[], true);
    let e = https(
        f.prometheus(),
        "localhost",
        old.clone(),
        &get_req(f.prometheus(), "/metrics"),
    )
    .err()
    .expect("TLS 1.2 client refused by a 1.3-only listener");
    assert!(e.contains("handshake"), "{e}");
    let ok12 = https(
        f.addr("health_check"),
        "localhost",
        old,
        &get_req(f.addr("health_check"), "/"),
    )
    .expect("TLS 1.2 accepted by default");
    assert_eq!(ok12.resp.status, 200);
}

#[test]
fn mtls_refuses_missing_wrong_ca_and_expired_client_certs_and_clients_refuse_san_mismatch() {
    let pki = Pki::new("tls-reject");
    let f = Fleet::start_with(&tls_config(&pki, "10s"), &[]);
    let good = leaf(&pki.ca, &["node-1"], 300, true, Validity::Current);
    let expired = leaf(&pki.ca, &["node-2"], 301, true, Validity::Expired);
    let other_ca = ca("some other ca");
    let stranger = leaf(&other_ca, &["node-3"], 302, true, Validity::Current);
    let body = AgentPush::new("rej", "rej-node", 0.9).to_json();

    for (listener, req) in [
        ("otlp/http", push_req(f.http(), "rej", &body)),
        (
            "ingero_threshold/agent",
            get_req(f.agent_api(), "/api/v1/threshold?cluster_id=rej"),
        ),
    ] {
        let addr = f.addr(listener);
        let cases: [(&str, Option<&Leaf>, &[&str]); 3] = [
            (
                "no client certificate",
                None,
                &["CertificateRequired", "HandshakeFailure"],
            ),
            (
                "certificate from another CA",
                Some(&stranger),
                &["UnknownCA", "BadCertificate"],
            ),
            (
                "expired certificate",
                Some(&expired),
                &["CertificateExpired", "BadCertificate"],
            ),
        ];
        for (what, ident, alerts) in cases {
            let cfg = client_config(&pki.ca.pem, ident, &[b"http/1.1"], false);
            let e = https(addr, "localhost", cfg, &req)
                .err()
                .unwrap_or_else(|| panic!("{listener}: {what} must be refused"));
            assert!(
                alerts.iter().any(|a| e.contains(a)),
                "{listener}: {what}: unexpected error {e}"
            );
        }
        // The listener still serves a proper client.
        let cfg = client_config(&pki.ca.pem, Some(&good), &[b"http/1.1"], false);
        let ok = https(addr, "localhost", cfg, &req).expect("valid client accepted");
        assert_eq!(ok.resp.status, 200, "{listener}");
    }

    // gRPC with mTLS: no client certificate and a wrong-CA one are refused.
    let push = AgentPush::new("rej", "rej-node", 0.9);
    for (what, ident) in [
        ("no client cert", None),
        ("wrong CA", Some(&stranger)),
        ("expired", Some(&expired)),
    ] {
        let cfg = client_config(&pki.ca.pem, ident, &[b"h2"], false);
        assert!(
            grpc_push(f.grpc(), cfg, "rej", &push).is_err(),
            "gRPC: {what} must be refused"
        );
    }
    let cfg = client_config(&pki.ca.pem, Some(&good), &[b"h2"], false);
    grpc_push(f.grpc(), cfg, "rej", &push).expect("gRPC with a valid client cert");

    // SAN mismatch: the server certificate names localhost and 127.0.0.1; a client
    // dialing another name refuses it.
    let cfg = client_config(&pki.ca.pem, Some(&good), &[b"http/1.1"], false);
    let e = https(
        f.http(),
        "fleet.other.example",
        cfg,
        &push_req(f.http(), "rej", &body),
    )
    .err()
    .expect("client must refuse a certificate for another name");
    assert!(e.contains("not valid for name"), "{e}");

    // Plaintext HTTP to a TLS port gets no HTTP answer, and the server keeps serving.
    let mut s = TcpStream::connect(f.http()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&push_req(f.http(), "rej", &body)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        !buf.starts_with(b"HTTP/"),
        "plaintext must not be answered in plaintext"
    );
    let cfg = client_config(&pki.ca.pem, Some(&good), &[b"http/1.1"], false);
    let ok = https(
        f.http(),
        "localhost",
        cfg,
        &push_req(f.http(), "rej", &body),
    )
    .unwrap();
    assert_eq!(ok.resp.status, 200);

    // A client that connects and never starts the handshake is dropped after
    // handshake_timeout (500ms on the health check), and it does not hold up the accept
    // loop meanwhile.
    let mut idle = TcpStream::connect(f.addr("health_check")).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let anon = client_config(&pki.ca.pem, None, &[], false);
    let h = https(
        f.addr("health_check"),
        "localhost",
        anon.clone(),
        &get_req(f.addr("health_check"), "/"),
    )
    .expect("served while another connection sits in its handshake");
    assert_eq!(h.resp.status, 200);
    // Served while the idle connection was still open: had the accept loop waited on the
    // idle handshake, that connection would have timed out (and closed) first.
    let mut buf = [0u8; 16];
    idle.set_nonblocking(true).unwrap();
    assert!(
        matches!(idle.peek(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the idle connection is still in its handshake"
    );
    idle.set_nonblocking(false).unwrap();
    let t = std::time::Instant::now();
    let n = idle.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without data");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "closed by the handshake timeout"
    );

    // Each refusal was counted as a failed handshake, not an accepted one.
    let m = https(
        f.telemetry(),
        "localhost",
        anon,
        &get_req(f.telemetry(), "/metrics"),
    )
    .unwrap();
    let failed = prom_value(
        &m.resp.text(),
        "ingero_fleet_tls_handshakes_total{listener=\"otlp/http\",outcome=\"failed\"}",
    )
    .unwrap_or(0.0);
    assert!(failed >= 4.0, "failed handshakes counted: {failed}");
    let timeouts = prom_value(
        &m.resp.text(),
        "ingero_fleet_tls_handshakes_total{listener=\"health_check\",outcome=\"timeout\"}",
    )
    .unwrap_or(0.0);
    assert_eq!(timeouts, 1.0, "handshake timeout counted");
}

#[test]
fn certificates_reload_without_restart_and_bad_files_keep_the_old_one() {
    let pki = Pki::new("tls-reload");
    // The agent API polls its files every 300ms; the OTLP listener reloads on SIGHUP only.
    write_private(&pki.path("agent.pem"), &pki.server.cert_pem);
    write_private(&pki.path("agent.key"), &pki.server.key_pem);
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
        tls: {}
processors:
  ingero:
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: ""
    tls: {{cert_file: {}, key_file: {}, reload_interval: 300ms}}
exporters:
  debug:
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [debug]}}
  telemetry:
    metrics:
      readers: [{{pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: 0}}}}}}}}]
"#,
        pki.tls_block(false, ""),
        pki.p("agent.pem"),
        pki.p("agent.key"),
    );
    let mut f = Fleet::start_with(&config, &[]);
    let anon = client_config(&pki.ca.pem, None, &[], false);
    let fp = |addr: SocketAddr| {
        https(
            addr,
            "localhost",
            anon.clone(),
            &get_req(addr, "/api/v1/threshold?cluster_id=x"),
        )
        .map(|x| x.server_fingerprint)
        .unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(fp(f.agent_api()), pki.server.fingerprint);
    assert_eq!(fp(f.http()), pki.server.fingerprint);
    let pid = f.child.id() as i32;

    // 1. Files change under the interval-polled listener: new connections get the new
    //    certificate, no restart, no signal.
    let second = leaf(
        &pki.ca,
        &["localhost", "127.0.0.1"],
        101,
        false,
        Validity::Current,
    );
    replace(&pki.path("agent.key"), &second.key_pem);
    replace(&pki.path("agent.pem"), &second.cert_pem);
    wait_for(Duration::from_secs(10), || {
        (fp(f.agent_api()) == second.fingerprint).then_some(())
    })
    .expect("agent API serves the new certificate");

    // 2. A broken replacement (key of another certificate) keeps the current one.
    let third = leaf(&pki.ca, &["localhost"], 102, false, Validity::Current);
    replace(&pki.path("agent.key"), &third.key_pem);
    wait_for(Duration::from_secs(10), || {
        f.log_text()
            .contains("tls reload failed; keeping the previous certificate")
            .then_some(())
    })
    .expect("failed reload logged");
    assert!(
        f.log_text()
            .contains("extensions.ingero_threshold.tls.key_file"),
        "the log names the key: {}",
        f.log_text()
    );
    assert_eq!(
        fp(f.agent_api()),
        second.fingerprint,
        "old certificate kept"
    );

    // 3. SIGHUP-only listener: a file change alone does nothing, SIGHUP applies it.
    let fourth = leaf(
        &pki.ca,
        &["localhost", "127.0.0.1"],
        103,
        false,
        Validity::Current,
    );
    replace(&pki.path("server.key"), &fourth.key_pem);
    replace(&pki.path("server.pem"), &fourth.cert_pem);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        fp(f.http()),
        pki.server.fingerprint,
        "no reload without SIGHUP"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid, libc::SIGHUP);
    }
    wait_for(Duration::from_secs(10), || {
        (fp(f.http()) == fourth.fingerprint).then_some(())
    })
    .expect("SIGHUP reloads the OTLP listener's certificate");
    assert!(f.is_running(), "SIGHUP does not stop the process");

    let m = get(f.telemetry(), "/metrics").text();
    let n = |l: &str, o: &str| {
        prom_value(
            &m,
            &format!("ingero_fleet_tls_reloads_total{{listener=\"{l}\",outcome=\"{o}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(n("ingero_threshold/agent", "ok") >= 1.0, "{m}");
    assert!(n("ingero_threshold/agent", "failed") >= 1.0, "{m}");
    assert!(n("otlp/http", "ok") >= 1.0, "{m}");
    let (status, _) = f.terminate();
    assert!(status.success());
}
