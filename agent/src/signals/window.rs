//! From CUDA events to the four raw signals (spec 3.1), over a rolling window.
//!
//! The probe thread folds every event into a per-process [`TickAccumulator`] (per-cgroup
//! series, each tick) and, per drain (every 100 ms), into the [`DrainLog`]: one bucket of
//! work per drain, stamped with the drain's time. Each tick the [`EbpfSource`] moves the new
//! buckets into the [`Window`], so the window is exact to a drain, whatever its length
//! against the tick (a 1 s window at 2 s pushes covers the last second, not the last tick):
//!
//! - throughput = kernel launches in the window / window seconds;
//! - compute = time host threads spent inside CUDA calls in the window / (window x GPUs),
//!   clamped to [0, 1] (the synchronizing calls carry the time the host waits for the GPU);
//! - memory = free fraction of GPU memory (NVML), else of host memory;
//! - cpu = idle fraction of host CPU since the previous tick.
//!
//! Launches are counted in the kernel (`bpf/cuda.bpf.c`), each once whichever layer made
//! it: a runtime launch and the driver launch it makes are one launch, a driver launch
//! from a static runtime (cuBLAS, cuDNN), Triton or a graph is its own. The probe thread
//! folds each process's new counts in with [`TickAccumulator::on_launches`].
//!
//! Busy time: a process whose runtime API (libcudart) is traced is timed from runtime
//! calls only, because the runtime's synchronizes and copies call into the driver and
//! would be timed twice; a process that only uses the driver API is timed from driver
//! calls.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use component::Timestamp;
use parking_lot::Mutex;

use super::cgroup::{CgroupDelta, Direction};
use super::nvml::Nvml;
use super::procfs::{CgroupHashCache, CpuReader, StallTracker, host_memory_headroom};
use super::{CollectError, Sample, SignalSource};
use crate::events::{CudaEvent, LaunchCounts, cuda_op, launch, source};
use crate::health::SignalSet;

/// Most processes tracked per tick; events of others are dropped and counted.
pub const MAX_PIDS_PER_TICK: usize = 4096;

/// One process's CUDA activity in one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidActivity {
    pub cgroup_id: u64,
    /// New launches per counter (`events::launch`), `NESTED` included.
    pub launch_counts: [u64; launch::COUNTERS],
    pub runtime_events: u64,
    pub memcpy_bytes: [u64; 5],
}

impl PidActivity {
    /// Launches counted as work: every counter but `NESTED`.
    pub fn launches(&self) -> u64 {
        self.launch_counts[..launch::NESTED]
            .iter()
            .fold(0u64, |a, v| a.saturating_add(*v))
    }
}

/// What the probe thread accumulates between ticks.
#[derive(Debug, Clone, Default)]
pub struct TickAccumulator {
    pub per_pid: HashMap<u32, PidActivity>,
    pub dropped: u64,
}

/// One drain's work: launches counted as work and busy time, read at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainTotals {
    pub at: Instant,
    pub launches: u64,
    pub busy_ns: u64,
}

/// Processes remembered as runtime users (their driver time is not busy time).
const MAX_RUNTIME_PIDS: usize = 65_536;
/// Drains kept for a tick that does not come (10 minutes at 100 ms).
const MAX_PENDING_DRAINS: usize = 6_000;

/// The work of each drain, for the window. Busy time follows the rule of
/// [`PidActivity`], decided per process for good: once a process's runtime calls are seen,
/// its driver calls are the runtime's own (a runtime synchronize returning in the drain
/// after the driver synchronize it made is still timed once).
#[derive(Debug, Default)]
pub struct DrainLog {
    runtime_pids: std::collections::HashSet<u32>,
    launches: u64,
    busy_ns: u64,
    done: VecDeque<DrainTotals>,
}

impl DrainLog {
    pub fn on_cuda(&mut self, e: &CudaEvent) {
        if e.source == source::CUDA_RUNTIME {
            if self.runtime_pids.len() >= MAX_RUNTIME_PIDS {
                self.runtime_pids.clear();
            }
            self.runtime_pids.insert(e.pid);
        } else if self.runtime_pids.contains(&e.pid) {
            return;
        }
        self.busy_ns = self.busy_ns.saturating_add(e.duration_ns);
    }

    /// New launches per counter (`events::launch`); `NESTED` is not work.
    pub fn on_launches(&mut self, n: &[u64; launch::COUNTERS]) {
        let work = n[..launch::NESTED]
            .iter()
            .fold(0u64, |a, v| a.saturating_add(*v));
        self.launches = self.launches.saturating_add(work);
    }

    /// Close the drain at `at`.
    pub fn mark(&mut self, at: Instant) {
        if self.done.len() >= MAX_PENDING_DRAINS {
            self.done.pop_front();
        }
        self.done.push_back(DrainTotals {
            at,
            launches: std::mem::take(&mut self.launches),
            busy_ns: std::mem::take(&mut self.busy_ns),
        });
    }

    /// Drains closed and not yet read by a tick.
    pub fn pending(&self) -> usize {
        self.done.len()
    }

    fn take(&mut self) -> VecDeque<DrainTotals> {
        std::mem::take(&mut self.done)
    }
}

impl TickAccumulator {
    fn slot(&mut self, pid: u32) -> Option<&mut PidActivity> {
        if !self.per_pid.contains_key(&pid) && self.per_pid.len() >= MAX_PIDS_PER_TICK {
            self.dropped += 1;
            return None;
        }
        Some(self.per_pid.entry(pid).or_default())
    }

    /// New launches of one process (the difference of its kernel counters since the
    /// previous drain).
    pub fn on_launches(&mut self, pid: u32, d: &LaunchCounts) {
        let Some(a) = self.slot(pid) else { return };
        if d.cgroup_id != 0 {
            a.cgroup_id = d.cgroup_id;
        }
        for (t, v) in a.launch_counts.iter_mut().zip(d.n) {
            *t = t.saturating_add(v);
        }
    }

    pub fn on_cuda(&mut self, e: &CudaEvent) {
        let Some(a) = self.slot(e.pid) else { return };
        a.cgroup_id = e.cgroup_id;
        let runtime = e.source == source::CUDA_RUNTIME;
        if runtime {
            a.runtime_events += 1;
        }
        match e.op {
            // The driver's own copies are seen through the runtime already.
            cuda_op::MEMCPY | cuda_op::MEMCPY_ASYNC if runtime || a.runtime_events == 0 => {
                let d = Direction::from_cuda_kind(e.args[1]) as usize;
                a.memcpy_bytes[d] = a.memcpy_bytes[d].saturating_add(e.args[0]);
            }
            _ => {}
        }
    }
}

/// Shared between the probe thread (writer) and the source (reader).
#[derive(Debug, Default)]
pub struct SharedWindow {
    pub acc: Mutex<TickAccumulator>,
    pub drains: Mutex<DrainLog>,
    /// False once the probe thread stopped reading events.
    pub alive: AtomicBool,
}

/// One drain's totals, for the interval `(from, at]` since the previous drain.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    from: Timestamp,
    at: Timestamp,
    launches: u64,
    busy_ns: u64,
}

/// A bucket is dropped once the newer ones alone span this share of the window. Ticks come
/// at about the window's length or a fraction of it, with scheduling jitter: comparing
/// against the exact length would keep a bucket that ended a millisecond inside the
/// window and count twice the launches some ticks and once on others.
const WINDOW_SPAN_TOLERANCE: f64 = 0.9;

/// Window arithmetic, pure. Rates divide by the time the kept buckets actually span, so a
/// window that holds one bucket more or less than usual (tick jitter, a late tick) or
/// buckets shorter than the window still gives the true rate.
#[derive(Debug, Clone)]
pub struct Window {
    len: Duration,
    buckets: VecDeque<Bucket>,
}

impl Window {
    pub fn new(len: Duration) -> Self {
        Window {
            len,
            buckets: VecDeque::new(),
        }
    }

    /// Add the totals observed up to `now` (a drain's time) and read the window; returns
    /// (launches in window, launches/s, busy fraction per GPU).
    pub fn push(
        &mut self,
        now: Timestamp,
        launches: u64,
        busy_ns: u64,
        gpus: u32,
    ) -> (u64, f64, f64) {
        self.add(now, launches, busy_ns);
        self.read(gpus)
    }

    /// Add the totals observed up to `now`, dropping what fell out of the window.
    pub fn add(&mut self, now: Timestamp, launches: u64, busy_ns: u64) {
        // The first totals cover time the window does not know (since the probes were
        // attached, seconds before when attaching was slow): they only mark the start.
        // Counting them over no span read a rate several times the true one, which the
        // throughput reference then took as its level.
        let (from, launches, busy_ns) = match self.buckets.back() {
            Some(b) => (b.at, launches, busy_ns),
            None => (now, 0, 0),
        };
        let now = now.max(from);
        self.buckets.push_back(Bucket {
            from,
            at: now,
            launches,
            busy_ns,
        });
        let keep = self.len.mul_f64(WINDOW_SPAN_TOLERANCE);
        while self.buckets.len() > 1 && now.since(self.buckets[1].from) >= keep {
            self.buckets.pop_front();
        }
    }

    /// (launches in window, launches/s, busy fraction per GPU) over the kept buckets.
    pub fn read(&self, gpus: u32) -> (u64, f64, f64) {
        let now = self
            .buckets
            .back()
            .map_or(Timestamp::from_millis(0), |b| b.at);
        let oldest = self.buckets.front().map_or(now, |b| b.from);
        let covered = match now.since(oldest) {
            d if d.is_zero() => Duration::from_secs(1),
            d => d,
        };
        let n: u64 = self.buckets.iter().map(|b| b.launches).sum();
        let busy: u64 = self.buckets.iter().map(|b| b.busy_ns).sum();
        let secs = covered.as_secs_f64();
        let compute = busy as f64 / (secs * 1e9 * f64::from(gpus.max(1)));
        (n, n as f64 / secs, compute.clamp(0.0, 1.0))
    }
}

/// The real signal source.
#[derive(Debug)]
pub struct EbpfSource {
    shared: Arc<SharedWindow>,
    window: Window,
    gpus: u32,
    nvml: Option<Arc<Nvml>>,
    cpu: CpuReader,
    stall: StallTracker,
    cgroups: CgroupHashCache,
}

impl EbpfSource {
    /// `gpus`: the divisor of the compute signal (config value, else NVML's count, else 1).
    pub fn new(
        shared: Arc<SharedWindow>,
        window: Duration,
        gpus: u32,
        nvml: Option<Arc<Nvml>>,
    ) -> Self {
        let mut cpu = CpuReader::new();
        let _ = cpu.read();
        EbpfSource {
            shared,
            window: Window::new(window),
            gpus: gpus.max(1),
            nvml,
            cpu,
            stall: StallTracker::default(),
            cgroups: CgroupHashCache::default(),
        }
    }
}

impl SignalSource for EbpfSource {
    fn collect(&mut self, now: Timestamp) -> Result<Sample, CollectError> {
        if !self.shared.alive.load(Ordering::Relaxed) {
            return Err(CollectError("the eBPF event reader stopped".into()));
        }
        let acc = std::mem::take(&mut *self.shared.acc.lock());
        // One bucket per drain, ending at the drain's time (on the agent's clock: `now`
        // less the drain's age). Buckets ending at the tick instead read up to 10 % low or
        // high at 1 s windows, and a window shorter than the tick covered the whole tick.
        let drains = self.shared.drains.lock().take();
        let wall = Instant::now();
        for d in &drains {
            let at = now.saturating_sub(wall.saturating_duration_since(d.at));
            self.window.add(at, d.launches, d.busy_ns);
        }
        if acc.dropped > 0 {
            tracing::warn!(
                dropped = acc.dropped,
                cap = MAX_PIDS_PER_TICK,
                "CUDA events of processes beyond the per-tick cap were dropped"
            );
        }
        let (in_window, rate, compute) = self.window.read(self.gpus);
        let memory = self
            .nvml
            .as_deref()
            .and_then(Nvml::memory_headroom)
            .or_else(host_memory_headroom)
            .ok_or_else(|| CollectError("no memory reading (NVML and /proc/meminfo)".into()))?;
        let cpu = self
            .cpu
            .read()
            .ok_or_else(|| CollectError("cannot read /proc/stat".into()))?;

        let mut per: HashMap<String, CgroupDelta> = HashMap::new();
        for (pid, a) in &acc.per_pid {
            let hash = self.cgroups.hash(*pid, a.cgroup_id);
            let d = per.entry(hash.clone()).or_insert_with(|| CgroupDelta {
                cgroup_path_hash: hash,
                ..Default::default()
            });
            d.kernel_launches += a.launches();
            d.cpu_stall_nanos += self.stall.delta(*pid);
            for (i, b) in a.memcpy_bytes.iter().enumerate() {
                d.memcpy_bytes[i] += b;
            }
        }
        Ok(Sample {
            raw: SignalSet::new(rate, compute, memory, cpu),
            kernel_launches: i64::try_from(in_window).unwrap_or(i64::MAX),
            per_cgroup: per.into_values().collect(),
        })
    }

    fn name(&self) -> &'static str {
        "ebpf"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: u32, source: u8, op: u8, dur: u64) -> CudaEvent {
        CudaEvent {
            pid,
            source,
            op,
            duration_ns: dur,
            ..Default::default()
        }
    }

    fn counts(n: [u64; launch::COUNTERS], cgroup_id: u64) -> LaunchCounts {
        LaunchCounts { n, cgroup_id }
    }

    #[test]
    fn runtime_time_wins_over_driver_time_per_process_across_drains() {
        let mut log = DrainLog::default();
        let t = Instant::now();
        // pid 1 uses the runtime (whose synchronize calls the driver's): timed once, also
        // when a driver synchronize returns in a later drain than the runtime's first call.
        log.on_cuda(&ev(1, source::CUDA_RUNTIME, cuda_op::STREAM_SYNC, 1000));
        log.on_cuda(&ev(1, source::CUDA_DRIVER, cuda_op::STREAM_SYNC, 990));
        // pid 2 is driver-only.
        log.on_cuda(&ev(2, source::CUDA_DRIVER, cuda_op::STREAM_SYNC, 5));
        log.on_cuda(&ev(2, source::CUDA_DRIVER, cuda_op::MALLOC, 5));
        log.on_launches(&[40, 3, 20, 2, 40]);
        log.mark(t);
        log.on_cuda(&ev(1, source::CUDA_DRIVER, cuda_op::STREAM_SYNC, 700));
        log.mark(t + Duration::from_millis(100));
        let d: Vec<DrainTotals> = log.take().into();
        let drain = |at, launches, busy_ns| DrainTotals {
            at,
            launches,
            busy_ns,
        };
        assert_eq!(
            d,
            [
                drain(t, 65, 1010),
                drain(t + Duration::from_millis(100), 0, 0)
            ]
        );
        assert!(log.take().is_empty());
    }

    #[test]
    fn launches_are_every_counter_but_nested() {
        let mut acc = TickAccumulator::default();
        // 40 runtime launches that reached the driver (40 nested), 20 static-runtime
        // driver launches, 3 graph launches (runtime) and 2 (driver).
        acc.on_launches(7, &counts([40, 3, 20, 2, 40], 99));
        acc.on_launches(7, &counts([1, 0, 0, 0, 1], 0));
        let a = acc.per_pid[&7];
        assert_eq!(a.launches(), 66);
        assert_eq!(a.launch_counts, [41, 3, 20, 2, 41]);
        assert_eq!(a.cgroup_id, 99, "a zero cgroup does not erase a known one");
    }

    #[test]
    fn memcpy_bytes_by_direction() {
        let mut acc = TickAccumulator::default();
        let mut e = ev(1, source::CUDA_RUNTIME, cuda_op::MEMCPY, 1);
        e.args = [4096, 1, 0, 0];
        acc.on_cuda(&e);
        e.args = [10, 9, 0, 0];
        acc.on_cuda(&e);
        assert_eq!(acc.per_pid[&1].memcpy_bytes, [0, 4096, 0, 0, 10]);
    }

    #[test]
    fn window_rates_cover_the_elapsed_time_until_full() {
        let mut w = Window::new(Duration::from_secs(60));
        let t0 = Timestamp::from_secs(1000);
        // First totals: they cover an unknown time, so they only mark the start.
        assert_eq!(w.push(t0, 100_000, 0, 1), (0, 0.0, 0.0));
        let t = |s| t0.saturating_add(Duration::from_secs(s));
        // 10 s in: 1,000 launches over 10 s; 5 s busy on 1 GPU.
        let (n, rate, compute) = w.push(t(10), 1000, 5_000_000_000, 1);
        assert_eq!((n, rate), (1000, 100.0));
        assert!((compute - 0.5).abs() < 1e-12);
        // Two GPUs halve the compute signal.
        let mut w2 = Window::new(Duration::from_secs(60));
        w2.push(t0, 0, 0, 2);
        assert!((w2.push(t(10), 0, 5_000_000_000, 2).2 - 0.25).abs() < 1e-12);
        // After the window, old buckets fall out.
        let (n, rate, _) = w.push(t(70), 600, 0, 1);
        // The bucket at 10 s covers (0 s, 10 s], outside (10 s, 70 s]: only the last remains.
        assert_eq!((n, rate), (600, 10.0));
        let (n, _, _) = w.push(t(200), 0, 0, 1);
        assert_eq!(n, 0);
    }

    #[test]
    fn tick_jitter_does_not_change_the_rate() {
        // Ticks every 2 s with a 2 s window, a few milliseconds early or late, at a steady
        // 55 launches/s: every rate is 55/s. (Comparing bucket ends with the exact window
        // start kept a bucket ending 1 ms inside it, and read 110/s on those ticks.)
        let mut w = Window::new(Duration::from_secs(2));
        let mut at = Timestamp::from_secs(1000);
        w.push(at, 0, 0, 1);
        for i in 0..200u64 {
            let step_ms = if i % 3 == 0 { 1_997 } else { 2_003 };
            at = at.saturating_add(Duration::from_millis(step_ms));
            let launches = 55 * step_ms / 1000;
            let (_, rate, _) = w.push(at, launches, 0, 1);
            assert!((rate - 55.0).abs() < 0.6, "tick {i}: {rate}");
        }
        // One-second ticks in a 2 s window keep two buckets.
        let mut w = Window::new(Duration::from_secs(2));
        let mut at = Timestamp::from_secs(1000);
        w.push(at, 0, 0, 1);
        for i in 0..100u64 {
            let step_ms = if i % 2 == 0 { 998 } else { 1_002 };
            at = at.saturating_add(Duration::from_millis(step_ms));
            let (n, rate, _) = w.push(at, 100 * step_ms / 1000, 0, 1);
            assert!((rate - 100.0).abs() <= 1.0, "tick {i}: {rate}");
            if i > 2 {
                assert!(
                    (198..=200).contains(&n),
                    "tick {i}: {n} launches in the window"
                );
            }
        }
    }

    #[test]
    fn windows_shorter_than_a_second_read_the_true_rate() {
        // A 1 s window whose buckets end at the drains, 0.9-1.1 s apart, at a steady 3,000
        // launches/s, half the time inside CUDA calls: every reading is 3,000/s and 0.5.
        // (A divisor floored at 1 s read 2,700/s and 0.45 after a 0.9 s stretch.)
        let mut w = Window::new(Duration::from_secs(1));
        let mut at = Timestamp::from_secs(1000);
        w.push(at, 0, 0, 1);
        for (i, ms) in [900u64, 1_000, 1_100, 1_000, 950]
            .repeat(20)
            .into_iter()
            .enumerate()
        {
            at = at.saturating_add(Duration::from_millis(ms));
            let (_, rate, compute) = w.push(at, 3 * ms, ms * 500_000, 1);
            assert!((rate - 3_000.0).abs() < 1e-6, "stretch {i}: {rate}");
            assert!((compute - 0.5).abs() < 1e-9, "stretch {i}: {compute}");
        }
    }

    #[test]
    fn the_window_is_made_of_drains_not_ticks() {
        let shared = Arc::new(SharedWindow::default());
        shared.alive.store(true, Ordering::Relaxed);
        let mut src = EbpfSource::new(shared.clone(), Duration::from_secs(1), 1, None);
        let t0 = Timestamp::from_secs(5_000);
        // The drains ran over the 2 s before this tick.
        let start = Instant::now().checked_sub(Duration::from_secs(2)).unwrap();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Ticks 2 s apart, a 1 s window, a drain every 100 ms: 100 launches per drain for
        // the first second, then 50 (a slowdown halfway through the tick). The window
        // reads the last second alone: 500/s, not the tick's average of 750/s.
        {
            let mut log = shared.drains.lock();
            log.mark(at(0));
            for i in 1..=20u64 {
                log.on_launches(&[if i <= 10 { 100 } else { 50 }, 0, 0, 0, 0]);
                log.mark(at(100 * i));
            }
        }
        let s = src.collect(t0).unwrap();
        assert!(
            (s.raw.throughput - 500.0).abs() < 1e-6,
            "{}",
            s.raw.throughput
        );
        // The window keeps 0.9-1 s of drains (WINDOW_SPAN_TOLERANCE): here the last 0.9 s.
        assert_eq!(s.kernel_launches, 450);
        // No drain since: the window is unchanged.
        let s = src
            .collect(t0.saturating_add(Duration::from_millis(50)))
            .unwrap();
        assert!(
            (s.raw.throughput - 500.0).abs() < 1e-6,
            "{}",
            s.raw.throughput
        );
    }

    #[test]
    fn per_tick_process_cap_counts_drops() {
        let mut acc = TickAccumulator::default();
        for pid in 0..(MAX_PIDS_PER_TICK as u32 + 3) {
            acc.on_launches(pid, &counts([1, 0, 0, 0, 0], 0));
        }
        acc.on_cuda(&ev(u32::MAX, source::CUDA_RUNTIME, cuda_op::STREAM_SYNC, 1));
        assert_eq!(acc.per_pid.len(), MAX_PIDS_PER_TICK);
        assert_eq!(acc.dropped, 4);
    }
}
