//! The Prometheus exporter of a host built from the library alone has generic defaults:
//! it keeps every attribute as a label and charges every resource to one shared allowance
//! (no cluster by `ingero.cluster.id`). The Ingero defaults (per-point attributes left out,
//! resources charged to their cluster) come only with a distribution's registrations, here
//! the ones `ingero-fleet` and `ingero-echo` make (`ingero_wire::family`,
//! `ingero_wire::scope::ClusterScope`). Real service, an OTLP/HTTP push per cluster, the
//! page read as Prometheus would. The real `ingero-fleet` binary's page is checked the same
//! way in fleet/tests/e2e/components.rs (no `op_seq` label on the agents' timings).

use crate::common::{free_port, request};
use std::sync::Arc;
use std::time::Duration;

use collector_host::config::Plan;
use collector_host::registry::Components;
use collector_host::service::{RunOptions, run};
use component::otlp::{
    ExportMetricsServiceRequest, gauge_f64, kv_f64, kv_str, point_f64, resource_metrics,
};
use http_body_util::Full;
use ingero_wire::{attr, family, resource};
use prost::Message;

/// One node's push: resource `ingero.cluster.id` + `ingero.node.id`, one gauge point that
/// carries a straggler event's id and score as attributes.
fn push_body(cluster: &str, node: &str) -> bytes::Bytes {
    let batch = ExportMetricsServiceRequest {
        resource_metrics: vec![resource_metrics(
            vec![
                kv_str(resource::CLUSTER_ID, cluster),
                kv_str(resource::NODE_ID, node),
            ],
            "test",
            vec![gauge_f64(
                "probe.value",
                "",
                vec![point_f64(
                    vec![
                        kv_str(attr::EVENT_ID, format!("event-{node}")),
                        kv_f64(attr::SCORE, 0.25),
                    ],
                    1,
                    1.0,
                )],
            )],
        )],
    };
    bytes::Bytes::from(batch.encode_to_vec())
}

/// Run a service of `components` (OTLP/HTTP in, the Prometheus exporter out with one
/// series per cluster allowed and `drop_attributes` left unset), push one node of
/// `cluster-a` and one of `cluster-b` (a request each), and return the exporter page's
/// `probe_value` series lines.
async fn probe_series(components: Components, tag: &'static str) -> Vec<String> {
    let (http, prom, tel) = (free_port(), free_port(), free_port());
    let cfg = serde_json::json!({
        "receivers": {"otlp": {"protocols": {
            "http": {"endpoint": format!("127.0.0.1:{http}")}
        }}},
        "exporters": {"prometheus": {
            "endpoint": format!("127.0.0.1:{prom}"),
            "max_series_per_cluster": 1
        }},
        "service": {
            "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["prometheus"]}},
            "telemetry": {"metrics": {"readers": [
                {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": tel}}}}
            ]}}
        }
    });
    let plan = Plan::build_with(&cfg, &components)
        .unwrap_or_else(|e| panic!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let service = tokio::spawn(async move {
        let opts = RunOptions {
            drain: Duration::from_secs(1),
            name: tag,
        };
        run(plan, opts, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap();
    });
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", prom))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (cluster, node) in [("cluster-a", "a0"), ("cluster-b", "b0")] {
        let push = http::Request::post(format!("http://127.0.0.1:{http}/v1/metrics"))
            .header("content-type", "application/x-protobuf")
            .body(Full::new(push_body(cluster, node)))
            .unwrap();
        let (status, body) = request(push).await;
        assert_eq!(status, 200, "{tag}: {body}");
    }
    let get = http::Request::get(format!("http://127.0.0.1:{prom}/metrics"))
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let (status, page) = request(get).await;
    let _ = stop_tx.send(());
    service.await.unwrap();
    assert_eq!(status, 200, "{page}");
    let mut series: Vec<String> = page
        .lines()
        .filter(|l| l.starts_with("probe_value{"))
        .map(str::to_string)
        .collect();
    series.sort();
    series
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_alone_keeps_every_attribute_and_scopes_no_cluster() {
    let series = probe_series(Components::host(), "host").await;
    // One allowance for every resource: the second cluster's series is over it.
    assert_eq!(series.len(), 1, "{series:?}");
    let s = &series[0];
    assert!(s.contains("ingero_cluster_id=\"cluster-a\""), "{s}");
    // The straggler event's attributes are labels like any other.
    assert!(s.contains("ingero_event_id=\"event-a0\""), "{s}");
    assert!(s.contains("score=\"0.25\""), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ingero_registrations_the_attributes_are_dropped_and_clusters_scoped() {
    // What `ingero_fleet::components()` and `ingero_echo::components()` register for the
    // exporter (their component factories do not change the page).
    let components = Components::host()
        .with_request_scope(Arc::new(ingero_wire::scope::ClusterScope))
        .with_metric_prefix(family::HOST_PREFIX)
        .with_reserved_metric_prefixes(family::RESERVED_PREFIXES)
        .with_pipeline_gauges(family::PIPELINE_GAUGES)
        .with_prometheus_drop_attributes(family::DROP_ATTRIBUTES);
    let series = probe_series(components, "ingero").await;
    // Each cluster has its own allowance of one series.
    assert_eq!(series.len(), 2, "{series:?}");
    for (s, cluster) in series.iter().zip(["cluster-a", "cluster-b"]) {
        assert!(
            s.contains(&format!("ingero_cluster_id=\"{cluster}\"")),
            "{s}"
        );
        assert!(!s.contains("ingero_event_id"), "{s}");
        assert!(!s.contains("score"), "{s}");
    }
}
