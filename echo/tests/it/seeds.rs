//! The seeds' schema: their verification SQL runs unchanged, over the HTTP API and MCP
//! `run_analysis`, against events sent over OTLP/HTTP by eight concurrent producers, and
//! answers exactly; the views stay under the query budgets and the SQL check.

use component::otlp::{gauge_f64, kv_str, point_f64};
use ingero_wire::{attr, metric};
use serde_json::{Value, json};

use crate::common::*;

const NODES: usize = 8;
const PER_NODE: usize = 250;
const STRAGGLER: usize = 5;

/// The score of point `k` of node `i`: the straggler below 0.4 throughout, every other node
/// at or above it (one healthy point exactly at 0.4, which `< 0.4` must not count).
fn score(i: usize, k: usize) -> f64 {
    if i == STRAGGLER {
        0.30 + (k % 10) as f64 * 0.009
    } else if i == 0 && k == 0 {
        0.4
    } else {
        0.85 + (k % 10) as f64 * 0.01
    }
}

async fn seed(e: &Echo) {
    let t0 = now_ns() - 600_000_000_000;
    let mut producers = Vec::new();
    for i in 0..NODES {
        let port = e.otlp_http;
        producers.push(tokio::spawn(async move {
            let node = format!("node-{i}");
            // 25 points per export, as a producer batching its events.
            for chunk in 0..PER_NODE / 25 {
                let points = (chunk * 25..(chunk + 1) * 25)
                    .map(|k| {
                        point_f64(
                            vec![kv_str(attr::NODE_STATE, "active")],
                            t0 + (k as u64) * 1_000_000_000 + i as u64,
                            score(i, k),
                        )
                    })
                    .collect();
                let b = batch(
                    "seed",
                    &node,
                    vec![gauge_f64(metric::HEALTH_SCORE, "1", points)],
                );
                let r = post(
                    port,
                    "/v1/metrics",
                    "application/x-protobuf",
                    prost::Message::encode_to_vec(&b),
                    None,
                )
                .await;
                assert_eq!(r.status(), 200);
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
}

/// The seeds' three queries, exactly as written there, with their expected answers.
fn queries() -> Vec<(&'static str, Vec<Vec<Value>>)> {
    let per_node: Vec<Vec<Value>> = (0..NODES)
        .map(|i| vec![json!(format!("node-{i}")), json!(PER_NODE)])
        .collect();
    vec![
        (
            "SELECT COUNT(*) FROM events;",
            vec![vec![json!(NODES * PER_NODE)]],
        ),
        (
            "SELECT node_id, COUNT(*) FROM events GROUP BY node_id;",
            per_node,
        ),
        (
            "SELECT node_id, COUNT(*) FROM events WHERE value_double < 0.4 GROUP BY node_id;",
            vec![vec![json!(format!("node-{STRAGGLER}")), json!(PER_NODE)]],
        ),
    ]
}

fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort_by_key(|r| r[0].to_string());
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_verification_sql_answers_exactly_over_the_api_and_mcp() {
    let e = Echo::start(Opts::default()).await;
    seed(&e).await;
    for (sql, want) in queries() {
        // HTTP API.
        let got = e.sql(sql).await;
        assert_eq!(sorted(got), want, "{sql}");
        // MCP run_analysis.
        let r = request(
            e.api,
            http::Method::POST,
            "/mcp",
            "application/json",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fleet.cluster.run_analysis", "arguments": {"sql": sql}}})
                .to_string()
                .into_bytes(),
            None,
            Some("localhost"),
        )
        .await;
        let v: Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(v["result"]["isError"], false, "{sql}: {v}");
        let got: Vec<Vec<Value>> =
            serde_json::from_value(v["result"]["structuredContent"]["rows"].clone()).unwrap();
        assert_eq!(sorted(got), want, "{sql} over MCP");
    }
    // node_metrics: one row per node, its health summed from the same points.
    let rows = e
        .sql(
            "SELECT node_id, points, health_samples, round(min_score, 3), straggler_events \
             FROM node_metrics WHERE cluster_id = 'seed' ORDER BY node_id",
        )
        .await;
    assert_eq!(rows.len(), NODES);
    for (i, r) in rows.iter().enumerate() {
        let min = (0..PER_NODE).map(|k| score(i, k)).fold(f64::MAX, f64::min);
        assert_eq!(
            r,
            &vec![
                json!(format!("node-{i}")),
                json!(PER_NODE),
                json!(PER_NODE),
                json!((min * 1000.0).round() / 1000.0),
                json!(0)
            ]
        );
    }
    let rows = e
        .sql("SELECT node_id FROM node_metrics WHERE avg_score < 0.4")
        .await;
    assert_eq!(rows, vec![vec![json!(format!("node-{STRAGGLER}"))]]);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_stay_under_the_query_budgets_and_the_sql_check() {
    let e = Echo::start(Opts {
        api: json!({"query": {"timeout": "1s", "max_rows": 100}}),
        ..Default::default()
    })
    .await;
    seed(&e).await;
    let call = |sql: &str| {
        let sql = sql.to_string();
        let e = &e;
        async move {
            e.tool(
                "fleet.cluster.run_analysis",
                json!({"sql": sql}),
                Some(ALL_TOKEN),
            )
            .await
        }
    };
    // A cross join of the view with itself runs into the time limit: four levels of the
    // seed's 2,000 events are 1.6e13 rows (three, 8e9 rows, were counted within the
    // second on a fast host).
    let (s, v) = call("SELECT count(*) FROM events a, events b, events c, events d").await;
    assert_eq!(s, 408, "{v}");
    // Rows beyond max_rows are cut.
    let (s, v) = call("SELECT * FROM events").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 100);
    assert_eq!(v["truncated"], true);
    // The SQL check reads calls over view columns as over table columns.
    let (s, v) = call("SELECT repeat(node_id, 1000000000) FROM events").await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = call("SELECT lpad(node_id, 100000000, 'x') FROM node_metrics").await;
    assert_eq!(s, 400, "{v}");
    // Views are read-only like the tables; nothing can replace or drop them.
    for sql in [
        "CREATE OR REPLACE VIEW events AS SELECT 1 AS value_double",
        "DROP VIEW node_metrics",
        "INSERT INTO events VALUES (1)",
    ] {
        let (s, v) = call(sql).await;
        assert_eq!(s, 400, "{sql}: {v}");
    }
    assert_eq!(
        e.sql("SELECT COUNT(*) FROM events").await[0][0],
        json!(NODES * PER_NODE)
    );
    e.stop().await;
}
