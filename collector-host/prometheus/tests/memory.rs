//! Heap per series, measured with a counting global allocator (this test binary only).
//! The 100k-node figure for the README comes from `examples/memory.rs`; this keeps a
//! smaller fleet under the budget so a regression fails CI.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and their helpers may unwrap

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

/// The budget: 100,000 agents x ~11 series in ~60 MB is ~55 bytes per series.
const MAX_BYTES_PER_SERIES: f64 = 55.0;

#[test]
fn a_fleet_of_agents_stays_within_the_per_series_budget() {
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
    let left = BYTES.load(Relaxed) - before;
    assert!(
        left < held / 20,
        "{left} bytes left of {held} after expiring everything"
    );
}
