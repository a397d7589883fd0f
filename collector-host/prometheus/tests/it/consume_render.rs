//! consume -> render: types, names, labels, escaping, merging, concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::agent::{AgentPush, health_push};
use common::*;
use component::MetricFamily;
use component::otlp::{kv_i64, kv_str};
use fleet_prometheus::{DropReason, PrometheusExporterConfig, ResourceToTelemetry};

fn now() -> u64 {
    T0
}

#[test]
fn agent_push_becomes_labelled_gauges_and_counters() {
    let e = default_exporter();
    let p = AgentPush::fleet_node(1, true, now() * 1_000_000_000);
    let stats = e.consume(&[health_push(&p)], ts(now()));
    assert_eq!(stats.points, 13);
    assert_eq!(stats.stored, 13);
    assert_eq!(stats.dropped, 0);
    let text = render(&e, now(), &[]);
    let s = parse(&text);

    let score = named(&s, "ingero_node_health_score_ratio");
    assert_eq!(score.len(), 1);
    assert_eq!(
        score[0].labels,
        labels(&[
            ("ingero_cgroup_path_hash", &p.cgroup_hash),
            ("ingero_cluster_id", "cluster-0000"),
            ("ingero_node_id", "gpu-node-000001"),
            ("ingero_node_rank", "1"),
            ("ingero_node_state", "active"),
            ("ingero_provider", "aws"),
            ("ingero_workload_type", "training"),
            ("ingero_world_size", "8"),
        ])
    );
    assert_eq!(score[0].value, p.score);
    assert!(text.contains("# TYPE ingero_node_health_score_ratio gauge\n"));
    assert!(text.contains("# TYPE ingero_node_cuda_kernel_launch_total counter\n"));
    assert!(text.contains("# TYPE ingero_node_cpu_stall_nanos_nanoseconds_total counter\n"));
    assert!(text.contains("# TYPE ingero_node_cuda_memcpy_bytes_total counter\n"));
    let launches = named(&s, "ingero_node_cuda_kernel_launch_total");
    assert_eq!(launches[0].value, p.cgroup_sums[0].kernel_launches as f64);
    let memcpy = named(&s, "ingero_node_cuda_memcpy_bytes_total");
    assert_eq!(memcpy[0].labels["ingero_memcpy_direction"], "h2d");
    let info = named(&s, "ingero_node_info_ratio");
    assert_eq!(info[0].labels["ingero_gpu_model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(info[0].labels["ingero_gpu_count"], "8");
    let reach = named(&s, "ingero_agent_fleet_reachable_ratio");
    // No data-point attributes: only the resource's labels.
    assert_eq!(reach[0].labels.len(), 5);
    assert_eq!(s.len(), 13);
    // The agent resource has no service.name / service.instance.id: no target_info.
    assert!(!text.contains("target_info"));
}

#[test]
fn each_family_has_one_help_and_type_and_its_samples_are_contiguous() {
    let e = default_exporter();
    let pushes: Vec<_> = (0..50)
        .map(|i| health_push(&AgentPush::fleet_node(i, i % 2 == 0, now() * 1_000_000_000)))
        .collect();
    e.consume(&pushes, ts(now()));
    let text = render(&e, now(), &[]);
    let mut seen_types = BTreeSet::new();
    let mut finished = BTreeSet::new();
    let mut current = String::new();
    let mut families = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(seen_types.insert(name.clone()), "second TYPE for {name}");
            finished.insert(std::mem::replace(&mut current, name.clone()));
            families.push(name);
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert_eq!(name, current, "sample of {name} outside its family block");
            assert!(!finished.contains(name));
        }
    }
    let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert_eq!(helps, seen_types.len());
    let mut sorted = families.clone();
    sorted.sort();
    assert_eq!(families, sorted, "families are rendered in name order");
    assert_eq!(parse(&text).len(), 25 * 13 + 25 * 10);
}

#[test]
fn monotonic_sums_are_counters_other_sums_gauges() {
    let e = default_exporter();
    let batch = rm(
        vec![kv_str("host", "h")],
        vec![
            sum(
                "requests",
                "{request}",
                true,
                2,
                vec![point(vec![], now(), 7.0)],
            ),
            sum(
                "queue.depth",
                "1",
                false,
                2,
                vec![point(vec![], now(), 3.0)],
            ),
            gauge("temperature", "Cel", vec![point(vec![], now(), 41.5)]),
        ],
    );
    e.consume(&[batch], ts(now()));
    let text = render(&e, now(), &[]);
    assert!(
        text.contains("# TYPE requests_total counter\nrequests_total{host=\"h\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE queue_depth gauge\nqueue_depth{host=\"h\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE temperature_celsius gauge\ntemperature_celsius{host=\"h\"} 41.5\n")
    );
}

#[test]
fn delta_sums_accumulate_into_a_cumulative_counter() {
    let e = default_exporter();
    for (i, v) in [2.0, 3.0, 5.0].into_iter().enumerate() {
        let t = now() + i as u64 * 10;
        let b = rm(
            vec![kv_str("n", "a")],
            vec![sum("bytes.sent", "By", true, 1, vec![point(vec![], t, v)])],
        );
        e.consume(&[b], ts(t));
    }
    let s = parse(&render(&e, now() + 20, &[]));
    assert_eq!(named(&s, "bytes_sent_total")[0].value, 10.0);
}

#[test]
fn label_values_are_escaped_and_round_trip() {
    let e = default_exporter();
    let nasty = "back\\slash \"quoted\"\nnewline";
    let b = rm(
        vec![kv_str("ingero.node.id", nasty)],
        vec![gauge(
            "g",
            "",
            vec![point(vec![kv_str("path", "C:\\tmp")], now(), 1.0)],
        )],
    );
    e.consume(&[b], ts(now()));
    let text = render(&e, now(), &[]);
    assert!(
        text.contains(r#"ingero_node_id="back\\slash \"quoted\"\nnewline""#),
        "{text}"
    );
    assert!(text.contains(r#"path="C:\\tmp""#), "{text}");
    let s = parse(&text);
    assert_eq!(s[0].labels["ingero_node_id"], nasty);
    assert_eq!(s[0].labels["path"], "C:\\tmp");
}

#[test]
fn without_resource_promotion_nodes_collide() {
    let cfg = PrometheusExporterConfig {
        resource_to_telemetry_conversion: ResourceToTelemetry { enabled: false },
        ..Default::default()
    };
    let e = exporter(cfg);
    let pushes: Vec<_> = (0..3)
        .map(|i| health_push(&AgentPush::fleet_node(i, false, now() * 1_000_000_000)))
        .collect();
    e.consume(&pushes, ts(now()));
    let s = parse(&render(&e, now(), &[]));
    // Ten series, not thirty: this is why promotion is on by default.
    assert_eq!(named(&s, "ingero_node_throughput_ratio").len(), 1);
    assert_eq!(e.resource_count(), 1);

    let e = default_exporter();
    e.consume(&pushes, ts(now()));
    let s = parse(&render(&e, now(), &[]));
    assert_eq!(named(&s, "ingero_node_throughput_ratio").len(), 3);
    assert_eq!(e.resource_count(), 3);
}

#[test]
fn job_instance_and_target_info_come_from_service_attributes() {
    let e = default_exporter();
    let b = rm(
        vec![
            kv_str("service.name", "trainer"),
            kv_str("service.namespace", "ml"),
            kv_str("service.instance.id", "pod-7"),
            kv_str("k8s.node.name", "n7"),
        ],
        vec![gauge(
            "up",
            "",
            vec![point(vec![kv_str("job", "overridden")], now(), 1.0)],
        )],
    );
    e.consume(&[b], ts(now()));
    let text = render(&e, now(), &[]);
    let s = parse(&text);
    let up = named(&s, "up");
    assert_eq!(
        up[0].labels,
        labels(&[
            ("instance", "pod-7"),
            ("job", "ml/trainer"),
            ("k8s_node_name", "n7"),
            ("service_instance_id", "pod-7"),
            ("service_name", "trainer"),
            ("service_namespace", "ml"),
        ])
    );
    let ti = named(&s, "target_info");
    assert_eq!(ti.len(), 1);
    assert_eq!(
        ti[0].labels,
        labels(&[
            ("instance", "pod-7"),
            ("job", "ml/trainer"),
            ("k8s_node_name", "n7")
        ])
    );
    assert!(text.contains("# HELP target_info Target metadata\n# TYPE target_info gauge\n"));
}

#[test]
fn namespace_and_const_labels_apply_to_every_translated_series() {
    let cfg = PrometheusExporterConfig {
        namespace: "fleet".into(),
        const_labels: [("env".to_string(), "prod \"eu\"".to_string())].into(),
        ..Default::default()
    };
    let e = exporter(cfg);
    let b = rm(
        vec![kv_str("ingero.node.id", "n1")],
        vec![gauge(
            "ingero.node.health_score",
            "1",
            vec![point(vec![kv_str("env", "dev")], now(), 0.5)],
        )],
    );
    e.consume(&[b], ts(now()));
    let extra = [MetricFamily::gauge("ingero_fleet_up", "Self metric.").with(&[], 1.0)];
    let text = render(&e, now(), &extra);
    let s = parse(&text);
    let h = named(&s, "fleet_ingero_node_health_score_ratio");
    assert_eq!(
        h[0].labels,
        labels(&[("env", "prod \"eu\""), ("ingero_node_id", "n1")])
    );
    // Self-metrics are rendered as given: no namespace, no const labels.
    assert_eq!(named(&s, "ingero_fleet_up")[0].labels.len(), 0);
}

#[test]
fn colliding_label_names_are_joined_with_semicolons_in_key_order() {
    let e = default_exporter();
    let b = rm(
        vec![
            kv_str("node", "n1"),
            kv_str("x.y", "res"),
            kv_str("same", "from-resource"),
        ],
        vec![gauge(
            "g",
            "",
            vec![point(
                vec![
                    kv_str("a_b", "2"),
                    kv_str("a.b", "1"),
                    kv_str("x_y", "dp"),
                    kv_str("same", "from-point"),
                ],
                now(),
                1.0,
            )],
        )],
    );
    e.consume(&[b], ts(now()));
    let s = parse(&render(&e, now(), &[]));
    assert_eq!(
        s[0].labels,
        labels(&[
            // "a.b" < "a_b": values joined in that key order.
            ("a_b", "1;2"),
            ("node", "n1"),
            // The resource attribute overrides the point's attribute with the same key.
            ("same", "from-resource"),
            ("x_y", "res;dp"),
        ])
    );
}

#[test]
fn non_string_attribute_values_are_spelled_like_pdata() {
    let e = default_exporter();
    let b = rm(
        vec![kv_i64("ingero.world_size", 8)],
        vec![gauge(
            "g",
            "",
            vec![point(
                vec![
                    component::otlp::kv_f64("fraction", 0.85),
                    component::otlp::kv_f64("tiny", 1e-7),
                ],
                now(),
                1.0,
            )],
        )],
    );
    e.consume(&[b], ts(now()));
    let s = parse(&render(&e, now(), &[]));
    assert_eq!(
        s[0].labels,
        labels(&[
            ("ingero_world_size", "8"),
            ("fraction", "0.85"),
            ("tiny", "1e-7")
        ])
    );
}

#[test]
fn out_of_order_points_are_dropped_and_counted() {
    let e = default_exporter();
    let at = |t: u64, v: f64| {
        rm(
            vec![kv_str("n", "a")],
            vec![gauge("g", "", vec![point(vec![], t, v)])],
        )
    };
    e.consume(&[at(now() + 10, 1.0)], ts(now() + 10));
    let st = e.consume(&[at(now(), 2.0)], ts(now() + 11));
    assert_eq!(st.dropped, 1);
    assert_eq!(e.dropped(DropReason::OutOfOrder), 1);
    assert_eq!(parse(&render(&e, now() + 11, &[]))[0].value, 1.0);
}

#[test]
fn unusable_points_are_dropped_and_counted_by_reason() {
    let e = default_exporter();
    let mut no_value = point(vec![], now(), 0.0);
    no_value.value = None;
    let mut stale = point(vec![], now(), 1.0);
    stale.flags = 1;
    let exp = component::otlp::Metric {
        name: "latency".into(),
        data: Some(component::otlp::MetricKind::ExponentialHistogram(
            opentelemetry_proto::tonic::metrics::v1::ExponentialHistogram {
                data_points: vec![Default::default(), Default::default()],
                aggregation_temporality: 0,
            },
        )),
        ..Default::default()
    };
    let b = rm(
        vec![kv_str("n", "a")],
        vec![
            gauge("a", "", vec![no_value, stale]),
            gauge(
                "b",
                "",
                vec![point(vec![kv_str("__name__", "x")], now(), 1.0)],
            ),
            gauge("c", "", vec![point(vec![kv_str("", "x")], now(), 1.0)]),
            gauge("...", "", vec![point(vec![], now(), 1.0)]),
            sum("d", "", true, 0, vec![point(vec![], now(), 1.0)]),
            exp,
            gauge("ok", "", vec![point(vec![], now(), 1.0)]),
        ],
    );
    let st = e.consume(&[b], ts(now()));
    assert_eq!((st.points, st.stored, st.dropped), (9, 1, 8));
    assert_eq!(e.dropped(DropReason::NoValue), 2);
    assert_eq!(e.dropped(DropReason::InvalidLabelName), 2);
    assert_eq!(e.dropped(DropReason::InvalidMetricName), 1);
    assert_eq!(e.dropped(DropReason::InvalidTemporality), 3);
    assert_eq!(e.dropped(DropReason::UnsupportedType), 0);
    let s = parse(&render(&e, now(), &[]));
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "ok");
}

#[test]
fn a_second_type_under_one_name_is_a_conflict() {
    let e = default_exporter();
    let g = rm(
        vec![kv_str("n", "a")],
        vec![gauge("jobs", "", vec![point(vec![], now(), 1.0)])],
    );
    let c = rm(
        vec![kv_str("n", "a")],
        vec![sum("jobs", "", false, 2, vec![point(vec![], now(), 2.0)])],
    );
    let h = rm(
        vec![kv_str("n", "b")],
        vec![component::otlp::Metric {
            name: "jobs".into(),
            data: Some(component::otlp::MetricKind::Histogram(
                opentelemetry_proto::tonic::metrics::v1::Histogram {
                    data_points: vec![Default::default()],
                    aggregation_temporality: 2,
                },
            )),
            ..Default::default()
        }],
    );
    e.consume(&[g, c, h], ts(now()));
    assert_eq!(e.dropped(DropReason::TypeConflict), 1);
    let s = parse(&render(&e, now(), &[]));
    // The non-monotonic sum is a gauge too: same family, same series, last value wins.
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].value, 2.0);
}

#[test]
fn self_metrics_are_merged_validated_and_counted() {
    let e = default_exporter();
    e.consume(
        &[rm(
            vec![kv_str("n", "a")],
            vec![gauge("shared.name", "", vec![point(vec![], now(), 1.0)])],
        )],
        ts(now()),
    );
    let extra = vec![
        MetricFamily::gauge("shared_name", "ignored help").with(&[("component", "x")], 2.0),
        MetricFamily::counter("otelcol_exporter_sent_metric_points_total", "Sent.")
            .with(&[("exporter", "prometheus")], 5.0),
        MetricFamily::counter("otelcol_exporter_sent_metric_points_total", "Sent.")
            .with(&[("exporter", "otlp")], 6.0),
        MetricFamily::counter("shared_name", "wrong type").with(&[], 1.0),
        MetricFamily::gauge("bad-name", "x").with(&[], 1.0),
        MetricFamily::gauge("empty_family", "x"),
    ];
    let text = render(&e, now(), &extra);
    assert_eq!(text.matches("# TYPE shared_name gauge").count(), 1);
    assert_eq!(
        text.matches("# TYPE otelcol_exporter_sent_metric_points_total counter")
            .count(),
        1
    );
    assert!(
        !text.contains("empty_family"),
        "families without samples are left out"
    );
    let s = parse(&text);
    // The component's family owns its name: the pushed series of that name is left out.
    let shared = named(&s, "shared_name");
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert_eq!(shared[0].value, 2.0);
    assert_eq!(
        named(&s, "otelcol_exporter_sent_metric_points_total").len(),
        2
    );
    assert!(named(&s, "bad-name").is_empty());

    let mut tel = Vec::new();
    e.telemetry(&mut tel);
    let rejected = tel
        .iter()
        .find(|f| f.name == "ingero_fleet_prometheus_self_metrics_rejected_total")
        .unwrap();
    let by = |r: &str| {
        rejected
            .samples
            .iter()
            .find(|s| s.labels[0].1 == r)
            .unwrap()
            .value
    };
    assert_eq!(by("invalid_name"), 1.0);
    assert_eq!(by("type_conflict"), 1.0);
}

#[test]
fn concurrent_consume_and_render() {
    let e = Arc::new(default_exporter());
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                for round in 0..5u64 {
                    let t = now() + round;
                    let batch: Vec<_> = (0..200)
                        .map(|i| {
                            health_push(&AgentPush::fleet_node(
                                w * 1000 + i,
                                false,
                                t * 1_000_000_000,
                            ))
                        })
                        .collect();
                    e.consume(&batch, ts(t));
                }
            })
        })
        .collect();
    let reader = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || {
            let mut renders = 0;
            for _ in 0..20 {
                let text = render(&e, now() + 5, &[]);
                // Every intermediate page is well formed (parse panics otherwise) and never
                // holds more than was pushed.
                let s = parse(&text);
                assert!(s.len() <= 8000);
                renders += 1;
            }
            renders
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(reader.join().unwrap(), 20);
    let s = parse(&render(&e, now() + 5, &[]));
    assert_eq!(s.len(), 800 * 10);
    assert_eq!(e.series_count(), 8000);
    let nodes: BTreeSet<_> = s
        .iter()
        .map(|x| x.labels["ingero_node_id"].clone())
        .collect();
    assert_eq!(nodes.len(), 800);
}

#[test]
fn a_known_point_shape_still_merges_with_a_colliding_resource() {
    // The first resource teaches the exporter the point shape {x="dp"}; the second has
    // its own `x`, which must win as the resource attribute does in contrib.
    let e = default_exporter();
    let shape = || vec![point(vec![kv_str("x", "dp")], now(), 1.0)];
    e.consume(
        &[rm(vec![kv_str("node", "a")], vec![gauge("g", "", shape())])],
        ts(now()),
    );
    e.consume(
        &[rm(
            vec![kv_str("node", "b"), kv_str("x", "res")],
            vec![gauge("g", "", shape())],
        )],
        ts(now()),
    );
    // And again, now that everything is interned (read path).
    e.consume(
        &[rm(
            vec![kv_str("node", "b"), kv_str("x", "res")],
            vec![gauge("g", "", shape())],
        )],
        ts(now()),
    );
    let mut got: Vec<_> = parse(&render(&e, now(), &[]))
        .into_iter()
        .map(|s| s.labels)
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            labels(&[("node", "a"), ("x", "dp")]),
            labels(&[("node", "b"), ("x", "res")])
        ]
    );
}

#[test]
fn chunked_render_streams_the_same_page_in_bounded_pieces() {
    let e = default_exporter();
    for node in 0..300 {
        let p = AgentPush::fleet_node(node, node % 7 != 0, now() * 1_000_000_000);
        e.consume(&[health_push(&p)], ts(now()));
    }
    let extra = vec![MetricFamily::gauge("ingero_fleet_test_extra", "extra family").with(&[], 1.0)];
    let whole = render(&e, now(), &extra);
    assert!(whole.len() > 64 * 1024, "page of {} bytes", whole.len());

    // Take everything at each flush point once past 4 KiB, as the HTTP handler does.
    let mut chunks: Vec<String> = Vec::new();
    let mut buf = String::new();
    let done = e.render_chunked(ts(now()), &extra, &mut buf, &mut |b: &mut String| {
        if b.len() >= 4096 {
            chunks.push(std::mem::take(b));
        }
        true
    });
    assert!(done);
    chunks.push(buf);
    assert!(chunks.len() > 5, "{} chunks", chunks.len());
    assert_eq!(chunks.concat(), whole);
    // Every chunk ends at a line end, and no family's HELP line is without its series.
    for c in &chunks[..chunks.len() - 1] {
        assert!(c.ends_with('\n'));
        assert!(
            !c.ends_with(" gauge\n") && !c.ends_with(" counter\n"),
            "{c}"
        );
    }
    // Bounded: no chunk is more than the threshold plus one shard's part of one family.
    let biggest = chunks.iter().map(String::len).max().unwrap();
    assert!(
        biggest < whole.len() / 4,
        "biggest chunk {biggest} of {}",
        whole.len()
    );

    // A flush that refuses stops the render at once.
    let mut calls = 0;
    let mut buf = String::new();
    let done = e.render_chunked(ts(now()), &extra, &mut buf, &mut |b: &mut String| {
        calls += 1;
        b.clear();
        false
    });
    assert!(!done);
    assert_eq!(calls, 1);
}

#[test]
fn per_event_attributes_are_not_labels_by_default() {
    use component::otlp::kv_f64;
    use ingero_wire::attr;
    // Two straggler events of one node and two NCCL collectives of one rank: everything
    // but the per-event values is equal.
    let p = AgentPush::fleet_node(1, false, now() * 1_000_000_000);
    // With this project's agent, each also carries its episode id and causal chains.
    let with_cause = |mut r: component::otlp::ResourceMetrics, id: &str| {
        if let Some(component::otlp::MetricKind::Gauge(g)) = &mut r.scope_metrics[0].metrics[0].data
        {
            let a = &mut g.data_points[0].attributes;
            a.push(kv_str(attr::CAUSAL_CHAIN_ID, id));
            a.push(kv_str(
                attr::CAUSAL_CHAINS,
                format!(r#"[{{"id":"{id}","severity":"HIGH","summary":"s"}}]"#),
            ));
        }
        r
    };
    let events = [
        with_cause(
            common::agent::straggler_event(&p, "6f1c0d7e-0000-4000-8000-000000000001", 0.81, 0.42),
            "n1:1000",
        ),
        with_cause(
            common::agent::straggler_event(&p, "6f1c0d7e-0000-4000-8000-000000000002", 0.82, 0.40),
            "n1:2000",
        ),
    ];
    let nccl = |seq: i64, t: u64| {
        rm(
            vec![kv_str("ingero.node.id", "n1")],
            vec![gauge(
                "nccl.collective.duration_ms",
                "ms",
                vec![point(
                    vec![
                        kv_str(attr::NCCL_OP_TYPE, "AllReduce"),
                        kv_i64(attr::NCCL_OP_SEQ, seq),
                        kv_f64("unused", 1.0),
                    ],
                    t,
                    1.5,
                )],
            )],
        )
    };
    let batch = || {
        let mut b = events.to_vec();
        b.push(nccl(41, now()));
        b.push(nccl(42, now() + 1));
        b
    };

    let e = default_exporter();
    e.consume(&batch(), ts(now() + 1));
    let s = parse(&render(&e, now() + 1, &[]));
    let ev = named(&s, "ingero_node_straggler_event_ratio");
    assert_eq!(ev.len(), 1, "{ev:?}");
    for key in [
        "ingero_event_id",
        "score",
        "threshold",
        "ingero_causal_chain_id",
        "ingero_causal_chains",
    ] {
        assert!(
            !ev[0].labels.contains_key(key),
            "{key} in {:?}",
            ev[0].labels
        );
    }
    assert_eq!(ev[0].labels["dominant_signal"], "throughput");
    let d = named(&s, "nccl_collective_duration_ms_milliseconds");
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(!d[0].labels.contains_key("nccl_op_seq"));
    assert_eq!(d[0].labels["nccl_op_type"], "AllReduce");

    // `drop_attributes: []` keeps them: one series per event and per collective.
    let e = exporter(PrometheusExporterConfig {
        drop_attributes: Some(vec![]),
        ..Default::default()
    });
    e.consume(&batch(), ts(now() + 1));
    let s = parse(&render(&e, now() + 1, &[]));
    assert_eq!(named(&s, "ingero_node_straggler_event_ratio").len(), 2);
    assert_eq!(
        named(&s, "nccl_collective_duration_ms_milliseconds").len(),
        2
    );
}

/// Regression (issue 18): exponential histograms were dropped. They become classic
/// histograms at their own bucket boundaries; delta points with the same boundaries add up.
#[test]
fn exponential_histograms_become_classic_histograms() {
    use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
    use opentelemetry_proto::tonic::metrics::v1::{
        ExponentialHistogram, ExponentialHistogramDataPoint,
    };
    let e = default_exporter();
    // Scale 0: values 3 (bucket 1, (2, 4]) and 5, 6 (bucket 2, (4, 8]), one zero.
    let dp = |t: u64| ExponentialHistogramDataPoint {
        time_unix_nano: t * 1_000_000_000,
        count: 4,
        sum: Some(14.0),
        scale: 0,
        zero_count: 1,
        positive: Some(Buckets {
            offset: 1,
            bucket_counts: vec![1, 2],
        }),
        ..Default::default()
    };
    for (i, temporality) in [(0u64, 1), (1, 1)] {
        let m = component::otlp::Metric {
            name: "rpc.duration".into(),
            unit: "s".into(),
            data: Some(component::otlp::MetricKind::ExponentialHistogram(
                ExponentialHistogram {
                    data_points: vec![dp(now() + i)],
                    aggregation_temporality: temporality,
                },
            )),
            ..Default::default()
        };
        let st = e.consume(&[rm(vec![kv_str("n", "a")], vec![m])], ts(now() + i));
        assert_eq!((st.points, st.stored, st.dropped), (1, 1, 0));
    }
    let text = render(&e, now() + 1, &[]);
    assert!(
        text.contains("# TYPE rpc_duration_seconds histogram"),
        "{text}"
    );
    // Two deltas of the same shape: counts doubled, cumulative over the buckets.
    for (le, v) in [("0", 2), ("4", 4), ("8", 8), ("+Inf", 8)] {
        let line = format!("rpc_duration_seconds_bucket{{n=\"a\",le=\"{le}\"}} {v}");
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    assert!(
        text.contains("rpc_duration_seconds_count{n=\"a\"} 8"),
        "{text}"
    );
    assert!(
        text.contains("rpc_duration_seconds_sum{n=\"a\"} 28"),
        "{text}"
    );
}
