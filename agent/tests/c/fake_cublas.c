/* A stand-in for a library that carries its own static CUDA runtime (cuBLAS, cuBLASLt,
 * cuDNN): its kernels go straight to the driver's cuLaunchKernel / cuLaunchKernelEx,
 * never through libcudart. Not a library the agent probes; only the driver sees it. */
#include <stddef.h>

typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes; void *hStream; void *attrs; unsigned numAttrs; } CUlaunchConfig;

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int cuLaunchKernelEx(const CUlaunchConfig *, void *, void **, void **);

#define API __attribute__((visibility("default"), noinline))

static volatile unsigned long sink;

/* One "GEMM": `kernels` launches through cuLaunchKernel. */
API int cublasFakeGemm(int kernels)
{
	for (int i = 0; i < kernels; i++)
		sink += (unsigned long)cuLaunchKernel((void *)0xb1a5, 16, 16, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	return 0;
}

/* One "GEMM" of a newer library: `kernels` launches through cuLaunchKernelEx. */
API int cublasFakeGemmEx(int kernels)
{
	CUlaunchConfig c = { 16, 16, 1, 256, 1, 1, 0, NULL, NULL, 0 };
	for (int i = 0; i < kernels; i++)
		sink += (unsigned long)cuLaunchKernelEx(&c, (void *)0xb1a6, NULL, NULL);
	return 0;
}
