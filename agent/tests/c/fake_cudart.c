/* A stand-in for libcudart exporting the probed runtime API with the real signatures.
 * Synchronizing calls sleep a known time so probe durations can be checked.
 *
 * Layered like the real runtime: each launch goes through the fake driver (libcuda.so.1,
 * linked in), cudaLaunchKernel with work after the driver call, cudaLaunchKernelExC and
 * cudaGraphLaunch as tail calls (the driver then runs in the runtime's frame, with the
 * runtime's return address). A launch of a null function fails before the driver
 * (cudaErrorInvalidDeviceFunction), as the real runtime's argument checks do.
 *
 * FAKE_GPU_CTL=<dir>: `sync_us` in it (read at each cudaStreamSynchronize) replaces the
 * stream synchronize's 2 ms of "GPU time": a test slows the fake GPU down with it (as a
 * thermally throttled GPU runs slower).
 *
 * Built with -DPRIVATE_DRIVER_ENTRY, cudaLaunchKernel reaches the "driver" through a private
 * function instead of the exported cuLaunchKernel: a runtime whose launches the driver
 * probes never see. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
typedef void *cudaStream_t;
typedef void *cudaGraphExec_t;
typedef struct { dim3 gridDim, blockDim; size_t dynamicSmemBytes; cudaStream_t stream; void *attrs; unsigned numAttrs; } cudaLaunchConfig_t;
typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes; void *hStream; void *attrs; unsigned numAttrs; } CUlaunchConfig;

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int cuLaunchKernelEx(const CUlaunchConfig *, void *, void **, void **);
int cuGraphLaunch(void *, void *);

#define TAIL __attribute__((optimize("optimize-sibling-calls")))

#define API __attribute__((visibility("default"), noinline))

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&t, &t) != 0)
		;
}

static volatile unsigned long sink;

#ifdef PRIVATE_DRIVER_ENTRY
static __attribute__((noinline)) int private_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
						     unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
						     void **extra)
{
	sink += (unsigned long)f + gx + gy + gz + bx + by + bz + shmem + (unsigned long)stream + (unsigned long)params +
		(unsigned long)extra;
	return 0;
}
#define DRIVER_LAUNCH private_launch
#else
#define DRIVER_LAUNCH cuLaunchKernel
#endif

API int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
	if (!func)
		return 98;
	int rc = DRIVER_LAUNCH((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, stream,
				args, NULL);
	sink += (unsigned long)rc;
	return rc;
}

static CUlaunchConfig driver_config(const cudaLaunchConfig_t *c)
{
	CUlaunchConfig d = { c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y, c->blockDim.z,
			     (unsigned)c->dynamicSmemBytes, c->stream, c->attrs, c->numAttrs };
	return d;
}

static CUlaunchConfig last_config;

API TAIL int cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	last_config = driver_config(config);
	return cuLaunchKernelEx(&last_config, (void *)func, args, NULL);
}

API TAIL int cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t stream)
{
	return cuGraphLaunch(g, stream);
}

API int cudaMalloc(void **p, size_t size)
{
	*p = (void *)(0x7f0000000000ULL + size);
	return 0;
}

API int cudaFree(void *p)
{
	sink += (unsigned long)p;
	return 0;
}

API int cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
	sink += (unsigned long)dst + (unsigned long)src + n + kind;
	sleep_us(1000);
	return 0;
}

API int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
	sink += (unsigned long)dst + (unsigned long)src + n + kind + (unsigned long)s;
	return 0;
}

/* Defined by the fake libnccl when it is loaded: wait for a pending cross-process
 * all-reduce on the stream, or on any stream (FAKE_NCCL_BARRIER). */
void fake_nccl_stream_wait(cudaStream_t) __attribute__((weak));
void fake_nccl_wait_all(void) __attribute__((weak));

/* GPU-side dependencies, as PyTorch makes them after a collective: an event recorded on
 * the NCCL stream, and the compute stream waiting for it (cudaStreamWaitEvent), so that a
 * later synchronize of the compute stream also waits for the collective. No host call
 * blocks here; the last dependency of each stream is kept. */
typedef void *cudaEvent_t;
#define MAX_DEPS 8
static struct {
	cudaEvent_t event;
	cudaStream_t recorded_on;
} events[MAX_DEPS];
static struct {
	cudaStream_t stream, waits_for;
} deps[MAX_DEPS];

API int cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	int free_slot = -1;
	for (int i = 0; i < MAX_DEPS; i++) {
		if (events[i].event == ev) {
			events[i].recorded_on = s;
			return 0;
		}
		if (!events[i].event && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
		return 2; /* cudaErrorMemoryAllocation */
	events[free_slot].event = ev;
	events[free_slot].recorded_on = s;
	return 0;
}

API int cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
	cudaStream_t on = NULL;
	int free_slot = -1;
	sink += flags;
	for (int i = 0; i < MAX_DEPS; i++)
		if (events[i].event == ev)
			on = events[i].recorded_on;
	if (!on)
		return 400; /* cudaErrorInvalidResourceHandle */
	for (int i = 0; i < MAX_DEPS; i++) {
		if (deps[i].stream == s) {
			deps[i].waits_for = on;
			return 0;
		}
		if (!deps[i].stream && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
		return 2;
	deps[free_slot].stream = s;
	deps[free_slot].waits_for = on;
	return 0;
}

/* The stream synchronize's time: `$FAKE_GPU_CTL/sync_us`, else 2 ms. */
static long sync_time_us(void)
{
	const char *dir = getenv("FAKE_GPU_CTL");
	long us = 2000;
	if (!dir)
		return us;
	char path[4096];
	snprintf(path, sizeof path, "%s/sync_us", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return us;
	if (fscanf(f, "%ld", &us) != 1 || us < 0)
		us = 2000;
	fclose(f);
	return us;
}

API int cudaStreamSynchronize(cudaStream_t s)
{
	sink += (unsigned long)s;
	if (fake_nccl_stream_wait) {
		fake_nccl_stream_wait(s);
		for (int i = 0; i < MAX_DEPS; i++)
			if (deps[i].stream == s)
				fake_nccl_stream_wait(deps[i].waits_for);
	}
	sleep_us(sync_time_us());
	return 0;
}

API int cudaDeviceSynchronize(void)
{
	if (fake_nccl_wait_all)
		fake_nccl_wait_all();
	sleep_us(3000);
	return 0;
}
