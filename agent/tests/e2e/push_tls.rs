//! TLS, mutual TLS and bearer tokens against the Fleet stand-in (spec 1.7): certificates
//! are generated per test with rcgen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::fleet_server;
use crate::native;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use component::{ManualClock, Timestamp};
use fleet_server::TestFleet;
use ingero_agent::config::{AgentConfig, ProviderSetting};
use ingero_agent::health::mode::DetectionMode;
use ingero_agent::setup;
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};
use native::TempDir;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

struct Pki {
    ca: PathBuf,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivateKeyDer<'static>,
    client_cert: PathBuf,
    client_key: PathBuf,
    rogue_cert: PathBuf,
    rogue_key: PathBuf,
    ca_der: CertificateDer<'static>,
}

fn issuer(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(ca: &CertifiedIssuer<'static, KeyPair>, sans: &[&str], cn: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn pki(dir: &Path) -> Pki {
    let ca = issuer("ingero test CA");
    let rogue_ca = issuer("someone else");
    let (server_pem, server_key_pem) = leaf(&ca, &["127.0.0.1", "localhost"], "fleet");
    let (client_pem, client_key_pem) = leaf(&ca, &[], "agent");
    let (rogue_pem, rogue_key_pem) = leaf(&rogue_ca, &[], "agent");
    let p = |n: &str| dir.join(n);
    std::fs::write(p("ca.pem"), ca.pem()).unwrap();
    std::fs::write(p("client.pem"), client_pem).unwrap();
    write_private(&p("client.key"), &client_key_pem);
    std::fs::write(p("rogue.pem"), rogue_pem).unwrap();
    write_private(&p("rogue.key"), &rogue_key_pem);
    Pki {
        ca: p("ca.pem"),
        server_chain: vec![CertificateDer::from_pem_slice(server_pem.as_bytes()).unwrap()],
        server_key: PrivateKeyDer::from_pem_slice(server_key_pem.as_bytes()).unwrap(),
        client_cert: p("client.pem"),
        client_key: p("client.key"),
        rogue_cert: p("rogue.pem"),
        rogue_key: p("rogue.key"),
        ca_der: ca.der().clone(),
    }
}

fn server_config(p: &Pki, require_client_cert: bool) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(p.ca_der.clone()).unwrap();
        let v =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(v)
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(
        builder
            .with_single_cert(p.server_chain.clone(), p.server_key.clone_key())
            .unwrap(),
    )
}

fn config(url: &str) -> AgentConfig {
    let mut c = AgentConfig::default();
    c.fleet.endpoint = url.to_string();
    c.fleet.cluster_id = "tls".into();
    c.fleet.node_id = "n".into();
    c.fleet.provider = ProviderSetting::None;
    c.fleet.persist_path = "".into();
    c.health.warmup_samples = 1;
    c
}

fn agent(cfg: &AgentConfig, clock: Arc<ManualClock>) -> setup::Built {
    let src = SyntheticSource::new(
        SyntheticScript::parse("0s:1").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let b = setup::build(cfg, clock, Box::new(src), None, None).unwrap();
    b.push
        .as_ref()
        .unwrap()
        .set_retry_delay(Duration::from_millis(5));
    b
}

#[tokio::test]
async fn mutual_tls_push_reaches_fleet_mode() {
    let dir = TempDir::new("mtls");
    let p = pki(dir.path());
    let server = TestFleet::start_tls(server_config(&p, true)).await;
    server.threshold("0.5", "true");
    let mut cfg = config(&server.url());
    cfg.fleet.tls_ca = Some(p.ca.clone());
    cfg.fleet.tls_cert = Some(p.client_cert.clone());
    cfg.fleet.tls_key = Some(p.client_key.clone());
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_779_185_000)));
    let mut a = agent(&cfg, clock.clone()).agent;
    clock.advance(Duration::from_secs(10));
    assert!(a.tick().await.health_push.unwrap().ok());
    clock.advance(Duration::from_secs(10));
    let r = a.tick().await;
    assert_eq!(r.outcome.report.unwrap().mode.mode, DetectionMode::Fleet);
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let dir = TempDir::new("rogue");
    let p = pki(dir.path());
    let server = TestFleet::start_tls(server_config(&p, true)).await;
    let mut cfg = config(&server.url());
    cfg.fleet.tls_ca = Some(p.ca.clone());
    cfg.fleet.tls_cert = Some(p.rogue_cert.clone());
    cfg.fleet.tls_key = Some(p.rogue_key.clone());
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_779_185_000)));
    let mut a = agent(&cfg, clock.clone()).agent;
    clock.advance(Duration::from_secs(10));
    let r = a.tick().await.health_push.unwrap();
    assert!(!r.ok() && r.status.is_none(), "{r:?}");
    assert!(server.received().is_empty());
}

#[tokio::test]
async fn an_unknown_server_certificate_is_refused() {
    let dir = TempDir::new("untrusted");
    let p = pki(dir.path());
    let server = TestFleet::start_tls(server_config(&p, false)).await;
    // No CA given: system roots, which do not know the test CA.
    let cfg = config(&server.url());
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_779_185_000)));
    let mut a = agent(&cfg, clock.clone()).agent;
    clock.advance(Duration::from_secs(10));
    let r = a.tick().await.health_push.unwrap();
    let err = r.error.unwrap();
    assert!(
        err.contains("certificate") || err.contains("Certificate"),
        "{err}"
    );
    assert!(server.received().is_empty());
}

#[tokio::test]
async fn bearer_token_is_read_from_its_file_on_every_push() {
    let dir = TempDir::new("token");
    let p = pki(dir.path());
    let server = TestFleet::start_tls(server_config(&p, false)).await;
    let token = dir.path().join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let mut cfg = config(&server.url());
    cfg.fleet.token_file = Some(token.clone());
    // Server-only TLS with our CA: give the CA, client cert and key (all three or none).
    cfg.fleet.tls_ca = Some(p.ca.clone());
    cfg.fleet.tls_cert = Some(p.client_cert.clone());
    cfg.fleet.tls_key = Some(p.client_key.clone());
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_779_185_000)));
    let mut a = agent(&cfg, clock.clone()).agent;
    clock.advance(Duration::from_secs(10));
    a.tick().await;
    std::fs::write(&token, "rotated-token").unwrap();
    clock.advance(Duration::from_secs(10));
    a.tick().await;
    let auth: Vec<Option<String>> = server
        .received()
        .into_iter()
        .map(|r| r.authorization)
        .collect();
    assert_eq!(
        auth,
        [
            Some("Bearer first-token".to_string()),
            Some("Bearer rotated-token".to_string())
        ]
    );
    // A broken token file fails the push without sending anything.
    std::fs::write(&token, "").unwrap();
    clock.advance(Duration::from_secs(10));
    let r = a.tick().await.health_push.unwrap();
    assert!(r.error.unwrap().contains("empty"));
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn a_world_readable_client_key_is_rejected_at_start() {
    let dir = TempDir::new("loosekey");
    let p = pki(dir.path());
    std::fs::set_permissions(&p.client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cfg = config("https://127.0.0.1:9");
    cfg.fleet.tls_ca = Some(p.ca.clone());
    cfg.fleet.tls_cert = Some(p.client_cert.clone());
    cfg.fleet.tls_key = Some(p.client_key.clone());
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
    let src = SyntheticSource::new(
        SyntheticScript::parse("0s:1").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let err = setup::build(&cfg, clock, Box::new(src), None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("readable by group or others"), "{err}");
}
