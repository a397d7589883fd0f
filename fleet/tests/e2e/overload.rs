//! Load shedding on the OTLP/HTTP receiver, against the real binary: beyond
//! `max_concurrent_requests` a push is answered 503 with `Retry-After` before its body is
//! read, the refusal is counted, the threshold API keeps serving, and pushes are accepted
//! again as soon as the requests in flight finish.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::future::Future as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use testkit::AgentPush;

/// Send a push's headers and the first half of its body, holding the rest back.
fn half_sent_push(f: &Fleet, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(f.http()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "POST /v1/metrics?cluster_id=flood HTTP/1.1\r\nHost: fleet\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body.as_bytes()[..body.len() / 2]);
    s.write_all(&req).unwrap();
    s
}

/// Whether the server already answered (or closed) this connection.
fn answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = s.peek(&mut b);
    s.set_nonblocking(false).unwrap();
    !matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn finish_and_read_status(mut s: TcpStream, body: &str) -> String {
    s.write_all(&body.as_bytes()[body.len() / 2..]).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn pushes_beyond_the_in_flight_cap_get_503_with_retry_after_then_recover() {
    let cfg = test_config("1s", &[]).replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_concurrent_requests: 2\n        \
         retry_after: 7s\n",
    );
    assert!(cfg.contains("max_concurrent_requests: 2"), "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    let body = AgentPush::new("flood", "node-0", 0.93).to_json();

    // Two pushes stuck mid-body hold both permits. A probe that reaches the server before
    // one of them takes that permit and the slow one is refused instead; such a slow push
    // is replaced until both hold a permit and the probe is the one refused.
    let mut slow: Vec<TcpStream> = (0..2).map(|_| half_sent_push(&f, &body)).collect();
    let refused = wait_for(Duration::from_secs(15), || {
        for s in slow.iter_mut() {
            if answered(s) {
                *s = half_sent_push(&f, &body);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        let r = push_json(f.http(), "flood", &body);
        (r.status == 503).then_some(r)
    })
    .expect("a push beyond the cap is refused with 503");
    assert_eq!(refused.header("Retry-After"), Some("7"));
    assert_eq!(
        refused.json()["code"],
        14,
        "UNAVAILABLE: {}",
        refused.text()
    );
    // Refused while full, every time (the permits are still held).
    assert_eq!(push_json(f.http(), "flood", &body).status, 503);

    // The threshold API is another listener and keeps answering.
    let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=flood");
    assert_eq!(g.status, 200, "{}", g.text());

    // Counted by reason on the telemetry endpoint.
    let tel = get(f.telemetry(), "/metrics").text();
    let refusals = tel
        .lines()
        .find(|l| l.starts_with("ingero_fleet_rejected_requests_total") && l.contains("overloaded"))
        .unwrap_or_else(|| panic!("no overloaded count:\n{tel}"));
    let n: f64 = refusals.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 2.0, "{refusals}");

    // The held requests complete normally, and the next push is accepted.
    for s in slow {
        let status = finish_and_read_status(s, &body);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    let ok = push_json(f.http(), "flood", &body);
    assert_eq!(ok.status, 200, "{}", ok.text());
}

#[test]
fn retry_after_must_be_whole_seconds_within_an_hour() {
    for bad in ["0s", "1500ms", "2h"] {
        let cfg = test_config("1s", &[]).replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!("      http:\n        endpoint: 127.0.0.1:0\n        retry_after: {bad}\n"),
        );
        let dir = tempdir::TempDir::new("retry-after");
        let path = dir.path().join(format!("bad-{bad}.yaml"));
        std::fs::write(&path, cfg).unwrap();
        let out = std::process::Command::new(bin())
            .args(["validate", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            err.contains("protocols.http.retry_after"),
            "{bad}: error names the key: {err}"
        );
    }
}

/// The headers of an OTLP metrics `Export` call, for a raw HTTP/2 client.
fn export_request(addr: std::net::SocketAddr) -> http::Request<()> {
    http::Request::post(format!(
        "http://{addr}/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap()
}

/// gRPC length-prefixed message: flag byte, big-endian length, then the message.
fn grpc_frame(msg: &[u8]) -> Vec<u8> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(msg);
    framed
}

/// A gRPC `Export` call on its own HTTP/2 connection with the request message half sent.
struct HeldCall {
    response: h2::client::ResponseFuture,
    body: h2::SendStream<bytes::Bytes>,
    rest: bytes::Bytes,
}

async fn held_grpc_call(addr: std::net::SocketAddr, msg: &[u8]) -> HeldCall {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = export_request(addr);
    let (response, mut body) = client.send_request(req, false).unwrap();
    let framed = grpc_frame(msg);
    let half = framed.len() / 2;
    let rest = bytes::Bytes::copy_from_slice(&framed[half..]);
    body.send_data(bytes::Bytes::copy_from_slice(&framed[..half]), false)
        .unwrap();
    HeldCall {
        response,
        body,
        rest,
    }
}

#[test]
fn grpc_calls_beyond_the_in_flight_cap_get_unavailable_with_retry_info_then_recover() {
    use collector_host::receiver::grpc_shed::retry_delay;
    use futures_util::FutureExt;
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
    use prost::Message;

    let cfg = test_config("1s", &[]).replace(
        "      grpc:\n        endpoint: 127.0.0.1:0\n",
        "      grpc:\n        endpoint: 127.0.0.1:0\n        max_concurrent_requests: 2\n        \
         retry_after: 7s\n",
    );
    assert!(cfg.contains("max_concurrent_requests: 2"), "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    let addr = f.grpc();
    let msg = AgentPush::new("flood", "node-0", 0.93)
        .to_proto()
        .encode_to_vec();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let agent_api = f.agent_api();
    let telemetry = f.telemetry();
    rt.block_on(async move {
        let mut client = MetricsServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        // As over HTTP: a held call refused because the probe had its permit is replaced
        // until both held calls own a permit and the probe is the one refused.
        let mut held = vec![
            held_grpc_call(addr, &msg).await,
            held_grpc_call(addr, &msg).await,
        ];
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let refused = loop {
            assert!(std::time::Instant::now() < deadline, "never refused");
            for h in held.iter_mut() {
                if (&mut h.response).now_or_never().is_some() {
                    *h = held_grpc_call(addr, &msg).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let req = AgentPush::new("flood", "probe", 0.93).to_proto();
            match client.export(req).await {
                Err(s) => break s,
                Ok(_) => continue,
            }
        };
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
        assert_eq!(retry_delay(&refused), Some(Duration::from_secs(7)));

        // The threshold API keeps answering while the receiver is full.
        let g = tokio::task::spawn_blocking(move || {
            get(agent_api, "/api/v1/threshold?cluster_id=flood")
        })
        .await
        .unwrap();
        assert_eq!(g.status, 200, "{}", g.text());
        let tel = tokio::task::spawn_blocking(move || get(telemetry, "/metrics").text())
            .await
            .unwrap();
        assert!(
            tel.lines()
                .any(|l| l.starts_with("ingero_fleet_rejected_requests_total")
                    && l.contains("overloaded")
                    && l.contains("grpc")),
            "{tel}"
        );

        // The held calls complete normally, and the next call is accepted.
        for mut h in held {
            h.body.send_data(h.rest.clone(), true).unwrap();
            let resp = h.response.await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            while let Some(chunk) = body.data().await {
                chunk.unwrap();
            }
            let trailers = body.trailers().await.unwrap().unwrap_or_default();
            assert_eq!(
                trailers.get("grpc-status").and_then(|v| v.to_str().ok()),
                Some("0"),
                "{trailers:?}"
            );
        }
        let ok = client
            .export(AgentPush::new("flood", "after", 0.93).to_proto())
            .await;
        assert!(ok.is_ok(), "{ok:?}");
    });
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// One flooding client: pushes 4 MiB bodies in 64 KiB pieces, back to back, on fresh
/// connections, until `stop`; returns (answered 503, other answers, connection errors).
fn flood_client(
    addr: std::net::SocketAddr,
    stop: &std::sync::atomic::AtomicBool,
) -> (u64, u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    const BODY: usize = 4 << 20;
    let piece = vec![b' '; 64 << 10];
    let (mut shed, mut other, mut errors) = (0, 0, 0);
    while !stop.load(Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            errors += 1;
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "POST /v1/metrics?cluster_id=flood HTTP/1.1\r\nHost: fleet\r\n\
             Content-Type: application/json\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n"
        );
        let mut sent = s.write_all(head.as_bytes()).is_ok();
        let mut n = 0;
        while sent && n < BODY {
            sent = s.write_all(&piece).is_ok();
            n += piece.len();
            std::thread::sleep(Duration::from_millis(2));
        }
        // A shed request is answered (and the connection closed) before the body is read,
        // so the writes above may fail; the answer is still there to read.
        let mut buf = [0u8; 16];
        match s.read(&mut buf) {
            Ok(n) if buf[..n].starts_with(b"HTTP/1.1 503") => shed += 1,
            Ok(n) if n > 0 => other += 1,
            _ => errors += 1,
        }
    }
    (shed, other, errors)
}

#[test]
fn a_flood_of_large_pushes_is_shed_with_bounded_memory_and_the_threshold_api_keeps_serving() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    // 48 clients each pushing 4 MiB bodies: unbounded, ~192 MiB of bodies in flight; with
    // 4 requests in flight at most 16 MiB.
    let cfg = test_config("1s", &[]).replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_concurrent_requests: 4\n",
    );
    let f = Fleet::start_with(&cfg, &[]);
    let pid = f.child.id();
    for i in 0..6 {
        let r = push_json(
            f.http(),
            "flood",
            &AgentPush::new("flood", &format!("n{i}"), 0.9 + 0.01 * f64::from(i)).to_json(),
        );
        assert_eq!(r.status, 200);
    }
    let before = peak_rss(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let addr = f.http();
    let clients: Vec<_> = (0..48)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || flood_client(addr, &stop))
        })
        .collect();

    // During the flood the threshold API answers every poll.
    let mut polls = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=flood");
        assert_eq!(g.status, 200, "{}", g.text());
        polls += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Relaxed);
    let (mut shed, mut other) = (0, 0);
    for c in clients {
        let (s, o, _) = c.join().unwrap();
        shed += s;
        other += o;
    }
    let peak = peak_rss(pid);
    // Bodies held at once are bounded by the cap: growth stays far below the ~192 MiB the
    // flood would pin without it.
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 96 << 20,
        "peak RSS grew by {} MiB during the flood ({shed} shed, {other} answered)",
        grown >> 20
    );
    assert!(shed > 0, "no push was shed ({other} answered otherwise)");
    // Recovery: normal pushes are accepted as soon as the flood stops.
    let ok = wait_for(Duration::from_secs(10), || {
        let r = push_json(
            f.http(),
            "flood",
            &AgentPush::new("flood", "after", 0.95).to_json(),
        );
        (r.status == 200).then_some(r)
    });
    assert!(ok.is_some(), "pushes accepted again after the flood");
    eprintln!(
        "flood: {shed} shed, {other} answered otherwise, peak RSS {} MiB (+{} MiB), {polls} threshold polls ok",
        peak >> 20,
        grown >> 20
    );
}

/// An HTTP/2 connection that completed one `Export` call and stays open.
struct OpenGrpcConn {
    _client: h2::client::SendRequest<bytes::Bytes>,
    _task: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

async fn open_grpc_conn(addr: std::net::SocketAddr, msg: &[u8]) -> Option<OpenGrpcConn> {
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (client, conn) = h2::client::handshake(tcp).await.ok()?;
    let task = tokio::spawn(conn);
    let mut ready = client.clone().ready().await.ok()?;
    let req = export_request(addr);
    let (response, mut body) = ready.send_request(req, false).ok()?;
    body.send_data(bytes::Bytes::from(grpc_frame(msg)), true)
        .ok()?;
    let resp = response.await.ok()?;
    (resp.status() == 200).then_some(OpenGrpcConn {
        _client: client,
        _task: task,
    })
}

/// An HTTP/2 connection with one `Export` call in service: its request body is left open.
struct BusyGrpcConn {
    _client: h2::client::SendRequest<bytes::Bytes>,
    body: h2::SendStream<bytes::Bytes>,
    response: h2::client::ResponseFuture,
    task: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

async fn busy_grpc_conn(addr: std::net::SocketAddr, msg: &[u8]) -> Option<BusyGrpcConn> {
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (client, conn) = h2::client::handshake(tcp).await.ok()?;
    let task = tokio::spawn(conn);
    let mut ready = client.clone().ready().await.ok()?;
    let (response, mut body) = ready.send_request(export_request(addr), false).ok()?;
    // Half the message: the call is in service, waiting for the rest.
    let frame = grpc_frame(msg);
    body.send_data(
        bytes::Bytes::copy_from_slice(&frame[..frame.len() / 2]),
        false,
    )
    .ok()?;
    Some(BusyGrpcConn {
        _client: client,
        body,
        response,
        task,
    })
}

#[test]
fn grpc_connections_beyond_max_connections_evict_an_idle_one_or_are_closed_at_accept() {
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
    use prost::Message;

    let cfg = test_config("1s", &[]).replace(
        "      grpc:\n        endpoint: 127.0.0.1:0\n",
        "      grpc:\n        endpoint: 127.0.0.1:0\n        max_connections: 2\n        max_concurrent_requests: 2\n",
    );
    assert!(cfg.contains("max_connections: 2"), "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    let addr = f.grpc();
    let telemetry = f.telemetry();
    let msg = AgentPush::new("conns", "node-0", 0.93)
        .to_proto()
        .encode_to_vec();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let probe = || async {
            let mut c = MetricsServiceClient::connect(format!("http://{addr}"))
                .await
                .ok()?;
            c.export(AgentPush::new("conns", "probe", 0.93).to_proto())
                .await
                .ok()
        };
        let page = move || async move {
            tokio::task::spawn_blocking(move || get(telemetry, "/metrics").text())
                .await
                .unwrap()
        };
        // Two connections, each proven accepted by a completed call, hold both slots; a
        // third evicts the one idle the longest and is served.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(open_grpc_conn(addr, &msg).await.expect("within the cap"));
        }
        assert!(
            probe().await.is_some(),
            "a new connection evicts an idle one"
        );
        let evicted =
            "ingero_fleet_connections_closed_total{listener=\"otlp/grpc\",reason=\"evicted\"}";
        assert_eq!(prom_value(&page().await, evicted), Some(1.0));
        drop(idle);
        // Two connections with a call in service hold both slots: a third is closed at
        // accept, its call fails, and the refusal is counted.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let open = "ingero_fleet_connections_open{listener=\"otlp/grpc\"}";
        while prom_value(&page().await, open) != Some(0.0) {
            assert!(
                std::time::Instant::now() < deadline,
                "closed connections still open"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut busy = Vec::new();
        for _ in 0..2 {
            busy.push(busy_grpc_conn(addr, &msg).await.expect("within the cap"));
        }
        // Both calls are in service once a further call is shed (max_concurrent_requests
        // is 2 and a call holds its permit while in service).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            // A further call can overtake a busy call's headers and take the second
            // permit: that busy call is then shed, not in service. Open another instead.
            for i in 0..busy.len() {
                let answered = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(
                        std::pin::Pin::new(&mut busy[i].response)
                            .poll(cx)
                            .is_ready(),
                    )
                })
                .await;
                if answered {
                    drop(busy.remove(i));
                    busy.insert(i, busy_grpc_conn(addr, &msg).await.expect("within the cap"));
                }
            }
            let mut ready = busy[0]._client.clone().ready().await.unwrap();
            let (response, mut body) = ready.send_request(export_request(addr), false).unwrap();
            // A shed call may be answered and its stream closed before the body is sent.
            let _ = body.send_data(bytes::Bytes::from(grpc_frame(&msg)), true);
            let resp = response.await.unwrap();
            if resp.headers().get("grpc-status").is_some_and(|v| v == "14") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the calls never got in service"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            open_grpc_conn(addr, &msg).await.is_none(),
            "a third connection was served"
        );
        let tel = page().await;
        assert!(
            tel.lines()
                .any(|l| l.starts_with("ingero_fleet_rejected_requests_total")
                    && l.contains("max_connections")
                    && l.contains("grpc")),
            "{tel}"
        );
        // The busy calls complete; closing one frees its slot.
        let mut first = busy.remove(0);
        let frame = grpc_frame(&msg);
        first
            .body
            .send_data(
                bytes::Bytes::copy_from_slice(&frame[frame.len() / 2..]),
                true,
            )
            .unwrap();
        let resp = first.response.await.unwrap();
        assert_eq!(resp.status(), 200);
        first.task.abort();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if probe().await.is_some() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "slot never freed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(busy);
    });
}

/// One keep-alive push on `s`; true when it was answered 200.
fn keep_alive_push(s: &mut TcpStream, body: &str) -> bool {
    let req = format!(
        "POST /v1/metrics?cluster_id=conns HTTP/1.1\r\nHost: fleet\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => buf[..n].starts_with(b"HTTP/1.1 200"),
        _ => false,
    }
}

/// Start a keep-alive push on `s` with only half its body: the request is in service.
fn start_push(s: &mut TcpStream, body: &str) {
    let req = format!(
        "POST /v1/metrics?cluster_id=conns HTTP/1.1\r\nHost: fleet\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..body.len() / 2]
    );
    s.write_all(req.as_bytes()).unwrap();
}

/// Finish a push begun by [`start_push`]; true when it was answered 200.
fn finish_push(s: &mut TcpStream, body: &str) -> bool {
    if s.write_all(&body.as_bytes()[body.len() / 2..]).is_err() {
        return false;
    }
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => buf[..n].starts_with(b"HTTP/1.1 200"),
        _ => false,
    }
}

#[test]
fn http_connections_beyond_max_connections_evict_an_idle_one_or_are_closed_at_accept() {
    let cfg = test_config("1s", &[]).replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_connections: 2\n",
    );
    assert!(cfg.contains("max_connections: 2"), "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    let body = AgentPush::new("conns", "node-0", 0.93).to_json();
    let conn = || {
        let s = TcpStream::connect(f.http()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let series = |name: &str, labels: &str| {
        let page = get(f.telemetry(), "/metrics").text();
        prom_value(&page, &format!("{name}{{listener=\"otlp/http\"{labels}}}"))
            .unwrap_or_else(|| panic!("{name} missing:\n{page}"))
    };

    // Two connections with a push in service hold both slots: a third is closed at
    // accept, and the refusal is counted.
    let mut held = vec![conn(), conn()];
    for s in &mut held {
        start_push(s, &body);
    }
    let open = wait_for(Duration::from_secs(10), || {
        (series("ingero_fleet_connections_open", "") == 2.0).then_some(())
    });
    assert!(open.is_some(), "the two connections were not served");
    let mut third = conn();
    assert!(
        !keep_alive_push(&mut third, &body),
        "a third connection was served"
    );
    assert_eq!(
        series(
            "ingero_fleet_connections_refused_total",
            ",reason=\"max_connections\""
        ),
        1.0
    );
    assert_eq!(series("ingero_fleet_connections_accepted_total", ""), 2.0);
    // The held pushes complete.
    for s in &mut held {
        assert!(finish_push(s, &body), "a held push failed");
    }
    // Both are idle now: a new connection evicts the one idle the longest and is served.
    let mut fourth = conn();
    assert!(
        keep_alive_push(&mut fourth, &body),
        "no idle connection evicted"
    );
    assert_eq!(
        series(
            "ingero_fleet_connections_closed_total",
            ",reason=\"evicted\""
        ),
        1.0
    );
    assert!(
        !keep_alive_push(&mut held[0], &body),
        "the evicted connection still served"
    );
    assert!(keep_alive_push(&mut held[1], &body));
    let served = wait_for(Duration::from_secs(10), || {
        (series("ingero_fleet_connections_open", "") == 2.0).then_some(())
    });
    assert!(served.is_some(), "the cap of 2 was not kept");
}

#[test]
fn http_keep_alive_connections_idle_past_idle_timeout_are_closed() {
    let cfg = test_config("1s", &[]).replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        idle_timeout: 1s\n        read_header_timeout: 60s\n",
    );
    assert!(cfg.contains("idle_timeout: 1s"), "{cfg}");
    let f = Fleet::start_with(&cfg, &[]);
    let body = AgentPush::new("conns", "node-0", 0.93).to_json();
    let mut s = TcpStream::connect(f.http()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(keep_alive_push(&mut s, &body));
    // Pushes within the limit keep the connection.
    std::thread::sleep(Duration::from_millis(300));
    assert!(keep_alive_push(&mut s, &body), "closed before idle_timeout");
    // Then idle: the server closes it (EOF) before this read's 20 s timeout, which only
    // idle_timeout can do (read_header_timeout is 60 s).
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        other => panic!("expected the server to close the idle connection, got {other:?}"),
    }
    let page = get(f.telemetry(), "/metrics").text();
    assert_eq!(
        prom_value(
            &page,
            "ingero_fleet_connections_open{listener=\"otlp/http\"}"
        ),
        Some(0.0),
        "{page}"
    );
}
