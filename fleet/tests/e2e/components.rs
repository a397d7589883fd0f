//! The processors working together inside the real binary: NCCL peer lag from per-rank
//! points (issue "nccl-processor"), and the provider label plus the cost of a straggler
//! (issue "provider-processor"), read back from the Prometheus endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use testkit::{AgentPush, NcclPoint, nccl_export_json};

fn fleet() -> Fleet {
    Fleet::start_with(
        &test_config("1s", &["nccl_peer_lag", "provider_lookup"]),
        &[],
    )
}

/// Lines of the Prometheus page for one metric name that carry all the given labels.
fn series<'a>(page: &'a str, name: &str, labels: &[&str]) -> Vec<&'a str> {
    page.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .collect()
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn rank_entering_290ms_late_shows_its_lag_on_prometheus() {
    let f = fleet();
    let comm = "3f9a0c1d2e4b5a69";
    let base = now_ns() - 20_000_000_000;
    // 8 ranks on 8 nodes, 12 all-reduce steps 1 s apart; rank 5 enters each 290 ms late.
    // Our agent's format: wall-clock timestamps and nccl.op_seq.
    for step in 0..12u64 {
        for rank in 0..8i64 {
            let late = if rank == 5 { 290_000_000 } else { 0 };
            let jitter = (rank as u64 * 37 + step * 11) % 3 * 1_000_000; // up to 2 ms
            let mut p = NcclPoint::all_reduce(
                comm,
                rank,
                8,
                12.5,
                base + step * 1_000_000_000 + late + jitter,
            );
            p.op_seq = Some(step as i64);
            let body = nccl_export_json(Some("train"), &format!("gpu-node-{rank:02}"), &[p]);
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
    let page = wait_for(Duration::from_secs(15), || {
        let page = get(f.prometheus(), "/metrics").text();
        let chronic = !series(&page, "ingero_nccl_rank_lag_seconds", &["rank=\"5\""]).is_empty();
        let lag = page
            .lines()
            .any(|l| l.starts_with("nccl_collective_peer_lag_ms") && l.contains("nccl_rank=\"5\""));
        (chronic && lag).then_some(page)
    })
    .unwrap_or_else(|| {
        panic!(
            "no chronic-lag series for rank 5:\n{}",
            get(f.prometheus(), "/metrics").text()
        )
    });

    // Per-collective output of the processor, exported like any OTLP gauge.
    let lag_name = page
        .lines()
        .find(|l| l.starts_with("nccl_collective_peer_lag_ms"))
        .map(|l| l.split('{').next().unwrap().to_string())
        .expect("peer lag gauge exported");
    let r5 = series(
        &page,
        &lag_name,
        &["nccl_rank=\"5\"", "ingero_cluster_id=\"train\""],
    );
    assert!(!r5.is_empty(), "rank 5 lag series:\n{page}");
    // The sequence number aligns; it is never a label (one series per rank, not per step).
    assert!(
        !page
            .lines()
            .any(|l| l.starts_with(&lag_name) && l.contains("op_seq")),
        "op_seq label on the peer lag:\n{page}"
    );
    // Nor on the agent's input timings (the exporter's default `drop_attributes`).
    let timings: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("nccl_collective_duration"))
        .collect();
    assert!(!timings.is_empty(), "input timings exported:\n{page}");
    assert!(
        timings.iter().all(|l| !l.contains("op_seq")),
        "op_seq label on the input timings: {timings:?}"
    );
    assert_eq!(r5.len(), 1, "one series for rank 5: {r5:?}");
    let v5 = value(r5[0]);
    assert!(
        (v5 - 290.0).abs() <= 5.0,
        "rank 5 is ~290 ms behind, got {v5}"
    );
    for rank in [0, 1, 2, 3, 4, 6, 7] {
        for l in series(&page, &lag_name, &[&format!("nccl_rank=\"{rank}\"")]) {
            assert!(value(l).abs() <= 5.0, "rank {rank} is on time: {l}");
        }
    }
    // The chronic view names rank 5 and only rank 5.
    let chronic = series(
        &page,
        "ingero_nccl_rank_lag_seconds",
        &["cluster_id=\"train\""],
    );
    assert_eq!(
        chronic.len(),
        1,
        "only rank 5 is chronically behind: {chronic:?}"
    );
    assert!(chronic[0].contains("rank=\"5\"") && chronic[0].contains(comm));
    assert!((value(chronic[0]) - 0.290).abs() <= 0.005, "{}", chronic[0]);
}

#[test]
fn provider_label_and_straggler_cost_reach_prometheus() {
    let f = fleet();
    let model = "NVIDIA H100 80GB HBM3";
    let push_all = || {
        for i in 0..6 {
            let p = AgentPush::new("cost", &format!("h100-{i}"), 0.95 - 0.003 * i as f64)
                .gpu(model, 8)
                .provider("aws");
            assert_eq!(push_json(f.http(), "cost", &p.to_json()).status, 200);
        }
        // The straggler: far below its peers.
        let p = AgentPush::new("cost", "h100-slow", 0.55)
            .gpu(model, 8)
            .provider("aws");
        assert_eq!(push_json(f.http(), "cost", &p.to_json()).status, 200);
    };
    let page = wait_for(Duration::from_secs(20), || {
        push_all();
        std::thread::sleep(Duration::from_millis(300));
        let page = get(f.prometheus(), "/metrics").text();
        (!series(
            &page,
            "ingero_cost_straggler_rate",
            &["node_id=\"h100-slow\""],
        )
        .is_empty())
        .then_some(page)
    })
    .unwrap_or_else(|| {
        panic!(
            "no straggler cost series:\n{}",
            get(f.prometheus(), "/metrics").text()
        )
    });

    // The agent's `aws` is tagged as the rate table's `ec2` on the exported data.
    let hs = series(
        &page,
        "ingero_node_health_score_ratio",
        &["ingero_node_id=\"h100-0\""],
    );
    assert!(
        !hs.is_empty() && hs.iter().all(|l| l.contains("ingero_provider=\"ec2\"")),
        "{hs:?}"
    );

    // 8 GPUs (world size 0, so the node's own GPUs) x 12.29 USD per GPU-hour.
    let rate = series(
        &page,
        "ingero_cost_straggler_rate",
        &["node_id=\"h100-slow\""],
    );
    assert_eq!(rate.len(), 1, "{rate:?}");
    let l = rate[0];
    assert!(
        l.contains("provider=\"ec2\"")
            && l.contains(&format!("gpu_model=\"{model}\""))
            && l.contains("currency=\"USD\""),
        "{l}"
    );
    assert!((value(l) - 8.0 * 12.29).abs() < 1e-6, "straggler rate {l}");
    // Only the straggler costs money.
    assert_eq!(
        series(
            &page,
            "ingero_cost_straggler_rate",
            &["cluster_id=\"cost\""]
        )
        .len(),
        1
    );
    let hourly = series(
        &page,
        "ingero_gpu_hourly_rate",
        &["provider=\"ec2\"", &format!("gpu_model=\"{model}\"")],
    );
    assert_eq!(hourly.len(), 1);
    assert!((value(hourly[0]) - 12.29).abs() < 1e-9);
    // The cumulative counter grows while the straggler persists.
    let total = |p: &str| {
        series(p, "ingero_cost_straggler_total", &["node_id=\"h100-slow\""])
            .first()
            .map(|l| value(l))
            .unwrap_or(0.0)
    };
    let t1 = total(&page);
    push_all();
    std::thread::sleep(Duration::from_millis(2200));
    push_all();
    let t2 = total(&get(f.prometheus(), "/metrics").text());
    assert!(t2 > t1, "cumulative straggler cost grows: {t1} -> {t2}");
}

/// The names of `examples/exported-metrics.txt`: (family, read by the shipped dashboard or
/// recording rules, i.e. tagged `# dashboard`).
fn listed_families() -> Vec<(String, bool)> {
    std::fs::read_to_string(format!(
        "{}/../examples/exported-metrics.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .lines()
    .filter_map(|l| {
        let (name, comment) = l.split_once('#').unwrap_or((l, ""));
        let name = name.trim();
        (!name.is_empty()).then(|| (name.to_string(), comment.trim() == "dashboard"))
    })
    .collect()
}

/// One round of a realistic cluster: 8 GPU nodes (rank 5 a straggler that also enters
/// each all-reduce 80 ms late, rank 2 late on every fourth; barrier waits), one node with a
/// GPU the rate tables do not know, a straggler event. `step` numbers the collective.
fn push_realistic_round(f: &Fleet, base: u64, step: u64) {
    let model = "NVIDIA A100-SXM4-80GB";
    let comm = "aa00bb11cc22dd33";
    for rank in 0..8i64 {
        let node = format!("gpu-node-{rank:02}");
        let score = if rank == 5 {
            0.5
        } else {
            0.95 - 0.003 * rank as f64
        };
        let mut p = AgentPush::new("all", &node, score)
            .gpu(model, 8)
            .provider("gcp")
            .world(8, rank);
        p.with_cgroup_sums = true;
        assert_eq!(push_json(f.http(), "all", &p.to_json()).status, 200);
        if rank == 5 {
            let ev = p.straggler_event_json(1, 0.9, &format!("00000000-0000-4000-8000-{step:012}"));
            assert_eq!(push_json(f.http(), "all", &ev).status, 200);
        }
        // Rank 5 chronically late, rank 2 late every fourth step (periodic).
        let late = if rank == 5 || (rank == 2 && step.is_multiple_of(4)) {
            80_000_000
        } else {
            0
        };
        let mut np = NcclPoint::all_reduce(comm, rank, 8, 9.0, base + step * 100_000_000 + late);
        np.op_seq = Some(step as i64);
        // Our agent's export also carries the barrier wait of a collective.
        let mut body: serde_json::Value =
            serde_json::from_str(&nccl_export_json(Some("all"), &node, &[np])).unwrap();
        body["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "name": "nccl.collective.barrier_wait_ms", "unit": "ms", "gauge": {"dataPoints": [{
                    "attributes": [{"key": "nccl.comm_id_hash", "value": {"stringValue": comm}}],
                    "timeUnixNano": (base + step * 100_000_000).to_string(), "asDouble": 1.5}]}
            }));
        let body = body.to_string();
        assert_eq!(
            post(
                f.http(),
                "/v1/metrics",
                "application/json",
                body.as_bytes(),
                &[]
            )
            .status,
            200
        );
    }
    let odd = AgentPush::new("all", "odd-node", 0.94)
        .gpu("Imaginary GPU 1TB", 1)
        .provider("gcp");
    assert_eq!(push_json(f.http(), "all", &odd.to_json()).status, 200);
}

/// Every metric the example dashboard and recording rules read (tagged `# dashboard` in
/// examples/exported-metrics.txt, which provider-processor's tests tie to those files)
/// has samples on the live Prometheus endpoint once a realistic cluster pushes.
#[test]
fn dashboard_and_rule_metrics_are_really_exported() {
    let f = fleet();
    let base = now_ns() - 15_000_000_000;
    let mut step = 0u64;
    let listed: Vec<String> = listed_families()
        .into_iter()
        .filter(|(_, read)| *read)
        .map(|(n, _)| n)
        .collect();
    assert!(listed.len() > 15);
    let missing = |page: &str| -> Vec<String> {
        listed
            .iter()
            .filter(|name| {
                !page.lines().any(|l| {
                    !l.starts_with('#')
                        && (l.starts_with(&format!("{name}{{"))
                            || l.starts_with(&format!("{name} ")))
                })
            })
            .cloned()
            .collect()
    };
    let result = wait_for(Duration::from_secs(30), || {
        push_realistic_round(&f, base, step);
        step += 1;
        std::thread::sleep(Duration::from_millis(300));
        let page = get(f.prometheus(), "/metrics").text();
        missing(&page).is_empty().then_some(())
    });
    if result.is_none() {
        let page = get(f.prometheus(), "/metrics").text();
        panic!("listed but not exported: {:?}", missing(&page));
    }
}

/// The `# TYPE` names of a Prometheus text page.
fn declared_families(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `"ingero_echo_..."` string literal in Echo's sources: the names of the families
/// its `/metrics` declares (Echo links DuckDB, so its binary is not built here; the
/// names are read from the code that renders them).
fn echo_families_in_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, _) in text.match_indices("\"ingero_echo_") {
                    let rest = &text[i + 1..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(rest.len());
                    if rest[end..].starts_with('"') {
                        out.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../echo/src"),
        &mut out,
    );
    out
}

/// `examples/exported-metrics.txt` is the complete list of metric families, both ways: the
/// real binary with every component (and access control, whose families exist only with
/// it), fed a realistic cluster, declares on its two Prometheus endpoints exactly the
/// families the file lists for Fleet; Echo's sources name exactly the `ingero_echo_*`
/// families it lists.
#[test]
fn exported_metrics_file_lists_every_family_both_ways() {
    let tmp = tempdir::TempDir::new("families");
    let dir = tmp.path();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        "- name: ops\n  token: families-test-token-0123456789\n  clusters: [\"*\"]\n",
    )
    .unwrap();
    let config = test_config("1s", &["nccl_peer_lag", "provider_lookup"])
        .replacen(
            "extensions:\n  ingero_threshold:",
            &format!(
                "extensions:\n  ingero_auth:\n    tokens_file: {}\n  ingero_threshold:",
                tokens.display()
            ),
            1,
        )
        .replacen(
            "extensions: [ingero_threshold, health_check]",
            "extensions: [ingero_auth, ingero_threshold, health_check]",
            1,
        );
    assert!(config.contains("ingero_auth:") && config.contains("[ingero_auth,"));
    let f = Fleet::start_with(&config, &[]);
    let listed = listed_families();
    let (echo_listed, fleet_listed): (BTreeSet<String>, BTreeSet<String>) = listed
        .iter()
        .map(|(n, _)| n.clone())
        .partition(|n| n.starts_with("ingero_echo_"));
    assert_eq!(
        fleet_listed.len() + echo_listed.len(),
        listed.len(),
        "a family is listed twice"
    );

    let base = now_ns() - 15_000_000_000;
    let mut step = 0u64;
    let scrape = || {
        let mut d = declared_families(&get(f.prometheus(), "/metrics").text());
        d.extend(declared_families(&get(f.telemetry(), "/metrics").text()));
        d
    };
    // Families that appear with data (translated OTLP, per-cluster figures) need a few
    // ticks; wait until everything listed is there, then compare both ways.
    let declared = wait_for(Duration::from_secs(30), || {
        push_realistic_round(&f, base, step);
        step += 1;
        std::thread::sleep(Duration::from_millis(300));
        let d = scrape();
        fleet_listed.is_subset(&d).then_some(d)
    })
    .unwrap_or_else(scrape);
    let unlisted: Vec<_> = declared.difference(&fleet_listed).collect();
    let undeclared: Vec<_> = fleet_listed.difference(&declared).collect();
    assert!(
        unlisted.is_empty() && undeclared.is_empty(),
        "examples/exported-metrics.txt disagrees with ingero-fleet's endpoints:\n\
         declared but not listed: {unlisted:?}\nlisted but not declared: {undeclared:?}"
    );

    let echo = echo_families_in_source();
    assert!(echo.len() >= 10, "Echo's families not found: {echo:?}");
    assert_eq!(
        echo, echo_listed,
        "examples/exported-metrics.txt (right) disagrees with the ingero_echo_* families in echo/src (left)"
    );
}
