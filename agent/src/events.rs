//! The ring-buffer records shared with the eBPF programs (`bpf/common.h`), as `#[repr(C)]`
//! structs with compile-time size and offset checks, and a safe decoder that reads each
//! field from the bytes (no pointer casts, short records rejected).

use std::mem::{offset_of, size_of};

/// Event sources (`SRC_*`).
pub mod source {
    pub const CUDA_RUNTIME: u8 = 1;
    pub const CUDA_DRIVER: u8 = 2;
    pub const NCCL: u8 = 9;
}

/// CUDA ops (`CUDA_OP_*`), the same codes for runtime and driver.
pub mod cuda_op {
    pub const LAUNCH_KERNEL: u8 = 1;
    pub const MALLOC: u8 = 2;
    pub const FREE: u8 = 3;
    pub const MEMCPY: u8 = 4;
    pub const MEMCPY_ASYNC: u8 = 5;
    pub const STREAM_SYNC: u8 = 6;
    pub const DEVICE_SYNC: u8 = 7;
}

/// Indexes of the per-CPU drop counters (`DROP_*`).
pub mod drop_counter {
    pub const RINGBUF_FULL: u32 = 0;
    pub const ENTRY_MISSING: u32 = 1;
    pub const USER_READ: u32 = 2;
    /// A process's first launch found no room in `launch_counts` (uncounted launches).
    pub const COUNTS_FULL: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Launch counters (`LAUNCH_*`): each launch lands in exactly one.
pub mod launch {
    /// cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel (and `_ptsz`).
    pub const RUNTIME: usize = 0;
    /// cudaGraphLaunch (and `_ptsz`).
    pub const RUNTIME_GRAPH: usize = 1;
    /// A driver launch no runtime launch of the thread is under: cuLaunchKernel,
    /// cuLaunchKernelEx, cuLaunchCooperativeKernel (and `_ptsz`).
    pub const DRIVER: usize = 2;
    /// cuGraphLaunch (and `_ptsz`) outside a runtime graph launch.
    pub const DRIVER_GRAPH: usize = 3;
    /// A launch made under a runtime launch still on the thread's stack: the same launch
    /// one layer down, not counted as work.
    pub const NESTED: usize = 4;
    pub const COUNTERS: usize = 5;
}

/// `struct launch_counts`: one process's cumulative launch counters on one CPU.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchCounts {
    pub n: [u64; launch::COUNTERS],
    pub cgroup_id: u64,
}

// SAFETY: plain old data: `#[repr(C)]`, only u64 fields, no padding, every bit pattern valid.
unsafe impl aya::Pod for LaunchCounts {}

const _: () = {
    assert!(size_of::<LaunchCounts>() == 48);
    assert!(offset_of!(LaunchCounts, cgroup_id) == 40);
};

impl LaunchCounts {
    /// Launches counted as work (every counter but `NESTED`).
    pub fn work(&self) -> u64 {
        self.n[..launch::NESTED]
            .iter()
            .fold(0u64, |a, v| a.saturating_add(*v))
    }

    /// Sum per-CPU copies: counters add, the cgroup is any CPU's non-zero one.
    pub fn sum<'a>(per_cpu: impl IntoIterator<Item = &'a LaunchCounts>) -> LaunchCounts {
        let mut out = LaunchCounts::default();
        for c in per_cpu {
            for (o, v) in out.n.iter_mut().zip(c.n) {
                *o = o.saturating_add(v);
            }
            if out.cgroup_id == 0 {
                out.cgroup_id = c.cgroup_id;
            }
        }
        out
    }
}

/// `struct cuda_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaEvent {
    pub timestamp_ns: u64,
    pub duration_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub source: u8,
    pub op: u8,
    pub flags: u16,
    pub ret: i32,
    pub cgroup_id: u64,
    /// launch: func, grid.x|grid.y<<32, grid.z|block.x<<32, block.y|block.z<<32;
    /// malloc: size, pointer; free: pointer; memcpy: bytes, direction.
    pub args: [u64; 4],
    pub stream: u64,
    pub comm: [u8; 16],
}

/// `struct nccl_event` (the spec's 104-byte record plus `op_seq`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NcclEvent {
    pub timestamp_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub source: u8,
    pub op: u8,
    pub flags: u16,
    pub _pad: u32,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    pub duration_ns: u64,
    pub comm_id_hash: u64,
    pub stream_handle: u64,
    pub count: u64,
    pub rank: u32,
    pub nranks: u32,
    pub datatype: u32,
    pub reduce_op: u32,
    pub return_code: i32,
    pub peer_rank: u32,
    pub op_seq: u64,
}

const _: () = {
    assert!(size_of::<CudaEvent>() == 96);
    assert!(offset_of!(CudaEvent, duration_ns) == 8);
    assert!(offset_of!(CudaEvent, pid) == 16);
    assert!(offset_of!(CudaEvent, source) == 24);
    assert!(offset_of!(CudaEvent, ret) == 28);
    assert!(offset_of!(CudaEvent, cgroup_id) == 32);
    assert!(offset_of!(CudaEvent, args) == 40);
    assert!(offset_of!(CudaEvent, stream) == 72);
    assert!(offset_of!(CudaEvent, comm) == 80);
    assert!(size_of::<NcclEvent>() == 112);
    assert!(offset_of!(NcclEvent, cgroup_id) == 24);
    assert!(offset_of!(NcclEvent, comm) == 32);
    assert!(offset_of!(NcclEvent, duration_ns) == 48);
    assert!(offset_of!(NcclEvent, comm_id_hash) == 56);
    assert!(offset_of!(NcclEvent, stream_handle) == 64);
    assert!(offset_of!(NcclEvent, count) == 72);
    assert!(offset_of!(NcclEvent, rank) == 80);
    assert!(offset_of!(NcclEvent, nranks) == 84);
    assert!(offset_of!(NcclEvent, datatype) == 88);
    assert!(offset_of!(NcclEvent, reduce_op) == 92);
    assert!(offset_of!(NcclEvent, return_code) == 96);
    assert!(offset_of!(NcclEvent, peer_rank) == 100);
    assert!(offset_of!(NcclEvent, op_seq) == 104);
};

/// Reads native-endian fields in order from a byte slice.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        // Callers check the total length first; `get` keeps this panic-free regardless.
        if let Some(s) = self.b.get(self.at..self.at + N) {
            out.copy_from_slice(s);
        }
        self.at += N;
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_ne_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_ne_bytes(self.bytes())
    }
    fn i32(&mut self) -> i32 {
        i32::from_ne_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_ne_bytes(self.bytes())
    }
}

impl CudaEvent {
    pub const SIZE: usize = size_of::<CudaEvent>();

    /// Decode a ring-buffer record; `None` when it is shorter than the struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < Self::SIZE {
            return None;
        }
        let mut f = Fields { b, at: 0 };
        Some(CudaEvent {
            timestamp_ns: f.u64(),
            duration_ns: f.u64(),
            pid: f.u32(),
            tid: f.u32(),
            source: f.u8(),
            op: f.u8(),
            flags: f.u16(),
            ret: f.i32(),
            cgroup_id: f.u64(),
            args: [f.u64(), f.u64(), f.u64(), f.u64()],
            stream: f.u64(),
            comm: f.bytes(),
        })
    }

    /// Grid and block dimensions of a kernel launch.
    pub fn launch_dims(&self) -> ([u32; 3], [u32; 3]) {
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        (
            [lo(self.args[1]), hi(self.args[1]), lo(self.args[2])],
            [hi(self.args[2]), lo(self.args[3]), hi(self.args[3])],
        )
    }

    pub fn comm_str(&self) -> String {
        comm_str(&self.comm)
    }
}

impl NcclEvent {
    pub const SIZE: usize = size_of::<NcclEvent>();

    /// Decode a ring-buffer record; `None` when it is shorter than the struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < Self::SIZE {
            return None;
        }
        let mut f = Fields { b, at: 0 };
        Some(NcclEvent {
            timestamp_ns: f.u64(),
            pid: f.u32(),
            tid: f.u32(),
            source: f.u8(),
            op: f.u8(),
            flags: f.u16(),
            _pad: f.u32(),
            cgroup_id: f.u64(),
            comm: f.bytes(),
            duration_ns: f.u64(),
            comm_id_hash: f.u64(),
            stream_handle: f.u64(),
            count: f.u64(),
            rank: f.u32(),
            nranks: f.u32(),
            datatype: f.u32(),
            reduce_op: f.u32(),
            return_code: f.i32(),
            peer_rank: f.u32(),
            op_seq: f.u64(),
        })
    }
}

/// A NUL-padded task name.
pub fn comm_str(c: &[u8; 16]) -> String {
    let end = c.iter().position(|b| *b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

/// The hash the eBPF program computes for a 128-byte `ncclUniqueId` (splitmix64 fold of
/// its 16 little-endian words, seed 0x9e3779b97f4a7c15), for tests and tools.
pub fn fold_unique_id(id: &[u8; 128]) -> u64 {
    fn splitmix64(mut x: u64) -> u64 {
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        x
    }
    id.chunks_exact(8).fold(0x9e37_79b9_7f4a_7c15u64, |h, w| {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        splitmix64(h ^ u64::from_ne_bytes(a))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], at: usize, v: &[u8]) {
        b[at..at + v.len()].copy_from_slice(v);
    }

    #[test]
    fn cuda_event_decodes_at_the_c_offsets() {
        let mut b = vec![0u8; CudaEvent::SIZE];
        put(&mut b, 0, &7u64.to_ne_bytes());
        put(&mut b, 8, &9u64.to_ne_bytes());
        put(&mut b, 16, &1234u32.to_ne_bytes());
        put(&mut b, 24, &[source::CUDA_RUNTIME, cuda_op::LAUNCH_KERNEL]);
        put(&mut b, 28, &(-2i32).to_ne_bytes());
        put(&mut b, 48, &(2u64 | (3u64 << 32)).to_ne_bytes());
        put(&mut b, 56, &(4u64 | (5u64 << 32)).to_ne_bytes());
        put(&mut b, 64, &(6u64 | (7u64 << 32)).to_ne_bytes());
        put(&mut b, 72, &0xabcu64.to_ne_bytes());
        put(&mut b, 80, b"python3\0");
        let e = CudaEvent::from_bytes(&b).unwrap();
        assert_eq!(
            (e.timestamp_ns, e.duration_ns, e.pid, e.ret, e.stream),
            (7, 9, 1234, -2, 0xabc)
        );
        assert_eq!(
            (e.source, e.op),
            (source::CUDA_RUNTIME, cuda_op::LAUNCH_KERNEL)
        );
        assert_eq!(e.launch_dims(), ([2, 3, 4], [5, 6, 7]));
        assert_eq!(e.comm_str(), "python3");
        assert!(CudaEvent::from_bytes(&b[..95]).is_none());
    }

    #[test]
    fn nccl_event_decodes_at_the_c_offsets() {
        let mut b = vec![0u8; NcclEvent::SIZE];
        put(&mut b, 17, &[3]);
        put(&mut b, 56, &0xfeedu64.to_ne_bytes());
        put(&mut b, 80, &1u32.to_ne_bytes());
        put(&mut b, 84, &4u32.to_ne_bytes());
        put(&mut b, 96, &(-1i32).to_ne_bytes());
        put(&mut b, 100, &2u32.to_ne_bytes());
        put(&mut b, 104, &17u64.to_ne_bytes());
        let e = NcclEvent::from_bytes(&b).unwrap();
        assert_eq!(
            (
                e.op,
                e.comm_id_hash,
                e.rank,
                e.nranks,
                e.return_code,
                e.peer_rank,
                e.op_seq
            ),
            (3, 0xfeed, 1, 4, -1, 2, 17)
        );
        assert!(NcclEvent::from_bytes(&b[..100]).is_none());
    }

    #[test]
    fn unique_id_fold_is_stable() {
        let zero = fold_unique_id(&[0u8; 128]);
        let mut id = [0u8; 128];
        id[127] = 1;
        assert_ne!(zero, fold_unique_id(&id), "every byte matters");
        assert_eq!(zero, fold_unique_id(&[0u8; 128]));
    }
}
