//! The binary: an agent with `--api` over a store written by the store's own code, asked by
//! `ingero-agent query|explain|export --nodes` with one node down and the agent's clock
//! shifted by the test-only flag. Exit status 3 says the answer is partial.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ingero_agent::store::schema::{op, source};
use ingero_agent::store::{EventRow, Store, StoreOptions};

const BIN: &str = env!("CARGO_BIN_EXE_ingero-agent");

fn write_store(path: &Path) -> i64 {
    let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap();
    let st = Store::start(StoreOptions::new(path, "node-a")).unwrap();
    let sink = st.sink();
    for i in 0..500i64 {
        sink.event(EventRow {
            timestamp: now - 30_000_000_000 + i * 10_000_000,
            pid: 7,
            tid: 7,
            source: source::CUDA,
            op: op::CUDA_STREAM_SYNC,
            duration: 1_000_000,
            comm: "train".into(),
            ..Default::default()
        });
    }
    st.close();
    500
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the agent and read the API's address from its log.
fn agent(dir: &Path, db: &Path) -> (Agent, String) {
    let mut c = Command::new(BIN)
        .args([
            "--synthetic",
            "--api",
            "--api-listen",
            "127.0.0.1:0",
            "--api-no-tls",
        ])
        .arg("--store-path")
        .arg(db)
        .args(["--node", "node-a", "--api-test-clock-offset-ms", "300"])
        .arg("--fleet-persist-path")
        .arg(dir.join("baseline.json"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::native::StderrLog::read(&mut c)
        .listen("", Duration::from_secs(60))
        .expect("the agent logs its API address");
    (Agent(c), addr)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn query_explain_and_export_fan_out_and_say_when_a_node_is_missing() {
    let dir = std::env::temp_dir().join(format!("ingero-fanout-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("a.db");
    let n = write_store(&db);
    let (_agent, addr) = agent(&dir, &db);
    // A port nobody listens on: bind one, note it, close it.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let nodes = format!("{addr},{down}");

    let (code, out, err) = run(&[
        "query",
        "--nodes",
        &nodes,
        "--no-tls",
        "SELECT count(*) AS n FROM events",
    ]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.starts_with("node "), "{out}");
    assert!(out.contains(&addr) && out.contains(&n.to_string()), "{out}");
    assert!(
        err.contains(&format!("FAILED: {down}: network error")),
        "{err}"
    );
    assert!(err.contains("1 of 2 nodes answered"), "{err}");
    // The agent's clock runs 300 ms ahead (the test-only flag); the estimate is within
    // half a round trip.
    let head = format!("WARNING: clock skew: {addr} (node-a) is ");
    let at = err.find(&head).unwrap_or_else(|| panic!("{err}"));
    let ms: f64 = err[at + head.len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((ms - 300.0).abs() < 10.0, "{err}");
    assert!(err[at..].contains("ms ahead of this host"), "{err}");

    // All reachable: exit 0; JSON rows carry the node.
    let (code, out, err) = run(&[
        "query",
        "--nodes",
        &addr,
        "--no-tls",
        "--json",
        "--clock-skew-threshold",
        "1s",
        "SELECT count(*) AS n FROM events",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["node"], addr.as_str());
    assert_eq!(v[0]["n"], n);
    assert!(!err.contains("WARNING"), "{err}");

    // explain and export through the same path.
    let (code, out, err) = run(&["explain", "--nodes", &nodes, "--no-tls", "--json"]);
    assert_eq!(code, 3, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["answered"][0], addr.as_str());
    assert_eq!(v["failed"][0]["node"], down.as_str());
    let trace = dir.join("trace.json");
    let (code, _, err) = run(&[
        "export",
        "--format",
        "perfetto",
        "--nodes",
        &addr,
        "--no-tls",
        "-o",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let slices = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(slices as i64, n);

    // Bad input: exit 1 with the reason, before anything is sent. 10,000 nodes (in the
    // config's fleet.nodes: that many do not fit on a command line).
    let cfg = dir.join("many.yaml");
    let mut yaml = String::from("fleet:\n  nodes:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("    - 10.9.{}.{}:1\n", i / 250, i % 250));
    }
    std::fs::write(&cfg, yaml).unwrap();
    let (code, _, err) = run(&[
        "query",
        "--config",
        cfg.to_str().unwrap(),
        "--no-tls",
        "SELECT 1",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("10000 nodes given"), "{err}");
    let (code, _, err) = run(&[
        "query",
        "--nodes",
        &addr,
        "--no-tls",
        "--since",
        "100000000h",
        "SELECT 1",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("10 years"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
