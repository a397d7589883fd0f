/* Overhead workload: launches kernels through the fake libraries of tests/c in a loop,
 * through the runtime (cudaLaunchKernel, which calls the fake driver's cuLaunchKernel, as
 * PyTorch's own kernels do) or straight through the driver (cuLaunchKernel, as cuBLAS's
 * static runtime and Triton do).
 *
 *   loop max <calls> [runtime|driver|memcpy]            tight loop; prints "ns_per_call <x>"
 *   loop rate <per_second> <s> [runtime|driver|memcpy]  paced calls for <s> seconds;
 *                                                       prints "calls <n> seconds <t>"
 *   loop switch <s>                                     two threads handing a byte back and
 *       forth through pipes for <s> seconds (a context switch per hand-over, as on a busy
 *       host); one cudaMemcpyAsync first so the agent watches the process; prints
 *       "handovers <n> seconds <t>"
 *
 * memcpy: cudaMemcpyAsync, a call the agent times (one stored event each), where launches
 * are only counted.
 */
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);

static int driver, memcpy_mode;
static char src[64], dst[64];

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void launch(void)
{
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	if (memcpy_mode)
		cudaMemcpyAsync(dst, src, sizeof src, 1, NULL);
	else if (driver)
		cuLaunchKernel((void *)1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	else
		cudaLaunchKernel((void *)1, g, b, NULL, 0, NULL);
}

static int api(int argc, char **argv, int at)
{
	if (argc <= at || strcmp(argv[at], "runtime") == 0)
		return 0;
	if (strcmp(argv[at], "driver") == 0) {
		driver = 1;
		return 0;
	}
	if (strcmp(argv[at], "memcpy") == 0) {
		memcpy_mode = 1;
		return 0;
	}
	return -1;
}

static int ping[2], pong[2];
static volatile int stop;

static void *ponger(void *arg)
{
	(void)arg;
	char c;
	while (!stop && read(ping[0], &c, 1) == 1)
		if (write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

static int switches(double secs)
{
	cudaMemcpyAsync(dst, src, sizeof src, 1, NULL);
	if (pipe(ping) || pipe(pong))
		return 2;
	pthread_t t;
	if (pthread_create(&t, NULL, ponger, NULL))
		return 2;
	long n = 0;
	char c = 1;
	double t0 = now();
	while (now() - t0 < secs) {
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 2;
		n++;
	}
	stop = 1;
	close(ping[1]);
	pthread_join(t, NULL);
	printf("handovers %ld seconds %.2f\n", n, now() - t0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && argc <= 4 && strcmp(argv[1], "max") == 0 && api(argc, argv, 3) == 0) {
		long n = atol(argv[2]);
		for (long i = 0; i < n / 10; i++) /* warm-up */
			launch();
		double t0 = now();
		for (long i = 0; i < n; i++)
			launch();
		double t1 = now();
		printf("ns_per_call %.1f\n", (t1 - t0) * 1e9 / n);
		return 0;
	}
	if (argc >= 4 && argc <= 5 && strcmp(argv[1], "rate") == 0 && api(argc, argv, 4) == 0) {
		long rate = atol(argv[2]);
		double secs = atof(argv[3]);
		long per_ms = rate / 1000;
		long calls = 0;
		double t0 = now(), next = t0;
		while (now() - t0 < secs) {
			for (long i = 0; i < per_ms; i++)
				launch();
			calls += per_ms;
			next += 0.001;
			double wait = next - now();
			if (wait > 0) {
				struct timespec ts = { 0, (long)(wait * 1e9) };
				nanosleep(&ts, NULL);
			}
		}
		printf("calls %ld seconds %.2f\n", calls, now() - t0);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "switch") == 0)
		return switches(atof(argv[2]));
	fprintf(stderr, "usage: loop max <calls> [runtime|driver|memcpy] | loop rate <per_second> <seconds> "
			"[runtime|driver|memcpy] | loop switch <seconds>\n");
	return 2;
}
