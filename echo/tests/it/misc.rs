//! Browser origins, provider spellings in cost, windows in days, the summary of every
//! cluster, and the token-protected example config.

use component::otlp::{ExportMetricsServiceRequest, kv_str, resource_metrics};
use ingero_wire::resource;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_cannot_post_to_mcp_or_the_tools() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 2, 1).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let tool = "/api/v1/tools/fleet.cluster.summary";
    for origin in ["http://evil.example", "https://evil.example:8090", "null"] {
        let h = [("origin", origin), ("content-type", "text/plain")];
        let (s, v) = post_with(e.api, "/mcp", ping.clone(), &h).await;
        assert_eq!(s, 403, "{origin}: {v}");
        let (s, v) = post_with(e.api, tool, json!({}), &h).await;
        assert_eq!(s, 403, "{origin}: {v}");
    }
    // The loopback origins, and clients that send none, are served.
    for h in [
        vec![("origin", "http://localhost:3000")],
        vec![("origin", "http://127.0.0.1")],
        vec![],
    ] {
        let (s, v) = post_with(e.api, "/mcp", ping.clone(), &h).await;
        assert_eq!(s, 200, "{h:?}: {v}");
        let (s, v) = post_with(e.api, tool, json!({}), &h).await;
        assert_eq!(s, 200, "{h:?}: {v}");
    }
    e.stop().await;
}

/// `cluster` with one node of `provider` straggling for six samples.
fn provider_batch(cluster: &str, provider: &str) -> ExportMetricsServiceRequest {
    let t0 = now_ns() - 120_000_000_000;
    let mut ms = vec![node_info("NVIDIA H100 80GB HBM3", 8, t0)];
    for k in 0..6u64 {
        ms.push(fleet_flag(t0 + k * 10_000_000_000));
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![resource_metrics(
            vec![
                kv_str(resource::CLUSTER_ID, cluster),
                kv_str(resource::NODE_ID, "n1"),
                kv_str(resource::PROVIDER, provider),
            ],
            "ingero.health",
            ms,
        )],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_prices_a_provider_as_agents_spell_it() {
    let e = Echo::start(Opts::default()).await;
    for (c, p) in [
        ("canon", "ec2"),
        ("agent", "aws"),
        ("amazon", "Amazon Web Services"),
    ] {
        let r = e.push(&provider_batch(c, p)).await;
        assert_eq!(r.status(), 200);
    }
    let cost = |v: &Value| v["nodes"][0].clone();
    let (_, canon) = e
        .tool(
            "fleet.cluster.get_cost",
            json!({"cluster_id": "canon"}),
            None,
        )
        .await;
    assert_eq!(cost(&canon)["rate_known"], true, "{canon}");
    for c in ["agent", "amazon"] {
        let (s, v) = e
            .tool("fleet.cluster.get_cost", json!({"cluster_id": c}), None)
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(cost(&v)["rate_known"], true, "{c}: {v}");
        assert_eq!(
            cost(&v)["hourly_rate_per_gpu"],
            cost(&canon)["hourly_rate_per_gpu"],
            "{c}: {v}"
        );
        assert_eq!(v["total_cost"], canon["total_cost"], "{c}: {v}");
        assert!(v["total_cost"].as_f64().unwrap() > 0.0, "{v}");
    }
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_in_days_as_the_schema_advertises() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 2, 1).await;
    let (s, v) = e
        .tool(
            "fleet.cluster.event_history",
            json!({"cluster_id": "prod", "window": "7d"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["window_seconds"], 7 * 24 * 3600);
    let (s, v) = e
        .tool(
            "fleet.cluster.history",
            json!({"cluster_id": "prod", "window": "2d", "step": "1d"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = e
        .tool("fleet.cluster.summary", json!({"window": "400d"}), None)
        .await;
    assert_eq!(s, 400);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_of_every_cluster_is_each_clusters_summary() {
    let e = Echo::start(Opts::default()).await;
    for (c, slow) in [("a", 0), ("b", 2), ("c", 1)] {
        seed_cluster(&e, c, 3, slow).await;
        // Flagged now: listed among the current stragglers.
        let now = batch(c, &format!("{c}-node-{slow}"), vec![fleet_flag(now_ns())]);
        assert_eq!(e.push(&now).await.status(), 200);
    }
    let (s, all) = e.tool("fleet.cluster.summary", json!({}), None).await;
    assert_eq!(s, 200, "{all}");
    let listed = all["clusters"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{all}");
    for entry in listed {
        let c = entry["cluster_id"].as_str().unwrap();
        let (_, one) = e
            .tool("fleet.cluster.summary", json!({"cluster_id": c}), None)
            .await;
        assert_eq!(entry, &one["clusters"][0], "{c}");
        assert_eq!(
            entry["current_stragglers"].as_array().unwrap().len(),
            1,
            "{entry}"
        );
    }
    e.stop().await;
}

#[test]
fn the_token_example_authenticates_ingest_too() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/fleet-to-echo/echo.yaml"
    );
    let v: Value = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for proto in ["grpc", "http"] {
        assert_eq!(
            v["receivers"]["otlp"]["protocols"][proto]["auth"]["authenticator"], "ingero_auth",
            "receivers.otlp.protocols.{proto} of {path}"
        );
    }
}

/// Echo's `/metrics` declares exactly the families of `ingero_echo::telemetry::FAMILIES`
/// (the declaration `examples/exported-metrics.txt` is generated from), each with its
/// declared help, type and labels in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_metrics_are_the_declared_families() {
    use ingero_echo::telemetry::FAMILIES;
    let e = Echo::start(Opts {
        telemetry: true,
        ..Opts::default()
    })
    .await;
    seed_cluster(&e, "prod", 2, 1).await;
    // An API request, so the request counter has a sample.
    let _ = e.tool("fleet.cluster.summary", json!({}), None).await;
    let r = request(
        e.telemetry,
        http::Method::GET,
        "/metrics",
        "text/plain",
        vec![],
        None,
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    let page = String::from_utf8_lossy(r.body()).to_string();
    let declared: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ingero_echo_"))
        .collect();
    assert_eq!(declared.len(), FAMILIES.len(), "{declared:?}");
    for spec in FAMILIES {
        let mut head = String::new();
        spec.header(&mut head);
        assert!(
            page.contains(&head),
            "{} header missing:\n{page}",
            spec.name
        );
        let samples: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with(&format!("{}{{", spec.name)))
            .collect();
        assert!(!samples.is_empty(), "{} has no sample:\n{page}", spec.name);
        for s in samples {
            let labels = &s[spec.name.len() + 1..s.rfind('}').unwrap()];
            let names: Vec<&str> = labels
                .split("\",")
                .map(|kv| kv.split_once('=').unwrap().0)
                .collect();
            assert_eq!(names, spec.labels, "{s}");
        }
    }
    e.stop().await;
}
