/* The test workload: calls the (fake) CUDA and NCCL APIs a known number of times with
 * known arguments. Protocol on stdin/stdout: prints "ready", waits for a line, runs,
 * prints "done", then waits for EOF on stdin before exiting.
 *
 *   workload cuda
 *   workload layers <mix>     kernel launches through the layers (see run_layers)
 *   workload nccl <rank> <nranks> <id-seed>
 *   workload nccl-ddp <steps>  data-parallel steps on one rank (see run_nccl_ddp)
 *   workload launches         each line read makes that many cudaLaunchKernel calls, then
 *                             prints "done"; exits at EOF
 *   workload train <secs> <ctl>
 *                             a training loop for scripts/gpu-e2e.sh --fake (no handshake):
 *                             per step 12 runtime launches and a two-kernel "GEMM" through
 *                             the driver, a stream synchronize (2 ms of "GPU time"); with
 *                             FAKE_NCCL_BARRIER set, an all-reduce with the ranks RANK of
 *                             WORLD_SIZE and a synchronize that waits for it (where fast
 *                             ranks wait for the slowest; FAKE_SYNC_ON: which one, see
 *                             wait_collective). Control files in <ctl>, read every step:
 *                             stall_ms (a host sleep before the step, a data-loader stall)
 *                             and pause (while it exists, no CUDA call at all). Prints one
 *                             JSON line per second: {"t": unix, "steps_per_s": x}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;

int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
int cudaStreamSynchronize(void *);
int cudaDeviceSynchronize(void);
int cudaEventRecord(void *, void *);
int cudaStreamWaitEvent(void *, void *, unsigned);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef struct { dim3 gridDim, blockDim; size_t dynamicSmemBytes; void *stream; void *attrs; unsigned numAttrs; } cudaLaunchConfig_t;
int cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
int cudaGraphLaunch(void *, void *);
int cuGraphLaunch(void *, void *);
int cublasFakeGemm(int);
int cublasFakeGemmEx(int);
int cuMemAlloc_v2(unsigned long long *, size_t);
int cuMemcpyHtoD_v2(unsigned long long, const void *, size_t);
int cuStreamSynchronize(void *);
int ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
int ncclCommInitAll(ncclComm_t *, int, const int *);
int ncclCommDestroy(ncclComm_t);
int ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, void *);
int ncclReduceScatter(const void *, void *, size_t, int, int, ncclComm_t, void *);
int ncclAllGather(const void *, void *, size_t, int, ncclComm_t, void *);
int ncclBcast(void *, size_t, int, int, ncclComm_t, void *);
int ncclSend(const void *, size_t, int, int, ncclComm_t, void *);
int ncclRecv(void *, size_t, int, int, ncclComm_t, void *);

#define STREAM ((void *)0xabc0)
#define NCCL_STREAM ((void *)0x5a)
#define NCCL_DONE ((void *)0xe1)

/* After a collective, how the host waits for it (FAKE_SYNC_ON in `train`):
 *   nccl     a synchronize of the NCCL stream itself;
 *   compute  PyTorch's way: an event recorded on the NCCL stream, the compute stream made to
 *            wait for it on the GPU, then a synchronize of the compute stream (`.item()`);
 *   device   a device synchronize (`torch.cuda.synchronize()`). */
enum sync_on { SYNC_NCCL, SYNC_COMPUTE, SYNC_DEVICE };

static void wait_collective(enum sync_on how)
{
	switch (how) {
	case SYNC_NCCL:
		cudaStreamSynchronize(NCCL_STREAM);
		break;
	case SYNC_COMPUTE:
		cudaEventRecord(NCCL_DONE, NCCL_STREAM);
		cudaStreamWaitEvent(STREAM, NCCL_DONE, 0);
		cudaStreamSynchronize(STREAM);
		break;
	case SYNC_DEVICE:
		cudaDeviceSynchronize();
		break;
	}
}

static void handshake(void)
{
	char line[64];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		exit(3);
}

static void finish(void)
{
	char line[64];
	printf("done\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin))
		;
}

static void run_cuda(void)
{
	static char host[8192];
	void *p[3];
	unsigned long long dp;
	dim3 grid = { 4, 2, 1 }, block = { 128, 1, 1 };
	for (int i = 0; i < 50; i++)
		cudaLaunchKernel((void *)0x1234, grid, block, NULL, 0, STREAM);
	for (int i = 0; i < 3; i++)
		cudaMalloc(&p[i], 1 << 20);
	for (int i = 0; i < 3; i++)
		cudaFree(p[i]);
	for (int i = 0; i < 5; i++)
		cudaMemcpy(host, host, 4096, 1);
	for (int i = 0; i < 4; i++)
		cudaMemcpyAsync(host, host, 8192, 2, STREAM);
	for (int i = 0; i < 6; i++)
		cudaStreamSynchronize(STREAM);
	for (int i = 0; i < 2; i++)
		cudaDeviceSynchronize();
	for (int i = 0; i < 7; i++)
		cuLaunchKernel((void *)0x5678, 8, 1, 1, 64, 2, 1, 0, (void *)0xd0, NULL, NULL);
	for (int i = 0; i < 2; i++)
		cuMemAlloc_v2(&dp, 4096);
	for (int i = 0; i < 3; i++)
		cuMemcpyHtoD_v2(dp, host, 256);
}

/* Launch mixes; the counts the agent must find are in tests/ebpf_e2e.rs (LAYER_MIXES). */
static int run_layers(const char *mix)
{
	dim3 grid = { 4, 2, 1 }, block = { 128, 1, 1 };
	cudaLaunchConfig_t cfg = { grid, block, 0, STREAM, NULL, 0 };
	void *triton = (void *)0x7717;
	if (strcmp(mix, "runtime") == 0) { /* PyTorch's own kernels */
		for (int i = 0; i < 40; i++)
			cudaLaunchKernel((void *)0x1234, grid, block, NULL, 0, STREAM);
	} else if (strcmp(mix, "static") == 0) { /* cuBLAS: static runtime -> driver */
		for (int i = 0; i < 4; i++)
			cublasFakeGemm(5);
	} else if (strcmp(mix, "triton") == 0) { /* driver API from the application */
		for (int i = 0; i < 7; i++)
			cuLaunchKernel(triton, 8, 1, 1, 64, 2, 1, 0, STREAM, NULL, NULL);
	} else if (strcmp(mix, "graph") == 0) {
		for (int i = 0; i < 5; i++)
			cudaGraphLaunch((void *)0x6a, STREAM);
		for (int i = 0; i < 4; i++)
			cuGraphLaunch((void *)0x6b, STREAM);
	} else if (strcmp(mix, "ex") == 0) {
		for (int i = 0; i < 10; i++)
			cudaLaunchKernelExC(&cfg, (void *)0x1235, NULL);
		cublasFakeGemmEx(6);
	} else if (strcmp(mix, "failed") == 0) {
		/* A runtime launch that fails before the driver, then a cuBLAS launch: two. */
		for (int i = 0; i < 3; i++) {
			cudaLaunchKernel(NULL, grid, block, NULL, 0, STREAM);
			cublasFakeGemm(1);
		}
	} else if (strcmp(mix, "mixed") == 0) {
		for (int i = 0; i < 10; i++) {
			cudaLaunchKernel((void *)0x1234, grid, block, NULL, 0, STREAM);
			cublasFakeGemm(2);
			cuLaunchKernel(triton, 8, 1, 1, 64, 2, 1, 0, STREAM, NULL, NULL);
			cudaGraphLaunch((void *)0x6a, STREAM);
			cudaLaunchKernelExC(&cfg, (void *)0x1235, NULL);
		}
	} else {
		return 2;
	}
	return 0;
}

static void run_nccl(int rank, int nranks, int seed)
{
	static char buf[4096];
	ncclUniqueId id;
	ncclComm_t comm, all[2];
	for (int i = 0; i < 128; i++)
		id.internal[i] = (char)(seed * 31 + i * 7);
	ncclCommInitRank(&comm, nranks, id, rank);
	for (int i = 0; i < 5; i++) {
		ncclAllReduce(buf, buf, 1024, 7, 0, comm, NCCL_STREAM);
		cudaStreamSynchronize(NCCL_STREAM);
	}
	for (int i = 0; i < 2; i++)
		ncclAllGather(buf, buf, 256, 7, comm, NCCL_STREAM);
	ncclReduceScatter(buf, buf, 128, 6, 1, comm, NCCL_STREAM);
	ncclBcast(buf, 64, 0, 0, comm, NCCL_STREAM);
	for (int i = 0; i < 2; i++) {
		if (rank == 0)
			ncclSend(buf, 32, 7, 1, comm, NCCL_STREAM);
		else
			ncclRecv(buf, 32, 7, 0, comm, NCCL_STREAM);
	}
	if (rank == 0) {
		ncclCommInitAll(all, 2, NULL);
		ncclAllReduce(buf, buf, 16, 7, 0, all[1], NCCL_STREAM);
	}
	ncclCommDestroy(comm);
}

/* Data-parallel steps on a one-rank communicator: `steps` steps of three all-reduces (the
 * gradient buckets) then the compute stream's synchronize after it waited for them, then
 * `steps` steps of one all-reduce and a device synchronize. */
static void run_nccl_ddp(int steps)
{
	static char buf[4096];
	ncclUniqueId id;
	ncclComm_t comm;
	memset(&id, 0x17, sizeof id);
	ncclCommInitRank(&comm, 1, id, 0);
	for (int s = 0; s < steps; s++) {
		for (int b = 0; b < 3; b++)
			ncclAllReduce(buf, buf, 1024, 7, 0, comm, NCCL_STREAM);
		wait_collective(SYNC_COMPUTE);
	}
	for (int s = 0; s < steps; s++) {
		ncclAllReduce(buf, buf, 1024, 7, 0, comm, NCCL_STREAM);
		wait_collective(SYNC_DEVICE);
	}
	ncclCommDestroy(comm);
}

/* Runtime launches on command, as many times as asked. */
static void run_launches(void)
{
	char line[64];
	dim3 grid = { 4, 2, 1 }, block = { 128, 1, 1 };
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		long n = atol(line);
		for (long i = 0; i < n; i++)
			cudaLaunchKernel((void *)0x1234, grid, block, NULL, 0, STREAM);
		printf("done\n");
		fflush(stdout);
	}
}

static double now_s(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

static void sleep_ms(double ms)
{
	struct timespec t = { (time_t)(ms / 1000), (long)(ms * 1e6) % 1000000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

/* A float from the file `dir/name`, 0 when absent or unreadable. */
static double ctl_value(const char *dir, const char *name)
{
	char path[4096];
	double v = 0;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%lf", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

static int ctl_exists(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static void run_train(double secs, const char *ctl)
{
	static char buf[4096];
	dim3 grid = { 4, 2, 1 }, block = { 128, 1, 1 };
	ncclComm_t comm = NULL;
	int rank = getenv("RANK") ? atoi(getenv("RANK")) : 0;
	int world = getenv("WORLD_SIZE") ? atoi(getenv("WORLD_SIZE")) : 1;
	const char *on = getenv("FAKE_SYNC_ON");
	enum sync_on how = SYNC_NCCL;
	if (on && strcmp(on, "compute") == 0)
		how = SYNC_COMPUTE;
	else if (on && strcmp(on, "device") == 0)
		how = SYNC_DEVICE;
	else if (on && strcmp(on, "nccl") != 0) {
		fprintf(stderr, "FAKE_SYNC_ON: nccl, compute or device, not %s\n", on);
		exit(2);
	}
	if (getenv("FAKE_NCCL_BARRIER")) {
		ncclUniqueId id;
		memset(&id, 0x2a, sizeof id); /* the same communicator on every rank */
		ncclCommInitRank(&comm, world, id, rank);
	}
	double end = now_s() + secs, last = now_s();
	long steps = 0;
	while (now_s() < end) {
		if (ctl_exists(ctl, "pause")) {
			sleep_ms(50);
		} else {
			double stall = ctl_value(ctl, "stall_ms");
			if (stall > 0)
				sleep_ms(stall);
			for (int i = 0; i < 12; i++)
				cudaLaunchKernel((void *)0x1234, grid, block, NULL, 0, STREAM);
			cublasFakeGemm(2);
			if (!comm) {
				cudaStreamSynchronize(STREAM);
			} else if (how == SYNC_NCCL) {
				cudaStreamSynchronize(STREAM);
				ncclAllReduce(buf, buf, 1024, 7, 0, comm, NCCL_STREAM);
				wait_collective(how);
			} else {
				/* The gradients are reduced while the host runs on; it first blocks at
				 * the synchronize that also waits for them. */
				ncclAllReduce(buf, buf, 1024, 7, 0, comm, NCCL_STREAM);
				wait_collective(how);
			}
			steps++;
		}
		double now = now_s();
		if (now - last >= 1.0) {
			printf("{\"t\": %.3f, \"rank\": %d, \"steps_per_s\": %.2f}\n", now, rank, steps / (now - last));
			fflush(stdout);
			last = now;
			steps = 0;
		}
	}
	if (comm)
		ncclCommDestroy(comm);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "launches") == 0) {
		run_launches();
		return 0;
	}
	if (strcmp(argv[1], "train") == 0 && argc == 4) {
		run_train(atof(argv[2]), argv[3]);
		return 0;
	}
	handshake();
	if (strcmp(argv[1], "cuda") == 0)
		run_cuda();
	else if (strcmp(argv[1], "layers") == 0 && argc == 3) {
		if (run_layers(argv[2]) != 0)
			return 2;
	} else if (strcmp(argv[1], "nccl") == 0 && argc == 5)
		run_nccl(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	else if (strcmp(argv[1], "nccl-ddp") == 0 && argc == 3)
		run_nccl_ddp(atoi(argv[2]));
	else
		return 2;
	finish();
	return 0;
}
