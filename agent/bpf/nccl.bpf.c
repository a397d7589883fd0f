// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Uprobes and uretprobes on the NCCL API (libnccl, or the copy bundled in libtorch_cuda):
 * communicator init/destroy and the collectives.
 *
 * ncclCommInitRank records (pid, comm pointer) -> (rank, nranks, hash of the 128-byte
 * ncclUniqueId). Each collective looks its communicator up at entry and takes the next
 * per-communicator sequence number there (per communicator and peer for Send/Recv), so
 * every rank numbers the same collective the same way and ring-buffer drops cannot shift
 * the count. One struct nccl_event per call is submitted at return.
 *
 * Argument capture follows the platform ABI. On x86-64 the ncclUniqueId argument of
 * ncclCommInitRank (128 bytes, class MEMORY) is copied onto the stack and `rank` travels in
 * the third integer register; on arm64 it is passed by reference in x2 and `rank` is x3.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define NCCL_UNIQUE_ID_WORDS 16
#define COMM_INIT_ALL_MAX 8

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 * 1024 * 1024);
} nccl_events SEC(".maps");

struct nccl_entry {
	__u64 timestamp_ns;
	__u64 comm_ptr;
	__u64 out_ptr;      /* init: where the new comm (or comm array) is written */
	__u64 count;
	__u64 stream;
	__u64 comm_id_hash; /* init: hash of the unique id */
	__u64 op_seq;
	__u32 datatype;
	__u32 reduce_op;
	__u32 nranks;
	__u32 rank;
	__u32 peer;
	__u8 op;
	__u8 id_ok;         /* init: the unique id was read */
	__u16 _pad;
};

/* Key: tid | op << 32. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct nccl_entry);
} nccl_entries SEC(".maps");

struct comm_key {
	__u32 pid;
	__u32 _pad;
	__u64 comm_ptr;
};

struct comm_value {
	__u64 comm_id_hash;
	__u32 rank;
	__u32 nranks;
	__u64 next_seq;
	__u64 init_ts;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct comm_key);
	__type(value, struct comm_value);
} nccl_comms SEC(".maps");

struct p2p_key {
	__u32 pid;
	__u32 peer;
	__u64 comm_ptr;
	__u32 op; /* send or recv */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct p2p_key);
	__type(value, __u64);
} nccl_p2p_seq SEC(".maps");

DEFINE_DROP_COUNTERS(nccl_drops)

static __always_inline __u64 splitmix64(__u64 x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* The Go agent's fold of the 16 words of an ncclUniqueId, so hashes match it. */
static __always_inline __u64 fold_unique_id(const __u64 *w)
{
	__u64 h = 0x9e3779b97f4a7c15ULL;
#pragma unroll
	for (int i = 0; i < NCCL_UNIQUE_ID_WORDS; i++)
		h = splitmix64(h ^ w[i]);
	return h;
}

static __always_inline __u64 entry_key(__u8 op)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	return (__u64)tid | ((__u64)op << 32);
}

static __always_inline void save(struct nccl_entry *e)
{
	if (!traced(bpf_get_current_pid_tgid() >> 32))
		return;
	__u64 k = entry_key(e->op);
	e->timestamp_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&nccl_entries, &k, e, BPF_ANY);
}

/* Look the communicator up and take its next sequence number. */
static __always_inline void bind_comm(struct nccl_entry *e)
{
	struct comm_key ck = {};
	ck.pid = bpf_get_current_pid_tgid() >> 32;
	ck.comm_ptr = e->comm_ptr;
	struct comm_value *cv = bpf_map_lookup_elem(&nccl_comms, &ck);
	if (!cv)
		return;
	e->rank = cv->rank;
	e->nranks = cv->nranks;
	e->comm_id_hash = cv->comm_id_hash;
	if (e->op == NCCL_OP_SEND || e->op == NCCL_OP_RECV) {
		struct p2p_key pk = {};
		pk.pid = ck.pid;
		pk.peer = e->peer;
		pk.comm_ptr = e->comm_ptr;
		pk.op = e->op;
		__u64 zero = 0;
		bpf_map_update_elem(&nccl_p2p_seq, &pk, &zero, BPF_NOEXIST);
		__u64 *seq = bpf_map_lookup_elem(&nccl_p2p_seq, &pk);
		if (seq)
			e->op_seq = __sync_fetch_and_add(seq, 1) + 1;
	} else {
		e->op_seq = __sync_fetch_and_add(&cv->next_seq, 1) + 1;
	}
}

static __always_inline int emit(struct ingero_regs *ctx, __u8 op)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 k = entry_key(op);
	struct nccl_entry *e = bpf_map_lookup_elem(&nccl_entries, &k);
	if (!e) {
		/* A process outside the scope stashed nothing: not a loss. */
		if (traced(bpf_get_current_pid_tgid() >> 32))
			COUNT_DROP(nccl_drops, DROP_ENTRY_MISSING);
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	__s32 rc = (__s32)RET(ctx);

	if (op == NCCL_OP_COMM_INIT_RANK && rc == 0 && e->id_ok) {
		__u64 comm = 0;
		if (bpf_probe_read_user(&comm, sizeof(comm), (void *)e->out_ptr) == 0 && comm) {
			struct comm_key ck = {.pid = pid, .comm_ptr = comm};
			struct comm_value cv = {};
			cv.comm_id_hash = e->comm_id_hash;
			cv.rank = e->rank;
			cv.nranks = e->nranks;
			cv.init_ts = now;
			if (bpf_map_update_elem(&nccl_comms, &ck, &cv, BPF_ANY) != 0)
				COUNT_DROP(nccl_drops, DROP_ENTRY_MISSING);
			e->comm_ptr = comm;
		} else {
			COUNT_DROP(nccl_drops, DROP_USER_READ);
		}
	}
	if (op == NCCL_OP_COMM_INIT_ALL && rc == 0) {
		__u32 n = e->nranks;
		/* A bounded loop (kernels >= 5.3). */
		for (__u32 i = 0; i < COMM_INIT_ALL_MAX; i++) {
			if (i >= n)
				break;
			__u64 comm = 0;
			if (bpf_probe_read_user(&comm, sizeof(comm), (void *)(e->out_ptr + 8 * i)) != 0 || !comm)
				continue;
			struct comm_key ck = {.pid = pid, .comm_ptr = comm};
			struct comm_value cv = {};
			cv.rank = i;
			cv.nranks = n;
			cv.init_ts = now;
			bpf_map_update_elem(&nccl_comms, &ck, &cv, BPF_ANY);
		}
	}

	struct nccl_event *ev = bpf_ringbuf_reserve(&nccl_events, sizeof(*ev), 0);
	if (!ev) {
		COUNT_DROP(nccl_drops, DROP_RINGBUF_FULL);
		bpf_map_delete_elem(&nccl_entries, &k);
		return 0;
	}
	ev->timestamp_ns = e->timestamp_ns;
	ev->pid = pid;
	ev->tid = (__u32)pid_tgid;
	ev->source = SRC_NCCL;
	ev->op = op;
	ev->flags = 0;
	ev->_pad = 0;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
	ev->duration_ns = now - e->timestamp_ns;
	ev->comm_id_hash = e->comm_id_hash;
	ev->stream_handle = e->stream;
	ev->count = e->count;
	ev->rank = e->rank;
	ev->nranks = e->nranks;
	ev->datatype = e->datatype;
	ev->reduce_op = e->reduce_op;
	ev->return_code = rc;
	ev->peer_rank = e->peer;
	ev->op_seq = e->op_seq;
	bpf_ringbuf_submit(ev, 0);
	bpf_map_delete_elem(&nccl_entries, &k);
	return 0;
}

/* ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) */
SEC("uprobe")
int nccl_comm_init_rank(struct ingero_regs *ctx)
{
	struct nccl_entry e = {};
	__u64 words[NCCL_UNIQUE_ID_WORDS] = {};
	e.op = NCCL_OP_COMM_INIT_RANK;
	e.out_ptr = ARG1(ctx);
	e.nranks = (__u32)ARG2(ctx);
#if defined(__TARGET_ARCH_x86)
	void *id = (void *)(SP(ctx) + STACK_ARG_OFFSET(1));
	e.rank = (__u32)ARG3(ctx);
#else
	void *id = (void *)ARG3(ctx);
	e.rank = (__u32)ARG4(ctx);
#endif
	if (bpf_probe_read_user(words, sizeof(words), id) == 0) {
		e.id_ok = 1;
		e.comm_id_hash = fold_unique_id(words);
	} else {
		COUNT_DROP(nccl_drops, DROP_USER_READ);
	}
	save(&e);
	return 0;
}

SEC("uretprobe")
int nccl_comm_init_rank_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_COMM_INIT_RANK);
}

/* ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) */
SEC("uprobe")
int nccl_comm_init_all(struct ingero_regs *ctx)
{
	struct nccl_entry e = {};
	e.op = NCCL_OP_COMM_INIT_ALL;
	e.out_ptr = ARG1(ctx);
	e.nranks = (__u32)ARG2(ctx);
	save(&e);
	return 0;
}

SEC("uretprobe")
int nccl_comm_init_all_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_COMM_INIT_ALL);
}

/* ncclCommDestroy(ncclComm_t comm): forget the communicator at entry (the pointer may be
 * reused by the next init once the call returns). */
SEC("uprobe")
int nccl_comm_destroy(struct ingero_regs *ctx)
{
	struct nccl_entry e = {};
	e.op = NCCL_OP_COMM_DESTROY;
	e.comm_ptr = ARG1(ctx);
	struct comm_key ck = {};
	ck.pid = bpf_get_current_pid_tgid() >> 32;
	ck.comm_ptr = e.comm_ptr;
	struct comm_value *cv = bpf_map_lookup_elem(&nccl_comms, &ck);
	if (cv) {
		e.rank = cv->rank;
		e.nranks = cv->nranks;
		e.comm_id_hash = cv->comm_id_hash;
	}
	bpf_map_delete_elem(&nccl_comms, &ck);
	save(&e);
	return 0;
}

SEC("uretprobe")
int nccl_comm_destroy_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_COMM_DESTROY);
}

/* ncclAllReduce / ncclReduceScatter(sendbuff, recvbuff, size_t count, datatype, redop,
 *                                   comm, cudaStream_t stream) */
#define NCCL_REDUCE(name, opcode)                                 \
	SEC("uprobe")                                             \
	int name(struct ingero_regs *ctx)                         \
	{                                                         \
		struct nccl_entry e = {};                         \
		e.op = (opcode);                                  \
		e.count = ARG3(ctx);                              \
		e.datatype = (__u32)ARG4(ctx);                    \
		e.reduce_op = (__u32)ARG5(ctx);                   \
		e.comm_ptr = ARG6(ctx);                           \
		e.stream = STREAM7(ctx);                          \
		bind_comm(&e);                                    \
		save(&e);                                         \
		return 0;                                         \
	}
#if defined(__TARGET_ARCH_x86)
#define STREAM7(ctx) stack_arg(ctx, 1)
#else
#define STREAM7(ctx) ARG7(ctx)
#endif
NCCL_REDUCE(nccl_all_reduce, NCCL_OP_ALL_REDUCE)
NCCL_REDUCE(nccl_reduce_scatter, NCCL_OP_REDUCE_SCATTER)

SEC("uretprobe")
int nccl_all_reduce_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_ALL_REDUCE);
}

SEC("uretprobe")
int nccl_reduce_scatter_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_REDUCE_SCATTER);
}

/* ncclAllGather(sendbuff, recvbuff, size_t sendcount, datatype, comm, stream) */
SEC("uprobe")
int nccl_all_gather(struct ingero_regs *ctx)
{
	struct nccl_entry e = {};
	e.op = NCCL_OP_ALL_GATHER;
	e.count = ARG3(ctx);
	e.datatype = (__u32)ARG4(ctx);
	e.comm_ptr = ARG5(ctx);
	e.stream = ARG6(ctx);
	bind_comm(&e);
	save(&e);
	return 0;
}

SEC("uretprobe")
int nccl_all_gather_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_ALL_GATHER);
}

/* ncclBcast(buff, size_t count, datatype, int root, comm, stream) */
SEC("uprobe")
int nccl_bcast(struct ingero_regs *ctx)
{
	struct nccl_entry e = {};
	e.op = NCCL_OP_BCAST;
	e.count = ARG2(ctx);
	e.datatype = (__u32)ARG3(ctx);
	e.comm_ptr = ARG5(ctx);
	e.stream = ARG6(ctx);
	bind_comm(&e);
	save(&e);
	return 0;
}

SEC("uretprobe")
int nccl_bcast_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_BCAST);
}

/* ncclSend / ncclRecv(buff, size_t count, datatype, int peer, comm, stream) */
#define NCCL_P2P(name, opcode)                                    \
	SEC("uprobe")                                             \
	int name(struct ingero_regs *ctx)                         \
	{                                                         \
		struct nccl_entry e = {};                         \
		e.op = (opcode);                                  \
		e.count = ARG2(ctx);                              \
		e.datatype = (__u32)ARG3(ctx);                    \
		e.peer = (__u32)ARG4(ctx);                        \
		e.comm_ptr = ARG5(ctx);                           \
		e.stream = ARG6(ctx);                             \
		bind_comm(&e);                                    \
		save(&e);                                         \
		return 0;                                         \
	}
NCCL_P2P(nccl_send, NCCL_OP_SEND)
NCCL_P2P(nccl_recv, NCCL_OP_RECV)

SEC("uretprobe")
int nccl_send_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_SEND);
}

SEC("uretprobe")
int nccl_recv_ret(struct ingero_regs *ctx)
{
	return emit(ctx, NCCL_OP_RECV);
}
