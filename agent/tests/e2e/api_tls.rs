//! The binary's query API over mTLS while its certificate files are replaced the way a
//! renewed Secret replaces them: a real TLS client records the certificate each new
//! connection is shown, and the agent's own `/metrics` counts the reloads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native::{StderrLog, TempDir};

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_ingero-agent");

fn issuer(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// A leaf certificate signed by `ca`.
fn leaf(ca: &CertifiedIssuer<'static, KeyPair>, sans: &[&str], cn: &str) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.signed_by(&key, ca).unwrap();
    Leaf {
        pem: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

struct Leaf {
    pem: String,
    key: String,
    der: Vec<u8>,
}

/// Replace `path` the way a Secret update does: a new file written beside it and renamed
/// over it (a new inode), owner-only.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

struct Agent {
    child: Child,
    log: StderrLog,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the binary with the API (mTLS on the given files) and its metrics endpoint on
/// loopback; their addresses come from its log.
fn start(dir: &Path, cert: &Path, key: &Path, client_ca: &Path) -> (Agent, String, String) {
    let mut child = Command::new(BIN)
        .args(["--synthetic", "--api", "--api-listen", "127.0.0.1:0"])
        .arg("--api-tls-cert")
        .arg(cert)
        .arg("--api-tls-key")
        .arg(key)
        .arg("--api-client-ca")
        .arg(client_ca)
        .args(["--metrics-listen", "127.0.0.1:0", "--node", "node-a"])
        .arg("--store-path")
        .arg(dir.join("ingero.db"))
        .arg("--fleet-persist-path")
        .arg(dir.join("baseline.json"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = StderrLog::read(&mut child);
    let wait = Duration::from_secs(60);
    let api = log.listen("query API started", wait);
    let metrics = log.listen("agent metrics endpoint started", wait);
    let agent = Agent { child, log };
    let (Some(api), Some(metrics)) = (api, metrics) else {
        panic!("the agent logs both addresses: {:?}", agent.log.lines());
    };
    (agent, api, metrics)
}

/// A TLS client trusting `ca` and presenting `client`.
fn connector(ca: &CertifiedIssuer<'static, KeyPair>, client: &Leaf) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from(client.der.clone())],
            PrivateKeyDer::from_pem_slice(client.key.as_bytes()).unwrap(),
        )
        .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One new connection: `GET /api/v1/time`. The certificate the server presented and the
/// status line, or why there was no answer.
async fn ask(c: &tokio_rustls::TlsConnector, addr: &str) -> Result<(Vec<u8>, String), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = c
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or("no server certificate")?;
    tls.write_all(b"GET /api/v1/time HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or("").to_string();
    if status.is_empty() {
        return Err("no answer".into());
    }
    Ok((presented, status))
}

/// `ingero_agent_tls_reloads_total{role="server",result}` from the agent's `/metrics`.
fn server_reloads(metrics: &str, result: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let want = format!("ingero_agent_tls_reloads_total{{role=\"server\",result=\"{result}\"}} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&want))
        .unwrap_or_else(|| panic!("no {want:?} in /metrics:\n{text}"));
    line[want.len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_api_certificate_and_client_ca_are_served_without_a_restart() {
    let dir = TempDir::new("api-tls-reload");
    let ca = issuer("node CA");
    let operators = issuer("operators CA");
    let other_operators = issuer("other operators CA");
    let sans = ["localhost", "127.0.0.1"];
    let (a, b) = (leaf(&ca, &sans, "node A"), leaf(&ca, &sans, "node B"));
    let me = leaf(&operators, &[], "operator");
    let them = leaf(&other_operators, &[], "other operator");
    let (cert, key, client_ca) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("client-ca.crt"),
    );
    replace(&cert, &a.pem);
    replace(&key, &a.key);
    replace(&client_ca, &operators.pem());
    let (agent, api, metrics) = start(dir.path(), &cert, &key, &client_ca);
    let mine = connector(&ca, &me);
    let theirs = connector(&ca, &them);

    // The certificate a connection was shown, by name; panics without a 200 answer.
    let shown = |r: Result<(Vec<u8>, String), String>| {
        let (der, status) = r.unwrap_or_else(|e| panic!("{e}; log: {:?}", agent.log.lines()));
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        if der == a.der {
            "A"
        } else if der == b.der {
            "B"
        } else {
            "another certificate"
        }
    };
    assert_eq!(
        shown(ask(&mine, &api).await),
        "A",
        "the certificate at start"
    );
    assert_eq!(shown(ask(&mine, &api).await), "A");
    assert!(ask(&theirs, &api).await.is_err(), "another CA's client");

    // The Secret is renewed: the next connection is shown B.
    replace(&cert, &b.pem);
    replace(&key, &b.key);
    assert_eq!(
        shown(ask(&mine, &api).await),
        "B",
        "the renewed certificate"
    );
    assert_eq!(shown(ask(&mine, &api).await), "B");
    assert_eq!(server_reloads(&metrics, "ok"), 1);
    assert_eq!(server_reloads(&metrics, "error"), 0);

    // A half-written certificate does not load: B is still served, counted once however
    // many connections come.
    replace(&cert, &a.pem[..a.pem.len() / 2]);
    assert_eq!(
        shown(ask(&mine, &api).await),
        "B",
        "the broken file is not served"
    );
    assert_eq!(shown(ask(&mine, &api).await), "B");
    assert_eq!(server_reloads(&metrics, "error"), 1);
    assert_eq!(server_reloads(&metrics, "ok"), 1);
    let refused = |l: &str| l.contains("do not load") && l.contains("server");
    assert!(
        agent
            .log
            .wait_line(refused, Duration::from_secs(10))
            .is_some(),
        "the refusal is logged: {:?}",
        agent.log.lines()
    );

    // The pair is whole again: A is served.
    replace(&cert, &a.pem);
    replace(&key, &a.key);
    assert_eq!(shown(ask(&mine, &api).await), "A");
    assert_eq!(server_reloads(&metrics, "ok"), 2);

    // The client CA changes to the other operators': their certificate is taken, ours no
    // longer is.
    replace(&client_ca, &other_operators.pem());
    assert_eq!(shown(ask(&theirs, &api).await), "A", "the new CA's client");
    assert!(ask(&mine, &api).await.is_err(), "the old CA's client");
    assert_eq!(server_reloads(&metrics, "ok"), 3);
    assert_eq!(server_reloads(&metrics, "error"), 1);
}
