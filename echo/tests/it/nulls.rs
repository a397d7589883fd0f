//! NULL-bearing data through every tool, NULL and exotic SQL types through `run_analysis`,
//! and NaN / infinite values at ingest.

use component::otlp::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse, gauge_f64, kv_f64, kv_str,
    point_f64, resource_metrics,
};
use ingero_wire::{attr, metric, resource};
use prost::Message;
use serde_json::json;

use crate::common::*;

/// A cluster whose rows leave every optional column empty: points without a node,
/// events without threshold, score, signal or rank, NCCL without op, rank or comm, node
/// info without provider, model or GPU count.
fn sparse_batch(cluster: &str) -> ExportMetricsServiceRequest {
    let t = now_ns() - 30_000_000_000;
    let no_node = resource_metrics(
        vec![kv_str(resource::CLUSTER_ID, cluster)],
        "ingero.health",
        vec![
            gauge_f64(metric::HEALTH_SCORE, "1", vec![point_f64(vec![], t, 0.7)]),
            gauge_f64(
                metric::FLEET_NODE_STRAGGLER,
                "1",
                vec![point_f64(vec![], t, 1.0)],
            ),
            gauge_f64(
                metric::STRAGGLER_EVENT,
                "1",
                vec![point_f64(vec![], t, 1.0)],
            ),
        ],
    );
    let bare = resource_metrics(
        vec![
            kv_str(resource::CLUSTER_ID, cluster),
            kv_str(resource::NODE_ID, "bare-node"),
        ],
        "ingero.health",
        vec![
            gauge_f64(metric::HEALTH_SCORE, "1", vec![point_f64(vec![], t, 0.2)]),
            gauge_f64(
                metric::STRAGGLER_EVENT,
                "1",
                vec![point_f64(vec![], t, 1.0)],
            ),
            gauge_f64(
                metric::FLEET_NODE_STRAGGLER,
                "1",
                vec![point_f64(vec![], t, 1.0)],
            ),
            gauge_f64(metric::NODE_INFO, "1", vec![point_f64(vec![], t, 1.0)]),
            gauge_f64(
                metric::NCCL_DURATION_MS,
                "ms",
                vec![point_f64(vec![], t, 5.0)],
            ),
            gauge_f64(
                metric::NCCL_PEER_LAG_MS,
                "ms",
                vec![point_f64(vec![], t, 2.0)],
            ),
            gauge_f64(metric::NCCL_BYTES, "1", vec![point_f64(vec![], t, 64.0)]),
        ],
    );
    ExportMetricsServiceRequest {
        resource_metrics: vec![no_node, bare],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_answers_over_null_bearing_rows() {
    let e = Echo::start(Opts::default()).await;
    let r = e.push(&sparse_batch("sparse")).await;
    assert_eq!(r.status(), 200, "{}", String::from_utf8_lossy(r.body()));
    for (tool, args) in [
        ("fleet.cluster.summary", json!({})),
        ("fleet.cluster.summary", json!({"cluster_id": "sparse"})),
        (
            "fleet.cluster.event_history",
            json!({"cluster_id": "sparse"}),
        ),
        (
            "fleet.cluster.find_outlier_nodes",
            json!({"cluster_id": "sparse"}),
        ),
        ("fleet.cluster.nccl", json!({"cluster_id": "sparse"})),
        ("fleet.cluster.get_cost", json!({"cluster_id": "sparse"})),
        ("fleet.cluster.nccl_trace", json!({"cluster_id": "sparse"})),
        ("fleet.cluster.history", json!({"cluster_id": "sparse"})),
        (
            "fleet.cluster.history",
            json!({"cluster_id": "sparse", "step": "1m"}),
        ),
    ] {
        let (s, v) = e.tool(tool, args.clone(), None).await;
        assert_eq!(s, 200, "{tool} {args}: {v}");
    }
    let (_, v) = e
        .tool(
            "fleet.cluster.get_cost",
            json!({"cluster_id": "sparse"}),
            None,
        )
        .await;
    assert_eq!(v["nodes"][0]["node_id"], "bare-node", "{v}");
    assert_eq!(v["nodes"][0]["provider"], json!(null), "{v}");
    // Every table's NULLs, and NULL-typed columns, read back as null.
    for table in [
        "points",
        "health_scores",
        "straggler_events",
        "fleet_stragglers",
        "nccl",
        "node_info",
    ] {
        let (s, v) = e
            .tool(
                "fleet.cluster.run_analysis",
                json!({"sql": format!("SELECT * FROM {table}")}),
                None,
            )
            .await;
        assert_eq!(s, 200, "{table}: {v}");
    }
    let rows = e
        .sql("SELECT NULL, NULL::DECIMAL(10,2), NULL::TIMESTAMP, NULL::INTEGER[], [NULL::INTEGER, 2], {'a': NULL::VARCHAR}")
        .await;
    assert_eq!(
        rows,
        vec![vec![
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!([null, 2]),
            json!({"a": null})
        ]]
    );
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decimal_time_and_list_cells_are_json_not_debug_text() {
    let e = Echo::start(Opts::default()).await;
    let rows = e
        .sql("SELECT 12.50::DECIMAL(10,2), TIMESTAMP '2024-03-01 12:34:56.789', DATE '1969-12-31', [1, 2, 3], {'k': 'v'}, MAP {'x': 1}, INTERVAL 90 MINUTE")
        .await;
    assert_eq!(
        rows,
        vec![vec![
            json!(12.5),
            json!("2024-03-01T12:34:56.789000Z"),
            json!("1969-12-31"),
            json!([1, 2, 3]),
            json!({"k": "v"}),
            json!([{"key": "x", "value": 1}]),
            json!({"months": 0, "days": 0, "nanos": 5_400_000_000_000_i64}),
        ]]
    );
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_and_infinite_values_are_refused_at_ingest_with_partial_success() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 4, 2).await;
    let t = now_ns() - 5_000_000_000;
    let bad = batch(
        "prod",
        "prod-node-1",
        vec![
            health(f64::NAN, t),
            health(f64::INFINITY, t),
            health(0.91, t),
            straggler_event("prod-ev-nan", f64::NAN, 0.8, t, "chain-nan"),
            gauge_f64(
                metric::FLEET_NODE_STRAGGLER,
                "1",
                vec![point_f64(
                    vec![kv_f64(attr::SCORE, 1.0)],
                    t,
                    f64::NEG_INFINITY,
                )],
            ),
        ],
    );
    let r = e.push(&bad).await;
    assert_eq!(r.status(), 200, "{}", String::from_utf8_lossy(r.body()));
    let answer = ExportMetricsServiceResponse::decode(r.body().as_slice()).unwrap();
    let partial = answer.partial_success.expect("partial success");
    assert_eq!(partial.rejected_data_points, 4, "{partial:?}");
    assert!(partial.error_message.contains("NaN"), "{partial:?}");
    // The finite point of the same batch is stored.
    let rows = e
        .sql("SELECT count(*) FROM health_scores WHERE node_id = 'prod-node-1' AND score = 0.91")
        .await;
    assert_eq!(rows[0][0], json!(1));
    let (s, v) = e
        .tool(
            "fleet.cluster.find_outlier_nodes",
            json!({"cluster_id": "prod"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    for n in v["nodes"].as_array().unwrap() {
        assert!(n["depth"].is_number(), "{v}");
        assert!(n["avg_score"].is_number(), "{v}");
    }
    let (_, v) = e
        .tool("fleet.cluster.summary", json!({"cluster_id": "prod"}), None)
        .await;
    assert!(v["clusters"][0]["avg_score"].is_number(), "{v}");
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_users_read_the_rollup_the_cluster_list_and_json_attributes() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 3, 1).await;
    // The tables and columns the tool description and the README name.
    let rows = e.sql("SELECT cluster_id FROM clusters").await;
    assert_eq!(rows, vec![vec![json!("prod")]]);
    let rows = e
        .sql("SELECT count(*) > 0, bool_and(seq IS NOT NULL) FROM health_scores")
        .await;
    assert_eq!(rows, vec![vec![json!(true), json!(true)]]);
    // Once the writer flushed its sums (every 10 s), the view adds the partial rows up to
    // exactly what the raw rows hold.
    let mut flushed = false;
    for _ in 0..300 {
        let r = e
            .sql("SELECT (SELECT max(flushed_seq) FROM rollup_state) >= (SELECT max(seq) FROM health_scores)")
            .await;
        if r[0][0] == json!(true) {
            flushed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(flushed, "the rollup was not flushed");
    let view = e
        .sql("SELECT node_id, sum(samples)::BIGINT, round(sum(score_sum), 6) FROM health_minute_totals WHERE cluster_id = 'prod' GROUP BY ALL ORDER BY ALL")
        .await;
    let raw = e
        .sql("SELECT node_id, count(*), round(sum(score), 6) FROM health_scores WHERE cluster_id = 'prod' GROUP BY ALL ORDER BY ALL")
        .await;
    assert_eq!(view, raw);
    let rows = e.sql("SELECT count(*) > 0 FROM health_minutes").await;
    assert_eq!(rows[0][0], json!(true));
    // Attributes are JSON text: the json extension reads them.
    let rows = e
        .sql(&format!(
            "SELECT DISTINCT json_extract_string(attributes, '$.\"{}\"') FROM points WHERE metric = '{}'",
            attr::NODE_STATE,
            metric::HEALTH_SCORE
        ))
        .await;
    assert_eq!(rows, vec![vec![json!("active")]]);
    e.stop().await;
}

/// NULLs of DuckDB's NULL type nested in lists, structs, maps, arrays and unions, and empty
/// ones: each cell is JSON (the row accessor has no value for a NULL-typed column).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_typed_cells_nested_or_empty_are_json() {
    let e = Echo::start(Opts::default()).await;
    for (q, want) in [
        (
            "SELECT NULL AS x UNION ALL SELECT NULL",
            json!([[null], [null]]),
        ),
        ("SELECT a, 1 FROM (VALUES (NULL)) t(a)", json!([[null, 1]])),
        (
            "SELECT max(NULL), [NULL], {'a': NULL}",
            json!([[null, [null], {"a": null}]]),
        ),
        (
            "SELECT MAP {1: NULL}, [[], [NULL]], []",
            json!([[[{"key": 1, "value": null}], [[], [null]], []]]),
        ),
        (
            "SELECT array_value(NULL), union_value(a := NULL), MAP([], [])",
            json!([[[null], null, []]]),
        ),
        (
            "SELECT list(NULL) FROM range(3)",
            json!([[[null, null, null]]]),
        ),
    ] {
        let rows = e.sql(q).await;
        assert_eq!(json!(rows), want, "{q}");
    }
    e.stop().await;
}
