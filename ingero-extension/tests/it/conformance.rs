//! The conformance checks every component runs: defaults validate, testdata round-trips,
//! unknown keys are rejected with their path, each invalid config gives exactly its expected
//! errors, and start/shutdown twice is safe.

#![allow(clippy::unwrap_used)] // Test helpers: a failed unwrap is a failed test.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use component::api::ApiRequest;
use component::config::{ComponentConfig, decode, parse_yaml};
use component::{ConfigValue, EmptyHost, Extension, MetricType, StaticHost, Timestamp};
use ingero_extension::config::{
    DEFAULT_ADMIN_ENDPOINT, DEFAULT_AGENT_ENDPOINT, DEFAULT_MAX_CLUSTERS,
};
use ingero_extension::{TYPE, ThresholdExtensionConfig, create, metrics};
use ingero_wire::find_threshold_sink;
use ingero_wire::http::THRESHOLD_API_PATH;
use ingero_wire::threshold::{ClusterDiagnostics, ClusterReport, ThresholdValue};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

fn load(rel: &str) -> ConfigValue {
    parse_yaml(&fs::read(testdata(rel)).unwrap()).unwrap()
}

#[test]
fn default_config_validates_and_binds_loopback() {
    let cfg = ThresholdExtensionConfig::default();
    assert_eq!(cfg.validate(), Ok(()));
    assert_eq!(cfg.agent_endpoint, DEFAULT_AGENT_ENDPOINT);
    assert_eq!(cfg.admin_endpoint, DEFAULT_ADMIN_ENDPOINT);
    assert_eq!(cfg.max_clusters, DEFAULT_MAX_CLUSTERS);
    assert!(cfg.agent_listener().unwrap().is_loopback());
    assert!(cfg.admin_listener().unwrap().unwrap().is_loopback());
    // `ingero_threshold:` with no body means defaults.
    assert_eq!(create(&ConfigValue::Null).unwrap().config(), &cfg);
    assert_eq!(TYPE, "ingero_threshold");
    assert_eq!(component::ComponentId::parse(TYPE).unwrap().kind(), TYPE);
}

#[test]
fn testdata_config_decodes_and_round_trips() {
    let cfg: ThresholdExtensionConfig = decode(&load("config.yaml")).unwrap();
    // The seed's values.
    assert_eq!(cfg.agent_endpoint, "0.0.0.0:8080");
    assert_eq!(cfg.admin_endpoint, "127.0.0.1:8081");
    assert_eq!(cfg.max_clusters, 50_000);
    let agent = cfg.agent_listener().unwrap();
    assert!(agent.is_unspecified());
    assert_eq!(agent.port, 8080);
    let admin = cfg.admin_listener().unwrap().unwrap();
    assert!(admin.is_loopback());
    assert_eq!(admin.port, 8081);
    // Serialise and decode again: the same config.
    let value = serde_json::to_value(&cfg).unwrap();
    assert_eq!(decode::<ThresholdExtensionConfig>(&value).unwrap(), cfg);
    let yaml = yaml_roundtrip(&value);
    assert_eq!(decode::<ThresholdExtensionConfig>(&yaml).unwrap(), cfg);
}

/// Through YAML text and back, as `print-config` would.
fn yaml_roundtrip(value: &ConfigValue) -> ConfigValue {
    let text = serde_norway::to_string(value).unwrap();
    parse_yaml(text.as_bytes()).unwrap()
}

#[test]
fn the_seed_fleet_config_block_is_accepted() {
    let seed = parse_yaml(
        b"extensions:\n  ingero_threshold:\n    agent_endpoint: 0.0.0.0:8080 # Agent threshold poll (fallback)\n    admin_endpoint: 127.0.0.1:8081 # Diagnostics (management plane only)\n",
    )
    .unwrap();
    let ext = create(&seed["extensions"]["ingero_threshold"]).unwrap();
    assert_eq!(ext.config().agent_endpoint, "0.0.0.0:8080");
    assert_eq!(ext.config().max_clusters, DEFAULT_MAX_CLUSTERS);
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    let v = parse_yaml(b"agent_endpoint: 127.0.0.1:8080\nthreshold_api: true\n").unwrap();
    let errs = create(&v).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs.0[0].path, "threshold_api");
    assert!(
        errs.0[0].message.contains("unknown field `threshold_api`"),
        "{errs}"
    );
    // The host prefixes the component's own paths.
    assert!(
        errs.prefixed("extensions.ingero_threshold")
            .to_string()
            .starts_with("extensions.ingero_threshold.threshold_api: unknown field")
    );
}

#[test]
fn each_invalid_config_gives_exactly_its_expected_errors() {
    let mut files: Vec<PathBuf> = fs::read_dir(testdata("invalid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let expected: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|l| l.split_once(": ").unwrap())
            .collect();
        assert!(!expected.is_empty(), "{file:?} has no '# expect:' lines");
        let errs = create(&parse_yaml(text.as_bytes()).unwrap()).unwrap_err();
        assert_eq!(errs.len(), expected.len(), "{file:?}: {errs}");
        for (got, (path, msg)) in errs.iter().zip(&expected) {
            assert_eq!(got.path, *path, "{file:?}: {got}");
            assert!(got.message.contains(msg), "{file:?}: {got} lacks {msg:?}");
        }
    }
}

fn report(id: &str, t: f64, q: bool) -> ClusterReport {
    ClusterReport {
        cluster_id: id.into(),
        value: ThresholdValue::new(t, q),
        diagnostics: Arc::new(ClusterDiagnostics {
            median: Some(0.95),
            mad: Some(0.01),
            raw_threshold: Some(t),
            threshold: Some(t),
            quorum_met: q,
            active_nodes: 5,
            idle_nodes: 0,
            calibrating_nodes: 0,
            expected_nodes: 5,
            coverage: 1.0,
            coverage_low: false,
            panic_mode: false,
            straggler_count: 0,
            cohorts: Vec::new(),
            nodes: Vec::new(),
            computed_at_unix_nano: 0,
        }),
    }
}

#[test]
fn start_and_shutdown_twice_are_safe_and_keep_state() {
    let ext = create(&ConfigValue::Null).unwrap();
    assert!(!ext.is_running());
    ext.start(&EmptyHost).unwrap();
    ext.start(&EmptyHost).unwrap();
    assert!(ext.is_running());
    ingero_wire::threshold::threshold_sink(&ext)
        .unwrap()
        .publish(vec![report("prod", 0.8, true)], Timestamp::from_secs(1));
    ext.shutdown();
    ext.shutdown();
    assert!(!ext.is_running());
    // Draining pushes still get the last threshold; the API still answers.
    assert!(ext.store().push_headers("prod").is_some());
    let resp = ext.route_agent(&ApiRequest {
        method: "GET",
        path: THRESHOLD_API_PATH,
        query: Some("cluster_id=prod"),
    });
    assert_eq!(resp.body, br#"{"threshold":0.800000,"quorum_met":true}"#);
    ext.start(&EmptyHost).unwrap();
    assert!(ext.is_running());
    ext.shutdown();
}

#[test]
fn the_processor_finds_the_store_through_the_host() {
    let ext = Arc::new(create(&ConfigValue::Null).unwrap());
    let host = StaticHost {
        extensions: vec![(
            component::ComponentId::new(TYPE),
            Arc::clone(&ext) as Arc<dyn Extension>,
        )],
    };
    let (id, sink) = find_threshold_sink(&host).unwrap();
    assert_eq!(id.kind(), TYPE);
    sink.publish(vec![report("c", 0.7, false)], Timestamp::from_secs(2));
    // The sink is the very store the extension serves from.
    assert_eq!(ext.store().get("c"), ThresholdValue::new(0.7, false));
    let h = ext.store().push_headers("c").unwrap();
    assert_eq!(h.threshold, "0.700000");
    assert_eq!(h.quorum_met, "false");
}

#[test]
fn telemetry_names_every_family_once() {
    let ext = create(&ConfigValue::Null).unwrap();
    let mut fams = Vec::new();
    ext.telemetry(&mut fams);
    let names: Vec<&str> = fams.iter().map(|f| f.name.as_str()).collect();
    for (name, kind) in [
        (metrics::API_REQUESTS_TOTAL, MetricType::Counter),
        (metrics::PUBLISHED_CLUSTERS, MetricType::Gauge),
        (metrics::CLUSTERS_WITH_THRESHOLD, MetricType::Gauge),
        (metrics::HEADERS_TOTAL, MetricType::Counter),
        (metrics::LAST_PUBLISH_TIMESTAMP_SECONDS, MetricType::Gauge),
        (metrics::PUBLISHES_TOTAL, MetricType::Counter),
        (metrics::PUBLISH_DROPPED_TOTAL, MetricType::Counter),
        (metrics::VIEW_HISTORY_OVER_CAP, MetricType::Gauge),
    ] {
        let f: Vec<_> = fams.iter().filter(|f| f.name == name).collect();
        assert_eq!(f.len(), 1, "{name} in {names:?}");
        assert_eq!(f[0].kind, kind, "{name}");
        assert!(!f[0].samples.is_empty(), "{name}");
        if kind == MetricType::Counter {
            assert!(name.ends_with("_total"), "{name}");
        }
    }
    assert_eq!(fams.len(), 8, "{names:?}");
    // Each family is its declaration (name, type, help, labels in order), in order.
    assert_eq!(fams.len(), metrics::FAMILIES.len());
    for (f, spec) in fams.iter().zip(metrics::FAMILIES) {
        assert!(spec.describes(f), "{} does not match {spec:?}", f.name);
    }
}
