//! The checks every component passes: default config validates, testdata config decodes
//! and round-trips, an unknown key is rejected with its path, each invalid config gives its
//! expected errors (each `# expect:` line starts one error), and start/shutdown twice is safe.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use component::config::{ConfigValue, decode, parse_yaml};
use component::{BatchContext, ComponentConfig, EmptyHost, Processor, Timestamp};
use nccl_processor::{NcclConfig, TYPE, create};

fn testdata(path: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn type_name_is_nccl_peer_lag() {
    assert_eq!(TYPE, "nccl_peer_lag");
}

#[test]
fn default_config_validates() {
    NcclConfig::default().validate().unwrap();
    let p = create(&ConfigValue::Null).unwrap();
    assert_eq!(p.tick_interval(), Duration::from_secs(1));
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let v = parse_yaml(&testdata("config.yaml")).unwrap();
    let cfg: NcclConfig = decode(&v).unwrap();
    assert_ne!(cfg, NcclConfig::default());
    assert_eq!(cfg.tick_interval, Duration::from_millis(500));
    assert_eq!(cfg.default_cluster_id, "lab-a");
    assert_eq!(cfg.alignment.window, Duration::from_secs(2));
    assert_eq!(cfg.alignment.skew_tolerance_fraction, 0.25);
    assert_eq!(cfg.chronic.window_steps, 64);
    assert_eq!(cfg.limits.comm_idle_timeout, Duration::from_secs(600));
    assert_eq!(cfg.diagnostics_top_ranks, 3);
    // Every key of the struct is present in the file: serialising gives the same tree.
    let back = serde_json::to_value(&cfg).unwrap();
    assert_eq!(back, v, "testdata/config.yaml must spell every key");
    let again: NcclConfig = decode(&back).unwrap();
    assert_eq!(again, cfg);
}

#[test]
fn default_config_round_trips_through_yaml() {
    let v = serde_json::to_value(NcclConfig::default()).unwrap();
    let yaml = serde_norway::to_string(&v).unwrap();
    let cfg: NcclConfig = decode(&parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    assert_eq!(cfg, NcclConfig::default());
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    let v = parse_yaml(b"limits:\n  max_comms: 3\n").unwrap();
    let err = create(&v).unwrap_err();
    assert_eq!(err.0[0].path, "limits.max_comms");
    let v = parse_yaml(b"windowz: 1s\n").unwrap();
    assert_eq!(create(&v).unwrap_err().0[0].path, "windowz");
}

#[test]
fn each_invalid_config_gives_its_expected_errors() {
    let dir = format!("{}/testdata/invalid", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(!expected.is_empty(), "{f:?} has no '# expect:' lines");
        let v = parse_yaml(text.as_bytes()).unwrap();
        let err = create(&v).expect_err(&format!("{f:?} must be rejected"));
        let got: Vec<String> = err.iter().map(|e| e.to_string()).collect();
        for want in &expected {
            assert!(
                got.iter().any(|g| g.starts_with(want)),
                "{f:?}: expected {want:?} among {got:#?}"
            );
        }
        assert_eq!(
            got.len(),
            expected.len(),
            "{f:?}: unexpected extra errors {got:#?}"
        );
    }
}

#[test]
fn start_and_shutdown_twice_is_safe() {
    let p = create(&ConfigValue::Null).unwrap();
    p.start(&EmptyHost).unwrap();
    p.start(&EmptyHost).unwrap();
    let mut batch = Vec::new();
    let out = p.process(&mut batch, &BatchContext::default());
    assert_eq!(out.rejected_points, 0);
    p.shutdown();
    p.shutdown();
    p.start(&EmptyHost).unwrap();
    assert!(p.tick(Timestamp::from_secs(10)).is_empty());
    p.shutdown();
}
