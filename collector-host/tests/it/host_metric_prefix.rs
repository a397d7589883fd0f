//! A host built from the library alone names its own families under the library's prefix
//! (`collector_host_*`), and under the one its distribution gives when there is one; the
//! OpenTelemetry Collector's `otelcol_*` names stay. Real service, real listeners, both
//! scrape endpoints read as Prometheus would.

use crate::common::{free_port, request};
use std::time::Duration;

use collector_host::config::Plan;
use collector_host::registry::Components;
use collector_host::service::{RunOptions, run};
use component::otlp::{
    ExportMetricsServiceRequest, gauge_f64, kv_str, point_f64, resource_metrics,
};
use component::telemetry::MetricPrefix;
use http_body_util::Full;
use prost::Message;

const TOKEN: &str = "host-prefix-test-token-0123456789";

/// The family names a scrape page declares (`# TYPE` lines).
fn families(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Run a service of `components` with a push, a Prometheus exporter behind `ingero_auth`
/// and the self-telemetry endpoint; returns the family names of (exporter page,
/// self-telemetry page).
async fn scrape_pages(components: Components, tag: &str) -> (Vec<String>, Vec<String>) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("host-prefix-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!("- {{name: all, token: {TOKEN}, clusters: [\"*\"]}}\n"),
    )
    .unwrap();
    let (http, grpc, prom, tel) = (free_port(), free_port(), free_port(), free_port());
    let cfg = serde_json::json!({
        "receivers": {"otlp": {"protocols": {
            "http": {"endpoint": format!("127.0.0.1:{http}")},
            "grpc": {"endpoint": format!("127.0.0.1:{grpc}")}
        }}},
        "extensions": {"ingero_auth": {"tokens_file": tokens.to_str().unwrap()}},
        "exporters": {"prometheus": {
            "endpoint": format!("127.0.0.1:{prom}"),
            "auth": {"authenticator": "ingero_auth"}
        }},
        "service": {
            "extensions": ["ingero_auth"],
            "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["prometheus"]}},
            "telemetry": {"metrics": {"level": "normal", "readers": [
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
            name: "host-prefix-test",
        };
        run(plan, opts, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap();
    });
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", tel))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let batch = ExportMetricsServiceRequest {
        resource_metrics: vec![resource_metrics(
            vec![kv_str("service.name", "probe")],
            "test",
            vec![gauge_f64(
                "queue.depth",
                "1",
                vec![point_f64(vec![], 1, 3.0)],
            )],
        )],
    };
    let push = http::Request::post(format!("http://127.0.0.1:{http}/v1/metrics"))
        .header("content-type", "application/x-protobuf")
        .body(Full::new(bytes::Bytes::from(batch.encode_to_vec())))
        .unwrap();
    assert_eq!(request(push).await.0, 200);
    // The self-telemetry endpoint takes the exporter's `auth` (see the README).
    let get = |port: u16| {
        http::Request::get(format!("http://127.0.0.1:{port}/metrics"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    let (s1, exporter_page) = request(get(prom)).await;
    let (s2, telemetry_page) = request(get(tel)).await;
    assert_eq!((s1, s2), (200, 200), "{exporter_page}\n{telemetry_page}");
    let _ = stop_tx.send(());
    service.await.unwrap();
    assert!(
        exporter_page.contains("queue_depth_ratio"),
        "{exporter_page}"
    );
    (families(&exporter_page), families(&telemetry_page))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_alone_names_its_families_under_the_library_prefix() {
    let (exporter, telemetry) = scrape_pages(Components::host(), "generic").await;
    for name in exporter.iter().chain(&telemetry) {
        assert!(!name.contains("ingero"), "{name}");
    }
    for name in &telemetry {
        assert!(
            name.starts_with("otelcol_") || name.starts_with("collector_host_"),
            "{name}"
        );
    }
    for expected in [
        "collector_host_connections_open",
        "collector_host_push_duration_seconds",
        "collector_host_auth_requests_total",
        "collector_host_prometheus_series",
        "otelcol_receiver_accepted_metric_points_total",
    ] {
        assert!(
            telemetry.iter().any(|n| n == expected),
            "{expected}: {telemetry:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distribution_prefix_names_every_host_family() {
    let components = Components::host().with_metric_prefix(MetricPrefix::new("acme_"));
    let (generic_exporter, generic) = scrape_pages(Components::host(), "generic-2").await;
    let (exporter, telemetry) = scrape_pages(components, "acme").await;
    let renamed: Vec<String> = generic
        .iter()
        .map(|n| match n.strip_prefix("collector_host_") {
            Some(rest) => format!("acme_{rest}"),
            None => n.clone(),
        })
        .collect();
    assert_eq!(telemetry, renamed);
    assert_eq!(exporter, generic_exporter);
    assert!(
        telemetry.iter().any(|n| n == "acme_auth_tokens"),
        "{telemetry:?}"
    );
}
