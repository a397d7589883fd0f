//! TLS and mTLS on every listener of the real binary, with certificates made at test time
//! (rcgen): HTTPS pushes get the threshold headers, gRPC over TLS, the threshold API over
//! mTLS, the rejections the Ingero e2e suite checks (missing client certificate, wrong CA,
//! expired client certificate, SAN mismatch), plaintext on a TLS port, certificate reload
//! without restart, and the plaintext-on-non-loopback rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sha2::{Digest, Sha256};
use testkit::AgentPush;

// ---------------------------------------------------------------------------------------
// Certificates

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(p, key),
    }
}

#[derive(Clone)]
struct Leaf {
    cert_pem: String,
    key_pem: String,
    /// SHA-256 of the certificate (DER), hex.
    fingerprint: String,
}

#[derive(Clone, Copy)]
enum Validity {
    Current,
    Expired,
}

fn leaf(ca: &Ca, names: &[&str], serial: u64, client: bool, validity: Validity) -> Leaf {
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("client"),
    );
    p.serial_number = Some(SerialNumber::from(serial));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    if let Validity::Expired = validity {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    Leaf {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        fingerprint: hex(&Sha256::digest(cert.der().as_ref())),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write a file with mode 0600 (keys must not be group/world readable).
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Replace a file atomically (write aside, rename), as cert-manager and friends do.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    write_private(&tmp, text);
    std::fs::rename(&tmp, path).unwrap();
}

/// Server and client material in a temp dir.
struct Pki {
    dir: tempdir::TempDir,
    ca: Ca,
    server: Leaf,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = tempdir::TempDir::new(tag);
        let ca = ca("fleet test ca");
        let server = leaf(
            &ca,
            &["localhost", "127.0.0.1"],
            100,
            false,
            Validity::Current,
        );
        let p = Pki { dir, ca, server };
        write_private(&p.path("ca.pem"), &p.ca.pem);
        write_private(&p.path("server.pem"), &p.server.cert_pem);
        write_private(&p.path("server.key"), &p.server.key_pem);
        p
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn p(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }

    /// `tls:` flow mapping with the server cert; mTLS against our CA when `mtls`.
    fn tls_block(&self, mtls: bool, extra: &str) -> String {
        let mut s = format!(
            "{{cert_file: {}, key_file: {}",
            self.p("server.pem"),
            self.p("server.key")
        );
        if mtls {
            s.push_str(&format!(", client_ca_file: {}", self.p("ca.pem")));
        }
        s.push_str(extra);
        s.push('}');
        s
    }
}

// ---------------------------------------------------------------------------------------
// Clients

fn client_config(
    ca_pem: &str,
    ident: Option<&Leaf>,
    alpn: &[&[u8]],
    tls12_only: bool,
) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let versions: &[&'static rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let b = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match ident {
        Some(id) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                    .map(|c| c.unwrap())
                    .collect();
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// What one HTTPS exchange gave.
struct Exchange {
    resp: Resp,
    /// Fingerprint of the certificate the server presented.
    server_fingerprint: String,
    alpn: Option<Vec<u8>>,
}

/// Connect and finish the TLS handshake, dialing `name`.
fn tls_connect(
    addr: SocketAddr,
    name: &str,
    cfg: Arc<ClientConfig>,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let conn = ClientConnection::new(cfg, ServerName::try_from(name.to_string()).unwrap())
        .map_err(|e| format!("client: {e}"))?;
    let sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(tls)
}

/// One HTTP/1.1 request over TLS on a fresh connection, dialing `name`. `Err` says where
/// it failed (handshake, or the first read, where TLS 1.3 reports a refused client cert).
fn https(
    addr: SocketAddr,
    name: &str,
    cfg: Arc<ClientConfig>,
    request: &[u8],
) -> Result<Exchange, String> {
    let mut tls = tls_connect(addr, name, cfg)?;
    let server_fingerprint = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| hex(&Sha256::digest(c.as_ref())))
        .unwrap_or_default();
    let alpn = tls.conn.alpn_protocol().map(|p| p.to_vec());
    tls.write_all(request).map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    match tls.read_to_end(&mut buf) {
        Ok(_) => {}
        // A peer that closes without close_notify after a complete response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    if buf.is_empty() {
        return Err("closed without a response".into());
    }
    Ok(Exchange {
        resp: parse_response(&buf),
        server_fingerprint,
        alpn,
    })
}

/// GET over HTTP/2 (ALPN h2) with hyper's client; the status and body.
fn h2_get(addr: SocketAddr, cfg: Arc<ClientConfig>, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .expect("h2 handshake");
        tokio::spawn(conn);
        let req = http::Request::get(format!("https://localhost{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.expect("h2 request");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

fn get_req(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes()
}

fn push_req(addr: SocketAddr, cluster: &str, body: &str) -> Vec<u8> {
    let mut r = format!(
        "POST /v1/metrics?cluster_id={cluster} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// A tonic connector that dials `addr` and runs the TLS handshake for `name`.
#[derive(Clone)]
struct TlsConnector {
    addr: SocketAddr,
    name: String,
    cfg: Arc<ClientConfig>,
}

type TlsIo = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = TlsIo;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<TlsIo, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(me.addr).await?;
            let name = ServerName::try_from(me.name.clone()).map_err(std::io::Error::other)?;
            let tls = tokio_rustls::TlsConnector::from(me.cfg)
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

/// One OTLP/gRPC metrics export over TLS; the `ingero-threshold` response metadata.
fn grpc_push(
    addr: SocketAddr,
    cfg: Arc<ClientConfig>,
    cluster: &str,
    push: &AgentPush,
) -> Result<Option<String>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = push.to_proto();
    rt.block_on(async move {
        let conn = TlsConnector {
            addr,
            name: "localhost".into(),
            cfg,
        };
        let ch = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .connect_with_connector(conn)
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let mut client = MetricsServiceClient::new(ch);
        let mut req = tonic::Request::new(req);
        req.metadata_mut()
            .insert("cluster_id", cluster.parse().unwrap());
        let resp = client
            .export(req)
            .await
            .map_err(|s| format!("export: {s:?}"))?;
        Ok(resp
            .metadata()
            .get("ingero-threshold")
            .map(|v| v.to_str().unwrap().to_string()))
    })
}

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

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const PLAINTEXT_ALL_INTERFACES: &str = r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 0.0.0.0:0
processors:
  ingero:
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: ""
exporters:
  debug:
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {receivers: [otlp], processors: [ingero], exporters: [debug]}
  telemetry:
    metrics:
      readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: 0}}}}]
"#;

#[test]
fn plaintext_on_a_non_loopback_address_needs_the_opt_out() {
    let dir = tempdir::TempDir::new("tls-plain");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, PLAINTEXT_ALL_INTERFACES).unwrap();
    let cfg = cfg.to_string_lossy().into_owned();

    let (code, err) = run(&["validate", "--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("receivers.otlp.protocols.http.endpoint: 0.0.0.0:0 is not a loopback address")
            && err.contains("service.allow_plaintext_listeners: true"),
        "{err}"
    );
    // Starting refuses the same way (exit before binding anything).
    let (code, err) = run(&["--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("service.allow_plaintext_listeners"), "{err}");

    // With the opt-out it starts and serves plaintext.
    let mut f = Fleet::spawn(
        &[
            "--config",
            &cfg,
            "--set",
            "service.allow_plaintext_listeners=true",
        ],
        &[],
    );
    assert!(f.http().ip().is_unspecified());
    let r = push_json(
        SocketAddr::from(([127, 0, 0, 1], f.http().port())),
        "p",
        &AgentPush::new("p", "n", 0.9).to_json(),
    );
    assert_eq!(r.status, 200);
    assert!(f.terminate().0.success());

    // With TLS on that listener no opt-out is needed.
    let pki = Pki::new("tls-plain-ok");
    let (code, err) = run(&[
        "validate",
        "--config",
        &cfg,
        "--set",
        &format!(
            "receivers.otlp.protocols.http.tls={}",
            pki.tls_block(false, "")
        ),
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn validate_names_the_key_of_each_bad_tls_file() {
    let pki = Pki::new("tls-validate");
    let other = leaf(&pki.ca, &["localhost"], 900, false, Validity::Current);
    write_private(&pki.path("other.key"), &other.key_pem);
    write_private(&pki.path("empty-ca.pem"), "# no certificates here\n");
    write_private(&pki.path("loose.key"), &pki.server.key_pem);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            pki.path("loose.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    let dir = tempdir::TempDir::new("tls-validate-cfg");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        PLAINTEXT_ALL_INTERFACES.replace("0.0.0.0:0", "127.0.0.1:0"),
    )
    .unwrap();
    let cfg = cfg.to_string_lossy().into_owned();
    let set = |k: &str, v: String| format!("{k}={v}");
    let cases = [
        (
            set(
                "receivers.otlp.protocols.http.tls",
                format!(
                    "{{cert_file: {}, key_file: {}}}",
                    pki.p("missing.pem"),
                    pki.p("server.key")
                ),
            ),
            "receivers.otlp.protocols.http.tls.cert_file: cannot read",
        ),
        (
            set(
                "receivers.otlp.protocols.http.tls",
                format!(
                    "{{cert_file: {}, key_file: {}}}",
                    pki.p("server.pem"),
                    pki.p("other.key")
                ),
            ),
            "receivers.otlp.protocols.http.tls.key_file: ",
        ),
        (
            set(
                "extensions.ingero_threshold.tls",
                pki.tls_block(
                    false,
                    &format!(", client_ca_file: {}", pki.p("empty-ca.pem")),
                ),
            ),
            "extensions.ingero_threshold.tls.client_ca_file: ",
        ),
        (
            set(
                "extensions.ingero_threshold.tls",
                "{key_file: x}".to_string(),
            ),
            "extensions.ingero_threshold.tls.cert_file: is required",
        ),
        (
            set(
                "receivers.otlp.protocols.http.tls",
                pki.tls_block(false, ", min_version: \"1.1\""),
            ),
            "min_version",
        ),
    ];
    for (arg, want) in &cases {
        let (code, err) = run(&["validate", "--config", &cfg, "--set", arg]);
        assert_eq!(code, 1, "{arg}: {err}");
        assert!(err.contains(want), "{arg}: want {want:?} in\n{err}");
    }
    // The mismatch message says what is wrong.
    let (_, err) = run(&["validate", "--config", &cfg, "--set", &cases[1].0]);
    assert!(err.contains("does not match the certificate"), "{err}");
    let (_, err) = run(&["validate", "--config", &cfg, "--set", &cases[2].0]);
    assert!(err.contains("contains no certificates"), "{err}");

    // A key others can read is a warning, not an error.
    let (code, err) = run(&[
        "validate",
        "--config",
        &cfg,
        "--set",
        &format!(
            "receivers.otlp.protocols.http.tls={{cert_file: {}, key_file: {}}}",
            pki.p("server.pem"),
            pki.p("loose.key")
        ),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: receivers.otlp.protocols.http.tls.key_file:")
            && err.contains("readable by group or others"),
        "{err}"
    );
}

#[test]
fn the_tls_example_config_validates_and_serves_with_its_files() {
    let pki = Pki::new("tls-example");
    write_private(&pki.path("fleet.pem"), &pki.server.cert_pem);
    write_private(&pki.path("fleet.key"), &pki.server.key_pem);
    write_private(&pki.path("agents-ca.pem"), &pki.ca.pem);
    write_private(&pki.path("scrapers-ca.pem"), &pki.ca.pem);
    let text = std::fs::read_to_string(format!(
        "{}/../examples/fleet-config-tls.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert!(text.contains("/etc/ingero/tls/"));
    let dir = pki.dir.path().to_string_lossy().into_owned();
    // Same document, files in the temp dir, ports chosen by the OS.
    let text = text
        .replace("/etc/ingero/tls", &dir)
        .replace("0.0.0.0:4317", "0.0.0.0:0")
        .replace("0.0.0.0:4318", "0.0.0.0:0")
        .replace("0.0.0.0:8080", "0.0.0.0:0")
        .replace("127.0.0.1:8081", "127.0.0.1:0")
        .replace("0.0.0.0:9090", "0.0.0.0:0")
        .replace("port: 8888", "port: 0");
    let cfg = pki.path("fleet-tls.yaml");
    std::fs::write(&cfg, &text).unwrap();
    let cfg = cfg.to_string_lossy().into_owned();
    let (code, err) = run(&["validate", "--config", &cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");

    // It starts without the plaintext opt-out (every 0.0.0.0 listener has tls) and an
    // agent with a client certificate gets served on the public OTLP port.
    let f = Fleet::spawn(&["--config", &cfg], &[]);
    let agent = leaf(&pki.ca, &["node-9"], 400, true, Validity::Current);
    let cfg = client_config(&pki.ca.pem, Some(&agent), &[b"http/1.1"], false);
    let addr = SocketAddr::from(([127, 0, 0, 1], f.http().port()));
    let body = AgentPush::new("ex", "ex-node", 0.9).to_json();
    let x = https(addr, "localhost", cfg, &push_req(addr, "ex", &body)).unwrap();
    assert_eq!(x.resp.status, 200);
}
