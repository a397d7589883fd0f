//! The checks every component runs: defaults validate, testdata round-trips, unknown keys
//! are rejected with their path, each invalid config gives its expected errors, and
//! start/shutdown twice is safe.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use component::config::{self, ComponentConfig, ConfigValue};
use component::{EmptyHost, Processor};
use ingero_processor::config::*;
use ingero_processor::{IngeroConfig, IngeroProcessor, TYPE, create};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

fn load(rel: &str) -> ConfigValue {
    let bytes = std::fs::read(testdata(rel)).unwrap();
    config::parse_yaml(&bytes).unwrap()
}

#[test]
fn default_config_validates_and_null_means_defaults() {
    IngeroConfig::default().validate().unwrap();
    let cfg: IngeroConfig = config::decode(&ConfigValue::Null).unwrap();
    assert_eq!(cfg, IngeroConfig::default());
    let cfg: IngeroConfig = config::decode(&serde_json::json!({})).unwrap();
    assert_eq!(cfg, IngeroConfig::default());
}

#[test]
fn the_seeds_fleet_config_parses_to_the_seed_defaults() {
    let root = load("fleet-config.yaml");
    let sub = &root["processors"][TYPE];
    let cfg: IngeroConfig = config::decode(sub).unwrap();
    assert_eq!(cfg.threshold.k, 2.0);
    assert_eq!(cfg.threshold.ema_alpha, 0.2);
    assert_eq!(cfg.quorum.statistical_min, 5);
    assert_eq!(cfg.quorum.coverage_fraction, 0.80);
    assert_eq!(cfg.push_interval, Duration::from_secs(10));
    assert_eq!(cfg.ttl_multiplier, 5);
    // The seed sets exactly the defaults.
    assert_eq!(cfg, IngeroConfig::default());
    let p = create(sub).unwrap();
    assert_eq!(p.push_interval(), Duration::from_secs(10));
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let v = load("config.yaml");
    let cfg: IngeroConfig = config::decode(&v).unwrap();
    assert_eq!(cfg.threshold.k, 2.5);
    assert_eq!(cfg.threshold.mad_floor, 0.005);
    assert_eq!(cfg.quorum.expected_window, Duration::from_secs(600));
    assert_eq!(cfg.quorum.expected_nodes.get("prod-b"), Some(&128));
    assert!(cfg.quorum.require_coverage);
    assert_eq!(cfg.push_interval, Duration::from_secs(5));
    assert!(cfg.cohorts.enabled);
    assert_eq!(cfg.panic.max_duration, Duration::from_secs(120));
    assert_eq!(cfg.classifier.decision, 5.0);
    assert_eq!(cfg.classifier.clear_margin, 1.5);
    assert_eq!(cfg.classifier.clear_holdoff, 6);
    assert_eq!(cfg.classifier.evidence, 2);
    assert_eq!(cfg.classifier.shallow_decision, 14.0);
    assert_eq!(cfg.limits.max_nodes_total, 16384);
    assert_eq!(cfg.diagnostics.max_nodes_per_cluster, 200);
    assert_ne!(
        cfg,
        IngeroConfig::default(),
        "every key differs from its default"
    );
    // Serialise (durations as strings) and decode again: identical.
    let again: IngeroConfig = config::decode(&serde_json::to_value(&cfg).unwrap()).unwrap();
    assert_eq!(again, cfg);
    let yaml = serde_norway::to_string(&cfg).unwrap();
    let again: IngeroConfig =
        config::decode(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    assert_eq!(again, cfg);
}

#[test]
fn every_key_of_the_defaults_is_in_testdata_and_vice_versa() {
    fn keys(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        if let Some(obj) = v.as_object() {
            for (k, child) in obj {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if child.is_object() && path != "quorum.expected_nodes" {
                    keys(child, &path, out);
                } else {
                    out.push(path);
                }
            }
        }
    }
    let mut from_default = Vec::new();
    keys(
        &serde_json::to_value(IngeroConfig::default()).unwrap(),
        "",
        &mut from_default,
    );
    let mut from_testdata = Vec::new();
    keys(&load("config.yaml"), "", &mut from_testdata);
    from_default.sort();
    from_testdata.sort();
    assert_eq!(from_default, from_testdata);
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    for (doc, path) in [
        (serde_json::json!({"threshold": {"kk": 1}}), "threshold.kk"),
        (serde_json::json!({"quorum": {"min": 1}}), "quorum.min"),
        (serde_json::json!({"bogus": true}), "bogus"),
        (
            serde_json::json!({"panic": {"enabled": true, "enter": 0.5}}),
            "panic.enter",
        ),
    ] {
        let errs = config::decode::<IngeroConfig>(&doc).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs}");
        assert_eq!(errs.0[0].path, path);
        assert!(errs.0[0].message.contains("unknown field"), "{errs}");
        let prefixed = errs.prefixed("processors.ingero");
        assert!(
            prefixed
                .to_string()
                .starts_with(&format!("processors.ingero.{path}: unknown field"))
        );
    }
}

#[test]
fn each_invalid_config_gives_its_expected_errors() {
    let dir = testdata("invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|l| l.split_once(": ").unwrap())
            .collect();
        assert!(!expected.is_empty(), "{file:?} has no expectations");
        let errs = match config::parse_yaml(text.as_bytes()) {
            Ok(v) => config::decode::<IngeroConfig>(&v).unwrap_err(),
            Err(e) => e.into(),
        };
        assert_eq!(errs.len(), expected.len(), "{file:?}:\n{errs}");
        let mut unmatched: Vec<_> = errs.iter().collect();
        for (path, msg) in &expected {
            let pos = unmatched
                .iter()
                .position(|e| e.path == *path && e.message.contains(msg))
                .unwrap_or_else(|| panic!("{file:?}: no error `{path}: {msg}` in\n{errs}"));
            unmatched.remove(pos);
        }
        // create() refuses the same config with the same errors.
        if let Ok(v) = config::parse_yaml(text.as_bytes()) {
            assert_eq!(create(&v).unwrap_err(), errs);
        }
    }
}

#[test]
fn new_validates_too() {
    let mut cfg = IngeroConfig::default();
    cfg.threshold.k = 0.0;
    let errs = IngeroProcessor::new(cfg).unwrap_err();
    assert_eq!(errs.0[0].path, "threshold.k");
}

#[test]
fn defaults_are_the_documented_constants() {
    let c = IngeroConfig::default();
    assert_eq!(c.threshold.mad_floor, DEFAULT_MAD_FLOOR);
    assert_eq!(c.quorum.expected_window, DEFAULT_EXPECTED_WINDOW);
    assert_eq!(c.panic.enter_fraction, DEFAULT_PANIC_ENTER_FRACTION);
    assert_eq!(c.panic.exit_fraction, DEFAULT_PANIC_EXIT_FRACTION);
    assert_eq!(c.classifier.drift, DEFAULT_CLASSIFIER_DRIFT);
    assert_eq!(c.classifier.decision, DEFAULT_CLASSIFIER_DECISION);
    assert_eq!(c.classifier.clear_margin, DEFAULT_CLASSIFIER_CLEAR_MARGIN);
    assert_eq!(c.classifier.clear_holdoff, DEFAULT_CLASSIFIER_CLEAR_HOLDOFF);
    assert_eq!(c.classifier.evidence, DEFAULT_CLASSIFIER_EVIDENCE);
    assert_eq!(
        c.classifier.shallow_decision,
        DEFAULT_CLASSIFIER_SHALLOW_DECISION
    );
    assert_eq!(c.limits.max_clusters, DEFAULT_MAX_CLUSTERS);
}

#[test]
fn start_and_shutdown_twice_is_safe() {
    let p = IngeroProcessor::new(IngeroConfig::default()).unwrap();
    let (host, sink) = common::host_with_sink();
    p.start(&host).unwrap();
    p.start(&host).unwrap();
    p.shutdown();
    p.shutdown();
    p.start(&EmptyHost).unwrap();
    p.shutdown();
    p.start(&host).unwrap();
    p.tick(component::Timestamp::from_secs(1));
    assert_eq!(sink.count(), 1);
    p.shutdown();
}
