//! Heap per series, measured with a counting global allocator (this test binary only).
//! The 100k-node figure for the README comes from `examples/memory.rs`; this keeps a
//! smaller fleet under the budget so a regression fails CI.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

// Its own binary: the counting global allocator would count the other tests' threads.
#[path = "it/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use common::agent::{AgentPush, health_push};
use common::*;

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            BYTES.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        BYTES.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            BYTES.fetch_add(new_size, Relaxed);
            BYTES.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The count is global: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The budget: 100,000 agents x ~11 series in ~60 MB is ~55 bytes per series.
const MAX_BYTES_PER_SERIES: f64 = 55.0;

#[test]
fn a_fleet_of_agents_stays_within_the_per_series_budget() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let nodes = 20_000u64;
    let before = BYTES.load(Relaxed);
    let e = default_exporter();
    for chunk in (0..nodes).collect::<Vec<_>>().chunks(500) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|&i| health_push(&AgentPush::fleet_node(i, true, T0 * 1_000_000_000)))
            .collect();
        e.consume(&batch, ts(T0));
    }
    let held = BYTES.load(Relaxed) - before;
    let series = e.series_count();
    assert_eq!(series as u64, nodes * 13);
    let per_series = held as f64 / series as f64;
    println!("{nodes} nodes, {series} series: {held} bytes, {per_series:.1} B/series");
    assert!(
        per_series <= MAX_BYTES_PER_SERIES,
        "{per_series:.1} bytes per series exceeds the budget of {MAX_BYTES_PER_SERIES}"
    );
    // The byte estimate the caps charge bounds it from above.
    assert!(held <= e.total_bytes(), "{held} > {}", e.total_bytes());

    // Updating every series in place allocates nothing that stays.
    let batch: Vec<_> = (0..nodes)
        .map(|i| health_push(&AgentPush::fleet_node(i, true, (T0 + 10) * 1_000_000_000)))
        .collect();
    let before_update = BYTES.load(Relaxed);
    e.consume(&batch, ts(T0 + 10));
    assert_eq!(BYTES.load(Relaxed), before_update);
    drop(batch);

    // Expiring everything gives the memory back (the exporter keeps only empty tables).
    e.expire(ts(T0 + 1000));
    let left = BYTES.load(Relaxed).saturating_sub(before);
    assert!(
        left < held / 20,
        "{left} bytes left of {held} after expiring everything"
    );
}

/// A resource of the `limit-labels` attack (`scripts/attack-rss.py`): 30 resource
/// attributes and 32 point attributes at the receiver's limits (256-byte keys, values a
/// little over 4,000 bytes), every value distinct per node, keys shared by every node.
fn wide_series(node: u64) -> component::otlp::ResourceMetrics {
    use component::otlp::kv_str;
    let id = format!("a-n{node}");
    let mut attrs = vec![
        kv_str("ingero.cluster.id", "alpha"),
        kv_str("ingero.node.id", id.clone()),
    ];
    attrs.extend((0..30).map(|j| {
        kv_str(
            &format!("k{j:03}{}", "k".repeat(252)),
            format!("{id}-{j}-{}", "v".repeat(4000)),
        )
    }));
    let points = (0..32)
        .map(|j| {
            kv_str(
                &format!("p{j:03}{}", "p".repeat(252)),
                format!("{id}-{j}-{}", "w".repeat(4000)),
            )
        })
        .collect();
    rm(
        attrs,
        vec![gauge("attack.wide", "", vec![point(points, T0, 1.0)])],
    )
}

/// A node of the `four-clusters` attack: 3 gauges sharing one distinct 4,000-byte label.
fn long_label_node(node: u64) -> component::otlp::ResourceMetrics {
    use component::otlp::kv_str;
    let id = format!("c1-n{node}");
    let attrs = vec![kv_str(
        "big",
        format!("{id}-{}", "x".repeat(4000 - id.len() - 1)),
    )];
    let gauges = (0..3)
        .map(|g| {
            gauge(
                &format!("attack.g{g}"),
                "",
                vec![point(attrs.clone(), T0, 1.0)],
            )
        })
        .collect();
    rm(
        vec![
            kv_str("ingero.cluster.id", "c1"),
            kv_str("ingero.node.id", id.clone()),
        ],
        gauges,
    )
}

/// Heap the exporter keeps for `nodes` resources made by `make` (4 per push, as the
/// attack sends them), counted by the allocator once the requests are dropped, and the
/// estimate charged for them. One node is pushed first to warm the fixed tables.
fn held_and_estimated(
    nodes: u64,
    make: fn(u64) -> component::otlp::ResourceMetrics,
) -> (usize, usize) {
    let e = default_exporter();
    e.consume(&[make(u64::MAX)], ts(T0));
    let (before, est_before) = (BYTES.load(Relaxed), e.total_bytes());
    for chunk in (0..nodes).collect::<Vec<_>>().chunks(4) {
        let batch: Vec<_> = chunk.iter().map(|&i| make(i)).collect();
        let stats = e.consume(&batch, ts(T0));
        assert_eq!(stats.lost, 0);
    }
    let held = BYTES.load(Relaxed) - before;
    (held, e.total_bytes() - est_before)
}

/// The byte estimate bounds what wide series really hold: the heap the exporter keeps
/// for series of 64 labels at the payload limits (the `limit-labels` attack) and for
/// nodes with one long label (`four-clusters`) never exceeds the estimate charged for
/// them. (It did not: the data-point attribute memo kept every wide point's attributes
/// as its key, 137 KB a series outside the estimate, and the string arena's growth room
/// was not counted.)
#[test]
fn the_estimate_of_wide_series_covers_their_heap() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (shape, nodes, make) in [
        ("64 labels at the limits", 200, wide_series as fn(u64) -> _),
        ("one 4,000-byte label, 3 gauges", 4000, long_label_node),
    ] {
        let (held, estimate) = held_and_estimated(nodes, make);
        println!(
            "{shape}: {nodes} nodes hold {held} B of heap ({} B each), estimate {estimate} B ({} B each)",
            held / nodes as usize,
            estimate / nodes as usize
        );
        assert!(
            held <= estimate,
            "{shape}: {held} heap bytes, above their estimate of {estimate}"
        );
    }
}
