//! Reads racing publishes: every read must see a (threshold, quorum) pair that one publish
//! wrote for that cluster, both headers or neither, and never go back in time.

#![allow(clippy::unwrap_used)] // Test helpers: a failed unwrap is a failed test.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use component::api::ApiRequest;
use component::{ConfigValue, Timestamp};
use ingero_extension::{COLD_START_BODY, ThresholdExtension, create};
use ingero_wire::http::THRESHOLD_API_PATH;
use ingero_wire::threshold::{ClusterDiagnostics, ClusterReport, ThresholdValue};

const CLUSTERS: u64 = 64;
const PUBLISHES: u64 = 1_000;
const CHECKPOINT_EVERY: u64 = 25;
const READERS: usize = 3;

/// The value generation `g` publishes (unique per generation, so a read names its publish).
/// On the six-decimal grid, so the delivered value is exactly the published one.
fn threshold(g: u64) -> f64 {
    (100_000 + g * 800) as f64 / 1e6
}

fn quorum(g: u64) -> bool {
    !g.is_multiple_of(3)
}

/// Cluster `c` is published without a value at generation `g`.
fn cold(g: u64, c: u64) -> bool {
    (g + c).is_multiple_of(7)
}

/// Cluster `c` is left out of generation `g` altogether.
fn missing(g: u64, c: u64) -> bool {
    (g + c).is_multiple_of(11)
}

fn generation_of(t: f64) -> u64 {
    let g = ((t * 1e6).round() as u64 - 100_000) / 800;
    assert_eq!(threshold(g), t, "{t} is not a value any publish wrote");
    g
}

fn diagnostics() -> Arc<ClusterDiagnostics> {
    Arc::new(ClusterDiagnostics {
        median: None,
        mad: None,
        raw_threshold: None,
        threshold: None,
        quorum_met: false,
        active_nodes: 0,
        idle_nodes: 0,
        calibrating_nodes: 0,
        expected_nodes: 0,
        coverage: 1.0,
        coverage_low: false,
        panic_mode: false,
        straggler_count: 0,
        cohorts: Vec::new(),
        nodes: Vec::new(),
        computed_at_unix_nano: 0,
    })
}

fn reports(g: u64, diag: &Arc<ClusterDiagnostics>) -> Vec<ClusterReport> {
    (0..CLUSTERS)
        .filter(|c| !missing(g, *c))
        .map(|c| ClusterReport {
            cluster_id: format!("cluster-{c}").into(),
            value: if cold(g, c) {
                None
            } else {
                ThresholdValue::new(threshold(g), quorum(g))
            },
            diagnostics: Arc::clone(diag),
        })
        .collect()
}

/// The (threshold, quorum) a GET body carries, read exactly (serde_json's float parser is
/// not exact, so the number is parsed from its text); `None` for the cold-start shape.
fn body_value(body: &[u8]) -> Option<(f64, bool)> {
    if body == COLD_START_BODY {
        return None;
    }
    let text = std::str::from_utf8(body).unwrap();
    let rest = text.strip_prefix(r#"{"threshold":"#).unwrap();
    let (t, rest) = rest.split_once(r#","quorum_met":"#).unwrap();
    let q = match rest {
        "true}" => true,
        "false}" => false,
        other => panic!("body tail {other:?}"),
    };
    Some((t.parse().unwrap(), q))
}

fn get_body(ext: &ThresholdExtension, id: &str) -> Vec<u8> {
    let query = format!("cluster_id={id}");
    let resp = ext.route_agent(&ApiRequest {
        method: "GET",
        path: THRESHOLD_API_PATH,
        query: Some(&query),
    });
    assert_eq!(resp.status, 200);
    resp.body
}

/// Check one read of cluster `c`; returns the generation it proves, if any.
fn check(c: u64, value: Option<(f64, bool)>, label: &str) -> Option<u64> {
    let (t, q) = value?;
    let g = generation_of(t);
    assert_eq!(q, quorum(g), "{label}: quorum of generation {g} torn");
    assert!(
        !cold(g, c) && !missing(g, c),
        "{label}: cluster {c} had no value at {g}"
    );
    Some(g)
}

#[test]
fn every_read_sees_one_publish_and_time_only_moves_forward() {
    let ext = Arc::new(create(&ConfigValue::Null).unwrap());
    let sink = ingero_wire::threshold::threshold_sink(&*ext).unwrap();
    let store = ext.store();
    let done = Arc::new(AtomicBool::new(false));
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
    let start = Arc::new(Barrier::new(READERS + 1));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let ext = Arc::clone(&ext);
            let store = ext.store();
            let done = Arc::clone(&done);
            let progress = Arc::clone(&progress);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let mut last_seen = vec![0u64; CLUSTERS as usize];
                let mut generations = HashSet::new();
                let mut headers_seen = 0u64;
                start.wait();
                let mut final_pass = false;
                loop {
                    if done.load(Ordering::Acquire) {
                        final_pass = true;
                    }
                    for c in 0..CLUSTERS {
                        let id = format!("cluster-{c}");
                        let headers = store.push_headers(&id).map(|h| {
                            let t: f64 = h.threshold.to_str().unwrap().trim().parse().unwrap();
                            let q = match h.quorum_met.to_str().unwrap() {
                                "true" => true,
                                "false" => false,
                                other => panic!("quorum header {other:?}"),
                            };
                            (t, q)
                        });
                        headers_seen += u64::from(headers.is_some());
                        let value = store.get(&id).map(|v| (v.threshold(), v.quorum_met()));
                        let body = body_value(&get_body(&ext, &id));
                        for (read, label) in
                            [(headers, "headers"), (value, "get"), (body, "GET body")]
                        {
                            if let Some(g) = check(c, read, label) {
                                let slot = &mut last_seen[c as usize];
                                assert!(
                                    g >= *slot,
                                    "{label}: cluster {c} went back from {slot} to {g}"
                                );
                                *slot = g;
                                generations.insert(g);
                            }
                        }
                        progress[r].fetch_add(1, Ordering::Release);
                    }
                    if final_pass {
                        break;
                    }
                }
                (generations, last_seen, headers_seen)
            })
        })
        .collect();

    let diag = diagnostics();
    start.wait();
    let mut checkpoints = 0u64;
    for g in 1..=PUBLISHES {
        sink.publish(reports(g, &diag), Timestamp::from_secs(g));
        if g % CHECKPOINT_EVERY == 0 {
            // Let every reader get a full pass in after this publish, so reads and publishes
            // provably interleave (no sleeping, no timing).
            let marks: Vec<u64> = progress.iter().map(|p| p.load(Ordering::Acquire)).collect();
            for ((p, mark), reader) in progress.iter().zip(marks).zip(&readers) {
                while p.load(Ordering::Acquire) < mark + CLUSTERS {
                    // A reader that stopped early has failed an assertion: stop waiting and
                    // let the join below report its panic.
                    if reader.is_finished() {
                        break;
                    }
                    thread::yield_now();
                }
            }
            checkpoints += 1;
        }
    }
    done.store(true, Ordering::Release);

    for reader in readers {
        let (generations, last_seen, headers_seen) = reader.join().unwrap();
        assert!(
            generations.len() as u64 >= checkpoints,
            "a reader saw only {} generations across {checkpoints} checkpoints",
            generations.len()
        );
        assert!(headers_seen > 0);
        // After the last publish every reader ends on the last generation's values.
        for c in 0..CLUSTERS {
            if !cold(PUBLISHES, c) && !missing(PUBLISHES, c) {
                assert_eq!(last_seen[c as usize], PUBLISHES, "cluster {c}");
            }
        }
    }
    assert_eq!(store.generation(), PUBLISHES);
}
