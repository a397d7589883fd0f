/* The workload of the explain end-to-end test (tests/why_e2e.rs), on the fake CUDA
 * libraries. Pins itself to one CPU at nice -20 so the rest of the machine barely touches
 * that CPU, then:
 *
 *   why_workload train <cpu> <secs> <spin_us> [<file>]
 *       a training loop: per step <spin_us> of host CPU work (the Python side of a step),
 *       four kernel launches and a stream synchronize (the fake sleeps 2 ms of "GPU time");
 *       with <file>, once <file>.go exists every step also writes 256 KiB blocks to <file>
 *       with O_DIRECT | O_DSYNC (a synchronous checkpoint or log write in the loop) for
 *       about as long as the rest of the step took, so the step rate about halves.
 *   why_workload hog <cpu> <secs>
 *       a CPU hog: spins for <secs>.
 *
 * Prints "started" once pinned, and "steps <n>" at the end.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaStreamSynchronize(void *);

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Written per step once writing: synchronous writes of WRITE_BYTES (each costs a device
 * round trip, like a log flushed line by line), at least MIN_WRITES and then as many as
 * take as long as the rest of the step, at most MAX_WRITES: a fixed count slowed the loop
 * by a share that depended on the disk (a fast one hid it). */
#define WRITE_BYTES (256 << 10)
#define MIN_WRITES 4
#define MAX_WRITES 256

static volatile unsigned long sink;

static void spin_cpu(double secs)
{
	/* CPU time, not wall time: the work takes longer when the CPU is shared. */
	struct timespec a, b;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (;;) {
		for (int i = 0; i < 2000; i++)
			sink += i;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
		if ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 >= secs)
			return;
	}
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		perror("sched_setaffinity");
		exit(2);
	}
	if (setpriority(PRIO_PROCESS, 0, -20) != 0) {
		perror("setpriority");
		exit(2);
	}
}

static void kernel(void) {}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "hog") == 0) {
		pin(atoi(argv[2]));
		printf("started\n");
		fflush(stdout);
		double end = now_s() + atof(argv[3]);
		while (now_s() < end)
			for (int i = 0; i < 100000; i++)
				sink += i;
		return 0;
	}
	if (argc < 5 || strcmp(argv[1], "train") != 0) {
		fprintf(stderr, "usage: why_workload train <cpu> <secs> <spin_us> [<file>] | hog <cpu> <secs>\n");
		return 2;
	}
	pin(atoi(argv[2]));
	double secs = atof(argv[3]);
	double spin = atof(argv[4]) / 1e6;
	int fd = -1;
	void *buf = NULL;
	char go[4096] = "";
	int writing = 0;
	if (argc >= 6) {
		snprintf(go, sizeof(go), "%s.go", argv[5]);
		fd = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_DSYNC, 0600);
		if (fd < 0 || posix_memalign(&buf, 4096, WRITE_BYTES) != 0) {
			perror("open/alloc");
			return 2;
		}
		memset(buf, 0x5a, WRITE_BYTES);
	}
	printf("started\n");
	fflush(stdout);
	double t0 = now_s();
	long steps = 0;
	off_t off = 0;
	while (now_s() - t0 < secs) {
		double step0 = now_s();
		spin_cpu(spin);
		dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
		for (int i = 0; i < 4; i++)
			cudaLaunchKernel((const void *)kernel, g, b, NULL, 0, NULL);
		cudaStreamSynchronize(NULL);
		if (fd >= 0 && !writing)
			writing = access(go, F_OK) == 0;
		if (writing) {
			double w0 = now_s(), busy = w0 - step0;
			for (int i = 0; i < MAX_WRITES && (i < MIN_WRITES || now_s() - w0 < busy); i++) {
				if (pwrite(fd, buf, WRITE_BYTES, off) != WRITE_BYTES) {
					perror("pwrite");
					return 2;
				}
				off = (off + WRITE_BYTES) % (64 << 20);
			}
		}
		steps++;
	}
	printf("steps %ld\n", steps);
	return 0;
}
