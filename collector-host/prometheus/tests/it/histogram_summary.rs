//! Histograms and summaries: cumulative buckets, +Inf, _sum/_count, quantiles, deltas,
//! invalid shapes and reserved labels.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

use crate::common;

use common::*;
use component::otlp::{KeyValue, Metric, MetricKind, kv_str};
use fleet_prometheus::DropReason;
use opentelemetry_proto::tonic::metrics::v1::{
    Histogram, HistogramDataPoint, Summary, SummaryDataPoint, summary_data_point::ValueAtQuantile,
};

#[allow(clippy::too_many_arguments)]
fn histogram(
    name: &str,
    unit: &str,
    temporality: i32,
    attrs: Vec<KeyValue>,
    t: u64,
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(MetricKind::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                attributes: attrs,
                time_unix_nano: t * 1_000_000_000,
                count: counts.iter().sum(),
                sum: Some(sum),
                bucket_counts: counts.to_vec(),
                explicit_bounds: bounds.to_vec(),
                ..Default::default()
            }],
            aggregation_temporality: temporality,
        })),
        ..Default::default()
    }
}

fn summary(
    name: &str,
    attrs: Vec<KeyValue>,
    quantiles: &[(f64, f64)],
    count: u64,
    sum: f64,
) -> Metric {
    Metric {
        name: name.into(),
        unit: "ms".into(),
        data: Some(MetricKind::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                attributes: attrs,
                time_unix_nano: T0 * 1_000_000_000,
                count,
                sum,
                quantile_values: quantiles
                    .iter()
                    .map(|(q, v)| ValueAtQuantile {
                        quantile: *q,
                        value: *v,
                    })
                    .collect(),
                ..Default::default()
            }],
        })),
        ..Default::default()
    }
}

#[test]
fn histogram_buckets_are_cumulative_with_inf_sum_and_count() {
    let e = default_exporter();
    let m = histogram(
        "nccl.collective.duration",
        "s",
        2,
        vec![kv_str("nccl.op_type", "allreduce")],
        T0,
        &[0.1, 0.5, 1.0],
        &[2, 3, 4, 1],
        4.2,
    );
    e.consume(&[rm(vec![kv_str("ingero.node.id", "n1")], vec![m])], ts(T0));
    let text = render(&e, T0, &[]);
    let want = "# HELP nccl_collective_duration_seconds OTLP metric nccl.collective.duration, unit s
# TYPE nccl_collective_duration_seconds histogram
nccl_collective_duration_seconds_bucket{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\",le=\"0.1\"} 2
nccl_collective_duration_seconds_bucket{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\",le=\"0.5\"} 5
nccl_collective_duration_seconds_bucket{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\",le=\"1\"} 9
nccl_collective_duration_seconds_bucket{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\",le=\"+Inf\"} 10
nccl_collective_duration_seconds_sum{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\"} 4.2
nccl_collective_duration_seconds_count{ingero_node_id=\"n1\",nccl_op_type=\"allreduce\"} 10
";
    assert_eq!(text, want);
    if let Some((code, problems)) = promtool(&text) {
        assert_eq!((code, problems), (0, vec![]));
    }
}

#[test]
fn histogram_without_buckets_has_only_inf() {
    let e = default_exporter();
    let m = histogram("h", "", 2, vec![], T0, &[], &[], 0.0);
    let mut m2 = m.clone();
    if let Some(MetricKind::Histogram(h)) = &mut m2.data {
        h.data_points[0].count = 7;
        h.data_points[0].sum = None;
    }
    e.consume(&[rm(vec![kv_str("n", "a")], vec![m2])], ts(T0));
    let s = parse(&render(&e, T0, &[]));
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].name, "h_bucket");
    assert_eq!(s[0].labels["le"], "+Inf");
    assert_eq!(s[0].value, 7.0);
    assert_eq!(named(&s, "h_sum")[0].value, 0.0);
}

#[test]
fn delta_histograms_accumulate_while_bounds_match() {
    let e = default_exporter();
    let push = |t: u64, bounds: &[f64], counts: &[u64], sum: f64| {
        let m = histogram("lat", "ms", 1, vec![], t, bounds, counts, sum);
        e.consume(&[rm(vec![kv_str("n", "a")], vec![m])], ts(t));
    };
    push(T0, &[1.0, 2.0], &[1, 1, 0], 2.5);
    push(T0 + 10, &[1.0, 2.0], &[0, 2, 1], 6.0);
    let s = parse(&render(&e, T0 + 10, &[]));
    let buckets: Vec<f64> = named(&s, "lat_milliseconds_bucket")
        .iter()
        .map(|x| x.value)
        .collect();
    assert_eq!(buckets, vec![1.0, 4.0, 5.0]);
    assert_eq!(named(&s, "lat_milliseconds_sum")[0].value, 8.5);
    // New bounds: the series starts over from this point.
    push(T0 + 20, &[5.0], &[3, 0], 3.0);
    let s = parse(&render(&e, T0 + 20, &[]));
    let buckets: Vec<(String, f64)> = named(&s, "lat_milliseconds_bucket")
        .iter()
        .map(|x| (x.labels["le"].clone(), x.value))
        .collect();
    assert_eq!(
        buckets,
        vec![("5".to_string(), 3.0), ("+Inf".to_string(), 3.0)]
    );
}

#[test]
fn invalid_histograms_and_reserved_labels_are_dropped() {
    let e = default_exporter();
    let batch = rm(
        vec![kv_str("n", "a")],
        vec![
            // Counts do not match bounds.
            histogram("a", "", 2, vec![], T0, &[1.0, 2.0], &[1, 1], 1.0),
            // Bounds not increasing.
            histogram("b", "", 2, vec![], T0, &[2.0, 1.0], &[1, 1, 1], 1.0),
            // `le` is the bucket label.
            histogram(
                "c",
                "",
                2,
                vec![kv_str("le", "x")],
                T0,
                &[1.0],
                &[1, 1],
                1.0,
            ),
            // Unspecified temporality.
            histogram("d", "", 0, vec![], T0, &[1.0], &[1, 1], 1.0),
            // `quantile` is the summary label.
            summary("e", vec![kv_str("quantile", "x")], &[(0.5, 1.0)], 1, 1.0),
        ],
    );
    let st = e.consume(&[batch], ts(T0));
    assert_eq!((st.stored, st.dropped), (0, 5));
    assert_eq!(e.dropped(DropReason::InvalidHistogram), 2);
    assert_eq!(e.dropped(DropReason::ReservedLabel), 2);
    assert_eq!(e.dropped(DropReason::InvalidTemporality), 1);
    assert_eq!(render(&e, T0, &[]), "");
}

#[test]
fn summaries_have_sorted_unique_quantiles_sum_and_count() {
    let e = default_exporter();
    let m = summary(
        "rpc.latency",
        vec![kv_str("method", "push")],
        &[(0.99, 12.0), (0.5, 3.0), (0.9, 8.0), (0.5, 4.0)],
        100,
        420.0,
    );
    e.consume(&[rm(vec![kv_str("n", "a")], vec![m])], ts(T0));
    let text = render(&e, T0, &[]);
    let want = "# HELP rpc_latency_milliseconds OTLP metric rpc.latency, unit ms
# TYPE rpc_latency_milliseconds summary
rpc_latency_milliseconds{method=\"push\",n=\"a\",quantile=\"0.5\"} 4
rpc_latency_milliseconds{method=\"push\",n=\"a\",quantile=\"0.9\"} 8
rpc_latency_milliseconds{method=\"push\",n=\"a\",quantile=\"0.99\"} 12
rpc_latency_milliseconds_sum{method=\"push\",n=\"a\"} 420
rpc_latency_milliseconds_count{method=\"push\",n=\"a\"} 100
";
    assert_eq!(text, want);
    if let Some((code, problems)) = promtool(&text) {
        // The unit suffix of a faithful translation, nothing else.
        assert_eq!(code, 3, "{problems:?}");
        assert_eq!(
            problems,
            vec!["rpc_latency_milliseconds use base unit \"seconds\" instead of \"milliseconds\""]
        );
    }
}
