//! Hot reload of the rules and rates files through `tick` (mtime change detection) and
//! the explicit `reload_*` calls, with good and bad files in temp directories.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may unwrap

use crate::common;

use common::*;
use component::config;
use component::otlp::kv_str;
use component::{EmptyHost, Processor, Timestamp};
use ingero_wire::resource;
use provider_processor::rules::MAX_RULES;
use provider_processor::{ProviderSource, ReloadError, create, metrics as m};

const GOOD_V1: &str = "rules:\n  - {provider: coreweave, node_id: \"gpu-*\"}\n";
const GOOD_V2: &str =
    "rules:\n  - {provider: lambda, node_id: \"gpu-*\"}\n  - {provider: gcp, node_id: \"tpu-*\"}\n";
const BAD: &str = "rules:\n  - {provider: lambda}\n  - {provider: gcp, node_id: \"tpu-*\", ip_range: 10.0.0.0/99}\n";

fn node(id: &str) -> Vec<component::otlp::KeyValue> {
    vec![kv_str(resource::NODE_ID, id)]
}

fn counter(p: &dyn Processor, name: &str, outcome: &str) -> f64 {
    let mut f = Vec::new();
    p.telemetry(&mut f);
    sample(&f, name, &[("outcome", outcome)]).unwrap()
}

fn loaded(p: &dyn Processor) -> f64 {
    let mut f = Vec::new();
    p.telemetry(&mut f);
    sample(&f, m::RULES_LOADED, &[]).unwrap()
}

#[test]
fn rules_reload_on_change_and_keep_the_previous_version_on_a_bad_one() {
    let dir = temp_dir("reload-rules");
    let path = dir.join("node_providers.yaml");
    write_at(&path, GOOD_V1, 1_700_000_000);
    let yaml = format!("rules_file: {}", path.display());
    let p = create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    p.start(&EmptyHost).unwrap();
    let fp1 = p.rules_fingerprint().unwrap();
    assert_eq!(fp1.mtime_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(fp1.sha256.len(), 64);
    assert_eq!(&*p.resolve(&node("gpu-1")).provider, "coreweave");

    // Unchanged file: ticks do nothing.
    p.tick(Timestamp::from_secs(10));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "success"), 0.0);

    // A good new version is picked up by the next tick.
    write_at(&path, GOOD_V2, 1_700_000_100);
    p.tick(Timestamp::from_secs(20));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "success"), 1.0);
    assert_eq!(loaded(&p), 2.0);
    assert_eq!(&*p.resolve(&node("gpu-1")).provider, "lambda");
    assert_eq!(p.resolve(&node("tpu-1")).source, ProviderSource::Rule(1));
    let fp2 = p.rules_fingerprint().unwrap();
    assert_ne!(fp2.sha256, fp1.sha256);

    // A bad version is refused once, with every error; the previous rules stay.
    write_at(&path, BAD, 1_700_000_200);
    p.tick(Timestamp::from_secs(30));
    p.tick(Timestamp::from_secs(40));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "failure"), 1.0);
    assert_eq!(&*p.resolve(&node("gpu-1")).provider, "lambda");
    assert_eq!(p.rules_fingerprint().unwrap(), fp2);
    let diag = p.diagnostics().unwrap();
    let why = diag["last_reload_error"].as_str().unwrap();
    assert!(
        why.contains("rules[0]") && why.contains("rules[1].ip_range[0]"),
        "{why}"
    );
    match p.reload_rules() {
        Err(ReloadError::Invalid {
            errors,
            path: shown,
            ..
        }) => {
            assert_eq!(errors.len(), 2, "{errors}");
            assert!(shown.ends_with("node_providers.yaml"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "failure"), 2.0);

    // The file disappears: one failure, rules kept.
    std::fs::remove_file(&path).unwrap();
    p.tick(Timestamp::from_secs(50));
    p.tick(Timestamp::from_secs(60));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "failure"), 3.0);
    assert_eq!(loaded(&p), 2.0);

    // Back with a good version.
    write_at(&path, GOOD_V1, 1_700_000_300);
    p.tick(Timestamp::from_secs(70));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "success"), 2.0);
    assert_eq!(&*p.resolve(&node("gpu-1")).provider, "coreweave");

    // Explicit reload of an unchanged good file succeeds and reports the fingerprint.
    let fp = p.reload_rules().unwrap();
    assert_eq!(fp.mtime_unix_nano, 1_700_000_300_000_000_000);
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "success"), 3.0);
}

#[test]
fn an_atomic_rename_with_the_same_mtime_is_still_seen() {
    let dir = temp_dir("reload-rename");
    let path = dir.join("rules.yaml");
    write_at(&path, GOOD_V1, 1_700_000_000);
    let yaml = format!("rules_file: {}", path.display());
    let p = create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    // Same length and mtime, different inode (write elsewhere, rename over).
    let v1_same_len = GOOD_V1.replace("coreweave", "lambda123");
    assert_eq!(v1_same_len.len(), GOOD_V1.len());
    let tmp = dir.join("rules.yaml.tmp");
    write_at(&tmp, &v1_same_len, 1_700_000_000);
    std::fs::rename(&tmp, &path).unwrap();
    p.tick(Timestamp::from_secs(1));
    assert_eq!(&*p.resolve(&node("gpu-1")).provider, "lambda123");
}

#[test]
fn over_the_cap_is_refused_at_start_and_on_reload() {
    let dir = temp_dir("reload-cap");
    let path = dir.join("rules.yaml");
    let mut big = String::from("rules:\n");
    for i in 0..=MAX_RULES {
        big.push_str(&format!("  - {{provider: gcp, node_id: n{i}}}\n"));
    }
    write_at(&path, &big, 1_700_000_000);
    let yaml = format!("rules_file: {}", path.display());
    let errs = create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs.0[0].path, "rules_file");
    assert!(
        errs.0[0]
            .message
            .contains("4097 rules exceed the cap of 4096"),
        "{errs}"
    );

    write_at(&path, GOOD_V1, 1_700_000_000);
    let p = create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    write_at(&path, &big, 1_700_000_500);
    p.tick(Timestamp::from_secs(1));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "failure"), 1.0);
    assert_eq!(loaded(&p), 1.0);
}

#[test]
fn rates_reload_changes_prices_and_a_bad_table_keeps_the_old_one() {
    let dir = temp_dir("reload-rates");
    let path = dir.join("gpu_rates.yaml");
    let table = |rate: &str| {
        format!(
            "currency_name: USD\ncurrency_symbol: $\nfallback_rate: 0.5\nproviders:\n  aws: {{\"{H100}\": {rate}}}\n"
        )
    };
    write_at(&path, &table("9.00"), 1_700_000_000);
    let yaml = format!("rates_file: {}", path.display());
    let p = create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap();
    assert_eq!(p.rate_table().lookup("ec2", H100).hourly, 9.0);
    // Built-in entries remain under the file's.
    assert_eq!(p.rate_table().lookup("gcp", H100).hourly, 11.06);

    write_at(&path, &table("7.50"), 1_700_000_100);
    p.tick(Timestamp::from_secs(10));
    assert_eq!(p.rate_table().lookup("ec2", H100).hourly, 7.5);
    assert_eq!(counter(&p, m::RATES_RELOAD_TOTAL, "success"), 1.0);

    // Wrong currency for a merge with the built-in table, and a negative rate.
    write_at(&path, &table("-1").replace("USD", "EUR"), 1_700_000_200);
    p.tick(Timestamp::from_secs(20));
    assert_eq!(counter(&p, m::RATES_RELOAD_TOTAL, "failure"), 1.0);
    assert_eq!(p.rate_table().lookup("ec2", H100).hourly, 7.5);
    match p.reload_rates() {
        Err(ReloadError::Invalid { errors, .. }) => {
            assert_eq!(errors.len(), 1, "{errors}");
            assert!(errors.0[0].path.contains(H100), "{errors}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn reload_without_a_file_says_so() {
    let p = create(&component::ConfigValue::Null).unwrap();
    assert!(matches!(
        p.reload_rules(),
        Err(ReloadError::NotConfigured("rules_file"))
    ));
    assert!(matches!(
        p.reload_rates(),
        Err(ReloadError::NotConfigured("rates_file"))
    ));
    assert_eq!(counter(&p, m::RULES_RELOAD_TOTAL, "failure"), 0.0);
}
