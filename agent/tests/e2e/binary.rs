//! The `ingero-agent` binary as users run it: synthetic mode against the Fleet stand-in,
//! the remediation socket, graceful shutdown with baseline persistence and restore, the
//! `sink` subcommand, and the messages for bad flags and missing privileges.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::fleet_server;
use crate::native;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use component::Timestamp;
use fleet_server::TestFleet;
use ingero_wire::{attr, metric};
use native::{TempDir, is_root, wait_until};
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_ingero-agent");

fn agent(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ingero-agent")
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: sending SIGTERM to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "agent did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// The bound address from the `listen=` start-up log line (stderr read on a thread, so the
/// test never blocks on it; the rest of stderr is drained there).
fn listen_address(child: &mut Child) -> Option<String> {
    crate::native::StderrLog::read(child).listen("", Duration::from_secs(10))
}

/// One plain HTTP/1 GET: (status, body).
async fn http_get(addr: String, path: &'static str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", "x")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = s.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn connect(path: &Path) -> tokio::net::UnixStream {
    let start = Instant::now();
    loop {
        if let Ok(s) = tokio::net::UnixStream::connect(path).await {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "socket {} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_agent_pushes_flags_itself_and_writes_the_socket() {
    let server = TestFleet::start().await;
    server.threshold("0.88", "true");
    let dir = TempDir::new("bin");
    let sock = dir.path().join("remediate.sock");
    let persist = dir.path().join("state/baseline.json");
    let url = server.url();
    let mut child = agent(&[
        "--synthetic",
        "--synthetic-script",
        "0s:1.0,3s:0.5",
        "--warmup-samples",
        "2",
        "--fleet-endpoint",
        &url,
        "--fleet-cluster-id",
        "bin",
        "--fleet-node-id",
        "node-b",
        "--fleet-push-interval",
        "1s",
        "--fleet-timeout",
        "500ms",
        "--fleet-provider",
        "none",
        "--fleet-world-size",
        "2",
        "--fleet-node-rank",
        "0",
        "--encoding",
        "json",
        "--remediate",
        "--remediate-socket",
        sock.to_str().unwrap(),
        "--fleet-persist-path",
        persist.to_str().unwrap(),
    ]);
    let stream = connect(&sock).await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert!(mode == 0o770 || mode == 0o700, "socket mode {mode:o}");
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("a straggler_state line within 20 s")
        .unwrap()
        .unwrap();
    let msg: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(msg["type"], "straggler_state");
    assert_eq!(msg["node_id"], "node-b");
    assert_eq!(msg["cluster_id"], "bin");
    assert_eq!(msg["threshold"], 0.88);
    assert_eq!(msg["detection_mode"], "fleet");
    assert_eq!(msg["rank"], 0, "rank 0 is sent when world_size > 0");
    assert_eq!(msg["world_size"], 2);
    assert!(msg["score"].as_f64().unwrap() < 0.88);
    assert!(msg["timestamp"].as_str().unwrap().ends_with('Z'));
    let id = msg["event_id"].as_str().unwrap().to_string();
    assert_eq!(line.find("\"type\""), Some(1), "type comes first");

    // The same event id on the OTLP straggler point.
    let found = wait_until(Duration::from_secs(5), || {
        server.received().iter().any(|r| {
            r.metric(metric::STRAGGLER_EVENT)
                .is_some_and(|p| p.value == 1.0 && p.attrs[attr::EVENT_ID].str() == id)
        })
    });
    assert!(found, "OTLP straggler event with id {id}");
    let rx = server.received();
    assert!(
        rx.iter()
            .all(|r| r.query == "cluster_id=bin" && r.content_type == "application/json")
    );

    let status = terminate(&mut child);
    let log = stderr_of(&mut child);
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("straggler_state transition"), "{log}");
    assert!(!sock.exists(), "socket removed on shutdown");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&persist).expect("baseline persisted")).unwrap();
    assert_eq!(saved["schema_version"], 1);
    assert!(saved["sample_count"].as_u64().unwrap() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_persisted_baseline_starts_the_agent_active() {
    use ingero_agent::health::SignalSet;
    use ingero_agent::health::baseline::BaselineSnapshot;
    let server = TestFleet::start().await;
    let dir = TempDir::new("restore");
    let persist = dir.path().join("baseline.json");
    let snap = BaselineSnapshot {
        sample_count: 100,
        fast_alpha: 0.1,
        floor_alpha: 0.001,
        fast_ema: SignalSet::new(1000.0, 0.9, 0.9, 0.9),
        hard_floor: SignalSet::new(1000.0, 0.9, 0.9, 0.9),
    };
    ingero_agent::health::persist::save(&persist, &snap, Timestamp::now()).unwrap();
    let url = server.url();
    let mut child = agent(&[
        "--synthetic",
        "--fleet-endpoint",
        &url,
        "--fleet-cluster-id",
        "bin",
        "--fleet-push-interval",
        "1s",
        "--fleet-timeout",
        "500ms",
        "--fleet-provider",
        "none",
        "--fleet-persist-path",
        persist.to_str().unwrap(),
    ]);
    let pushed = wait_until(Duration::from_secs(10), || !server.received().is_empty());
    terminate(&mut child);
    let log = stderr_of(&mut child);
    assert!(pushed, "{log}");
    let first = &server.received()[0];
    let score = first.metric(metric::HEALTH_SCORE).unwrap();
    assert_eq!(
        score.attrs[attr::NODE_STATE].str(),
        "active",
        "no warm-up after a restore"
    );
    assert!(log.contains("restored persisted baseline"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_turns_socket_events_into_prometheus_metrics() {
    use ingero_agent::events_out::uds::UdsServer;
    let dir = TempDir::new("sink");
    let sock = dir.path().join("r.sock");
    let uds = UdsServer::bind(&sock, None).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "sink",
            "--socket-path",
            sock.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--reconnect-delay",
            "100ms",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listen_address(&mut child).expect("sink logs its listen address");
    let start = Instant::now();
    while !uds.has_client().await {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sink never connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for line in [
        r#"{"type":"straggler_state","node_id":"n1","cluster_id":"c1","score":0.5}"#,
        r#"{"type":"straggler_state","node_id":"n2","cluster_id":"c1","score":0.6}"#,
        r#"{"type":"straggler_resolved","node_id":"n1","cluster_id":"c1"}"#,
        "not json",
    ] {
        assert!(uds.send_line(format!("{line}\n").as_bytes()).await);
    }
    let get = |path: &'static str| http_get(addr.clone(), path);
    let mut metrics = String::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        metrics = get("/metrics").await.1;
        if metrics.contains("ingero_sink_parse_errors_total 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for want in [
        "ingero_sink_events_total{type=\"straggler_state\"} 2",
        "ingero_sink_events_total{type=\"straggler_resolved\"} 1",
        "ingero_sink_parse_errors_total 1",
        "ingero_sink_connected 1",
        "ingero_sink_active_stragglers{cluster_id=\"c1\",node_id=\"n2\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    assert!(
        !metrics.contains("node_id=\"n1\""),
        "resolved stragglers are removed"
    );
    assert_eq!(get("/healthz").await, (200, "ok".to_string()));
    assert_eq!(get("/readyz").await.0, 200);
    uds.shutdown().await;
    let disconnected = {
        let start = Instant::now();
        loop {
            if get("/metrics").await.1.contains("ingero_sink_connected 0") {
                break true;
            }
            if start.elapsed() > Duration::from_secs(10) {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(disconnected);
    assert_eq!(
        get("/readyz").await.0,
        200,
        "an event arrived within the readiness window"
    );
    terminate(&mut child);
}

/// `--metrics-listen` on the real binary in synthetic mode: the seed's three names with the
/// node's live values, a straggler verdict that shows up on the endpoint, and an exposition
/// promtool accepts. A 1 s push interval without `--fleet-timeout` is accepted (the timeout
/// follows the interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_serves_its_own_metrics() {
    let server = TestFleet::start().await;
    server.threshold("0.88", "true");
    let dir = TempDir::new("selfmetrics");
    let persist = dir.path().join("baseline.json");
    let url = server.url();
    let mut child = agent(&[
        "--synthetic",
        "--synthetic-script",
        "0s:1.0,3s:0.5",
        "--warmup-samples",
        "2",
        "--fleet-endpoint",
        &url,
        "--fleet-cluster-id",
        "m",
        "--fleet-node-id",
        "node-m",
        "--fleet-push-interval",
        "1s",
        "--fleet-provider",
        "none",
        "--fleet-persist-path",
        persist.to_str().unwrap(),
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let addr = listen_address(&mut child).expect("the agent logs its metrics address");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let mut text = String::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        text = http_get(addr.clone(), "/metrics").await.1;
        if text.contains("\ningero_agent_straggler 1\n") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for want in [
        "ingero_agent_straggler 1\n",
        "ingero_agent_detection_mode{mode=\"fleet\"} 1\n",
        "ingero_agent_fleet_reachable 1\n",
        "ingero_agent_node_state{state=\"active\"} 1\n",
        "ingero_agent_threshold 0.88\n",
        "# TYPE process_resident_memory_bytes gauge\n",
        "# TYPE process_cpu_seconds_total counter\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    let rss = series(&text, "process_resident_memory_bytes").expect("the agent's RSS");
    assert!(
        (1e6..1e9).contains(&rss),
        "the agent's own resident memory: {rss} bytes"
    );
    let score: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("ingero_agent_health_score "))
        .expect("a score line")
        .parse()
        .unwrap();
    assert!(
        score < 0.88,
        "the slowed node scores below the threshold: {score}"
    );
    assert_eq!(
        http_get(addr.clone(), "/healthz").await,
        (200, "ok".to_string())
    );
    assert_eq!(http_get(addr.clone(), "/nope").await.0, 404);
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(mut p) => {
            use std::io::Write;
            p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            let out = p.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(_) => eprintln!("SKIP promtool check: not installed"),
    }
    assert!(terminate(&mut child).success());
}

/// The binary in synthetic mode: work stops (factor 0: no launches, no time in CUDA
/// calls), the node goes IDLE, work resumes and the very next transition is back to
/// ACTIVE (not a 30-sample recalibration).
#[test]
fn idle_then_work_resumes_straight_into_active() {
    let dir = TempDir::new("idle");
    let persist = dir.path().join("b.json");
    let mut child = agent(&[
        "--synthetic",
        "--synthetic-script",
        "0s:1.0,3s:0,8s:1.0",
        "--warmup-samples",
        "2",
        "--fleet-push-interval",
        "1s",
        "--signal-window",
        "1s",
        "--log-json",
        "--fleet-persist-path",
        persist.to_str().unwrap(),
    ]);
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else {
                continue;
            };
            if v["fields"]["message"] == "health state transition" {
                let f = &v["fields"];
                let _ = tx.send(format!(
                    "{}->{} ({})",
                    f["prev"].as_str().unwrap_or(""),
                    f["next"].as_str().unwrap_or(""),
                    f["reason"].as_str().unwrap_or("")
                ));
            }
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(t) => seen.push(t),
            Err(_) => break,
        }
    }
    terminate(&mut child);
    assert_eq!(
        seen,
        [
            "calibrating->active (warm-up complete)",
            "active->idle (no GPU work)",
            "idle->active (GPU work resumed)"
        ]
    );
}

#[test]
fn invalid_flags_report_every_problem_and_exit_2() {
    let out = Command::new(BIN)
        .args([
            "--synthetic",
            "--fleet-endpoint",
            "ftp://x",
            "--fleet-push-interval",
            "500ms",
            "--fleet-classifier-hysteresis",
            "0.7",
            "--metrics-listen",
            "localhost",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "fleet.endpoint",
        "fleet.cluster_id",
        "fleet.push_interval",
        "health.classifier_hysteresis",
        "metrics.listen",
    ] {
        assert!(err.contains(want), "{want} missing from:\n{err}");
    }
}

#[test]
fn without_privileges_the_ebpf_mode_says_what_is_missing() {
    if !is_root() {
        // Already unprivileged: run directly.
        let out = Command::new(BIN).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("CAP_BPF"));
        return;
    }
    // As root, drop to nobody with no capabilities.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            BIN,
        ])
        .output();
    let Ok(out) = out else {
        eprintln!("SKIP: setpriv not available");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("CAP_BPF and CAP_PERFMON") && err.contains("--synthetic"),
        "{err}"
    );
}

/// A value of `/metrics` by its full series name.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// NVML through the real binary in eBPF mode (root), on the fake `libnvidia-ml.so.1` of
/// `tests/c/fake_nvml.c` found through `LD_LIBRARY_PATH` (two GPUs): the memory signal is
/// the GPUs' free fraction, read live; the push carries the GPU model and count; NVML
/// utilization keeps a node whose process makes no CUDA call out of IDLE, and IDLE follows
/// once the GPU is idle too; NVML is initialised once and shut down once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvml_gives_memory_gpu_info_and_idle_evidence() {
    if !is_root() {
        eprintln!("skipping nvml_gives_memory_gpu_info_and_idle_evidence: needs root (eBPF)");
        return;
    }
    let server = TestFleet::start().await;
    let dir = TempDir::new("nvml");
    let fakes = native::build_fakes(dir.path());
    let nvml_dir = native::build_fake_nvml(dir.path());
    let (nvml_ctl, work_ctl) = (dir.path().join("nvml-ctl"), dir.path().join("work-ctl"));
    std::fs::create_dir_all(&nvml_ctl).unwrap();
    std::fs::create_dir_all(&work_ctl).unwrap();
    std::fs::write(nvml_ctl.join("free_pct"), "25").unwrap();
    let nvml_log = dir.path().join("nvml.log");
    let mut work = Command::new(&fakes.workload)
        .args(["train", "120", work_ctl.to_str().unwrap()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let persist = dir.path().join("baseline.json");
    let (pid, url) = (work.id().to_string(), server.url());
    let mut child = Command::new(BIN)
        .args([
            "--pid",
            &pid,
            "--probe-library-root",
            dir.path().to_str().unwrap(),
            "--no-nccl",
            "--warmup-samples",
            "2",
            "--fleet-push-interval",
            "1s",
            "--signal-window",
            "1s",
            "--fleet-endpoint",
            &url,
            "--fleet-cluster-id",
            "g",
            "--fleet-node-id",
            "gpu-node",
            "--fleet-provider",
            "none",
            "--fleet-persist-path",
            persist.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .env("LD_LIBRARY_PATH", &nvml_dir)
        .env("FAKE_NVML_CTL", &nvml_ctl)
        .env("FAKE_NVML_LOG", &nvml_log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listen_address(&mut child).expect("the agent logs its metrics address");
    let metrics = || http_get(addr.clone(), "/metrics");
    let state = |text: &str| {
        ["calibrating", "active", "idle", "stale"]
            .into_iter()
            .find(|s| {
                series(text, &format!("ingero_agent_node_state{{state=\"{s}\"}}")) == Some(1.0)
            })
    };
    let memory = "ingero_agent_signal{signal=\"memory\"}";

    // Active on the workload's launches; memory is the GPUs' free fraction.
    let mut text = String::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) && state(&text) != Some("active") {
        tokio::time::sleep(Duration::from_millis(200)).await;
        text = metrics().await.1;
    }
    assert_eq!(state(&text), Some("active"), "{text}");
    let m = series(&text, memory).expect("a memory signal");
    assert!(
        (m - 0.25).abs() < 1e-6,
        "memory signal {m}, NVML says 25 % free"
    );
    std::fs::write(nvml_ctl.join("free_pct"), "60").unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10)
        && series(&metrics().await.1, memory).is_none_or(|m| (m - 0.6).abs() > 1e-6)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = series(&metrics().await.1, memory).unwrap();
    assert!(
        (m - 0.6).abs() < 1e-6,
        "memory signal {m} after NVML moved to 60 % free"
    );

    // The push says which GPUs the node has.
    let info = server
        .received()
        .iter()
        .find_map(|r| r.metric(metric::NODE_INFO).cloned())
        .expect("an ingero.node.info point");
    assert_eq!(info.attrs[attr::GPU_MODEL].str(), "Fake GPU 80GB");
    assert_eq!(info.attrs[attr::GPU_COUNT].int(), 2);

    // No CUDA call at all, but NVML sees a kernel running: not IDLE (8 ticks, where 3
    // without evidence make IDLE).
    std::fs::write(nvml_ctl.join("util_pct"), "70").unwrap();
    std::fs::write(work_ctl.join("pause"), "").unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        let text = metrics().await.1;
        assert_eq!(
            state(&text),
            Some("active"),
            "IDLE while NVML saw a kernel:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The GPU goes idle too: IDLE.
    std::fs::write(nvml_ctl.join("util_pct"), "0").unwrap();
    let start = Instant::now();
    let mut idle = false;
    while start.elapsed() < Duration::from_secs(15) && !idle {
        tokio::time::sleep(Duration::from_millis(250)).await;
        idle = state(&metrics().await.1) == Some("idle");
    }
    assert!(idle, "IDLE once neither the probes nor NVML see work");

    assert!(terminate(&mut child).success());
    let _ = work.kill();
    let _ = work.wait();
    let calls = std::fs::read_to_string(&nvml_log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["init", "shutdown"],
        "NVML loaded once for the whole agent and shut down at exit"
    );
}
