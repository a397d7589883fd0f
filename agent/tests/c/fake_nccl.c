/* A stand-in for libnccl exporting the probed API with the real signatures (ncclUniqueId is
 * a 128-byte struct passed by value). Collectives sleep a known time. */
#include <stddef.h>
#include <time.h>

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

API int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	sink += (unsigned char)id.internal[0] + nranks;
	*comm = (ncclComm_t)(0x10000UL + 0x100UL * (unsigned long)rank);
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
