//! Test-time PKI (rcgen) and TLS clients (rustls over std sockets, tonic and hyper over
//! tokio-rustls) for the TLS tests (`tls.rs`, `tls_config.rs`, `tls_exporter.rs`,
//! `conn_lifecycle.rs`, `replicas.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

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

use crate::common::{Resp, parse_response, tempdir};

// ---------------------------------------------------------------------------------------
// Certificates

pub struct Ca {
    pub pem: String,
    pub issuer: Issuer<'static, KeyPair>,
}

pub fn ca(name: &str) -> Ca {
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
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    /// SHA-256 of the certificate (DER), hex.
    pub fingerprint: String,
}

#[derive(Clone, Copy)]
pub enum Validity {
    Current,
    Expired,
}

pub fn leaf(ca: &Ca, names: &[&str], serial: u64, client: bool, validity: Validity) -> Leaf {
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

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write a file with mode 0600 (keys must not be group/world readable).
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Replace a file atomically (write aside, rename), as cert-manager and friends do.
pub fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    write_private(&tmp, text);
    std::fs::rename(&tmp, path).unwrap();
}

/// Server and client material in a temp dir.
pub struct Pki {
    pub dir: tempdir::TempDir,
    pub ca: Ca,
    pub server: Leaf,
}

impl Pki {
    pub fn new(tag: &str) -> Pki {
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

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub fn p(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }

    /// `tls:` flow mapping with the server cert; mTLS against our CA when `mtls`.
    pub fn tls_block(&self, mtls: bool, extra: &str) -> String {
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

pub fn client_config(
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
pub struct Exchange {
    pub resp: Resp,
    /// Fingerprint of the certificate the server presented.
    pub server_fingerprint: String,
    pub alpn: Option<Vec<u8>>,
}

/// Connect and finish the TLS handshake, dialing `name`.
pub fn tls_connect(
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
pub fn https(
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
pub fn h2_get(addr: SocketAddr, cfg: Arc<ClientConfig>, path: &str) -> (u16, String) {
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

pub fn get_req(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes()
}

pub fn push_req(addr: SocketAddr, cluster: &str, body: &str) -> Vec<u8> {
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
pub struct TlsConnector {
    pub addr: SocketAddr,
    pub name: String,
    pub cfg: Arc<ClientConfig>,
}

pub type TlsIo = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

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
pub fn grpc_push(
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
