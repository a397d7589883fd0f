//! The API and MCP listener over TLS (the host's `tls` block, reloads and all), and the
//! host's plaintext rule applied to it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::json;

use crate::common::*;

/// A CA and a server certificate for 127.0.0.1 signed by it, written under `dir`;
/// returns the CA's PEM.
fn pki(dir: &std::path::Path) -> String {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    ca_pem
}

/// One HTTP/1.1 request over TLS trusting only `ca_pem`; the raw response.
fn https(port: u16, ca_pem: &str, request: &str) -> Result<String, String> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let conn = ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from("127.0.0.1".to_string()).unwrap(),
    )
    .unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = StreamOwned::new(conn, sock);
    tls.write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    match tls.read_to_string(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_tls_and_plaintext_gets_no_answer() {
    let certs = temp_dir("tls");
    let ca_pem = pki(&certs);
    let echo = Echo::start(Opts {
        api: json!({"tls": {
            "cert_file": certs.join("server.pem").display().to_string(),
            "key_file": certs.join("server.key").display().to_string(),
        }}),
        ..Default::default()
    })
    .await;
    let port = echo.api;
    let body = r#"{"sql": "SELECT 41 + 1 AS answer"}"#;
    let req = format!(
        "POST /api/v1/tools/fleet.cluster.run_analysis HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let ok = tokio::task::spawn_blocking({
        let (ca, req) = (ca_pem.clone(), req.clone());
        move || https(port, &ca, &req)
    })
    .await
    .unwrap()
    .expect("the API answers over TLS");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("[[42]]"), "{ok}");
    // A client trusting another CA fails the handshake.
    let other = temp_dir("tls-other");
    let other_ca = pki(&other);
    let refused = tokio::task::spawn_blocking({
        let req = req.clone();
        move || https(port, &other_ca, &req)
    })
    .await
    .unwrap();
    assert!(refused.is_err(), "{refused:?}");
    // Plaintext HTTP on the TLS port gets no HTTP answer.
    let plain = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        buf
    })
    .await
    .unwrap();
    assert!(!plain.starts_with(b"HTTP/1.1 200"), "{plain:?}");
    echo.stop().await;
}

#[test]
fn off_loopback_the_api_needs_tls_or_the_explicit_opt_out() {
    let dir = temp_dir("plain");
    let o = Opts::default();
    let [http, grpc, api] = free_ports::<3>();
    let mut cfg = config(&o, &dir, http, grpc, api);
    cfg["extensions"]["echo_api"]["endpoint"] = json!("0.0.0.0:18090");
    let Err(err) = collector_host::config::Plan::build_with(&cfg, &ingero_echo::components())
    else {
        panic!("plaintext off loopback must be refused");
    };
    let all: Vec<String> = err.iter().map(|e| e.to_string()).collect();
    assert!(
        all.iter()
            .any(|m| m.starts_with("extensions.echo_api.endpoint")
                && m.contains("extensions.echo_api.tls.cert_file")),
        "{all:?}"
    );
    // A bad tls block is reported under its key before anything starts.
    cfg["extensions"]["echo_api"]["tls"] =
        json!({"cert_file": "/nonexistent.pem", "key_file": "/nonexistent.key"});
    let Err(err) = collector_host::config::Plan::build_with(&cfg, &ingero_echo::components())
    else {
        panic!("missing certificate files must be refused");
    };
    let all: Vec<String> = err.iter().map(|e| e.to_string()).collect();
    assert!(
        all.iter()
            .any(|m| m.starts_with("extensions.echo_api.tls.")),
        "{all:?}"
    );
    // With the opt-out it plans.
    cfg["extensions"]["echo_api"]
        .as_object_mut()
        .unwrap()
        .remove("tls");
    cfg["service"]["allow_plaintext_listeners"] = json!(true);
    collector_host::config::Plan::build_with(&cfg, &ingero_echo::components()).unwrap();
}
