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
 *       With WHY_NET=1, every step also exchanges 8 KiB with a peer over TCP on 127.0.0.1
 *       (an echo thread of the same process; a collective over NCCL's socket transport),
 *       so packet loss on the path (an iptables rule in the test's network namespace) makes
 *       the step wait for retransmits.
 *   why_workload hog <cpu> <secs>
 *       a CPU hog: spins for <secs>.
 *   why_workload cache <file> <mb> <secs>
 *       once <file>.go exists, writes <mb> MiB through the page cache to <file> over and
 *       over for <secs> (in a memory cgroup smaller than that, its allocations reclaim).
 *   why_workload oom <mb>
 *       once `oom.go` exists in the working directory, allocates and touches <mb> MiB (in a
 *       memory cgroup smaller than that, the OOM killer ends it).
 *
 * Prints "started" once pinned, and "steps <n>" at the end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
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

#define NET_BYTES (8 << 10)

static int full_io(int fd, char *buf, int n, int writing)
{
	for (int done = 0; done < n;) {
		ssize_t r = writing ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
		if (r <= 0)
			return -1;
		done += (int)r;
	}
	return 0;
}

static void *echo(void *arg)
{
	int fd = (int)(long)arg;
	static char buf[NET_BYTES];
	while (full_io(fd, buf, NET_BYTES, 0) == 0 && full_io(fd, buf, NET_BYTES, 1) == 0)
		;
	return NULL;
}

/* A connected TCP socket whose peer (a thread) echoes what it is sent. */
static int net_peer(void)
{
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &len)) {
		perror("listen");
		exit(2);
	}
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) {
		perror("connect");
		exit(2);
	}
	int s = accept(l, NULL, NULL);
	if (s < 0) {
		perror("accept");
		exit(2);
	}
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	pthread_t t;
	if (pthread_create(&t, NULL, echo, (void *)(long)s)) {
		perror("pthread_create");
		exit(2);
	}
	return c;
}

static void wait_for(const char *path)
{
	while (access(path, F_OK) != 0)
		usleep(20000);
}

static int cache_writer(const char *file, long mb, double secs)
{
	char go[4096];
	snprintf(go, sizeof go, "%s.go", file);
	static char buf[1 << 20];
	memset(buf, 0x5a, sizeof buf);
	printf("started\n");
	fflush(stdout);
	wait_for(go);
	double end = now_s() + secs;
	while (now_s() < end) {
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0) {
			perror("open");
			return 2;
		}
		for (long i = 0; i < mb && now_s() < end; i++)
			if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
				perror("write");
				return 2;
			}
		close(fd);
	}
	return 0;
}

static int oom(long mb)
{
	printf("started\n");
	fflush(stdout);
	wait_for("oom.go");
	for (long i = 0; i < mb; i++) {
		char *p = malloc(1 << 20);
		if (!p)
			return 3;
		memset(p, 0x5a, 1 << 20);
	}
	return 0; /* not reached inside a smaller memory limit */
}

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
	if (argc >= 5 && strcmp(argv[1], "cache") == 0)
		return cache_writer(argv[2], atol(argv[3]), atof(argv[4]));
	if (argc >= 3 && strcmp(argv[1], "oom") == 0)
		return oom(atol(argv[2]));
	if (argc < 5 || strcmp(argv[1], "train") != 0) {
		fprintf(stderr, "usage: why_workload train <cpu> <secs> <spin_us> [<file>] | hog <cpu> <secs> | "
				"cache <file> <mb> <secs> | oom <mb>\n");
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
	const char *net_env = getenv("WHY_NET");
	int net = net_env && strcmp(net_env, "1") == 0 ? net_peer() : -1;
	static char net_buf[NET_BYTES];
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
		if (net >= 0 && (full_io(net, net_buf, NET_BYTES, 1) || full_io(net, net_buf, NET_BYTES, 0))) {
			perror("net");
			return 2;
		}
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
