//! `fleet-sim demo` as a user runs it: the binary starts the real Fleet service (embedded
//! default config) and the 64-node cluster, prints the live-view URL and each event as it
//! happens, keeps running after the catch (the view still serves, the cost panel prices the
//! late rank's barrier wait), shows the straggler's clear, and on SIGINT stops with the
//! report. (`--auto-ports` so parallel test runs do not collide on the default ports.) The
//! demo's own clock decides when things happen; the waits here only guard against a hang.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A hang guard, not a timing assertion: the demo's events come within about 80 s.
const HANG_GUARD: Duration = Duration::from_secs(600);

/// A plain HTTP/1.1 GET on loopback: (status, body).
fn get(host: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// The JSON object in a (possibly chunked) body.
fn json_of(body: &str) -> serde_json::Value {
    let start = body.find('{').expect("a JSON object");
    let end = body.rfind('}').expect("a JSON object");
    serde_json::from_str(&body[start..=end]).unwrap()
}

#[test]
fn demo_stays_up_after_the_catch_shows_the_clear_and_reports_on_sigint() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-sim"))
        .args(["demo", "--auto-ports"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |what: &str| -> String {
        loop {
            match rx.recv_timeout(HANG_GUARD) {
                Ok(line) => {
                    seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(e) => panic!("no line with {what:?} ({e}); so far:\n{}", seen.join("\n")),
            }
        }
    };

    let view = wait_for("live view:");
    let view = view
        .trim()
        .strip_prefix("live view:")
        .unwrap()
        .trim()
        .to_string();
    assert!(
        view.starts_with("http://127.0.0.1:") && view.ends_with("/view/"),
        "{view}"
    );
    let admin = view
        .trim_start_matches("http://")
        .trim_end_matches("/view/")
        .to_string();
    wait_for("quorum met: Fleet serves threshold 0.");
    // The catch: both sides flag node 23, Fleet names rank 41 (in whichever order).
    let mut caught = [false; 3];
    while !caught.iter().all(|c| *c) {
        let line = wait_for("");
        caught[0] |= line.contains("FLEET  gpu-node-00023 flagged as a straggler");
        caught[1] |= line.contains("AGENT  gpu-node-00023 classifies itself");
        caught[2] |= line.contains("NCCL rank 41 named: ");
        assert!(!line.contains("(false positive)"), "{line}");
    }

    // After the catch the process is still up and serving the view and its data.
    assert!(child.try_wait().unwrap().is_none(), "the demo exited");
    let (status, page) = get(&admin, "/view/");
    assert_eq!(status, 200, "{page}");
    let (status, body) = get(&admin, "/api/v1/view?cluster_id=demo");
    assert_eq!(status, 200, "{body}");
    let v = json_of(&body);
    // The nodes carry a GPU model and a provider: the late rank's barrier wait has a price.
    let cost = &v["waiting_cost"][0];
    assert!(
        cost["barrier_per_hour"].as_f64().unwrap_or(0.0) > 0.0,
        "no cost: {cost}"
    );
    assert_eq!(cost["currency"], "USD", "{cost}");

    // The straggler recovers on the scenario's schedule; both sides clear it.
    wait_for("FLEET  gpu-node-00023 no longer flagged");
    assert!(child.try_wait().unwrap().is_none(), "the demo exited");

    // SIGINT: a clean stop with the report.
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let all = format!("{}\n{}", seen.join("\n"), rest.join("\n"));
    assert!(status.success(), "exit {status:?}\n{all}\n{stderr}");
    assert!(
        all.contains("stragglers: Fleet 1/1") && all.contains("agent 1/1"),
        "{all}"
    );
    assert!(all.contains("false positives: Fleet 0 of "), "{all}");
    assert!(
        all.contains("NCCL rank 41 (80 ms every 1 steps): named "),
        "{all}"
    );
    assert!(all.contains(" (within 10 %)"), "{all}");
    assert!(
        all.contains("demo: straggler and late rank caught"),
        "{all}"
    );
}
