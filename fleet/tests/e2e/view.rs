//! The live cluster view against the real binary: the page and its files on the admin
//! listener, the JSON of `/api/v1/view` (shape, straggler-since, history, NCCL peer lag,
//! cost of waiting), the admin API's tokens and cluster scopes applied to it, and the page
//! itself in headless Chromium (ignored by default: `scripts/test-all.sh` installs
//! Chromium and playwright-core, then runs it with `--ignored`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::Value;
use testkit::{AgentPush, NcclPoint, nccl_export_json};

const CLUSTER: &str = "view";
const MODEL: &str = "NVIDIA H100 80GB HBM3";
const NODES: usize = 8;
/// The NCCL rank that enters every collective 290 ms late.
const LATE_RANK: i64 = 5;

fn node(i: usize) -> String {
    format!("gpu-node-{i:02}")
}

/// The cause the straggler's agent sends: hostile text in every field the page shows.
const HOSTILE_SUMMARY: &str =
    "cudaStreamSynchronize 3x slower <img src=x onerror=\"window.__pwned=1\">";
const HOSTILE_ROOT: &str = "CPU contention </td><script>window.__pwned=2</script>";

fn episode_id(node_id: &str) -> String {
    format!("{node_id}:1700000000000")
}

/// This project's agent's straggler event (value 1) with its episode's causal chains.
fn push_straggler_event(addr: SocketAddr, node_id: &str) {
    let chains = serde_json::json!([{
        "id": format!("{node_id}:cpu-cudaStreamSynchronize"),
        "severity": "HIGH",
        "causes": ["cpu_contention"],
        "summary": HOSTILE_SUMMARY,
        "root_cause": HOSTILE_ROOT,
        "recommendations": ["Pin the training process to dedicated cores"],
        "cuda_op": "cudaStreamSynchronize",
        "cuda_p99_us": 4200,
        "tail_ratio": 12.5
    }])
    .to_string();
    let s = |k: &str, v: &str| serde_json::json!({"key": k, "value": {"stringValue": v}});
    let body = serde_json::json!({"resourceMetrics": [{
        "resource": {"attributes": [s("ingero.node.id", node_id), s("ingero.cluster.id", CLUSTER)]},
        "scopeMetrics": [{
            "scope": {"name": "ingero.health", "version": "0.10.0"},
            "metrics": [{
                "name": "ingero.node.straggler_event",
                "unit": "1",
                "gauge": {"dataPoints": [{
                    "timeUnixNano": now_ns().to_string(),
                    "asInt": "1",
                    "attributes": [
                        s("ingero.detection_mode", "fleet"),
                        s("dominant_signal", "cpu"),
                        s("ingero.event.id", "6f1c0d7e-0000-4000-8000-000000000001"),
                        s("ingero.causal_chain_id", &episode_id(node_id)),
                        s("ingero.causal_chains", &chains),
                    ]
                }]}
            }]
        }]
    }]});
    let r = push_json(addr, CLUSTER, &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("rejected"), "{}", r.text());
}

/// One health push per node; `straggler` scores far below its peers and its agent sends
/// its straggler event with the cause.
fn push_health(addr: SocketAddr, straggler: usize) {
    push_straggler_event(addr, &node(straggler));
    for i in 0..NODES {
        let score = if i == straggler {
            0.55
        } else {
            0.95 - 0.002 * i as f64
        };
        let p = AgentPush::new(CLUSTER, &node(i), score)
            .gpu(MODEL, 8)
            .provider("aws");
        let r = push_json(addr, CLUSTER, &p.to_json());
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// 12 all-reduce steps of 8 ranks (one per node) 1 s apart; [`LATE_RANK`] is 290 ms late.
fn push_nccl(addr: SocketAddr) {
    let base = now_ns() - 20_000_000_000;
    for step in 0..12u64 {
        for rank in 0..NODES as i64 {
            let late = if rank == LATE_RANK { 290_000_000 } else { 0 };
            let mut p = NcclPoint::all_reduce(
                "3f9a0c1d2e4b5a69",
                rank,
                NODES as i64,
                12.5,
                base + step * 1_000_000_000 + late,
            );
            p.op_seq = Some(step as i64);
            let body = nccl_export_json(Some(CLUSTER), &node(rank as usize), &[p]);
            let r = post(
                addr,
                "/v1/metrics",
                "application/json",
                body.as_bytes(),
                &[],
            );
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
}

/// Keeps every node pushing (nodes expire after 3 push intervals) with the straggler the
/// test currently wants, until dropped.
struct Pusher {
    straggler: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pusher {
    fn start(addr: SocketAddr, straggler: usize) -> Pusher {
        let s = Arc::new(AtomicUsize::new(straggler));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (s.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                push_health(addr, s2.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        Pusher {
            straggler: s,
            stop,
            thread: Some(thread),
        }
    }

    fn set_straggler(&self, i: usize) {
        self.straggler.store(i, Ordering::Relaxed);
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fleet_with(config: &str) -> Fleet {
    Fleet::start_with(config, &[])
}

fn view_config() -> String {
    test_config("1s", &["nccl_peer_lag", "provider_lookup"])
}

fn view_json(admin: SocketAddr) -> Resp {
    get(admin, &format!("/api/v1/view?cluster_id={CLUSTER}"))
}

fn stragglers(v: &Value) -> Vec<String> {
    v["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|n| n["straggler"] == true)
                .map(|n| n["node_id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The view once it shows `straggler` (alone), the late NCCL rank and a straggler cost.
fn wait_for_view(f: &Fleet, straggler: usize) -> Value {
    let want = vec![node(straggler)];
    wait_for(Duration::from_secs(30), || {
        let r = view_json(f.admin_api());
        if r.status != 200 {
            return None;
        }
        let v = r.json();
        let late = v["peer_lag"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["ranks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["rank"] == LATE_RANK && r["named"] == true)
            })
        });
        let cost = v["waiting_cost"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["stragglers"][0]["node_id"] == want[0]));
        (stragglers(&v) == want && late && cost).then_some(v)
    })
    .unwrap_or_else(|| {
        panic!(
            "the view never showed {} with the late rank and its cost: {}\nlog:\n{}",
            want[0],
            view_json(f.admin_api()).text(),
            f.log_text()
        )
    })
}

#[test]
fn view_page_and_json_show_the_straggler_its_since_history_nccl_and_cost() {
    let f = fleet_with(&view_config());
    let admin = f.admin_api();

    // Before anything is published: the page is served, the cluster is unknown.
    let page = get(admin, "/view/");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("Content-Security-Policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert!(page.text().contains("/view/view.js"));
    for (path, ct) in [
        ("/view", "text/html; charset=utf-8"),
        ("/view/view.js", "text/javascript; charset=utf-8"),
        ("/view/view.css", "text/css; charset=utf-8"),
    ] {
        let r = get(admin, path);
        assert_eq!(
            (r.status, r.header("Content-Type")),
            (200, Some(ct)),
            "{path}"
        );
        assert!(!r.body.is_empty());
    }
    assert_eq!(get(admin, "/view/nope.js").status, 404);
    assert_eq!(view_json(admin).status, 404);
    // The view lives on the admin listener only.
    assert_eq!(get(f.agent_api(), "/view/").status, 404);
    assert_eq!(
        get(f.agent_api(), &format!("/api/v1/view?cluster_id={CLUSTER}")).status,
        404
    );

    push_nccl(f.http());
    let pusher = Pusher::start(f.http(), 6);
    let v = wait_for_view(&f, 6);

    // The summary fields are the diagnostics page's, flattened in.
    let summary = get(admin, "/api/v1/diagnostics").json();
    let entry = summary["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cluster_id"] == CLUSTER)
        .unwrap()
        .clone();
    for key in entry.as_object().unwrap().keys() {
        assert!(v.get(key).is_some(), "view lacks summary key {key}: {v}");
    }
    assert_eq!(v["cluster_id"], CLUSTER);
    assert!(v["threshold"].as_f64().unwrap() > 0.55);
    assert_eq!(v["quorum_met"], true);
    assert_eq!(v["panic_mode"], false);
    assert_eq!(v["node_count"], NODES);
    assert_eq!(v["nodes"].as_array().unwrap().len(), NODES);

    // Straggler-since: set for the straggler, within the published history, null otherwise.
    let published = v["published_at_unix_nano"].as_u64().unwrap();
    let history = v["history"].as_array().unwrap();
    assert!(!history.is_empty());
    let first = history[0]["t_unix_nano"].as_u64().unwrap();
    for n in v["nodes"].as_array().unwrap() {
        if n["node_id"] == node(6) {
            let since = n["straggler_since_unix_nano"].as_u64().unwrap();
            assert!(first <= since && since <= published, "{n}");
        } else {
            assert_eq!(n["straggler_since_unix_nano"], Value::Null, "{n}");
        }
    }
    // The cause beside the straggler, as its agent sent it (text, unescaped: the page
    // escapes); none for the others.
    for n in v["nodes"].as_array().unwrap() {
        if n["node_id"] == node(6) {
            let c = &n["cause"];
            assert_eq!(c["causal_chain_id"], episode_id(&node(6)), "{n}");
            assert_eq!(c["severity"], "HIGH");
            assert_eq!(c["summary"], HOSTILE_SUMMARY);
            assert_eq!(c["root_cause"], HOSTILE_ROOT);
            assert_eq!(c["chains"], 1);
        } else {
            assert_eq!(n["cause"], Value::Null, "{n}");
        }
    }
    let last = history.last().unwrap();
    assert_eq!(last["t_unix_nano"].as_u64(), Some(published));
    assert_eq!(last["threshold"], v["threshold"]);
    assert_eq!(last["straggler_count"], 1);
    assert!(
        history
            .windows(2)
            .all(|w| w[0]["t_unix_nano"].as_u64() < w[1]["t_unix_nano"].as_u64())
    );

    // NCCL: one stream, every rank in order, only the late rank named, ~290 ms.
    let streams = v["peer_lag"].as_array().unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    let s = &streams[0];
    assert_eq!(s["comm_id_hash"], "3f9a0c1d2e4b5a69");
    assert_eq!(s["nranks"], NODES);
    let ranks = s["ranks"].as_array().unwrap();
    let order: Vec<u64> = ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(order, (0..NODES as u64).collect::<Vec<_>>());
    for r in ranks {
        let named = r["rank"] == LATE_RANK;
        assert_eq!(r["named"], named, "{r}");
        if named {
            let lag = r["median_lag_ms"].as_f64().unwrap();
            assert!((lag - 290.0).abs() <= 5.0, "{r}");
            assert_eq!(r["node_id"], node(LATE_RANK as usize));
        }
    }

    // Cost of waiting: the straggler's 8 GPUs at the built-in ec2 H100 rate.
    let cost = &v["waiting_cost"][0];
    assert_eq!(cost["currency"], "USD");
    let row = &cost["stragglers"][0];
    assert_eq!(row["affected_gpus"], 8);
    assert!(
        (row["per_hour"].as_f64().unwrap() - 8.0 * 12.29).abs() < 1e-6,
        "{row}"
    );
    assert_eq!(cost["stragglers_per_hour"], row["per_hour"]);

    // The data changes: node 6 recovers, node 2 falls behind; the view follows and the
    // new straggler's streak starts after the old one's.
    let since6 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == node(6))
        .unwrap()["straggler_since_unix_nano"]
        .as_u64()
        .unwrap();
    pusher.set_straggler(2);
    let v2 = wait_for_view(&f, 2);
    let since2 = v2["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == node(2))
        .unwrap()["straggler_since_unix_nano"]
        .as_u64()
        .unwrap();
    assert!(since2 > since6);
    assert!(v2["generation"].as_u64() > v["generation"].as_u64());
    // Node 6's agent no longer sends: its cause expires with it; node 2's is shown.
    let cause_of = |v: &Value, i: usize| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node_id"] == node(i))
            .map(|n| n["cause"].clone())
            .unwrap_or(Value::Null)
    };
    wait_for(Duration::from_secs(15), || {
        let v = view_json(admin).json();
        (cause_of(&v, 6).is_null() && cause_of(&v, 2)["causal_chain_id"] == episode_id(&node(2)))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("node 6's cause never cleared: {}", view_json(admin).text()));
    drop(pusher);

    // Bad requests: clear errors, nothing echoed.
    for (q, status, msg) in [
        ("", 400, "missing query parameter cluster_id"),
        ("?cluster_id=", 400, "cluster_id is empty"),
        (
            "?cluster_id=a%0Ab",
            400,
            "cluster_id contains a control character or line break",
        ),
        ("?cluster_id=never-seen", 404, "unknown cluster"),
    ] {
        let r = get(admin, &format!("/api/v1/view{q}"));
        assert_eq!(r.status, status, "{q}");
        assert_eq!(r.json(), serde_json::json!({ "error": msg }), "{q}");
    }
    let r = post(admin, "/api/v1/view", "application/json", b"{}", &[]);
    assert_eq!((r.status, r.header("Allow")), (405, Some("GET")));
    let r = post(admin, "/view/", "text/plain", b"x", &[]);
    assert_eq!((r.status, r.header("Allow")), (405, Some("GET")));

    // Counted under their own endpoint labels (component families are on the exporter).
    let m = get(f.prometheus(), "/metrics").text();
    let count = |e: &str, code: &str| {
        prom_value(
            &m,
            &format!("ingero_threshold_api_requests_total{{endpoint=\"{e}\",code=\"{code}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(count("view", "200") >= 2.0, "{m}");
    assert!(count("view_page", "200") >= 4.0);
    assert_eq!(count("view_page", "405"), 1.0);
}

const TOKEN_TEAM: &str = "tokT-3b1d9e7a5c2f4a6b8d0e";
const TOKEN_OPS: &str = "tokO-8e6c4a2b0d9f7e5c3a1b";
const TOKEN_OTHER: &str = "tokX-1a2b3c4d5e6f7a8b9c0d";

/// The admin listener behind `ingero_auth`; pushes stay open (they are not what is tested).
fn auth_config(dir: &Path) -> String {
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "- name: team\n  token: {TOKEN_TEAM}\n  clusters: [{CLUSTER}]\n\
             - name: ops\n  token: {TOKEN_OPS}\n  clusters: ['*']\n\
             - name: other\n  token: {TOKEN_OTHER}\n  clusters: [elsewhere]\n"
        ),
    )
    .unwrap();
    let cfg = view_config()
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!(
                "    admin_endpoint: 127.0.0.1:0\n    auth: {{ authenticator: ingero_auth }}\n  \
                 ingero_auth:\n    tokens_file: {}\n",
                tokens.display()
            ),
        )
        .replace(
            "extensions: [ingero_threshold, health_check]",
            "extensions: [ingero_auth, ingero_threshold, health_check]",
        );
    assert!(cfg.contains("authenticator: ingero_auth"), "{cfg}");
    cfg
}

#[test]
fn view_data_needs_the_admin_token_and_follows_its_cluster_scope() {
    let dir = tempdir::TempDir::new("view-auth");
    let f = fleet_with(&auth_config(dir.path()));
    let admin = f.admin_api();
    let pusher = Pusher::start(f.http(), 6);
    let path = format!("/api/v1/view?cluster_id={CLUSTER}");
    wait_for(Duration::from_secs(30), || {
        let r = get_as(admin, Some(TOKEN_OPS), &path);
        (r.status == 200 && stragglers(&r.json()) == [node(6)]).then_some(())
    })
    .unwrap_or_else(|| panic!("{}", get_as(admin, Some(TOKEN_OPS), &path).text()));
    drop(pusher);

    // The page holds no data: served without a token, to anyone who reaches the listener.
    for p in ["/view/", "/view/view.js", "/view/view.css"] {
        assert_eq!(get_as(admin, None, p).status, 200, "{p}");
    }
    // Its data is not.
    let r = get_as(admin, None, &path);
    assert_eq!(r.status, 401);
    assert!(r.header("WWW-Authenticate").is_some());
    assert_eq!(
        get_as(admin, Some("tokW-not-a-token-at-all"), &path).status,
        401
    );
    // A token scoped to the cluster reads it, in full.
    let team = get_as(admin, Some(TOKEN_TEAM), &path);
    assert_eq!(team.status, 200, "{}", team.text());
    let v = team.json();
    assert_eq!(stragglers(&v), [node(6)]);
    assert!(v["history"].as_array().is_some_and(|h| !h.is_empty()));
    // A token scoped elsewhere cannot tell this cluster from one that never existed.
    let other = get_as(admin, Some(TOKEN_OTHER), &path);
    let never = get_as(
        admin,
        Some(TOKEN_OTHER),
        "/api/v1/view?cluster_id=never-existed",
    );
    assert_eq!(observable(&other), observable(&never));
    assert_eq!(other.status, 404);
    assert!(!other.text().contains("gpu-node"));
    // The cluster picker's list (the diagnostics summary) needs a "*" token; the view
    // always needs a cluster id.
    assert_eq!(
        get_as(admin, Some(TOKEN_TEAM), "/api/v1/diagnostics?limit=1000").status,
        403
    );
    assert_eq!(get_as(admin, Some(TOKEN_TEAM), "/api/v1/view").status, 400);
    assert_eq!(
        get_as(admin, Some(TOKEN_OPS), "/api/v1/diagnostics?limit=1000").status,
        200
    );
    // No token in any log line.
    let log = f.log_text();
    for t in [TOKEN_TEAM, TOKEN_OPS, TOKEN_OTHER] {
        assert!(!log.contains(t), "token in the log");
    }
}

/// Where the browser test finds Chromium and playwright-core (installed by
/// `scripts/view-browser-deps.sh`, which `scripts/test-all.sh` runs).
fn browser_deps() -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chromium = std::env::var_os("INGERO_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let pw = std::env::var_os("INGERO_PLAYWRIGHT_CORE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/view-browser/node_modules/playwright-core"));
    assert!(
        chromium.exists() && pw.join("package.json").exists(),
        "the browser test needs Chromium at {} and playwright-core at {}: run \
         scripts/view-browser-deps.sh (or set INGERO_CHROMIUM / INGERO_PLAYWRIGHT_CORE)",
        chromium.display(),
        pw.display()
    );
    (chromium, pw)
}

#[test]
#[ignore = "needs Chromium and playwright-core; scripts/test-all.sh installs them and runs it"]
fn view_in_headless_chromium_shows_the_straggler_and_follows_changes() {
    let (chromium, pw) = browser_deps();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view-browser");
    std::fs::create_dir_all(&out).unwrap();
    let f = fleet_with(&view_config());
    push_nccl(f.http());
    let pusher = Pusher::start(f.http(), 6);
    wait_for_view(&f, 6);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/view_browser.cjs");
    let url = format!(
        "http://{}/view/?cluster_id={CLUSTER}&poll=500",
        f.admin_api()
    );
    let mut child = Command::new("node")
        .arg(&script)
        .env("VIEW_URL", &url)
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_CORE", &pw)
        .env("OUT_DIR", &out)
        .env("FIRST_STRAGGLER", node(6))
        .env("SECOND_STRAGGLER", node(2))
        .env("LATE_RANK", LATE_RANK.to_string())
        .env("CAUSE_SUMMARY", HOSTILE_SUMMARY)
        .env("CAUSE_ROOT", HOSTILE_ROOT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run node (is Node.js installed?)");
    let mut stdin = Some(child.stdin.take().unwrap());
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut said = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        eprintln!("browser: {line}");
        if line == "PHASE1 OK" {
            // The data changes under the open page.
            pusher.set_straggler(2);
            wait_for_view(&f, 2);
            if let Some(mut w) = stdin.take() {
                writeln!(w, "next").unwrap();
            }
        }
        said.push(line);
    }
    let status = child.wait().unwrap();
    drop(pusher);
    assert!(status.success(), "browser script failed: {said:?}");
    assert!(said.iter().any(|l| l == "PHASE1 OK"), "{said:?}");
    assert!(said.iter().any(|l| l == "PHASE2 OK"), "{said:?}");
    for shot in ["view-straggler.png", "view-updated.png"] {
        let p = out.join(shot);
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        assert!(
            len > 10_000,
            "screenshot {} is missing or empty",
            p.display()
        );
        println!("screenshot: {}", p.display());
    }
}
