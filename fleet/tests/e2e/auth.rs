//! Access control against the real binary (`ingero_auth`): bearer tokens on every
//! listener, cluster scopes (before and after the body is decoded), answers that do not
//! reveal whether another cluster exists, gRPC metadata, rotation by file rewrite and by
//! SIGHUP with a grace period, a bad file keeping the previous tokens, per-token rate
//! limits with 429 + Retry-After, the JSON audit log, and no raw token in any log line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use testkit::AgentPush;

const TOKEN_A: &str = "tokA-7f3c9a1e5b2d4c6f8a0b";
const TOKEN_STAR: &str = "tokS-0a9b8c7d6e5f4a3b2c1d";
const TOKEN_WRONG: &str = "tokW-1111222233334444aaaa";
const TOKEN_NEW: &str = "tokN-5555666677778888bbbb";
const TOKEN_LIMITED: &str = "tokL-9999aaaabbbbccccdddd";
const ALL_TOKENS: [&str; 5] = [TOKEN_A, TOKEN_STAR, TOKEN_WRONG, TOKEN_NEW, TOKEN_LIMITED];

const SCORES: [f64; 8] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.95];

/// Write atomically (temp file + rename), as operators should.
fn write_tokens(path: &Path, yaml: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn tokens_yaml(entries: &[(&str, &str, &str)]) -> String {
    entries
        .iter()
        .map(|(name, token, clusters)| {
            format!("- name: {name}\n  token: {token}\n  clusters: {clusters}\n")
        })
        .collect()
}

/// `test_config` with every listener behind `ingero_auth`.
fn auth_config(dir: &Path, reload_interval: &str, grace: &str) -> String {
    let auth = "auth: { authenticator: ingero_auth }";
    let cfg = test_config("1s", &[])
        .replace(
            "      grpc:\n        endpoint: 127.0.0.1:0\n",
            &format!("      grpc:\n        endpoint: 127.0.0.1:0\n        {auth}\n"),
        )
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!("      http:\n        endpoint: 127.0.0.1:0\n        {auth}\n"),
        )
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!(
                "    admin_endpoint: 127.0.0.1:0\n    {auth}\n  ingero_auth:\n    \
                 tokens_file: {}\n    grace_period: {grace}\n    reload_interval: {reload_interval}\n    \
                 audit_log: {}\n",
                dir.join("tokens.yaml").display(),
                dir.join("audit.jsonl").display()
            ),
        )
        .replace(
            "  prometheus:\n    endpoint: 127.0.0.1:0\n",
            &format!("  prometheus:\n    endpoint: 127.0.0.1:0\n    {auth}\n"),
        )
        .replace(
            "extensions: [ingero_threshold, health_check]",
            "extensions: [ingero_auth, ingero_threshold, health_check]",
        );
    assert_eq!(cfg.matches(auth).count(), 4, "{cfg}");
    cfg
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn push_as(f: &Fleet, token: Option<&str>, query_cluster: Option<&str>, body: &str) -> Resp {
    let path = match query_cluster {
        Some(c) => format!("/v1/metrics?cluster_id={c}"),
        None => "/v1/metrics".to_string(),
    };
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    post(
        f.http(),
        &path,
        "application/json",
        body.as_bytes(),
        &headers,
    )
}

fn node_push(cluster: &str, node: &str, score: f64) -> String {
    AgentPush::new(cluster, node, score).to_json()
}

fn audit_lines(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default();
    for t in ALL_TOKENS {
        assert!(!text.contains(t), "raw token in the audit log");
    }
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn assert_no_token_in_stderr(f: &Fleet) {
    let log = f.log_text();
    for t in ALL_TOKENS {
        assert!(!log.contains(t), "raw token in stderr:\n{log}");
        // Nor a recognisable part of it.
        assert!(!log.contains(&t[5..]), "token suffix in stderr:\n{log}");
    }
}

/// The self-telemetry page (it follows the exporter's `auth`): read with whichever of the
/// tests' `"*"` tokens the current tokens file accepts.
fn telemetry_page(f: &Fleet) -> String {
    for t in ALL_TOKENS {
        let r = get_as(f.telemetry(), Some(t), "/metrics");
        if r.status == 200 {
            return r.text();
        }
    }
    panic!("no token reads self-telemetry")
}

fn telemetry_value(f: &Fleet, series: &str) -> f64 {
    prom_value(&telemetry_page(f), series).unwrap_or(0.0)
}

#[test]
fn tokens_and_cluster_scopes_on_every_listener() {
    let dir = tempdir::TempDir::new("auth");
    write_tokens(
        &dir.path().join("tokens.yaml"),
        &tokens_yaml(&[("team-a", TOKEN_A, "[alpha]"), ("ops", TOKEN_STAR, "['*']")]),
    );
    let f = Fleet::start_with(&auth_config(dir.path(), "1h", "5m"), &[]);
    let body_a = node_push("alpha", "alpha-node-00", 0.95);

    // No token, a wrong token, a malformed header: 401 with a Bearer challenge.
    let r = push_as(&f, None, Some("alpha"), &body_a);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(
        r.header("WWW-Authenticate"),
        Some("Bearer realm=\"ingero-fleet\"")
    );
    assert!(r.header("X-Ingero-Threshold").is_none());
    let r = push_as(&f, Some(TOKEN_WRONG), Some("alpha"), &body_a);
    assert_eq!(r.status, 401);
    assert!(
        r.header("WWW-Authenticate")
            .unwrap()
            .contains("invalid_token")
    );
    let r = post(
        f.http(),
        "/v1/metrics?cluster_id=alpha",
        "application/json",
        body_a.as_bytes(),
        &[("Authorization", &format!("Basic {TOKEN_A}"))],
    );
    assert_eq!(r.status, 401);

    // A second cluster that exists, pushed by the ops token.
    for (i, s) in SCORES.iter().enumerate() {
        let r = push_as(
            &f,
            Some(TOKEN_STAR),
            Some("beta"),
            &node_push("beta", &format!("beta-node-{i:02}"), *s),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }

    // Team A pushes its own cluster and gets thresholds once quorum is met.
    let (t, q) = wait_for(Duration::from_secs(20), || {
        let mut last = None;
        for (i, s) in SCORES.iter().enumerate() {
            let r = push_as(
                &f,
                Some(TOKEN_A),
                Some("alpha"),
                &node_push("alpha", &format!("alpha-node-{i:02}"), *s),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            last = Some(r);
        }
        let r = last.unwrap();
        match (
            r.header("X-Ingero-Threshold"),
            r.header("X-Ingero-Quorum-Met"),
        ) {
            (Some(t), Some("true")) => Some((t.to_string(), "true".to_string())),
            _ => {
                std::thread::sleep(Duration::from_millis(300));
                None
            }
        }
    })
    .expect("team A's pushes get thresholds after quorum");
    assert_eq!(q, "true");
    let own = get_as(
        f.agent_api(),
        Some(TOKEN_A),
        "/api/v1/threshold?cluster_id=alpha",
    );
    assert_eq!(
        own.text(),
        format!(r#"{{"threshold":{t},"quorum_met":true}}"#)
    );

    // Beta's nodes, pushed by ops (again, so none has expired by the check below).
    let push_beta = || {
        for (i, sc) in SCORES.iter().enumerate() {
            let body = node_push("beta", &format!("beta-node-{i:02}"), *sc);
            assert_eq!(
                push_as(&f, Some(TOKEN_STAR), Some("beta"), &body).status,
                200
            );
        }
    };
    push_beta();

    // Team A pushing for beta: by query, by header, by payload attribute (with and without
    // a query naming alpha): 403, nothing consumed.
    let intruder = node_push("beta", "intruder", 0.10);
    let r = push_as(&f, Some(TOKEN_A), Some("beta"), &intruder);
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.header("X-Ingero-Threshold").is_none());
    assert!(!r.text().contains("beta"), "{}", r.text());
    let r = post(
        f.http(),
        "/v1/metrics",
        "application/json",
        intruder.as_bytes(),
        &[
            ("Authorization", &bearer(TOKEN_A)),
            ("ingero.cluster.id", "beta"),
        ],
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        push_as(&f, Some(TOKEN_A), Some("alpha"), &intruder).status,
        403
    );
    assert_eq!(push_as(&f, Some(TOKEN_A), None, &intruder).status, 403);
    // A batch mixing alpha and beta resources is refused whole.
    let mut mixed: serde_json::Value =
        serde_json::from_str(&node_push("alpha", "alpha-mixed", 0.95)).unwrap();
    let other: serde_json::Value = serde_json::from_str(&intruder).unwrap();
    mixed["resourceMetrics"]
        .as_array_mut()
        .unwrap()
        .push(other["resourceMetrics"][0].clone());
    assert_eq!(
        push_as(&f, Some(TOKEN_A), None, &mixed.to_string()).status,
        403
    );

    // After the next tick beta has exactly ops' nodes: nothing of team A's batches arrived.
    push_beta();
    std::thread::sleep(Duration::from_millis(1300));
    let ids = |v: &serde_json::Value| -> Vec<String> {
        let mut ids: Vec<String> = v["diagnostics"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["node_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let beta = get_as(
        f.admin_api(),
        Some(TOKEN_STAR),
        "/api/v1/diagnostics?cluster_id=beta",
    )
    .json();
    let want: Vec<String> = (0..SCORES.len())
        .map(|i| format!("beta-node-{i:02}"))
        .collect();
    assert_eq!(ids(&beta), want);
    let alpha = get_as(
        f.admin_api(),
        Some(TOKEN_STAR),
        "/api/v1/diagnostics?cluster_id=alpha",
    )
    .json();
    assert!(!ids(&alpha).contains(&"alpha-mixed".to_string()));

    // Team A cannot tell beta (exists) from a cluster that never existed.
    for (addr, path) in [
        (f.agent_api(), "/api/v1/threshold?cluster_id="),
        (f.admin_api(), "/api/v1/diagnostics?cluster_id="),
    ] {
        let b = get_as(addr, Some(TOKEN_A), &format!("{path}beta"));
        let n = get_as(addr, Some(TOKEN_A), &format!("{path}never-existed"));
        assert_eq!(observable(&b), observable(&n), "{path}");
        let ops = get_as(addr, Some(TOKEN_STAR), &format!("{path}beta"));
        assert_eq!(ops.status, 200);
        assert_ne!(ops.body, b.body, "ops sees beta");
    }
    assert_eq!(
        get_as(
            f.agent_api(),
            Some(TOKEN_A),
            "/api/v1/threshold?cluster_id=beta"
        )
        .body,
        br#"{"threshold":0,"quorum_met":false}"#
    );
    assert_eq!(
        get_as(f.agent_api(), None, "/api/v1/threshold?cluster_id=alpha").status,
        401
    );
    // Listing clusters and scraping need a "*" token.
    assert_eq!(
        get_as(f.admin_api(), Some(TOKEN_A), "/api/v1/diagnostics").status,
        403
    );
    assert_eq!(
        get_as(f.admin_api(), Some(TOKEN_STAR), "/api/v1/diagnostics").status,
        200
    );
    assert_eq!(get_as(f.prometheus(), None, "/metrics").status, 401);
    assert_eq!(
        get_as(f.prometheus(), Some(TOKEN_A), "/metrics").status,
        403
    );
    let scrape = get_as(f.prometheus(), Some(TOKEN_STAR), "/metrics");
    assert_eq!(scrape.status, 200);
    assert!(scrape.text().contains("alpha"));

    // gRPC: the same checks through `authorization` metadata.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let grpc = f.grpc();
    rt.block_on(async move {
        let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        let req = |cluster: &str, token: Option<&str>| {
            let mut r = tonic::Request::new(
                AgentPush::new(cluster, &format!("{cluster}-grpc"), 0.95).to_proto(),
            );
            if let Some(t) = token {
                r.metadata_mut()
                    .insert("authorization", bearer(t).parse().unwrap());
            }
            r.metadata_mut()
                .insert("cluster_id", cluster.parse().unwrap());
            r
        };
        let ok = client.export(req("alpha", Some(TOKEN_A))).await.unwrap();
        assert!(ok.metadata().get("ingero-threshold").is_some());
        let e = client.export(req("alpha", None)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = client
            .export(req("alpha", Some(TOKEN_WRONG)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = client.export(req("beta", Some(TOKEN_A))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        // Payload names beta, metadata names alpha.
        let mut r = tonic::Request::new(AgentPush::new("beta", "grpc-intruder", 0.1).to_proto());
        r.metadata_mut()
            .insert("authorization", bearer(TOKEN_A).parse().unwrap());
        r.metadata_mut()
            .insert("cluster_id", "alpha".parse().unwrap());
        let e = client.export(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    });

    // Self-metrics by listener and outcome.
    let series = |l: &str, o: &str| {
        format!(
            "ingero_fleet_auth_requests_total{{authenticator=\"ingero_auth\",listener=\"{l}\",outcome=\"{o}\"}}"
        )
    };
    assert!(telemetry_value(&f, &series("otlp/http", "unauthenticated")) >= 3.0);
    assert!(telemetry_value(&f, &series("otlp/http", "forbidden")) >= 5.0);
    assert!(telemetry_value(&f, &series("otlp/grpc", "forbidden")) >= 2.0);
    assert!(telemetry_value(&f, &series("otlp/http", "allowed")) >= 16.0);
    assert!(telemetry_value(&f, &series("prometheus", "forbidden")) >= 1.0);

    // The audit log: JSON lines with every field, denials present, no token anywhere.
    let lines = wait_for(Duration::from_secs(5), || {
        let l = audit_lines(dir.path());
        l.iter()
            .any(|v| v["listener"] == "otlp/grpc" && v["outcome"] == "forbidden")
            .then_some(l)
    })
    .expect("audit lines for the gRPC denials");
    for v in &lines {
        for k in [
            "time",
            "listener",
            "remote",
            "token_fingerprint",
            "token_name",
            "cluster",
            "action",
            "outcome",
        ] {
            assert!(v.get(k).is_some(), "{k} missing: {v}");
        }
        let t = v["time"].as_str().unwrap();
        assert!(
            t.len() == 24 && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
        assert!(
            v["remote"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{v}"
        );
    }
    let find = |outcome: &str, action: &str, name: Option<&str>| {
        lines.iter().any(|v| {
            v["outcome"] == outcome && v["action"] == action && v["token_name"].as_str() == name
        })
    };
    assert!(find("unauthenticated", "push_metrics", None));
    assert!(find("forbidden", "push_metrics", Some("team-a")));
    assert!(find("forbidden", "get_threshold", Some("team-a")));
    assert!(find("allowed", "push_metrics", Some("team-a")));
    assert!(find("forbidden", "scrape", Some("team-a")));
    // The wrong token is identified by its fingerprint only.
    let wrong = lines
        .iter()
        .find(|v| v["outcome"] == "unauthenticated" && !v["token_fingerprint"].is_null())
        .expect("a fingerprinted unauthenticated line");
    assert_eq!(wrong["token_fingerprint"].as_str().unwrap().len(), 12);
    assert!(
        lines
            .iter()
            .any(|v| v["cluster"] == "beta" && v["outcome"] == "forbidden")
    );
    assert_no_token_in_stderr(&f);
}

#[test]
fn rotation_by_file_rewrite_with_grace_then_refusal() {
    let dir = tempdir::TempDir::new("auth-rotate");
    let file = dir.path().join("tokens.yaml");
    write_tokens(&file, &tokens_yaml(&[("old", TOKEN_A, "['*']")]));
    let f = Fleet::start_with(&auth_config(dir.path(), "200ms", "3s"), &[]);
    let probe =
        |t: &str| get_as(f.agent_api(), Some(t), "/api/v1/threshold?cluster_id=alpha").status;
    assert_eq!(probe(TOKEN_A), 200);
    assert_eq!(probe(TOKEN_NEW), 401);

    write_tokens(&file, &tokens_yaml(&[("new", TOKEN_NEW, "['*']")]));
    let switched = std::time::Instant::now();
    wait_for(Duration::from_secs(5), || {
        (probe(TOKEN_NEW) == 200).then_some(())
    })
    .expect("the new token works without a restart");
    // The removed token keeps working within the grace period, then stops.
    assert_eq!(
        probe(TOKEN_A),
        200,
        "removed token refused within its grace"
    );
    wait_for(Duration::from_secs(8), || {
        (probe(TOKEN_A) == 401).then_some(())
    })
    .expect("the removed token stops after the grace period");
    assert!(
        switched.elapsed() >= Duration::from_secs(2),
        "{:?}",
        switched.elapsed()
    );
    assert_eq!(probe(TOKEN_NEW), 200);

    // A bad file (the same token twice) keeps the previous tokens, says why, is counted.
    write_tokens(
        &file,
        &tokens_yaml(&[("x", TOKEN_WRONG, "['*']"), ("y", TOKEN_WRONG, "['*']")]),
    );
    wait_for(Duration::from_secs(5), || {
        (telemetry_value(
            &f,
            "ingero_fleet_auth_reloads_total{authenticator=\"ingero_auth\",result=\"failure\"}",
        ) >= 1.0)
            .then_some(())
    })
    .expect("the failed reload is counted");
    assert!(f.log_text().contains("same token as"), "{}", f.log_text());
    assert_eq!(probe(TOKEN_NEW), 200);
    assert_eq!(probe(TOKEN_WRONG), 401);
    assert_no_token_in_stderr(&f);
    audit_lines(dir.path());
}

#[test]
fn rotation_by_sighup_and_bad_files_keep_the_previous_tokens() {
    let dir = tempdir::TempDir::new("auth-hup");
    let file = dir.path().join("tokens.yaml");
    // The operator token reads self-telemetry (which follows the exporter's auth).
    write_tokens(
        &file,
        &tokens_yaml(&[("old", TOKEN_A, "[alpha]"), ("ops", TOKEN_STAR, "['*']")]),
    );
    // Polling every hour: only SIGHUP can make a change visible within the test.
    let mut f = Fleet::start_with(&auth_config(dir.path(), "1h", "1h"), &[]);
    let probe = |f: &Fleet, t: &str| {
        get_as(f.agent_api(), Some(t), "/api/v1/threshold?cluster_id=alpha").status
    };
    let hup = |f: &Fleet| {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(f.child.id() as i32, libc::SIGHUP);
        }
    };
    write_tokens(
        &file,
        &tokens_yaml(&[("new", TOKEN_NEW, "[alpha]"), ("ops", TOKEN_STAR, "['*']")]),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(probe(&f, TOKEN_NEW), 401, "changed without SIGHUP");
    hup(&f);
    wait_for(Duration::from_secs(5), || {
        (probe(&f, TOKEN_NEW) == 200).then_some(())
    })
    .expect("SIGHUP loads the new token");
    assert_eq!(probe(&f, TOKEN_A), 200, "removed token within its 1h grace");

    for bad in [
        "- {name: e, token: '', clusters: [alpha]}\n".to_string(),
        "- {name: e, token: \"unterminated\n".to_string(),
        format!("- {{name: e, token: {TOKEN_WRONG}}}\n"),
    ] {
        write_tokens(&file, &bad);
        hup(&f);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            probe(&f, TOKEN_NEW),
            200,
            "previous tokens kept after {bad:?}"
        );
        assert_eq!(probe(&f, TOKEN_WRONG), 401);
    }
    wait_for(Duration::from_secs(5), || {
        (telemetry_value(
            &f,
            "ingero_fleet_auth_reloads_total{authenticator=\"ingero_auth\",result=\"failure\"}",
        ) >= 3.0)
            .then_some(())
    })
    .expect("three failed reloads counted");
    let log = f.log_text();
    assert!(log.contains("token: is empty"), "{log}");
    assert!(log.contains("not valid YAML"), "{log}");
    assert!(log.contains("keeping the previous tokens"), "{log}");
    assert!(f.is_running());
    assert_no_token_in_stderr(&f);
    let (status, _) = f.terminate();
    assert!(status.success());
}

#[test]
fn per_token_rate_limit_answers_429_with_retry_after_then_recovers() {
    let dir = tempdir::TempDir::new("auth-rate");
    std::fs::write(
        dir.path().join("tokens.yaml"),
        format!(
            "- name: limited\n  token: {TOKEN_LIMITED}\n  clusters: [alpha]\n  \
             rate_limit: {{requests_per_second: 2, burst: 3}}\n\
             - name: ops\n  token: {TOKEN_STAR}\n  clusters: ['*']\n"
        ),
    )
    .unwrap();
    let f = Fleet::start_with(&auth_config(dir.path(), "1h", "5m"), &[]);
    let body = node_push("alpha", "alpha-node-00", 0.95);
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..6 {
        let r = push_as(&f, Some(TOKEN_LIMITED), Some("alpha"), &body);
        statuses.push(r.status);
        if r.status == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.unwrap_or_else(|| panic!("no 429 in {statuses:?}"));
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        statuses.len() - 1
    );
    assert!(statuses.len() >= 3, "{statuses:?}");
    assert_eq!(r.header("Retry-After"), Some("1"));
    // The threshold GET shares the token's bucket.
    let g = get_as(
        f.agent_api(),
        Some(TOKEN_LIMITED),
        "/api/v1/threshold?cluster_id=alpha",
    );
    assert_eq!(g.status, 429);
    assert_eq!(g.header("Retry-After"), Some("1"));
    // Other tokens are not affected.
    assert_eq!(
        push_as(&f, Some(TOKEN_STAR), Some("alpha"), &body).status,
        200
    );
    // After Retry-After, the token works again.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        push_as(&f, Some(TOKEN_LIMITED), Some("alpha"), &body).status,
        200
    );

    // gRPC: RESOURCE_EXHAUSTED.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let grpc = f.grpc();
    let code = rt.block_on(async move {
        let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        for _ in 0..10 {
            let mut r = tonic::Request::new(AgentPush::new("alpha", "g", 0.95).to_proto());
            r.metadata_mut()
                .insert("authorization", bearer(TOKEN_LIMITED).parse().unwrap());
            if let Err(e) = client.export(r).await {
                assert_eq!(e.metadata().get("retry-after").unwrap(), "1");
                return e.code();
            }
        }
        tonic::Code::Ok
    });
    assert_eq!(code, tonic::Code::ResourceExhausted);

    let m = telemetry_page(&f);
    assert!(
        prom_value(&m, "ingero_fleet_auth_requests_total{authenticator=\"ingero_auth\",listener=\"otlp/http\",outcome=\"rate_limited\"}")
            .unwrap_or(0.0)
            >= 1.0,
        "{m}"
    );
    // The exposition, including the auth families, passes promtool when it is installed.
    if let Ok(out) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(m.as_bytes())?;
            c.wait_with_output()
        })
    {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("ingero_fleet_auth"), "promtool: {err}");
    }
    let lines = audit_lines(dir.path());
    assert!(
        lines
            .iter()
            .any(|v| v["outcome"] == "rate_limited" && v["token_name"] == "limited")
    );
}

#[test]
fn config_errors_name_the_key() {
    let dir = tempdir::TempDir::new("auth-cfg");
    write_tokens(
        &dir.path().join("tokens.yaml"),
        &tokens_yaml(&[("a", TOKEN_A, "[alpha]")]),
    );
    let good = auth_config(dir.path(), "1s", "5m");
    let cases = [
        (
            good.replace(
                "authenticator: ingero_auth }\n  ingero_auth:",
                "authenticator: nope }\n  ingero_auth:",
            ),
            "extensions.ingero_threshold.auth.authenticator",
        ),
        (
            good.replace("extensions: [ingero_auth, ", "extensions: ["),
            "receivers.otlp.protocols.http.auth.authenticator",
        ),
        (
            good.replace(
                "    grace_period: 5m\n",
                "    grace_period: 5m\n    token: x\n",
            ),
            "extensions.ingero_auth",
        ),
    ];
    for (cfg, key) in cases {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, &cfg).unwrap();
        let out = std::process::Command::new(bin())
            .args(["validate", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted:\n{cfg}");
        assert!(err.contains(key), "{key} not named: {err}");
    }
    // A tokens file that does not load stops the start with the reason (and no token).
    std::fs::write(
        dir.path().join("tokens.yaml"),
        format!("- {{name: a, token: {TOKEN_A}, clusters: [alpha]}}\n- {{name: b, token: {TOKEN_A}, clusters: [beta]}}\n"),
    )
    .unwrap();
    let path = dir.path().join("good.yaml");
    std::fs::write(&path, &good).unwrap();
    let out = std::process::Command::new(bin())
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("extensions.ingero_auth: tokens_file"), "{err}");
    assert!(err.contains("same token as \"a\""), "{err}");
    assert!(!err.contains(TOKEN_A), "{err}");
    // print-config shows the file path, never a token.
    let out = std::process::Command::new(bin())
        .args(["print-config", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tokens_file"), "{text}");
    assert!(!text.contains(TOKEN_A));
}
