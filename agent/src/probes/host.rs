//! The host layer (`bpf/host.bpf.c`): scheduler and block I/O tracepoints, aggregated in the
//! kernel per watched process, read once a second and written to the store as
//! `event_aggregates` rows (1-second buckets): `sched_switch` (switches, off-CPU ns,
//! involuntary switches), `sched_wakeup` (run-queue waits and their ns), `block_read` /
//! `block_write` / `block_discard` (requests, latency ns, bytes).
//!
//! Scope: with `--pid` / `--cgroup` the same kernel filter as the uprobes. Without a scope,
//! the processes that made CUDA or NCCL calls (reported by the probe thread), so a node's
//! other work is not traced.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader};
use parking_lot::Mutex;

use super::loader::Filters;
use super::scope::{self, FILTER_PIDS, Scope};
use crate::store::schema::{op, source};
use crate::store::{AggregateRow, StoreSink};

pub const HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));

/// `struct sched_counts`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedCounts {
    pub offcpu_ns: u64,
    pub switches: u64,
    pub involuntary: u64,
    pub runq_ns: u64,
    pub runq_events: u64,
    pub runq_max_ns: u64,
}
// SAFETY: `#[repr(C)]`, only u64 fields, no padding, every bit pattern valid.
unsafe impl aya::Pod for SchedCounts {}

/// `struct io_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoKey {
    pub tgid: u32,
    pub dir: u32,
}
// SAFETY: as above (two u32).
unsafe impl aya::Pod for IoKey {}

/// `struct io_counts`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounts {
    pub ops: u64,
    pub bytes: u64,
    pub lat_ns: u64,
    pub lat_max_ns: u64,
    pub reserved: u64,
}
// SAFETY: as above.
unsafe impl aya::Pod for IoCounts {}

const _: () = {
    assert!(std::mem::size_of::<SchedCounts>() == 48);
    assert!(std::mem::size_of::<IoCounts>() == 40);
    assert!(std::mem::size_of::<IoKey>() == 8);
};

const PROGRAMS: &[(&str, &str, &str)] = &[
    ("host_sched_switch", "sched", "sched_switch"),
    ("host_sched_wakeup", "sched", "sched_wakeup"),
    ("host_block_bio_queue", "block", "block_bio_queue"),
    ("host_block_rq_complete", "block", "block_rq_complete"),
];

/// What the host thread has seen, for logs and the status view.
#[derive(Debug, Default)]
pub struct HostCounters {
    /// `[threads_full, procs_full, io_inflight_full, io_procs_full]` (kernel, cumulative).
    pub kernel_drops: [AtomicU64; 4],
    pub drains: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("host tracepoints: {0}")]
    Load(String),
}

/// The running host layer.
#[derive(Debug)]
pub struct HostHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub counters: Arc<HostCounters>,
    /// Processes seen making GPU calls (the scope when none is configured).
    pub gpu_pids: Arc<Mutex<BTreeSet<u32>>>,
}

impl HostHandle {
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HostHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// A field's offset from a tracepoint's format file.
fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|l| {
        let l = l.trim();
        let decl = l.strip_prefix("field:")?.split(';').next()?;
        let name = decl.rsplit([' ', '*']).next()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        let off = l.split("offset:").nth(1)?.split(';').next()?;
        off.trim().parse().ok()
    })
}

fn tracefs_format(event: &str) -> Option<String> {
    for root in [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ] {
        if let Ok(s) = std::fs::read_to_string(format!("{root}/{event}/format")) {
            return Some(s);
        }
    }
    None
}

/// Load and attach the tracepoints and start the thread that drains them every `interval`.
pub fn start(
    scope_cfg: &Scope,
    sink: StoreSink,
    interval: Duration,
    gpu_pids: Arc<Mutex<BTreeSet<u32>>>,
) -> Result<HostHandle, HostError> {
    let mode = if scope_cfg.mode() == 0 {
        FILTER_PIDS
    } else {
        scope_cfg.mode()
    };
    let queue = tracefs_format("block/block_bio_queue").unwrap_or_default();
    let complete = tracefs_format("block/block_rq_complete").unwrap_or_default();
    let g = |fmt: &str, f: &str, d: u32| field_offset(fmt, f).unwrap_or(d);
    let offs = [
        ("blk_dev_off", g(&queue, "dev", 8)),
        ("blk_sector_off", g(&queue, "sector", 16)),
        ("blk_rwbs_off", g(&queue, "rwbs", 28)),
        ("blk_c_dev_off", g(&complete, "dev", 8)),
        ("blk_c_sector_off", g(&complete, "sector", 16)),
        ("blk_c_nr_sector_off", g(&complete, "nr_sector", 24)),
    ];
    let mut loader = EbpfLoader::new();
    loader.override_global("filter_mode", &mode, false);
    for (name, v) in &offs {
        loader.override_global(name, v, false);
    }
    let mut ebpf = loader
        .load(HOST_OBJECT)
        .map_err(|e| HostError::Load(e.to_string()))?;
    for (prog, cat, name) in PROGRAMS {
        let p: &mut TracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| HostError::Load(format!("{prog} missing")))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| HostError::Load(e.to_string()))?;
        p.load()
            .map_err(|e| HostError::Load(format!("{prog}: {e}")))?;
        p.attach(cat, name)
            .map_err(|e| HostError::Load(format!("{cat}/{name}: {e}")))?;
    }
    let take = |ebpf: &mut Ebpf, m: &str| {
        ebpf.take_map(m)
            .ok_or_else(|| HostError::Load(format!("map {m} missing")))
    };
    let filters = Filters {
        pids: BpfHashMap::try_from(take(&mut ebpf, "filter_pids")?)
            .map_err(|e| HostError::Load(e.to_string()))?,
        cgroups: BpfHashMap::try_from(take(&mut ebpf, "filter_cgroups")?)
            .map_err(|e| HostError::Load(e.to_string()))?,
    };
    let sched: BpfHashMap<MapData, u32, SchedCounts> =
        BpfHashMap::try_from(take(&mut ebpf, "host_sched")?)
            .map_err(|e| HostError::Load(e.to_string()))?;
    let io: BpfHashMap<MapData, IoKey, IoCounts> =
        BpfHashMap::try_from(take(&mut ebpf, "host_io")?)
            .map_err(|e| HostError::Load(e.to_string()))?;
    let drops: PerCpuArray<MapData, u64> = PerCpuArray::try_from(take(&mut ebpf, "host_drops")?)
        .map_err(|e| HostError::Load(e.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(HostCounters::default());
    let mut w = HostWorker {
        _ebpf: ebpf,
        filters,
        sched,
        io,
        drops,
        sink,
        scope: scope_cfg.clone(),
        gpu_pids: gpu_pids.clone(),
        counters: counters.clone(),
        prev_sched: HashMap::new(),
        prev_io: HashMap::new(),
    };
    w.refresh_scope();
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ingero-host".into())
        .spawn(move || {
            let mut last = std::time::Instant::now();
            while !stop2.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if last.elapsed() >= interval {
                    last = std::time::Instant::now();
                    w.refresh_scope();
                    w.drain();
                }
            }
            w.drain();
        })
        .map_err(|e| HostError::Load(e.to_string()))?;
    Ok(HostHandle {
        stop,
        thread: Some(thread),
        counters,
        gpu_pids,
    })
}

struct HostWorker {
    /// Holds the programs attached.
    _ebpf: Ebpf,
    filters: Filters,
    sched: BpfHashMap<MapData, u32, SchedCounts>,
    io: BpfHashMap<MapData, IoKey, IoCounts>,
    drops: PerCpuArray<MapData, u64>,
    sink: StoreSink,
    scope: Scope,
    gpu_pids: Arc<Mutex<BTreeSet<u32>>>,
    counters: Arc<HostCounters>,
    prev_sched: HashMap<u32, SchedCounts>,
    prev_io: HashMap<IoKey, IoCounts>,
}

fn delta(now: u64, prev: u64) -> u64 {
    now.saturating_sub(prev)
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl HostWorker {
    fn refresh_scope(&mut self) {
        let lost = if self.scope.mode() == 0 {
            let pids: Vec<u32> = self.gpu_pids.lock().iter().copied().collect();
            self.filters.set_pids(&pids)
        } else {
            let cgroups = if self.scope.cgroups.is_empty() {
                Vec::new()
            } else {
                self.scope.cgroup_ids()
            };
            self.filters.set_pids(&self.scope.pids) + self.filters.set_cgroups(&cgroups)
        };
        if lost > 0 {
            tracing::warn!(
                lost,
                max_pids = scope::MAX_FILTER_PIDS,
                "host scope filter full: some processes' host layer is not traced"
            );
        }
    }

    /// Turn the cumulative counters into this interval's deltas and queue them.
    fn drain(&mut self) {
        let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(0);
        // The interval just ended: stamp it with the second it mostly covered.
        let bucket = (now - 500_000_000).div_euclid(1_000_000_000) * 1_000_000_000;
        let mut seen = HashMap::with_capacity(self.prev_sched.len());
        for item in self.sched.iter() {
            let Ok((pid, c)) = item else { continue };
            let p = self.prev_sched.get(&pid).copied().unwrap_or_default();
            let d_sw = delta(c.switches, p.switches);
            let d_runq = delta(c.runq_events, p.runq_events);
            if d_sw > 0 || d_runq > 0 {
                self.sink.aggregate(AggregateRow {
                    bucket,
                    source: source::HOST,
                    op: op::HOST_SCHED_SWITCH,
                    pid,
                    count: as_i64(d_sw),
                    sum_dur: as_i64(delta(c.offcpu_ns, p.offcpu_ns)),
                    max_dur: 0,
                    sum_arg0: as_i64(delta(c.involuntary, p.involuntary)),
                });
                self.sink.aggregate(AggregateRow {
                    bucket,
                    source: source::HOST,
                    op: op::HOST_SCHED_WAKEUP,
                    pid,
                    count: as_i64(d_runq),
                    sum_dur: as_i64(delta(c.runq_ns, p.runq_ns)),
                    max_dur: as_i64(c.runq_max_ns),
                    sum_arg0: 0,
                });
            }
            seen.insert(pid, c);
        }
        self.prev_sched = seen;
        let mut seen = HashMap::with_capacity(self.prev_io.len());
        for item in self.io.iter() {
            let Ok((k, c)) = item else { continue };
            let p = self.prev_io.get(&k).copied().unwrap_or_default();
            let d_ops = delta(c.ops, p.ops);
            if d_ops > 0 {
                self.sink.aggregate(AggregateRow {
                    bucket,
                    source: source::IO,
                    op: i64::from(k.dir),
                    pid: k.tgid,
                    count: as_i64(d_ops),
                    sum_dur: as_i64(delta(c.lat_ns, p.lat_ns)),
                    max_dur: as_i64(c.lat_max_ns),
                    sum_arg0: as_i64(delta(c.bytes, p.bytes)),
                });
            }
            seen.insert(k, c);
        }
        self.prev_io = seen;
        for (i, slot) in self.counters.kernel_drops.iter().enumerate() {
            let idx = i as u32;
            if let Ok(v) = self.drops.get(&idx, 0) {
                slot.store(v.iter().sum(), Ordering::Relaxed);
            }
        }
        self.counters.drains.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_come_from_the_format_file() {
        let fmt = "name: block_rq_issue\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                   \tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;\n\
                   \tfield:sector_t sector;\toffset:16;\tsize:8;\tsigned:0;\n\
                   \tfield:unsigned int bytes;\toffset:28;\tsize:4;\tsigned:0;\n\
                   \tfield:char rwbs[10];\toffset:36;\tsize:10;\tsigned:0;\n";
        assert_eq!(field_offset(fmt, "dev"), Some(8));
        assert_eq!(field_offset(fmt, "sector"), Some(16));
        assert_eq!(field_offset(fmt, "rwbs"), Some(36));
        assert_eq!(field_offset(fmt, "nr_sector"), None);
    }
}
