//! Connection exhaustion by silent clients, against the real binary (issue 22, item 1):
//! connections that never send a byte are closed after `first_byte_timeout` on every
//! listener, one client address cannot hold more than `max_connections_per_client`, and a
//! healthy agent on another address keeps getting thresholds while the attack runs; on TLS
//! listeners a silent client is closed during the handshake and after it. All counts are
//! read from the self-telemetry page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::tls_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use testkit::AgentPush;

/// A connection from a chosen loopback address (Linux routes all of 127.0.0.0/8 to lo).
fn connect_from(src: &str, to: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(format!("{src}:0").parse().unwrap()).unwrap();
        sock.connect(to).await.unwrap()
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// One agent push from `src`; the response.
fn push_from(src: &str, to: SocketAddr, cluster: &str, body: &str) -> Resp {
    let mut s = connect_from(src, to);
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let req = format!(
        "POST /v1/metrics?cluster_id={cluster} HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

/// Push a 7-node cluster from `src`; true when every push was answered 200 with a
/// threshold header.
fn push_cluster_from(src: &str, f: &Fleet, cluster: &str) -> bool {
    let mut all = true;
    for (i, score) in [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945]
        .iter()
        .enumerate()
    {
        let body = AgentPush::new(cluster, &format!("{cluster}-node-{i}"), *score).to_json();
        let r = push_from(src, f.http(), cluster, &body);
        all &= r.status == 200 && r.header("X-Ingero-Threshold").is_some();
    }
    all
}

/// Block until the server ends `s` (EOF or reset); false if it is still open after
/// `limit`, or sent an HTTP response (the server closes a silent connection without one;
/// a gRPC server's HTTP/2 greeting is read past).
fn closed_by_server(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) if buf[..n].starts_with(b"HTTP/") => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn telemetry_value(f: &Fleet, series: &str) -> f64 {
    let page = get(f.telemetry(), "/metrics").text();
    prom_value(&page, series).unwrap_or_else(|| panic!("{series} missing:\n{page}"))
}

fn wait_value(f: &Fleet, series: &str, want: f64) -> bool {
    wait_for(Duration::from_secs(20), || {
        (telemetry_value(f, series) == want).then_some(())
    })
    .is_some()
}

const LIMITS: &str = "        max_connections: 6\n        max_connections_per_client: 3\n        first_byte_timeout: 3s\n";

fn config() -> String {
    let cfg = test_config("1s", &[])
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!("      http:\n        endpoint: 127.0.0.1:0\n{LIMITS}"),
        )
        .replace(
            "      grpc:\n        endpoint: 127.0.0.1:0\n",
            &format!("      grpc:\n        endpoint: 127.0.0.1:0\n{LIMITS}"),
        );
    assert_eq!(cfg.matches("max_connections_per_client: 3").count(), 2);
    cfg
}

#[test]
fn silent_connections_are_capped_per_client_and_closed_while_a_healthy_agent_keeps_its_thresholds()
{
    let f = Fleet::start_with(&config(), &[]);
    let healthy = "127.0.0.2";
    // Quorum first, so every healthy push below is answered with a threshold.
    let ready = wait_for(Duration::from_secs(20), || {
        push_cluster_from(healthy, &f, "healthy").then_some(())
    });
    assert!(ready.is_some(), "no threshold before the attack");

    // The attacker (127.0.0.1) opens silent connections without end (bounded here), more
    // than max_connections in all, while the healthy agent pushes.
    let stop = Arc::new(AtomicBool::new(false));
    let http = f.http();
    let attacker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) && held.len() < 60 {
                held.push(connect_from("127.0.0.1", http));
                std::thread::sleep(Duration::from_millis(50));
            }
            held
        })
    };
    // Wait until the attacker holds its full share, then push through it.
    let open = "ingero_fleet_connections_open{listener=\"otlp/http\"}";
    assert!(wait_value(&f, open, 3.0), "the attacker never held 3");
    // Beyond its 3, each new attacker connection evicts the attacker's own oldest idle one.
    let evicted =
        "ingero_fleet_connections_closed_total{listener=\"otlp/http\",reason=\"evicted\"}";
    assert!(
        wait_for(Duration::from_secs(20), || {
            (telemetry_value(&f, evicted) > 0.0).then_some(())
        })
        .is_some(),
        "no connection evicted at the per-client cap"
    );
    for round in 0..3 {
        assert!(
            push_cluster_from(healthy, &f, "healthy"),
            "round {round}: a healthy push failed or lost its threshold during the attack"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut held = attacker.join().unwrap();

    // Every attacker connection ends without an answer: evicted by a newer one of its
    // address, or closed at the first-byte deadline.
    for (i, s) in held.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(30)),
            "silent connection {i} was not closed"
        );
    }
    let closed = "ingero_fleet_connections_closed_total{listener=\"otlp/http\",reason=\"first_byte_timeout\"}";
    assert!(
        telemetry_value(&f, closed) >= 3.0,
        "first-byte closures not counted"
    );
    assert!(wait_value(&f, open, 0.0), "closed connections still open");
    let refused = telemetry_value(&f, evicted);
    assert_eq!(
        telemetry_value(
            &f,
            "ingero_fleet_connections_refused_total{listener=\"otlp/http\",reason=\"max_connections_per_client\"}"
        ),
        0.0,
        "an idle connection was there to evict every time"
    );
    let over_cap = telemetry_value(
        &f,
        "ingero_fleet_connections_refused_total{listener=\"otlp/http\",reason=\"max_connections\"}",
    );
    // The total cap (6) was never reached: the per-client cap held the attacker to 3.
    assert_eq!(over_cap, 0.0);
    let accepted = telemetry_value(
        &f,
        "ingero_fleet_connections_accepted_total{listener=\"otlp/http\"}",
    );
    let closed_n = telemetry_value(&f, closed);
    assert_eq!(
        refused + closed_n,
        held.len() as f64,
        "every attacker connection is counted once (accepted {accepted})"
    );
}

#[test]
fn silent_grpc_connections_are_capped_per_client_and_closed_after_the_first_byte_deadline() {
    let f = Fleet::start_with(&config(), &[]);
    let mut held: Vec<TcpStream> = (0..5)
        .map(|_| connect_from("127.0.0.1", f.grpc()))
        .collect();
    let evicted =
        "ingero_fleet_connections_closed_total{listener=\"otlp/grpc\",reason=\"evicted\"}";
    assert!(wait_value(&f, evicted, 2.0), "per-client evictions");
    assert!(wait_value(
        &f,
        "ingero_fleet_connections_open{listener=\"otlp/grpc\"}",
        3.0
    ));
    for (i, s) in held.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(30)),
            "silent gRPC connection {i} was not closed"
        );
    }
    assert!(wait_value(
        &f,
        "ingero_fleet_connections_closed_total{listener=\"otlp/grpc\",reason=\"first_byte_timeout\"}",
        3.0
    ));
    assert!(wait_value(
        &f,
        "ingero_fleet_connections_open{listener=\"otlp/grpc\"}",
        0.0
    ));
}

#[test]
fn every_listener_closes_a_silent_connection_at_the_default_deadline() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let listeners = [
        ("otlp/http", f.http()),
        ("otlp/grpc", f.grpc()),
        ("ingero_threshold/agent", f.agent_api()),
        ("ingero_threshold/admin", f.admin_api()),
        ("health_check", f.addr("health_check")),
        ("prometheus", f.prometheus()),
        ("telemetry", f.telemetry()),
    ];
    let mut held: Vec<(&str, TcpStream)> = listeners
        .iter()
        .map(|(name, addr)| (*name, TcpStream::connect(addr).unwrap()))
        .collect();
    for (name, s) in &mut held {
        assert!(
            closed_by_server(s, Duration::from_secs(40)),
            "{name}: silent connection not closed"
        );
    }
    let page = get(f.telemetry(), "/metrics").text();
    for (name, _) in &listeners {
        let series = format!(
            "ingero_fleet_connections_closed_total{{listener=\"{name}\",reason=\"first_byte_timeout\"}}"
        );
        assert_eq!(prom_value(&page, &series), Some(1.0), "{series}\n{page}");
    }
}

#[test]
fn tls_connections_silent_during_or_after_the_handshake_are_closed_and_counted() {
    let pki = tls_support::Pki::new("conn-lifecycle-tls");
    let tls = pki.tls_block(false, ", handshake_timeout: 1s");
    let limits = "        first_byte_timeout: 1s\n";
    let cfg = test_config("1s", &[])
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!("      http:\n        endpoint: 127.0.0.1:0\n        tls: {tls}\n{limits}"),
        )
        .replace(
            "      grpc:\n        endpoint: 127.0.0.1:0\n",
            &format!("      grpc:\n        endpoint: 127.0.0.1:0\n        tls: {tls}\n{limits}"),
        );
    assert_eq!(cfg.matches("handshake_timeout: 1s").count(), 2, "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    for (listener, addr, alpn) in [
        ("otlp/http", f.http(), b"http/1.1".as_slice()),
        ("otlp/grpc", f.grpc(), b"h2".as_slice()),
    ] {
        // Silent during the handshake: plain TCP, nothing sent.
        let mut raw = TcpStream::connect(addr).unwrap();
        // Silent after it: the handshake completes, then no request.
        let client = tls_support::client_config(&pki.ca.pem, None, &[alpn], false);
        let mut s = tls_support::tls_connect(addr, "localhost", client).unwrap();
        assert!(
            closed_by_server(&mut raw, Duration::from_secs(30)),
            "{listener}: silent handshake not closed"
        );
        s.sock
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 1024];
        let ended = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                // The HTTP/2 server's SETTINGS frame.
                Ok(_) if alpn == b"h2" => continue,
                Ok(n) => panic!(
                    "{listener}: answered {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ),
                // Closed without close_notify, or reset.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                    ) =>
                {
                    break true;
                }
                Err(e) => {
                    eprintln!("{listener}: {e}");
                    break false;
                }
            }
        };
        assert!(ended, "{listener}: silent TLS connection not closed");
        assert!(
            wait_value(
                &f,
                &format!(
                    "ingero_fleet_tls_handshakes_total{{listener=\"{listener}\",outcome=\"timeout\"}}"
                ),
                1.0
            ),
            "{listener}: handshake timeout not counted"
        );
        assert!(
            wait_value(
                &f,
                &format!(
                    "ingero_fleet_connections_closed_total{{listener=\"{listener}\",reason=\"first_byte_timeout\"}}"
                ),
                1.0
            ),
            "{listener}: first-byte closure after the handshake not counted"
        );
    }
}

/// Open a connection from `src` and send `GET /` on it, leaving it open (idle once
/// answered); or, with `silent`, send nothing.
fn hold_from(src: &str, to: SocketAddr, silent: bool) -> TcpStream {
    let mut s = connect_from(src, to);
    if !silent {
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: fleet\r\n\r\n");
    }
    s
}

/// Whether the server has closed `s` (EOF or reset), without blocking.
fn is_closed(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// An attacker holding `per_addr` connections from each of `addrs`, reopening each one the
/// server closes, until `stop`; returns how many it opened.
fn spawn_holder(
    addrs: Vec<String>,
    per_addr: usize,
    to: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held: Vec<(usize, TcpStream)> = Vec::new();
        let mut opened = 0;
        for (a, src) in addrs.iter().enumerate() {
            for i in 0..per_addr {
                held.push((a, hold_from(src, to, i % 2 == 0)));
                opened += 1;
            }
        }
        while !stop.load(Ordering::Relaxed) {
            for (a, s) in held.iter_mut() {
                if is_closed(s) {
                    *s = hold_from(&addrs[*a], to, false);
                    opened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        opened
    })
}

const FAIR_LIMITS: &str = "        max_connections: 64\n        max_connections_per_client: 8\n        first_byte_timeout: 60s\n        idle_timeout: 60s\n";

fn fair_config() -> String {
    let cfg = test_config("1s", &[])
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!("      http:\n        endpoint: 127.0.0.1:0\n{FAIR_LIMITS}"),
        )
        .replace(
            "      grpc:\n        endpoint: 127.0.0.1:0\n",
            "      grpc:\n        endpoint: 127.0.0.1:0\n        idle_timeout: 2s\n",
        );
    assert_eq!(cfg.matches("max_connections: 64").count(), 1);
    cfg
}

/// One push from `src` on a new connection: answered 200 with a threshold (false when the
/// connection was closed without an answer).
fn pushed(src: &str, f: &Fleet, cluster: &str, node: usize) -> bool {
    let body = AgentPush::new(cluster, &format!("{cluster}-node-{node}"), 0.95).to_json();
    let mut s = connect_from(src, f.http());
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let req = format!(
        "POST /v1/metrics?cluster_id={cluster} HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(req.as_bytes());
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    if !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        return false;
    }
    let r = parse_response(&buf);
    r.status == 200 && r.header("X-Ingero-Threshold").is_some()
}

#[test]
fn many_addresses_at_max_connections_leave_a_new_client_its_pushes() {
    let f = Fleet::start_with(&fair_config(), &[]);
    let healthy = "127.0.0.2";
    assert!(
        wait_for(Duration::from_secs(20), || {
            push_cluster_from(healthy, &f, "healthy").then_some(())
        })
        .is_some(),
        "no threshold before the attack"
    );
    // 8 addresses x 8 connections (each address's cap) fill max_connections (64); half
    // stay silent, half send one request and stay idle; every closed one is reopened.
    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<String> = (10..18).map(|n| format!("127.0.0.{n}")).collect();
    let holder = spawn_holder(addrs, 8, f.http(), stop.clone());
    let open = "ingero_fleet_connections_open{listener=\"otlp/http\"}";
    assert!(
        wait_value(&f, open, 64.0),
        "the attacker never filled the listener"
    );
    let mut ok = 0;
    for i in 0..40 {
        ok += usize::from(pushed(healthy, &f, "healthy", i % 7));
    }
    stop.store(true, Ordering::Relaxed);
    let opened = holder.join().unwrap();
    assert_eq!(
        ok, 40,
        "healthy pushes answered with a threshold during the attack"
    );
    let evicted = telemetry_value(
        &f,
        "ingero_fleet_connections_closed_total{listener=\"otlp/http\",reason=\"evicted\"}",
    );
    // Healthy connections found the listener full (the attacker refills it within 20 ms)
    // and evicted an idle attacker connection instead of being refused.
    assert!(evicted >= 1.0, "no eviction: {evicted}");
    assert_eq!(
        telemetry_value(
            &f,
            "ingero_fleet_connections_refused_total{listener=\"otlp/http\",reason=\"max_connections\"}"
        ),
        0.0
    );
    assert!(
        opened > 64,
        "the attacker reopened what was evicted ({opened})"
    );
    assert!(telemetry_value(&f, open) <= 64.0);
}

#[test]
fn a_client_behind_the_attackers_address_keeps_its_pushes() {
    let f = Fleet::start_with(&fair_config(), &[]);
    let nat = "127.0.0.3";
    assert!(
        wait_for(Duration::from_secs(20), || {
            push_cluster_from("127.0.0.2", &f, "healthy").then_some(())
        })
        .is_some(),
        "no threshold before the attack"
    );
    // The attacker holds the shared address's 8 connections and reopens every closed one.
    let stop = Arc::new(AtomicBool::new(false));
    let holder = spawn_holder(vec![nat.to_string()], 8, f.http(), stop.clone());
    let open = "ingero_fleet_connections_open{listener=\"otlp/http\"}";
    assert!(
        wait_value(&f, open, 8.0),
        "the attacker never held the address's cap"
    );
    let mut ok = 0;
    for i in 0..30 {
        ok += usize::from(pushed(nat, &f, "healthy", i % 7));
    }
    stop.store(true, Ordering::Relaxed);
    holder.join().unwrap();
    assert_eq!(
        ok, 30,
        "pushes from the shared address answered with a threshold"
    );
    assert_eq!(
        telemetry_value(
            &f,
            "ingero_fleet_connections_refused_total{listener=\"otlp/http\",reason=\"max_connections_per_client\"}"
        ),
        0.0
    );
}

#[test]
fn a_grpc_connection_answering_pings_is_closed_after_the_idle_timeout() {
    let f = Fleet::start_with(&fair_config(), &[]);
    let grpc = f.grpc();
    // The client's connection task runs on the workers while the test thread waits.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let open = "ingero_fleet_connections_open{listener=\"otlp/grpc\"}";
    let closed =
        "ingero_fleet_connections_closed_total{listener=\"otlp/grpc\",reason=\"idle_timeout\"}";
    rt.block_on(async {
        use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
        // PINGs every 200 ms, far inside the 2 s idle timeout, and acks for the server's.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .unwrap()
            .http2_keep_alive_interval(Duration::from_millis(200))
            .keep_alive_while_idle(true)
            .connect()
            .await
            .unwrap();
        let mut client = MetricsServiceClient::new(channel);
        client
            .export(AgentPush::new("alpha", "a0", 0.95).to_proto())
            .await
            .unwrap();
        assert_eq!(telemetry_value(&f, open), 1.0);
        // Pings and no call: closed at the idle timeout all the same.
        assert!(wait_value(&f, closed, 1.0), "pings held the connection");
        assert!(wait_value(&f, open, 0.0));
        // The client reconnects for its next call.
        client
            .export(AgentPush::new("alpha", "a0", 0.95).to_proto())
            .await
            .unwrap();
    });
}

/// One `GET path` from `src` on a new connection; the status (0 when the connection was
/// closed without an answer).
fn get_from(src: &str, to: SocketAddr, path: &str) -> u16 {
    let mut s = connect_from(src, to);
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    if buf.is_empty() {
        return 0;
    }
    parse_response(&buf).status
}

#[test]
fn every_other_listener_takes_its_per_client_cap_and_evicts_idle_connections_for_new_ones() {
    // Two connections per client address on the threshold, health, exporter and
    // self-telemetry listeners (four in all on the first three).
    let caps = "    max_connections: 4\n    max_connections_per_client: 2\n";
    let cfg = test_config("1s", &[])
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!("    admin_endpoint: 127.0.0.1:0\n{caps}"),
        )
        .replace(
            "  health_check:\n    endpoint: 127.0.0.1:0\n",
            &format!("  health_check:\n    endpoint: 127.0.0.1:0\n{caps}"),
        )
        .replace(
            "  prometheus:\n    endpoint: 127.0.0.1:0\n",
            &format!("  prometheus:\n    endpoint: 127.0.0.1:0\n{caps}"),
        )
        .replace(
            "                port: 0\n",
            "                port: 0\n                max_connections_per_client: 2\n",
        );
    assert_eq!(cfg.matches("max_connections_per_client: 2").count(), 4);
    let f = Fleet::start_with(&cfg, &[]);
    let listeners = [
        (
            "ingero_threshold/agent",
            f.agent_api(),
            "/api/v1/threshold?cluster_id=c",
        ),
        (
            "ingero_threshold/admin",
            f.admin_api(),
            "/api/v1/diagnostics?cluster_id=c",
        ),
        ("health_check", f.addr("health_check"), "/"),
        ("prometheus", f.prometheus(), "/metrics"),
        ("telemetry", f.telemetry(), "/metrics"),
    ];
    for (name, addr, path) in listeners {
        // An attacker on 127.0.0.3 opens six connections and sends nothing: each new one
        // evicts the address's oldest idle one, so it never holds more than two.
        let mut held: Vec<TcpStream> = (0..6).map(|_| hold_from("127.0.0.3", addr, true)).collect();
        let closed = wait_for(Duration::from_secs(10), || {
            let n = held
                .iter_mut()
                .filter_map(|s| is_closed(s).then_some(()))
                .count();
            (n >= 4).then_some(n)
        });
        assert_eq!(closed, Some(4), "{name}: the attacker keeps at most two");
        // A client behind the attacker's address is answered (it evicts an idle one), and
        // so is a client on another address.
        assert_ne!(get_from("127.0.0.3", addr, path), 0, "{name}: same address");
        assert_ne!(
            get_from("127.0.0.2", addr, path),
            0,
            "{name}: other address"
        );
        // Evictions are counted per listener; nothing was refused (there was always an
        // idle connection to evict).
        let evicted = telemetry_value(
            &f,
            &format!(
                "ingero_fleet_connections_closed_total{{listener=\"{name}\",reason=\"evicted\"}}"
            ),
        );
        assert!(evicted >= 5.0, "{name}: evictions counted: {evicted}");
        drop(held);
    }
}

/// Send one keep-alive request on `s` and read its whole response (`Content-Length` body,
/// or none for HEAD); the status.
fn keep_alive_request(s: &mut TcpStream, method: &str, path: &str) -> u16 {
    let req = format!("{method} {path} HTTP/1.1\r\nHost: fleet\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the response");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = if method == "HEAD" {
            0
        } else {
            head.lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or_else(|| panic!("no content-length: {head}"))
        };
        if buf.len() >= end + 4 + len {
            return parse_response(&buf).status;
        }
    }
}

#[test]
fn every_other_listener_closes_a_keep_alive_connection_idle_past_its_idle_timeout() {
    // idle_timeout 1s on the threshold, health, exporter and self-telemetry listeners
    // (the OTLP receivers' own test is in e2e_overload); their header-read limit is 10s,
    // so only idle_timeout closes a connection sooner.
    let keys = "    idle_timeout: 1s\n    first_byte_timeout: 30s\n";
    let cfg = test_config("1s", &[])
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!("    admin_endpoint: 127.0.0.1:0\n{keys}"),
        )
        .replace(
            "  health_check:\n    endpoint: 127.0.0.1:0\n",
            &format!("  health_check:\n    endpoint: 127.0.0.1:0\n{keys}"),
        )
        .replace(
            "  prometheus:\n    endpoint: 127.0.0.1:0\n",
            &format!("  prometheus:\n    endpoint: 127.0.0.1:0\n{keys}"),
        )
        .replace(
            "                port: 0\n",
            "                port: 0\n                idle_timeout: 1s\n                first_byte_timeout: 30s\n",
        );
    assert_eq!(cfg.matches("idle_timeout: 1s").count(), 4);
    let f = Fleet::start_with(&cfg, &[]);
    let listeners = [
        (
            "ingero_threshold/agent",
            f.agent_api(),
            "GET",
            "/api/v1/threshold?cluster_id=c",
        ),
        (
            "ingero_threshold/admin",
            f.admin_api(),
            "GET",
            "/api/v1/diagnostics?cluster_id=c",
        ),
        ("health_check", f.addr("health_check"), "GET", "/"),
        ("prometheus", f.prometheus(), "HEAD", "/metrics"),
        ("telemetry", f.telemetry(), "HEAD", "/metrics"),
    ];
    let mut held = Vec::new();
    for (name, addr, method, path) in listeners {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let status = keep_alive_request(&mut s, method, path);
        assert!(status < 500, "{name}: {status}");
        held.push((name, s));
    }
    for (name, s) in &mut held {
        assert!(
            closed_by_server(s, Duration::from_secs(30)),
            "{name}: idle keep-alive connection not closed"
        );
    }
    let page = get(f.telemetry(), "/metrics").text();
    for (name, ..) in listeners {
        let series = format!(
            "ingero_fleet_connections_closed_total{{listener=\"{name}\",reason=\"idle_timeout\"}}"
        );
        assert_eq!(prom_value(&page, &series), Some(1.0), "{series}\n{page}");
    }
}
