//! Our agent's push client (synthetic source, no eBPF, no privileges) against the real
//! Fleet service (`collector_host::service::run`, in process) with mTLS on the OTLP/HTTP
//! receiver: five agents with client certificates reach quorum and switch to fleet mode;
//! an agent whose certificate comes from another CA is refused in the handshake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use component::{ManualClock, Timestamp};
use ingero_agent::config::{AgentConfig, ProviderSetting};
use ingero_agent::health::mode::DetectionMode;
use ingero_agent::setup;
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};
use native::TempDir;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

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
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start the Fleet service on its own thread and runtime; dropping the sender stops it.
fn start_fleet(dir: &Path, port: u16) -> tokio::sync::oneshot::Sender<()> {
    let p = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let yaml = format!(
        r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
        tls: {{cert_file: {}, key_file: {}, client_ca_file: {}}}
processors:
  ingero:
    quorum: {{statistical_min: 5}}
    push_interval: 1s
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: ""
exporters:
  prometheus:
    endpoint: 127.0.0.1:0
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [prometheus]}}
  telemetry: {{metrics: {{level: none}}}}
"#,
        p("server.pem"),
        p("server.key"),
        p("ca.pem"),
    );
    let root = collector_host::config::source::parse_document("fleet.yaml", &yaml).unwrap();
    let plan =
        collector_host::config::Plan::build_with(&root, &ingero_fleet_dist::components()).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let opts = collector_host::service::RunOptions {
            drain: Duration::from_millis(200),
            ..Default::default()
        };
        rt.block_on(collector_host::service::run(plan, opts, async move {
            let _ = rx.await;
        }))
        .unwrap();
    });
    tx
}

fn agent_config(port: u16, node: &str, dir: &Path, cert: &str, key: &str) -> AgentConfig {
    let mut c = AgentConfig::default();
    c.fleet.endpoint = format!("https://localhost:{port}");
    c.fleet.cluster_id = "tls-agents".into();
    c.fleet.node_id = node.into();
    c.fleet.provider = ProviderSetting::None;
    c.fleet.persist_path = "".into();
    c.fleet.tls_ca = Some(dir.join("ca.pem"));
    c.fleet.tls_cert = Some(dir.join(cert));
    c.fleet.tls_key = Some(dir.join(key));
    c.health.warmup_samples = 1;
    c
}

#[tokio::test]
async fn agents_with_client_certificates_reach_fleet_mode_over_mtls() {
    let dir = TempDir::new("fleet-mtls");
    let ca = issuer("fleet e2e CA");
    let rogue = issuer("another CA");
    let (server_pem, server_key) = leaf(&ca, &["localhost", "127.0.0.1"], "fleet");
    let (agent_pem, agent_key) = leaf(&ca, &[], "agent");
    let (rogue_pem, rogue_key) = leaf(&rogue, &[], "agent");
    let d = dir.path();
    write_private(&d.join("ca.pem"), &ca.pem());
    write_private(&d.join("server.pem"), &server_pem);
    write_private(&d.join("server.key"), &server_key);
    write_private(&d.join("agent.pem"), &agent_pem);
    write_private(&d.join("agent.key"), &agent_key);
    write_private(&d.join("rogue.pem"), &rogue_pem);
    write_private(&d.join("rogue.key"), &rogue_key);

    let port = free_port();
    let _stop = start_fleet(d, port);
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "fleet listening on {port}");

    // The agents' clocks start at the real time: Fleet expires nodes by receive time.
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let mut agents: Vec<_> = (0..6)
        .map(|i| {
            let cfg = agent_config(port, &format!("node-{i}"), d, "agent.pem", "agent.key");
            let src = SyntheticSource::new(
                SyntheticScript::parse("0s:1").unwrap(),
                1000.0,
                Duration::from_secs(60),
            );
            setup::build(&cfg, clock.clone(), Box::new(src), None, None)
                .unwrap()
                .agent
        })
        .collect();

    let mut fleet_mode = false;
    for _ in 0..40 {
        clock.advance(Duration::from_secs(10));
        let mut modes = Vec::new();
        for a in &mut agents {
            let r = a.tick().await;
            let push = r.health_push.expect("a health push every tick");
            assert!(push.ok(), "mTLS push accepted: {push:?}");
            modes.push(r.outcome.report.map(|rep| rep.mode.mode));
        }
        if modes.iter().all(|m| *m == Some(DetectionMode::Fleet)) {
            fleet_mode = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        fleet_mode,
        "every agent switched to fleet mode on the threshold from the TLS Fleet"
    );

    // A certificate from another CA: refused in the handshake, no HTTP status at all.
    let cfg = agent_config(port, "rogue", d, "rogue.pem", "rogue.key");
    let src = SyntheticSource::new(
        SyntheticScript::parse("0s:1").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let b = setup::build(&cfg, clock.clone(), Box::new(src), None, None).unwrap();
    b.push
        .as_ref()
        .unwrap()
        .set_retry_delay(Duration::from_millis(5));
    let mut rogue_agent = b.agent;
    clock.advance(Duration::from_secs(10));
    let r = rogue_agent.tick().await.health_push.unwrap();
    assert!(!r.ok() && r.status.is_none(), "{r:?}");
}
