//! Prints the Ingero agent's exact payloads (the `testkit` builders the `ingero-fleet`
//! end-to-end tests push) as one JSON document, for the Go-collector parity test
//! (`go-shim/e2e/parity.py`):
//!
//! ```json
//! {"scores": [...],
//!  "pushes": {"alpha": ["<agent JSON body>", ...], "beta": [...]},
//!  "batches": {"alpha": "<all nodes of alpha in one OTLP JSON request>", ...},
//!  "cold": "<one push of cluster cold>",
//!  "event": "<straggler-event push of alpha-node-07>"}
//! ```
#![allow(clippy::print_stdout, clippy::unwrap_used)] // a dev tool that prints JSON

use serde_json::{Value, json};
use testkit::AgentPush;

const SCORES: [f64; 8] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.60];

fn main() {
    let mut pushes = serde_json::Map::new();
    let mut batches = serde_json::Map::new();
    for cluster in ["alpha", "beta"] {
        let bodies: Vec<String> = SCORES
            .iter()
            .enumerate()
            .map(|(i, s)| AgentPush::new(cluster, &format!("{cluster}-node-{i:02}"), *s).to_json())
            .collect();
        // One request carrying every node's resource, so a tick never sees half a cluster.
        let mut all: Vec<Value> = Vec::new();
        for b in &bodies {
            let v: Value = serde_json::from_str(b).unwrap();
            all.extend(v["resourceMetrics"].as_array().cloned().unwrap_or_default());
        }
        batches.insert(
            cluster.into(),
            json!({"resourceMetrics": all}).to_string().into(),
        );
        pushes.insert(cluster.into(), bodies.into());
    }
    let doc = json!({
        "scores": SCORES,
        "pushes": pushes,
        "batches": batches,
        "cold": AgentPush::new("cold", "cold-node-00", 0.9).to_json(),
        "event": AgentPush::new("alpha", "alpha-node-07", 0.60)
            .straggler_event_json(1, 0.9, "5f0e6f1e-1c1a-4b39-9a3e-6b1f6f7d2a10"),
    });
    println!("{doc}");
}
