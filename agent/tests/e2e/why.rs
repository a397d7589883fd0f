//! "Why is this node slow", end to end on real tracepoints (root only; skips otherwise): the
//! agent binary records a training loop on the fake CUDA libraries (`tests/c/why_workload.c`)
//! into its store, with the host layer from the scheduler and block tracepoints, and
//! `ingero-agent explain` reads the store:
//! - a clean node (the loop alone on its CPU) has no causal chain;
//! - a CPU hog pinned to the loop's CPU half-way through makes explain name CPU contention
//!   on that node;
//! - synchronous 256 KiB `O_DIRECT | O_DSYNC` writes half-way through, each step writing
//!   for about as long as the rest of the step took (whatever the disk's speed), make it
//!   name block I/O (on a busy machine, possibly with CPU contention beside it: each write's
//!   completion wakes the loop, which then waits for its CPU).
//!
//! The scenarios run one after the other (each pins its processes at nice -20 to one CPU,
//! so the rest of a busy machine barely touches it). About 40 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use native::{TempDir, build_why_workload, is_root, pinned_cpu, pinned_cpu_lock, query};

const BIN: &str = env!("CARGO_BIN_EXE_ingero-agent");

/// Clean seconds before the disturbance, then seconds with it.
const CLEAN_S: u64 = 5;
const DISTURBED_S: u64 = 6;

fn spawn_pinned(bin: &Path, args: &[&str]) -> Child {
    let mut c = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for "started": pinned and at its priority.
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "started");
    c
}

struct Agent {
    child: Child,
    log: PathBuf,
}

fn start_agent(dir: &Path, node: &str, db: &Path, pid: u32) -> Agent {
    let log = dir.join(format!("agent-{node}.log"));
    let child = Command::new(BIN)
        .args(["--store", "--store-path"])
        .arg(db)
        .args([
            "--node",
            node,
            "--pid",
            &pid.to_string(),
            "--probe-library-root",
        ])
        .arg(dir)
        .args([
            "--no-nccl",
            "--libnccl-discovery-interval",
            "1s",
            "--fleet-provider",
            "none",
            "--fleet-persist-path",
        ])
        .arg(dir.join(format!("baseline-{node}.json")))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Agent { child, log }
}

impl Agent {
    /// SIGTERM, wait for the exit, return the log.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let status = self.child.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert!(status.success(), "agent exit {status:?}\n{log}");
        log
    }
}

/// Events stored so far (0 while the agent is still creating the file).
fn stored_events(db: &Path) -> i64 {
    let out = Command::new(BIN)
        .args(["query", "--json", "--db"])
        .arg(db)
        .arg("SELECT count(*) AS n FROM events")
        .output()
        .unwrap();
    if !out.status.success() {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v[0]["n"].as_i64().unwrap_or(0)
}

fn explain(db: &Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["explain", "--json", "--since", "10m", "--db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn explain_text(db: &Path) -> String {
    let out = Command::new(BIN)
        .args(["explain", "--since", "10m", "--db"])
        .arg(db)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

enum Disturbance {
    None,
    Hog,
    Writes,
}

/// Run one node: the loop, the agent on it, then the disturbance after `CLEAN_S` seconds of
/// recorded steps. Returns the store's path and the agent's log.
fn run_node(dir: &Path, workload: &Path, node: &str, d: Disturbance) -> (PathBuf, String) {
    let db = dir.join(format!("{node}.db"));
    let total = 30 + CLEAN_S + DISTURBED_S; // the loop outlives the agent's start-up
    let total_s = total.to_string();
    let file = dir.join(format!("{node}.ckpt"));
    let file_s = file.to_str().unwrap().to_string();
    // Writes start when the test creates `<file>.go`.
    let mut work = match d {
        Disturbance::Writes => spawn_pinned(
            workload,
            &["train", pinned_cpu(), &total_s, "3000", &file_s],
        ),
        _ => spawn_pinned(workload, &["train", pinned_cpu(), &total_s, "3000"]),
    };
    let agent = start_agent(dir, node, &db, work.id());
    // Recording has started once the loop's synchronizes reach the store.
    let start = Instant::now();
    while stored_events(&db) < 50 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no events stored\n{}",
            std::fs::read_to_string(&agent.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(CLEAN_S));
    let mut hog = None;
    match d {
        Disturbance::None => std::thread::sleep(Duration::from_secs(DISTURBED_S)),
        Disturbance::Hog => {
            hog = Some(spawn_pinned(
                workload,
                &["hog", pinned_cpu(), &DISTURBED_S.to_string()],
            ));
            std::thread::sleep(Duration::from_secs(DISTURBED_S));
        }
        Disturbance::Writes => {
            // Tell the loop to start writing now: it checks the file's presence.
            std::fs::write(dir.join(format!("{node}.ckpt.go")), b"").unwrap();
            std::thread::sleep(Duration::from_secs(DISTURBED_S));
        }
    }
    let log = agent.stop();
    let _ = work.kill();
    let _ = work.wait();
    if let Some(mut h) = hog {
        let _ = h.kill();
        let _ = h.wait();
    }
    (db, log)
}

#[test]
fn explain_names_cpu_contention_and_block_io_and_nothing_on_a_clean_node() {
    if !is_root() {
        eprintln!(
            "SKIP explain_names_cpu_contention_and_block_io_and_nothing_on_a_clean_node: tracepoints and uprobes need root"
        );
        return;
    }
    let _pinned = pinned_cpu_lock();
    let dir = TempDir::new("why");
    let fakes = native::build_fakes(dir.path());
    let workload = build_why_workload(dir.path(), &fakes);

    for (node, d) in [
        ("clean-node", Disturbance::None),
        ("cpu-node", Disturbance::Hog),
        ("io-node", Disturbance::Writes),
    ] {
        let (db, log) = run_node(dir.path(), &workload, node, d);
        // Nothing was lost between the probes and the store.
        assert!(log.contains("dropped_queue_full=0"), "{log}");
        assert!(log.contains("dropped_write_error=0"), "{log}");
        let host = query(
            &db,
            "SELECT count(*) AS n FROM event_aggregates WHERE source = 3 AND op = 1 AND count > 0",
        );
        assert!(
            host[0]["n"].as_i64().unwrap() > 5,
            "no scheduler aggregates: {host}"
        );
        let r = explain(&db);
        let chains = r["chains"].as_array().unwrap();
        let text = explain_text(&db);
        eprintln!("--- {node}\n{text}");
        match node {
            "clean-node" => assert!(chains.is_empty(), "{text}"),
            "cpu-node" => {
                assert_eq!(chains.len(), 1, "{text}");
                assert_eq!(chains[0]["node"], node);
                assert_eq!(chains[0]["causes"][0], "cpu_contention", "{text}");
                assert!(
                    !chains[0]["causes"]
                        .as_array()
                        .unwrap()
                        .contains(&serde_json::json!("block_io")),
                    "{text}"
                );
            }
            _ => {
                assert_eq!(chains.len(), 1, "{text}");
                assert_eq!(chains[0]["node"], node);
                let causes = chains[0]["causes"].as_array().unwrap();
                assert!(causes.contains(&serde_json::json!("block_io")), "{text}");
                let io = query(
                    &db,
                    "SELECT sum(count) AS ops, sum(sum_arg0) AS bytes FROM event_aggregates WHERE source = 5 AND op = 2",
                );
                assert!(io[0]["bytes"].as_i64().unwrap() >= 1 << 20, "{io}");
            }
        }
        // The chain was saved in the store.
        let saved = query(&db, "SELECT count(*) AS n FROM causal_chains");
        assert_eq!(saved[0]["n"].as_i64().unwrap() as usize, chains.len());
    }
}
