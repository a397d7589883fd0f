//! Fan-out against real API servers on their own loopback addresses (127.0.0.x), each over
//! its own store written by this crate's store code, with a test PKI (mTLS).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Method;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use super::{FanoutClient, FanoutConfig, actions};
use crate::api::{ApiConfig, ApiServer, ServeOptions};
use crate::investigate::fixtures::{self, Fixture, Layout};

const MS: i64 = 1_000_000;

pub(crate) struct Pki {
    pub(crate) ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
    pub(crate) rogue_cert: PathBuf,
    pub(crate) rogue_key: PathBuf,
}

fn issuer(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(ca: &CertifiedIssuer<'static, KeyPair>, sans: Vec<String>, cn: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(sans).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

pub(crate) fn pki(dir: &Path) -> Pki {
    let ca = issuer("ingero test CA");
    let rogue_ca = issuer("someone else");
    let mut sans: Vec<String> = (1..=20).map(|i| format!("127.0.0.{i}")).collect();
    sans.push("localhost".into());
    let (server, server_key) = leaf(&ca, sans, "agent");
    let (client, client_key) = leaf(&ca, vec![], "operator");
    let (rogue, rogue_key) = leaf(&rogue_ca, vec![], "operator");
    let p = |n: &str| dir.join(n);
    std::fs::write(p("ca.pem"), ca.pem()).unwrap();
    std::fs::write(p("server.pem"), server).unwrap();
    write_private(&p("server.key"), &server_key);
    std::fs::write(p("client.pem"), client).unwrap();
    write_private(&p("client.key"), &client_key);
    std::fs::write(p("rogue.pem"), rogue).unwrap();
    write_private(&p("rogue.key"), &rogue_key);
    Pki {
        ca: p("ca.pem"),
        server_cert: p("server.pem"),
        server_key: p("server.key"),
        client_cert: p("client.pem"),
        client_key: p("client.key"),
        rogue_cert: p("rogue.pem"),
        rogue_key: p("rogue.key"),
    }
}

/// A running agent API, on its own thread and runtime as a separate agent process would be
/// (so one agent's work does not hold up another's clock answers).
pub(crate) struct Agent {
    pub(crate) addr: String,
    pub(crate) node: String,
    pub(crate) db: PathBuf,
    pub(crate) stop: tokio::sync::watch::Sender<bool>,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

impl Agent {
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let t = self.thread;
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
}

pub(crate) fn api_config(pki: &Pki, ip: &str) -> ApiConfig {
    ApiConfig {
        enabled: true,
        listen: format!("{ip}:0"),
        tls_cert: Some(pki.server_cert.clone()),
        tls_key: Some(pki.server_key.clone()),
        client_ca: Some(pki.ca.clone()),
        generated_cert_path: PathBuf::new(),
        ..Default::default()
    }
}

pub(crate) async fn start(config: ApiConfig, db: &Path, node: &str, clock_offset_ns: i64) -> Agent {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let opts = ServeOptions {
        config,
        db: db.to_path_buf(),
        node: node.to_string(),
        clock_offset_ns,
    };
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = ApiServer::bind(opts).await.unwrap();
            addr_tx.send(server.local_addr.to_string()).unwrap();
            server.run(rx).await;
        });
    });
    let addr = tokio::task::spawn_blocking(move || addr_rx.recv().unwrap())
        .await
        .unwrap();
    Agent {
        addr,
        node: node.to_string(),
        db: db.to_path_buf(),
        stop: tx,
        thread,
    }
}

/// A fixture's timestamps moved by `by` ns, as a node whose clock is off records them.
fn shifted(f: &Fixture, by: i64) -> Fixture {
    let mut f = f.clone();
    for e in &mut f.events {
        e.timestamp += by;
    }
    for a in &mut f.aggregates {
        a.bucket += by;
    }
    f
}

/// Eight agents on 127.0.0.1 ..= 127.0.0.8, node-7 with CPU contention; `skewed` has its
/// clock (and so its records) `offset` ns ahead.
pub(crate) async fn eight(dir: &Path, pki: &Pki, skewed: Option<(usize, i64)>) -> Vec<Agent> {
    let clean = fixtures::clean_events(0);
    let hot = fixtures::contended_events(0);
    let mut agents = Vec::new();
    for i in 1..=8usize {
        let node = format!("node-{i}");
        let db = dir.join(format!("{node}.db"));
        let base = if i == 7 { &hot } else { &clean };
        let off = match skewed {
            Some((k, o)) if k == i => o,
            _ => 0,
        };
        fixtures::write_node_db(&db, &node, Layout::Current, &shifted(base, off));
        agents.push(start(api_config(pki, &format!("127.0.0.{i}")), &db, &node, off).await);
    }
    agents
}

pub(crate) fn client_config(pki: &Pki) -> FanoutConfig {
    FanoutConfig {
        ca_cert: Some(pki.ca.clone()),
        client_cert: Some(pki.client_cert.clone()),
        client_key: Some(pki.client_key.clone()),
        // Generous: the test machine may be loaded far beyond its cores.
        timeout: Duration::from_secs(20),
        clock_skew_threshold: Duration::from_millis(100),
        ..Default::default()
    }
}

pub(crate) fn addrs(agents: &[Agent]) -> Vec<String> {
    agents.iter().map(|a| a.addr.clone()).collect()
}

pub(crate) fn event_count(db: &Path) -> i64 {
    let c = crate::store::open_read_only(db).unwrap();
    c.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_agents_answer_in_one_table_and_their_chains_merge() {
    let dir = fixtures::tmp_dir("fanout-8");
    let pki = pki(&dir);
    let agents = eight(&dir, &pki, None).await;
    let c = FanoutClient::new(&client_config(&pki)).unwrap();
    let nodes = addrs(&agents);
    let th = Duration::from_millis(100);
    let (t, truncated, o) = actions::sql(
        &c,
        &nodes,
        "SELECT node, count(*) AS n FROM events GROUP BY node",
        None,
        None,
        th,
    )
    .await
    .unwrap();
    assert!(!truncated);
    assert_eq!(o.exit_code(), 0, "{}", o.notes());
    assert_eq!(o.answered.len(), 8);
    // The statement has a node column of its own (the store's node name).
    assert_eq!(t.columns, vec!["node_address", "node", "n"]);
    assert_eq!(t.rows.len(), 8);
    for a in &agents {
        let row = t
            .rows
            .iter()
            .find(|r| r[0] == a.addr.as_str())
            .unwrap_or_else(|| panic!("{} missing", a.addr));
        assert_eq!(row[1], a.node.as_str());
        assert_eq!(row[2], event_count(&a.db));
    }
    // Every node's clock was measured (in-process: the same clock).
    assert_eq!(o.clock_skew.len(), 8);
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);

    // Chains: only node-7 is contended.
    let (r, o) = actions::chains(&c, &nodes, "1h", false, th).await.unwrap();
    assert_eq!(o.exit_code(), 0, "{}", o.notes());
    assert_eq!(r.nodes.len(), 8);
    assert_eq!(
        r.chains.len(),
        1,
        "{}",
        crate::investigate::explain::render(&r)
    );
    assert_eq!(r.chains[0].node, "node-7");

    // ops and overview answer per node.
    let (ops, o) = actions::ops(&c, &nodes, "1h", th).await.unwrap();
    assert_eq!((ops.len(), o.exit_code()), (8, 0));
    let sync = ops[0].1["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["operation"] == "cudaStreamSync")
        .cloned()
        .unwrap();
    assert!(sync["count"].as_u64().unwrap() > 0 && sync["p99_us"].as_i64().unwrap() > 0);
    let (ov, _) = actions::overview(&c, &nodes, th).await;
    assert_eq!(ov.len(), 8);
    for (addr, v) in &ov {
        let a = agents.iter().find(|a| &a.addr == addr).unwrap();
        assert_eq!(v["event_count"], event_count(&a.db));
        assert_eq!(v["node"], a.node.as_str());
    }
    for a in agents {
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_is_named_and_the_other_seven_answer() {
    let dir = fixtures::tmp_dir("fanout-stop");
    let pki = pki(&dir);
    let mut agents = eight(&dir, &pki, None).await;
    let nodes = addrs(&agents);
    let gone = agents.remove(4);
    let gone_addr = gone.addr.clone();
    gone.stop().await;
    let c = FanoutClient::new(&client_config(&pki)).unwrap();
    let (t, _, o) = actions::sql(
        &c,
        &nodes,
        "SELECT count(*) FROM events",
        None,
        None,
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    assert_eq!(t.rows.len(), 7);
    assert_eq!(o.answered.len(), 7);
    assert_eq!(o.failed.len(), 1);
    assert_eq!(o.failed[0].node, gone_addr);
    assert!(
        o.failed[0].error.contains("network error"),
        "{}",
        o.failed[0].error
    );
    assert_eq!(o.exit_code(), 3);
    assert!(o.notes().contains(&format!("FAILED: {gone_addr}")));
    assert!(o.notes().contains("7 of 8 nodes answered"));
    for a in agents {
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shifted_clock_is_named_estimated_and_taken_off_the_timeline() {
    let dir = fixtures::tmp_dir("fanout-skew");
    let pki = pki(&dir);
    // node-7, the contended one, runs 250 ms ahead: its records are stamped 250 ms late.
    let agents = eight(&dir, &pki, Some((7, 250 * MS))).await;
    let nodes = addrs(&agents);
    let skewed = agents[6].addr.clone();
    let c = FanoutClient::new(&client_config(&pki)).unwrap();
    let th = Duration::from_millis(100);
    let (t, _, o) = actions::sql(&c, &nodes, "SELECT count(*) FROM events", None, None, th)
        .await
        .unwrap();
    assert_eq!((t.rows.len(), o.exit_code()), (8, 0), "{}", o.notes());
    assert_eq!(o.warnings.len(), 1, "{:?} {:?}", o.warnings, o.clock_skew);
    assert!(
        o.warnings[0].contains(&format!("{skewed} (node-7)")) && o.warnings[0].contains("ahead"),
        "{}",
        o.warnings[0]
    );
    let est = o.clock_skew.iter().find(|s| s.node == skewed).unwrap();
    assert!(
        (est.offset_ms - 250.0).abs() < 10.0,
        "estimated {} ms ({:?})",
        est.offset_ms,
        o.clock_skew
    );

    // What node-7's own store says, on its own clock.
    let local = {
        let conn = crate::store::open_read_only(&agents[6].db).unwrap();
        let r = crate::investigate::explain::explain(
            &conn,
            &crate::investigate::explain::ExplainOptions {
                since: Duration::from_secs(3600),
                per_process: false,
            },
        )
        .unwrap();
        let first: i64 = conn
            .query_row(
                "SELECT MIN(timestamp) FROM events WHERE source IN (1, 4, 9)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (r.chains[0].first_window, first)
    };

    // explain: the chain's windows are moved back by the offset measured in that call.
    let (r, o) = actions::chains(&c, &nodes, "1h", false, th).await.unwrap();
    let off_ns = |o: &super::merge::Outcome| {
        (o.clock_skew
            .iter()
            .find(|s| s.node == skewed)
            .unwrap()
            .offset_ms
            * 1e6)
            .round() as i64
    };
    assert_eq!(r.chains.len(), 1);
    let d = r.chains[0].first_window - (local.0 - off_ns(&o));
    assert!(d.abs() <= 1_000, "chain window off by {d} ns");

    // Perfetto: every timestamp of node-7 moved back the same way.
    let (trace, o) = actions::perfetto(&c, &nodes, None, th).await.unwrap();
    assert_eq!(o.exit_code(), 0, "{}", o.notes());
    let evs = trace["traceEvents"].as_array().unwrap();
    let pid = evs
        .iter()
        .find(|e| e["name"] == "process_name" && e["args"]["name"] == format!("node-7 @ {skewed}"))
        .map(|e| e["pid"].clone())
        .unwrap();
    let first_us = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == pid)
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(f64::MAX, f64::min);
    let want_us = (local.1 - off_ns(&o)) as f64 / 1000.0;
    assert!(
        (first_us - want_us).abs() < 2.0,
        "node-7's first call at {first_us} us, want {want_us} us"
    );
    // Each node is its own process track.
    assert_eq!(
        evs.iter().filter(|e| e["name"] == "process_name").count(),
        8
    );
    for a in agents {
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_a_wrong_or_missing_client_certificate() {
    let dir = fixtures::tmp_dir("fanout-mtls");
    let pki = pki(&dir);
    let db = dir.join("n.db");
    fixtures::write_node_db(&db, "n", Layout::Current, &fixtures::clean_events(0));
    let a = start(api_config(&pki, "127.0.0.1"), &db, "n", 0).await;
    let nodes = vec![a.addr.clone()];
    for (cert, key) in [
        (Some(pki.rogue_cert.clone()), Some(pki.rogue_key.clone())),
        (None, None),
    ] {
        let cfg = FanoutConfig {
            client_cert: cert,
            client_key: key,
            ..client_config(&pki)
        };
        let c = FanoutClient::new(&cfg).unwrap();
        let (t, _, o) = actions::sql(&c, &nodes, "SELECT 1", None, None, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(t.rows.is_empty());
        assert_eq!(o.exit_code(), 1);
        assert!(
            o.failed[0].error.contains("network error"),
            "{}",
            o.failed[0].error
        );
    }
    // The right one is let in.
    let c = FanoutClient::new(&client_config(&pki)).unwrap();
    let (t, _, o) = actions::sql(&c, &nodes, "SELECT 1", None, None, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!((t.rows.len(), o.exit_code()), (1, 0));
    a.stop().await;
}

/// Accepts connections and answers garbage, or nothing at all.
async fn bad_server(ip: &str, garbage: bool) -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            if garbage {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"\x16\x03\x03\x00\x05garbage not TLS at all\r\n")
                    .await;
                let _ = s.shutdown().await;
            } else {
                held.push(s);
            }
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_the_other_answers_stay() {
    let dir = fixtures::tmp_dir("fanout-bad");
    let pki = pki(&dir);
    let mut cfg8 = Vec::new();
    let clean = fixtures::clean_events(0);
    for i in 1..=3 {
        let db = dir.join(format!("n{i}.db"));
        fixtures::write_node_db(&db, &format!("n{i}"), Layout::Current, &clean);
        let mut c = api_config(&pki, &format!("127.0.0.{i}"));
        c.query_timeout = Duration::from_millis(300);
        c.max_request_bytes = 4096;
        cfg8.push(start(c, &db, &format!("n{i}"), 0).await);
    }
    let before: Vec<i64> = cfg8.iter().map(|a| event_count(&a.db)).collect();
    let (garbage, g) = bad_server("127.0.0.9", true).await;
    let (silent, s) = bad_server("127.0.0.10", false).await;
    let mut nodes = addrs(&cfg8);
    nodes.push(garbage.clone());
    nodes.push(silent.clone());
    nodes.push("not an address".into());
    let cfg = FanoutConfig {
        timeout: Duration::from_millis(800),
        ..client_config(&pki)
    };
    let c = FanoutClient::new(&cfg).unwrap();
    let th = Duration::from_millis(100);

    // Good SQL: the three agents answer; the garbage, silent and malformed entries fail, each
    // with its reason.
    let (t, _, o) = actions::sql(&c, &nodes, "SELECT count(*) FROM events", None, None, th)
        .await
        .unwrap();
    assert_eq!(t.rows.len(), 3);
    assert_eq!(o.exit_code(), 3);
    let why = |n: &str| o.failed.iter().find(|f| f.node == n).unwrap().error.clone();
    assert!(why(&garbage).contains("network error"), "{}", why(&garbage));
    assert!(
        why(&silent).contains("no answer within"),
        "{}",
        why(&silent)
    );
    assert!(
        why("not an address").contains("invalid node address"),
        "{}",
        why("not an address")
    );

    // Hostile SQL: refused by every agent, with the reason; nothing changed.
    for bad in [
        "DELETE FROM events",
        "ATTACH DATABASE '/tmp/x.db' AS x",
        "SELECT load_extension('/tmp/x.so')",
        "PRAGMA journal_mode = DELETE",
        "SELECT 1; DROP TABLE events",
    ] {
        let (t, _, o) = actions::sql(&c, &nodes[..3], bad, None, None, th)
            .await
            .unwrap();
        assert!(t.rows.is_empty());
        assert_eq!(o.failed.len(), 3, "{bad}");
        for f in &o.failed {
            assert!(f.error.starts_with("HTTP 400"), "{bad}: {}", f.error);
        }
    }
    // A statement that would run forever is interrupted at the time limit.
    let (_, _, o) = actions::sql(
        &c,
        &nodes[..1],
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        None,
        None,
        th,
    )
    .await
    .unwrap();
    assert!(
        o.failed[0].error.contains("time limit"),
        "{}",
        o.failed[0].error
    );
    // A request over the size limit.
    let big = format!("SELECT '{}'", "x".repeat(8192));
    let (_, _, o) = actions::sql(&c, &nodes[..1], &big, None, None, th)
        .await
        .unwrap();
    assert!(
        o.failed[0].error.starts_with("HTTP 413"),
        "{}",
        o.failed[0].error
    );
    // A huge since: refused before anything is sent, and by the agent itself.
    let e = actions::chains(&c, &nodes, "100000000h", false, th)
        .await
        .unwrap_err();
    assert!(e.contains("10 years"), "{e}");
    let e = c
        .request(
            &nodes[0],
            Method::GET,
            "/api/v1/ops?since=99999999999h",
            None,
        )
        .await
        .unwrap_err();
    assert!(e.starts_with("HTTP 400") && e.contains("since"), "{e}");
    // 10,000 nodes: refused as a whole, clearly.
    let many: Vec<String> = (0..10_000)
        .map(|i| format!("127.0.1.{}:{}", i % 250, 1000 + i))
        .collect();
    let e = super::parse_nodes(&[many.join(",")]).unwrap_err();
    assert!(e.contains("10000 nodes given"), "{e}");
    // After all that, the stores are unchanged and still answer.
    for (a, n) in cfg8.iter().zip(&before) {
        assert_eq!(event_count(&a.db), *n);
    }
    let (t, _, o) = actions::sql(
        &c,
        &nodes[..3],
        "SELECT count(*) FROM events",
        None,
        None,
        th,
    )
    .await
    .unwrap();
    assert_eq!((t.rows.len(), o.exit_code()), (3, 0));
    g.abort();
    s.abort();
    for a in cfg8 {
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_certificate_and_a_token_work_and_plaintext_stays_on_loopback() {
    let dir = fixtures::tmp_dir("fanout-gen");
    let db = dir.join("n.db");
    fixtures::write_node_db(&db, "n", Layout::Current, &fixtures::clean_events(0));
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let cert = dir.join("api-cert.pem");
    let a = start(
        ApiConfig {
            enabled: true,
            listen: "127.0.0.1:0".into(),
            generated_cert_path: cert.clone(),
            token_file: Some(token.clone()),
            ..Default::default()
        },
        &db,
        "n",
        0,
    )
    .await;
    let pem = std::fs::read_to_string(&cert).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE"));
    let nodes = vec![a.addr.clone()];
    let ok = FanoutConfig {
        ca_cert: Some(cert.clone()),
        token_file: Some(token.clone()),
        ..Default::default()
    };
    let c = FanoutClient::new(&ok).unwrap();
    let (t, _, o) = actions::sql(
        &c,
        &nodes,
        "SELECT 1 AS one",
        None,
        None,
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert_eq!((t.rows.len(), o.exit_code()), (1, 0), "{}", o.notes());
    // Without the token: 401.
    let c = FanoutClient::new(&FanoutConfig {
        token_file: None,
        ..ok.clone()
    })
    .unwrap();
    let e = c
        .request(&nodes[0], Method::GET, "/api/v1/overview", None)
        .await
        .unwrap_err();
    assert!(e.starts_with("HTTP 401"), "{e}");
    // Plaintext to a TLS agent fails; a plaintext agent binds only on loopback.
    let c = FanoutClient::new(&FanoutConfig {
        no_tls: true,
        ca_cert: None,
        ..ok.clone()
    })
    .unwrap();
    assert!(
        c.request(&nodes[0], Method::GET, "/api/v1/time", None)
            .await
            .is_err()
    );
    let e = ApiServer::bind(ServeOptions {
        config: ApiConfig {
            enabled: true,
            no_tls: true,
            listen: "0.0.0.0:0".into(),
            ..Default::default()
        },
        db: db.clone(),
        node: "n".into(),
        clock_offset_ns: 0,
    })
    .await
    .unwrap_err();
    assert!(e.to_string().contains("loopback"), "{e}");
    a.stop().await;
}
