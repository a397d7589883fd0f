//! Loading the embedded eBPF objects with aya and attaching their programs to libraries.

use std::path::Path;

use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeLinkId, UProbeScope};
use aya::programs::{ProgramError, UProbe};
use aya::{Ebpf, EbpfLoader};

use super::symbols::SymbolTable;
use crate::events::{LaunchCounts, drop_counter};

/// One probe point: a function, the entry program attached to it and, where a duration or
/// a return value is needed, the return program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    pub symbol: &'static str,
    pub entry: &'static str,
    pub ret: Option<&'static str>,
}

const fn p(symbol: &'static str, entry: &'static str, ret: &'static str) -> ProbeSpec {
    ProbeSpec {
        symbol,
        entry,
        ret: Some(ret),
    }
}

/// An entry-only probe (kernel launches: counted in the kernel, no record).
const fn e(symbol: &'static str, entry: &'static str) -> ProbeSpec {
    ProbeSpec {
        symbol,
        entry,
        ret: None,
    }
}

/// libcudart. `_ptsz` / `_ptds` are the per-thread default stream variants.
pub const CUDA_RUNTIME: &[ProbeSpec] = &[
    e("cudaLaunchKernel", "cudart_launch"),
    e("cudaLaunchKernel_ptsz", "cudart_launch"),
    e("cudaLaunchKernelExC", "cudart_launch"),
    e("cudaLaunchKernelExC_ptsz", "cudart_launch"),
    e("cudaLaunchCooperativeKernel", "cudart_launch"),
    e("cudaLaunchCooperativeKernel_ptsz", "cudart_launch"),
    e("cudaGraphLaunch", "cudart_graph_launch"),
    e("cudaGraphLaunch_ptsz", "cudart_graph_launch"),
    p("cudaMalloc", "cudart_malloc", "cudart_malloc_ret"),
    p("cudaFree", "cudart_free", "cudart_free_ret"),
    p("cudaMemcpy", "cudart_memcpy", "cudart_memcpy_ret"),
    p("cudaMemcpy_ptds", "cudart_memcpy", "cudart_memcpy_ret"),
    p(
        "cudaMemcpyAsync",
        "cudart_memcpy_async",
        "cudart_memcpy_async_ret",
    ),
    p(
        "cudaMemcpyAsync_ptsz",
        "cudart_memcpy_async",
        "cudart_memcpy_async_ret",
    ),
    p(
        "cudaStreamSynchronize",
        "cudart_stream_sync",
        "cudart_stream_sync_ret",
    ),
    p(
        "cudaStreamSynchronize_ptsz",
        "cudart_stream_sync",
        "cudart_stream_sync_ret",
    ),
    p(
        "cudaDeviceSynchronize",
        "cudart_device_sync",
        "cudart_device_sync_ret",
    ),
];

/// The runtime's kernel-launch programs: the probes `probes.runtime_launch_probes: auto`
/// may detach once calibration shows the driver probes see every runtime launch.
pub const RUNTIME_LAUNCH_PROGRAMS: [&str; 2] = ["cudart_launch", "cudart_graph_launch"];

/// Whether `symbol` is one of the runtime's launch functions.
pub fn is_runtime_launch_symbol(symbol: &str) -> bool {
    CUDA_RUNTIME
        .iter()
        .any(|p| p.symbol == symbol && RUNTIME_LAUNCH_PROGRAMS.contains(&p.entry))
}

/// libcuda.
pub const CUDA_DRIVER: &[ProbeSpec] = &[
    e("cuLaunchKernel", "cu_launch"),
    e("cuLaunchKernel_ptsz", "cu_launch"),
    e("cuLaunchKernelEx", "cu_launch"),
    e("cuLaunchKernelEx_ptsz", "cu_launch"),
    e("cuLaunchCooperativeKernel", "cu_launch"),
    e("cuLaunchCooperativeKernel_ptsz", "cu_launch"),
    e("cuGraphLaunch", "cu_graph_launch"),
    e("cuGraphLaunch_ptsz", "cu_graph_launch"),
    p("cuMemAlloc_v2", "cu_mem_alloc", "cu_mem_alloc_ret"),
    p("cuMemFree_v2", "cu_mem_free", "cu_mem_free_ret"),
    p("cuMemcpyHtoD_v2", "cu_memcpy_htod", "cu_memcpy_ret"),
    p("cuMemcpyDtoH_v2", "cu_memcpy_dtoh", "cu_memcpy_ret"),
    p("cuMemcpyDtoD_v2", "cu_memcpy_dtod", "cu_memcpy_ret"),
    p("cuMemcpy", "cu_memcpy", "cu_memcpy_ret"),
    p(
        "cuMemcpyHtoDAsync_v2",
        "cu_memcpy_htod_async",
        "cu_memcpy_async_ret",
    ),
    p(
        "cuMemcpyDtoHAsync_v2",
        "cu_memcpy_dtoh_async",
        "cu_memcpy_async_ret",
    ),
    p(
        "cuStreamSynchronize",
        "cu_stream_sync",
        "cu_stream_sync_ret",
    ),
    p("cuCtxSynchronize", "cu_ctx_sync", "cu_ctx_sync_ret"),
];

/// libnccl (or libtorch's bundled copy).
pub const NCCL: &[ProbeSpec] = &[
    p(
        "ncclCommInitRank",
        "nccl_comm_init_rank",
        "nccl_comm_init_rank_ret",
    ),
    p(
        "ncclCommInitAll",
        "nccl_comm_init_all",
        "nccl_comm_init_all_ret",
    ),
    p(
        "ncclCommDestroy",
        "nccl_comm_destroy",
        "nccl_comm_destroy_ret",
    ),
    p("ncclAllReduce", "nccl_all_reduce", "nccl_all_reduce_ret"),
    p("ncclAllGather", "nccl_all_gather", "nccl_all_gather_ret"),
    p(
        "ncclReduceScatter",
        "nccl_reduce_scatter",
        "nccl_reduce_scatter_ret",
    ),
    p("ncclBcast", "nccl_bcast", "nccl_bcast_ret"),
    p("ncclSend", "nccl_send", "nccl_send_ret"),
    p("ncclRecv", "nccl_recv", "nccl_recv_ret"),
];

/// The empty programs of the overhead baseline.
pub const EMPTY_ENTRY: &str = "empty_entry";
pub const EMPTY_RETURN: &str = "empty_return";

pub const CUDA_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cuda.bpf.o"));
pub const NCCL_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/nccl.bpf.o"));
pub const EMPTY_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/empty.bpf.o"));

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("load eBPF object {object}: {source}")]
    Object {
        object: &'static str,
        source: aya::EbpfError,
    },
    #[error("eBPF object {object} has no program {program}")]
    MissingProgram {
        object: &'static str,
        program: String,
    },
    #[error("load program {program}: {source}")]
    Program {
        program: String,
        source: ProgramError,
    },
    #[error("eBPF object {object} has no map {map}")]
    MissingMap {
        object: &'static str,
        map: &'static str,
    },
    #[error("map {map}: {source}")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
}

/// A loaded object whose programs are ready to attach.
#[derive(Debug)]
pub struct BpfObject {
    name: &'static str,
    ebpf: Ebpf,
}

/// One attached probe: which program, and its link.
#[derive(Debug)]
pub struct Link {
    program: &'static str,
    id: UProbeLinkId,
}

impl Link {
    /// The program this link runs.
    pub fn program(&self) -> &'static str {
        self.program
    }
}

fn uprobe<'a>(
    ebpf: &'a mut Ebpf,
    object: &'static str,
    name: &str,
) -> Result<&'a mut UProbe, LoadError> {
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| LoadError::MissingProgram {
            object,
            program: name.to_string(),
        })?;
    prog.try_into().map_err(|source| LoadError::Program {
        program: name.to_string(),
        source,
    })
}

impl BpfObject {
    /// Load `bytes` and every program named in `specs` (each once), watching every process.
    pub fn load(
        name: &'static str,
        bytes: &[u8],
        programs: &[&'static str],
    ) -> Result<Self, LoadError> {
        Self::load_scoped(name, bytes, programs, 0)
    }

    /// [`Self::load`] with the kernel filter's mode (`filter_mode`, see `probes::scope`).
    pub fn load_scoped(
        name: &'static str,
        bytes: &[u8],
        programs: &[&'static str],
        filter_mode: u32,
    ) -> Result<Self, LoadError> {
        let mut ebpf = EbpfLoader::new()
            .override_global("filter_mode", &filter_mode, false)
            .load(bytes)
            .map_err(|source| LoadError::Object {
                object: name,
                source,
            })?;
        let mut done: Vec<&str> = Vec::new();
        for prog in programs {
            if done.contains(prog) {
                continue;
            }
            uprobe(&mut ebpf, name, prog)?
                .load()
                .map_err(|source| LoadError::Program {
                    program: (*prog).to_string(),
                    source,
                })?;
            done.push(prog);
        }
        Ok(BpfObject { name, ebpf })
    }

    /// Load an object for a probe set.
    pub fn for_specs(
        name: &'static str,
        bytes: &[u8],
        specs: &[&[ProbeSpec]],
        filter_mode: u32,
    ) -> Result<Self, LoadError> {
        let programs: Vec<&'static str> = specs
            .iter()
            .flat_map(|s| s.iter().flat_map(|p| std::iter::once(p.entry).chain(p.ret)))
            .collect();
        Self::load_scoped(name, bytes, &programs, filter_mode)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Attach one program at `offset` of `target`, for every process.
    pub fn attach_at(
        &mut self,
        program: &'static str,
        target: &Path,
        offset: u64,
    ) -> Result<Link, LoadError> {
        let obj = self.name;
        let prog = uprobe(&mut self.ebpf, obj, program)?;
        let id = prog
            .attach(
                UProbeAttachLocation::AbsoluteOffset(offset),
                target,
                UProbeScope::AllProcesses,
            )
            .map_err(|source| LoadError::Program {
                program: program.to_string(),
                source,
            })?;
        Ok(Link { program, id })
    }

    /// Attach every spec whose symbol resolves: entry then (if any) return probe. Returns the
    /// links and the symbols attached; a failure detaches what this call attached. Two
    /// symbols at one address (aliases) are attached once, so a call is never seen twice.
    pub fn attach_specs(
        &mut self,
        specs: &[ProbeSpec],
        symbols: &SymbolTable,
        target: &Path,
    ) -> Result<(Vec<Link>, Vec<&'static str>), LoadError> {
        let mut links = Vec::new();
        let mut attached = Vec::new();
        let mut offsets = std::collections::BTreeSet::new();
        for spec in specs {
            let Some(offset) = symbols.resolve(spec.symbol) else {
                continue;
            };
            if !offsets.insert(offset) {
                continue;
            }
            for program in std::iter::once(spec.entry).chain(spec.ret) {
                match self.attach_at(program, target, offset) {
                    Ok(l) => links.push(l),
                    Err(e) => {
                        self.detach(links);
                        return Err(e);
                    }
                }
            }
            attached.push(spec.symbol);
        }
        Ok((links, attached))
    }

    /// Detach links without waiting: the kernel's uprobe unregistration waits for an RCU
    /// grace period per probe (about 0.1 s each), so the owned links are dropped on a
    /// short-lived thread and the caller keeps draining events meanwhile. Returns that
    /// thread: once it has finished, the probes are gone.
    pub fn detach_in_background(
        &mut self,
        links: Vec<Link>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let obj = self.name;
        let mut owned = Vec::with_capacity(links.len());
        for l in links {
            match uprobe(&mut self.ebpf, obj, l.program).and_then(|prog| {
                prog.take_link(l.id).map_err(|source| LoadError::Program {
                    program: l.program.to_string(),
                    source,
                })
            }) {
                Ok(link) => owned.push(link),
                Err(e) => tracing::debug!(error = %e, "uprobe detach failed"),
            }
        }
        if owned.is_empty() {
            return None;
        }
        match std::thread::Builder::new()
            .name("ingero-detach".into())
            .spawn(move || drop(owned))
        {
            Ok(h) => Some(h),
            Err(e) => {
                // The links were moved into the failed closure and dropped with it: the
                // probes are detached here, synchronously.
                tracing::warn!(error = %e, "could not start the detach thread");
                None
            }
        }
    }

    /// Detach links (errors are logged: the link may already be gone with its process).
    pub fn detach(&mut self, links: Vec<Link>) {
        let obj = self.name;
        for l in links {
            match uprobe(&mut self.ebpf, obj, l.program) {
                Ok(prog) => {
                    if let Err(e) = prog.detach(l.id) {
                        tracing::debug!(program = l.program, error = %e, "uprobe detach failed");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "uprobe detach: program lookup failed"),
            }
        }
    }

    /// Take the object's ring buffer.
    pub fn ring(&mut self, map: &'static str) -> Result<RingBuf<MapData>, LoadError> {
        let m = self.ebpf.take_map(map).ok_or(LoadError::MissingMap {
            object: self.name,
            map,
        })?;
        RingBuf::try_from(m).map_err(|source| LoadError::Map { map, source })
    }

    /// Take the object's per-process launch counters.
    pub fn launch_counts(
        &mut self,
        map: &'static str,
    ) -> Result<PerCpuHashMap<MapData, u32, LaunchCounts>, LoadError> {
        let m = self.ebpf.take_map(map).ok_or(LoadError::MissingMap {
            object: self.name,
            map,
        })?;
        PerCpuHashMap::try_from(m).map_err(|source| LoadError::Map { map, source })
    }

    /// Take the object's scope filter maps (`filter_pids`, `filter_cgroups`).
    pub fn filters(&mut self) -> Result<Filters, LoadError> {
        let mut take = |map: &'static str| {
            self.ebpf.take_map(map).ok_or(LoadError::MissingMap {
                object: self.name,
                map,
            })
        };
        let pids = take("filter_pids")?;
        let cgroups = take("filter_cgroups")?;
        Ok(Filters {
            pids: HashMap::try_from(pids).map_err(|source| LoadError::Map {
                map: "filter_pids",
                source,
            })?,
            cgroups: HashMap::try_from(cgroups).map_err(|source| LoadError::Map {
                map: "filter_cgroups",
                source,
            })?,
        })
    }

    /// Take the object's drop counters.
    pub fn drops(&mut self, map: &'static str) -> Result<PerCpuArray<MapData, u64>, LoadError> {
        let m = self.ebpf.take_map(map).ok_or(LoadError::MissingMap {
            object: self.name,
            map,
        })?;
        PerCpuArray::try_from(m).map_err(|source| LoadError::Map { map, source })
    }
}

/// One object's scope filter maps.
#[derive(Debug)]
pub struct Filters {
    pub pids: HashMap<MapData, u32, u8>,
    pub cgroups: HashMap<MapData, u64, u8>,
}

impl Filters {
    /// Make the PID map hold exactly `pids` (at most its size); returns how many did not fit.
    pub fn set_pids(&mut self, pids: &[u32]) -> usize {
        set_keys(&mut self.pids, pids)
    }

    /// Make the cgroup map hold exactly `ids`; returns how many did not fit.
    pub fn set_cgroups(&mut self, ids: &[u64]) -> usize {
        set_keys(&mut self.cgroups, ids)
    }
}

fn set_keys<K: aya::Pod + Ord + Copy>(map: &mut HashMap<MapData, K, u8>, want: &[K]) -> usize {
    let have: std::collections::BTreeSet<K> = map.keys().filter_map(Result::ok).collect();
    let want_set: std::collections::BTreeSet<K> = want.iter().copied().collect();
    for k in have.difference(&want_set) {
        let _ = map.remove(k);
    }
    let mut failed = 0;
    for k in want_set.difference(&have) {
        if map.insert(k, 1u8, 0).is_err() {
            failed += 1;
        }
    }
    failed
}

/// Sum each drop counter over CPUs: `[ringbuf_full, entry_missing, user_read, counts_full]`.
pub fn read_drops(map: &PerCpuArray<MapData, u64>) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (i, slot) in out.iter_mut().enumerate() {
        let idx = i as u32;
        if idx >= drop_counter::COUNT {
            break;
        }
        if let Ok(vals) = map.get(&idx, 0) {
            *slot = vals.iter().sum();
        }
    }
    out
}
