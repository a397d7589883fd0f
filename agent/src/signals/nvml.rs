//! GPU memory and model through NVML, loaded at run time with `dlopen` so the agent runs
//! (and falls back to host memory) where the NVIDIA driver is absent. With the store on,
//! [`start_sampler`] records each GPU's health once a second: clock event (throttle)
//! reasons, SM clock, temperature, power, ECC error counts (when they change) and XID
//! events.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::fleet::payload::GpuInfo;

type NvmlDevice = *mut c_void;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct NvmlMemory {
    total: u64,
    free: u64,
    used: u64,
}

type InitFn = unsafe extern "C" fn() -> c_int;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> c_int;
type HandleFn = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> c_int;
type MemoryFn = unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> c_int;
type NameFn = unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> c_int;
type ShutdownFn = unsafe extern "C" fn() -> c_int;
type UtilizationFn = unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> c_int;
type ReasonsFn = unsafe extern "C" fn(NvmlDevice, *mut u64) -> c_int;
type ClockFn = unsafe extern "C" fn(NvmlDevice, c_int, *mut c_uint) -> c_int;
type TempFn = unsafe extern "C" fn(NvmlDevice, c_int, *mut c_uint) -> c_int;
type PowerFn = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int;
type EccFn = unsafe extern "C" fn(NvmlDevice, c_int, c_int, *mut u64) -> c_int;
type EventSet = *mut c_void;
type SetCreateFn = unsafe extern "C" fn(*mut EventSet) -> c_int;
type RegisterFn = unsafe extern "C" fn(NvmlDevice, u64, EventSet) -> c_int;
type WaitFn = unsafe extern "C" fn(EventSet, *mut NvmlEventData, c_uint) -> c_int;
type SetFreeFn = unsafe extern "C" fn(EventSet) -> c_int;

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct NvmlEventData {
    device: NvmlDevice,
    event_type: u64,
    event_data: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlEventTypeXidCriticalError`.
const EVENT_XID: u64 = 0x8;
const CLOCK_SM: c_int = 1;
const TEMPERATURE_GPU: c_int = 0;
const ECC_CORRECTED: c_int = 0;
const ECC_UNCORRECTED: c_int = 1;
/// `NVML_VOLATILE_ECC`: since the driver loaded.
const ECC_VOLATILE: c_int = 0;

/// Clock event (throttle) reason bits (`nvmlClocksEventReason*`).
pub mod reasons {
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SW_THERMAL: u64 = 0x20;
    pub const HW_THERMAL: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
    /// The GPU is held back by heat.
    pub const THERMAL: u64 = SW_THERMAL | HW_THERMAL;
    /// By its power limit or the board's power brake.
    pub const POWER: u64 = SW_POWER_CAP | HW_POWER_BRAKE;
}

/// One GPU's health at one moment; a field is `None` when NVML does not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuSample {
    pub reasons: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    /// (uncorrected, corrected) since the driver loaded.
    pub ecc: Option<(u64, u64)>,
}

/// The optional health calls (absent from older drivers or not supported by a GPU).
#[derive(Clone, Copy)]
struct HealthFns {
    reasons: Option<ReasonsFn>,
    clock: Option<ClockFn>,
    temperature: Option<TempFn>,
    power: Option<PowerFn>,
    ecc: Option<EccFn>,
    set_create: Option<SetCreateFn>,
    register: Option<RegisterFn>,
    wait: Option<WaitFn>,
    set_free: Option<SetFreeFn>,
}

/// `nvmlUtilization_t`: percent of the last sample period with a kernel running / memory
/// being read or written.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct NvmlUtilization {
    gpu: c_uint,
    memory: c_uint,
}

const NVML_SUCCESS: c_int = 0;
const NAME_LEN: usize = 96;

/// A loaded, initialised NVML.
pub struct Nvml {
    // Keeps the library mapped while the function pointers below are used.
    _lib: libloading::Library,
    count: CountFn,
    handle: HandleFn,
    memory: MemoryFn,
    name: NameFn,
    shutdown: ShutdownFn,
    utilization: Option<UtilizationFn>,
    health: HealthFns,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

impl Nvml {
    /// `None` when `libnvidia-ml.so.1` is absent or does not initialise.
    pub fn load() -> Option<Self> {
        // SAFETY: loading a shared library runs its initialisers; libnvidia-ml is the NVIDIA
        // driver's own library and is designed to be dlopen'ed by monitoring tools.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }.ok()?;
        // SAFETY: the symbol types match the NVML C API declarations (nvml.h).
        let nvml = unsafe {
            let init: InitFn = *lib.get::<InitFn>(b"nvmlInit_v2\0").ok()?;
            let count: CountFn = *lib.get::<CountFn>(b"nvmlDeviceGetCount_v2\0").ok()?;
            let handle: HandleFn = *lib
                .get::<HandleFn>(b"nvmlDeviceGetHandleByIndex_v2\0")
                .ok()?;
            let memory: MemoryFn = *lib.get::<MemoryFn>(b"nvmlDeviceGetMemoryInfo\0").ok()?;
            let name: NameFn = *lib.get::<NameFn>(b"nvmlDeviceGetName\0").ok()?;
            let shutdown: ShutdownFn = *lib.get::<ShutdownFn>(b"nvmlShutdown\0").ok()?;
            let utilization = lib
                .get::<UtilizationFn>(b"nvmlDeviceGetUtilizationRates\0")
                .ok()
                .map(|f| *f);
            let opt = |names: &[&[u8]]| {
                names
                    .iter()
                    .find_map(|n| lib.get::<unsafe extern "C" fn()>(n).ok().map(|f| *f))
            };
            // The clock event reasons were "throttle reasons" before driver 535.
            let health = HealthFns {
                reasons: opt(&[
                    b"nvmlDeviceGetCurrentClocksEventReasons\0",
                    b"nvmlDeviceGetCurrentClocksThrottleReasons\0",
                ])
                .map(|f| std::mem::transmute::<unsafe extern "C" fn(), ReasonsFn>(f)),
                clock: opt(&[b"nvmlDeviceGetClockInfo\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), ClockFn>(f)),
                temperature: opt(&[b"nvmlDeviceGetTemperature\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), TempFn>(f)),
                power: opt(&[b"nvmlDeviceGetPowerUsage\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), PowerFn>(f)),
                ecc: opt(&[b"nvmlDeviceGetTotalEccErrors\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), EccFn>(f)),
                set_create: opt(&[b"nvmlEventSetCreate\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), SetCreateFn>(f)),
                register: opt(&[b"nvmlDeviceRegisterEvents\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), RegisterFn>(f)),
                wait: opt(&[b"nvmlEventSetWait_v2\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), WaitFn>(f)),
                set_free: opt(&[b"nvmlEventSetFree\0"])
                    .map(|f| std::mem::transmute::<unsafe extern "C" fn(), SetFreeFn>(f)),
            };
            if init() != NVML_SUCCESS {
                return None;
            }
            Nvml {
                _lib: lib,
                count,
                handle,
                memory,
                name,
                shutdown,
                utilization,
                health,
            }
        };
        Some(nvml)
    }

    pub fn device_count(&self) -> u32 {
        let mut n: c_uint = 0;
        // SAFETY: NVML is initialised; `n` is a valid out pointer.
        let rc = unsafe { (self.count)(&mut n) };
        if rc == NVML_SUCCESS { n } else { 0 }
    }

    fn device(&self, i: u32) -> Option<NvmlDevice> {
        let mut d: NvmlDevice = std::ptr::null_mut();
        // SAFETY: NVML is initialised; `d` is a valid out pointer.
        let rc = unsafe { (self.handle)(i, &mut d) };
        (rc == NVML_SUCCESS && !d.is_null()).then_some(d)
    }

    /// Free fraction of memory summed over all GPUs.
    pub fn memory_headroom(&self) -> Option<f64> {
        let (mut total, mut free) = (0u64, 0u64);
        for i in 0..self.device_count() {
            let d = self.device(i)?;
            let mut m = NvmlMemory::default();
            // SAFETY: `d` is a handle NVML returned; `m` matches nvmlMemory_t.
            if unsafe { (self.memory)(d, &mut m) } != NVML_SUCCESS {
                return None;
            }
            total = total.saturating_add(m.total);
            free = free.saturating_add(m.free);
        }
        (total > 0).then(|| (free as f64 / total as f64).clamp(0.0, 1.0))
    }

    /// The busiest GPU's kernel utilization in [0, 1] over NVML's last sample period;
    /// `None` when NVML cannot say.
    pub fn gpu_utilization(&self) -> Option<f64> {
        let f = self.utilization?;
        let mut best: Option<u32> = None;
        for i in 0..self.device_count() {
            let d = self.device(i)?;
            let mut u = NvmlUtilization::default();
            // SAFETY: `d` is a handle NVML returned; `u` matches nvmlUtilization_t.
            if unsafe { f(d, &mut u) } == NVML_SUCCESS {
                best = Some(best.map_or(u.gpu, |b| b.max(u.gpu)));
            }
        }
        best.map(|p| (f64::from(p) / 100.0).clamp(0.0, 1.0))
    }

    /// Model of GPU 0 (verbatim, as `nvidia-smi --query-gpu=name` prints it) and the count.
    pub fn gpu_info(&self) -> Option<GpuInfo> {
        let count = self.device_count();
        let d = self.device(0)?;
        let mut buf = [0 as c_char; NAME_LEN];
        // SAFETY: `buf` holds NAME_LEN bytes and NVML writes a NUL-terminated string within it.
        if unsafe { (self.name)(d, buf.as_mut_ptr(), NAME_LEN as c_uint) } != NVML_SUCCESS {
            return None;
        }
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        let model = String::from_utf8_lossy(&bytes).trim().to_string();
        (!model.is_empty() && count > 0).then(|| GpuInfo {
            model,
            count: i64::from(count),
        })
    }
}

impl Nvml {
    /// GPU `i`'s health now.
    pub fn sample(&self, i: u32) -> Option<GpuSample> {
        let d = self.device(i)?;
        let h = &self.health;
        let mut s = GpuSample::default();
        // SAFETY (each call below): `d` is a handle NVML returned, the out pointers are
        // valid and of the types nvml.h declares.
        if let Some(f) = h.reasons {
            let mut v = 0u64;
            s.reasons = (unsafe { f(d, &mut v) } == NVML_SUCCESS).then_some(v);
        }
        if let Some(f) = h.clock {
            let mut v: c_uint = 0;
            s.sm_clock_mhz = (unsafe { f(d, CLOCK_SM, &mut v) } == NVML_SUCCESS).then_some(v);
        }
        if let Some(f) = h.temperature {
            let mut v: c_uint = 0;
            s.temperature_c =
                (unsafe { f(d, TEMPERATURE_GPU, &mut v) } == NVML_SUCCESS).then_some(v);
        }
        if let Some(f) = h.power {
            let mut v: c_uint = 0;
            s.power_mw = (unsafe { f(d, &mut v) } == NVML_SUCCESS).then_some(v);
        }
        if let Some(f) = h.ecc {
            let (mut u, mut c) = (0u64, 0u64);
            let ok = unsafe { f(d, ECC_UNCORRECTED, ECC_VOLATILE, &mut u) } == NVML_SUCCESS
                && unsafe { f(d, ECC_CORRECTED, ECC_VOLATILE, &mut c) } == NVML_SUCCESS;
            s.ecc = ok.then_some((u, c));
        }
        Some(s)
    }

    /// An event set with every GPU registered for XID events; `None` when NVML has no
    /// event API or no GPU accepts the registration.
    fn xid_events(&self) -> Option<XidEvents<'_>> {
        let h = &self.health;
        let (create, register, wait) = (h.set_create?, h.register?, h.wait?);
        let mut set: EventSet = std::ptr::null_mut();
        // SAFETY: `set` is a valid out pointer.
        if unsafe { create(&mut set) } != NVML_SUCCESS || set.is_null() {
            return None;
        }
        let mut devices = Vec::new();
        for i in 0..self.device_count() {
            if let Some(d) = self.device(i) {
                // SAFETY: `d` is a handle NVML returned and `set` an event set it created.
                if unsafe { register(d, EVENT_XID, set) } == NVML_SUCCESS {
                    devices.push((d, i));
                }
            }
        }
        let ev = XidEvents {
            nvml: self,
            set,
            wait,
            devices,
        };
        (!ev.devices.is_empty()).then_some(ev)
    }
}

struct XidEvents<'a> {
    nvml: &'a Nvml,
    set: EventSet,
    wait: WaitFn,
    /// Registered handles and their indices.
    devices: Vec<(NvmlDevice, u32)>,
}

impl XidEvents<'_> {
    /// The XID events waiting now: (GPU index, XID).
    fn drain(&self) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for _ in 0..64 {
            let mut e = NvmlEventData {
                device: std::ptr::null_mut(),
                event_type: 0,
                event_data: 0,
                gpu_instance_id: 0,
                compute_instance_id: 0,
            };
            // SAFETY: `set` is a live event set and `e` matches nvmlEventData_t; a 0 ms
            // timeout returns at once.
            if unsafe { (self.wait)(self.set, &mut e, 0) } != NVML_SUCCESS {
                break;
            }
            if e.event_type & EVENT_XID != 0 {
                let gpu = self
                    .devices
                    .iter()
                    .find(|(d, _)| *d == e.device)
                    .map_or(u32::MAX, |(_, i)| *i);
                out.push((gpu, e.event_data));
            }
        }
        out
    }
}

impl Drop for XidEvents<'_> {
    fn drop(&mut self) {
        if let Some(free) = self.nvml.health.set_free {
            // SAFETY: `set` was created by nvmlEventSetCreate and is freed once.
            unsafe { free(self.set) };
        }
    }
}

/// The rows of one sample: (op, arg0, arg1). ECC counts only when they changed.
pub fn sample_rows(s: &GpuSample, last_ecc: &mut Option<(u64, u64)>) -> Vec<(i64, i64, i64)> {
    use crate::store::schema::op;
    let mut rows = Vec::with_capacity(5);
    if let Some(r) = s.reasons {
        rows.push((op::NVML_CLOCK_REASONS, r as i64, 0));
    }
    if let Some(v) = s.sm_clock_mhz {
        rows.push((op::NVML_SM_CLOCK, i64::from(v), 0));
    }
    if let Some(v) = s.temperature_c {
        rows.push((op::NVML_TEMPERATURE, i64::from(v), 0));
    }
    if let Some(v) = s.power_mw {
        rows.push((op::NVML_POWER, i64::from(v), 0));
    }
    if let Some(e) = s.ecc
        && *last_ecc != Some(e)
    {
        *last_ecc = Some(e);
        rows.push((op::NVML_ECC, e.0 as i64, e.1 as i64));
    }
    rows
}

/// The running GPU health sampler.
#[derive(Debug)]
pub struct SamplerHandle {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SamplerHandle {
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SamplerHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Record every GPU's health into the store every `interval` (and XID events as they come,
/// checked every 100 ms), until stopped.
pub fn start_sampler(
    nvml: std::sync::Arc<Nvml>,
    sink: crate::store::StoreSink,
    interval: std::time::Duration,
) -> std::io::Result<SamplerHandle> {
    use crate::store::EventRow;
    use crate::store::schema::{op, source};
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ingero-nvml".into())
        .spawn(move || {
            let xid = nvml.xid_events();
            let n = nvml.device_count();
            let mut last_ecc: Vec<Option<(u64, u64)>> = vec![None; n as usize];
            let mut next = std::time::Instant::now();
            let now_ns =
                || i64::try_from(component::Timestamp::now().as_nanos()).unwrap_or(i64::MAX);
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(x) = &xid {
                    for (gpu, code) in x.drain() {
                        tracing::warn!(gpu, xid = code, "GPU XID event");
                        sink.event(EventRow {
                            timestamp: now_ns(),
                            source: source::NVML,
                            op: op::NVML_XID,
                            arg0: code as i64,
                            gpu_id: i64::from(gpu),
                            ..Default::default()
                        });
                    }
                }
                if std::time::Instant::now() >= next {
                    next += interval;
                    let ts = now_ns();
                    for (i, last) in (0..n).zip(last_ecc.iter_mut()) {
                        let Some(s) = nvml.sample(i) else { continue };
                        for (o, a0, a1) in sample_rows(&s, last) {
                            sink.event(EventRow {
                                timestamp: ts,
                                source: source::NVML,
                                op: o,
                                arg0: a0,
                                arg1: a1,
                                gpu_id: i64::from(i),
                                ..Default::default()
                            });
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        })?;
    Ok(SamplerHandle {
        stop,
        thread: Some(thread),
    })
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialised by `load`.
        unsafe {
            (self.shutdown)();
        }
    }
}

// SAFETY: NVML's API is thread-safe (documented in nvml.h); the handles are opaque.
unsafe impl Send for Nvml {}
// SAFETY: as above: every method takes `&self` and only calls NVML, which may be called
// from several threads at once.
unsafe impl Sync for Nvml {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_becomes_rows_and_ecc_counts_only_when_they_change() {
        use crate::store::schema::op;
        let s = GpuSample {
            reasons: Some(reasons::HW_THERMAL),
            sm_clock_mhz: Some(1200),
            temperature_c: Some(91),
            power_mw: Some(350_000),
            ecc: Some((0, 2)),
        };
        let mut last = None;
        let rows = sample_rows(&s, &mut last);
        assert_eq!(
            rows,
            vec![
                (op::NVML_CLOCK_REASONS, 0x40, 0),
                (op::NVML_SM_CLOCK, 1200, 0),
                (op::NVML_TEMPERATURE, 91, 0),
                (op::NVML_POWER, 350_000, 0),
                (op::NVML_ECC, 0, 2),
            ]
        );
        // The same ECC counts again: no ECC row; a new uncorrected error: one.
        assert_eq!(sample_rows(&s, &mut last).len(), 4);
        let s2 = GpuSample {
            ecc: Some((1, 2)),
            ..s
        };
        assert_eq!(
            sample_rows(&s2, &mut last).last(),
            Some(&(op::NVML_ECC, 1, 2))
        );
        // What NVML does not report is not written.
        assert!(sample_rows(&GpuSample::default(), &mut None).is_empty());
    }
}
