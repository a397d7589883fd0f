//! eBPF probes: load the embedded objects, find CUDA/NCCL libraries in running processes,
//! attach when they appear and detach when no process maps them any more, and drain the
//! ring buffers on a timer into the signal window and the NCCL outbox.
//!
//! Everything runs on one thread that owns the aya objects; the rest of the agent sees
//! only the shared window, the outbox and a status snapshot.

pub mod caps;
pub mod clock;
pub mod correlate;
pub mod discovery;
pub mod host;
pub mod loader;
pub mod runtime_launch;
pub mod scope;
pub mod symbols;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use parking_lot::Mutex;

use self::correlate::{BarrierCorrelator, SyncCall};
use self::discovery::FileId;
use self::loader::{BpfObject, Filters, Link, LoadError, ProbeSpec};
use self::runtime_launch::{Calibration, Verdict};
use self::scope::Scope;
use self::symbols::SymbolTable;
use crate::config::{AgentConfig, RuntimeLaunchProbes};
use crate::events::{CudaEvent, LaunchCounts, NcclEvent, cuda_op, launch};
use crate::fleet::payload::GpuInfo;
use crate::nccl::{NcclOutbox, NcclPoint, NcclSender};
use crate::signals::nvml::Nvml;
use crate::signals::window::{EbpfSource, SharedWindow};

/// How often the ring buffers are drained.
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_millis(100);
/// A library whose attachment failed is retried after this long.
pub const ATTACH_RETRY: Duration = Duration::from_secs(60);

/// A decoded event, as handed to an optional tap (tests, debugging).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEvent {
    Cuda(CudaEvent),
    Nccl(NcclEvent),
}

/// What to probe and how.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub cuda: bool,
    pub nccl: bool,
    pub discovery_interval: Duration,
    pub drain_interval: Duration,
    pub extra_roots: Vec<PathBuf>,
    pub proc_root: PathBuf,
    /// Which processes are watched (all when empty).
    pub scope: Scope,
    /// Receives every decoded event (bounded; events are dropped when it is full).
    pub tap: Option<std::sync::mpsc::SyncSender<ProbeEvent>>,
    /// Whether the runtime's launch probes may be detached after calibration.
    pub runtime_launch_probes: RuntimeLaunchProbes,
    /// Runtime launches seen before deciding (`runtime_launch::DEFAULT_THRESHOLD`).
    pub launch_calibration: u64,
    /// Where call durations and launch counts are recorded (the local store), if anywhere.
    pub recorder: Option<Recorder>,
}

/// The store side of the probe thread: every timed CUDA/NCCL call is folded into a
/// per-second `event_aggregates` row of its process and op (count, summed and largest
/// duration, and how many of them were `stored`), and the first [`STORED_PER_SECOND`] of
/// each such second become `events` rows, the rest only counted, as the Go agent's
/// aggregates do (`count - stored` calls have no row of their own). Launch counts become
/// per-second aggregates, and the processes seen are handed to the host layer (its scope
/// when no `--pid`/`--cgroup` is given).
#[derive(Debug, Clone)]
pub struct Recorder {
    pub sink: crate::store::StoreSink,
    pub gpu_pids: Arc<Mutex<BTreeSet<u32>>>,
    fold: Arc<Mutex<Fold>>,
}

/// Timed calls stored one by one per process, op and second; beyond that they are folded
/// into the second's aggregate only. A training loop's synchronizes, copies and collectives
/// stay far below it; a loop of tiny copies at 100,000/s does not fill the store.
pub const STORED_PER_SECOND: i64 = 2_000;

/// (pid, source, op) of a folded call.
type FoldKey = (u32, i64, i64);
/// (count, summed ns, largest ns, stored) of a key's calls in the second.
type FoldSums = (i64, i64, i64, i64);

/// The second being folded.
#[derive(Debug, Default)]
struct Fold {
    second: Option<i64>,
    keys: HashMap<FoldKey, FoldSums>,
}

fn comm_str(c: &[u8; 16]) -> String {
    let end = c.iter().position(|b| *b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

fn wall_ns(mono: u64, offset: i128) -> i64 {
    i64::try_from(clock::to_wall(mono, offset).as_nanos()).unwrap_or(i64::MAX)
}

impl Recorder {
    pub fn new(sink: crate::store::StoreSink) -> Self {
        Recorder {
            sink,
            gpu_pids: Default::default(),
            fold: Default::default(),
        }
    }

    /// Fold a timed call into its second, and store it as a row while the second's budget
    /// for its process and op lasts.
    fn record(&self, row: crate::store::EventRow) {
        let second = row.timestamp.div_euclid(1_000_000_000);
        let mut f = self.fold.lock();
        if f.second.is_some_and(|s| second > s) {
            self.flush_locked(&mut f);
        }
        if f.second.is_none_or(|s| second > s) {
            f.second = Some(second);
        }
        let e = f.keys.entry((row.pid, row.source, row.op)).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(row.duration);
        e.2 = e.2.max(row.duration);
        if e.3 < STORED_PER_SECOND {
            e.3 += 1;
            drop(f);
            self.sink.event(row);
        }
    }

    fn flush_locked(&self, f: &mut Fold) {
        let Some(second) = f.second else { return };
        for ((pid, source, op), (count, sum, max, stored)) in f.keys.drain() {
            self.sink.aggregate(crate::store::AggregateRow {
                bucket: second * 1_000_000_000,
                source,
                op,
                pid,
                count,
                sum_dur: sum,
                max_dur: max,
                sum_arg0: 0,
                stored,
            });
        }
        f.second = None;
    }

    /// Write the folded second once it is over (called at every drain): calls of a second
    /// arrive within the drain interval after it.
    pub fn tick(&self, now_ns: i64) {
        let mut f = self.fold.lock();
        if f.second
            .is_some_and(|s| now_ns >= (s + 1) * 1_000_000_000 + 500_000_000)
        {
            self.flush_locked(&mut f);
        }
    }

    /// Write what is folded (at stop).
    pub fn flush(&self) {
        let mut f = self.fold.lock();
        self.flush_locked(&mut f);
    }

    fn cuda(&self, e: &CudaEvent, offset: i128) {
        let Some((source, op)) = crate::store::schema::from_probe(e.source, e.op) else {
            return;
        };
        self.record(crate::store::EventRow {
            timestamp: wall_ns(e.timestamp_ns, offset),
            pid: e.pid,
            tid: e.tid,
            source,
            op,
            duration: i64::try_from(e.duration_ns).unwrap_or(i64::MAX),
            arg0: e.args[0] as i64,
            arg1: e.args[1] as i64,
            ret_code: i64::from(e.ret),
            cgroup_id: e.cgroup_id,
            comm: comm_str(&e.comm),
            ..Default::default()
        });
    }

    fn nccl(&self, e: &NcclEvent, offset: i128) {
        self.record(crate::store::EventRow {
            timestamp: wall_ns(e.timestamp_ns, offset),
            pid: e.pid,
            tid: e.tid,
            source: crate::store::schema::source::NCCL,
            op: i64::from(e.op),
            duration: i64::try_from(e.duration_ns).unwrap_or(i64::MAX),
            arg0: e.count as i64,
            arg1: i64::from(e.nranks),
            ret_code: i64::from(e.return_code),
            cgroup_id: e.cgroup_id,
            comm: comm_str(&e.comm),
            ..Default::default()
        });
    }

    fn launches(&self, pid: u32, d: &LaunchCounts) {
        use crate::store::schema::{op, source};
        let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(0);
        let bucket = now.div_euclid(1_000_000_000) * 1_000_000_000;
        for (idx, source, op) in [
            (launch::RUNTIME, source::CUDA, op::CUDA_LAUNCH_KERNEL),
            (launch::RUNTIME_GRAPH, source::CUDA, op::CUDA_GRAPH_LAUNCH),
            (launch::DRIVER, source::DRIVER, op::DRIVER_LAUNCH_KERNEL),
            (
                launch::DRIVER_GRAPH,
                source::DRIVER,
                op::DRIVER_GRAPH_LAUNCH,
            ),
        ] {
            if d.n[idx] > 0 {
                self.sink.aggregate(crate::store::AggregateRow {
                    bucket,
                    source,
                    op,
                    pid,
                    count: i64::try_from(d.n[idx]).unwrap_or(i64::MAX),
                    ..Default::default()
                });
            }
        }
    }

    fn saw(&self, pids: impl Iterator<Item = u32>) {
        let mut set = self.gpu_pids.lock();
        for p in pids {
            if set.len() < scope::MAX_FILTER_PIDS {
                set.insert(p);
            }
        }
    }
}

impl ProbeOptions {
    /// From the agent config; `--cgroup` paths are resolved (and checked) here.
    pub fn from_config(cfg: &AgentConfig) -> Result<Self, ProbeError> {
        let cgroups = cfg
            .probes
            .cgroups
            .iter()
            .map(|c| scope::resolve_cgroup(c).map_err(ProbeError::Scope))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ProbeOptions {
            cuda: cfg.probes.cuda,
            nccl: cfg.probes.nccl,
            discovery_interval: cfg.probes.discovery_interval,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            extra_roots: cfg.probes.extra_library_roots.clone(),
            proc_root: PathBuf::from("/proc"),
            scope: Scope {
                pids: cfg.probes.pids.clone(),
                cgroups,
            },
            tap: None,
            runtime_launch_probes: cfg.probes.runtime_launch_probes,
            launch_calibration: runtime_launch::DEFAULT_THRESHOLD,
            recorder: None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Privileges(String),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("start the probe thread: {0}")]
    Thread(std::io::Error),
    #[error("nothing to probe: both CUDA and NCCL probes are disabled")]
    NothingEnabled,
    #[error("--cgroup {0}")]
    Scope(String),
}

/// One library the probes are attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedLibrary {
    pub path: String,
    pub pids: Vec<u32>,
    pub symbols: Vec<&'static str>,
}

/// Counters and attachments, for the status view and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeStatus {
    pub attached: Vec<AttachedLibrary>,
    pub cuda_events: u64,
    pub nccl_events: u64,
    pub decode_errors: u64,
    /// `[ringbuf_full, entry_missing, user_read, counts_full]` summed over CUDA and NCCL
    /// objects.
    pub kernel_drops: [u64; 4],
    /// Launches counted in the kernel since the start, per counter (`events::launch`):
    /// runtime, runtime graph, driver, driver graph, nested (the same launch one layer down).
    pub launches: [u64; launch::COUNTERS],
    pub tap_drops: u64,
    /// The runtime's launch probes: state and the calibration's figures.
    pub runtime_launch: runtime_launch::Status,
    pub attach_errors: u64,
    pub scans: u64,
    pub running: bool,
}

impl ProbeStatus {
    /// One line for the status view.
    pub fn summary(&self) -> String {
        format!(
            "{} libraries, launches {} (runtime launch probes {}), cuda events {}, nccl events {}, kernel drops {}, decode errors {}",
            self.attached.len(),
            self.launches[..launch::NESTED].iter().sum::<u64>(),
            self.runtime_launch.state.as_str(),
            self.cuda_events,
            self.nccl_events,
            self.kernel_drops.iter().sum::<u64>(),
            self.decode_errors
        )
    }
}

/// Control of the probe thread.
#[derive(Debug)]
pub struct ProbeHandle {
    stop: Arc<AtomicBool>,
    rescan: Arc<AtomicBool>,
    status: Arc<Mutex<ProbeStatus>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProbeHandle {
    pub fn status(&self) -> ProbeStatus {
        self.status.lock().clone()
    }

    pub fn status_cell(&self) -> Arc<Mutex<ProbeStatus>> {
        self.status.clone()
    }

    /// Scan `/proc` at the next drain instead of waiting for the discovery interval.
    pub fn rescan(&self) {
        self.rescan.store(true, Ordering::Relaxed);
    }

    /// Stop the thread; every probe is detached when its objects drop.
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

impl Drop for ProbeHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// What [`start`] hands the agent.
#[derive(Debug)]
pub struct Started {
    pub source: EbpfSource,
    pub nccl: Option<NcclOutbox>,
    pub gpu: Option<GpuInfo>,
    pub handle: ProbeHandle,
    /// NVML, when the driver is there (shared with `source`).
    pub nvml: Option<Arc<Nvml>>,
}

/// Check privileges, load the objects and start the probe thread, from the agent config.
pub fn start(
    cfg: &AgentConfig,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<Started, ProbeError> {
    start_recording(cfg, shutdown, None)
}

/// [`start`], recording call durations and launch counts into a store.
pub fn start_recording(
    cfg: &AgentConfig,
    _shutdown: tokio::sync::watch::Receiver<bool>,
    recorder: Option<Recorder>,
) -> Result<Started, ProbeError> {
    caps::check_self().map_err(ProbeError::Privileges)?;
    let mut opts = ProbeOptions::from_config(cfg)?;
    opts.recorder = recorder;
    // One NVML for the whole agent: memory headroom here, utilization for IDLE (main).
    let nvml = Nvml::load().map(Arc::new);
    let gpu = nvml.as_deref().and_then(Nvml::gpu_info);
    let gpus = if cfg.health.num_gpus > 0 {
        cfg.health.num_gpus
    } else {
        gpu.as_ref()
            .map_or(1, |g| u32::try_from(g.count).unwrap_or(1))
    };
    let shared = Arc::new(SharedWindow::default());
    let (outbox, sender) = if cfg.probes.nccl {
        let (o, s) = NcclOutbox::new(cfg.probes.nccl_max_points);
        (Some(o), Some(s))
    } else {
        (None, None)
    };
    let handle = spawn(opts, shared.clone(), sender)?;
    Ok(Started {
        source: EbpfSource::new(shared, cfg.health.signal_window, gpus, nvml.clone()),
        nvml,
        nccl: outbox,
        gpu,
        handle,
    })
}

/// Open a library and check it may be trusted (`discovery::file_trusted`): not group- or
/// world-writable, owned by root or by the user running `pid`.
fn trusted_file(proc_root: &Path, pid: u32, target: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::File::open(target).map_err(|e| format!("open: {e}"))?;
    let m = f.metadata().map_err(|e| format!("stat: {e}"))?;
    let uid = discovery::process_uid(proc_root, pid);
    if !discovery::file_trusted(m.mode(), m.uid(), uid) {
        return Err(format!(
            "mode {:o}, owner {}, process user {uid:?}: writable by others or owned by another user",
            m.mode() & 0o7777,
            m.uid()
        ));
    }
    Ok(f)
}

/// Make the kernel filters hold the scope now (cgroups created since the last scan
/// included). Nothing to do when every process is watched.
fn refresh_filters(scope: &Scope, filters: &mut [Filters]) {
    if scope.mode() == 0 {
        return;
    }
    let cgroups = if scope.cgroups.is_empty() {
        Vec::new()
    } else {
        scope.cgroup_ids()
    };
    for f in filters.iter_mut() {
        let lost = f.set_pids(&scope.pids) + f.set_cgroups(&cgroups);
        if lost > 0 {
            tracing::warn!(
                lost,
                max_pids = scope::MAX_FILTER_PIDS,
                max_cgroups = scope::MAX_FILTER_CGROUPS,
                "scope filter full: some watched processes or cgroups are not traced"
            );
        }
    }
}

/// What a process launched since `prev` (its counters at the previous drain). A counter
/// below its previous value means the entry was evicted and created again: the new value is
/// all new.
pub fn launch_delta(prev: Option<&LaunchCounts>, now: &LaunchCounts) -> LaunchCounts {
    let mut d = LaunchCounts {
        cgroup_id: now.cgroup_id,
        ..Default::default()
    };
    for (i, o) in d.n.iter_mut().enumerate() {
        let p = prev.map_or(0, |p| p.n[i]);
        *o = if now.n[i] >= p {
            now.n[i] - p
        } else {
            now.n[i]
        };
    }
    d
}

/// Raise RLIMIT_MEMLOCK: kernels before 5.11 charge BPF maps against it.
fn raise_memlock() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid rlimit; failure only means the old limit stays.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
    if rc != 0 {
        tracing::debug!("could not raise RLIMIT_MEMLOCK");
    }
}

/// Links (with the index of their object) and the symbols they cover.
type AttachResult = (Vec<(usize, Link)>, Vec<&'static str>);

struct Attached {
    path: String,
    pids: BTreeSet<u32>,
    links: Vec<(usize, Link)>,
    /// The runtime's launch probes (`loader::RUNTIME_LAUNCH_PROGRAMS`), kept apart so
    /// calibration can detach them alone.
    launch_links: Vec<(usize, Link)>,
    symbols: Vec<&'static str>,
    /// The library file, held open: while it still has a name on disk the probes stay
    /// attached (uprobes are per file), so a process started later is traced from its
    /// first call instead of from the next scan.
    file: std::fs::File,
}

struct Objects {
    /// (object, its probe sets).
    list: Vec<(BpfObject, Vec<&'static [ProbeSpec]>)>,
    cuda_ring: Option<RingBuf<MapData>>,
    nccl_ring: Option<RingBuf<MapData>>,
    launches: Option<PerCpuHashMap<MapData, u32, LaunchCounts>>,
    drops: Vec<PerCpuArray<MapData, u64>>,
    filters: Vec<Filters>,
}

fn load_objects(opts: &ProbeOptions) -> Result<Objects, ProbeError> {
    let mut o = Objects {
        list: Vec::new(),
        cuda_ring: None,
        nccl_ring: None,
        launches: None,
        drops: Vec::new(),
        filters: Vec::new(),
    };
    let mode = opts.scope.mode();
    if opts.cuda {
        let sets: Vec<&'static [ProbeSpec]> = vec![loader::CUDA_RUNTIME, loader::CUDA_DRIVER];
        let mut obj = BpfObject::for_specs("cuda", loader::CUDA_OBJECT, &sets, mode)?;
        o.filters.push(obj.filters()?);
        o.cuda_ring = Some(obj.ring("cuda_events")?);
        o.launches = Some(obj.launch_counts("launch_counts")?);
        o.drops.push(obj.drops("cuda_drops")?);
        o.list.push((obj, sets));
    }
    if opts.nccl {
        let sets: Vec<&'static [ProbeSpec]> = vec![loader::NCCL];
        let mut obj = BpfObject::for_specs("nccl", loader::NCCL_OBJECT, &sets, mode)?;
        o.filters.push(obj.filters()?);
        o.nccl_ring = Some(obj.ring("nccl_events")?);
        o.drops.push(obj.drops("nccl_drops")?);
        o.list.push((obj, sets));
    }
    Ok(o)
}

/// Load the objects (errors surface here) and start the thread.
pub fn spawn(
    opts: ProbeOptions,
    shared: Arc<SharedWindow>,
    nccl: Option<NcclSender>,
) -> Result<ProbeHandle, ProbeError> {
    if !opts.cuda && !opts.nccl {
        return Err(ProbeError::NothingEnabled);
    }
    raise_memlock();
    let mut objects = load_objects(&opts)?;
    // The filter holds the scope before any probe is attached.
    refresh_filters(&opts.scope, &mut objects.filters);
    let stop = Arc::new(AtomicBool::new(false));
    let rescan = Arc::new(AtomicBool::new(true));
    let calibration = Calibration::new(opts.runtime_launch_probes, opts.launch_calibration);
    let status = Arc::new(Mutex::new(ProbeStatus {
        running: true,
        runtime_launch: calibration.status(),
        ..Default::default()
    }));
    shared.alive.store(true, Ordering::Relaxed);
    let mut worker = Worker {
        opts,
        objects,
        shared,
        nccl,
        stop: stop.clone(),
        rescan: rescan.clone(),
        status: status.clone(),
        attached: BTreeMap::new(),
        failed: HashMap::new(),
        correlator: BarrierCorrelator::default(),
        offset: clock::sample_offset(),
        launch_prev: HashMap::new(),
        calibration,
        detaching: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("ingero-probes".into())
        .spawn(move || worker.run())
        .map_err(ProbeError::Thread)?;
    Ok(ProbeHandle {
        stop,
        rescan,
        status,
        thread: Some(thread),
    })
}

struct Worker {
    opts: ProbeOptions,
    objects: Objects,
    shared: Arc<SharedWindow>,
    nccl: Option<NcclSender>,
    stop: Arc<AtomicBool>,
    rescan: Arc<AtomicBool>,
    status: Arc<Mutex<ProbeStatus>>,
    attached: BTreeMap<FileId, Attached>,
    failed: HashMap<FileId, Instant>,
    correlator: BarrierCorrelator,
    offset: i128,
    /// Each process's cumulative launch counters at the previous drain.
    launch_prev: HashMap<u32, LaunchCounts>,
    calibration: Calibration,
    /// Threads dropping runtime launch links after a detach verdict.
    detaching: Vec<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn run(&mut self) {
        // Whatever ends this thread (a clean stop or a panic), the source must learn that
        // events are no longer read, so the node goes stale instead of looking idle.
        struct Alive(Arc<SharedWindow>, Arc<Mutex<ProbeStatus>>);
        impl Drop for Alive {
            fn drop(&mut self) {
                self.0.alive.store(false, Ordering::Relaxed);
                self.1.lock().running = false;
            }
        }
        let _alive = Alive(self.shared.clone(), self.status.clone());
        let mut last_scan: Option<Instant> = None;
        let mut last_offset = Instant::now();
        let mut cuda_buf: Vec<CudaEvent> = Vec::with_capacity(4096);
        let mut released = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let due = last_scan.is_none_or(|t| t.elapsed() >= self.opts.discovery_interval);
            if due || self.rescan.swap(false, Ordering::Relaxed) {
                self.discover();
                last_scan = Some(Instant::now());
            }
            if last_offset.elapsed() >= Duration::from_secs(10) {
                self.offset = clock::sample_offset();
                last_offset = Instant::now();
            }
            self.drain(&mut cuda_buf, &mut released);
            std::thread::sleep(self.opts.drain_interval);
        }
        // Final drain so nothing already in the rings is lost on a clean stop.
        self.drain(&mut cuda_buf, &mut released);
        if let Some(r) = &self.opts.recorder {
            r.flush();
        }
        for (_, lib) in std::mem::take(&mut self.attached) {
            self.detach_links(lib.links, false);
            self.detach_links(lib.launch_links, false);
        }
    }

    fn drain(
        &mut self,
        cuda_buf: &mut Vec<CudaEvent>,
        released: &mut Vec<(NcclEvent, Option<u64>)>,
    ) {
        let (mut n_cuda, mut n_nccl, mut bad, mut tap_drops) = (0u64, 0u64, 0u64, 0u64);
        let tap = self.opts.tap.clone();
        let mut to_tap = |e: ProbeEvent| {
            if let Some(t) = &tap
                && t.try_send(e).is_err()
            {
                tap_drops += 1;
            }
        };
        if let Some(ring) = self.objects.cuda_ring.as_mut() {
            cuda_buf.clear();
            while let Some(item) = ring.next() {
                match CudaEvent::from_bytes(&item) {
                    Some(e) => cuda_buf.push(e),
                    None => bad += 1,
                }
            }
            n_cuda = cuda_buf.len() as u64;
            if !cuda_buf.is_empty() {
                let mut acc = self.shared.acc.lock();
                for e in cuda_buf.iter() {
                    acc.on_cuda(e);
                }
            }
            for e in cuda_buf.iter() {
                if e.op == cuda_op::STREAM_SYNC || e.op == cuda_op::DEVICE_SYNC {
                    self.correlator.on_sync(SyncCall {
                        pid: e.pid,
                        tid: e.tid,
                        start: e.timestamp_ns,
                        duration: e.duration_ns,
                    });
                }
                to_tap(ProbeEvent::Cuda(*e));
            }
            if let Some(r) = &self.opts.recorder
                && !cuda_buf.is_empty()
            {
                for e in cuda_buf.iter() {
                    r.cuda(e, self.offset);
                }
                r.saw(cuda_buf.iter().map(|e| e.pid));
            }
        }
        released.clear();
        if let Some(ring) = self.objects.nccl_ring.as_mut() {
            while let Some(item) = ring.next() {
                match NcclEvent::from_bytes(&item) {
                    Some(e) => {
                        n_nccl += 1;
                        to_tap(ProbeEvent::Nccl(e));
                        if let Some(r) = &self.opts.recorder {
                            r.nccl(&e, self.offset);
                            r.saw(std::iter::once(e.pid));
                        }
                        self.correlator.on_nccl(e, released);
                    }
                    None => bad += 1,
                }
            }
        }
        self.correlator.release(clock::monotonic_ns(), released);
        if let Some(tx) = &self.nccl {
            for (e, barrier) in released.iter() {
                tx.send(NcclPoint {
                    time: clock::to_wall(e.timestamp_ns, self.offset),
                    op: e.op,
                    comm_id_hash: e.comm_id_hash,
                    rank: e.rank,
                    nranks: e.nranks,
                    datatype: e.datatype,
                    reduce_op: e.reduce_op,
                    peer_rank: e.peer_rank,
                    count: e.count,
                    duration_ns: e.duration_ns,
                    op_seq: e.op_seq,
                    barrier_wait_ns: *barrier,
                });
            }
        }
        let mut drops = [0u64; 4];
        for d in &self.objects.drops {
            for (i, v) in loader::read_drops(d).iter().enumerate() {
                drops[i] += v;
            }
        }
        let launched = self.drain_launches();
        if let Some(r) = &self.opts.recorder {
            r.tick(i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(0));
        }
        {
            // One bucket of the signal window per drain, stamped now.
            let mut log = self.shared.drains.lock();
            for e in cuda_buf.iter() {
                log.on_cuda(e);
            }
            log.on_launches(&launched);
            log.mark(std::time::Instant::now());
        }
        if let Some(v) = self.calibration.observe(&launched) {
            self.on_verdict(v);
        }
        if !self.detaching.is_empty() {
            self.detaching.retain(|h| !h.is_finished());
            if self.detaching.is_empty() {
                self.calibration.detach_done();
            }
        }
        let mut s = self.status.lock();
        s.runtime_launch = self.calibration.status();
        for (t, d) in s.launches.iter_mut().zip(launched) {
            *t += d;
        }
        s.cuda_events += n_cuda;
        s.nccl_events += n_nccl;
        s.decode_errors += bad;
        s.tap_drops += tap_drops;
        s.kernel_drops = drops;
    }

    /// Read the kernel's per-process launch counters, fold what is new since the previous
    /// drain into the window, and return the new launches per counter.
    fn drain_launches(&mut self) -> [u64; launch::COUNTERS] {
        let mut total = [0u64; launch::COUNTERS];
        let Some(map) = self.objects.launches.as_ref() else {
            return total;
        };
        let mut now_all = HashMap::with_capacity(self.launch_prev.len());
        let mut deltas = Vec::new();
        for item in map.iter() {
            let Ok((pid, per_cpu)) = item else { continue };
            let now = LaunchCounts::sum(per_cpu.iter());
            let d = launch_delta(self.launch_prev.get(&pid), &now);
            now_all.insert(pid, now);
            if d.n.iter().any(|v| *v > 0) {
                for (t, v) in total.iter_mut().zip(d.n) {
                    *t += v;
                }
                deltas.push((pid, d));
            }
        }
        // Processes whose entry left the map (evicted) are forgotten.
        self.launch_prev = now_all;
        if let Some(r) = &self.opts.recorder
            && !deltas.is_empty()
        {
            for (pid, d) in &deltas {
                r.launches(*pid, d);
            }
            r.saw(deltas.iter().map(|(p, _)| *p));
        }
        if !deltas.is_empty() {
            let mut acc = self.shared.acc.lock();
            for (pid, d) in &deltas {
                acc.on_launches(*pid, d);
            }
        }
        total
    }

    fn discover(&mut self) {
        refresh_filters(&self.opts.scope, &mut self.objects.filters);
        let scan = discovery::scan_proc(&self.opts.proc_root);
        // Libraries no process maps any more stay attached while the file exists (a new
        // process mapping it is then traced from its first call); deleted or replaced
        // files (no name left on disk) are detached.
        let mut gone = Vec::new();
        for (id, lib) in self.attached.iter_mut() {
            if scan.libs.contains_key(id) {
                continue;
            }
            lib.pids.clear();
            let on_disk = lib
                .file
                .metadata()
                .is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 0);
            if !on_disk {
                gone.push(*id);
            }
        }
        for id in gone {
            if let Some(lib) = self.attached.remove(&id) {
                tracing::info!(path = %lib.path, "library file removed; probes detached");
                self.detach(lib);
            }
        }
        let mut errors = 0;
        for (id, (pid, path, pids)) in &scan.libs {
            if let Some(a) = self.attached.get_mut(id) {
                a.pids.clone_from(pids);
                continue;
            }
            if self
                .failed
                .get(id)
                .is_some_and(|t| t.elapsed() < ATTACH_RETRY)
            {
                continue;
            }
            if !discovery::allowed(path, &self.opts.extra_roots) {
                tracing::debug!(path = %path, "library outside the allowed roots; not probed");
                self.failed.insert(*id, Instant::now());
                continue;
            }
            let target = discovery::host_path(&self.opts.proc_root, *pid, path);
            let file = match trusted_file(&self.opts.proc_root, *pid, &target) {
                Ok(f) => f,
                Err(why) => {
                    tracing::warn!(path = %path, pid, why, "library not trusted; not probed");
                    self.failed.insert(*id, Instant::now());
                    continue;
                }
            };
            match self.attach(&target) {
                Ok((links, symbols)) if !links.is_empty() => {
                    tracing::info!(path = %path, pid, probes = links.len(), "probes attached");
                    let (launch_links, links): (Vec<_>, Vec<_>) = links
                        .into_iter()
                        .partition(|(_, l)| loader::RUNTIME_LAUNCH_PROGRAMS.contains(&l.program()));
                    if !launch_links.is_empty()
                        && self.opts.runtime_launch_probes == RuntimeLaunchProbes::Auto
                    {
                        tracing::info!(
                            path = %path,
                            threshold = self.calibration.status().threshold,
                            "runtime launch probes attached; calibrating"
                        );
                        self.calibration.restart();
                    }
                    self.attached.insert(
                        *id,
                        Attached {
                            path: path.clone(),
                            pids: pids.clone(),
                            links,
                            launch_links,
                            symbols,
                            file,
                        },
                    );
                }
                Ok(_) => {
                    tracing::debug!(path = %path, "no probed symbol in library");
                    self.failed.insert(*id, Instant::now());
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(path = %path, error = %e, "attaching probes failed");
                    self.failed.insert(*id, Instant::now());
                }
            }
        }
        self.failed.retain(|id, _| scan.libs.contains_key(id));
        let mut s = self.status.lock();
        s.scans += 1;
        s.attach_errors += errors;
        s.runtime_launch = self.calibration.status();
        s.attached = self.attached_list();
    }

    fn attached_list(&self) -> Vec<AttachedLibrary> {
        self.attached
            .values()
            .map(|a| AttachedLibrary {
                path: a.path.clone(),
                pids: a.pids.iter().copied().collect(),
                symbols: a.symbols.clone(),
            })
            .collect()
    }

    /// Act on the calibration's verdict: detach every attached runtime launch probe (in
    /// the background; the state turns `detached` once the kernel has removed them), or
    /// keep them.
    fn on_verdict(&mut self, v: Verdict) {
        let st = self.calibration.status();
        match v {
            Verdict::Detach => {
                let mut links = Vec::new();
                let mut libraries = 0;
                for lib in self.attached.values_mut() {
                    if lib.launch_links.is_empty() {
                        continue;
                    }
                    libraries += 1;
                    links.append(&mut lib.launch_links);
                    lib.symbols.retain(|s| !loader::is_runtime_launch_symbol(s));
                }
                tracing::info!(
                    runtime = st.runtime,
                    nested = st.nested,
                    libraries,
                    "every runtime launch reached the exported driver entry: runtime launch \
                     probes detached, launches counted at the driver alone"
                );
                let handles = self.detach_links(links, true);
                self.detaching.extend(handles);
                if self.detaching.is_empty() {
                    self.calibration.detach_done();
                }
                let list = self.attached_list();
                self.status.lock().attached = list;
            }
            Verdict::Keep => tracing::info!(
                runtime = st.runtime,
                nested = st.nested,
                min_nested_percent = runtime_launch::MIN_NESTED_PERCENT,
                "runtime launches that did not reach the exported driver entry: runtime \
                 launch probes kept"
            ),
        }
    }

    /// Attach every probe set of every object whose symbols the library has.
    fn attach(&mut self, target: &Path) -> Result<AttachResult, String> {
        let symbols = SymbolTable::read(target).map_err(|e| e.to_string())?;
        let mut links = Vec::new();
        let mut names = Vec::new();
        for (i, (obj, sets)) in self.objects.list.iter_mut().enumerate() {
            for set in sets.iter() {
                match obj.attach_specs(set, &symbols, target) {
                    Ok((l, n)) => {
                        links.extend(l.into_iter().map(|l| (i, l)));
                        names.extend(n);
                    }
                    Err(e) => {
                        let partial = std::mem::take(&mut links);
                        self.detach_links(partial, false);
                        return Err(e.to_string());
                    }
                }
            }
        }
        Ok((links, names))
    }

    /// Detach links; in the background, the threads doing it are returned.
    fn detach_links(
        &mut self,
        links: Vec<(usize, Link)>,
        background: bool,
    ) -> Vec<std::thread::JoinHandle<()>> {
        let mut handles = Vec::new();
        let mut per: BTreeMap<usize, Vec<Link>> = BTreeMap::new();
        for (i, l) in links {
            per.entry(i).or_default().push(l);
        }
        for (i, ls) in per {
            if let Some((obj, _)) = self.objects.list.get_mut(i) {
                if background {
                    handles.extend(obj.detach_in_background(ls));
                } else {
                    obj.detach(ls);
                }
            }
        }
        handles
    }

    fn detach(&mut self, lib: Attached) {
        let mut links = lib.links;
        links.extend(lib.launch_links);
        self.detach_links(links, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_calls_beyond_the_budget_are_counted_in_the_aggregate_only() {
        use crate::store::schema::{op, source};
        use crate::store::{EventRow, Store, StoreOptions};
        let dir = std::env::temp_dir().join(format!("ingero-fold-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.db");
        let store = Store::start(StoreOptions::new(&path, "n1")).unwrap();
        let r = Recorder::new(store.sink());
        let t0 = 1_700_000_000 * 1_000_000_000i64;
        let call = |ts: i64, o: i64, dur: i64| EventRow {
            timestamp: ts,
            pid: 7,
            tid: 7,
            source: source::CUDA,
            op: o,
            duration: dur,
            ..Default::default()
        };
        // Second 0: 5,000 copies and 10 synchronizes; second 1: 3 copies.
        for i in 0..5_000 {
            r.record(call(t0 + i * 100_000, op::CUDA_MEMCPY_ASYNC, 1_000 + i));
        }
        for i in 0..10 {
            r.record(call(t0 + i, op::CUDA_STREAM_SYNC, 50));
        }
        // Not over yet: nothing folded is written before the second ends.
        r.tick(t0 + 1_200_000_000);
        for i in 0..3 {
            r.record(call(t0 + 1_000_000_000 + i, op::CUDA_MEMCPY_ASYNC, 7));
        }
        r.tick(t0 + 2_600_000_000);
        store.sink().flush();
        let c = crate::store::open_read_only(&path).unwrap();
        let rows: Vec<(i64, i64, i64, i64, i64)> = c
            .prepare(
                "SELECT bucket, op, count, stored, max_dur FROM event_aggregates ORDER BY bucket, op",
            )
            .unwrap()
            .query_map([], |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?, x.get(3)?, x.get(4)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            rows,
            vec![
                (t0, op::CUDA_STREAM_SYNC, 10, 10, 50),
                (t0, op::CUDA_MEMCPY_ASYNC, 5_000, STORED_PER_SECOND, 5_999),
                (t0 + 1_000_000_000, op::CUDA_MEMCPY_ASYNC, 3, 3, 7),
            ]
        );
        let stored: i64 = c
            .query_row("SELECT count(*) FROM events", [], |x| x.get(0))
            .unwrap();
        assert_eq!(stored, STORED_PER_SECOND + 10 + 3);
        store.close();
    }

    #[test]
    fn launch_deltas_follow_cumulative_counters_and_survive_a_reset() {
        let c = |n: [u64; 5]| LaunchCounts { n, cgroup_id: 3 };
        assert_eq!(launch_delta(None, &c([5, 0, 2, 0, 5])).n, [5, 0, 2, 0, 5]);
        assert_eq!(
            launch_delta(Some(&c([5, 0, 2, 0, 5])), &c([9, 1, 2, 0, 9])).n,
            [4, 1, 0, 0, 4]
        );
        // The entry was evicted and created again: what it holds now is new.
        let d = launch_delta(Some(&c([500, 0, 2, 0, 500])), &c([3, 0, 2, 0, 3]));
        assert_eq!(d.n, [3, 0, 0, 0, 3]);
        assert_eq!(d.cgroup_id, 3);
    }

    #[test]
    fn per_cpu_copies_add_up() {
        let a = LaunchCounts {
            n: [1, 2, 3, 4, 5],
            cgroup_id: 0,
        };
        let b = LaunchCounts {
            n: [10, 0, 0, 0, 1],
            cgroup_id: 77,
        };
        let s = LaunchCounts::sum([&a, &b]);
        assert_eq!((s.n, s.cgroup_id, s.work()), ([11, 2, 3, 4, 6], 77, 20));
    }
}
