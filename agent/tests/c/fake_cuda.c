/* A stand-in for libcuda exporting the probed driver API with the real signatures. */
#include <stddef.h>
#include <time.h>

typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef void *CUgraphExec;
typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes; CUstream hStream; void *attrs; unsigned numAttrs; } CUlaunchConfig;

#define API __attribute__((visibility("default"), noinline))

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&t, &t) != 0)
		;
}

static volatile unsigned long sink;

API int cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       unsigned shmem, CUstream stream, void **params, void **extra)
{
	sink += (unsigned long)f + gx + gy + gz + bx + by + bz + shmem + (unsigned long)stream + (unsigned long)params +
		(unsigned long)extra;
	return 0;
}

API int cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	sink += (unsigned long)f + config->gridDimX + (unsigned long)params + (unsigned long)extra;
	return 0;
}

API int cuGraphLaunch(CUgraphExec g, CUstream stream)
{
	sink += (unsigned long)g + (unsigned long)stream;
	return 0;
}

API int cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
	*p = 0x600000000000ULL + bytes;
	return 0;
}

API int cuMemFree_v2(CUdeviceptr p)
{
	sink += p;
	return 0;
}

API int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	sink += dst + (unsigned long)src + n;
	sleep_us(500);
	return 0;
}

API int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	sink += (unsigned long)dst + src + n;
	return 0;
}

API int cuStreamSynchronize(CUstream s)
{
	sink += (unsigned long)s;
	sleep_us(1000);
	return 0;
}

API int cuCtxSynchronize(void)
{
	return 0;
}
