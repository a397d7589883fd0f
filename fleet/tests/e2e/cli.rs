//! The command line as an operator uses it: boot with the seed config and the embedded
//! default, `validate`, `components`, `print-config`, env expansion, merged configs,
//! and graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run ingero-fleet");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn seed_config() -> String {
    format!(
        "{}/../examples/fleet-config.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The seed config and the embedded default bind fixed ports (4317, 4318, 8080, ...), so
/// they boot one after the other inside one test.
#[test]
fn seed_config_and_embedded_default_boot_and_serve() {
    // The seed's fleet-config.yaml, unchanged. It binds 0.0.0.0 without TLS, so it needs
    // the plaintext opt-out.
    let mut f = Fleet::spawn(
        &[
            "--config",
            &seed_config(),
            "--set",
            "service.allow_plaintext_listeners=true",
        ],
        &[],
    );
    for l in [
        "otlp/http",
        "otlp/grpc",
        "ingero_threshold/agent",
        "ingero_threshold/admin",
        "prometheus",
    ] {
        assert!(
            f.addrs.contains_key(l),
            "seed config must serve {l}: {:?}",
            f.addrs
        );
    }
    assert_eq!(f.addr("prometheus").port(), 9090);
    assert_eq!(
        f.addr("ingero_threshold/admin").ip().to_string(),
        "127.0.0.1"
    );
    let r = push_json(
        f.http(),
        "seed",
        &testkit::AgentPush::new("seed", "n1", 0.9).to_json(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=seed");
    assert_eq!(g.text(), r#"{"threshold":0,"quorum_met":false}"#);
    let (status, took) = f.terminate();
    assert!(
        status.success(),
        "clean exit on SIGTERM: {status:?}\n{}",
        f.log_text()
    );
    assert!(
        took < Duration::from_secs(12),
        "shutdown within the drain bound"
    );

    // The embedded default: no --config at all.
    let mut f = Fleet::spawn(&[], &[]);
    let want = [
        ("otlp/grpc", 4317),
        ("otlp/http", 4318),
        ("ingero_threshold/agent", 8080),
        ("ingero_threshold/admin", 8081),
        ("telemetry", 8888),
        ("health_check", 13133),
    ];
    for (name, port) in want {
        let a = f.addr(name);
        assert_eq!(a.port(), port, "{name}");
        assert!(
            a.ip().is_loopback(),
            "embedded default binds loopback only: {name} on {a}"
        );
    }
    let h = get(f.addr("health_check"), "/");
    assert_eq!(h.status, 200);
    assert!(h.text().contains("Server available"));
    let m = get(f.telemetry(), "/metrics");
    assert_eq!(m.status, 200);
    assert!(m.text().contains("otelcol_process_uptime_seconds"));
    let (status, _) = f.terminate();
    assert!(status.success());
}

#[test]
fn validate_reports_every_error_with_its_key_path() {
    let dir = tempdir::TempDir::new("validate");
    let p = dir.path().join("bad.yaml");
    std::fs::write(
        &p,
        r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: "not-an-endpoint"
processors:
  ingero:
    threshold:
      k: -1
      bogus: 3
  nonexistent:
exporters:
  prometheus:
    endpoint: 127.0.0.1:9464
service:
  extensions: [missing_ext]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [ingero]
      exporters: [debug]
"#,
    )
    .unwrap();
    let (code, _, err) = run(&["validate", "--config", p.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    for expect in [
        "receivers.otlp.protocols.http.endpoint",
        "processors.ingero.threshold.bogus",
        "processors.nonexistent: unknown processor type",
        "service.extensions.0",
        "service.pipelines.metrics.exporters.0",
    ] {
        assert!(err.contains(expect), "missing {expect:?} in:\n{err}");
    }
    // The seed binds 0.0.0.0 in plaintext: refused, naming the opt-out; valid with it.
    let (code, _, err) = run(&["validate", "--config", &seed_config()], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("service.allow_plaintext_listeners: true"),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "validate",
            "--config",
            &seed_config(),
            "--set",
            "service.allow_plaintext_listeners=true",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = run(&["validate"], &[]);
    assert_eq!(code, 0, "embedded default validates");
}

#[test]
fn components_lists_stability() {
    let (code, out, _) = run(&["components"], &[]);
    assert_eq!(code, 0);
    for name in [
        "ingero",
        "nccl_peer_lag",
        "provider_lookup",
        "ingero_threshold",
        "prometheus",
        "otlphttp",
        "health_check",
    ] {
        assert!(
            out.contains(&format!("name: {name}")),
            "{name} missing:\n{out}"
        );
    }
    assert!(out.contains("metrics: Beta"));
}

#[test]
fn print_config_merges_expands_and_redacts() {
    let dir = tempdir::TempDir::new("print");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.toml");
    std::fs::write(
        &a,
        "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: ${env:FLEET_HTTP}\nprocessors:\n  ingero:\n    threshold:\n      k: ${env:FLEET_K}\nexporters:\n  otlphttp:\n    endpoint: http://127.0.0.1:1\n    headers:\n      Authorization: Bearer s3cret\nservice:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      processors: [ingero]\n      exporters: [otlphttp]\n",
    )
    .unwrap();
    std::fs::write(&b, "[processors.ingero]\npush_interval = \"5s\"\n").unwrap();
    let env = [("FLEET_HTTP", "127.0.0.1:14318"), ("FLEET_K", "2.5")];
    let args = [
        "print-config",
        "--format",
        "json",
        "--config",
        a.to_str().unwrap(),
        "--config",
        b.to_str().unwrap(),
        "--set",
        "processors.ingero.ttl_multiplier=7",
    ];
    let (code, out, err) = run(&args, &env);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        "127.0.0.1:14318"
    );
    assert_eq!(v["processors"]["ingero"]["threshold"]["k"], 2.5);
    assert_eq!(v["processors"]["ingero"]["push_interval"], "5s");
    assert_eq!(v["processors"]["ingero"]["ttl_multiplier"], 7);
    assert_eq!(
        v["exporters"]["otlphttp"]["headers"]["Authorization"],
        "[REDACTED]"
    );
    assert!(!out.contains("s3cret"));
    let mut unredacted = args.to_vec();
    unredacted.splice(1..1, ["--mode", "unredacted"]);
    let (_, out, _) = run(&unredacted, &env);
    assert!(out.contains("s3cret"));
}

#[test]
fn a_busy_port_fails_with_the_key_that_names_it() {
    let hold = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hold.local_addr().unwrap().port();
    let cfg = test_config("1s", &[]).replacen(
        "      http:\n        endpoint: 127.0.0.1:0",
        &format!("      http:\n        endpoint: 127.0.0.1:{port}"),
        1,
    );
    let dir = tempdir::TempDir::new("busy");
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, cfg).unwrap();
    let (code, _, err) = run(&["--config", p.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("receivers.otlp.protocols.http.endpoint: cannot listen on"),
        "{err}"
    );
}

#[test]
fn sigterm_drains_and_exits_cleanly_under_load() {
    let mut f = Fleet::start_with(&test_config("1s", &[]), &["--shutdown-timeout", "3s"]);
    let addr = f.http();
    let pusher = std::thread::spawn(move || {
        let mut codes = Vec::new();
        for i in 0..200 {
            let body = testkit::AgentPush::new("drain", &format!("n{}", i % 10), 0.9).to_json();
            let r = std::panic::catch_unwind(|| push_json(addr, "drain", &body));
            match r {
                Ok(r) => codes.push(r.status),
                Err(_) => break, // connection refused once the listener closed
            }
        }
        codes
    });
    std::thread::sleep(Duration::from_millis(200));
    let (status, took) = f.terminate();
    let codes = pusher.join().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(5),
        "drain bound respected: {took:?}"
    );
    assert!(!codes.is_empty());
    assert!(
        codes.iter().all(|c| *c == 200),
        "requests answered before the close were all served: {codes:?}"
    );
    assert!(f.log_text().contains("shutting down"));
}

/// SIGTERM while the service is still starting (its first listener is up, the rest not yet)
/// ends it gracefully once it has started: the handlers are registered before startup, so
/// the signal never takes its default action of killing the process. Before, they were
/// registered only when the service began waiting for a signal, after startup, and a
/// SIGTERM in between killed it (a CI run caught it at the "ready" line).
#[test]
fn sigterm_during_startup_is_a_graceful_shutdown() {
    use std::io::{BufRead, BufReader};
    for _ in 0..5 {
        let mut child = Command::new(bin())
            .args(["--set", "service.telemetry.logs.level=info"])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ingero-fleet");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let first_listener = line.contains(" listening");
            log.push(line);
            if first_listener {
                break;
            }
        }
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        log.extend(lines.map_while(Result::ok));
        let status = child.wait().unwrap();
        let log = log.join("\n");
        assert!(status.success(), "{status:?}\n{log}");
        assert!(log.contains("stopped"), "no graceful shutdown:\n{log}");
    }
}
