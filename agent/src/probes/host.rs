//! The host layer (`bpf/host.bpf.c`): scheduler and block I/O tracepoints, aggregated in the
//! kernel per watched process, read once a second and written to the store as
//! `event_aggregates` rows (1-second buckets): `sched_switch` (switches, off-CPU ns,
//! involuntary switches), `sched_wakeup` (run-queue waits and their ns), `block_read` /
//! `block_write` / `block_discard` (requests, latency ns, bytes); `tcp_retransmit` (TCP
//! retransmits of the processes' sockets); `reclaim_stall` (direct and cgroup reclaim:
//! stalls, stalled ns, pages reclaimed). OOM kills come one by one through a ring buffer
//! and are stored as `oom_kill` events.
//!
//! Scope: with `--pid` / `--cgroup` the same kernel filter as the uprobes. Without a scope,
//! the processes that made CUDA or NCCL calls (reported by the probe thread), so a node's
//! other work is not traced.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader};
use parking_lot::Mutex;

use super::loader::Filters;
use super::scope::{self, FILTER_PIDS, Scope};
use crate::store::schema::{op, source};
use crate::store::{AggregateRow, EventRow, StoreSink};

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

/// `struct mem_counts`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemCounts {
    pub stalls: u64,
    pub stall_ns: u64,
    pub reclaimed: u64,
    pub max_ns: u64,
}
// SAFETY: as above.
unsafe impl aya::Pod for MemCounts {}

/// `struct oom_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OomEvent {
    pub timestamp_ns: u64,
    pub victim: u32,
    pub killer: u32,
    pub rss_kb: u64,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    pub reserved: u64,
}

const _: () = {
    assert!(std::mem::size_of::<MemCounts>() == 32);
    assert!(std::mem::size_of::<OomEvent>() == 56);
    assert!(std::mem::size_of::<SchedCounts>() == 48);
    assert!(std::mem::size_of::<IoCounts>() == 40);
    assert!(std::mem::size_of::<IoKey>() == 8);
};

/// (program, category, tracepoint, required). The optional ones are missing on some kernels
/// (`sock_send_length` before Linux 6.3); their layer then sees less, and a warning says so.
const PROGRAMS: &[(&str, &str, &str, bool)] = &[
    ("host_sched_switch", "sched", "sched_switch", true),
    ("host_sched_wakeup", "sched", "sched_wakeup", true),
    ("host_block_bio_queue", "block", "block_bio_queue", true),
    ("host_block_rq_complete", "block", "block_rq_complete", true),
    ("host_sock_send", "sock", "sock_send_length", false),
    ("host_sock_recv", "sock", "sock_recv_length", false),
    ("host_sock_state", "sock", "inet_sock_set_state", false),
    ("host_tcp_retransmit", "tcp", "tcp_retransmit_skb", false),
    (
        "host_direct_reclaim_begin",
        "vmscan",
        "mm_vmscan_direct_reclaim_begin",
        false,
    ),
    (
        "host_direct_reclaim_end",
        "vmscan",
        "mm_vmscan_direct_reclaim_end",
        false,
    ),
    (
        "host_memcg_reclaim_begin",
        "vmscan",
        "mm_vmscan_memcg_reclaim_begin",
        false,
    ),
    (
        "host_memcg_reclaim_end",
        "vmscan",
        "mm_vmscan_memcg_reclaim_end",
        false,
    ),
    ("host_oom_mark_victim", "oom", "mark_victim", false),
];

/// The kernel's drop counters (`host_drops`), in index order: the `reason` label of
/// `ingero_agent_host_dropped_total`.
pub const HOST_DROP_REASONS: [&str; 8] = [
    "threads_full",
    "procs_full",
    "io_inflight_full",
    "io_procs_full",
    "net_procs_full",
    "mem_procs_full",
    "reclaim_threads_full",
    "oom_ringbuf_full",
];

/// What the host thread has seen, for logs and the status view.
#[derive(Debug, Default)]
pub struct HostCounters {
    /// The kernel's drops by [`HOST_DROP_REASONS`] (cumulative).
    pub kernel_drops: [AtomicU64; HOST_DROP_REASONS.len()],
    /// OOM kills recorded.
    pub oom_kills: AtomicU64,
    /// Tracepoints that could not be attached (missing on this kernel).
    pub missing_tracepoints: AtomicU64,
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

/// Where the kernel's tracing filesystem may be mounted, newest first.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

fn tracefs_format(event: &str) -> Option<String> {
    for root in TRACEFS_ROOTS {
        if let Ok(s) = std::fs::read_to_string(format!("{root}/events/{event}/format")) {
            return Some(s);
        }
    }
    None
}

/// The tracefs mount the tracepoints are attached through, if there is one.
fn tracefs_root() -> Option<&'static str> {
    TRACEFS_ROOTS
        .into_iter()
        .find(|r| std::path::Path::new(r).join("events").is_dir())
}

/// Make sure tracefs is mounted: tracepoints are attached by the ids it lists, and their
/// field offsets are read from its format files. Systemd mounts it at boot; minimal VMs and
/// containers without systemd's mounts often have only the empty mount point. Then it is
/// mounted at `/sys/kernel/tracing` (in the agent's mount namespace; needs CAP_SYS_ADMIN).
/// Returns whether this call mounted it.
fn ensure_tracefs() -> Result<bool, HostError> {
    if tracefs_root().is_some() {
        return Ok(false);
    }
    let target = TRACEFS_ROOTS[0];
    let (src, dst, fs) = (c"tracefs", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; no data.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            fs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(HostError::Load(format!(
            "tracefs is not mounted and mounting it at {target} failed ({e}): mount it \
             (`mount -t tracefs tracefs {target}`) or give the agent CAP_SYS_ADMIN"
        )));
    }
    if tracefs_root().is_none() {
        return Err(HostError::Load(format!(
            "tracefs mounted at {target} lists no events"
        )));
    }
    Ok(true)
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
    if ensure_tracefs()? {
        tracing::info!(
            path = TRACEFS_ROOTS[0],
            "tracefs was not mounted: mounted it for the host tracepoints"
        );
    }
    let queue = tracefs_format("block/block_bio_queue").unwrap_or_default();
    let complete = tracefs_format("block/block_rq_complete").unwrap_or_default();
    let retrans = tracefs_format("tcp/tcp_retransmit_skb").unwrap_or_default();
    let reclaim = tracefs_format("vmscan/mm_vmscan_direct_reclaim_end").unwrap_or_default();
    let oom = tracefs_format("oom/mark_victim");
    let g = |fmt: &str, f: &str, d: u32| field_offset(fmt, f).unwrap_or(d);
    // mark_victim's fields grew over kernel versions: a field the format lacks is not read
    // (offset 0). Without the format file, the Linux 6.x layout.
    let o = |f: &str, d: u32| match &oom {
        Some(fmt) => field_offset(fmt, f).unwrap_or(0),
        None => d,
    };
    let offs = [
        ("blk_dev_off", g(&queue, "dev", 8)),
        ("blk_sector_off", g(&queue, "sector", 16)),
        ("blk_rwbs_off", g(&queue, "rwbs", 28)),
        ("blk_c_dev_off", g(&complete, "dev", 8)),
        ("blk_c_sector_off", g(&complete, "sector", 16)),
        ("blk_c_nr_sector_off", g(&complete, "nr_sector", 24)),
        ("tcp_skaddr_off", g(&retrans, "skaddr", 16)),
        ("reclaimed_off", g(&reclaim, "nr_reclaimed", 8)),
        ("oom_pid_off", o("pid", 8)),
        ("oom_comm_off", o("comm", 12)),
        ("oom_anon_off", o("anon_rss", 24)),
        ("oom_file_off", o("file_rss", 32)),
        ("oom_shmem_off", o("shmem_rss", 40)),
    ];
    let mut loader = EbpfLoader::new();
    loader.override_global("filter_mode", &mode, false);
    for (name, v) in &offs {
        loader.override_global(name, v, false);
    }
    let mut ebpf = loader
        .load(HOST_OBJECT)
        .map_err(|e| HostError::Load(e.to_string()))?;
    let mut missing = 0u64;
    for (prog, cat, name, required) in PROGRAMS {
        let p: &mut TracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| HostError::Load(format!("{prog} missing")))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| HostError::Load(e.to_string()))?;
        let attached = p.load().map_err(|e| format!("{prog}: {e}")).and_then(|()| {
            p.attach(cat, name)
                .map(|_| ())
                .map_err(|e| format!("{cat}/{name}: {e}"))
        });
        match attached {
            Ok(()) => {}
            Err(e) if *required => return Err(HostError::Load(e)),
            Err(e) => {
                missing += 1;
                tracing::warn!(error = %e, "host tracepoint not attached: its layer is not recorded");
            }
        }
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
    let net: BpfHashMap<MapData, u32, u64> = BpfHashMap::try_from(take(&mut ebpf, "host_net")?)
        .map_err(|e| HostError::Load(e.to_string()))?;
    let mem: BpfHashMap<MapData, u32, MemCounts> =
        BpfHashMap::try_from(take(&mut ebpf, "host_mem")?)
            .map_err(|e| HostError::Load(e.to_string()))?;
    let oom = RingBuf::try_from(take(&mut ebpf, "host_oom")?)
        .map_err(|e| HostError::Load(e.to_string()))?;
    let drops: PerCpuArray<MapData, u64> = PerCpuArray::try_from(take(&mut ebpf, "host_drops")?)
        .map_err(|e| HostError::Load(e.to_string()))?;
    tracing::info!(
        attached = PROGRAMS.len() as u64 - missing,
        missing,
        "host tracepoints attached"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(HostCounters::default());
    counters
        .missing_tracepoints
        .store(missing, Ordering::Relaxed);
    let mut w = HostWorker {
        _ebpf: ebpf,
        filters,
        sched,
        io,
        net,
        mem,
        oom,
        drops,
        sink,
        scope: scope_cfg.clone(),
        gpu_pids: gpu_pids.clone(),
        counters: counters.clone(),
        prev_sched: HashMap::new(),
        prev_io: HashMap::new(),
        prev_net: HashMap::new(),
        prev_mem: HashMap::new(),
        mono_offset: super::clock::sample_offset(),
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
    net: BpfHashMap<MapData, u32, u64>,
    mem: BpfHashMap<MapData, u32, MemCounts>,
    oom: RingBuf<MapData>,
    drops: PerCpuArray<MapData, u64>,
    sink: StoreSink,
    scope: Scope,
    gpu_pids: Arc<Mutex<BTreeSet<u32>>>,
    counters: Arc<HostCounters>,
    prev_sched: HashMap<u32, SchedCounts>,
    prev_io: HashMap<IoKey, IoCounts>,
    prev_net: HashMap<u32, u64>,
    prev_mem: HashMap<u32, MemCounts>,
    /// Monotonic to wall clock (the OOM events' kernel timestamps).
    mono_offset: i128,
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
                    stored: 0,
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
                    stored: 0,
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
                    stored: 0,
                });
            }
            seen.insert(k, c);
        }
        self.prev_io = seen;
        let mut seen = HashMap::with_capacity(self.prev_net.len());
        for item in self.net.iter() {
            let Ok((pid, n)) = item else { continue };
            let d = delta(n, self.prev_net.get(&pid).copied().unwrap_or(0));
            if d > 0 {
                self.sink.aggregate(AggregateRow {
                    bucket,
                    source: source::TCP,
                    op: op::TCP_RETRANSMIT,
                    pid,
                    count: as_i64(d),
                    ..Default::default()
                });
            }
            seen.insert(pid, n);
        }
        self.prev_net = seen;
        let mut seen = HashMap::with_capacity(self.prev_mem.len());
        for item in self.mem.iter() {
            let Ok((pid, c)) = item else { continue };
            let p = self.prev_mem.get(&pid).copied().unwrap_or_default();
            let d = delta(c.stalls, p.stalls);
            if d > 0 {
                self.sink.aggregate(AggregateRow {
                    bucket,
                    source: source::HOST,
                    op: op::HOST_RECLAIM_STALL,
                    pid,
                    count: as_i64(d),
                    sum_dur: as_i64(delta(c.stall_ns, p.stall_ns)),
                    max_dur: as_i64(c.max_ns),
                    sum_arg0: as_i64(delta(c.reclaimed, p.reclaimed)),
                    stored: 0,
                });
            }
            seen.insert(pid, c);
        }
        self.prev_mem = seen;
        while let Some(item) = self.oom.next() {
            let Some(ev) = decode_oom(&item) else {
                continue;
            };
            let ts = super::clock::to_wall(ev.timestamp_ns, self.mono_offset).as_nanos();
            let comm_len = ev
                .comm
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(ev.comm.len());
            tracing::warn!(
                victim = ev.victim,
                killer = ev.killer,
                rss_kb = ev.rss_kb,
                comm = %String::from_utf8_lossy(&ev.comm[..comm_len]),
                "OOM kill"
            );
            self.sink.event(EventRow {
                timestamp: i64::try_from(ts).unwrap_or(i64::MAX),
                pid: ev.victim,
                tid: ev.victim,
                source: source::HOST,
                op: op::HOST_OOM_KILL,
                arg0: as_i64(ev.rss_kb.saturating_mul(1024)),
                arg1: i64::from(ev.killer),
                cgroup_id: ev.cgroup_id,
                comm: String::from_utf8_lossy(&ev.comm[..comm_len]).into_owned(),
                ..Default::default()
            });
            self.counters.oom_kills.fetch_add(1, Ordering::Relaxed);
        }
        for (i, slot) in self.counters.kernel_drops.iter().enumerate() {
            let idx = i as u32;
            if let Ok(v) = self.drops.get(&idx, 0) {
                slot.store(v.iter().sum(), Ordering::Relaxed);
            }
        }
        self.counters.drains.fetch_add(1, Ordering::Relaxed);
    }
}

/// An OOM record from the ring buffer (`None` if it is short).
fn decode_oom(b: &[u8]) -> Option<OomEvent> {
    if b.len() < std::mem::size_of::<OomEvent>() {
        return None;
    }
    // SAFETY: the slice holds at least size_of::<OomEvent>() bytes, OomEvent is repr(C) with
    // integer fields only (every bit pattern valid), and read_unaligned has no alignment need.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<OomEvent>()) })
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

    /// In a mount namespace of its own (one thread's, gone with the thread), with tracefs
    /// unmounted there: the host layer mounts it and finds the tracepoints' formats. The
    /// machine's own mounts are not touched.
    #[test]
    fn tracefs_is_mounted_when_it_is_missing() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: tracefs_is_mounted_when_it_is_missing needs root");
            return;
        }
        let r = std::thread::spawn(|| -> Result<(), String> {
            // SAFETY: plain syscalls on NUL-terminated strings; this thread owns the new
            // namespace, and the process's other threads keep theirs.
            unsafe {
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return Err(format!("unshare: {}", std::io::Error::last_os_error()));
                }
                let private = libc::MS_REC | libc::MS_PRIVATE;
                let none = std::ptr::null();
                if libc::mount(none, c"/".as_ptr(), none, private, std::ptr::null()) != 0 {
                    return Err(format!("private: {}", std::io::Error::last_os_error()));
                }
                // Whatever is mounted there goes, in this namespace only.
                for p in [c"/sys/kernel/debug/tracing", c"/sys/kernel/tracing"] {
                    while libc::umount2(p.as_ptr(), libc::MNT_DETACH) == 0 {}
                }
            }
            if let Some(r) = tracefs_root() {
                return Err(format!("tracefs still at {r}"));
            }
            assert_eq!(tracefs_format("sched/sched_switch"), None);
            let mounted = ensure_tracefs().map_err(|e| e.to_string())?;
            assert!(mounted, "ensure_tracefs said it was already there");
            assert_eq!(tracefs_root(), Some("/sys/kernel/tracing"));
            let fmt = tracefs_format("sched/sched_switch").ok_or("no sched_switch format")?;
            assert!(field_offset(&fmt, "next_pid").is_some(), "{fmt}");
            // Mounted now: a second call leaves it as it is.
            assert!(!ensure_tracefs().map_err(|e| e.to_string())?);
            Ok(())
        })
        .join()
        .expect("the namespace thread panicked");
        r.unwrap();
    }
}
