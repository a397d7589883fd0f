//! MCP through the official Python client (`scripts/agent_mcp_client.py`, the `mcp` package):
//! streamable HTTP against the server in process, stdio against the binary, both asking eight
//! agents (one with its clock 250 ms ahead, one stopped) and this node's own store.
//!
//! Needs a Python with `mcp` 2.3.0: `INGERO_MCP_PYTHON`, else `target/echo-mcp-venv/bin/python`
//! (`scripts/py-venv.sh echo-mcp-venv mcp 2.3.0` makes it). Skips with a message without one.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{AgentMcp, McpOptions};
use crate::fanout::e2e_tests::{addrs, client_config, eight, pki};
use crate::investigate::fixtures;

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("INGERO_MCP_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = root.join("target/echo-mcp-venv/bin/python");
    p.exists().then_some(p)
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/agent_mcp_client.py")
}

/// The binary cargo built beside this test executable (target/debug/ingero-agent).
fn binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("ingero-agent");
    p.exists().then_some(p)
}

fn run_client(py: &PathBuf, args: &[String]) -> Value {
    let out = Command::new(py)
        .arg(script())
        .args(args)
        .output()
        .expect("run the MCP client");
    assert!(
        out.status.success(),
        "MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

fn check(r: &Value, skewed: &str, gone: &str, what: &str) {
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        vec![
            "get_causal_chains",
            "get_overview",
            "get_trace_stats",
            "query_fleet",
            "run_sql"
        ],
        "{what}"
    );
    let sql = &r["sql"];
    assert_eq!(sql["is_error"], false, "{what}: {sql}");
    let text = sql["text"].as_str().unwrap();
    // Skew warning first, then the failed node, then the answer.
    assert!(
        text.starts_with("WARNING: clock skew: ") && text.lines().next().unwrap().contains(skewed),
        "{what}: {text}"
    );
    assert!(text.contains(&format!("FAILED: {gone}")), "{what}: {text}");
    let s = &sql["structured"];
    assert_eq!(s["rows"].as_array().unwrap().len(), 7, "{what}: {s}");
    assert_eq!(s["columns"][0], "node");
    assert_eq!(s["failed"][0]["node"], gone);
    let est = s["clock_skew"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["node"] == skewed)
        .unwrap()["offset_ms"]
        .as_f64()
        .unwrap();
    assert!((est - 250.0).abs() < 10.0, "{what}: estimated {est} ms");
    let chains = r["chains"]["structured"]["chains"].as_array().unwrap();
    assert_eq!(chains.len(), 1, "{what}: {}", r["chains"]);
    assert_eq!(chains[0]["node"], "node-7");
    assert_eq!(
        r["ops"]["structured"]["nodes"].as_object().unwrap().len(),
        7,
        "{what}"
    );
    assert_eq!(
        r["overview"]["structured"]["nodes"]
            .as_object()
            .unwrap()
            .len(),
        7,
        "{what}"
    );
    assert_eq!(r["bad_action"]["is_error"], true, "{what}");
    assert!(
        r["bad_action"]["text"]
            .as_str()
            .unwrap()
            .contains("unknown action")
    );
    // Every node refuses the write: the tool answer is an error naming the refusal.
    assert_eq!(r["hostile"]["is_error"], true, "{what}");
    assert!(
        r["hostile"]["text"].as_str().unwrap().contains("HTTP 400"),
        "{what}: {}",
        r["hostile"]
    );
    // This node's own store (node-7's).
    assert_eq!(
        r["local_overview"]["structured"]["node"], "node-7",
        "{what}"
    );
    assert_eq!(
        r["local_chains"]["structured"]["chains"][0]["node"], "node-7",
        "{what}"
    );
    assert!(r["local_sql"]["structured"]["rows"][0][0].as_i64().unwrap() > 0);
    assert!(
        !r["local_stats"]["structured"]["ops"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_client_asks_the_fleet_over_http_and_stdio() {
    let Some(py) = python() else {
        eprintln!(
            "skipped: no Python with the mcp package (set INGERO_MCP_PYTHON or run scripts/py-venv.sh echo-mcp-venv mcp 2.3.0)"
        );
        return;
    };
    let dir = fixtures::tmp_dir("mcp");
    let pki = pki(&dir);
    let mut agents = eight(&dir, &pki, Some((3, 250_000_000))).await;
    let nodes = addrs(&agents);
    let skewed = agents[2].addr.clone();
    let gone = agents.remove(5);
    let gone_addr = gone.addr.clone();
    gone.stop().await;
    let local_db = agents[5].db.clone(); // node-7
    let opts = McpOptions {
        db: local_db.clone(),
        node: "node-7".into(),
        nodes: nodes.clone(),
        fanout: crate::fanout::FanoutConfig {
            timeout: Duration::from_secs(2),
            ..client_config(&pki)
        },
        max_rows: 1000,
        query_timeout: Duration::from_secs(5),
    };

    // Streamable HTTP, in process.
    let listener = super::bind_http("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let srv = tokio::spawn(super::serve_http(AgentMcp::new(opts.clone()), listener, rx));
    let py2 = py.clone();
    let r = tokio::task::spawn_blocking(move || run_client(&py2, &["http".into(), url]))
        .await
        .unwrap();
    assert_eq!(r["server"], "ingero-agent");
    check(&r, &skewed, &gone_addr, "http");
    let _ = tx.send(true);
    let _ = srv.await;

    // stdio, the binary.
    if let Some(bin) = binary() {
        let mut args = vec![
            "stdio".to_string(),
            bin.display().to_string(),
            "mcp".into(),
            "--db".into(),
            local_db.display().to_string(),
            "--node".into(),
            "node-7".into(),
            "--nodes".into(),
            nodes.join(","),
            "--ca-cert".into(),
            pki.ca.display().to_string(),
            "--client-cert".into(),
            pki.client_cert.display().to_string(),
            "--client-key".into(),
            pki.client_key.display().to_string(),
            "--timeout".into(),
            "2s".into(),
            "--clock-skew-threshold".into(),
            "100ms".into(),
        ];
        let r = tokio::task::spawn_blocking(move || run_client(&py, &std::mem::take(&mut args)))
            .await
            .unwrap();
        check(&r, &skewed, &gone_addr, "stdio");
    } else {
        eprintln!("stdio part skipped: target/debug/ingero-agent not built");
    }
    for a in agents {
        a.stop().await;
    }
}
