//! An Echo service in this process on loopback (port 0 where possible, free ports for the
//! receivers), pushes over real OTLP/HTTP, tool calls over the real API listener.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use collector_host::config::Plan;
use collector_host::service::{RunOptions, run};
use component::otlp::{
    ExportMetricsServiceRequest, KeyValue, Metric, gauge_f64, kv_f64, kv_i64, kv_str, point_f64,
    resource_metrics,
};
use http_body_util::{BodyExt, Full};
use ingero_wire::{attr, metric, resource};
use prost::Message;
use serde_json::{Value, json};

pub const ALL_TOKEN: &str = "all-clusters-token-0123456789abcdef0123456789";
pub const PROD_TOKEN: &str = "prod-only-token-0123456789abcdef0123456789ab";

/// `N` distinct free ports: the listeners are held until all are picked, so the kernel
/// cannot hand the same port out twice (picking them one by one could, and a config then
/// names one port for two listeners).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<StdListener> = (0..N)
        .map(|_| StdListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "echo-it-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A running Echo.
pub struct Echo {
    pub otlp_http: u16,
    pub otlp_grpc: u16,
    pub api: u16,
    /// The self-telemetry port (served only with [`Opts::telemetry`]).
    pub telemetry: u16,
    pub dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Options of a test Echo.
#[derive(Default, Clone)]
pub struct Opts {
    /// Serve with bearer tokens (an all-clusters and a `prod`-only token).
    pub auth: bool,
    /// Merged into `exporters.echo`.
    pub store: Value,
    pub data_dir: Option<PathBuf>,
    /// Merged into `extensions.echo_api` (e.g. a `tls` block).
    pub api: Value,
    /// Serve the self-telemetry (Prometheus) on [`Echo::telemetry`].
    pub telemetry: bool,
}

pub fn config(o: &Opts, dir: &Path, http: u16, grpc: u16, api: u16) -> Value {
    config_with_telemetry(o, dir, [http, grpc, api, 0])
}

/// [`config`], with the self-telemetry on `ports[3]` when `o.telemetry`.
pub fn config_with_telemetry(o: &Opts, dir: &Path, ports: [u16; 4]) -> Value {
    let [http, grpc, api, telemetry] = ports;
    let mut store = json!({"data_dir": dir.display().to_string(), "memory_limit": "512MB"});
    if let (Some(s), Some(extra)) = (store.as_object_mut(), o.store.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let mut api_cfg = json!({"endpoint": format!("127.0.0.1:{api}")});
    if let (Some(a), Some(extra)) = (api_cfg.as_object_mut(), o.api.as_object()) {
        for (k, v) in extra {
            a.insert(k.clone(), v.clone());
        }
    }
    let mut extensions = json!({});
    let mut enabled = vec!["echo_api".to_string()];
    if o.auth {
        let tokens = dir.join("tokens.yaml");
        std::fs::write(
            &tokens,
            format!(
                "- name: ops\n  token: {ALL_TOKEN}\n  clusters: [\"*\"]\n\
                 - name: tenant-prod\n  token: {PROD_TOKEN}\n  clusters: [prod]\n"
            ),
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600));
        }
        extensions["ingero_auth"] = json!({
            "tokens_file": tokens.display().to_string(),
            "audit_log": dir.join("audit.log").display().to_string(),
        });
        api_cfg["auth"] = json!({"authenticator": "ingero_auth"});
        enabled.insert(0, "ingero_auth".into());
    }
    extensions["echo_api"] = api_cfg;
    let metrics = if o.telemetry {
        json!({"level": "normal", "readers": [{"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": telemetry}}}}]})
    } else {
        json!({"level": "none"})
    };
    json!({
        "receivers": {"otlp": {"protocols": {
            "http": {"endpoint": format!("127.0.0.1:{http}")},
            "grpc": {"endpoint": format!("127.0.0.1:{grpc}")}
        }}},
        "exporters": {"echo": store},
        "extensions": extensions,
        "service": {
            "extensions": enabled,
            "pipelines": {
                "metrics": {"receivers": ["otlp"], "exporters": ["echo"]},
                "traces": {"receivers": ["otlp"], "exporters": ["echo"]},
                "logs": {"receivers": ["otlp"], "exporters": ["echo"]}
            },
            "telemetry": {"metrics": metrics, "logs": {"level": "warn"}}
        }
    })
}

async fn wait_port(port: u16) -> bool {
    for _ in 0..1000 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

impl Echo {
    /// Plan and run; `Err` carries a start failure (e.g. the data directory's lock).
    pub async fn try_start(o: Opts) -> anyhow::Result<Echo> {
        let dir = o.data_dir.clone().unwrap_or_else(|| temp_dir("data"));
        let [http, grpc, api, telemetry] = free_ports::<4>();
        let cfg = config_with_telemetry(&o, &dir, [http, grpc, api, telemetry]);
        let plan = Plan::build_with(&cfg, &ingero_echo::components()).map_err(|e| {
            anyhow::anyhow!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>())
        })?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(run(
            plan,
            RunOptions {
                drain: Duration::from_secs(2),
                name: "ingero-echo-test",
            },
            async {
                let _ = rx.await;
            },
        ));
        let mut echo = Echo {
            otlp_http: http,
            otlp_grpc: grpc,
            api,
            telemetry,
            dir,
            stop: Some(tx),
            handle: Some(handle),
        };
        // Ready when the receiver (bound after the store opened) accepts, or failed.
        for _ in 0..1000 {
            if echo.handle.as_ref().is_some_and(|h| h.is_finished()) {
                let h = echo.handle.take().unwrap();
                return match h.await? {
                    Ok(()) => Err(anyhow::anyhow!("the service stopped at start")),
                    Err(e) => Err(e),
                };
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", http))
                .await
                .is_ok()
            {
                assert!(wait_port(api).await, "API listener");
                assert!(wait_port(grpc).await, "OTLP/gRPC listener");
                return Ok(echo);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::bail!("the service did not start")
    }

    pub async fn start(o: Opts) -> Echo {
        Echo::try_start(o).await.unwrap()
    }

    /// Stop gracefully: the writer commits what is queued, the lock is released.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }

    pub async fn push(&self, req: &ExportMetricsServiceRequest) -> http::Response<Vec<u8>> {
        post(
            self.otlp_http,
            "/v1/metrics",
            "application/x-protobuf",
            req.encode_to_vec(),
            None,
        )
        .await
    }

    /// Call a tool over the API; (status, JSON body).
    pub async fn tool(&self, name: &str, args: Value, token: Option<&str>) -> (u16, Value) {
        let r = post(
            self.api,
            &format!("/api/v1/tools/{name}"),
            "application/json",
            args.to_string().into_bytes(),
            token,
        )
        .await;
        let status = r.status().as_u16();
        let v = serde_json::from_slice(r.body()).unwrap_or(Value::Null);
        (status, v)
    }

    /// `run_analysis` with the all-clusters token (or none without auth); panics on error.
    pub async fn sql(&self, sql: &str) -> Vec<Vec<Value>> {
        let (s, v) = self
            .tool(
                "fleet.cluster.run_analysis",
                json!({"sql": sql}),
                Some(ALL_TOKEN),
            )
            .await;
        assert_eq!(s, 200, "{sql}: {v}");
        serde_json::from_value(v["rows"].clone()).unwrap()
    }
}

pub async fn post(
    port: u16,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
    token: Option<&str>,
) -> http::Response<Vec<u8>> {
    request(
        port,
        http::Method::POST,
        path,
        content_type,
        body,
        token,
        None,
    )
    .await
}

pub async fn request(
    port: u16,
    method: http::Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
    token: Option<&str>,
    host: Option<&str>,
) -> http::Response<Vec<u8>> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", content_type);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    if let Some(h) = host {
        b = b.header("host", h);
    }
    let r = client
        .request(b.body(Full::new(bytes::Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let (parts, body) = r.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes().to_vec();
    http::Response::from_parts(parts, bytes)
}

fn res(cluster: &str, node: &str) -> Vec<KeyValue> {
    vec![
        kv_str(resource::CLUSTER_ID, cluster),
        kv_str(resource::NODE_ID, node),
        kv_str(resource::PROVIDER, "ec2"),
    ]
}

pub fn batch(cluster: &str, node: &str, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![resource_metrics(
            res(cluster, node),
            "ingero.health",
            metrics,
        )],
    }
}

pub fn health(score: f64, t: u64) -> Metric {
    gauge_f64(
        metric::HEALTH_SCORE,
        "1",
        vec![point_f64(
            vec![kv_str(attr::NODE_STATE, "active")],
            t,
            score,
        )],
    )
}

pub fn straggler_event(id: &str, score: f64, threshold: f64, t: u64, chain: &str) -> Metric {
    gauge_f64(
        metric::STRAGGLER_EVENT,
        "1",
        vec![point_f64(
            vec![
                kv_str(attr::EVENT_ID, id),
                kv_f64(attr::THRESHOLD, threshold),
                kv_f64(attr::SCORE, score),
                kv_str(attr::DOMINANT_SIGNAL, "memory"),
                kv_str(attr::DETECTION_MODE, "fleet"),
                kv_str("causal_chain_id", chain),
            ],
            t,
            1.0,
        )],
    )
}

pub fn fleet_flag(t: u64) -> Metric {
    gauge_f64(
        metric::FLEET_NODE_STRAGGLER,
        "1",
        vec![point_f64(vec![], t, 1.0)],
    )
}

pub fn node_info(model: &str, gpus: i64, t: u64) -> Metric {
    gauge_f64(
        metric::NODE_INFO,
        "1",
        vec![point_f64(
            vec![
                kv_str(attr::GPU_MODEL, model),
                kv_i64(attr::GPU_COUNT, gpus),
            ],
            t,
            1.0,
        )],
    )
}

pub fn nccl(name: &str, rank: i64, op: &str, t: u64, v: f64) -> Metric {
    gauge_f64(
        name,
        "ms",
        vec![point_f64(
            vec![
                kv_str(attr::NCCL_OP_TYPE, op),
                kv_i64(attr::NCCL_RANK, rank),
                kv_i64(attr::NCCL_NRANKS, 8),
                kv_str(attr::NCCL_COMM_ID_HASH, "00000000deadbeef"),
            ],
            t,
            v,
        )],
    )
}

/// A cluster of `nodes` nodes over the last minutes: `slow` scores low, is flagged by Fleet
/// and sends straggler events; every rank reports NCCL durations, `slow`'s rank lags.
pub async fn seed_cluster(e: &Echo, cluster: &str, nodes: usize, slow: usize) {
    let t0 = now_ns() - 120_000_000_000;
    for i in 0..nodes {
        let node = format!("{cluster}-node-{i}");
        let mut ms = vec![node_info("NVIDIA H100 80GB HBM3", 8, t0)];
        for k in 0..6u64 {
            let t = t0 + k * 10_000_000_000;
            let score = if i == slow {
                0.45
            } else {
                0.9 + (i as f64) * 0.001
            };
            ms.push(health(score, t));
            ms.push(nccl(
                metric::NCCL_DURATION_MS,
                i as i64,
                "ncclAllReduce",
                t,
                if i == slow { 300.0 } else { 12.0 },
            ));
            ms.push(nccl(
                metric::NCCL_BYTES,
                i as i64,
                "ncclAllReduce",
                t,
                1_048_576.0,
            ));
            ms.push(nccl(
                metric::NCCL_PEER_LAG_MS,
                i as i64,
                "ncclAllReduce",
                t,
                if i == slow { 290.0 } else { 1.0 },
            ));
            if i == slow {
                ms.push(fleet_flag(t));
                ms.push(straggler_event(
                    &format!("{cluster}-ev-{k}"),
                    0.45,
                    0.8,
                    t,
                    &format!("chain-{k}"),
                ));
            }
        }
        let r = e.push(&batch(cluster, &node, ms)).await;
        assert_eq!(r.status(), 200, "{}", String::from_utf8_lossy(r.body()));
    }
}

/// A POST with extra headers; (status, JSON body).
pub async fn post_with(
    port: u16,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut b = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let r = client
        .request(
            b.body(Full::new(bytes::Bytes::from(body.to_string())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
