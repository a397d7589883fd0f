// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Uprobes and uretprobes on the CUDA runtime (libcudart) and driver (libcuda) APIs:
 * kernel launches, allocations, frees, copies, stream and device synchronizes.
 *
 * The entry probe stashes the entry time and the arguments by (thread, source, op); the
 * return probe computes the duration, reads the return value (and the allocated pointer
 * for mallocs) and submits one struct cuda_event to the ring buffer. Submissions do not
 * wake userspace: the agent drains the ring on a timer, so a busy workload pays no wakeup
 * per call. Everything lost is counted in cuda_drops.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
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

/* cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
 *                  cudaStream_t stream). A dim3 (12 bytes) travels in two registers:
 * x|y<<32 then z. */
SEC("uprobe")
int cudart_launch_kernel(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG1(ctx);
	e.args[1] = ARG2(ctx);
	e.args[2] = LO32(ARG3(ctx)) | (LO32(ARG4(ctx)) << 32);
	e.args[3] = (ARG4(ctx) >> 32) | (LO32(ARG5(ctx)) << 32);
#if defined(__TARGET_ARCH_x86)
	e.stream = stack_arg(ctx, 2);
#else
	e.stream = ARG8(ctx);
#endif
	save(SRC_CUDA_RUNTIME, CUDA_OP_LAUNCH_KERNEL, &e);
	return 0;
}

SEC("uretprobe")
int cudart_launch_kernel_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_RUNTIME, CUDA_OP_LAUNCH_KERNEL);
}

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

/* cuLaunchKernel(CUfunction f, unsigned gx, gy, gz, bx, by, bz, unsigned shmem,
 *                CUstream stream, void **params, void **extra) */
SEC("uprobe")
int cu_launch_kernel(struct ingero_regs *ctx)
{
	struct cuda_entry e = {};
	e.args[0] = ARG1(ctx);
	e.args[1] = LO32(ARG2(ctx)) | (LO32(ARG3(ctx)) << 32);
#if defined(__TARGET_ARCH_x86)
	__u64 bz = stack_arg(ctx, 1);
	e.stream = stack_arg(ctx, 3);
#else
	__u64 bz = ARG7(ctx);
	e.stream = stack_arg(ctx, 1);
#endif
	e.args[2] = LO32(ARG4(ctx)) | (LO32(ARG5(ctx)) << 32);
	e.args[3] = LO32(ARG6(ctx)) | (LO32(bz) << 32);
	save(SRC_CUDA_DRIVER, CUDA_OP_LAUNCH_KERNEL, &e);
	return 0;
}

SEC("uretprobe")
int cu_launch_kernel_ret(struct ingero_regs *ctx)
{
	return finish(ctx, SRC_CUDA_DRIVER, CUDA_OP_LAUNCH_KERNEL);
}

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
