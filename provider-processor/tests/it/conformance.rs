//! The conformance checks every component runs: default config validates, testdata config
//! decodes and round-trips, unknown keys are rejected with their path, each invalid config
//! gives every expected error, start/shutdown twice is safe.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may unwrap

use crate::common;

use std::time::Duration;

use component::config::{self, ComponentConfig, ConfigValue};
use component::{EmptyHost, Processor, Timestamp};
use provider_processor::{ProviderConfig, TYPE, create};

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn type_name() {
    assert_eq!(TYPE, "provider_lookup");
}

#[test]
fn default_config_validates_and_builds() {
    ProviderConfig::default().validate().unwrap();
    let p = create(&ConfigValue::Null).unwrap();
    assert_eq!(p.tick_interval(), Duration::from_secs(10));
    assert_eq!(p.rules_loaded(), 0);
    assert_eq!(&**p.rate_table().currency(), "USD");
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let v = config::parse_yaml(read("testdata/config.yaml").as_bytes()).unwrap();
    let cfg: ProviderConfig = config::decode(&v).unwrap();
    assert_eq!(cfg.default_provider, "on-prem");
    assert_eq!(cfg.tick_interval, Duration::from_secs(5));
    assert_eq!(cfg.cost.window, Duration::from_secs(120));
    assert_eq!(cfg.cost.node_ttl, Duration::from_secs(90));
    assert_eq!(cfg.limits.max_unknown_model_labels, 32);
    assert_eq!(cfg.aliases.get("amzn").map(String::as_str), Some("ec2"));
    assert_ne!(cfg, ProviderConfig::default());

    let back = serde_json::to_value(&cfg).unwrap();
    let again: ProviderConfig = config::decode(&back).unwrap();
    assert_eq!(cfg, again);
    // Durations serialise in the Go form the config was written in.
    assert_eq!(back["cost"]["node_ttl"], "1m30s");

    // And the files it names load.
    let p = create(&v).unwrap();
    assert_eq!(p.rules_loaded(), 4);
    let rates = p.rate_table();
    assert_eq!(rates.lookup("ec2", common::H100).hourly, 9.80);
    assert_eq!(rates.lookup("crusoe", common::H100).hourly, 3.90);
    assert_eq!(rates.lookup("gcp", common::H100).hourly, 11.06);
    assert_eq!(rates.fallback_rate(), 2.0);
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    for (yaml, path) in [
        ("rule_file: x.yaml", "rule_file"),
        ("cost: {window: 1m, windw: 2m}", "cost.windw"),
        ("limits: {max_node: 3}", "limits.max_node"),
    ] {
        let v = config::parse_yaml(yaml.as_bytes()).unwrap();
        let errs = create(&v).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs}");
        assert_eq!(errs.0[0].path, path);
        assert!(errs.0[0].message.contains("unknown field"), "{errs}");
    }
}

/// `# expect: path: text` lines name the errors `decode` must give (all of them, no
/// more); `# expect-create:` lines the errors `create` must give.
#[test]
fn each_invalid_config_gives_every_expected_error() {
    let mut files: Vec<_> = std::fs::read_dir("testdata/invalid")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 7);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expect = |tag: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.strip_prefix(tag))
                .map(|s| s.trim().to_string())
                .collect()
        };
        let (decode_expect, create_expect) = (expect("# expect:"), expect("# expect-create:"));
        assert!(
            !decode_expect.is_empty() || !create_expect.is_empty(),
            "{} expects nothing",
            file.display()
        );
        let v = config::parse_yaml(text.as_bytes()).unwrap();
        let create_only = decode_expect.is_empty();
        let (errs, want) = if create_only {
            config::decode::<ProviderConfig>(&v).unwrap();
            (create(&v).unwrap_err(), create_expect)
        } else {
            (
                config::decode::<ProviderConfig>(&v).unwrap_err(),
                decode_expect,
            )
        };
        let got: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(got.len(), want.len(), "{}: {got:#?}", file.display());
        for w in &want {
            let (path, text) = w.split_once(": ").unwrap();
            assert!(
                errs.iter()
                    .any(|e| e.path == path && e.message.contains(text)),
                "{}: no error at {path:?} containing {text:?} in {got:#?}",
                file.display()
            );
        }
        // create reports the same decode errors.
        if !create_only {
            assert_eq!(create(&v).unwrap_err(), errs);
        }
    }
}

#[test]
fn start_and_shutdown_twice_are_safe() {
    let p = create(&ConfigValue::Null).unwrap();
    p.start(&EmptyHost).unwrap();
    p.start(&EmptyHost).unwrap();
    p.shutdown();
    p.shutdown();
    p.start(&EmptyHost).unwrap();
    let mut batch = vec![common::health_push(
        "c",
        "n",
        Some("aws"),
        Some((common::H100, 8)),
        0,
    )];
    p.process(&mut batch, &common::ctx(Timestamp::from_secs(1)));
    assert_eq!(common::provider_of(&batch[0]).as_deref(), Some("ec2"));
    p.tick(Timestamp::from_secs(2));
    p.shutdown();
    let mut fams = Vec::new();
    p.telemetry(&mut fams);
    assert!(!fams.is_empty());
}
