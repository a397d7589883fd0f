//! The exporter seam a distribution's own exporter plugs into: an `ExporterFactory` in the
//! binary's component set, an exporter whose delivery is pending until it is durable (the
//! receiver answers only then), and one that is behind (HTTP 503 + `Retry-After`, gRPC
//! `UNAVAILABLE` with `retry-after` and a `google.rpc.RetryInfo` detail). Real listeners,
//! real clients; no DuckDB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::free_port;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use collector_host::config::Plan;
use collector_host::registry::Components;
use collector_host::service::{RunOptions, run};
use component::exporter::{Delivery, Exporter, Unavailable};
use component::factory::ExporterFactory;
use component::factory::{Kind, Metadata};
use component::otlp::{
    ExportMetricsServiceRequest, ResourceMetrics, gauge_f64, kv_str, point_f64, resource_metrics,
};
use component::{ComponentId, ConfigErrors, ConfigValue, Stability};
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use prost::Message;

static META: Metadata = Metadata {
    kind: Kind::Exporter,
    type_name: "test_durable",
    aliases: &[],
    stability: [Some(Stability::Development), None, None],
    module: "collector-host/tests/it/durable_exporter.rs",
    singleton: false,
    host_tls: false,
    description: "test exporter that records what it is sent",
    reads: None,
};

/// What one exporter instance saw, by component id.
#[derive(Default)]
struct Probe {
    /// Batches handed to the exporter.
    received: AtomicU64,
    /// Set by the test just before it lets a pending delivery resolve.
    released: AtomicBool,
    started: AtomicBool,
    release: Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
    arrived: tokio::sync::Notify,
}

fn probes() -> &'static Mutex<HashMap<String, Arc<Probe>>> {
    static P: OnceLock<Mutex<HashMap<String, Arc<Probe>>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn probe(id: &str) -> Arc<Probe> {
    probes()
        .lock()
        .unwrap()
        .entry(id.to_string())
        .or_default()
        .clone()
}

struct TestExporter {
    probe: Arc<Probe>,
    /// `Some(secs)`: always behind, retry after `secs`.
    unavailable: Option<u64>,
}

impl Exporter for TestExporter {
    fn consume_metrics(&self, _data: &[ResourceMetrics]) {}

    fn deliver_metrics(&self, _data: &[ResourceMetrics]) -> (component::ProcessOutcome, Delivery) {
        self.probe.received.fetch_add(1, SeqCst);
        if let Some(secs) = self.unavailable {
            return (
                Default::default(),
                Delivery::Unavailable(Unavailable {
                    message: "test exporter is behind".into(),
                    retry_after: Duration::from_secs(secs),
                }),
            );
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.probe.release.lock().unwrap().push(tx);
        self.probe.arrived.notify_one();
        (
            Default::default(),
            Delivery::Pending(Box::pin(async move {
                rx.await.map_err(|_| Unavailable {
                    message: "dropped".into(),
                    retry_after: Duration::from_secs(1),
                })
            })),
        )
    }

    fn start(&self, _host: &dyn component::Host) -> Result<(), component::StartError> {
        self.probe.started.store(true, SeqCst);
        Ok(())
    }
}

struct Factory;

impl ExporterFactory for Factory {
    fn metadata(&self) -> &'static Metadata {
        &META
    }

    fn create(
        &self,
        id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Exporter>, ConfigErrors> {
        let unavailable = match cfg.get("unavailable_retry_after_secs") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                ConfigErrors::from(component::ConfigError::new(
                    "unavailable_retry_after_secs",
                    "must be a whole number",
                ))
            })?),
        };
        Ok(Arc::new(TestExporter {
            probe: probe(&id.to_string()),
            unavailable,
        }))
    }
}

static FACTORY: Factory = Factory;

/// `google.rpc.Status` and `google.protobuf.Any`, as the wire carries them.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<RpcAny>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

fn batch() -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![resource_metrics(
            vec![kv_str("ingero.node.id", "n1")],
            "test",
            vec![gauge_f64("x", "1", vec![point_f64(vec![], 1, 1.0)])],
        )],
    }
}

async fn post(port: u16, body: Vec<u8>) -> http::Response<hyper::body::Incoming> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let req = http::Request::post(format!("http://127.0.0.1:{port}/v1/metrics"))
        .header("content-type", "application/x-protobuf")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    client.request(req).await.unwrap()
}

/// Start a service with one `test_durable/<name>` exporter; returns the HTTP and gRPC ports
/// and the stop sender.
async fn start(
    name: &str,
    exporter_cfg: serde_json::Value,
) -> (u16, u16, tokio::sync::oneshot::Sender<()>) {
    let (http_port, grpc_port) = (free_port(), free_port());
    let cfg = serde_json::json!({
        "receivers": {"otlp": {"protocols": {
            "http": {"endpoint": format!("127.0.0.1:{http_port}")},
            "grpc": {"endpoint": format!("127.0.0.1:{grpc_port}")}
        }}},
        "exporters": {format!("test_durable/{name}"): exporter_cfg},
        "service": {
            "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": [format!("test_durable/{name}")]}},
            "telemetry": {"metrics": {"level": "none"}}
        }
    });
    let components = Components::host().with_exporter(&FACTORY);
    let plan = Plan::build_with(&cfg, &components)
        .unwrap_or_else(|e| panic!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let opts = RunOptions {
            drain: Duration::from_secs(1),
            name: "durable-test",
        };
        run(plan, opts, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap();
    });
    // Ready when the HTTP listener accepts.
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", http_port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (http_port, grpc_port, stop_tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_waits_for_a_pending_delivery() {
    let (http_port, grpc_port, stop) = start("pending", serde_json::json!({})).await;
    let p = probe("test_durable/pending");
    assert!(p.started.load(SeqCst), "the exporter was started");

    // HTTP: the response comes only after the test releases the delivery.
    let answered_after_release = Arc::new(AtomicBool::new(false));
    let seen = answered_after_release.clone();
    let p2 = p.clone();
    let req = tokio::spawn(async move {
        let r = post(http_port, batch().encode_to_vec()).await;
        seen.store(p2.released.load(SeqCst), SeqCst);
        r.status()
    });
    p.arrived.notified().await;
    // Give a host that does not wait every chance to answer early.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!req.is_finished(), "answered before the delivery resolved");
    p.released.store(true, SeqCst);
    for tx in p.release.lock().unwrap().drain(..) {
        let _ = tx.send(());
    }
    assert_eq!(req.await.unwrap(), 200);
    assert!(answered_after_release.load(SeqCst));

    // gRPC: the same.
    p.released.store(false, SeqCst);
    let mut client = MetricsServiceClient::connect(format!("http://127.0.0.1:{grpc_port}"))
        .await
        .unwrap();
    let p3 = p.clone();
    let call = tokio::spawn(async move {
        let r = client.export(batch()).await;
        (r.is_ok(), p3.released.load(SeqCst))
    });
    p.arrived.notified().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !call.is_finished(),
        "gRPC answered before the delivery resolved"
    );
    p.released.store(true, SeqCst);
    for tx in p.release.lock().unwrap().drain(..) {
        let _ = tx.send(());
    }
    assert_eq!(call.await.unwrap(), (true, true));
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exporter_that_is_behind_gets_503_and_unavailable_with_a_retry_delay() {
    let (http_port, grpc_port, stop) = start(
        "behind",
        serde_json::json!({"unavailable_retry_after_secs": 7}),
    )
    .await;
    let r = post(http_port, batch().encode_to_vec()).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "7");
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let st = RpcStatus::decode(body).unwrap();
    assert!(st.message.contains("behind"), "{st:?}");

    let mut client = MetricsServiceClient::connect(format!("http://127.0.0.1:{grpc_port}"))
        .await
        .unwrap();
    let e = client.export(batch()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.metadata().get("retry-after").unwrap(), "7");
    // google.rpc.Status { details: [Any { RetryInfo { retry_delay: 7s } }] }
    let details = RpcStatus::decode(e.details()).unwrap();
    let any = details.details.first().expect("a detail");
    assert_eq!(any.type_url, "type.googleapis.com/google.rpc.RetryInfo");
    // RetryInfo field 1 (Duration), Duration field 1 (seconds) = 7.
    assert_eq!(any.value, vec![0x0a, 0x02, 0x08, 0x07]);
    assert_eq!(probe("test_durable/behind").received.load(SeqCst), 2);
    let _ = stop.send(());
}

#[test]
fn the_factory_type_is_listed_and_its_config_errors_carry_the_key_path() {
    let components = Components::host().with_exporter(&FACTORY);
    assert!(components.exporter("test_durable").is_some());
    assert!(
        components
            .components_yaml("t", "t", "0")
            .contains("name: test_durable")
    );
    let cfg = serde_json::json!({
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": "127.0.0.1:0"}}}},
        "exporters": {"test_durable": {"unavailable_retry_after_secs": "soon"}},
        "service": {"pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["test_durable"]}}}
    });
    let e = Plan::build_with(&cfg, &components).unwrap_err();
    let all: Vec<String> = e.iter().map(|e| e.to_string()).collect();
    assert!(
        all.iter().any(|m| m.starts_with(
            "exporters.test_durable.unavailable_retry_after_secs: must be a whole number"
        )),
        "{all:?}"
    );
    // Without the factory the type is unknown.
    assert!(Plan::build_with(&cfg, &Components::host()).is_err());
}
