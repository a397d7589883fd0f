/* A stand-in for libcudart exporting the probed runtime API with the real signatures.
 * Synchronizing calls sleep a known time so probe durations can be checked. */
#include <stddef.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
typedef void *cudaStream_t;

#define API __attribute__((visibility("default"), noinline))

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&t, &t) != 0)
		;
}

static volatile unsigned long sink;

API int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
	sink += (unsigned long)func + grid.x + block.x + (unsigned long)args + shmem + (unsigned long)stream;
	return 0;
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

API int cudaStreamSynchronize(cudaStream_t s)
{
	sink += (unsigned long)s;
	sleep_us(2000);
	return 0;
}

API int cudaDeviceSynchronize(void)
{
	sleep_us(3000);
	return 0;
}
