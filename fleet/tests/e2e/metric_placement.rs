//! One place per metric (issue 18, item 6): the real binary fed with agent health pushes
//! (with a straggler, GPU models and providers) and NCCL points, both Prometheus endpoints
//! scraped as an otelcol user scrapes them (self-telemetry and exporter). No family is on
//! both; the straggler count summed over both scrapes is the true count; `promtool check
//! metrics` finds nothing to lint in any Fleet family; the shipped recording rules, run by
//! `promtool test rules` over the series of both scrapes, count the straggler once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use testkit::{AgentPush, NcclPoint, nccl_export_json};

const CLUSTER: &str = "place";
/// Healthy peers, then one straggler (node 07): the classifier flags exactly one node.
const SCORES: [f64; 7] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945];
const STRAGGLER_SCORE: f64 = 0.60;

/// Prefixes of the families Fleet's own components emit (processors and extensions).
const COMPONENT_PREFIXES: [&str; 6] = [
    "ingero_fleet_",
    "ingero_nccl_",
    "ingero_cost_",
    "ingero_provider_",
    "ingero_gpu_",
    "ingero_threshold_",
];

fn push_agents(f: &Fleet) {
    let now = now_ns();
    let scores = SCORES.iter().copied().chain([STRAGGLER_SCORE]);
    for (i, s) in scores.enumerate() {
        let provider = if i % 2 == 0 { "aws" } else { "gcp" };
        let mut push = AgentPush::new(CLUSTER, &format!("{CLUSTER}-node-{i:02}"), s)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .provider(provider)
            .world(8, i as i64)
            .at(now);
        push.with_cgroup_sums = true;
        let r = push_json(f.http(), CLUSTER, &push.to_json());
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// 8 ranks, 12 all-reduce steps; rank 5 enters each 290 ms late.
fn push_nccl(f: &Fleet) {
    let comm = "3f9a0c1d2e4b5a69";
    let base = now_ns() - 20_000_000_000;
    for step in 0..12u64 {
        for rank in 0..8i64 {
            let late = if rank == 5 { 290_000_000 } else { 0 };
            let mut p =
                NcclPoint::all_reduce(comm, rank, 8, 12.5, base + step * 1_000_000_000 + late);
            p.op_seq = Some(step as i64);
            let body = nccl_export_json(Some(CLUSTER), &format!("{CLUSTER}-node-{rank:02}"), &[p]);
            let r = post(
                f.http(),
                "/v1/metrics",
                "application/json",
                body.as_bytes(),
                &[],
            );
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
}

/// A fleet with every processor, fed until the straggler, the NCCL laggard and the
/// provider attribution are on a scrape; returns (self-telemetry page, exporter page).
fn fed_fleet() -> (Fleet, String, String) {
    let f = Fleet::start_with(
        &test_config("1s", &["nccl_peer_lag", "provider_lookup"]),
        &[],
    );
    push_nccl(&f);
    let ready = wait_for(Duration::from_secs(20), || {
        push_agents(&f);
        let p = get(f.prometheus(), "/metrics").text();
        let t = get(f.telemetry(), "/metrics").text();
        let all = format!("{p}{t}");
        let straggler = series_value(
            &all,
            "ingero_fleet_stragglers",
            &[("cluster_id", CLUSTER), ("cgroup_path_hash", "")],
        );
        (straggler == Some(1.0)
            && all.contains("ingero_nccl_rank_lag_seconds{")
            && all.contains("ingero_provider_nodes{"))
        .then_some((t, p))
    });
    let (t, p) = ready.expect("straggler, NCCL lag and provider nodes on a scrape");
    (f, t, p)
}

/// Labels of a sample line, as (name, value) pairs (values unescaped enough for tests).
fn labels_of(line: &str) -> Vec<(String, String)> {
    let Some(open) = line.find('{') else {
        return Vec::new();
    };
    let close = line.rfind('}').unwrap();
    let mut out = Vec::new();
    let body = &line[open + 1..close];
    let mut rest = body;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim_start_matches(',').to_string();
        let after = &rest[eq + 2..];
        let mut end = 0;
        let bytes = after.as_bytes();
        while end < bytes.len() && !(bytes[end] == b'"' && (end == 0 || bytes[end - 1] != b'\\')) {
            end += 1;
        }
        out.push((name, after[..end].to_string()));
        rest = &after[(end + 1).min(after.len())..];
    }
    out
}

fn name_of(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap()
}

/// Sum of the samples of `name` whose labels include every pair in `want`.
fn series_value(page: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for l in page.lines().filter(|l| !l.starts_with('#')) {
        if name_of(l) != name {
            continue;
        }
        let labels = labels_of(l);
        let all = want
            .iter()
            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v));
        if all {
            let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            sum = Some(sum.unwrap_or(0.0) + v);
        }
    }
    sum
}

/// Family names a page declares (`# TYPE` lines).
fn families(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn no_family_is_served_on_both_endpoints_and_the_straggler_is_counted_once() {
    let (_f, tel, exp) = fed_fleet();
    let (ft, fe) = (families(&tel), families(&exp));
    let both: Vec<_> = ft.intersection(&fe).collect();
    assert!(both.is_empty(), "families on both endpoints: {both:?}");

    // The straggler count as a sum over both scrapes: exactly the one straggler.
    let whole = [("cluster_id", CLUSTER), ("cgroup_path_hash", "")];
    let summed = series_value(&tel, "ingero_fleet_stragglers", &whole).unwrap_or(0.0)
        + series_value(&exp, "ingero_fleet_stragglers", &whole).unwrap_or(0.0);
    assert_eq!(summed, 1.0, "stragglers summed over both scrapes");

    // Every per-cluster family is on the exporter; the self-telemetry page names no cluster.
    for name in [
        "ingero_fleet_stragglers",
        "ingero_fleet_threshold",
        "ingero_provider_nodes",
        "ingero_gpu_hourly_rate",
        "ingero_nccl_rank_lag_seconds",
        "ingero_threshold_published_clusters",
    ] {
        assert!(fe.contains(name), "{name} on the exporter endpoint");
    }
    assert!(
        !tel.contains(CLUSTER),
        "the self-telemetry page carries no cluster data:\n{tel}"
    );
    for f in &ft {
        assert!(
            !COMPONENT_PREFIXES.iter().any(|p| f.starts_with(p))
                || f.starts_with("ingero_fleet_auth_")
                || crate_host_family(f),
            "component family {f} on the self-telemetry endpoint"
        );
    }
    // The collector's own health stays on self-telemetry.
    for name in [
        "otelcol_receiver_accepted_metric_points_total",
        "otelcol_process_uptime_seconds",
        "ingero_fleet_connections_open",
        "ingero_fleet_push_duration_seconds",
    ] {
        assert!(ft.contains(name), "{name} on the self-telemetry endpoint");
    }
}

/// Families the host itself renders on self-telemetry (`telemetry.rs`), which share the
/// `ingero_fleet_` prefix with the threshold processor's.
fn crate_host_family(name: &str) -> bool {
    [
        "ingero_fleet_rejected_requests_total",
        "ingero_fleet_receiver_dropped_",
        "ingero_fleet_tls_",
        "ingero_fleet_connections_",
        "ingero_fleet_requests_refused_total",
        "ingero_fleet_component_panics_total",
        "ingero_fleet_push_duration_seconds",
        "ingero_fleet_prometheus_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

fn promtool() -> Option<&'static str> {
    match Command::new("promtool").arg("--version").output() {
        Ok(o) if o.status.success() => Some("promtool"),
        _ => {
            eprintln!(
                "SKIPPED: promtool is not installed (apt-get install -y prometheus; scripts/test-all.sh installs it)"
            );
            None
        }
    }
}

/// `promtool check metrics` on a page: (exit code, lint lines).
fn check_metrics(promtool: &str, page: &str) -> (Option<i32>, Vec<String>) {
    use std::io::Write;
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    (out.status.code(), lines)
}

/// OTLP metric names fixed by the agent protocol (spec: `ingero.node.cpu_stall_nanos_total`
/// with unit `ns`, `nccl.collective.duration_ms`, `nccl.collective.barrier_wait_ms` and
/// `nccl.collective.peer_lag_ms` with unit `ms`), translated by the otelcol naming rules
/// exactly as the Go collector translates them. promtool prefers base units and no
/// abbreviations for these; renaming them is a wire-contract change, not a Fleet one.
const CONTRACT_NAMES: [&str; 4] = [
    "ingero_node_cpu_stall_nanos_nanoseconds_total",
    "nccl_collective_duration_ms_milliseconds",
    "nccl_collective_barrier_wait_ms_milliseconds",
    "nccl_collective_peer_lag_ms_milliseconds",
];

#[test]
fn promtool_finds_nothing_to_lint_in_fleet_families_on_either_endpoint() {
    let Some(promtool) = promtool() else {
        return;
    };
    let (_f, tel, exp) = fed_fleet();
    let (code, lint) = check_metrics(promtool, &tel);
    assert_eq!(
        (code, lint.as_slice()),
        (Some(0), &[][..]),
        "self-telemetry page:\n{tel}"
    );
    let (code, lint) = check_metrics(promtool, &exp);
    // Exit 3 is lint advice only; 1 would be a format error.
    assert!(matches!(code, Some(0 | 3)), "{lint:?}\n{exp}");
    for l in &lint {
        let name = l.split(' ').next().unwrap();
        assert!(
            CONTRACT_NAMES.contains(&name),
            "lint finding outside the wire-contract names: {l}"
        );
    }
    // The data the lint ran over includes every Fleet family the issue named.
    for name in ["ingero_fleet_stragglers", "ingero_nccl_rank_lag_seconds"] {
        assert!(families(&exp).contains(name), "{name} scraped");
    }
}

/// The sample lines of a page as promtool input series, with the labels a Prometheus
/// scrape adds (`job`, `instance`).
fn input_series(page: &str, job: &str, instance: &str, out: &mut String) {
    for l in page
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = l.rsplit_once(' ').unwrap();
        let v: f64 = value.parse().unwrap();
        if !v.is_finite() || series.contains('\'') {
            continue;
        }
        let target = format!("job=\"{job}\",instance=\"{instance}\"");
        // A scraped `job`/`instance` label becomes `exported_*` (honor_labels: false).
        let series = series
            .replace("{job=", "{exported_job=")
            .replace(",job=", ",exported_job=")
            .replace("{instance=", "{exported_instance=")
            .replace(",instance=", ",exported_instance=");
        let series = match series.strip_suffix('}') {
            Some(s) => format!("{s},{target}}}"),
            None => format!("{series}{{{target}}}"),
        };
        out.push_str(&format!(
            "      - series: '{series}'\n        values: '{v}x20'\n"
        ));
    }
}

fn rules_path() -> String {
    format!(
        "{}/../examples/prometheus/ingero-rules.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run_rule_tests(promtool: &str, yaml: &str) {
    let dir = tempdir::TempDir::new("rules");
    let path = dir.path().join("tests.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\n---\n{yaml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn shipped_rules_count_the_straggler_once_when_both_ports_are_scraped() {
    let Some(promtool) = promtool() else {
        return;
    };
    let check = Command::new(promtool)
        .args(["check", "rules", &rules_path()])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    let (_f, tel, exp) = fed_fleet();
    let nodes_ec2 = series_value(
        &exp,
        "ingero_provider_nodes",
        &[("cluster_id", CLUSTER), ("provider", "ec2")],
    )
    .expect("ec2 (the agent's aws, normalised) nodes on the exporter");
    assert!(nodes_ec2 >= 1.0);
    // As scraped: self-telemetry and exporter, each its own job. Then as an older release
    // (or two scrape jobs on one port) would deliver it: the exporter's series twice.
    let mut scraped = String::new();
    input_series(&tel, "fleet-telemetry", "127.0.0.1:8888", &mut scraped);
    input_series(&exp, "fleet-exporter", "127.0.0.1:8889", &mut scraped);
    let mut doubled = scraped.clone();
    input_series(&exp, "fleet-exporter-again", "127.0.0.1:8889", &mut doubled);

    let case = |series: &str| {
        format!(
            r#"  - interval: 30s
    input_series:
{series}    promql_expr_test:
      - expr: cluster:ingero_fleet_stragglers:sum{{cluster_id="{CLUSTER}"}}
        eval_time: 5m
        exp_samples:
          - labels: 'cluster:ingero_fleet_stragglers:sum{{cluster_id="{CLUSTER}"}}'
            value: 1
      # The dashboard's "Nodes by provider" panel.
      - expr: sum by (provider) (max without (instance, job) (ingero_provider_nodes{{cluster_id=~"{CLUSTER}", provider="ec2"}}))
        eval_time: 5m
        exp_samples:
          - labels: '{{provider="ec2"}}'
            value: {nodes_ec2}
"#
        )
    };
    let yaml = format!(
        r#"rule_files:
  - {rules}
evaluation_interval: 30s
tests:
{a}{b}  # IngeroUnpricedGpuModel fires once for one unpriced model, however many
  # targets deliver its counter.
  - interval: 1m
    input_series:
      - series: 'ingero_provider_unknown_gpu_model_total{{provider="aws",gpu_model="X1",job="a",instance="h:8889"}}'
        values: '0+1x90'
      - series: 'ingero_provider_unknown_gpu_model_total{{provider="aws",gpu_model="X1",job="b",instance="h:8888"}}'
        values: '0+1x90'
    alert_rule_test:
      - eval_time: 80m
        alertname: IngeroUnpricedGpuModel
        exp_alerts:
          - exp_labels:
              severity: info
              provider: aws
              gpu_model: X1
            exp_annotations:
              summary: "GPU model X1 on aws has no rate"
              description: "Nodes report a GPU model the rate table does not list for their provider; their cost uses the fallback rate. Add the model, exactly as nvidia-smi prints it, to the rates file."
"#,
        rules = rules_path(),
        a = case(&scraped),
        b = case(&doubled),
    );
    run_rule_tests(promtool, &yaml);
}
