//! Detection-edge spans (spec 1.8) received by an OTLP/HTTP traces endpoint on loopback:
//! the agent against the Fleet stand-in, one tick at a time on a fake clock, and the
//! exporter on its own with a known episode cause.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::fleet_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use component::{Clock, ManualClock, Timestamp};
use fleet_server::TestFleet;
use ingero_agent::config::{AgentConfig, ProviderSetting};
use ingero_agent::fleet::payload::{EpisodeCause, Identity};
use ingero_agent::fleet::transport::HttpTransport;
use ingero_agent::health::classifier::Rule;
use ingero_agent::setup;
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};
use ingero_agent::spans::{self, OpenSpan, SpanExporter};
use ingero_wire::attr;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const T0: Timestamp = Timestamp::from_secs(1_779_185_000);
const STEP: Duration = Duration::from_secs(10);
/// Bound on waiting for a request that is due (not a timing assertion).
const WAIT: Duration = Duration::from_secs(20);

/// One request the collector got: path, content type, body.
type Got = (String, String, Vec<u8>);

/// A minimal HTTP/1.1 server on loopback that answers every request 200 and hands it over.
async fn collector() -> (SocketAddr, mpsc::UnboundedReceiver<Got>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let path = head.split(' ').nth(1).unwrap_or("").to_string();
                    let header = |name: &str| {
                        head.lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                            })
                            .unwrap_or_default()
                    };
                    let len: usize = header("content-length").parse().unwrap_or(0);
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[head_end..head_end + len].to_vec();
                    buf.drain(..head_end + len);
                    let _ = tx.send((path, header("content-type"), body));
                    let resp = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if s.write_all(resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

async fn next_span(rx: &mut mpsc::UnboundedReceiver<Got>) -> (ExportTraceServiceRequest, Span) {
    let (path, ctype, body) = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a traces request")
        .unwrap();
    assert_eq!(path, "/v1/traces");
    assert_eq!(ctype, "application/x-protobuf");
    let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
    assert_eq!(req.resource_spans.len(), 1);
    let rs = &req.resource_spans[0];
    assert_eq!(rs.scope_spans.len(), 1);
    assert_eq!(rs.scope_spans[0].spans.len(), 1);
    let span = rs.scope_spans[0].spans[0].clone();
    (req, span)
}

fn get<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

fn assert_outcome(span: &Span) {
    assert_eq!(span.events.len(), 1, "{:?}", span.events);
    let ev = &span.events[0];
    assert_eq!(ev.name, "outcome");
    assert_eq!(ev.time_unix_nano, span.end_time_unix_nano);
    assert_eq!(get(&ev.attributes, "status"), Some("resolved"));
}

/// A slowdown episode: the span goes out once, on recovery, from the rising edge to the
/// recovery edge, with the rising edge's event id; the episode had no store, so no chains.
#[tokio::test]
async fn the_straggler_span_covers_the_episode_and_goes_out_when_it_ends() {
    let fleet = TestFleet::start().await;
    fleet.threshold("0.88", "true");
    let (addr, mut rx) = collector().await;
    let mut cfg = AgentConfig::default();
    cfg.fleet.endpoint = fleet.url();
    cfg.fleet.cluster_id = "e2e".into();
    cfg.fleet.node_id = "node-a".into();
    cfg.fleet.provider = ProviderSetting::None;
    cfg.fleet.persist_path = "".into();
    cfg.fleet.workload_type = "training".into();
    cfg.health.warmup_samples = 5;
    cfg.health.classifier = Rule::OneSample;
    cfg.otlp.enabled = true;
    cfg.otlp.endpoint = addr.to_string();
    cfg.otlp.insecure = true;
    let clock = Arc::new(ManualClock::new(T0));
    let source = SyntheticSource::new(
        SyntheticScript::parse("0s:1.0,100s:0.7,200s:1.0").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let mut agent = setup::build(&cfg, clock.clone(), Box::new(source), None, None)
        .unwrap()
        .agent;
    agent.set_span_exporter(setup::span_exporter(&cfg).unwrap().unwrap());

    let (mut rise, mut fall) = (None, None);
    for _ in 0..30 {
        clock.advance(STEP);
        let r = agent.tick().await;
        if let Some(e) = r.outcome.straggler
            && e.edge
        {
            let at = (clock.now(), r.event_id.clone().unwrap());
            if e.straggler {
                assert!(rise.is_none(), "one episode");
                rise = Some(at);
            } else {
                fall = Some(at);
                break;
            }
        }
    }
    let (start, event_id) = rise.expect("a straggler edge");
    let (end, recovery_id) = fall.expect("a recovery edge");

    // The first request is the ended span: nothing was sent while the episode was open.
    let (req, span) = next_span(&mut rx).await;
    let rs = &req.resource_spans[0];
    let res = &rs.resource.as_ref().unwrap().attributes;
    assert_eq!(get(res, "service.name"), Some("ingero"));
    assert_eq!(get(res, "service.version"), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(get(res, "k8s.node.name"), Some("node-a"));
    assert_eq!(get(res, "ingero.node.id"), Some("node-a"));
    assert_eq!(get(res, "ingero.cluster.id"), Some("e2e"));
    assert_eq!(rs.schema_url, spans::SCHEMA_URL);
    assert_eq!(span.name, "ingero.detection.straggler");
    assert_eq!(span.start_time_unix_nano, start.as_nanos());
    assert_eq!(span.end_time_unix_nano, end.as_nanos());
    assert!(start < end);
    assert_eq!(
        get(&span.attributes, attr::EVENT_ID),
        Some(event_id.as_str())
    );
    assert_ne!(event_id, recovery_id);
    assert_eq!(
        get(&span.attributes, "ingero.workload_type"),
        Some("training")
    );
    assert_eq!(get(&span.attributes, "ingero.cluster.id"), Some("e2e"));
    assert!(get(&span.attributes, "ingero.cgroup_path_hash").is_some());
    assert_eq!(get(&span.attributes, "ingero.gpu_model"), Some(""));
    assert_eq!(get(&span.attributes, attr::CAUSAL_CHAIN_ID), None);
    assert_eq!(get(&span.attributes, attr::CAUSAL_CHAINS), None);
    assert_outcome(&span);
    // Healthy ticks after the episode send nothing more.
    for _ in 0..3 {
        clock.advance(STEP);
        agent.tick().await;
    }
    assert!(rx.try_recv().is_err());
}

/// The chains known last in the episode travel on the span; a span of an episode whose
/// cause never became known carries neither attribute.
#[tokio::test]
async fn the_span_carries_the_newest_chains_only_when_known() {
    let (addr, mut rx) = collector().await;
    let t =
        Arc::new(HttpTransport::new(&Default::default(), Duration::from_secs(5), None).unwrap());
    let id = Identity {
        node_id: "n1".into(),
        cluster_id: "c1".into(),
        workload_type: "inference".into(),
        cgroup_path_hash: "8a5edab282632443".into(),
        ..Default::default()
    };
    let url = spans::traces_url(&format!("http://{addr}"), false).unwrap();
    let x = SpanExporter::start(t, url, spans::resource(&id));
    let cause = |json: &str| EpisodeCause {
        chain_id: "n1:1779185000000".into(),
        chains_json: json.into(),
    };

    let mut open = OpenSpan::straggler(&id, Some("NVIDIA H100"), "ev-1", T0);
    open.note_cause(None);
    open.note_cause(Some(cause(r#"[{"id":"old"}]"#)));
    open.note_cause(Some(cause(r#"[{"id":"new"}]"#)));
    // A later run that finds nothing keeps what the episode found.
    open.note_cause(None);
    x.export(open.end(T0.saturating_add(Duration::from_secs(90))));
    let (_, span) = next_span(&mut rx).await;
    assert_eq!(span.start_time_unix_nano, T0.as_nanos());
    assert_eq!(span.end_time_unix_nano, T0.as_nanos() + 90_000_000_000);
    assert_eq!(get(&span.attributes, attr::EVENT_ID), Some("ev-1"));
    assert_eq!(
        get(&span.attributes, "ingero.gpu_model"),
        Some("NVIDIA H100")
    );
    assert_eq!(
        get(&span.attributes, "ingero.cgroup_path_hash"),
        Some("8a5edab282632443")
    );
    assert_eq!(
        get(&span.attributes, attr::CAUSAL_CHAIN_ID),
        Some("n1:1779185000000")
    );
    assert_eq!(
        get(&span.attributes, attr::CAUSAL_CHAINS),
        Some(r#"[{"id":"new"}]"#)
    );
    assert_outcome(&span);

    let open = OpenSpan::straggler(&id, None, "ev-2", T0);
    x.export(open.end(T0.saturating_add(STEP)));
    let (_, span) = next_span(&mut rx).await;
    assert_eq!(get(&span.attributes, attr::EVENT_ID), Some("ev-2"));
    assert_eq!(get(&span.attributes, attr::CAUSAL_CHAIN_ID), None);
    assert_eq!(get(&span.attributes, attr::CAUSAL_CHAINS), None);
    assert_outcome(&span);
    // Counted once the collector's answer is read.
    let exported = || {
        x.stats()
            .exported
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    tokio::time::timeout(WAIT, async {
        while exported() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("both spans counted as exported");
    assert_eq!(
        x.stats().dropped.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
