//! The agent against a Fleet stand-in that implements the header contract: real HTTP on
//! loopback, a fake clock driving the synthetic workload and the mode ages, one tick at a
//! time (no sleeping for intervals).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::fleet_server;

use std::sync::Arc;
use std::time::Duration;

use component::{Clock, ManualClock, Timestamp};
use fleet_server::{Point, Received, TestFleet};
use ingero_agent::agent::{Agent, TickReport};
use ingero_agent::config::{AgentConfig, Encoding, ProviderSetting};
use ingero_agent::health::classifier::Rule;
use ingero_agent::health::mode::DetectionMode;
use ingero_agent::setup::{self, Built};
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};
use ingero_wire::{attr, metric, resource};

const T0: Timestamp = Timestamp::from_secs(1_779_185_000);
const STEP: Duration = Duration::from_secs(10);

fn config(server: &TestFleet, encoding: Encoding, warmup: u64) -> AgentConfig {
    let mut c = AgentConfig::default();
    c.fleet.endpoint = server.url();
    c.fleet.cluster_id = "e2e".into();
    c.fleet.node_id = "node-a".into();
    c.fleet.encoding = encoding;
    c.fleet.provider = ProviderSetting::None;
    c.fleet.world_size = 2;
    c.fleet.node_rank = 1;
    c.fleet.persist_path = "".into();
    c.health.warmup_samples = warmup;
    // These tests check the spec's numbers (4.1: one sample flips the verdict); the default
    // persistence-aware rule has its own test below and `tests/detection_sim.rs`.
    c.health.classifier = Rule::OneSample;
    c
}

fn build(cfg: &AgentConfig, clock: Arc<ManualClock>, script: &str) -> Built {
    let source = SyntheticSource::new(
        SyntheticScript::parse(script).unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let built = setup::build(cfg, clock, Box::new(source), None, None).unwrap();
    built
        .push
        .as_ref()
        .unwrap()
        .set_retry_delay(Duration::from_millis(5));
    built
}

async fn tick(agent: &mut Agent, clock: &ManualClock) -> TickReport {
    clock.advance(STEP);
    agent.tick().await
}

fn mode(r: &TickReport) -> DetectionMode {
    r.outcome.report.expect("a report").mode.mode
}

fn health_pushes(rx: &[Received]) -> Vec<&Received> {
    rx.iter()
        .filter(|r| r.metric(metric::HEALTH_SCORE).is_some())
        .collect()
}

fn straggler_points(rx: &[Received]) -> Vec<&Point> {
    rx.iter()
        .filter_map(|r| r.metric(metric::STRAGGLER_EVENT))
        .collect()
}

async fn full_cycle(encoding: Encoding) {
    let mut server = TestFleet::start().await;
    server.threshold("0.88", "true");
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(&server, encoding, 5);
    let mut agent = build(&cfg, clock.clone(), "0s:1.0,100s:0.8,160s:1.0").agent;

    // Ticks 1-5: calibrating, then active; the threshold of push N is used from tick N+1.
    let mut states = Vec::new();
    let mut modes = Vec::new();
    for _ in 0..5 {
        let r = tick(&mut agent, &clock).await;
        states.push(r.outcome.report.unwrap().state.as_str());
        modes.push(mode(&r));
        assert!(r.health_push.as_ref().unwrap().ok());
        assert!(r.outcome.straggler.is_none());
    }
    assert_eq!(
        states,
        [
            "calibrating",
            "calibrating",
            "calibrating",
            "calibrating",
            "active"
        ]
    );
    assert_eq!(
        modes[0],
        DetectionMode::None,
        "nothing cached before the first response"
    );
    assert!(modes[1..].iter().all(|m| *m == DetectionMode::Fleet));

    // Ticks 6-10 healthy; the slowdown starts 100 s after the first tick (tick 11).
    for _ in 6..=10 {
        let r = tick(&mut agent, &clock).await;
        assert!(r.outcome.straggler.is_none());
        assert!((r.outcome.report.unwrap().score.value - 0.94).abs() < 1e-9);
    }
    let mut ids = Vec::new();
    for k in 11..=16 {
        let r = tick(&mut agent, &clock).await;
        let e = r.outcome.straggler.expect("straggler every slow tick");
        assert!(e.straggler);
        assert_eq!(e.edge, k == 11);
        assert_eq!((e.threshold, e.mode), (0.88, DetectionMode::Fleet));
        // The synthetic slowdown scales throughput and compute alike: equal relative drops.
        assert!(
            ["throughput", "compute"].contains(&e.dominant_signal),
            "{}",
            e.dominant_signal
        );
        assert!(r.straggler_push.as_ref().unwrap().ok());
        ids.push(r.event_id.unwrap());
    }
    // Back to normal at 160 s (tick 17): one recovery event, then silence.
    let r = tick(&mut agent, &clock).await;
    let e = r.outcome.straggler.expect("recovery edge");
    assert!(!e.straggler && e.edge);
    ids.push(r.event_id.unwrap());
    let r = tick(&mut agent, &clock).await;
    assert!(r.outcome.straggler.is_none());

    let rx = server.received();
    let sp = straggler_points(&rx);
    assert_eq!(
        sp.iter().map(|p| p.value).collect::<Vec<_>>(),
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    );
    let sent_ids: Vec<&str> = sp.iter().map(|p| p.attrs[attr::EVENT_ID].str()).collect();
    assert_eq!(
        sent_ids,
        ids.iter().map(String::as_str).collect::<Vec<_>>(),
        "OTLP points carry the tick's event ids"
    );
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 7, "a fresh id per emission");
    let first = sp[0];
    assert!(
        (first.attrs[attr::SCORE].double() - 0.815).abs() < 1e-9,
        "0.4*0.8 + 0.25*0.72 + 0.2*0.9 + 0.15*0.9"
    );
    assert_eq!(first.attrs[attr::THRESHOLD].double(), 0.88);
    assert_eq!(first.attrs[attr::DETECTION_MODE].str(), "fleet");
    assert_eq!(first.resource[resource::NODE_ID].str(), "node-a");
    assert!(!first.resource.contains_key(resource::PROVIDER));

    // Every health push: the cluster in the query, the spec's metrics, rank attributes.
    let hp = health_pushes(&rx);
    assert_eq!(hp.len(), 18);
    for r in &hp {
        assert_eq!(r.query, "cluster_id=e2e");
        assert_eq!(
            r.content_type,
            if encoding == Encoding::Json {
                "application/json"
            } else {
                "application/x-protobuf"
            }
        );
        for m in [
            metric::THROUGHPUT_RATIO,
            metric::COMPUTE_EFFICIENCY,
            metric::MEMORY_HEADROOM,
            metric::CPU_AVAILABILITY,
            metric::DEGRADATION_WARNING,
            metric::DETECTION_MODE,
            metric::FLEET_REACHABLE,
            metric::NODE_WORLD_SIZE,
        ] {
            assert!(r.metric(m).is_some(), "{m} missing");
        }
        let s = r.metric(metric::HEALTH_SCORE).unwrap();
        assert_eq!(s.resource[resource::WORLD_SIZE].int(), 2);
        assert_eq!(s.resource[resource::NODE_RANK].int(), 1);
        assert_eq!(s.attrs[attr::CGROUP_PATH_HASH].str().len(), 16);
        assert_eq!(s.scope, ("ingero.health".to_string(), "0.10.0".to_string()));
    }
    assert_eq!(
        hp[0].metric(metric::HEALTH_SCORE).unwrap().attrs[attr::NODE_STATE].str(),
        "calibrating"
    );
    assert_eq!(
        hp[17].metric(metric::HEALTH_SCORE).unwrap().attrs[attr::NODE_STATE].str(),
        "active"
    );
    assert_eq!(
        hp[17].metric(metric::DETECTION_MODE).unwrap().attrs[attr::DETECTION_MODE].str(),
        "fleet"
    );

    // Outage. Tick 19 and 20 still use the 10 s / 20 s old threshold; at 30 s Fleet is
    // still believed reachable (2 failures) so nothing applies; from 3 failures on, the
    // cached value serves for up to 5 minutes, then the local baseline.
    server.stop().await;
    let mut got = Vec::new();
    for _ in 19..=22 {
        let r = tick(&mut agent, &clock).await;
        assert!(!r.health_push.as_ref().unwrap().ok());
        assert!(
            r.health_push.as_ref().unwrap().retried,
            "one retry after a network error"
        );
        got.push(mode(&r));
    }
    use DetectionMode::*;
    assert_eq!(got, [Fleet, Fleet, None, LocalCached]);
    let r = tick(&mut agent, &clock).await;
    assert_eq!(
        (mode(&r), r.outcome.report.unwrap().mode.threshold),
        (LocalCached, Some(0.88))
    );
    // Jump to just past 5 minutes after the last good response (tick 18).
    clock.set(T0.saturating_add(STEP * 18 + Duration::from_secs(301)));
    let r = agent.tick().await;
    assert_eq!(
        (mode(&r), r.outcome.report.unwrap().mode.threshold),
        (LocalBaseline, Some(0.85))
    );
    assert!(
        r.outcome.straggler.is_none(),
        "0.94 is above the local 0.85"
    );

    // Fleet comes back: the push succeeds (reported unreachable, as believed before it),
    // and the next tick is in fleet mode again.
    server.restart().await;
    server.clear();
    let r = tick(&mut agent, &clock).await;
    assert!(r.health_push.as_ref().unwrap().ok());
    assert_eq!(mode(&r), LocalBaseline);
    let rx = server.received();
    assert_eq!(rx[0].metric(metric::FLEET_REACHABLE).unwrap().value, 0.0);
    let r = tick(&mut agent, &clock).await;
    assert_eq!(mode(&r), Fleet);
    assert_eq!(
        server.received()[1]
            .metric(metric::FLEET_REACHABLE)
            .unwrap()
            .value,
        1.0
    );
}

#[tokio::test]
async fn fleet_mode_slowdown_straggler_recovery_outage_and_return_protobuf() {
    full_cycle(Encoding::Protobuf).await;
}

#[tokio::test]
async fn fleet_mode_slowdown_straggler_recovery_outage_and_return_json() {
    full_cycle(Encoding::Json).await;
}

#[tokio::test]
async fn nccl_points_are_exported_with_wall_clock_time_and_op_seq() {
    use ingero_agent::nccl::{NcclOutbox, NcclPoint, op};
    let server = TestFleet::start().await;
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(&server, Encoding::Json, 1);
    let (outbox, tx) = NcclOutbox::new(3);
    let source = SyntheticSource::new(
        SyntheticScript::parse("0s:1").unwrap(),
        1000.0,
        Duration::from_secs(60),
    );
    let built = setup::build(&cfg, clock.clone(), Box::new(source), Some(outbox), None).unwrap();
    let mut agent = built.agent;
    let wall = Timestamp::from_nanos(1_779_185_123_456_789_000);
    for seq in 1..=4 {
        tx.send(NcclPoint {
            time: wall,
            op: op::ALL_REDUCE,
            comm_id_hash: 0xabcdef,
            rank: 1,
            nranks: 2,
            datatype: 7,
            reduce_op: 0,
            peer_rank: 0,
            count: 1024,
            duration_ns: 2_500_000,
            op_seq: seq,
            barrier_wait_ns: None,
        });
    }
    tick(&mut agent, &clock).await;
    let rx = server.received();
    let nccl: Vec<&Point> = rx
        .iter()
        .flat_map(|r| r.points.iter())
        .filter(|p| p.metric == metric::NCCL_DURATION_MS)
        .collect();
    assert_eq!(nccl.len(), 3, "the fourth point overflowed the outbox");
    let p = nccl[0];
    assert_eq!(p.time_unix_nano, wall.as_nanos());
    assert_eq!(p.value, 2.5);
    assert_eq!(p.attrs[attr::NCCL_OP_SEQ].int(), 1);
    assert_eq!(p.attrs[attr::NCCL_COMM_ID_HASH].str(), "0000000000abcdef");
    assert_eq!(p.attrs[attr::NCCL_OP_TYPE].str(), "ncclAllReduce");
    assert_eq!(p.resource[resource::CLUSTER_ID].str(), "e2e");
    assert_eq!(p.scope.0, "ingero.nccl");
    let bytes: Vec<&Point> = rx
        .iter()
        .flat_map(|r| r.points.iter())
        .filter(|p| p.metric == metric::NCCL_BYTES)
        .collect();
    assert!(
        bytes
            .iter()
            .all(|b| b.is_int && b.value == 1024.0 && b.unit == "By")
    );
    let nccl_push = rx
        .iter()
        .find(|r| r.metric(metric::NCCL_DURATION_MS).is_some())
        .unwrap();
    assert_eq!(nccl_push.query, "cluster_id=e2e");
}

/// The default rule (Fleet's CUSUM, two deep samples of evidence) end to end against the
/// stand-in: a 30 % slowdown is flagged on its second tick and on every slow tick after;
/// it clears on the first healthy tick.
#[tokio::test]
async fn the_default_rule_flags_a_slowdown_on_its_second_tick_and_clears_on_the_first_healthy_tick()
{
    let server = TestFleet::start().await;
    server.threshold("0.88", "true");
    let clock = Arc::new(ManualClock::new(T0));
    let mut cfg = config(&server, Encoding::Protobuf, 5);
    cfg.health.classifier = Rule::Cusum;
    let mut agent = build(&cfg, clock.clone(), "0s:1.0,100s:0.7,200s:1.0").agent;
    for _ in 1..=10 {
        assert!(tick(&mut agent, &clock).await.outcome.straggler.is_none());
    }
    for k in 11..=20 {
        let r = tick(&mut agent, &clock).await;
        if k == 11 {
            // One deep sample is half the evidence.
            assert!(r.outcome.straggler.is_none(), "tick {k}");
        } else {
            let e = r
                .outcome
                .straggler
                .expect("flagged on every slow tick after the first");
            assert!(e.straggler && e.edge == (k == 12), "tick {k}: {e:?}");
        }
        assert!(r.outcome.report.unwrap().score.value < 0.76);
    }
    let mut recovered_after = None;
    for k in 1..=4 {
        let r = tick(&mut agent, &clock).await;
        if r.outcome.straggler.is_some_and(|e| !e.straggler && e.edge) {
            recovered_after = Some(k);
            break;
        }
    }
    // The first healthy tick is back above the threshold by more than the clear margin.
    assert_eq!(recovered_after, Some(1), "recovered after healthy ticks");
    assert!(tick(&mut agent, &clock).await.outcome.straggler.is_none());
}

#[tokio::test]
async fn quorum_lost_keeps_classifying_in_fleet_cached_then_none() {
    let server = TestFleet::start().await;
    server.threshold("0.95", "false");
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(&server, Encoding::Protobuf, 1);
    let mut agent = build(&cfg, clock.clone(), "0s:1.0").agent;
    tick(&mut agent, &clock).await;
    let r = tick(&mut agent, &clock).await;
    assert_eq!(mode(&r), DetectionMode::FleetCached);
    // 0.94 < 0.95: a straggler against a threshold without quorum.
    let e = r.outcome.straggler.unwrap();
    assert_eq!((e.mode, e.threshold), (DetectionMode::FleetCached, 0.95));
    // Fleet stops sending headers but stays reachable: after 5 minutes, nothing applies.
    server.set(|b| b.headers = None);
    clock.advance(Duration::from_secs(301));
    tick(&mut agent, &clock).await;
    let r = tick(&mut agent, &clock).await;
    assert_eq!(mode(&r), DetectionMode::None);
}

#[tokio::test]
async fn malformed_headers_keep_the_old_threshold_until_it_ages_out() {
    let server = TestFleet::start().await;
    server.threshold("0.80", "true");
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(&server, Encoding::Protobuf, 1);
    let built = build(&cfg, clock.clone(), "0s:1.0");
    let mut agent = built.agent;
    tick(&mut agent, &clock).await;
    for bad in [
        ("0", "true"),
        ("1.0", "true"),
        ("NaN", "true"),
        ("0.8", "yes"),
    ] {
        server.threshold(bad.0, bad.1);
        let r = tick(&mut agent, &clock).await;
        let _ = r;
    }
    let c = built.cache.lock().get().unwrap();
    assert_eq!(c.value, 0.80);
    assert_eq!(
        c.received_at,
        T0.saturating_add(STEP),
        "the old timestamp is kept"
    );
    assert_eq!(built.cache.lock().stats().rejected, 4);
    // The kept value is 40 s old: no longer fresh, Fleet reachable -> none.
    let r = tick(&mut agent, &clock).await;
    assert_eq!(mode(&r), DetectionMode::None);
}

#[tokio::test]
async fn retry_after_on_503_delays_the_next_tick() {
    let server = TestFleet::start().await;
    server.set(|b| {
        b.push_status = 503;
        b.retry_after = Some("7".into());
    });
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(&server, Encoding::Protobuf, 1);
    let mut agent = build(&cfg, clock.clone(), "0s:1.0").agent;
    let r = tick(&mut agent, &clock).await;
    assert_eq!(r.retry_after, Some(Duration::from_secs(7)));
    assert!(
        !r.health_push.as_ref().unwrap().retried,
        "HTTP errors are not retried"
    );
    for _ in 0..20 {
        let d = agent.next_delay(Duration::from_secs(7));
        assert!(
            d >= Duration::from_secs(16) && d <= Duration::from_secs(18),
            "{d:?}"
        );
    }
    // Retry-After on other statuses is ignored.
    server.set(|b| b.push_status = 500);
    let r = tick(&mut agent, &clock).await;
    assert_eq!(r.retry_after, None);
    // Three failed pushes in a row: unreachable.
    tick(&mut agent, &clock).await;
    assert!(!agent.push_client().unwrap().reachable());
}

#[tokio::test]
async fn get_fallback_supplies_the_threshold_when_headers_are_absent() {
    use ingero_agent::fleet::poller::PollOutcome;
    let server = TestFleet::start().await;
    server.set(|b| {
        b.headers = None;
        b.get_body = r#"{"threshold":0.9,"quorum_met":true}"#.into();
    });
    let clock = Arc::new(ManualClock::new(T0));
    let mut cfg = config(&server, Encoding::Json, 1);
    cfg.fleet.threshold_url = server.url();
    let built = build(&cfg, clock.clone(), "0s:1.0");
    let poller = built.poller.unwrap();
    let mut agent = built.agent;
    let r = tick(&mut agent, &clock).await;
    assert_eq!(mode(&r), DetectionMode::None);
    let (out, next) = poller.poll_once().await;
    assert_eq!(out, PollOutcome::Applied);
    assert!(next >= Duration::from_secs(8) && next <= Duration::from_secs(12));
    let get = server
        .received()
        .into_iter()
        .find(|r| r.method == "GET")
        .unwrap();
    assert_eq!(
        (get.path.as_str(), get.query.as_str()),
        ("/api/v1/threshold", "cluster_id=e2e")
    );
    let r = tick(&mut agent, &clock).await;
    assert_eq!(
        (mode(&r), r.outcome.report.unwrap().mode.threshold),
        (DetectionMode::Fleet, Some(0.9))
    );
    // A successful GET suspends polling until a push comes back without headers.
    assert_eq!(
        poller.poll_once().await.0,
        PollOutcome::Applied,
        "the last push had no headers"
    );
    server.threshold("0.85", "true");
    tick(&mut agent, &clock).await;
    assert_eq!(poller.poll_once().await.0, PollOutcome::Suspended);
    // 429 without Retry-After backs off two intervals.
    server.set(|b| {
        b.headers = None;
        b.get_status = 429;
    });
    tick(&mut agent, &clock).await;
    let (out, next) = poller.poll_once().await;
    assert_eq!(out, PollOutcome::Failed("HTTP 429".into()));
    assert_eq!(next, Duration::from_secs(20));
    let _ = clock.now();
}
