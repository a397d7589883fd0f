//! Golden pages for the agent's exact pushes (spec sections 1.2-1.5), and promtool on
//! them and on a page mixing every kind of family. `UPDATE_GOLDEN=1` rewrites the files
//! (review the diff: they pin the series names users build dashboards on).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use std::path::PathBuf;

use common::agent::{AgentPush, CgroupSums, health_push, straggler_event};
use common::*;
use component::MetricFamily;
use component::otlp::kv_str;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/golden")
        .join(name)
}

fn check_golden(name: &str, got: &str) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        got, want,
        "{name} differs from the golden file (UPDATE_GOLDEN=1 to rewrite)"
    );
}

/// The push behind the brief's example series: cluster c1, node n1, training, and the
/// cgroup hash the spec gives for `/`.
fn golden_push() -> AgentPush {
    AgentPush {
        node: "n1".into(),
        cluster: "c1".into(),
        world_size: 8,
        rank: 3,
        provider: Some("aws".into()),
        state: "active".into(),
        workload: "training".into(),
        cgroup_hash: "8a5edab282632443".into(),
        score: 0.93,
        throughput: 0.97,
        compute: 0.9,
        memory: 0.71,
        cpu: 0.88,
        degradation_warning: 0,
        detection_mode: "fleet".into(),
        fleet_reachable: 1,
        gpu: Some(("NVIDIA H100 80GB HBM3".into(), 8)),
        cgroup_sums: vec![CgroupSums {
            hash: "3f2a9c1e00b4d765".into(),
            kernel_launches: 123_456,
            stall_nanos: 7_500_000,
            memcpy: vec![("h2d".into(), 1_048_576), ("d2h".into(), 65_536)],
        }],
        time_unix_nano: T0 * 1_000_000_000,
    }
}

#[test]
fn agent_health_push_page_is_pinned() {
    let e = default_exporter();
    let st = e.consume(&[health_push(&golden_push())], ts(T0));
    assert_eq!((st.points, st.stored), (14, 14));
    let page = render(&e, T0, &[]);
    check_golden("agent_health_push.prom", &page);
    assert!(page.contains(
        "ingero_node_health_score_ratio{ingero_cgroup_path_hash=\"8a5edab282632443\",\
         ingero_cluster_id=\"c1\",ingero_node_id=\"n1\",ingero_node_rank=\"3\",\
         ingero_node_state=\"active\",ingero_provider=\"aws\",ingero_workload_type=\"training\",\
         ingero_world_size=\"8\"} 0.93\n"
    ));
    if let Some((code, problems)) = promtool(&page) {
        // Only what a faithful translation of the agent's names implies: its
        // `..._nanos_total` in ns gets the contrib unit suffix `nanoseconds`.
        assert_eq!(code, 3, "{problems:?}");
        assert_eq!(
            problems,
            vec![
                "ingero_node_cpu_stall_nanos_nanoseconds_total use base unit \"seconds\" instead of \"nanoseconds\""
            ]
        );
    }
}

#[test]
fn agent_straggler_event_page_is_pinned() {
    let e = default_exporter();
    let p = golden_push();
    e.consume(
        &[straggler_event(
            &p,
            "0b7c6f1e-2f4d-4a51-9c3e-8d2b1a0f9e77",
            0.85,
            0.42,
        )],
        ts(T0),
    );
    let page = render(&e, T0, &[]);
    check_golden("agent_straggler_event.prom", &page);
    if let Some((code, problems)) = promtool(&page) {
        assert_eq!((code, problems), (0, vec![]));
    }
}

#[test]
fn a_page_with_every_family_kind_passes_promtool() {
    let e = exporter(fleet_prometheus::PrometheusExporterConfig {
        const_labels: [("fleet".to_string(), "eu \"1\"".to_string())].into(),
        ..Default::default()
    });
    let pushes: Vec<_> = (0..20)
        .map(|i| health_push(&AgentPush::fleet_node(i, true, T0 * 1_000_000_000)))
        .collect();
    e.consume(&pushes, ts(T0));
    let svc = rm(
        vec![
            kv_str("service.name", "fleet"),
            kv_str("service.instance.id", "replica-0"),
            kv_str("host.name", "h\\1\n"),
        ],
        vec![
            sum(
                "http.requests",
                "{request}",
                true,
                2,
                vec![point(vec![kv_str("code", "200")], T0, 10.0)],
            ),
            gauge("queue.fill", "%", vec![point(vec![], T0, 42.0)]),
        ],
    );
    e.consume(&[svc], ts(T0));
    let mut tel = Vec::new();
    e.telemetry(&mut tel);
    tel.push(
        MetricFamily::gauge("otelcol_process_uptime_seconds", "Uptime of the process.")
            .with(&[], 12.0),
    );
    let page = render(&e, T0, &tel);
    assert!(page.contains("# TYPE target_info gauge\n"));
    assert!(page.contains("ingero_fleet_prometheus_series "));
    let Some((code, mut problems)) = promtool(&page) else {
        return;
    };
    problems.retain(|p| {
        // Faithful translations of the agent's own metric names (see the golden test).
        !p.starts_with("ingero_node_cpu_stall_nanos_nanoseconds_total use base unit")
    });
    assert!(code == 0 || code == 3, "promtool exit {code}: {problems:?}");
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn names_the_example_rules_and_dashboard_read() {
    // examples/exported-metrics.txt (read by examples/prometheus/ingero-rules.yaml and the
    // Grafana dashboard) expects these names and labels from the default config.
    let e = default_exporter();
    e.consume(&[health_push(&golden_push())], ts(T0));
    let lag = rm(
        vec![
            kv_str("ingero.cluster.id", "c1"),
            kv_str("ingero.node.id", "n1"),
            kv_str("nccl.lag_clock", "wall"),
        ],
        vec![gauge(
            "nccl.collective.peer_lag_ms",
            "ms",
            vec![point(
                vec![
                    kv_str("nccl.comm_id_hash", "0x1f"),
                    kv_str("nccl.op_type", "ncclAllReduce"),
                    component::otlp::kv_i64("nccl.rank", 3),
                    component::otlp::kv_i64("nccl.nranks", 8),
                ],
                T0,
                12.5,
            )],
        )],
    );
    e.consume(&[lag], ts(T0));
    let s = parse(&render(&e, T0, &[]));
    let score = named(&s, "ingero_node_health_score_ratio");
    assert_eq!(score[0].labels["ingero_cluster_id"], "c1");
    assert_eq!(score[0].labels["ingero_node_id"], "n1");
    let lag = named(&s, "nccl_collective_peer_lag_ms_milliseconds");
    assert_eq!(lag.len(), 1);
    for l in [
        "ingero_cluster_id",
        "ingero_node_id",
        "nccl_comm_id_hash",
        "nccl_op_type",
        "nccl_rank",
    ] {
        assert!(lag[0].labels.contains_key(l), "{l}");
    }
    assert_eq!(lag[0].value, 12.5);
}
