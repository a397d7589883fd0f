//! The unmodified Go agent's protocol against the real binary: its exact JSON payloads,
//! the piggyback headers, the GET fallback, quorum and its loss (spec sections 1 and 2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use testkit::AgentPush;

const SCORES: [f64; 7] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945];

fn push_cluster(f: &Fleet, cluster: &str, straggler: Option<f64>) -> Vec<Resp> {
    let mut out = Vec::new();
    for (i, s) in SCORES.iter().enumerate() {
        let body = AgentPush::new(cluster, &format!("{cluster}-node-{i:02}"), *s).to_json();
        out.push(push_json(f.http(), cluster, &body));
    }
    if let Some(s) = straggler {
        let body = AgentPush::new(cluster, &format!("{cluster}-node-07"), s).to_json();
        out.push(push_json(f.http(), cluster, &body));
    }
    out
}

fn threshold_headers(r: &Resp) -> Option<(String, String)> {
    match (
        r.header("X-Ingero-Threshold"),
        r.header("X-Ingero-Quorum-Met"),
    ) {
        (Some(t), Some(q)) => Some((t.to_string(), q.to_string())),
        (None, None) => None,
        _ => panic!("exactly one threshold header: {:?}", r.headers),
    }
}

/// What the agent's `parseAndSet` accepts (spec 2.1).
fn agent_accepts(t: &str, q: &str) -> bool {
    let v: f64 = match t.trim().parse() {
        Ok(v) => v,
        Err(_) => return false,
    };
    v.is_finite()
        && (0.1..=0.99).contains(&v)
        && matches!(q.trim().to_ascii_lowercase().as_str(), "true" | "false")
}

#[test]
fn agent_payloads_get_thresholds_after_quorum_and_keep_them_when_quorum_is_lost() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);

    // Cold start: two nodes are below quorum; no threshold exists, so no headers, and the
    // GET answers the cold-start shape.
    for _ in 0..3 {
        for n in 0..2 {
            let r = push_json(
                f.http(),
                "alpha",
                &AgentPush::new("alpha", &format!("early-{n}"), 0.9).to_json(),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(
                threshold_headers(&r),
                None,
                "cold start must not send headers"
            );
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=alpha");
    assert_eq!(g.status, 200);
    assert_eq!(g.text(), r#"{"threshold":0,"quorum_met":false}"#);

    // Two clusters of 8 nodes (one straggler in alpha) push until quorum is met.
    let headers = wait_for(Duration::from_secs(15), || {
        push_cluster(&f, "beta", None);
        let rs = push_cluster(&f, "alpha", Some(0.60));
        for r in &rs {
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let h = rs.iter().map(threshold_headers).collect::<Vec<_>>();
        (h.iter()
            .all(|x| x.as_ref().is_some_and(|(_, q)| q == "true")))
        .then_some(h)
    })
    .expect("threshold headers with quorum_met=true on every alpha response");
    let (t, q) = headers[0].clone().unwrap();
    assert!(
        agent_accepts(&t, &q),
        "header values the agent would reject: {t:?} {q:?}"
    );
    let threshold: f64 = t.parse().unwrap();
    assert!(
        threshold > 0.60 && threshold < 0.94,
        "threshold {threshold} must separate the straggler from the peers"
    );

    // The GET fallback answers the same value, digit for digit.
    let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=alpha");
    assert_eq!(g.status, 200);
    assert_eq!(
        g.text(),
        format!(r#"{{"threshold":{t},"quorum_met":true}}"#)
    );
    assert_eq!(g.header("Content-Type"), Some("application/json"));

    // The straggler is counted on the Prometheus endpoint and named in diagnostics.
    let counted = wait_for(Duration::from_secs(10), || {
        push_cluster(&f, "alpha", Some(0.60));
        let m = get(f.prometheus(), "/metrics").text();
        prom_value(&m, "ingero_fleet_stragglers{cluster_id=\"alpha\"").filter(|v| *v >= 1.0)
    });
    assert_eq!(counted, Some(1.0), "alpha has exactly one straggler");
    let d = get(f.admin_api(), "/api/v1/diagnostics?cluster_id=alpha").json();
    let nodes = d["diagnostics"]["nodes"].as_array().expect("node list");
    let flagged: Vec<_> = nodes
        .iter()
        .filter(|n| n["straggler"] == true)
        .map(|n| n["node_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(flagged, ["alpha-node-07"]);

    // The agent's standalone straggler-event push is accepted and also answered with headers.
    let ev = AgentPush::new("alpha", "alpha-node-07", 0.60).straggler_event_json(
        1,
        threshold,
        "5f0e6f1e-1c1a-4b39-9a3e-6b1f6f7d2a10",
    );
    let r = push_json(f.http(), "alpha", &ev);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(threshold_headers(&r).is_some());

    // Quorum loss: only 3 alpha nodes keep pushing; after the others expire the last
    // threshold is still served, with quorum_met=false.
    let lost = wait_for(Duration::from_secs(20), || {
        let mut last = None;
        for (i, score) in SCORES.iter().enumerate().take(3) {
            let r = push_json(
                f.http(),
                "alpha",
                &AgentPush::new("alpha", &format!("alpha-node-{i:02}"), *score).to_json(),
            );
            last = threshold_headers(&r);
        }
        std::thread::sleep(Duration::from_millis(300));
        last.filter(|(_, q)| q == "false")
    })
    .expect("quorum_met=false after nodes expire");
    let kept: f64 = lost.0.parse().unwrap();
    assert!(agent_accepts(&lost.0, &lost.1));
    assert!((0.1..=0.99).contains(&kept));
    let g = get(f.agent_api(), "/api/v1/threshold?cluster_id=alpha");
    assert_eq!(
        g.text(),
        format!(r#"{{"threshold":{},"quorum_met":false}}"#, lost.0)
    );

    // beta was untouched by all of this.
    let b = get(f.agent_api(), "/api/v1/threshold?cluster_id=beta").json();
    assert!(b["threshold"].as_f64().unwrap() > 0.1);
}

#[test]
fn pushes_without_the_query_parameter_use_the_header_or_the_resource() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let ok = wait_for(Duration::from_secs(15), || {
        push_cluster(&f, "gamma", None);
        // `ingero trace --otlp` style: no query, cluster only in the resource.
        let body = AgentPush::new("gamma", "gamma-node-00", 0.95).to_json();
        let r = post(
            f.http(),
            "/v1/metrics",
            "application/json",
            body.as_bytes(),
            &[],
        );
        threshold_headers(&r)
    });
    assert!(
        ok.is_some(),
        "resource ingero.cluster.id names the cluster for the headers"
    );
    // The README's request header also works.
    let body = AgentPush::new("gamma", "gamma-node-01", 0.95).to_json();
    let r = post(
        f.http(),
        "/v1/metrics",
        "application/json",
        body.as_bytes(),
        &[("ingero.cluster.id", "gamma")],
    );
    assert!(threshold_headers(&r).is_some());
}
