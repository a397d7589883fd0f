//! Heap used by the exporter holding a large fleet, measured with a counting global
//! allocator (bytes requested; the allocator's own per-block overhead is estimated
//! separately from the number of live blocks).
//!
//!     cargo run --release -p fleet-prometheus --example memory -- [nodes] [--no-sums]
//!
//! Each node pushes the agent's health push (spec 1.4): 13 series with per-cgroup sums
//! (one memcpy direction), 10 without.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/agent.rs"]
mod agent;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::Relaxed};

use component::Timestamp;
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = BYTES.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
            BLOCKS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        BYTES.fetch_sub(layout.size(), Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now =
                    BYTES.fetch_add(new_size - layout.size(), Relaxed) + new_size - layout.size();
                PEAK.fetch_max(now, Relaxed);
            } else {
                BYTES.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn load(e: &PrometheusExporter, nodes: u64, with_sums: bool, t: u64) {
    agent::fill(e, nodes, with_sums, t);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let with_sums = !args.iter().any(|a| a == "--no-sums");
    let t0 = 1_750_000_000;

    let base_bytes = BYTES.load(Relaxed);
    let base_blocks = BLOCKS.load(Relaxed);
    let e = agent::fleet_exporter(PrometheusExporterConfig::default());
    load(&e, nodes, with_sums, t0);
    let series = e.series_count();
    let held = BYTES.load(Relaxed) - base_bytes;
    let mut tel = Vec::new();
    e.telemetry(&mut tel);
    let interned = tel
        .iter()
        .find(|f| f.name == "ingero_fleet_prometheus_interned_bytes")
        .map_or(0.0, |f| f.samples[0].value);
    let blocks = (BLOCKS.load(Relaxed) - base_blocks).max(0) as usize;
    // glibc malloc: 8 bytes of header per block, sizes rounded up to 16.
    let overhead = blocks * 16;
    println!("nodes                 {nodes}");
    println!("series                {series}");
    println!(
        "heap (requested)      {:.1} MiB  = {:.1} B/series, {:.0} B/node",
        mib(held),
        held as f64 / series as f64,
        held as f64 / nodes as f64
    );
    println!(
        "  of which interned   {:.1} MiB (strings, label sets, indexes, capacity)",
        interned / (1024.0 * 1024.0)
    );
    println!(
        "live heap blocks      {blocks} (~{:.1} MiB malloc overhead at 16 B/block)",
        mib(overhead)
    );
    println!(
        "heap incl. overhead   {:.1} MiB  = {:.1} B/series",
        mib(held + overhead),
        (held + overhead) as f64 / series as f64
    );

    // A second round of pushes updates in place: no growth.
    load(&e, nodes, with_sums, t0 + 10);
    println!(
        "after a 2nd push      {:.1} MiB",
        mib(BYTES.load(Relaxed) - base_bytes)
    );

    // Render: the page itself plus transient buffers.
    PEAK.store(BYTES.load(Relaxed), Relaxed);
    let before = BYTES.load(Relaxed);
    let mut page = String::new();
    let start = std::time::Instant::now();
    e.render(Timestamp::from_secs(t0 + 10), &[], &mut page);
    let took = start.elapsed();
    println!(
        "render                {:.1} MiB page, {} lines, {:?}, peak transient beyond the page {:.1} MiB",
        mib(page.len()),
        page.lines().count(),
        took,
        mib(PEAK.load(Relaxed).saturating_sub(before + page.capacity()))
    );
    let whole_len = page.len();
    drop(page);

    // Streamed render, as ingero-fleet serves a scrape: 256 KiB chunks handed off (here:
    // dropped after counting) at the exporter's flush points.
    PEAK.store(BYTES.load(Relaxed), Relaxed);
    let before = BYTES.load(Relaxed);
    let (mut sent, mut chunks) = (0usize, 0usize);
    let mut buf = String::with_capacity(256 * 1024);
    let start = std::time::Instant::now();
    e.render_chunked(
        Timestamp::from_secs(t0 + 10),
        &[],
        &mut buf,
        &mut |b: &mut String| {
            if b.len() >= 256 * 1024 {
                sent += b.len();
                chunks += 1;
                b.clear();
            }
            true
        },
    );
    sent += buf.len();
    let took = start.elapsed();
    assert_eq!(sent, whole_len, "streamed page differs in length");
    println!(
        "streamed render       {:.1} MiB in {} chunks, {:?}, peak heap during it {:.1} MiB above the store",
        mib(sent),
        chunks + 1,
        took,
        mib(PEAK.load(Relaxed).saturating_sub(before))
    );
    drop(buf);

    // Half the fleet goes away: expiry frees series and compaction the interned strings.
    load(&e, nodes / 2, with_sums, t0 + 200);
    let start = std::time::Instant::now();
    let removed = e.expire(Timestamp::from_secs(t0 + 311));
    println!(
        "expire half           removed {removed} series in {:?}; heap now {:.1} MiB for {} series",
        start.elapsed(),
        mib(BYTES.load(Relaxed) - base_bytes),
        e.series_count()
    );
    if let Some(rss) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_string)
        })
    {
        println!("process {rss}");
    }
}
