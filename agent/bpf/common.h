/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Shared between the eBPF programs and the agent (src/events.rs mirrors every struct here,
 * with compile-time size checks on both sides). Little-endian, naturally aligned, no
 * implicit padding: every struct is a multiple of 8 bytes with explicit pad fields.
 */
#ifndef INGERO_COMMON_H
#define INGERO_COMMON_H

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#define INGERO_COMM_LEN 16

/* Event sources. */
#define SRC_CUDA_RUNTIME 1
#define SRC_CUDA_DRIVER 2
#define SRC_NCCL 9

/* CUDA ops (the same codes for runtime and driver, told apart by the source). */
#define CUDA_OP_LAUNCH_KERNEL 1
#define CUDA_OP_MALLOC 2
#define CUDA_OP_FREE 3
#define CUDA_OP_MEMCPY 4
#define CUDA_OP_MEMCPY_ASYNC 5
#define CUDA_OP_STREAM_SYNC 6
#define CUDA_OP_DEVICE_SYNC 7

/* NCCL ops (spec section 5.2). */
#define NCCL_OP_COMM_INIT_RANK 1
#define NCCL_OP_COMM_DESTROY 2
#define NCCL_OP_ALL_REDUCE 3
#define NCCL_OP_ALL_GATHER 4
#define NCCL_OP_REDUCE_SCATTER 5
#define NCCL_OP_BCAST 6
#define NCCL_OP_SEND 7
#define NCCL_OP_RECV 8
#define NCCL_OP_COMM_INIT_ALL 9

/* Memcpy directions (cudaMemcpyKind values; 4 = unknown/default). */
#define DIR_H2H 0
#define DIR_H2D 1
#define DIR_D2H 2
#define DIR_D2D 3
#define DIR_UNKNOWN 4

/* Indexes of the per-CPU drop counter array. */
#define DROP_RINGBUF_FULL 0
#define DROP_ENTRY_MISSING 1
#define DROP_USER_READ 2
#define DROP_COUNTS_FULL 3 /* launch_counts had no room for a new process */
#define DROP_COUNTERS 4

/* Launch counters (struct launch_counts.n), one set per process. Every launch lands in
 * exactly one of them: a launch at the runtime (the application's or PyTorch's libcudart),
 * one at the driver that no runtime launch of the same thread is under (a static runtime
 * such as cuBLAS's, Triton, a driver-API program), or a driver launch made by a runtime
 * launch still on the thread's stack (the same launch: counted under NESTED, not as work). */
#define LAUNCH_RUNTIME 0        /* cudaLaunchKernel, cudaLaunchKernelExC (and _ptsz) */
#define LAUNCH_RUNTIME_GRAPH 1  /* cudaGraphLaunch (and _ptsz) */
#define LAUNCH_DRIVER 2         /* cuLaunchKernel, cuLaunchKernelEx (and _ptsz) */
#define LAUNCH_DRIVER_GRAPH 3   /* cuGraphLaunch (and _ptsz) */
#define LAUNCH_NESTED 4         /* a runtime launch (or a driver launch) under a runtime launch */
#define LAUNCH_COUNTERS 5

/* One CUDA call, 96 bytes. */
struct cuda_event {
	__u64 timestamp_ns; /* uprobe entry, bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u64 duration_ns;  /* uretprobe - uprobe */
	__u32 pid;          /* tgid */
	__u32 tid;
	__u8 source;        /* SRC_CUDA_RUNTIME or SRC_CUDA_DRIVER */
	__u8 op;            /* CUDA_OP_* */
	__u16 flags;
	__s32 ret;          /* cudaError_t / CUresult */
	__u64 cgroup_id;
	/* launch: func, grid.x|grid.y<<32, grid.z|block.x<<32, block.y|block.z<<32
	 * malloc: size, returned pointer; free: pointer
	 * memcpy: bytes, direction (DIR_*) */
	__u64 args[4];
	__u64 stream;
	char comm[INGERO_COMM_LEN];
};

/* One NCCL call, 112 bytes: the spec's 104-byte record plus op_seq. */
struct nccl_event {
	__u64 timestamp_ns;
	__u32 pid;
	__u32 tid;
	__u8 source;
	__u8 op;
	__u16 flags;
	__u32 _pad;
	__u64 cgroup_id;
	char comm[INGERO_COMM_LEN];
	__u64 duration_ns;
	__u64 comm_id_hash;
	__u64 stream_handle;
	__u64 count;        /* element count */
	__u32 rank;
	__u32 nranks;
	__u32 datatype;
	__u32 reduce_op;
	__s32 return_code;
	__u32 peer_rank;
	__u64 op_seq;       /* 1-based per communicator (per peer for send/recv); 0 unknown */
};

/* Per-process launch counters, 48 bytes, one copy per CPU (summed by the agent). */
struct launch_counts {
	__u64 n[LAUNCH_COUNTERS];
	__u64 cgroup_id; /* of the process, set on each CPU's first launch */
};

_Static_assert(sizeof(struct launch_counts) == 48, "launch_counts must match src/events.rs");
_Static_assert(sizeof(struct cuda_event) == 96, "cuda_event must match src/events.rs");
_Static_assert(__builtin_offsetof(struct cuda_event, args) == 40, "cuda_event.args offset");
_Static_assert(__builtin_offsetof(struct cuda_event, comm) == 80, "cuda_event.comm offset");
_Static_assert(sizeof(struct nccl_event) == 112, "nccl_event must match src/events.rs");
_Static_assert(__builtin_offsetof(struct nccl_event, duration_ns) == 48, "nccl_event.duration_ns offset");
_Static_assert(__builtin_offsetof(struct nccl_event, op_seq) == 104, "nccl_event.op_seq offset");

/* Register access. The uprobe context is the kernel's pt_regs (x86-64) or user_pt_regs
 * (arm64); declared here so no kernel headers are needed. */
#if defined(__TARGET_ARCH_x86)
struct ingero_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#define ARG1(r) ((r)->di)
#define ARG2(r) ((r)->si)
#define ARG3(r) ((r)->dx)
#define ARG4(r) ((r)->cx)
#define ARG5(r) ((r)->r8)
#define ARG6(r) ((r)->r9)
#define RET(r) ((r)->ax)
#define SP(r) ((r)->sp)
/* Stack argument n (1-based) at function entry: the return address is at sp. */
#define STACK_ARG_OFFSET(n) (8 * (n))
#elif defined(__TARGET_ARCH_arm64)
struct ingero_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#define ARG1(r) ((r)->regs[0])
#define ARG2(r) ((r)->regs[1])
#define ARG3(r) ((r)->regs[2])
#define ARG4(r) ((r)->regs[3])
#define ARG5(r) ((r)->regs[4])
#define ARG6(r) ((r)->regs[5])
#define ARG7(r) ((r)->regs[6])
#define ARG8(r) ((r)->regs[7])
#define RET(r) ((r)->regs[0])
#define SP(r) ((r)->sp)
/* No return address on the stack: stack argument n (1-based) is at sp + 8*(n-1). */
#define STACK_ARG_OFFSET(n) (8 * ((n) - 1))
#else
#error "unsupported target architecture (x86 and arm64 only)"
#endif

static __always_inline __u64 stack_arg(struct ingero_regs *r, int n)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(SP(r) + STACK_ARG_OFFSET(n)));
	return v;
}

/* Scoping (--pid, --cgroup), set by the agent when it loads the object: bit 0 keeps the
 * processes in filter_pids, bit 1 those whose cgroup is in filter_cgroups (the agent puts a
 * watched cgroup and every cgroup below it there); 0 keeps every process. Checked first in
 * every entry program, so other processes' calls cost one lookup and no map or ring space. */
#define FILTER_PIDS 1
#define FILTER_CGROUPS 2
volatile const __u32 filter_mode = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} filter_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* cgroup v2 id (the directory's inode number) */
	__type(value, __u8);
} filter_cgroups SEC(".maps");

static __always_inline int traced(__u32 tgid)
{
	__u32 mode = filter_mode;
	if (!mode)
		return 1;
	if ((mode & FILTER_PIDS) && bpf_map_lookup_elem(&filter_pids, &tgid))
		return 1;
	if (mode & FILTER_CGROUPS) {
		__u64 cg = bpf_get_current_cgroup_id();
		if (bpf_map_lookup_elem(&filter_cgroups, &cg))
			return 1;
	}
	return 0;
}

/* Per-CPU drop counters, one array per object. */
#define DEFINE_DROP_COUNTERS(name)                      \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);  \
		__uint(max_entries, DROP_COUNTERS);       \
		__type(key, __u32);                       \
		__type(value, __u64);                     \
	} name SEC(".maps");

#define COUNT_DROP(map, idx)                                   \
	do {                                                   \
		__u32 _k = (idx);                              \
		__u64 *_v = bpf_map_lookup_elem(&(map), &_k);  \
		if (_v)                                        \
			*_v += 1;                              \
	} while (0)

#endif
