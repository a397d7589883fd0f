//! The remediation socket: one consumer at a time, drops counted, a consumer that stops
//! reading is closed once a write misses the 50 ms deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ingero_agent::events_out::uds::UdsServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

async fn wait_client(uds: &UdsServer, connections: u64) {
    let start = Instant::now();
    while uds.stats().connections.load(Ordering::Relaxed) < connections || !uds.has_client().await {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn no_consumer_drops_and_a_new_consumer_replaces_the_old() {
    let dir = native::TempDir::new("uds");
    let path = dir.path().join("s.sock");
    let uds = UdsServer::bind(&path, None).unwrap();
    assert!(!uds.send_line(b"{\"type\":\"x\"}\n").await);
    assert_eq!(uds.stats().no_client.load(Ordering::Relaxed), 1);

    let first = tokio::net::UnixStream::connect(&path).await.unwrap();
    wait_client(&uds, 1).await;
    let second = tokio::net::UnixStream::connect(&path).await.unwrap();
    wait_client(&uds, 2).await;
    assert!(uds.send_line(b"{\"type\":\"straggler_state\"}\n").await);
    let mut line = String::new();
    BufReader::new(second).read_line(&mut line).await.unwrap();
    assert_eq!(line, "{\"type\":\"straggler_state\"}\n");
    let mut rest = Vec::new();
    let mut first = first;
    let n = tokio::time::timeout(Duration::from_secs(2), first.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        n, 0,
        "the replaced consumer was closed without receiving anything"
    );
    uds.shutdown().await;
}

#[tokio::test]
async fn a_consumer_that_stops_reading_is_dropped_after_the_deadline() {
    let dir = native::TempDir::new("uds-stuck");
    let path = dir.path().join("s.sock");
    let uds = UdsServer::bind(&path, None).unwrap();
    let _stuck = tokio::net::UnixStream::connect(&path).await.unwrap();
    wait_client(&uds, 1).await;
    let line = vec![b'x'; 64 * 1024];
    let mut delivered = 0;
    for _ in 0..200 {
        if !uds.send_line(&line).await {
            break;
        }
        delivered += 1;
    }
    assert!(delivered > 0, "the socket buffer took some lines first");
    assert_eq!(uds.stats().write_error.load(Ordering::Relaxed), 1);
    assert!(!uds.has_client().await, "the stuck consumer was closed");
    // After it is closed, messages are dropped as having no consumer, immediately.
    assert!(!uds.send_line(b"x\n").await);
    assert_eq!(uds.stats().no_client.load(Ordering::Relaxed), 1);
}
