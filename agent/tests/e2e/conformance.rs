//! The checks every component runs: default config validates, testdata/config.yaml decodes
//! and round-trips, unknown keys are rejected with their path, each invalid config gives
//! its expected errors, and start/shutdown twice is safe.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use component::config::{decode, parse_yaml};
use component::{ComponentConfig, ManualClock, Timestamp};
use ingero_agent::config::{AgentConfig, Encoding, ProviderSetting, RuntimeLaunchProbes};
use ingero_agent::events_out::uds::UdsServer;
use ingero_agent::setup;
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};

fn testdata(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(p)
}

#[test]
fn default_config_validates() {
    AgentConfig::default().validate().unwrap();
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let tree = parse_yaml(&std::fs::read(testdata("config.yaml")).unwrap()).unwrap();
    let cfg: AgentConfig = decode(&tree).unwrap();
    assert_eq!(cfg.fleet.cluster_id, "prod-cluster");
    assert_eq!(cfg.fleet.encoding, Encoding::Json);
    assert_eq!(cfg.fleet.provider, ProviderSetting::Aws);
    assert_eq!(cfg.fleet.poll_interval, Duration::from_secs(15));
    assert_eq!(cfg.fleet.persist_stale_age, Duration::from_secs(600));
    assert_eq!(cfg.health.signal_window, Duration::from_secs(30));
    assert_eq!(cfg.fleet.timeout, Some(Duration::from_secs(5)));
    assert_eq!(
        cfg.health.classifier,
        ingero_agent::health::classifier::Rule::OneSample
    );
    assert_eq!(cfg.metrics.listen, "127.0.0.1:9465");
    assert_eq!(
        cfg.probes.runtime_launch_probes,
        RuntimeLaunchProbes::Always
    );
    assert_eq!(
        cfg.probes.extra_library_roots,
        vec![std::path::PathBuf::from("/srv/venvs")]
    );
    assert!(cfg.remediate.enabled);
    assert_ne!(
        cfg,
        AgentConfig::default(),
        "every key differs from its default"
    );
    let yaml = serde_norway::to_string(&cfg).unwrap();
    let again: AgentConfig = decode(&parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    assert_eq!(again, cfg);
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    let tree = parse_yaml(b"health:\n  warmup: 3\n").unwrap();
    let err = decode::<AgentConfig>(&tree).unwrap_err();
    assert_eq!(err.0.len(), 1);
    assert_eq!(err.0[0].path, "health.warmup");
    assert!(err.0[0].message.contains("unknown field"), "{err}");
}

#[test]
fn each_invalid_config_gives_its_expected_errors() {
    let mut checked = 0;
    for entry in std::fs::read_dir(testdata("invalid")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} has no `# expect:` line", path.display()));
        let mut want: Vec<&str> = expect.split(", ").collect();
        want.sort_unstable();
        let err = decode::<AgentConfig>(&parse_yaml(text.as_bytes()).unwrap())
            .expect_err(&format!("{} must be rejected", path.display()));
        let mut got: Vec<String> = err.iter().map(|e| e.path.clone()).collect();
        got.sort_unstable();
        assert_eq!(got, want, "{}: {err}", path.display());
        checked += 1;
    }
    assert!(checked >= 8);
}

#[tokio::test]
async fn start_and_shutdown_twice_is_safe() {
    let dir = native::TempDir::new("twice");
    // The socket: bind, shut down twice, bind again on the same path.
    let sock = dir.path().join("s.sock");
    let uds = UdsServer::bind(&sock, None).unwrap();
    uds.shutdown().await;
    uds.shutdown().await;
    let uds = UdsServer::bind(&sock, None).unwrap();
    uds.shutdown().await;
    // A file that is not a socket is never replaced.
    std::fs::write(&sock, "data").unwrap();
    assert!(
        UdsServer::bind(&sock, None)
            .unwrap_err()
            .to_string()
            .contains("not a socket")
    );

    // The agent loop: run and stop, twice.
    let mut cfg = AgentConfig::default();
    cfg.remediate.enabled = true;
    cfg.remediate.socket = dir.path().join("agent.sock");
    cfg.remediate.gid = None;
    cfg.fleet.persist_path = dir.path().join("b.json");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_779_185_000)));
    let src = SyntheticSource::new(
        SyntheticScript::parse("0s:1").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let built = setup::build(&cfg, clock, Box::new(src), None, None).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(true);
    let agent = built.agent.run(rx.clone()).await;
    let agent = agent.run(rx).await;
    drop(tx);
    assert_eq!(agent.core().baseliner().sample_count(), 0);
    assert!(
        !cfg.fleet.persist_path.exists(),
        "nothing persisted before warm-up"
    );
}
