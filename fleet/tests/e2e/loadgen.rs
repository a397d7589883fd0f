//! `fleet-loadgen` against the real binary: both modes push, count and report what the
//! server answered (the benchmarks in the README rely on these numbers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::*;

fn loadgen(fleet: &Fleet, args: &[&str]) -> serde_json::Value {
    let endpoint = format!("http://{}", fleet.http());
    let pid = fleet.child.id().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-loadgen"))
        .args(["--endpoint", &endpoint, "--server-pid", &pid, "--json"])
        .args(args)
        .output()
        .expect("run fleet-loadgen");
    assert!(
        out.status.success(),
        "fleet-loadgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON report")
}

fn accepted(fleet: &Fleet) -> f64 {
    let p = get(fleet.telemetry(), "/metrics").text();
    p.lines()
        .filter(|l| {
            l.starts_with("otelcol_receiver_accepted_metric_points")
                && l.contains("transport=\"http\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn connections_accepted(fleet: &Fleet) -> f64 {
    let p = get(fleet.telemetry(), "/metrics").text();
    prom_value(
        &p,
        "ingero_fleet_connections_accepted_total{listener=\"otlp/http\"}",
    )
    .expect("accepted connections counted")
}

#[test]
fn closed_loop_and_paced_modes_push_and_report_what_the_server_answered() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);

    // Closed loop: 4 connections back to back for 1 s over 16 agents in 2 clusters.
    let r = loadgen(
        &f,
        &[
            "--agents",
            "16",
            "--clusters",
            "2",
            "--connections",
            "4",
            "--duration",
            "1s",
        ],
    );
    assert_eq!(r["mode"], "closed-loop");
    let ok = r["pushes_ok"].as_u64().unwrap();
    assert!(ok >= 16, "every connection pushed: {r}");
    assert_eq!(r["errors"], 0, "{r}");
    let p50 = r["latency_ms"]["p50"].as_f64().unwrap();
    let p99 = r["latency_ms"]["p99"].as_f64().unwrap();
    assert!(p50 > 0.0 && p99 >= p50, "{r}");
    assert!(r["server_cpu_us_per_push"].as_f64().is_some(), "{r}");
    // After the first tick, 8 nodes per cluster meet quorum and responses carry headers.
    assert!(r["responses_with_threshold"].as_u64().unwrap() > 0, "{r}");
    // The server accepted at least what the generator counted as answered (each push has
    // several points).
    let points_after_closed = accepted(&f);
    assert!(
        points_after_closed >= ok as f64,
        "{points_after_closed} points for {ok} pushes"
    );

    // Paced: 8 agents over 3 connections, each agent once per 300 ms (±10 %), for 1 s: at
    // least 2 rounds each, and never more connections than asked for.
    let conns_before = connections_accepted(&f);
    let r = loadgen(
        &f,
        &[
            "--agents",
            "8",
            "--clusters",
            "1",
            "--connections",
            "3",
            "--interval",
            "300ms",
            "--duration",
            "1s",
        ],
    );
    assert_eq!(r["mode"], "paced");
    let paced = r["pushes_ok"].as_u64().unwrap();
    assert!((16..=40).contains(&paced), "paced pushes: {r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(connections_accepted(&f) - conns_before, 3.0, "{r}");
    let lag = &r["schedule_lag_ms"];
    assert!(
        lag["p50"].as_f64().unwrap() >= 0.0
            && lag["max"].as_f64().unwrap() >= lag["p50"].as_f64().unwrap(),
        "{r}"
    );
    assert!(
        accepted(&f) > points_after_closed,
        "paced pushes reached the server"
    );
}

#[test]
fn closed_loop_with_fewer_agents_than_connections_pushes_without_errors() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let r = loadgen(
        &f,
        &[
            "--agents",
            "2",
            "--clusters",
            "1",
            "--connections",
            "6",
            "--duration",
            "500ms",
        ],
    );
    assert_eq!(r["errors"], 0, "{r}");
    assert!(r["pushes_ok"].as_u64().unwrap() >= 6, "{r}");
}

#[test]
fn closed_loop_against_a_closed_port_reports_errors_not_pushes() {
    // A port nothing listens on: bind, learn the port, drop the listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-loadgen"))
        .args(["--endpoint", &format!("http://127.0.0.1:{port}"), "--json"])
        .args(["--agents", "4", "--connections", "2", "--duration", "300ms"])
        .output()
        .expect("run fleet-loadgen");
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["pushes_ok"], 0, "{r}");
    assert!(r["errors"].as_u64().unwrap() > 0, "{r}");
}
