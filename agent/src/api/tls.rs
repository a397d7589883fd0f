//! The API's TLS: TLS 1.3 only (ring), the configured certificate or a generated ECDSA P-256
//! one, and a client-certificate verifier when `api.client_ca` is set. The configured files
//! are looked at on each new connection and loaded again when they changed, so a renewed
//! certificate (or CA) is served without a restart; files that do not load leave the
//! previous config in use.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{ApiConfig, ApiError};
use crate::tlsfiles::{Reloading, Role, given};

/// The server config (as it is now: take it for each new connection) and, when the
/// certificate was generated, its PEM.
#[derive(Debug)]
pub struct ServerTls {
    pub config: Arc<Reloading<Arc<rustls::ServerConfig>, ApiError>>,
    pub generated_pem: Option<String>,
}

fn read(path: &Path) -> Result<Vec<u8>, ApiError> {
    std::fs::read(path).map_err(|e| ApiError::Tls(format!("read {}: {e}", path.display())))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ApiError> {
    let pem = read(path)?;
    let v: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::Tls(format!("{}: {e}", path.display())))?;
    if v.is_empty() {
        return Err(ApiError::Tls(format!(
            "{}: no certificate found",
            path.display()
        )));
    }
    Ok(v)
}

/// Names the generated certificate is valid for: localhost, the loopback addresses, the
/// host name and the listen address when it is a specific one.
fn generated_names(listen: SocketAddr) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() {
            names.push(h.to_string());
        }
    }
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    names.sort();
    names.dedup();
    names
}

/// A self-signed ECDSA P-256 certificate and its key (PEM, DER key).
pub fn generate(
    listen: SocketAddr,
) -> Result<(String, CertificateDer<'static>, PrivateKeyDer<'static>), ApiError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| ApiError::Tls(format!("generate key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(generated_names(listen))
        .map_err(|e| ApiError::Tls(format!("certificate names: {e}")))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ingero-agent query API");
    let cert = params
        .self_signed(&key)
        .map_err(|e| ApiError::Tls(format!("self-sign: {e}")))?;
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| ApiError::Tls(format!("key: {e}")))?;
    Ok((cert.pem(), cert.der().clone(), key_der))
}

/// The parts of the server config that are not reloaded: the generated certificate, when
/// no files were given.
type Generated = (CertificateDer<'static>, PrivateKeyDer<'static>);

/// Build the server config from `cfg`'s files, or from `generated` when it has no
/// certificate files.
fn build(cfg: &ApiConfig, generated: Option<&Generated>) -> Result<rustls::ServerConfig, ApiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ApiError::Tls(e.to_string()))?;
    let builder = match &cfg.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| ApiError::Tls(format!("{}: {e}", ca.display())))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| ApiError::Tls(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let (chain, key) = match (&cfg.tls_cert, &cfg.tls_key, generated) {
        (Some(c), Some(k), _) => {
            let key = PrivateKeyDer::from_pem_slice(&read(k)?)
                .map_err(|e| ApiError::Tls(format!("{}: {e}", k.display())))?;
            (certs(c)?, key)
        }
        (_, _, Some((der, key))) => (vec![der.clone()], key.clone_key()),
        _ => return Err(ApiError::Tls("no certificate".into())),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| ApiError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The API's server config, built again from `api.tls_cert`, `api.tls_key` and
/// `api.client_ca` when they change (looked at on each new connection; see
/// [`crate::tlsfiles`]). A generated certificate is made once, at start.
pub fn server_config(cfg: &ApiConfig, listen: SocketAddr) -> Result<ServerTls, ApiError> {
    let (generated, generated_pem) = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(_), Some(_)) => (None, None),
        _ => {
            let (pem, der, key) = generate(listen)?;
            (Some((der, key)), Some(pem))
        }
    };
    let files = given([&cfg.tls_cert, &cfg.tls_key, &cfg.client_ca]);
    let cfg = cfg.clone();
    let config = Reloading::new(Role::Server, files, move || {
        build(&cfg, generated.as_ref()).map(Arc::new)
    })?;
    Ok(ServerTls {
        config: Arc::new(config),
        generated_pem,
    })
}
