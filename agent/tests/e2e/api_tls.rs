//! The binary's query API over TLS while its certificate files and its bearer token file
//! are replaced the way a renewed Secret replaces them: a real TLS client records the
//! certificate each new connection is shown and the status each token gets, and the
//! agent's own `/metrics` counts the reloads.

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
    start_with(
        dir,
        cert,
        key,
        ["--api-client-ca".as_ref(), client_ca.as_os_str()],
    )
}

/// Start the binary with the API on TLS from `cert`/`key` and `more` API arguments, and
/// its metrics endpoint, on loopback; their addresses come from its log.
fn start_with<const N: usize>(
    dir: &Path,
    cert: &Path,
    key: &Path,
    more: [&std::ffi::OsStr; N],
) -> (Agent, String, String) {
    let mut child = Command::new(BIN)
        .args(["--synthetic", "--api", "--api-listen", "127.0.0.1:0"])
        .arg("--api-tls-cert")
        .arg(cert)
        .arg("--api-tls-key")
        .arg(key)
        .args(more)
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
    counter(
        metrics,
        &format!("ingero_agent_tls_reloads_total{{role=\"server\",result=\"{result}\"}}"),
    )
}

/// One series' value from the agent's `/metrics`.
fn counter(metrics: &str, series: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let want = format!("{series} ");
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

/// A TLS client trusting `ca`, without a client certificate.
fn plain_connector(ca: &CertifiedIssuer<'static, KeyPair>) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type Conn = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(c: &tokio_rustls::TlsConnector, addr: &str) -> Conn {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// `GET /api/v1/time` on an open connection (kept open), with `token` as the bearer token;
/// the answer's status code.
async fn status(conn: &mut Conn, token: Option<&str>) -> u16 {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    conn.write_all(
        format!("GET /api/v1/time HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    // The head, then exactly Content-Length bytes, so the connection stays usable.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = conn.read(&mut b).await.unwrap();
        assert_eq!(n, 1, "the connection closed mid-answer: {head:?}");
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await.unwrap();
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Point `<dir>/token` at new contents the way the kubelet updates a mounted Secret: the
/// contents go into a new directory, and a symlink to it is renamed over `..data`
/// (`token` itself is a symlink to `..data/token`).
fn rotate(dir: &Path, version: u32, text: &str) {
    let v = dir.join(format!("..v{version}"));
    std::fs::create_dir(&v).unwrap();
    std::fs::write(v.join("token"), text).unwrap();
    std::fs::set_permissions(v.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(&v, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    let link = dir.join("token");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/token", &link).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_api_token_is_required_from_the_next_request_and_an_empty_one_is_refused() {
    let dir = TempDir::new("api-token-reload");
    let ca = issuer("node CA");
    let a = leaf(&ca, &["localhost", "127.0.0.1"], "node A");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    replace(&cert, &a.pem);
    replace(&key, &a.key);
    let secret = dir.path().join("token-secret");
    std::fs::create_dir(&secret).unwrap();
    rotate(&secret, 1, "old-token\n");
    let token = secret.join("token");
    let (agent, api, metrics) = start_with(
        dir.path(),
        &cert,
        &key,
        ["--api-token-file".as_ref(), token.as_os_str()],
    );
    let reloads = |result: &str| {
        counter(
            &metrics,
            &format!("ingero_agent_api_token_reloads_total{{result=\"{result}\"}}"),
        )
    };
    let tls = plain_connector(&ca);
    // One connection kept open across the rotation, one new connection per check.
    let mut kept = connect(&tls, &api).await;
    let fresh = async |t: Option<&str>| status(&mut connect(&tls, &api).await, t).await;
    assert_eq!(status(&mut kept, Some("old-token")).await, 200);
    assert_eq!(fresh(Some("old-token")).await, 200);
    assert_eq!(fresh(None).await, 401);
    assert_eq!(fresh(Some("new-token")).await, 401);

    // The Secret is rotated: the old token is refused from the next request on, on the open
    // connection too, and the new one is taken.
    rotate(&secret, 2, "new-token\n");
    assert_eq!(
        status(&mut kept, Some("old-token")).await,
        401,
        "the old token on a connection opened before the rotation"
    );
    assert_eq!(status(&mut kept, Some("new-token")).await, 200);
    assert_eq!(fresh(Some("old-token")).await, 401, "the old token");
    assert_eq!(fresh(Some("new-token")).await, 200, "the new token");
    assert_eq!(reloads("ok"), 1);
    assert_eq!(reloads("error"), 0);

    // An empty file (a rotation gone wrong) gives no token: the new one stays required,
    // counted once however many requests come, and the API does not open up.
    rotate(&secret, 3, "");
    assert_eq!(fresh(Some("new-token")).await, 200, "the token in use");
    assert_eq!(status(&mut kept, Some("new-token")).await, 200);
    assert_eq!(fresh(None).await, 401, "no token with an empty file");
    assert_eq!(
        fresh(Some("")).await,
        401,
        "an empty token with an empty file"
    );
    assert_eq!(fresh(Some("old-token")).await, 401);
    assert_eq!(reloads("error"), 1);
    assert_eq!(reloads("ok"), 1);
    let refused = |l: &str| l.contains("API token file changed but does not load");
    assert!(
        agent
            .log
            .wait_line(refused, Duration::from_secs(10))
            .is_some(),
        "the refusal is logged: {:?}",
        agent.log.lines()
    );

    // A file written in place (same inode, new size) is read again too.
    std::fs::write(&token, "third-token").unwrap();
    assert_eq!(fresh(Some("third-token")).await, 200);
    assert_eq!(fresh(Some("new-token")).await, 401);
    assert_eq!(reloads("ok"), 2);
    assert_eq!(reloads("error"), 1);
}
