//! The processors working together inside the real binary: NCCL peer lag from per-rank
//! points (issue "nccl-processor"), and the provider label plus the cost of a straggler
//! (issue "provider-processor"), read back from the Prometheus endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use testkit::{AgentPush, NcclPoint, nccl_export_json};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

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

/// Every metric the example dashboard and recording rules read (listed in
/// examples/exported-metrics.txt, which provider-processor's tests tie to those files)
/// has samples on the live Prometheus endpoint once a realistic cluster pushes.
#[test]
fn dashboard_and_rule_metrics_are_really_exported() {
    let f = fleet();
    let model = "NVIDIA A100-SXM4-80GB";
    let comm = "aa00bb11cc22dd33";
    let base = now_ns() - 15_000_000_000;
    let mut step = 0u64;
    let listed: Vec<String> = std::fs::read_to_string(format!(
        "{}/../examples/exported-metrics.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .lines()
    .map(|l| l.split('#').next().unwrap().trim().to_string())
    .filter(|l| !l.is_empty())
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
        for rank in 0..8i64 {
            let node = format!("gpu-node-{rank:02}");
            let score = if rank == 5 {
                0.5
            } else {
                0.95 - 0.003 * rank as f64
            };
            let p = AgentPush::new("all", &node, score)
                .gpu(model, 8)
                .provider("gcp")
                .world(8, rank);
            assert_eq!(push_json(f.http(), "all", &p.to_json()).status, 200);
            let late = if rank == 5 { 80_000_000 } else { 0 };
            let mut np =
                NcclPoint::all_reduce(comm, rank, 8, 9.0, base + step * 100_000_000 + late);
            np.op_seq = Some(step as i64);
            let body = nccl_export_json(Some("all"), &node, &[np]);
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
        // One node with a GPU the rate tables do not know.
        let odd = AgentPush::new("all", "odd-node", 0.94)
            .gpu("Imaginary GPU 1TB", 1)
            .provider("gcp");
        assert_eq!(push_json(f.http(), "all", &odd.to_json()).status, 200);
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
