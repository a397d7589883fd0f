//! Event-store benchmarks (numbers in docs/benchmarks.md): the writer's cost per stored
//! event, `explain` over a store of N events, and the agent's per-episode explain (the
//! straggler edge's run over the episode's range) for a few episode lengths.
//!
//! `cargo run --release -p ingero-agent --example store_bench -- [events] [dir]`
//! (default 1,000,000 events, the system temporary directory).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ingero_agent::investigate::episode;
use ingero_agent::investigate::explain::{ExplainOptions, explain, render};
use ingero_agent::store::schema::{op, source};
use ingero_agent::store::{AggregateRow, EventRow, Store, StoreOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("events"));
    let dir = args
        .next()
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
        .join(format!("ingero-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench.db");
    let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap();
    // A loop at 2,000 timed calls/s: n events span n / 2000 seconds, ending now.
    let rate = 2_000i64;
    let secs = n / rate;
    let t0 = (now / 1_000_000_000 - secs) * 1_000_000_000;

    let mut o = StoreOptions::new(&path, "bench-node");
    o.queue = 1 << 20;
    o.max_bytes = u64::MAX;
    o.max_age = Duration::from_secs(365 * 24 * 3600);
    let store = Store::start(o).unwrap();
    let sink = store.sink();
    let start = Instant::now();
    for i in 0..n {
        let s = i / rate;
        // The last fifth of the run is slowed (longer calls), with run-queue delay.
        let slow = s >= secs * 4 / 5;
        sink.event(EventRow {
            timestamp: t0 + s * 1_000_000_000 + (i % rate) * (1_000_000_000 / rate),
            pid: 4242,
            tid: 4242,
            source: source::CUDA,
            op: op::CUDA_STREAM_SYNC,
            duration: if slow && i % 3 == 0 {
                9_000_000
            } else {
                2_000_000 + (i % 13) * 1000
            },
            comm: "train".into(),
            ..Default::default()
        });
        if i % rate == 0 {
            sink.aggregate(AggregateRow {
                bucket: t0 + s * 1_000_000_000,
                source: source::HOST,
                op: op::HOST_SCHED_WAKEUP,
                pid: 4242,
                count: rate,
                sum_dur: if slow { 400_000_000 } else { 5_000_000 },
                max_dur: 1_000_000,
                sum_arg0: 0,
                stored: 0,
            });
        }
    }
    let queued = start.elapsed();
    sink.flush();
    let written = start.elapsed();
    let c = store.counters().clone();
    store.close();
    let dropped = c.dropped_queue_full.load(Ordering::Relaxed);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "write: {n} events queued in {:.2} s, committed in {:.2} s: {:.0} events/s, {:.2} us/event; dropped {dropped}; file {:.1} MB ({:.0} B/event)",
        queued.as_secs_f64(),
        written.as_secs_f64(),
        n as f64 / written.as_secs_f64(),
        written.as_secs_f64() * 1e6 / n as f64,
        size as f64 / 1e6,
        size as f64 / n as f64
    );

    let conn = ingero_agent::store::open_read_only(&path).unwrap();
    let start = Instant::now();
    let r = explain(
        &conn,
        &ExplainOptions {
            since: Duration::from_secs(365 * 24 * 3600),
            per_process: false,
        },
    )
    .unwrap();
    let took = start.elapsed();
    println!(
        "explain: {} calls in {:.3} s, {} chain(s)",
        r.calls,
        took.as_secs_f64(),
        r.chains.len()
    );
    print!("{}", render(&r));

    // The straggler edge's run: explain over the episode's range (a lead before its start
    // to the newest record), as the agent runs it off the tick. Median of 5.
    for episode_s in [10u64, 120, 450] {
        let range = episode::range_for(Duration::from_secs(episode_s));
        let mut took = Vec::new();
        let mut found = None;
        for _ in 0..5 {
            let start = Instant::now();
            found = episode::explain_store(&path, range).unwrap();
            took.push(start.elapsed());
        }
        took.sort();
        println!(
            "episode explain: episode {episode_s} s, range {} s ({} events): median {:.1} ms (min {:.1}, max {:.1}); chains JSON: {} bytes",
            range.as_secs(),
            (range.as_secs() as i64 * rate).min(n),
            took[2].as_secs_f64() * 1e3,
            took[0].as_secs_f64() * 1e3,
            took[4].as_secs_f64() * 1e3,
            found.map_or(0, |s| s.len())
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
