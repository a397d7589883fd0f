//! Bad input against the real binary: each gets a clear status, the process keeps
//! serving, and good state is untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;
use testkit::AgentPush;

fn establish(f: &Fleet, cluster: &str) -> String {
    wait_for(Duration::from_secs(15), || {
        let mut last = None;
        for i in 0..6 {
            let r = push_json(
                f.http(),
                cluster,
                &AgentPush::new(cluster, &format!("n{i}"), 0.95 - 0.005 * i as f64).to_json(),
            );
            last = r.header("X-Ingero-Threshold").map(str::to_string);
        }
        std::thread::sleep(Duration::from_millis(200));
        last
    })
    .expect("threshold established")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn every_kind_of_bad_input_gets_a_clear_status_and_changes_nothing() {
    // Nodes must not expire while the slow cases run: a long TTL isolates "bad input
    // changes nothing" from expiry.
    let cfg = test_config("1s", &[]).replace("ttl_multiplier: 3", "ttl_multiplier: 120");
    let f = Fleet::start_with(&cfg, &[]);
    let before = establish(&f, "good");
    let get_good = || get(f.agent_api(), "/api/v1/threshold?cluster_id=good").json();
    let good_before = get_good();

    let proto = AgentPush::new("good", "n0", 0.95).to_proto_bytes();
    let h = f.http();
    let cases: Vec<(&str, Resp, u16)> = vec![
        (
            "truncated protobuf",
            post(
                h,
                "/v1/metrics?cluster_id=good",
                "application/x-protobuf",
                &proto[..proto.len() / 2],
                &[],
            ),
            400,
        ),
        (
            "invalid JSON",
            post(
                h,
                "/v1/metrics?cluster_id=good",
                "application/json",
                b"{\"resourceMetrics\": [",
                &[],
            ),
            400,
        ),
        (
            "wrong content type",
            post(
                h,
                "/v1/metrics?cluster_id=good",
                "text/plain",
                b"hello",
                &[],
            ),
            415,
        ),
        (
            "unsupported encoding",
            post(
                h,
                "/v1/metrics?cluster_id=good",
                "application/json",
                b"{}",
                &[("Content-Encoding", "br")],
            ),
            415,
        ),
        ("GET on the push path", get(h, "/v1/metrics"), 405),
        (
            "unknown path",
            post(h, "/v2/metrics", "application/json", b"{}", &[]),
            404,
        ),
        (
            "header injection in cluster_id",
            post(
                h,
                "/v1/metrics?cluster_id=good%0d%0aX-Evil:%201",
                "application/json",
                b"{}",
                &[],
            ),
            400,
        ),
        (
            "duplicate cluster_id",
            post(
                h,
                "/v1/metrics?cluster_id=good&cluster_id=other",
                "application/json",
                b"{}",
                &[],
            ),
            400,
        ),
        (
            "empty cluster_id",
            post(h, "/v1/metrics?cluster_id=", "application/json", b"{}", &[]),
            400,
        ),
    ];
    for (what, r, want) in &cases {
        assert_eq!(r.status, *want, "{what}: {}", r.text());
        assert!(!r.body.is_empty(), "{what}: error body explains");
        assert!(r.header("X-Evil").is_none(), "{what}: no injected header");
    }
    // An OTLP-style error body (google.rpc.Status as JSON) for JSON requests.
    let v = cases[1].1.json();
    assert_eq!(v["code"], 3);
    assert!(v["message"].as_str().unwrap().contains("invalid JSON"));

    // Oversized body: refused by Content-Length before it is read.
    let big = vec![b'x'; 21 * 1024 * 1024];
    let r = post(
        h,
        "/v1/metrics?cluster_id=good",
        "application/json",
        &big,
        &[],
    );
    assert_eq!(r.status, 413, "oversized body");
    // gzip bomb: small on the wire, over the cap once inflated.
    let bomb = gzip(&vec![b' '; 64 * 1024 * 1024]);
    assert!(bomb.len() < 200 * 1024);
    let r = post(
        h,
        "/v1/metrics?cluster_id=good",
        "application/json",
        &bomb,
        &[("Content-Encoding", "gzip")],
    );
    assert_eq!(r.status, 413, "gzip bomb: {}", r.text());

    // Scores the agent would never send: NaN is not JSON, so it comes as a string; negative
    // and 2.0 as numbers. All are refused as partial success (HTTP 200), counted, not stored.
    for (node, score) in [
        ("bad-neg", "-0.5"),
        ("bad-two", "2.0"),
        ("bad-nan", "\"NaN\""),
    ] {
        let body = AgentPush::new("good", node, 0.5)
            .to_json()
            .replace("\"asDouble\":0.5", &format!("\"asDouble\":{score}"));
        let r = push_json(h, "good", &body);
        assert_eq!(r.status, 200, "{node}: {}", r.text());
        let v = r.json();
        let rejected = v["partialSuccess"]["rejectedDataPoints"]
            .as_str()
            .map(|s| s.parse::<i64>().unwrap())
            .or(v["partialSuccess"]["rejectedDataPoints"].as_i64());
        assert_eq!(rejected, Some(1), "{node}: {v}");
    }
    // Missing cluster everywhere: refused as partial success with a reason.
    let body = AgentPush::new("x", "orphan", 0.9).to_json().replace(
        r#",{"key":"ingero.cluster.id","value":{"stringValue":"x"}}"#,
        "",
    );
    assert!(!body.contains("ingero.cluster.id"));
    let r = post(h, "/v1/metrics", "application/json", body.as_bytes(), &[]);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("cluster"), "{}", r.text());

    // Still serving, good state untouched.
    std::thread::sleep(Duration::from_millis(1200));
    let after = get_good();
    assert_eq!(after["quorum_met"], good_before["quorum_met"]);
    let (a, b) = (
        after["threshold"].as_f64().unwrap(),
        good_before["threshold"].as_f64().unwrap(),
    );
    // Same scores: only EMA convergence may move it, by a hair.
    assert!((a - b).abs() < 0.01, "threshold moved from {b} to {a}");
    let d = get(f.admin_api(), "/api/v1/diagnostics?cluster_id=good").json();
    let ids: Vec<_> = d["diagnostics"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !ids.iter().any(|i| i.starts_with("bad-")),
        "rejected scores were not stored: {ids:?}"
    );
    assert!(before.parse::<f64>().is_ok());

    // Counted on the telemetry endpoint.
    let m = get(f.telemetry(), "/metrics").text();
    for reason in [
        "bad_protobuf",
        "bad_json",
        "unsupported_content_type",
        "body_too_large",
        "decompressed_too_large",
        "bad_cluster_id",
    ] {
        assert!(
            m.contains(&format!("reason=\"{reason}\"")),
            "{reason} counted:\n{m}"
        );
    }
    let p = get(f.prometheus(), "/metrics").text();
    assert!(
        p.contains("ingero_fleet_rejected_points_total"),
        "rejected scores counted"
    );
}

#[test]
fn ten_thousand_clusters_hit_the_cap_and_the_process_keeps_serving() {
    let cfg = test_config("1s", &[]).replace(
        "    ttl_multiplier: 3\n",
        "    ttl_multiplier: 3\n    limits:\n      max_clusters: 1000\n",
    );
    let f = Fleet::start_with(&cfg, &[]);
    let h = f.http();
    // Persistent connection: 10,000 pushes, one per distinct cluster.
    let mut s = std::net::TcpStream::connect(h).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    for i in 0..10_000 {
        let c = format!("c{i:05}");
        let body = AgentPush::new(&c, "n", 0.9).to_json();
        // One write per request (several small writes would meet Nagle + delayed ACK).
        let req = format!(
            "POST /v1/metrics?cluster_id={c} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        // Read one response (status line, headers, body by Content-Length).
        use std::io::{BufRead, Read};
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "push {i}: {line}");
        let mut len = 0usize;
        loop {
            let mut l = String::new();
            reader.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut b = vec![0; len];
        reader.read_exact(&mut b).unwrap();
    }
    let p = get(f.prometheus(), "/metrics").text();
    let dropped: f64 = p
        .lines()
        .filter(|l| l.starts_with("ingero_fleet_dropped_total") && l.contains("cap_clusters"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(dropped >= 8000.0, "cap drops are counted: {dropped}");
    // The process still answers, and a cluster inside the cap still works.
    assert_eq!(get(f.addr("health_check"), "/").status, 200);
    let r = push_json(h, "c00001", &AgentPush::new("c00001", "n2", 0.9).to_json());
    assert_eq!(r.status, 200);
}

/// Write a request, then read one response's status code and body.
fn raw_status(s: &mut std::net::TcpStream) -> (u16, String) {
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"));
    let mut len = 0usize;
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        if l == "\r\n" || l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut b = vec![0; len];
    reader.read_exact(&mut b).unwrap();
    (status, String::from_utf8_lossy(&b).into_owned())
}

#[test]
fn a_body_that_arrives_in_pieces_is_read_and_one_that_stops_gets_408() {
    let cfg = test_config("1s", &[]).replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        read_timeout: 1s\n        max_request_body_size: 4096\n",
    );
    assert!(cfg.contains("read_timeout: 1s"), "config edit applied");
    let f = Fleet::start_with(&cfg, &[]);
    let body = AgentPush::new("slow", "n0", 0.9).to_json();
    let head = format!(
        "POST /v1/metrics?cluster_id=slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);

    // The body's second half arrives 300 ms after the first (within the read timeout):
    // the push is read whole and accepted.
    let mut s = std::net::TcpStream::connect(f.http()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(rest).unwrap();
    let (status, text) = raw_status(&mut s);
    assert_eq!(status, 200, "split body accepted: {text}");

    // The same push in three chunks (no Content-Length): joined and accepted.
    let chunked_head = "POST /v1/metrics?cluster_id=slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = |s: &mut std::net::TcpStream, part: &[u8]| {
        s.write_all(format!("{:x}\r\n", part.len()).as_bytes())
            .unwrap();
        s.write_all(part).unwrap();
        s.write_all(b"\r\n").unwrap();
    };
    let mut s = std::net::TcpStream::connect(f.http()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(chunked_head.as_bytes()).unwrap();
    let thirds = body.len() / 3;
    for part in [
        &body[..thirds],
        &body[thirds..2 * thirds],
        &body[2 * thirds..],
    ] {
        chunk(&mut s, part.as_bytes());
        std::thread::sleep(Duration::from_millis(50));
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let (status, text) = raw_status(&mut s);
    assert_eq!(status, 200, "chunked body accepted: {text}");

    // Chunks that add up to more than max_request_body_size (4096 here) with no
    // Content-Length to refuse up front: 413 as soon as the limit is passed.
    let mut s = std::net::TcpStream::connect(f.http()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(chunked_head.as_bytes()).unwrap();
    chunk(&mut s, body.as_bytes());
    chunk(&mut s, body.as_bytes());
    let (status, text) = raw_status(&mut s);
    assert_eq!(status, 413, "oversized chunked body: {text}");
    assert!(text.contains("4096-byte limit"), "{text}");

    // Only the first half ever arrives: 408 once the read timeout passes.
    let mut s = std::net::TcpStream::connect(f.http()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first).unwrap();
    let (status, text) = raw_status(&mut s);
    assert_eq!(status, 408, "stalled body: {text}");
    assert!(
        text.contains("timed out reading the request body"),
        "{text}"
    );

    // The process keeps serving and counted the timeout.
    let r = push_json(f.http(), "slow", &body);
    assert_eq!(r.status, 200);
    let p = get(f.telemetry(), "/metrics").text();
    assert!(
        p.lines()
            .any(|l| l.starts_with("ingero_fleet_rejected_requests_total")
                && l.contains("reason=\"read_timeout\"")
                && l.ends_with(" 1")),
        "one read timeout counted:\n{p}"
    );
}
