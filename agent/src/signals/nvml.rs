//! GPU memory and model through NVML, loaded at run time with `dlopen` so the agent runs
//! (and falls back to host memory) where the NVIDIA driver is absent.

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
