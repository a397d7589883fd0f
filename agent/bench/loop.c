/* Overhead workload: calls cudaLaunchKernel (the fake libcudart of tests/c) in a loop.
 *
 *   loop max <calls>            tight loop; prints "ns_per_call <x>"
 *   loop rate <per_second> <s>  paced calls for <s> seconds; prints "calls <n> seconds <t>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	if (argc == 3 && strcmp(argv[1], "max") == 0) {
		long n = atol(argv[2]);
		for (long i = 0; i < n / 10; i++) /* warm-up */
			cudaLaunchKernel((void *)1, g, b, NULL, 0, NULL);
		double t0 = now();
		for (long i = 0; i < n; i++)
			cudaLaunchKernel((void *)1, g, b, NULL, 0, NULL);
		double t1 = now();
		printf("ns_per_call %.1f\n", (t1 - t0) * 1e9 / n);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "rate") == 0) {
		long rate = atol(argv[2]);
		double secs = atof(argv[3]);
		long per_ms = rate / 1000;
		long calls = 0;
		double t0 = now(), next = t0;
		while (now() - t0 < secs) {
			for (long i = 0; i < per_ms; i++)
				cudaLaunchKernel((void *)1, g, b, NULL, 0, NULL);
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
	fprintf(stderr, "usage: loop max <calls> | loop rate <per_second> <seconds>\n");
	return 2;
}
