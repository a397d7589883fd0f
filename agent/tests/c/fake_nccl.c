/* A stand-in for libnccl exporting the probed API with the real signatures (ncclUniqueId is
 * a 128-byte struct passed by value). Collectives sleep a known time.
 *
 * With FAKE_NCCL_BARRIER=<file> in the environment, ncclAllReduce behaves like a real
 * collective between processes instead: it is enqueued (returns at once) and completes
 * only when every rank of the communicator has enqueued the same collective. A stream
 * synchronize on its stream (fake libcudart calls fake_nccl_stream_wait) blocks until then,
 * so fast ranks wait there for the slowest one, as they do in synchronous training. The
 * ranks share the file's first page: one counter of enqueued all-reduces per rank. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void *cudaStream_t;

#define API __attribute__((visibility("default"), noinline))

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&t, &t) != 0)
		;
}

static volatile unsigned long sink;

#define MAX_RANKS 64

/* Cross-process all-reduce state (FAKE_NCCL_BARRIER). */
static struct {
	uint64_t *enqueued; /* shared: all-reduces enqueued, per rank */
	int rank, nranks;
	uint64_t mine;        /* this rank's enqueued all-reduces */
	cudaStream_t stream;  /* stream of the last one */
} barrier;

static void barrier_open(int rank, int nranks)
{
	const char *path = getenv("FAKE_NCCL_BARRIER");
	if (!path || rank < 0 || nranks < 1 || nranks > MAX_RANKS || rank >= nranks)
		return;
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		return;
	if (ftruncate(fd, 4096) == 0) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			barrier.enqueued = p;
			barrier.rank = rank;
			barrier.nranks = nranks;
		}
	}
	close(fd);
}

/* Blocks until the last all-reduce this rank enqueued has been enqueued by every rank. */
static void wait_for_every_rank(void)
{
	for (;;) {
		int behind = 0;
		for (int r = 0; r < barrier.nranks; r++)
			if (__atomic_load_n(&barrier.enqueued[r], __ATOMIC_ACQUIRE) < barrier.mine)
				behind = 1;
		if (!behind)
			return;
		sleep_us(50);
	}
}

API void fake_nccl_stream_wait(cudaStream_t stream)
{
	if (barrier.enqueued && stream == barrier.stream)
		wait_for_every_rank();
}

/* Called by the fake runtime's device synchronize: every stream, so the last all-reduce. */
API void fake_nccl_wait_all(void)
{
	if (barrier.enqueued)
		wait_for_every_rank();
}

API int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	sink += (unsigned char)id.internal[0] + nranks;
	*comm = (ncclComm_t)(0x10000UL + 0x100UL * (unsigned long)rank);
	barrier_open(rank, nranks);
	sleep_us(1000);
	return 0;
}

API int ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	for (int i = 0; i < ndev; i++)
		comms[i] = (ncclComm_t)(0x50000UL + 0x10UL * (unsigned long)i);
	sink += (unsigned long)devlist;
	return 0;
}

API int ncclCommDestroy(ncclComm_t comm)
{
	sink += (unsigned long)comm;
	return 0;
}

API int ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
		      cudaStream_t stream)
{
	sink += (unsigned long)s + (unsigned long)r + count + dt + op + (unsigned long)comm + (unsigned long)stream;
	if (barrier.enqueued) {
		barrier.mine++;
		barrier.stream = stream;
		__atomic_store_n(&barrier.enqueued[barrier.rank], barrier.mine, __ATOMIC_RELEASE);
		return 0;
	}
	sleep_us(2000);
	return 0;
}

API int ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
			  cudaStream_t stream)
{
	sink += (unsigned long)s + (unsigned long)r + count + dt + op + (unsigned long)comm + (unsigned long)stream;
	sleep_us(1000);
	return 0;
}

API int ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream)
{
	sink += (unsigned long)s + (unsigned long)r + count + dt + (unsigned long)comm + (unsigned long)stream;
	sleep_us(1000);
	return 0;
}

API int ncclBcast(void *buf, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t stream)
{
	sink += (unsigned long)buf + count + dt + root + (unsigned long)comm + (unsigned long)stream;
	sleep_us(1000);
	return 0;
}

API int ncclSend(const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t stream)
{
	sink += (unsigned long)buf + count + dt + peer + (unsigned long)comm + (unsigned long)stream;
	sleep_us(1000);
	return 0;
}

API int ncclRecv(void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t stream)
{
	sink += (unsigned long)buf + count + dt + peer + (unsigned long)comm + (unsigned long)stream;
	sleep_us(1000);
	return 0;
}
