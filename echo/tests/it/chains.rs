//! The causal chains an agent attaches to a straggler (`ingero.causal_chain_id` and
//! `ingero.causal_chains` on the straggler event and the detection span), pushed over
//! OTLP/HTTP as the agent sends them: stored once per episode, answered by
//! `event_history`, named by the `investigate` prompt, readable with SQL; malformed
//! chains dropped, counted and answered with a partial-success warning while the rest of
//! the request is stored. Also the seeds' schema (`events`, `node_metrics`).

use component::otlp::{
    ExportMetricsServiceResponse, KeyValue, Metric, gauge_f64, kv_f64, kv_i64, kv_str, point_f64,
};
use ingero_wire::{attr, metric, resource};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{Value, json};

use crate::common::*;

fn chain(id: &str, severity: &str, root: &str, rec: &str) -> Value {
    json!({"id": id, "severity": severity, "causes": ["cpu.runqueue_delay", "cuda.sync_tail"],
           "summary": format!("{root}: cudaStreamSynchronize p99 9x its median"),
           "root_cause": root, "explanation": "the training thread waited for a core",
           "recommendations": [rec, "check the node's other processes"],
           "cuda_op": "cudaStreamSynchronize", "cuda_p99_us": 48210, "tail_ratio": 9.25})
}

fn top_two() -> String {
    json!([
        chain(
            "cpu-contention",
            "HIGH",
            "CPU contention on the training core",
            "pin the training process to isolated cores"
        ),
        chain(
            "page-faults",
            "MEDIUM",
            "major page faults",
            "lock the pinned buffers"
        )
    ])
    .to_string()
}

/// The Rust agent's straggler event: the Go agent's attributes plus the episode id and
/// (when `chains` is given) the chains.
fn agent_event(event: &str, t: u64, episode: Option<&str>, chains: Option<KeyValue>) -> Metric {
    let mut attrs = vec![
        kv_str(attr::EVENT_ID, event),
        kv_f64(attr::THRESHOLD, 0.8),
        kv_f64(attr::SCORE, 0.41),
        kv_str(attr::DOMINANT_SIGNAL, "cpu"),
        kv_str(attr::DETECTION_MODE, "fleet"),
    ];
    if let Some(ep) = episode {
        attrs.push(kv_str("ingero.causal_chain_id", ep));
    }
    attrs.extend(chains);
    gauge_f64(metric::STRAGGLER_EVENT, "1", vec![point_f64(attrs, t, 1.0)])
}

fn chains_attr(s: &str) -> Option<KeyValue> {
    Some(kv_str("ingero.causal_chains", s))
}

async fn push_traces(e: &Echo, req: &ExportTraceServiceRequest) -> http::Response<Vec<u8>> {
    post(
        e.otlp_http,
        "/v1/traces",
        "application/x-protobuf",
        req.encode_to_vec(),
        None,
    )
    .await
}

/// The agent's detection span of one episode.
fn detection_span(
    node: &str,
    event: &str,
    t: u64,
    episode: &str,
    chains: &str,
) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv_str(resource::CLUSTER_ID, "prod"),
                    kv_str(resource::NODE_ID, node),
                    kv_str("service.name", "ingero"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "ingero".into(),
                    ..Default::default()
                }),
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![9; 8],
                    name: "ingero.detection.straggler".into(),
                    start_time_unix_nano: t,
                    end_time_unix_nano: t + 30_000_000_000,
                    attributes: vec![
                        kv_str(attr::EVENT_ID, event),
                        kv_str("ingero.causal_chain_id", episode),
                        kv_str("ingero.causal_chains", chains),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn mcp(e: &Echo, body: Value) -> Value {
    let r = request(
        e.api,
        http::Method::POST,
        "/mcp",
        "application/json",
        body.to_string().into_bytes(),
        None,
        Some("localhost"),
    )
    .await;
    assert_eq!(r.status(), 200);
    serde_json::from_slice(r.body()).unwrap()
}

async fn telemetry_counter(e: &Echo, name: &str) -> f64 {
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
    let text = String::from_utf8_lossy(r.body()).to_string();
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_episodes_chains_are_stored_once_and_answered_by_history_prompt_and_sql() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 8, 5).await;
    let t0 = now_ns() - 60_000_000_000;
    let episode = format!("prod-node-5:{}", t0 / 1_000_000);

    // The Go agent's event: no episode id, no chains.
    let go = batch(
        "prod",
        "prod-node-2",
        vec![agent_event("go-ev", t0, None, None)],
    );
    let r = e.push(&go).await;
    assert_eq!(r.status(), 200);
    let answer = ExportMetricsServiceResponse::decode(r.body().as_slice()).unwrap();
    assert_eq!(answer.partial_success, None, "{answer:?}");

    // Three ticks of one episode, the same chains on each (a fresh event id per tick).
    for k in 0..3u64 {
        let b = batch(
            "prod",
            "prod-node-5",
            vec![agent_event(
                &format!("rust-ev-{k}"),
                t0 + k * 10_000_000_000,
                Some(&episode),
                chains_attr(&top_two()),
            )],
        );
        let r = e.push(&b).await;
        assert_eq!(r.status(), 200);
        let answer = ExportMetricsServiceResponse::decode(r.body().as_slice()).unwrap();
        assert_eq!(answer.partial_success, None, "{answer:?}");
    }
    // A later tick with other (and more) chains for the same episode: the first ones stay
    // and nothing mixes in (first wins).
    let other = json!([
        chain("x", "LOW", "something else", "nothing"),
        chain("y", "LOW", "something else", "nothing"),
        chain("z", "LOW", "a third cause", "nothing")
    ])
    .to_string();
    let b = batch(
        "prod",
        "prod-node-5",
        vec![agent_event(
            "rust-ev-3",
            t0 + 30_000_000_000,
            Some(&episode),
            chains_attr(&other),
        )],
    );
    let r = e.push(&b).await;
    assert_eq!(r.status(), 200);
    let answer = ExportMetricsServiceResponse::decode(r.body().as_slice()).unwrap();
    assert_eq!(answer.partial_success, None, "{answer:?}");
    // The episode's detection span with the same chains adds nothing either.
    let r = push_traces(
        &e,
        &detection_span("prod-node-5", "rust-ev-0", t0, &episode, &top_two()),
    )
    .await;
    assert_eq!(r.status(), 200);

    let rows = e
        .sql(&format!(
            "SELECT position, chain_id, severity, root_cause, event_id, node_id, cluster_id, \
             json_extract_string(recommendations, '$[0]'), cuda_p99_us, tail_ratio \
             FROM causal_chains WHERE causal_chain_id = '{episode}' ORDER BY position"
        ))
        .await;
    assert_eq!(
        rows,
        vec![
            vec![
                json!(0),
                json!("cpu-contention"),
                json!("HIGH"),
                json!("CPU contention on the training core"),
                json!("rust-ev-0"),
                json!("prod-node-5"),
                json!("prod"),
                json!("pin the training process to isolated cores"),
                json!(48210),
                json!(9.25)
            ],
            vec![
                json!(1),
                json!("page-faults"),
                json!("MEDIUM"),
                json!("major page faults"),
                json!("rust-ev-0"),
                json!("prod-node-5"),
                json!("prod"),
                json!("lock the pinned buffers"),
                json!(48210),
                json!(9.25)
            ]
        ]
    );
    assert_eq!(
        e.sql("SELECT count(*) FROM causal_chains").await[0][0],
        json!(2)
    );
    // Every event, the Go agent's included, is stored with its episode id (or none).
    let rows = e
        .sql("SELECT event_id, causal_chain_id FROM straggler_events WHERE event_id IN ('go-ev', 'rust-ev-1') ORDER BY event_id")
        .await;
    assert_eq!(
        rows,
        vec![
            vec![json!("go-ev"), Value::Null],
            vec![json!("rust-ev-1"), json!(episode)]
        ]
    );

    // A span alone (no metric event) brings the chains of its own episode.
    let ep6 = format!("prod-node-6:{}", t0 / 1_000_000);
    let one = json!([chain("nic", "LOW", "slow NIC", "check the link speed")]).to_string();
    let r = push_traces(
        &e,
        &detection_span("prod-node-6", "span-ev", t0 + 5_000_000_000, &ep6, &one),
    )
    .await;
    assert_eq!(r.status(), 200);
    let answer = ExportTraceServiceResponse::decode(r.body().as_slice()).unwrap();
    assert_eq!(answer.partial_success, None);
    let rows = e
        .sql(&format!(
            "SELECT node_id, root_cause FROM causal_chains WHERE causal_chain_id = '{ep6}'"
        ))
        .await;
    assert_eq!(rows, vec![vec![json!("prod-node-6"), json!("slow NIC")]]);

    // event_history: each of the episode's events with its chains, the Go agent's with none.
    let (s, v) = e
        .tool(
            "fleet.cluster.event_history",
            json!({"cluster_id": "prod", "window": "1h"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let events = v["events"].as_array().unwrap();
    let ours: Vec<&Value> = events
        .iter()
        .filter(|ev| {
            ev["event_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("rust-ev-"))
        })
        .collect();
    assert_eq!(ours.len(), 4, "{v}");
    for ev in &ours {
        assert_eq!(ev["causal_chain_id"], json!(episode), "{ev}");
        let c = ev["causal_chains"].as_array().unwrap();
        assert_eq!(c.len(), 2, "{ev}");
        assert_eq!(c[0]["root_cause"], "CPU contention on the training core");
        assert_eq!(c[0]["severity"], "HIGH");
        assert_eq!(
            c[0]["recommendations"][0],
            "pin the training process to isolated cores"
        );
        assert_eq!(
            c[0]["causes"],
            json!(["cpu.runqueue_delay", "cuda.sync_tail"])
        );
        assert_eq!(c[1]["chain_id"], "page-faults");
    }
    let go_ev = events.iter().find(|ev| ev["event_id"] == "go-ev").unwrap();
    assert_eq!(go_ev["causal_chains"], json!([]), "{go_ev}");
    assert_eq!(go_ev["causal_chain_id"], Value::Null);
    // Seeded events (with `causal_chain_id` but no chains) and Fleet's flags have none.
    assert!(
        events
            .iter()
            .filter(|ev| ev["source"] == "fleet_straggler")
            .all(|ev| ev["causal_chains"] == json!([]))
    );

    // The investigate prompt names the latest episode's top chain and its recommendations.
    let v = mcp(
        &e,
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "investigate", "arguments": {"cluster_id": "prod", "window": "1h"}}}),
    )
    .await;
    let text = v["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // The latest episode with chains is node 6's (its span started after node 5's first
    // event).
    assert!(text.contains("slow NIC"), "{text}");
    assert!(text.contains("check the link speed"), "{text}");
    assert!(text.contains("2 straggler episode(s)"), "{text}");
    // Another cluster's prompt carries no chains of prod.
    seed_cluster(&e, "staging", 2, 0).await;
    let v = mcp(
        &e,
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "investigate", "arguments": {"cluster_id": "staging"}}}),
    )
    .await;
    let text = v["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(!text.contains("causal chain(s)"), "{text}");
    assert!(text.contains("find_outlier_nodes"), "{text}");
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_names_the_top_chain_of_the_latest_episode() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 4, 1).await;
    let t = now_ns() - 30_000_000_000;
    let older = json!([chain("old", "LOW", "an older cause", "old advice")]).to_string();
    let b = batch(
        "prod",
        "prod-node-1",
        vec![
            agent_event(
                "a",
                t - 20_000_000_000,
                Some("prod-node-1:1"),
                chains_attr(&older),
            ),
            agent_event("b", t, Some("prod-node-1:2"), chains_attr(&top_two())),
        ],
    );
    assert_eq!(e.push(&b).await.status(), 200);
    let v = mcp(
        &e,
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "investigate", "arguments": {"cluster_id": "prod"}}}),
    )
    .await;
    let text = v["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("\"CPU contention on the training core\""),
        "{text}"
    );
    assert!(
        text.contains("pin the training process to isolated cores"),
        "{text}"
    );
    assert!(text.contains("\"HIGH\""), "{text}");
    assert!(text.contains("node \"prod-node-1\""), "{text}");
    assert!(!text.contains("an older cause"), "{text}");
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_chains_are_dropped_counted_and_the_rest_of_the_request_is_stored() {
    let e = Echo::start(Opts {
        telemetry: true,
        ..Default::default()
    })
    .await;
    seed_cluster(&e, "prod", 4, 1).await;
    let t = now_ns() - 10_000_000_000;
    let mut ansi = chain("c", "HIGH", "x", "y");
    ansi["summary"] = json!("\u{1b}]8;;http://evil.example\u{7}click\u{1b}]8;;\u{7}");
    let mut bidi = chain("c", "HIGH", "x", "y");
    bidi["recommendations"] = json!(["run \u{202E}exe.hs"]);
    let mut wrong_type = chain("c", "HIGH", "x", "y");
    wrong_type["cuda_p99_us"] = json!("48210");
    let four = json!([
        chain("1", "HIGH", "a", "a"),
        chain("2", "HIGH", "a", "a"),
        chain("3", "HIGH", "a", "a"),
        chain("4", "HIGH", "a", "a")
    ]);
    // Over the chains' 4,000 bytes, within the receiver's limit on attribute values
    // (limits.max_attribute_value_bytes, 4,096: beyond it the receiver refuses the point).
    let mut long = chain("c", "HIGH", "x", "y");
    let base = json!([long]).to_string().len();
    long["summary"] = json!(format!(
        "{}{}",
        long["summary"].as_str().unwrap(),
        "s".repeat(4050 - base)
    ));
    let long = json!([long]);
    assert_eq!(long.to_string().len(), 4050);
    let bad: Vec<(&str, Option<KeyValue>)> = vec![
        ("not-json", chains_attr("[{\"id\": ")),
        ("an-object", chains_attr("{\"id\": \"c\"}")),
        ("four", chains_attr(&four.to_string())),
        ("too-long", chains_attr(&long.to_string())),
        ("ansi", chains_attr(&json!([ansi]).to_string())),
        ("bidi", chains_attr(&json!([bidi]).to_string())),
        ("wrong-type", chains_attr(&json!([wrong_type]).to_string())),
        ("not-a-string", Some(kv_i64("ingero.causal_chains", 3))),
        ("sql", chains_attr("'); DROP TABLE causal_chains; --")),
    ];
    let n_bad = bad.len();
    let mut metrics: Vec<Metric> = bad
        .into_iter()
        .enumerate()
        .map(|(i, (id, c))| agent_event(id, t, Some(&format!("prod-node-1:{i}")), c))
        .collect();
    // Good chains without an episode id cannot be keyed: dropped as well.
    metrics.push(agent_event("no-episode", t, None, chains_attr(&top_two())));
    // One good event in the same request.
    metrics.push(agent_event(
        "good",
        t,
        Some("prod-node-1:good"),
        chains_attr(&top_two()),
    ));
    metrics.push(health(0.42, t));
    let r = e.push(&batch("prod", "prod-node-1", metrics)).await;
    assert_eq!(r.status(), 200);
    let answer = ExportMetricsServiceResponse::decode(r.body().as_slice()).unwrap();
    let partial = answer.partial_success.expect("a partial-success warning");
    // A warning: every point is stored, only chains were dropped.
    assert_eq!(partial.rejected_data_points, 0, "{partial:?}");
    assert!(
        partial.error_message.contains(&format!(
            "causal chains of {} event(s) were dropped",
            n_bad + 1
        )),
        "{partial:?}"
    );

    let rows = e
        .sql(&format!(
            "SELECT count(*) FROM straggler_events WHERE node_id = 'prod-node-1' AND ts_ns = {t}"
        ))
        .await;
    assert_eq!(rows[0][0], json!(n_bad + 2));
    let rows = e
        .sql("SELECT DISTINCT causal_chain_id FROM causal_chains")
        .await;
    assert_eq!(rows, vec![vec![json!("prod-node-1:good")]]);
    let rows = e
        .sql("SELECT count(*) FROM health_scores WHERE score = 0.42")
        .await;
    assert_eq!(rows[0][0], json!(1));
    assert_eq!(
        telemetry_counter(&e, "ingero_echo_rejected_causal_chains_total").await,
        (n_bad + 1) as f64
    );
    // A hostile span attribute is counted too; the span is stored.
    let r = push_traces(
        &e,
        &detection_span("prod-node-1", "sp", t, "prod-node-1:span", "[1,2"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        e.sql("SELECT count(*) FROM spans WHERE name = 'ingero.detection.straggler'")
            .await[0][0],
        json!(1)
    );
    assert_eq!(
        telemetry_counter(&e, "ingero_echo_rejected_causal_chains_total").await,
        (n_bad + 2) as f64
    );
    assert_eq!(
        e.sql("SELECT count(*) FROM causal_chains").await[0][0],
        json!(2)
    );
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn causal_chains_age_out_with_the_other_tables() {
    let e = Echo::start(Opts {
        store: json!({"retention": {"max_age": "1h", "check_interval": "100ms"}}),
        ..Default::default()
    })
    .await;
    let old = now_ns() - 2 * 3600 * 1_000_000_000;
    let b = batch(
        "prod",
        "n",
        vec![
            agent_event("old", old, Some("n:old"), chains_attr(&top_two())),
            agent_event("new", now_ns(), Some("n:new"), chains_attr(&top_two())),
        ],
    );
    assert_eq!(e.push(&b).await.status(), 200);
    let mut left = Value::Null;
    for _ in 0..200 {
        left = json!(
            e.sql("SELECT DISTINCT causal_chain_id FROM causal_chains")
                .await
        );
        if left == json!([["n:new"]]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        left,
        json!([["n:new"]]),
        "the old episode's chains were not deleted"
    );
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_over_otlp_grpc_are_stored_and_bad_ones_answered_with_a_warning() {
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
    let e = Echo::start(Opts::default()).await;
    let mut client = MetricsServiceClient::connect(format!("http://127.0.0.1:{}", e.otlp_grpc))
        .await
        .unwrap();
    let t = now_ns() - 5_000_000_000;
    let req = batch(
        "prod",
        "node-3",
        vec![
            agent_event("g-1", t, Some("node-3:1"), chains_attr(&top_two())),
            // The same episode again in the same request, with other chains: the first
            // event's stay.
            agent_event(
                "g-1b",
                t,
                Some("node-3:1"),
                chains_attr(&json!([chain("late", "LOW", "late", "late")]).to_string()),
            ),
            agent_event("g-2", t, Some("node-3:2"), chains_attr("[\"not a chain\"]")),
            agent_event("g-go", t, None, None),
        ],
    );
    let answer = client.export(req).await.unwrap().into_inner();
    let partial = answer.partial_success.expect("a partial-success warning");
    assert_eq!(partial.rejected_data_points, 0, "{partial:?}");
    assert!(
        partial
            .error_message
            .contains("causal chains of 1 event(s)"),
        "{partial:?}"
    );
    assert_eq!(
        e.sql("SELECT count(*) FROM straggler_events").await[0][0],
        json!(4)
    );
    assert_eq!(
        e.sql("SELECT causal_chain_id, position, event_id FROM causal_chains ORDER BY position")
            .await,
        vec![
            vec![json!("node-3:1"), json!(0), json!("g-1")],
            vec![json!("node-3:1"), json!(1), json!("g-1")]
        ]
    );
    e.stop().await;
}
