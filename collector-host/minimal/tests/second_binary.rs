//! The second binary built from the collector-host library, run as a user would: it lists
//! only its own component set, refuses an Ingero component in its config, starts, accepts
//! an OTLP/HTTP push and prints it with the debug exporter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_otlp-debug-collector")
}

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "otlp-debug-collector-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn components_lists_only_its_own_set() {
    let out = Command::new(bin()).arg("components").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("command: otlp-debug-collector"), "{text}");
    assert!(
        text.contains("processors:\nexporters:"),
        "no processors:\n{text}"
    );
    for absent in [
        "ingero_threshold",
        "name: ingero\n",
        "nccl_peer_lag",
        "provider_lookup",
    ] {
        assert!(!text.contains(absent), "{absent:?} listed:\n{text}");
    }
    for present in [
        "name: otlp",
        "name: debug",
        "name: ingero_auth",
        "name: health_check",
    ] {
        assert!(text.contains(present), "{present:?} missing:\n{text}");
    }
}

#[test]
fn a_fleet_component_in_its_config_is_an_unknown_type() {
    let cfg = write_config(
        "fleet",
        "receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}\n\
         processors: {ingero: {}}\n\
         exporters: {debug: {}}\n\
         service: {pipelines: {metrics: {receivers: [otlp], processors: [ingero], exporters: [debug]}}}\n",
    );
    let out = Command::new(bin())
        .args(["validate", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("processors.ingero: unknown processor type \"ingero\""),
        "{err}"
    );
}

#[test]
fn it_starts_accepts_an_otlp_push_and_prints_it() {
    let cfg = write_config(
        "run",
        "receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}\n\
         exporters: {debug: {verbosity: normal}}\n\
         service:\n  pipelines: {metrics: {receivers: [otlp], exporters: [debug]}}\n  \
         telemetry: {metrics: {readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: 0}}}}]}}\n",
    );
    let mut child = Command::new(bin())
        .args(["--config", cfg.to_str().unwrap()])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut addr: Option<SocketAddr> = None;
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("collector became ready");
        if line.contains("listening")
            && line.contains("otlp/http")
            && let Some(a) = line.split("addr=").nth(1)
        {
            addr = a.split_whitespace().next().and_then(|a| a.parse().ok());
        }
        if line.contains("otlp-debug-collector is ready") {
            break;
        }
    }
    let addr = addr.expect("the otlp/http listener's address was logged");
    let body = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"second-binary"}}]},"scopeMetrics":[{"metrics":[{"name":"second.binary.requests","gauge":{"dataPoints":[{"asDouble":42}]}}]}]}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/metrics HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let printed = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("debug exporter output");
        if line.contains("second.binary.requests") {
            break line;
        }
    };
    assert!(printed.contains("42"), "{printed}");

    // No request scope is registered here: an empty `cluster_id` (refused by Fleet's
    // scope) names nothing, and conflicting `ingero.cluster.id` attributes (a resource
    // Fleet drops) are plain attributes. Accepted whole, nothing dropped.
    let body = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"ingero.cluster.id","value":{"stringValue":"a"}},{"key":"ingero.cluster.id","value":{"stringValue":"b"}}]},"scopeMetrics":[{"metrics":[{"name":"unscoped.requests","gauge":{"dataPoints":[{"asDouble":7}]}}]}]}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/metrics?cluster_id= HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(!resp.contains("rejected"), "{resp}");
    let printed = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("debug exporter output");
        if line.contains("unscoped.requests") {
            break line;
        }
    };
    assert!(printed.contains('7'), "{printed}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&cfg);
}
