//! Echo's integration tests: one binary (each binary linking DuckDB is a slow link).
//! Real listeners on loopback, real OTLP/HTTP pushes, real API and MCP requests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod chains;
mod common;
mod hostile;
mod misc;
mod nulls;
mod scale;
mod seeds;
mod tls;

use common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_are_stored_and_the_straggler_ranks_first() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 8, 5).await;

    let (s, v) = e
        .tool(
            "fleet.cluster.find_outlier_nodes",
            json!({"cluster_id": "prod", "window": "1h"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["nodes"][0]["node_id"], "prod-node-5", "{v}");
    assert_eq!(v["nodes"][0]["is_straggler"], true);
    assert_eq!(v["nodes"][1]["is_straggler"], false);

    // Every straggler event once, with its causal chain id intact.
    let rows = e
        .sql("SELECT count(*), count(DISTINCT causal_chain_id) FROM points WHERE metric = 'ingero.node.straggler_event'")
        .await;
    assert_eq!(rows[0], vec![json!(6), json!(6)]);
    // A retried batch (same ingero.event.id) adds no event row.
    let again = batch(
        "prod",
        "prod-node-5",
        vec![straggler_event("prod-ev-0", 0.45, 0.8, now_ns(), "chain-0")],
    );
    assert_eq!(e.push(&again).await.status(), 200);
    let rows = e.sql("SELECT count(*) FROM straggler_events").await;
    assert_eq!(rows[0][0], json!(6));
    // One batch carrying a new id twice and an old one: one new row, the batch is stored.
    let dup = batch(
        "prod",
        "prod-node-5",
        vec![
            straggler_event("prod-ev-new", 0.45, 0.8, now_ns(), "chain-new"),
            straggler_event("prod-ev-new", 0.45, 0.8, now_ns(), "chain-new"),
            straggler_event("prod-ev-0", 0.45, 0.8, now_ns(), "chain-0"),
        ],
    );
    assert_eq!(e.push(&dup).await.status(), 200);
    let rows = e
        .sql("SELECT count(*), count(*) FILTER (WHERE event_id = 'prod-ev-new') FROM straggler_events")
        .await;
    assert_eq!(rows[0], vec![json!(7), json!(1)]);

    let (s, v) = e
        .tool("fleet.cluster.nccl", json!({"cluster_id": "prod"}), None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["slowest_rank"]["rank"], 5, "{v}");

    let (s, v) = e
        .tool(
            "fleet.cluster.get_cost",
            json!({"cluster_id": "prod"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["nodes"][0]["node_id"], "prod-node-5");
    assert!(v["total_cost"].as_f64().unwrap() > 0.0, "{v}");

    let (s, v) = e.tool("fleet.cluster.summary", json!({}), None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["clusters"][0]["nodes"], 8);

    let (s, v) = e
        .tool(
            "fleet.cluster.event_history",
            json!({"cluster_id": "prod", "node_id": "prod-node-5"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["events"].as_array().unwrap().len() >= 6, "{v}");

    let (s, _) = e
        .tool("fleet.cluster.summary", json!({"cluster_id": "nope"}), None)
        .await;
    assert_eq!(s, 404);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_sql_escapes_are_refused_and_change_nothing() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 3, 1).await;
    let before = e.sql("SELECT count(*) FROM points").await;
    let escapes = [
        "COPY points TO '/tmp/echo-escape.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "ATTACH '/tmp/echo-escape.duckdb' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "PRAGMA enable_profiling",
        "COMMIT; INSERT INTO points VALUES (1, 'x', 'x', 'x', 'gauge', 1, NULL, '{}', '{}'); SELECT 42",
        "SELECT 1; DROP TABLE points",
        "DELETE FROM points",
        "CREATE TABLE evil AS SELECT 1",
        "CHECKPOINT",
        "EXPORT DATABASE '/tmp/echo-escape-db'",
    ];
    for sql in escapes {
        let (s, v) = e
            .tool("fleet.cluster.run_analysis", json!({"sql": sql}), None)
            .await;
        assert!(s == 400 || s == 422, "{sql}: {s} {v}");
    }
    assert_eq!(e.sql("SELECT count(*) FROM points").await, before);
    assert!(!std::path::Path::new("/tmp/echo-escape.csv").exists());
    let rows = e
        .sql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'evil'")
        .await;
    assert_eq!(rows[0][0], json!(0));
    // A plain SELECT works, within the row limit.
    let (s, v) = e
        .tool(
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT node_id FROM health_scores", "max_rows": 2}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert_eq!(v["truncated"], true);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_tokens_see_only_their_clusters() {
    let e = Echo::start(Opts {
        auth: true,
        ..Default::default()
    })
    .await;
    seed_cluster(&e, "prod", 3, 1).await;
    seed_cluster(&e, "dev", 3, 2).await;
    // No token.
    let (s, _) = e.tool("fleet.cluster.summary", json!({}), None).await;
    assert_eq!(s, 401);
    // The prod token lists prod only, and dev answers as unknown.
    let (s, v) = e
        .tool("fleet.cluster.summary", json!({}), Some(PROD_TOKEN))
        .await;
    assert_eq!(s, 200, "{v}");
    let names: Vec<&str> = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prod"]);
    for tool in [
        "fleet.cluster.find_outlier_nodes",
        "fleet.cluster.event_history",
        "fleet.cluster.nccl",
        "fleet.cluster.get_cost",
    ] {
        let (s, _) = e
            .tool(tool, json!({"cluster_id": "dev"}), Some(PROD_TOKEN))
            .await;
        assert_eq!(s, 404, "{tool}");
        let (s, _) = e
            .tool(tool, json!({"cluster_id": "prod"}), Some(PROD_TOKEN))
            .await;
        assert_eq!(s, 200, "{tool}");
    }
    // SQL needs an all-clusters token.
    let (s, _) = e
        .tool(
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT * FROM points"}),
            Some(PROD_TOKEN),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _) = e
        .tool(
            "fleet.cluster.summary",
            json!({"cluster_id": "dev"}),
            Some(ALL_TOKEN),
        )
        .await;
    assert_eq!(s, 200);
    // The audit log names token fingerprints, never tokens.
    let dir = e.dir.clone();
    e.stop().await;
    let mut audit = String::new();
    for _ in 0..100 {
        audit = std::fs::read_to_string(dir.join("audit.log")).unwrap_or_default();
        if audit.contains("tenant-prod") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(audit.contains("tenant-prod"), "{audit}");
    assert!(audit.contains("\"query\""), "{audit}");
    assert!(!audit.contains(PROD_TOKEN) && !audit.contains(ALL_TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_on_the_same_data_dir_refuses_to_start() {
    let dir = temp_dir("lock");
    let first = Echo::start(Opts {
        data_dir: Some(dir.clone()),
        ..Default::default()
    })
    .await;
    let err = Echo::try_start(Opts {
        data_dir: Some(dir.clone()),
        ..Default::default()
    })
    .await
    .err()
    .expect("the second instance must not start")
    .to_string();
    assert!(err.contains("in use by another ingero-echo"), "{err}");
    first.stop().await;
    // After a clean stop the directory is free again and the data is still there.
    let again = Echo::start(Opts {
        data_dir: Some(dir),
        ..Default::default()
    })
    .await;
    again.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_and_mcp_over_http_describe_and_serve_the_same_tools() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 4, 2).await;
    let r = request(
        e.api,
        http::Method::GET,
        "/openapi.json",
        "application/json",
        vec![],
        None,
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    let doc: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for t in ingero_echo::query::TOOLS {
        let p = &doc["paths"][format!("/api/v1/tools/{t}")]["post"];
        assert!(
            p["requestBody"]["content"]["application/json"]["schema"].is_object(),
            "{t}"
        );
        assert!(
            p["responses"]["200"]["content"]["application/json"]["schema"].is_object(),
            "{t}"
        );
    }

    let rpc = |body: Value| {
        let port = e.api;
        async move {
            let r = request(
                port,
                http::Method::POST,
                "/mcp",
                "application/json",
                body.to_string().into_bytes(),
                None,
                Some("localhost"),
            )
            .await;
            (
                r.status().as_u16(),
                serde_json::from_slice::<Value>(r.body()).unwrap_or(Value::Null),
            )
        }
    };
    let (s, v) = rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).await;
    assert_eq!(s, 200);
    assert_eq!(v["result"]["protocolVersion"], "2025-03-26");
    let (s, _) = rpc(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(s, 202);
    let (_, v) = rpc(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert_eq!(
        v["result"]["tools"].as_array().unwrap().len(),
        ingero_echo::query::TOOLS.len()
    );
    let (_, v) = rpc(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fleet.cluster.find_outlier_nodes", "arguments": {"cluster_id": "prod"}}})).await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["nodes"][0]["node_id"],
        "prod-node-2"
    );
    let (_, v) = rpc(json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": "investigate", "arguments": {"cluster_id": "prod"}}})).await;
    assert!(
        v["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("find_outlier_nodes")
    );
    // A foreign Host header is refused (DNS rebinding).
    let r = request(
        e.api,
        http::Method::POST,
        "/mcp",
        "application/json",
        b"{}".to_vec(),
        None,
        Some("evil.example"),
    )
    .await;
    assert_eq!(r.status(), 403);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_older_than_max_age_are_deleted_while_running() {
    let e = Echo::start(Opts {
        store: json!({"retention": {"max_age": "1h", "check_interval": "100ms"}}),
        ..Default::default()
    })
    .await;
    let old = now_ns() - 2 * 3600 * 1_000_000_000;
    let b = batch("prod", "n", vec![health(0.9, old), health(0.8, now_ns())]);
    assert_eq!(e.push(&b).await.status(), 200);
    let mut left = Value::Null;
    for _ in 0..200 {
        left = e.sql("SELECT count(*) FROM health_scores").await[0][0].clone();
        if left == json!(1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(left, json!(1), "the old row was not deleted");
    e.stop().await;
}
