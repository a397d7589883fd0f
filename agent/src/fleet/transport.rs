//! The HTTP client the push and the poller share: hyper + rustls (TLS 1.2+, optional mTLS),
//! one idle connection per host kept for at most 30 s (so DNS is re-resolved and agents
//! spread across Fleet replicas), a per-request timeout, a capped response body, and an
//! optional bearer token read from a file on every request.
//!
//! The TLS files (CA, client certificate and key) are looked at before every request
//! ([`crate::tlsfiles`]): when one of them changed (cert-manager renewing the Secret, which
//! swaps the files), the client is built again from the new files and the next requests use
//! it on new connections. New files that do not load (half written, a key that does not
//! match) are logged and counted (`role="client"`), and the previous client stays in use
//! until the files change again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::tlsfiles::{Reloading, Role, given};

pub const IDLE_CONN_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_IDLE_PER_HOST: usize = 1;
/// Environment switch that accepts a group/world-readable client key.
pub const ALLOW_LOOSE_KEY_PERMS_ENV: &str = "INGERO_TLS_ALLOW_LOOSE_KEY_PERMS";
/// Longest bearer token accepted from the token file.
pub const MAX_TOKEN_LEN: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// Why a request got no usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No HTTP response (connect, TLS, reset): the class that is retried once.
    #[error("network error: {0}")]
    Network(String),
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    #[error("bearer token: {0}")]
    Token(String),
    #[error("response body larger than {0} bytes")]
    BodyTooLarge(usize),
}

impl SendError {
    /// Network-class failures (no response at all) are retried once by the push.
    pub fn is_network(&self) -> bool {
        matches!(self, SendError::Network(_) | SendError::Timeout(_))
    }
}

/// TLS material for https endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// An HTTP response with its body (read up to the caller's cap).
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Clone)]
pub struct HttpTransport {
    /// The client, built again when the TLS files change.
    current: Arc<Reloading<HttpsClient, TransportError>>,
    timeout: Duration,
    token_file: Option<PathBuf>,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("timeout", &self.timeout)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, TransportError> {
    std::fs::read(path).map_err(|source| TransportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn pem_err(path: &Path, reason: impl Into<String>) -> TransportError {
    TransportError::Pem {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The client key must be a regular file that only its owner can read (unless
/// [`ALLOW_LOOSE_KEY_PERMS_ENV`] is `1`).
fn check_key_file(path: &Path) -> Result<(), TransportError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| TransportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        return Err(pem_err(path, "is a directory"));
    }
    let loose = std::env::var(ALLOW_LOOSE_KEY_PERMS_ENV).is_ok_and(|v| v == "1");
    if meta.permissions().mode() & 0o077 != 0 && !loose {
        return Err(pem_err(
            path,
            format!(
                "private key is readable by group or others (mode {:o}); chmod 600 it or set {ALLOW_LOOSE_KEY_PERMS_ENV}=1",
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// rustls client config: TLS 1.2+, CA file or system roots, optional client certificate.
pub fn client_tls_config(files: &TlsFiles) -> Result<rustls::ClientConfig, TransportError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            let pem = read_file(ca)?;
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| pem_err(ca, e.to_string()))?;
                roots.add(cert).map_err(|e| pem_err(ca, e.to_string()))?;
                n += 1;
            }
            if n == 0 {
                return Err(pem_err(ca, "no certificate found"));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                // Unparseable system certificates are skipped, as every TLS stack does.
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            check_key_file(key)?;
            let cert_pem = read_file(cert)?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| pem_err(cert, e.to_string()))?;
            if chain.is_empty() {
                return Err(pem_err(cert, "no certificate found"));
            }
            let key_pem = read_file(key)?;
            let key_der =
                PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| pem_err(key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| TransportError::Tls(e.to_string()))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// Read a bearer token: trimmed, non-empty, visible ASCII only, bounded length.
pub fn read_token(path: &Path) -> Result<String, SendError> {
    let raw = std::fs::read(path)
        .map_err(|e| SendError::Token(format!("read {}: {e}", path.display())))?;
    if raw.len() > MAX_TOKEN_LEN {
        return Err(SendError::Token(format!(
            "{} is larger than {MAX_TOKEN_LEN} bytes",
            path.display()
        )));
    }
    let s = String::from_utf8(raw).map_err(|_| SendError::Token("token is not UTF-8".into()))?;
    let t = s.trim();
    if t.is_empty() {
        return Err(SendError::Token(format!("{} is empty", path.display())));
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SendError::Token(
            "token contains whitespace or control characters".into(),
        ));
    }
    Ok(t.to_string())
}

impl HttpTransport {
    pub fn new(
        tls: &TlsFiles,
        timeout: Duration,
        token_file: Option<PathBuf>,
    ) -> Result<Self, TransportError> {
        let files = given([&tls.ca, &tls.cert, &tls.key]);
        let tls = tls.clone();
        // A new client on every change, so pooled connections made with the old
        // certificate are not reused.
        let current = Reloading::new(Role::Client, files, move || {
            Ok(Self::client(client_tls_config(&tls)?, timeout))
        })?;
        Ok(HttpTransport {
            current: Arc::new(current),
            timeout,
            token_file,
        })
    }

    fn client(tls: rustls::ClientConfig, timeout: Duration) -> HttpsClient {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_CONN_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .build(connector)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Send `req` (adding the bearer token if configured) and read at most `body_cap`
    /// bytes of the response body, all within the timeout. Redirects are not followed.
    pub async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
        body_cap: usize,
    ) -> Result<Response, SendError> {
        if let Some(path) = &self.token_file {
            let token = read_token(path)?;
            let v = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|e| SendError::Token(e.to_string()))?;
            req.headers_mut().insert(http::header::AUTHORIZATION, v);
        }
        let client = self.current.get();
        let exchange = async {
            let resp = client
                .request(req)
                .await
                .map_err(|e| SendError::Network(error_chain(&e)))?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, body_cap)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        SendError::BodyTooLarge(body_cap)
                    } else {
                        SendError::Network(e.to_string())
                    }
                })?
                .to_bytes();
            Ok(Response {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(SendError::Timeout(self.timeout)),
        }
    }
}

/// An error with its sources, `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tokens_are_trimmed_and_checked() {
        let dir = TempDir::new("token");
        let p = dir.path().join("t");
        std::fs::write(&p, "  abc.def-123\n").unwrap();
        assert_eq!(read_token(&p).unwrap(), "abc.def-123");
        std::fs::write(&p, "a b").unwrap();
        assert!(read_token(&p).is_err());
        std::fs::write(&p, "\n").unwrap();
        assert!(read_token(&p).is_err());
        assert!(read_token(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn loose_key_permissions_are_refused() {
        let dir = TempDir::new("keyperm");
        let key = dir.path().join("k.pem");
        std::fs::write(&key, "x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key_file(&key).unwrap_err().to_string();
        assert!(e.contains("readable by group or others"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_file(&key).unwrap();
        assert!(
            check_key_file(dir.path())
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
    }

    #[test]
    fn a_bad_ca_file_is_a_clear_error() {
        let dir = TempDir::new("badca");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a cert").unwrap();
        let files = TlsFiles {
            ca: Some(ca),
            ..Default::default()
        };
        let e = client_tls_config(&files).unwrap_err().to_string();
        assert!(e.contains("no certificate found"), "{e}");
    }

    /// A TLS server on loopback that requires a client certificate from `ca` and records
    /// the certificate of each connection; it answers 200 and closes the connection.
    async fn mtls_server(
        ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    ) -> (std::net::SocketAddr, Arc<parking_lot::Mutex<Vec<Vec<u8>>>>) {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "server");
        let cert = params.signed_by(&key, ca).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Some(c) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                        seen.lock().push(c.to_vec());
                    }
                    // One request per connection, so each push is a new handshake.
                    let svc = hyper::service::service_fn(|_req| async {
                        let mut r = http::Response::new(Full::new(Bytes::from_static(b"ok")));
                        r.headers_mut()
                            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                        Ok::<_, std::convert::Infallible>(r)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    fn client_cert(
        ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
        cn: &str,
    ) -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, ca).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    /// Replace `path` the way a Secret update does: write a new file beside it and rename
    /// it over (a new inode).
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[tokio::test]
    async fn a_renewed_client_certificate_is_used_without_a_restart_and_a_broken_one_is_not() {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "reload CA");
        let ca =
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
        let (addr, seen) = mtls_server(&ca).await;
        let dir = TempDir::new("certreload");
        let (ca_file, cert, key) = (
            dir.path().join("ca.crt"),
            dir.path().join("tls.crt"),
            dir.path().join("tls.key"),
        );
        replace(&ca_file, &ca.pem());
        let (a_pem, a_key, a_der) = client_cert(&ca, "agent A");
        let (b_pem, b_key, b_der) = client_cert(&ca, "agent B");
        replace(&cert, &a_pem);
        replace(&key, &a_key);
        let files = TlsFiles {
            ca: Some(ca_file),
            cert: Some(cert.clone()),
            key: Some(key.clone()),
        };
        let t = HttpTransport::new(&files, Duration::from_secs(10), None).unwrap();
        let push = || {
            let req = Request::post(format!("https://localhost:{}/v1/metrics", addr.port()))
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            t.send(req, 1024)
        };
        let counts = Role::Client.counts();
        let ok_before = counts.ok();
        let failed_before = counts.error();
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);

        // cert-manager renews the Secret: the next push uses B.
        replace(&cert, &b_pem);
        replace(&key, &b_key);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        assert_eq!(seen.lock().last(), Some(&b_der), "the renewed certificate");
        assert_eq!(counts.ok(), ok_before + 1);

        // Broken replacements (half written; then a certificate beside another one's
        // key) do not load: B stays in use and each is counted once.
        replace(&cert, &a_pem[..a_pem.len() / 2]);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        replace(&cert, &a_pem);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        assert_eq!(counts.error(), failed_before + 2);
        assert_eq!(counts.ok(), ok_before + 1);

        // The pair is whole again (A's key beside A's certificate): A is used.
        replace(&key, &a_key);
        assert_eq!(push().await.unwrap().status, StatusCode::OK);
        assert_eq!(counts.ok(), ok_before + 2);
        let a = a_der.clone();
        let b = b_der.clone();
        assert_eq!(
            *seen.lock(),
            [a.clone(), a.clone(), b.clone(), b.clone(), b.clone(), b, a]
        );
    }
}
