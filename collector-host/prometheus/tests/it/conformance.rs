//! The checks every component runs: default config, testdata round trip, unknown keys,
//! invalid configs, lifecycle.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use component::ComponentConfig;
use component::config::{decode, parse_yaml};
use component::otlp::kv_str;
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig, TranslationStrategy};

fn testdata(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

#[test]
fn default_config_validates_and_has_the_documented_defaults() {
    let cfg = PrometheusExporterConfig::default();
    cfg.validate().unwrap();
    assert_eq!(cfg.endpoint, "127.0.0.1:8889");
    assert_eq!(cfg.metric_expiration, Duration::from_secs(300));
    assert!(cfg.resource_to_telemetry_conversion.enabled);
    assert!(cfg.add_metric_suffixes);
    assert_eq!(cfg.max_series, 2_000_000);
    assert_eq!(cfg.max_series_per_cluster, 1_000_000);
    assert_eq!(cfg.max_bytes_per_cluster, 256 << 20);
    // A bare `prometheus:` key means all defaults.
    let v = parse_yaml(b"").unwrap();
    assert_eq!(decode::<PrometheusExporterConfig>(&v).unwrap(), cfg);
}

#[test]
fn the_seed_config_block_decodes() {
    let v = parse_yaml(b"endpoint: 0.0.0.0:9090\n").unwrap();
    let cfg = decode::<PrometheusExporterConfig>(&v).unwrap();
    assert_eq!(cfg.endpoint, "0.0.0.0:9090");
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let bytes = std::fs::read(testdata("config.yaml")).unwrap();
    let cfg: PrometheusExporterConfig = decode(&parse_yaml(&bytes).unwrap()).unwrap();
    assert_eq!(cfg.endpoint, "0.0.0.0:9090");
    assert_eq!(cfg.namespace, "fleet");
    assert_eq!(cfg.const_labels["region"], "eu-west-1");
    assert_eq!(cfg.metric_expiration, Duration::from_secs(600));
    assert_eq!(cfg.max_series, 500_000);
    assert_eq!(cfg.max_series_per_cluster, 100_000);
    assert_eq!(cfg.max_bytes_per_cluster, 64 << 20);
    assert_eq!(
        cfg.translation_strategy,
        Some(TranslationStrategy::UnderscoreEscapingWithSuffixes)
    );
    let back = serde_json::to_value(&cfg).unwrap();
    assert_eq!(back["metric_expiration"], "10m");
    let again: PrometheusExporterConfig = decode(&back).unwrap();
    assert_eq!(again, cfg);
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    let v = parse_yaml(b"endpoint: 127.0.0.1:1\ntls: {}\n").unwrap();
    let err = decode::<PrometheusExporterConfig>(&v).unwrap_err();
    assert_eq!(err.len(), 1);
    assert_eq!(err.0[0].path, "tls");
    assert!(err.0[0].message.contains("unknown field `tls`"), "{err}");
}

#[test]
fn each_invalid_config_gives_its_expected_errors() {
    let mut files: Vec<_> = std::fs::read_dir(testdata("invalid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut expected: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|e| {
                let (path, msg) = e.split_once(": ").unwrap();
                (path.to_string(), msg.to_string())
            })
            .collect();
        assert!(!expected.is_empty(), "{f:?} has no expectations");
        let err = decode::<PrometheusExporterConfig>(&parse_yaml(text.as_bytes()).unwrap())
            .expect_err(&format!("{f:?} must be rejected"));
        assert_eq!(err.len(), expected.len(), "{f:?}: {err}");
        for e in err.iter() {
            let pos = expected
                .iter()
                .position(|(p, m)| *p == e.path && e.message.contains(m.as_str()))
                .unwrap_or_else(|| panic!("{f:?}: unexpected error {e}"));
            expected.remove(pos);
        }
    }
}

#[test]
fn new_validates() {
    let cfg = PrometheusExporterConfig {
        endpoint: String::new(),
        max_series: 0,
        ..Default::default()
    };
    let err = PrometheusExporter::new(cfg).unwrap_err();
    assert_eq!(err.len(), 2);
}

#[test]
fn start_and_shutdown_twice_are_safe() {
    let e = default_exporter();
    e.start();
    e.start();
    let b = rm(
        vec![kv_str("n", "a")],
        vec![gauge("g", "", vec![point(vec![], T0, 1.0)])],
    );
    e.consume(std::slice::from_ref(&b), ts(T0));
    e.shutdown();
    e.shutdown();
    assert_eq!(e.series_count(), 0);
    assert_eq!(render(&e, T0, &[]), "");
    e.start();
    e.consume(&[b], ts(T0));
    assert_eq!(parse(&render(&e, T0, &[])).len(), 1);
}

#[test]
fn component_type_name() {
    assert_eq!(fleet_prometheus::TYPE, "prometheus");
    assert_eq!(
        fleet_prometheus::CONTENT_TYPE,
        "text/plain; version=0.0.4; charset=utf-8"
    );
}
