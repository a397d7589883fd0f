//! A small Fleet stand-in for tests: loopback, port 0, hyper. It implements the agent-facing
//! header contract (spec 2.1 / 8.1): every `/v1/metrics` response carries
//! `X-Ingero-Threshold` and `X-Ingero-Quorum-Met` together or neither; the GET fallback at
//! `/api/v1/threshold`; 429/503 with `Retry-After` on demand; optional TLS with client
//! certificates. It records every request, decoded from protobuf or JSON.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use component::otlp::{AnyValueKind, ExportMetricsServiceRequest, MetricKind, NumberValue};

/// An attribute value as received.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Val {
    pub fn str(&self) -> &str {
        match self {
            Val::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }
    pub fn int(&self) -> i64 {
        match self {
            Val::Int(i) => *i,
            _ => panic!("not an int: {self:?}"),
        }
    }
    pub fn double(&self) -> f64 {
        match self {
            Val::Double(d) => *d,
            _ => panic!("not a double: {self:?}"),
        }
    }
}

/// One data point with its metric and resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub metric: String,
    pub unit: String,
    pub is_sum: bool,
    pub value: f64,
    pub is_int: bool,
    pub time_unix_nano: u64,
    pub attrs: BTreeMap<String, Val>,
    pub resource: BTreeMap<String, Val>,
    pub scope: (String, String),
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub authorization: Option<String>,
    pub points: Vec<Point>,
}

impl Received {
    pub fn metric(&self, name: &str) -> Option<&Point> {
        self.points.iter().find(|p| p.metric == name)
    }
}

/// How the server answers pushes and GETs.
#[derive(Debug, Clone)]
pub struct Behavior {
    /// `(threshold, quorum_met)` header values; `None` omits both.
    pub headers: Option<(String, String)>,
    pub push_status: u16,
    pub retry_after: Option<String>,
    pub get_status: u16,
    pub get_body: String,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            headers: None,
            push_status: 200,
            retry_after: None,
            get_status: 200,
            get_body: r#"{"threshold":0,"quorum_met":false}"#.into(),
        }
    }
}

#[derive(Default)]
struct State {
    behavior: Behavior,
    received: Vec<Received>,
}

pub struct TestFleet {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    tasks: Option<JoinSet<()>>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

fn to_val(v: &AnyValueKind) -> Val {
    match v {
        AnyValueKind::StringValue(s) => Val::Str(s.clone()),
        AnyValueKind::IntValue(i) => Val::Int(*i),
        AnyValueKind::DoubleValue(d) => Val::Double(*d),
        AnyValueKind::BoolValue(b) => Val::Bool(*b),
        other => Val::Str(format!("{other:?}")),
    }
}

fn kvs(attrs: &[component::otlp::KeyValue]) -> BTreeMap<String, Val> {
    attrs
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), to_val(kv.value.as_ref()?.value.as_ref()?))))
        .collect()
}

/// Flatten a protobuf request.
pub fn points_from_proto(req: &ExportMetricsServiceRequest) -> Vec<Point> {
    let mut out = Vec::new();
    for rm in &req.resource_metrics {
        let resource = rm
            .resource
            .as_ref()
            .map(|r| kvs(&r.attributes))
            .unwrap_or_default();
        for sm in &rm.scope_metrics {
            let scope = sm
                .scope
                .as_ref()
                .map(|s| (s.name.clone(), s.version.clone()))
                .unwrap_or_default();
            for m in &sm.metrics {
                let (dps, is_sum) = match &m.data {
                    Some(MetricKind::Gauge(g)) => (&g.data_points, false),
                    Some(MetricKind::Sum(s)) => (&s.data_points, true),
                    _ => continue,
                };
                for dp in dps {
                    let (value, is_int) = match dp.value {
                        Some(NumberValue::AsDouble(d)) => (d, false),
                        Some(NumberValue::AsInt(i)) => (i as f64, true),
                        None => continue,
                    };
                    out.push(Point {
                        metric: m.name.clone(),
                        unit: m.unit.clone(),
                        is_sum,
                        value,
                        is_int,
                        time_unix_nano: dp.time_unix_nano,
                        attrs: kvs(&dp.attributes),
                        resource: resource.clone(),
                        scope: scope.clone(),
                    });
                }
            }
        }
    }
    out
}

fn json_val(v: &serde_json::Value) -> Val {
    if let Some(s) = v.get("stringValue") {
        return Val::Str(s.as_str().unwrap().to_string());
    }
    if let Some(i) = v.get("intValue") {
        // The spec's JSON sends int64 as a JSON number.
        return Val::Int(i.as_i64().expect("intValue must be a JSON number"));
    }
    if let Some(d) = v.get("doubleValue") {
        return Val::Double(d.as_f64().unwrap());
    }
    if let Some(b) = v.get("boolValue") {
        return Val::Bool(b.as_bool().unwrap());
    }
    panic!("unknown attribute value {v}");
}

fn json_kvs(v: Option<&serde_json::Value>) -> BTreeMap<String, Val> {
    v.and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap().to_string(),
                        json_val(&kv["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Flatten a JSON request, checking the spec's shape on the way (timeUnixNano is a string,
/// asInt a number, aggregationTemporality the integer 2).
pub fn points_from_json(body: &[u8]) -> Vec<Point> {
    let v: serde_json::Value = serde_json::from_slice(body).expect("valid JSON");
    let mut out = Vec::new();
    for rm in v["resourceMetrics"].as_array().unwrap() {
        let resource = json_kvs(rm["resource"].get("attributes"));
        for sm in rm["scopeMetrics"].as_array().unwrap() {
            let scope = (
                sm["scope"]["name"].as_str().unwrap().to_string(),
                sm["scope"]["version"].as_str().unwrap().to_string(),
            );
            for m in sm["metrics"].as_array().unwrap() {
                let (data, is_sum) = match (m.get("gauge"), m.get("sum")) {
                    (Some(g), None) => (g, false),
                    (None, Some(s)) => {
                        assert_eq!(s["aggregationTemporality"], 2);
                        assert_eq!(s["isMonotonic"], true);
                        (s, true)
                    }
                    other => panic!("metric is neither gauge nor sum: {other:?}"),
                };
                for dp in data["dataPoints"].as_array().unwrap() {
                    assert!(dp.get("startTimeUnixNano").is_none());
                    let (value, is_int) = match (dp.get("asDouble"), dp.get("asInt")) {
                        (Some(d), None) => (d.as_f64().unwrap(), false),
                        (None, Some(i)) => (
                            i.as_i64().expect("asInt must be a JSON number") as f64,
                            true,
                        ),
                        other => panic!("bad point value {other:?}"),
                    };
                    if let Some(a) = dp.get("attributes") {
                        assert!(
                            !a.as_array().unwrap().is_empty(),
                            "empty attributes are omitted"
                        );
                    }
                    out.push(Point {
                        metric: m["name"].as_str().unwrap().to_string(),
                        unit: m["unit"].as_str().unwrap().to_string(),
                        is_sum,
                        value,
                        is_int,
                        time_unix_nano: dp["timeUnixNano"]
                            .as_str()
                            .expect("timeUnixNano is a string")
                            .parse()
                            .unwrap(),
                        attrs: json_kvs(dp.get("attributes")),
                        resource: resource.clone(),
                        scope: scope.clone(),
                    });
                }
            }
        }
    }
    out
}

async fn handle(
    state: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let header = |k: &str| {
        req.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header("content-type").unwrap_or_default();
    let authorization = header("authorization");
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let behavior = state.lock().behavior.clone();
    let mut resp = Response::builder();
    let (status, out_body) = if path == "/v1/metrics" && method == "POST" {
        let points = if content_type == "application/json" {
            points_from_json(&body)
        } else {
            assert_eq!(content_type, "application/x-protobuf");
            points_from_proto(&ExportMetricsServiceRequest::decode(body).expect("valid protobuf"))
        };
        state.lock().received.push(Received {
            method,
            path,
            query: query.clone(),
            content_type,
            authorization,
            points,
        });
        // Spec 8.1 item 4: headers on every response to a request with a cluster_id query.
        if query.contains("cluster_id=")
            && let Some((t, q)) = &behavior.headers
        {
            resp = resp
                .header("X-Ingero-Threshold", t)
                .header("X-Ingero-Quorum-Met", q);
        }
        if let Some(ra) = &behavior.retry_after {
            resp = resp.header("Retry-After", ra);
        }
        (behavior.push_status, "{}".to_string())
    } else if path == "/api/v1/threshold" && method == "GET" {
        state.lock().received.push(Received {
            method,
            path,
            query,
            content_type,
            authorization,
            points: Vec::new(),
        });
        (behavior.get_status, behavior.get_body.clone())
    } else {
        (404, "not found".to_string())
    };
    Ok(resp
        .status(status)
        .body(Full::new(Bytes::from(out_body)))
        .unwrap())
}

impl TestFleet {
    /// Plain HTTP on 127.0.0.1, port 0.
    pub async fn start() -> Self {
        Self::start_at("127.0.0.1:0".parse().unwrap(), None).await
    }

    /// HTTPS with the given server config.
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> Self {
        Self::start_at("127.0.0.1:0".parse().unwrap(), Some(tls)).await
    }

    async fn start_at(addr: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut s = TestFleet {
            addr,
            state: Arc::new(Mutex::new(State::default())),
            tasks: None,
            tls,
        };
        s.serve(listener);
        s
    }

    fn serve(&mut self, listener: TcpListener) {
        let mut tasks = JoinSet::new();
        let state = self.state.clone();
        let tls = self.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |r| handle(state.clone(), r));
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(acc) => {
                            if let Ok(s) = acc.accept(stream).await {
                                let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
        });
        self.tasks = Some(tasks);
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn set(&self, f: impl FnOnce(&mut Behavior)) {
        f(&mut self.state.lock().behavior);
    }

    pub fn threshold(&self, value: &str, quorum: &str) {
        self.set(|b| b.headers = Some((value.into(), quorum.into())));
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().received.clone()
    }

    pub fn clear(&self) {
        self.state.lock().received.clear();
    }

    /// Stop listening and close every open connection (an outage).
    pub async fn stop(&mut self) {
        if let Some(mut t) = self.tasks.take() {
            t.shutdown().await;
        }
    }

    /// Listen again on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}
