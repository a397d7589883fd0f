//! What we send, read by Go exactly as the unchanged agent reads it: `strconv.ParseFloat`
//! on the trimmed header, `encoding/json` into `{Threshold float64; QuorumMet bool}` with the
//! 8 KiB cap, the cold-start shape, and `url.Values.Encode` for the query we must decode.
//! The model is `testdata/go-agent-model/main.go`; this test needs the `go` tool (it fails,
//! rather than skipping, when `go` is missing and `INGERO_REQUIRE_GO=1`).

#![allow(clippy::unwrap_used)] // Test helpers: a failed unwrap is a failed test.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use component::api::ApiRequest;
use component::{ConfigValue, Timestamp};
use ingero_extension::{ClusterIdParam, ThresholdExtension, cluster_id_from_query, create};
use ingero_wire::http::THRESHOLD_API_PATH;
use ingero_wire::threshold::{ClusterDiagnostics, ClusterReport, ThresholdValue};

fn go_available() -> bool {
    let found = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var("INGERO_REQUIRE_GO").as_deref() == Ok("1") {
        panic!("INGERO_REQUIRE_GO=1 but the go tool is not on PATH");
    }
    found
}

/// Run the Go model over `cases`, one verdict per case.
fn go_model(cases: &[String]) -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/go-agent-model");
    let mut child = Command::new("go")
        .args(["run", "main.go"])
        .current_dir(dir)
        .env("GOFLAGS", "-buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for c in cases {
        writeln!(stdin, "{c}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "go model failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(verdicts.len(), cases.len());
    verdicts
}

fn diagnostics() -> Arc<ClusterDiagnostics> {
    Arc::new(ClusterDiagnostics {
        median: Some(0.9),
        mad: Some(0.01),
        raw_threshold: None,
        threshold: None,
        quorum_met: false,
        active_nodes: 5,
        idle_nodes: 0,
        calibrating_nodes: 0,
        expected_nodes: 5,
        coverage: 1.0,
        coverage_low: false,
        panic_mode: false,
        straggler_count: 0,
        cohorts: Vec::new(),
        nodes: Vec::new(),
        computed_at_unix_nano: 0,
    })
}

/// Thresholds chosen to stress formatting: bounds, one ulp inside them, values whose
/// shortest form is 16-17 digits, and a seed example.
fn thresholds() -> Vec<f64> {
    vec![
        0.1,
        f64::from_bits(0.1f64.to_bits() + 1),
        0.99,
        f64::from_bits(0.99f64.to_bits() - 1),
        0.870348,
        0.1 + 0.2,
        2.0 / 3.0,
        0.9573921000000001,
        0.5,
    ]
}

fn extension_with_state() -> (ThresholdExtension, Vec<(String, Option<ThresholdValue>)>) {
    let ext = create(&ConfigValue::Null).unwrap();
    let diag = diagnostics();
    let mut clusters = Vec::new();
    for (i, t) in thresholds().into_iter().enumerate() {
        for q in [true, false] {
            clusters.push((format!("c{i}-{q}"), ThresholdValue::new(t, q)));
        }
    }
    clusters.push(("cold".to_string(), None));
    let reports = clusters
        .iter()
        .map(|(id, v)| ClusterReport {
            cluster_id: id.as_str().into(),
            value: *v,
            diagnostics: Arc::clone(&diag),
        })
        .collect();
    ingero_wire::threshold::threshold_sink(&ext)
        .unwrap()
        .publish(reports, Timestamp::from_secs(1));
    clusters.push(("never-published".to_string(), None));
    (ext, clusters)
}

#[test]
fn the_agent_accepts_every_header_pair_and_body_we_send() {
    if !go_available() {
        eprintln!("skipping: go tool not found");
        return;
    }
    let (ext, clusters) = extension_with_state();
    let store = ext.store();
    let mut cases = Vec::new();
    let mut want = Vec::new();
    for (id, value) in &clusters {
        let (t, q) = match store.push_headers(id) {
            Some(h) => (
                h.threshold.to_str().unwrap().to_string(),
                h.quorum_met.to_str().unwrap().to_string(),
            ),
            None => (String::new(), String::new()),
        };
        cases.push(format!("H\t{t}\t{q}"));
        let query = format!("cluster_id={id}");
        let resp = ext.route_agent(&ApiRequest {
            method: "GET",
            path: THRESHOLD_API_PATH,
            query: Some(&query),
        });
        assert_eq!(resp.status, 200);
        cases.push(format!("B\t{}", String::from_utf8(resp.body).unwrap()));
        // What the agent must end up with: the value as delivered (six decimals), which is
        // within half a micro-unit of the published one.
        let delivered = store.get(id);
        if let (Some(p), Some(d)) = (value, delivered) {
            assert!((p.threshold() - d.threshold()).abs() <= 0.5e-6 + 1e-15);
            assert_eq!(p.quorum_met(), d.quorum_met());
        }
        assert_eq!(value.is_some(), delivered.is_some(), "{id}");
        let want_one = delivered.map(|v| (v.threshold(), v.quorum_met()));
        want.push(want_one);
        want.push(want_one);
    }
    let verdicts = go_model(&cases);
    for ((case, verdict), want) in cases.iter().zip(&verdicts).zip(&want) {
        match want {
            Some((t, q)) => {
                let parts: Vec<&str> = verdict.split(' ').collect();
                assert_eq!(parts.first(), Some(&"valid"), "{case} -> {verdict}");
                // Go's value, re-printed, is exactly the f64 we published.
                assert_eq!(parts[1].parse::<f64>().unwrap(), *t, "{case} -> {verdict}");
                assert_eq!(parts[2], q.to_string(), "{case} -> {verdict}");
            }
            None if case.starts_with('H') => assert_eq!(verdict, "absent", "{case}"),
            None => assert_eq!(verdict, "coldstart", "{case}"),
        }
    }
}

#[test]
fn the_model_rejects_what_the_agent_rejects() {
    if !go_available() {
        eprintln!("skipping: go tool not found");
        return;
    }
    // Controls: the model is not a rubber stamp. These are what a careless server might send.
    let cases: Vec<String> = [
        "H\t0\tfalse",
        "H\t1.0\ttrue",
        "H\tNaN\ttrue",
        "H\t0.999\ttrue",
        "H\t0.8\tyes",
        "H\t0.8\t",
        "H\t\ttrue",
        "B\t{\"threshold\":\"0.8\",\"quorum_met\":true}",
        "B\t{\"threshold\":1,\"quorum_met\":true}",
        "H\t 0.8 \tTRUE",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut big = String::from("B\t{\"threshold\":0.8,\"quorum_met\":true,\"pad\":\"");
    big.push_str(&"x".repeat(8 * 1024));
    big.push_str("\"}");
    let mut all = cases.clone();
    all.push(big);
    let verdicts = go_model(&all);
    assert_eq!(
        verdicts,
        [
            "rejected",
            "rejected",
            "rejected",
            "rejected",
            "rejected",
            "absent",
            "absent",
            "decode-error",
            "rejected",
            "valid 0.8 true",
            "too-large",
        ]
    );
}

#[test]
fn cluster_ids_encoded_by_go_decode_to_the_same_id() {
    if !go_available() {
        eprintln!("skipping: go tool not found");
        return;
    }
    let ids = [
        "prod-cluster",
        "with space",
        "a+b",
        "100%",
        "q?x=1&cluster_id=evil#frag",
        "ünïcödé/クラスタ",
        "semi;colon",
        "~!*'()",
    ];
    let cases: Vec<String> = ids.iter().map(|id| format!("Q\t{id}")).collect();
    for (id, query) in ids.iter().zip(go_model(&cases)) {
        // The agent's query, plus an unrelated parameter as a configured URL may carry.
        let query = format!("{query}&other=1");
        assert_eq!(
            cluster_id_from_query(Some(&query)),
            ClusterIdParam::Valid((*id).into()),
            "{query}"
        );
    }
}
