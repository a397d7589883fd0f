//! The query budgets at 100 M stored points: a benchmark, not part of the default run.
//!
//!   eval "$(scripts/duckdb-prebuilt.sh)"
//!   cargo test -p ingero-echo --test it -- --ignored --nocapture hostile_queries_at_scale
//!
//! `ECHO_SCALE_POINTS` (default 100,000,000) health-score points of 1,000 nodes in one
//! cluster over the last hour are written straight into the store's tables with DuckDB SQL,
//! in the layout the ingest path leaves once its rollup is flushed and merged: each point
//! in `health_scores` (with its commit's `seq`, 100,000 points per commit) and in `points`
//! (attributes and resource as JSON), one merged `health_minutes` row per node and minute,
//! `rollup_state` covering every commit, the cluster in `clusters`. Then each hostile query
//! runs through `Tools::call` (the API's path, its budgets and timeout), and its latency and
//! the process's peak resident memory during it (`VmHWM`, reset before each) are printed.
//! `ECHO_SCALE_DIR` keeps the filled store for another run.

use std::sync::Arc;
use std::time::Instant;

use ingero_echo::config::{QueryConfig, StoreConfig};
use ingero_echo::query::{Scope, Tools};
use ingero_echo::store::Store;
use serde_json::{Value, json};

fn vm(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn fill(store: &Store, n: u64) {
    let now = ingero_echo::store::now_ns();
    let start = now - 3_600_000_000_000 + 1_000_000_000;
    let step = (3_590_000_000_000 / n.max(1)).max(1);
    let c = store.connection().unwrap();
    let t = Instant::now();
    c.execute_batch(&format!(
        "BEGIN TRANSACTION;
         INSERT INTO health_scores (ts_ns, cluster_id, node_id, score, state, workload_type, detection_mode, seq)
         SELECT {start} + i * {step}, 'bench', printf('node-%04d', i % 1000),
                CASE WHEN i % 1000 = 7 THEN 0.5 ELSE 0.9 END + (hash(i) % 1000) / 20000.0,
                'active', NULL, NULL, i // 100000 + 1
         FROM range({n}) t(i);
         INSERT INTO points
         SELECT ts_ns, cluster_id, node_id, 'ingero.node.health_score', 'gauge', score, NULL,
                '{{\"ingero.node.state\":\"active\"}}',
                '{{\"ingero.cluster.id\":\"bench\",\"ingero.node.id\":\"' || node_id || '\"}}'
         FROM health_scores;
         INSERT INTO health_minutes
         SELECT (ts_ns // 60000000000) * 60000000000, cluster_id, node_id, count(*), sum(score), min(score), max(ts_ns)
         FROM health_scores GROUP BY ALL;
         UPDATE rollup_state SET flushed_seq = (SELECT max(seq) FROM health_scores);
         INSERT INTO clusters SELECT 'bench', max(ts_ns) FROM health_scores
           ON CONFLICT (cluster_id) DO UPDATE SET ts_ns = excluded.ts_ns;
         COMMIT;
         CHECKPOINT;"
    ))
    .unwrap();
    println!(
        "{}",
        json!({"filled_points": n, "seconds": t.elapsed().as_secs_f64(), "peak_rss_mib": vm("VmHWM:")})
    );
}

#[test]
#[ignore = "a benchmark: minutes and gigabytes of disk (see the module doc)"]
fn hostile_queries_at_scale() {
    let n: u64 = std::env::var("ECHO_SCALE_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000_000);
    let keep = std::env::var("ECHO_SCALE_DIR").ok();
    let dir = keep
        .clone()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::common::temp_dir("scale"));
    let cfg = StoreConfig {
        data_dir: dir.display().to_string(),
        ..StoreConfig::default()
    };
    let filled = dir.join(ingero_echo::store::DB_FILE).exists();
    if !filled {
        let store = Store::open(cfg.clone()).unwrap();
        fill(&store, n);
        store.shutdown();
    }
    let store = Store::open(cfg).unwrap();
    let tools = Arc::new(Tools::new(store.clone(), QueryConfig::default()).unwrap());
    let cases: Vec<(&str, Value)> = vec![
        (
            "fleet.cluster.find_outlier_nodes",
            json!({"cluster_id": "bench", "window": "1h"}),
        ),
        (
            "fleet.cluster.history",
            json!({"cluster_id": "bench", "window": "1h", "step": "1ns"}),
        ),
        (
            "fleet.cluster.history",
            json!({"cluster_id": "bench", "window": "1h", "step": "1m"}),
        ),
        (
            "fleet.cluster.history",
            json!({"cluster_id": "bench", "window": "1h", "step": "7s"}),
        ),
        (
            "fleet.cluster.summary",
            json!({"cluster_id": "bench", "window": "1h"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT * FROM points"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT * FROM health_scores ORDER BY score"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT node_id, avg(score), count(*) FROM health_scores GROUP BY ALL"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT ts_ns, count(*) FROM health_scores GROUP BY ALL"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT length(string_agg(attributes, ',')) FROM points"}),
        ),
        (
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT count(DISTINCT resource || ts_ns) FROM points"}),
        ),
    ];
    for (name, args) in cases {
        // Resets VmHWM to the current resident size.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let before = vm("VmRSS:");
        let t = Instant::now();
        let out = tools.call(name, args.clone(), &Scope::All);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let answer = match &out {
            Ok(v) => json!({"status": 200, "bytes": v.to_string().len(),
                            "rows": v.get("rows").or(v.get("scores")).or(v.get("nodes")).and_then(Value::as_array).map(Vec::len),
                            "truncated": v.get("truncated")}),
            Err(e) => {
                json!({"status": e.status(), "error": e.to_string().chars().take(160).collect::<String>()})
            }
        };
        println!(
            "{}",
            json!({"tool": name, "args": args, "ms": ms.round(), "rss_before_mib": before,
                   "peak_rss_mib": vm("VmHWM:"), "answer": answer})
        );
    }
    store.shutdown();
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
