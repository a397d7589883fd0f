//! TLS on the listeners (rustls with the `ring` provider).
//!
//! - [`load`] reads and checks a listener's `tls` block: certificate chain, matching key,
//!   client CA bundle (mTLS). `validate`, plan building and startup all use it, so a bad
//!   file fails the same way everywhere, with the key path of the offending setting.
//! - [`ListenerTls`] holds the listener's current `rustls::ServerConfig` in an `ArcSwap`:
//!   each new connection's handshake uses whatever config is current, and a reload (on
//!   `SIGHUP`, or every `reload_interval` when the files changed) swaps in a new one. A
//!   reload that fails keeps the old config, logs why and is counted.
//! - The handshake runs in the connection's own task, bounded by `handshake_timeout`,
//!   never in the accept loop.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

use crate::config::tls::{ServerTlsConfig, TlsVersion};
use crate::telemetry::TlsStats;

/// ALPN of the HTTP listeners: HTTP/2 preferred, HTTP/1.1 otherwise.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN of the gRPC listener: gRPC is HTTP/2 only.
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];

/// A problem with one setting of a `tls` block; `key` is relative to the block
/// (`cert_file`, `key_file`, `client_ca_file`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TlsError {
    pub key: &'static str,
    pub message: String,
}

fn err(key: &'static str, message: impl Into<String>) -> TlsError {
    TlsError {
        key,
        message: message.into(),
    }
}

/// The raw bytes of a `tls` block's files, as read for one load.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Option<Vec<u8>>,
}

impl Files {
    fn read(cfg: &ServerTlsConfig) -> Result<Files, TlsError> {
        let read = |key: &'static str, path: &str| -> Result<Vec<u8>, TlsError> {
            if path.is_empty() {
                return Err(err(key, "is required when tls is configured"));
            }
            std::fs::read(path).map_err(|e| err(key, format!("cannot read {path}: {e}")))
        };
        Ok(Files {
            cert: read("cert_file", &cfg.cert_file)?,
            key: read("key_file", &cfg.key_file)?,
            ca: match &cfg.client_ca_file {
                Some(p) => Some(read("client_ca_file", p)?),
                None => None,
            },
        })
    }

    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [Some(&self.cert), Some(&self.key), self.ca.as_ref()] {
            match part {
                Some(b) => {
                    h.update((b.len() as u64).to_le_bytes());
                    h.update(b);
                }
                None => h.update(u64::MAX.to_le_bytes()),
            }
        }
        h.finalize().into()
    }
}

/// A loaded `tls` block: the server config and the leaf certificate's SHA-256.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Arc<ServerConfig>,
    /// Lowercase hex SHA-256 of the leaf certificate (DER).
    pub fingerprint: String,
}

fn certs(
    key: &'static str,
    path: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(key, format!("{path} is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(err(
            key,
            format!("{path} contains no certificates (expected PEM CERTIFICATE blocks)"),
        ));
    }
    Ok(certs)
}

fn build(cfg: &ServerTlsConfig, files: &Files, alpn: &[&[u8]]) -> Result<Loaded, TlsError> {
    let chain = certs("cert_file", &cfg.cert_file, &files.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| {
        err(
            "key_file",
            format!("{} holds no usable private key: {e}", cfg.key_file),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&'static rustls::SupportedProtocolVersion] = match cfg.min_version {
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| err("min_version", e.to_string()))?;
    let builder = match (&cfg.client_ca_file, &files.ca) {
        (Some(path), Some(pem)) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("client_ca_file", path, pem)? {
                roots.add(c).map_err(|e| {
                    err(
                        "client_ca_file",
                        format!("{path}: not a usable CA certificate: {e}"),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err("client_ca_file", format!("{path}: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let fingerprint = chain
        .first()
        .map(|c| hex(&Sha256::digest(c.as_ref())))
        .unwrap_or_default();
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => err(
            "key_file",
            format!(
                "{} does not match the certificate in {}",
                cfg.key_file, cfg.cert_file
            ),
        ),
        e => err("key_file", format!("{}: {e}", cfg.key_file)),
    })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Loaded {
        config: Arc::new(config),
        fingerprint,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Read and check a `tls` block: the files exist and parse, the key matches the
/// certificate, the client CA file holds certificates.
pub fn load(cfg: &ServerTlsConfig, alpn: &[&[u8]]) -> Result<Loaded, TlsError> {
    build(cfg, &Files::read(cfg)?, alpn)
}

/// Non-fatal findings about a `tls` block (relative key, message): today, a private key
/// file that its group or others may read.
pub fn warnings(cfg: &ServerTlsConfig) -> Vec<(&'static str, String)> {
    secret_file_warning(&cfg.key_file)
        .map(|w| ("key_file", w))
        .into_iter()
        .collect()
}

/// A warning when the secret file at `path` (a private key, a tokens file) may be read or
/// written by its group or others; `None` when it is private or cannot be inspected.
pub fn secret_file_warning(path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0)
        .then(|| format!("{path} is readable by group or others (mode {mode:04o}); chmod 600 it"))
}

/// The TLS side of one listener: the current server config, swapped on reload.
#[derive(Debug)]
pub struct ListenerTls {
    /// Listener name for logs (`otlp/http`).
    name: String,
    /// Config key path of the block (`receivers.otlp.protocols.http.tls`).
    path: String,
    cfg: ServerTlsConfig,
    alpn: Vec<&'static [u8]>,
    current: ArcSwap<ServerConfig>,
    /// Digest of the files of the last load attempt, successful or not, and the current
    /// leaf fingerprint.
    state: Mutex<(Option<[u8; 32]>, String)>,
    pub stats: Arc<TlsStats>,
}

impl ListenerTls {
    pub fn new(
        name: &str,
        path: &str,
        cfg: ServerTlsConfig,
        alpn: &[&'static [u8]],
        stats: Arc<TlsStats>,
    ) -> Result<Arc<ListenerTls>, TlsError> {
        let files = Files::read(&cfg)?;
        let loaded = build(&cfg, &files, alpn)?;
        tracing::info!(
            listener = name,
            fingerprint = %loaded.fingerprint,
            mtls = cfg.client_ca_file.is_some(),
            min_version = cfg.min_version.as_str(),
            "tls certificate loaded"
        );
        Ok(Arc::new(ListenerTls {
            name: name.to_string(),
            path: path.to_string(),
            alpn: alpn.to_vec(),
            current: ArcSwap::new(loaded.config),
            state: Mutex::new((Some(files.digest()), loaded.fingerprint)),
            cfg,
            stats,
        }))
    }

    /// SHA-256 (hex) of the leaf certificate new connections get.
    pub fn fingerprint(&self) -> String {
        self.state.lock().1.clone()
    }

    /// Re-read the files; switch to them when they changed since the last attempt (or
    /// always when `forced`, as on SIGHUP). Returns whether a new config is in use. On
    /// failure the current config stays and the reason is logged and counted.
    pub fn reload(&self, forced: bool) -> Result<bool, TlsError> {
        let result = Files::read(&self.cfg).and_then(|files| {
            let digest = files.digest();
            if !forced && self.state.lock().0 == Some(digest) {
                return Ok(None);
            }
            self.state.lock().0 = Some(digest);
            build(&self.cfg, &files, &self.alpn).map(Some)
        });
        match result {
            Ok(None) => Ok(false),
            Ok(Some(loaded)) => {
                self.current.store(loaded.config);
                self.stats.reloads_ok.fetch_add(1, Relaxed);
                tracing::info!(
                    listener = %self.name,
                    fingerprint = %loaded.fingerprint,
                    "tls certificate reloaded"
                );
                self.state.lock().1 = loaded.fingerprint;
                Ok(true)
            }
            Err(e) => {
                self.stats.reloads_failed.fetch_add(1, Relaxed);
                tracing::warn!(
                    listener = %self.name,
                    key = %format!("{}.{}", self.path, e.key),
                    error = %e.message,
                    "tls reload failed; keeping the previous certificate"
                );
                Err(e)
            }
        }
    }

    /// Reload on SIGHUP and every `reload_interval` until `shutdown`. Each listener has
    /// its own SIGHUP stream, so every listener sees every signal.
    pub fn spawn_reloader(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        use tokio::signal::unix::{SignalKind, signal};
        let me = self.clone();
        let every = self.cfg.reload_interval;
        tokio::spawn(async move {
            let mut hup = match signal(SignalKind::hangup()) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(listener = %me.name, error = %e, "no SIGHUP reload");
                    None
                }
            };
            let mut tick = (!every.is_zero()).then(|| {
                let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            });
            loop {
                let forced = tokio::select! {
                    Some(()) = async {
                        match hup.as_mut() {
                            Some(h) => h.recv().await,
                            None => std::future::pending().await,
                        }
                    } => true,
                    _ = async {
                        match tick.as_mut() {
                            Some(t) => t.tick().await,
                            None => std::future::pending().await,
                        }
                    } => false,
                    _ = shutdown.wait_for(|v| *v) => break,
                };
                let _ = me.reload(forced);
            }
        });
    }

    /// Run the server side of the handshake on `stream` with the current config, within
    /// `handshake_timeout`. Failures are counted and logged at debug level (they are the
    /// client's problem: wrong CA, no client certificate, plaintext on a TLS port).
    pub async fn accept<IO>(&self, stream: IO, peer: std::net::SocketAddr) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.current.load_full());
        match tokio::time::timeout(self.cfg.handshake_timeout, acceptor.accept(stream)).await {
            Ok(Ok(s)) => {
                self.stats.handshakes_ok.fetch_add(1, Relaxed);
                Some(s)
            }
            Ok(Err(e)) => {
                self.stats.handshakes_failed.fetch_add(1, Relaxed);
                tracing::debug!(listener = %self.name, peer = %peer, error = %e, "tls handshake failed");
                None
            }
            Err(_) => {
                self.stats.handshakes_timed_out.fetch_add(1, Relaxed);
                tracing::debug!(listener = %self.name, peer = %peer, "tls handshake timed out");
                None
            }
        }
    }
}

/// A TLS connection of the gRPC listener; tonic needs its connection info.
#[derive(Debug)]
pub struct GrpcTlsConn(pub TlsStream<TcpStream>);

impl Connected for GrpcTlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for GrpcTlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcTlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Most gRPC handshakes in progress at once; connections beyond it are closed at accept.
const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Accept TCP connections on `listener` and hand finished TLS connections to tonic. Each
/// handshake runs in its own task; the accept loop stops at `shutdown`.
pub fn grpc_incoming(
    listener: TcpListener,
    tls: Arc<ListenerTls>,
    lifecycle: crate::conn_guard::Lifecycle,
    table: Arc<crate::conn_guard::ConnTable>,
    stats: Arc<crate::server::ListenerStats>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio_stream::wrappers::ReceiverStream<
    Result<crate::conn_guard::Guarded<GrpcTlsConn>, io::Error>,
> {
    use crate::conn_guard::Guarded;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        while let Some((stream, peer)) =
            crate::server::accept(&listener, &mut shutdown, &tls.name).await
        {
            let Some(slot) = table.admit(peer.ip(), &stats) else {
                drop(stream);
                continue;
            };
            let Ok(permit) = pending.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let tls = tls.clone();
            let tx = tx.clone();
            let stats = stats.clone();
            tokio::spawn(async move {
                if let Some(s) = tls.accept(stream, peer).await {
                    drop(permit);
                    // The first-byte deadline starts once the handshake is done.
                    let busy = slot.busy();
                    let g = Guarded::new(GrpcTlsConn(s), lifecycle, busy, stats, Some(slot));
                    let _ = tx.send(Ok(g)).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
