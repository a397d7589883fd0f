// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Probes on the CUDA runtime (libcudart) and driver (libcuda) APIs.
 *
 * Kernel launches (the high-frequency calls) are counted in the kernel: an entry-only
 * uprobe adds one to a per-process, per-CPU counter (launch_counts), which the agent reads
 * and sums on each drain. No record, no return probe, no ring-buffer space. Each launch is
 * counted once whichever layer made it (see "One launch, one count" below).
 *
 * Allocations, frees, copies and synchronizes (which need a duration or a return value)
 * keep a record: the entry probe stashes the entry time and the arguments by (thread,
 * source, op); the return probe computes the duration, reads the return value (and the
 * allocated pointer for mallocs) and submits one struct cuda_event to the ring buffer.
 * Submissions do not wake userspace: the agent drains the ring on a timer, so a busy
 * workload pays no wakeup per call. Everything lost is counted in cuda_drops.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Records of the calls that need one (not launches): 1 MiB holds about 10,900 records,
 * i.e. 109,000 synchronizes, copies and allocations per second at the 100 ms drain. The
 * agent maps it (twice, for wrap-around), so its size is resident memory of the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} cuda_events SEC(".maps");

struct cuda_entry {
	__u64 timestamp_ns;
	__u64 args[4];
	__u64 stream;
	__u64 out_ptr; /* malloc: where the allocated pointer is written */
};

/* Key: tid | source << 32 | op << 40. LRU so a thread that never returns (killed
 * mid-call) cannot fill the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct cuda_entry);
} cuda_entries SEC(".maps");

DEFINE_DROP_COUNTERS(cuda_drops)

static __always_inline __u64 entry_key(__u8 source, __u8 op)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	return (__u64)tid | ((__u64)source << 32) | ((__u64)op << 40);
}

static __always_inline void save(__u8 source, __u8 op, struct cuda_entry *e)
{
	if (!traced(bpf_get_current_pid_tgid() >> 32))
		return;
	__u64 k = entry_key(source, op);
	e->timestamp_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&cuda_entries, &k, e, BPF_ANY);
}

static __always_inline int finish(struct ingero_regs *ctx, __u8 source, __u8 op)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 k = entry_key(source, op);
	struct cuda_entry *e = bpf_map_lookup_elem(&cuda_entries, &k);
	if (!e) {
		/* A process outside the scope stashed nothing: not a loss. */
		if (traced(bpf_get_current_pid_tgid() >> 32))
			COUNT_DROP(cuda_drops, DROP_ENTRY_MISSING);
		return 0;
	}
	struct cuda_event *ev = bpf_ringbuf_reserve(&cuda_events, sizeof(*ev), 0);
	if (!ev) {
		COUNT_DROP(cuda_drops, DROP_RINGBUF_FULL);
		bpf_map_delete_elem(&cuda_entries, &k);
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	ev->timestamp_ns = e->timestamp_ns;
	ev->duration_ns = now - e->timestamp_ns;
	ev->pid = pid_tgid >> 32;
	ev->tid = (__u32)pid_tgid;
	ev->source = source;
	ev->op = op;
	ev->flags = 0;
	ev->ret = (__s32)RET(ctx);
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->args[0] = e->args[0];
	ev->args[1] = e->args[1];
	ev->args[2] = e->args[2];
	ev->args[3] = e->args[3];
	ev->stream = e->stream;
	if (op == CUDA_OP_MALLOC && e->out_ptr) {
		__u64 p = 0;
		if (bpf_probe_read_user(&p, sizeof(p), (void *)e->out_ptr) == 0)
			ev->args[1] = p;
		else
			COUNT_DROP(cuda_drops, DROP_USER_READ);
	}
	bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	bpf_map_delete_elem(&cuda_entries, &k);
	return 0;
}

#define LO32(x) ((__u64)(x) & 0xffffffffULL)

/* ---- runtime API (libcudart) ---- */

/* cudaMalloc(void **devPtr, size_t size) */
SEC("uprobe")
int cudart_malloc(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG2(ctx);
	e.out_ptr = ARG1(ctx);
	save(SRC_CUDA_RUNTIME, CUDA_OP_MALLOC, &e);
	return 0;
}

SEC("uretprobe")
int cudart_malloc_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_MALLOC);
}

/* cudaFree(void *devPtr) */
SEC("uprobe")
int cudart_free(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG1(ctx);
	save(SRC_CUDA_RUNTIME, CUDA_OP_FREE, &e);
	return 0;
}

SEC("uretprobe")
int cudart_free_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_FREE);
}

/* cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) */
SEC("uprobe")
int cudart_memcpy(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG3(ctx);
	e.args[1] = LO32(ARG4(ctx));
	save(SRC_CUDA_RUNTIME, CUDA_OP_MEMCPY, &e);
	return 0;
}

SEC("uretprobe")
int cudart_memcpy_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_MEMCPY);
}

/* cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
 *                 cudaStream_t stream) */
SEC("uprobe")
int cudart_memcpy_async(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG3(ctx);
	e.args[1] = LO32(ARG4(ctx));
	e.stream = ARG5(ctx);
	save(SRC_CUDA_RUNTIME, CUDA_OP_MEMCPY_ASYNC, &e);
	return 0;
}

SEC("uretprobe")
int cudart_memcpy_async_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_MEMCPY_ASYNC);
}

/* cudaStreamSynchronize(cudaStream_t stream) */
SEC("uprobe")
int cudart_stream_sync(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.stream = ARG1(ctx);
	save(SRC_CUDA_RUNTIME, CUDA_OP_STREAM_SYNC, &e);
	return 0;
}

SEC("uretprobe")
int cudart_stream_sync_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_STREAM_SYNC);
}

/* cudaDeviceSynchronize(void) */
SEC("uprobe")
int cudart_device_sync(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	save(SRC_CUDA_RUNTIME, CUDA_OP_DEVICE_SYNC, &e);
	return 0;
}

SEC("uretprobe")
int cudart_device_sync_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_DEVICE_SYNC);
}

/* ---- driver API (libcuda) ---- */

/* cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) */
SEC("uprobe")
int cu_mem_alloc(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG2(ctx);
	e.out_ptr = ARG1(ctx);
	save(SRC_CUDA_DRIVER, CUDA_OP_MALLOC, &e);
	return 0;
}

SEC("uretprobe")
int cu_mem_alloc_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_MALLOC);
}

/* cuMemFree_v2(CUdeviceptr dptr) */
SEC("uprobe")
int cu_mem_free(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG1(ctx);
	save(SRC_CUDA_DRIVER, CUDA_OP_FREE, &e);
	return 0;
}

SEC("uretprobe")
int cu_mem_free_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_FREE);
}

/* cuMemcpy{HtoD,DtoH,DtoD}_v2(dst, src, size_t bytes) and cuMemcpy(dst, src, bytes):
 * the direction comes from the function, so each has its own entry program. */
#define CU_MEMCPY(name, dir)                                      \
	SEC("uprobe")                                             \
	int name(struct ingero_regs *ctx)                         \
	{                                                         \
		struct cuda_entry e = {};                         \
		e.args[0] = ARG3(ctx);                            \
		e.args[1] = (dir);                                \
		save(SRC_CUDA_DRIVER, CUDA_OP_MEMCPY, &e);        \
		return 0;                                         \
	}
CU_MEMCPY(cu_memcpy_htod, DIR_H2D)
CU_MEMCPY(cu_memcpy_dtoh, DIR_D2H)
CU_MEMCPY(cu_memcpy_dtod, DIR_D2D)
CU_MEMCPY(cu_memcpy, DIR_UNKNOWN)

SEC("uretprobe")
int cu_memcpy_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_MEMCPY);
}

/* cuMemcpy{HtoD,DtoH}Async_v2(dst, src, size_t bytes, CUstream stream) */
#define CU_MEMCPY_ASYNC(name, dir)                                \
	SEC("uprobe")                                             \
	int name(struct ingero_regs *ctx)                         \
	{                                                         \
		struct cuda_entry e = {};                         \
		e.args[0] = ARG3(ctx);                            \
		e.args[1] = (dir);                                \
		e.stream = ARG4(ctx);                             \
		save(SRC_CUDA_DRIVER, CUDA_OP_MEMCPY_ASYNC, &e);  \
		return 0;                                         \
	}
CU_MEMCPY_ASYNC(cu_memcpy_htod_async, DIR_H2D)
CU_MEMCPY_ASYNC(cu_memcpy_dtoh_async, DIR_D2H)

SEC("uretprobe")
int cu_memcpy_async_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_MEMCPY_ASYNC);
}

/* cuStreamSynchronize(CUstream stream) */
SEC("uprobe")
int cu_stream_sync(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.stream = ARG1(ctx);
	save(SRC_CUDA_DRIVER, CUDA_OP_STREAM_SYNC, &e);
	return 0;
}

SEC("uretprobe")
int cu_stream_sync_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_STREAM_SYNC);
}

/* cuCtxSynchronize(void) */
SEC("uprobe")
int cu_ctx_sync(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	save(SRC_CUDA_DRIVER, CUDA_OP_DEVICE_SYNC, &e);
	return 0;
}

SEC("uretprobe")
int cu_ctx_sync_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_DEVICE_SYNC);
}

/* ---- kernel launches: counted in the kernel ---- */

/*
 * One launch, one count. The runtime launches through the driver (cudaLaunchKernel ->
 * cuLaunchKernel), while libraries that carry their own static runtime (cuBLAS, cuBLASLt,
 * cuDNN) and Triton call the driver directly. A runtime launch records its frame in
 * rt_frames (the thread's stack pointer at the runtime function's entry and, on x86, the
 * return address stored there). A later launch on the same thread is "under" that runtime
 * launch when the frame is still live: its stack pointer is below the frame's and (x86)
 * the frame's return address is still in its slot (once the runtime function returned, the
 * caller's next call overwrites that slot; a driver launch exactly at the frame is a tail
 * call from the runtime). Such a launch is the same launch seen one layer
 * down: it goes to LAUNCH_NESTED, not to the work counters. A driver launch consumes the
 * frame (one runtime launch reaches the driver once); a runtime launch that never reaches
 * the driver (an early error) leaves a frame that goes stale when it returns, so the next
 * direct driver launch is still counted. Cost: one hash lookup (and, on x86, one 8-byte
 * user read) per launch, no return probe.
 */
struct rt_frame {
	__u64 sp;
	__u64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct rt_frame);
} rt_frames SEC(".maps");

/* Cumulative per process; LRU so exited processes make room. 1024 entries x 48 bytes per
 * CPU (kernel memory, read with one lookup per process per drain). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tgid */
	__type(value, struct launch_counts);
} launch_counts SEC(".maps");

static __always_inline void count_launch(__u32 pid, __u32 idx)
{
	struct launch_counts *c = bpf_map_lookup_elem(&launch_counts, &pid);
	if (!c) {
		struct launch_counts z = {};
		bpf_map_update_elem(&launch_counts, &pid, &z, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&launch_counts, &pid);
		if (!c) {
			COUNT_DROP(cuda_drops, DROP_COUNTS_FULL);
			return;
		}
	}
	if (!c->cgroup_id)
		c->cgroup_id = bpf_get_current_cgroup_id();
	if (idx < LAUNCH_COUNTERS)
		c->n[idx] += 1;
}

/* The return address at function entry. */
static __always_inline __u64 return_address(struct ingero_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 r = 0;
	bpf_probe_read_user(&r, sizeof(r), (void *)SP(ctx));
	return r;
#else
	return ctx->regs[30];
#endif
}

/* Whether the runtime launch recorded in f is still on the stack at this probe. A driver
 * entry may sit exactly at the frame (tail_ok: the runtime tail-called the driver, which
 * then runs with the runtime's return address); a runtime entry there is the caller's next
 * launch from the same call site, a new launch. */
static __always_inline int frame_live(struct ingero_regs *ctx, struct rt_frame *f, int tail_ok)
{
	__u64 fsp = f->sp;
	__u64 sp = SP(ctx);
	if (!fsp || sp > fsp || (sp == fsp && !tail_ok))
		return 0;
#if defined(__TARGET_ARCH_x86)
	__u64 r = 0;
	if (bpf_probe_read_user(&r, sizeof(r), (void *)fsp) != 0)
		return 0;
	return r == f->ret;
#else
	/* arm64 keeps the return address in x30, not on the stack: the stack pointer test
	 * alone (a stale frame below a later, deeper driver call would absorb that call). */
	return 1;
#endif
}

static __always_inline int runtime_launch(struct ingero_regs *ctx, __u32 idx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u32 pid = pid_tgid >> 32;
	if (!traced(pid))
		return 0;
	struct rt_frame *f = bpf_map_lookup_elem(&rt_frames, &tid);
	if (f && frame_live(ctx, f, 0)) {
		/* A runtime entry point calling another (e.g. a _ptsz variant). */
		count_launch(pid, LAUNCH_NESTED);
		return 0;
	}
	struct rt_frame nf = { .sp = SP(ctx), .ret = return_address(ctx) };
	if (f)
		*f = nf;
	else
		bpf_map_update_elem(&rt_frames, &tid, &nf, BPF_ANY);
	count_launch(pid, idx);
	return 0;
}

static __always_inline int driver_launch(struct ingero_regs *ctx, __u32 idx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u32 pid = pid_tgid >> 32;
	if (!traced(pid))
		return 0;
	struct rt_frame *f = bpf_map_lookup_elem(&rt_frames, &tid);
	if (f) {
		int nested = frame_live(ctx, f, 1);
		f->sp = 0; /* consumed, or stale */
		if (nested) {
			count_launch(pid, LAUNCH_NESTED);
			return 0;
		}
	}
	count_launch(pid, idx);
	return 0;
}

/* cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel (and _ptsz). */
SEC("uprobe")
int cudart_launch(struct ingero_regs *ctx)
{
	return runtime_launch(ctx, LAUNCH_RUNTIME);
}

/* cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) (and _ptsz). */
SEC("uprobe")
int cudart_graph_launch(struct ingero_regs *ctx)
{
	return runtime_launch(ctx, LAUNCH_RUNTIME_GRAPH);
}

/* cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel (and _ptsz). */
SEC("uprobe")
int cu_launch(struct ingero_regs *ctx)
{
	return driver_launch(ctx, LAUNCH_DRIVER);
}

/* cuGraphLaunch(CUgraphExec, CUstream) (and _ptsz). */
SEC("uprobe")
int cu_graph_launch(struct ingero_regs *ctx)
{
	return driver_launch(ctx, LAUNCH_DRIVER_GRAPH);
}
