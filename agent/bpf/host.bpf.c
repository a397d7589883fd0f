// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The host layer of the watched processes, through tracepoints (no kprobes):
 *
 * - sched_switch / sched_wakeup: per process, the time its threads spent off the CPU, the
 *   switches that took the CPU away from a runnable thread (involuntary), and the run-queue
 *   delay (runnable but waiting: from a wakeup, or from an involuntary switch, until the
 *   thread runs again). sched_switch runs at 100k/s on a busy host, so nothing is exported
 *   per event: each process has one set of cumulative counters (host_sched), updated with
 *   atomic adds, which the agent reads once a second and turns into deltas.
 * - block_bio_queue / block_rq_complete: I/O submitted by a watched process (block_bio_queue
 *   runs in the submitter's context; block_rq_issue does not always: a queue run started by
 *   one process dispatches other processes' requests too), its bytes and its latency from
 *   submission to completion, per process and direction (host_io). A request is found at
 *   completion by its device and first sector.
 *
 * - tcp_retransmit_skb: TCP retransmits of the watched processes' sockets, per process
 *   (host_net). A retransmit runs from a timer or softirq, not in the owner's context, so
 *   the owner is known from the socket: sock_send_length / sock_recv_length (Linux 6.3+)
 *   and inet_sock_set_state (a connect) run in the owner's context and map the socket to
 *   the process (host_socks). Retransmits on sockets of no watched process are not counted.
 * - mm_vmscan_direct_reclaim_begin/end and mm_vmscan_memcg_reclaim_begin/end: the time the
 *   watched processes' threads stalled reclaiming memory to allocate a page (global memory
 *   pressure, or their cgroup at its limit), per process (host_mem).
 * - mark_victim: an OOM kill of a watched process, or one caused by a watched process's
 *   allocation, exported one by one through a ring buffer (host_oom): they are rare.
 *
 * The scope (--pid, --cgroup) is the same filter as the uprobes' (common.h). Everything
 * that finds no room in a map is counted in host_drops.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Tracepoint field offsets of the block events, read by the agent from the tracepoints'
 * format files at load time (they moved between kernel versions). Defaults: Linux 6.x. */
volatile const __u32 blk_dev_off = 8;        /* block_bio_queue */
volatile const __u32 blk_sector_off = 16;
volatile const __u32 blk_rwbs_off = 28;
volatile const __u32 blk_c_dev_off = 8;      /* block_rq_complete */
volatile const __u32 blk_c_sector_off = 16;
volatile const __u32 blk_c_nr_sector_off = 24;
/* tcp_retransmit_skb's skaddr, reclaim_end's nr_reclaimed, mark_victim's fields (0: absent). */
volatile const __u32 tcp_skaddr_off = 16;
volatile const __u32 reclaimed_off = 8;
volatile const __u32 oom_pid_off = 8;
volatile const __u32 oom_comm_off = 12;
volatile const __u32 oom_anon_off = 24;
volatile const __u32 oom_file_off = 32;
volatile const __u32 oom_shmem_off = 40;

#define HOST_DROP_THREADS_FULL 0
#define HOST_DROP_PROCS_FULL 1
#define HOST_DROP_IO_INFLIGHT_FULL 2
#define HOST_DROP_IO_PROCS_FULL 3
#define HOST_DROP_NET_PROCS_FULL 4
#define HOST_DROP_MEM_PROCS_FULL 5
#define HOST_DROP_RECLAIM_THREADS_FULL 6
#define HOST_DROP_OOM_RINGBUF_FULL 7
#define HOST_DROPS 8

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HOST_DROPS);
	__type(key, __u32);
	__type(value, __u64);
} host_drops SEC(".maps");

/* Per process (tgid), cumulative, 48 bytes (src/probes/host.rs mirrors it). */
struct sched_counts {
	__u64 offcpu_ns;
	__u64 switches;
	__u64 involuntary;
	__u64 runq_ns;
	__u64 runq_events; /* thread runs after waiting runnable */
	__u64 runq_max_ns; /* not atomic: a best-effort maximum */
};

/* Per thread, while it is off the CPU. */
struct thread_state {
	__u64 off_ts;   /* when it was switched out */
	__u64 ready_ts; /* when it became runnable again (0: still sleeping) */
	__u32 tgid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct thread_state);
} host_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct sched_counts);
} host_sched SEC(".maps");

/* Per process and direction, cumulative, 40 bytes. */
struct io_counts {
	__u64 ops;
	__u64 bytes;
	__u64 lat_ns;
	__u64 lat_max_ns; /* best-effort maximum */
	__u64 _reserved;
};

struct io_key {
	__u32 tgid;
	__u32 dir; /* 1 read, 2 write, 3 discard (the store's IO op ids) */
};

struct inflight_key {
	__u64 sector;
	__u32 dev;
	__u32 _pad;
};

struct inflight {
	__u64 ts;
	__u32 tgid;
	__u32 dir;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct inflight_key);
	__type(value, struct inflight);
} host_io_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct io_key);
	__type(value, struct io_counts);
} host_io SEC(".maps");

#define TASK_RUNNING 0
/* How sched_switch reports a preempted task: TASK_REPORT_MAX, which is 0x100 since Linux
 * 5.14 and 0x80 from 4.14 to 5.13 (0x80 is TASK_REPORT_IDLE since 5.14: idle kernel
 * threads, never a watched process). A task that gave the CPU up while runnable without
 * being preempted (sched_yield) reports TASK_RUNNING. */
static __always_inline int preempted(long state)
{
	return state == TASK_RUNNING || state == 0x80 || state == 0x100;
}

static __always_inline struct sched_counts *sched_of(__u32 tgid)
{
	struct sched_counts *c = bpf_map_lookup_elem(&host_sched, &tgid);
	if (c)
		return c;
	struct sched_counts zero = {};
	bpf_map_update_elem(&host_sched, &tgid, &zero, BPF_NOEXIST);
	c = bpf_map_lookup_elem(&host_sched, &tgid);
	if (!c)
		COUNT_DROP(host_drops, HOST_DROP_PROCS_FULL);
	return c;
}

/* sched_switch: prev_pid at 24, prev_state at 32, next_pid at 56 (stable since Linux 4.x). */
SEC("tracepoint/sched/sched_switch")
int host_sched_switch(void *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 prev_tid = 0, next_tid = 0;
	long prev_state = 0;
	bpf_probe_read_kernel(&prev_tid, sizeof(prev_tid), (char *)ctx + 24);
	bpf_probe_read_kernel(&prev_state, sizeof(prev_state), (char *)ctx + 32);
	bpf_probe_read_kernel(&next_tid, sizeof(next_tid), (char *)ctx + 56);

	/* The outgoing thread is the current task here: its tgid and cgroup are ours to read. */
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (prev_tid != 0 && (__u32)pid_tgid == prev_tid && traced(tgid)) {
		int involuntary = preempted(prev_state);
		struct thread_state st = { .off_ts = now, .ready_ts = involuntary ? now : 0, .tgid = tgid };
		if (bpf_map_update_elem(&host_threads, &prev_tid, &st, BPF_ANY))
			COUNT_DROP(host_drops, HOST_DROP_THREADS_FULL);
		struct sched_counts *c = sched_of(tgid);
		if (c) {
			__sync_fetch_and_add(&c->switches, 1);
			if (involuntary)
				__sync_fetch_and_add(&c->involuntary, 1);
		}
	}

	if (next_tid == 0)
		return 0;
	struct thread_state *st = bpf_map_lookup_elem(&host_threads, &next_tid);
	if (!st)
		return 0;
	struct sched_counts *c = sched_of(st->tgid);
	if (c) {
		if (now > st->off_ts)
			__sync_fetch_and_add(&c->offcpu_ns, now - st->off_ts);
		if (st->ready_ts && now > st->ready_ts) {
			__u64 wait = now - st->ready_ts;
			__sync_fetch_and_add(&c->runq_ns, wait);
			__sync_fetch_and_add(&c->runq_events, 1);
			if (wait > c->runq_max_ns)
				c->runq_max_ns = wait;
		}
	}
	bpf_map_delete_elem(&host_threads, &next_tid);
	return 0;
}

/* sched_wakeup (and sched_wakeup_new): pid at 24. Fires in the waker's context. */
SEC("tracepoint/sched/sched_wakeup")
int host_sched_wakeup(void *ctx)
{
	__u32 tid = 0;
	bpf_probe_read_kernel(&tid, sizeof(tid), (char *)ctx + 24);
	struct thread_state *st = bpf_map_lookup_elem(&host_threads, &tid);
	if (st && st->ready_ts == 0)
		st->ready_ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline __u32 rwbs_dir(void *ctx)
{
	char rwbs[4] = {};
	bpf_probe_read_kernel(rwbs, sizeof(rwbs), (char *)ctx + blk_rwbs_off);
	/* The first letter (after an optional F for a preflush). */
	char c = rwbs[0] == 'F' ? rwbs[1] : rwbs[0];
	if (c == 'R')
		return 1;
	if (c == 'W')
		return 2;
	if (c == 'D')
		return 3;
	return 0;
}

static __always_inline int on_submit(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!traced(tgid))
		return 0;
	__u32 dir = rwbs_dir(ctx);
	if (!dir)
		return 0; /* flushes and other requests without data */
	struct inflight_key k = {};
	bpf_probe_read_kernel(&k.dev, sizeof(k.dev), (char *)ctx + blk_dev_off);
	bpf_probe_read_kernel(&k.sector, sizeof(k.sector), (char *)ctx + blk_sector_off);
	struct inflight v = { .ts = bpf_ktime_get_ns(), .tgid = tgid, .dir = dir };
	if (bpf_map_update_elem(&host_io_inflight, &k, &v, BPF_ANY))
		COUNT_DROP(host_drops, HOST_DROP_IO_INFLIGHT_FULL);
	return 0;
}

SEC("tracepoint/block/block_bio_queue")
int host_block_bio_queue(void *ctx)
{
	return on_submit(ctx);
}

SEC("tracepoint/block/block_rq_complete")
int host_block_rq_complete(void *ctx)
{
	struct inflight_key k = {};
	bpf_probe_read_kernel(&k.dev, sizeof(k.dev), (char *)ctx + blk_c_dev_off);
	bpf_probe_read_kernel(&k.sector, sizeof(k.sector), (char *)ctx + blk_c_sector_off);
	struct inflight *v = bpf_map_lookup_elem(&host_io_inflight, &k);
	if (!v)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct io_key ik = { .tgid = v->tgid, .dir = v->dir };
	/* The bytes completed (the whole request, merged bios included). */
	__u32 nr = 0;
	bpf_probe_read_kernel(&nr, sizeof(nr), (char *)ctx + blk_c_nr_sector_off);
	__u64 bytes = (__u64)nr * 512;
	__u64 lat = now > v->ts ? now - v->ts : 0;
	bpf_map_delete_elem(&host_io_inflight, &k);
	struct io_counts *c = bpf_map_lookup_elem(&host_io, &ik);
	if (!c) {
		struct io_counts zero = {};
		bpf_map_update_elem(&host_io, &ik, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&host_io, &ik);
		if (!c) {
			COUNT_DROP(host_drops, HOST_DROP_IO_PROCS_FULL);
			return 0;
		}
	}
	__sync_fetch_and_add(&c->ops, 1);
	__sync_fetch_and_add(&c->bytes, bytes);
	__sync_fetch_and_add(&c->lat_ns, lat);
	if (lat > c->lat_max_ns)
		c->lat_max_ns = lat;
	return 0;
}

/* ---- TCP retransmits ---- */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);   /* struct sock * */
	__type(value, __u32); /* tgid */
} host_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* tgid */
	__type(value, __u64); /* retransmits, cumulative */
} host_net SEC(".maps");

static __always_inline void own_socket(__u64 sk)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!sk || !traced(tgid))
		return;
	__u32 *cur = bpf_map_lookup_elem(&host_socks, &sk);
	if (cur && *cur == tgid)
		return;
	/* An LRU map: a full one evicts its oldest socket, it never refuses. */
	bpf_map_update_elem(&host_socks, &sk, &tgid, BPF_ANY);
}

/* sock_send_length / sock_recv_length: sk at 8. inet_sock_set_state: skaddr at 8. */
SEC("tracepoint/sock/sock_send_length")
int host_sock_send(void *ctx)
{
	__u64 sk = 0;
	bpf_probe_read_kernel(&sk, sizeof(sk), (char *)ctx + 8);
	own_socket(sk);
	return 0;
}

SEC("tracepoint/sock/sock_recv_length")
int host_sock_recv(void *ctx)
{
	__u64 sk = 0;
	bpf_probe_read_kernel(&sk, sizeof(sk), (char *)ctx + 8);
	own_socket(sk);
	return 0;
}

SEC("tracepoint/sock/inet_sock_set_state")
int host_sock_state(void *ctx)
{
	__u64 sk = 0;
	bpf_probe_read_kernel(&sk, sizeof(sk), (char *)ctx + 8);
	own_socket(sk);
	return 0;
}

SEC("tracepoint/tcp/tcp_retransmit_skb")
int host_tcp_retransmit(void *ctx)
{
	__u64 sk = 0;
	bpf_probe_read_kernel(&sk, sizeof(sk), (char *)ctx + tcp_skaddr_off);
	__u32 *owner = bpf_map_lookup_elem(&host_socks, &sk);
	if (!owner)
		return 0;
	__u32 tgid = *owner;
	__u64 *n = bpf_map_lookup_elem(&host_net, &tgid);
	if (!n) {
		__u64 zero = 0;
		bpf_map_update_elem(&host_net, &tgid, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&host_net, &tgid);
		if (!n) {
			COUNT_DROP(host_drops, HOST_DROP_NET_PROCS_FULL);
			return 0;
		}
	}
	__sync_fetch_and_add(n, 1);
	return 0;
}

/* ---- Reclaim stalls ---- */

/* Per process, cumulative, 32 bytes. */
struct mem_counts {
	__u64 stalls;
	__u64 stall_ns;
	__u64 reclaimed; /* pages */
	__u64 max_ns;    /* best-effort maximum */
};

struct reclaim_start {
	__u64 ts;
	__u32 tgid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct reclaim_start);
} host_reclaim SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct mem_counts);
} host_mem SEC(".maps");

static __always_inline int reclaim_begin(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	if (!traced(tgid))
		return 0;
	struct reclaim_start st = { .ts = bpf_ktime_get_ns(), .tgid = tgid };
	if (bpf_map_update_elem(&host_reclaim, &tid, &st, BPF_ANY))
		COUNT_DROP(host_drops, HOST_DROP_RECLAIM_THREADS_FULL);
	return 0;
}

static __always_inline int reclaim_end(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct reclaim_start *st = bpf_map_lookup_elem(&host_reclaim, &tid);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 stall = now > st->ts ? now - st->ts : 0;
	__u32 tgid = st->tgid;
	bpf_map_delete_elem(&host_reclaim, &tid);
	__u64 pages = 0;
	bpf_probe_read_kernel(&pages, sizeof(pages), (char *)ctx + reclaimed_off);
	struct mem_counts *c = bpf_map_lookup_elem(&host_mem, &tgid);
	if (!c) {
		struct mem_counts zero = {};
		bpf_map_update_elem(&host_mem, &tgid, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&host_mem, &tgid);
		if (!c) {
			COUNT_DROP(host_drops, HOST_DROP_MEM_PROCS_FULL);
			return 0;
		}
	}
	__sync_fetch_and_add(&c->stalls, 1);
	__sync_fetch_and_add(&c->stall_ns, stall);
	__sync_fetch_and_add(&c->reclaimed, pages);
	if (stall > c->max_ns)
		c->max_ns = stall;
	return 0;
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_begin")
int host_direct_reclaim_begin(void *ctx)
{
	return reclaim_begin();
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_end")
int host_direct_reclaim_end(void *ctx)
{
	return reclaim_end(ctx);
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_begin")
int host_memcg_reclaim_begin(void *ctx)
{
	return reclaim_begin();
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_end")
int host_memcg_reclaim_end(void *ctx)
{
	return reclaim_end(ctx);
}

/* ---- OOM kills ---- */

/* One OOM kill, 56 bytes (src/probes/host.rs mirrors it). */
struct oom_event {
	__u64 timestamp_ns; /* bpf_ktime_get_ns */
	__u32 victim;       /* the killed task's pid */
	__u32 killer;       /* tgid of the task whose allocation invoked the OOM killer */
	__u64 rss_kb;       /* anon + file + shmem RSS of the victim */
	__u64 cgroup_id;    /* of the killer */
	char comm[16];      /* the victim's */
	__u64 _reserved[1];
};

_Static_assert(sizeof(struct oom_event) == 56, "oom_event must match src/probes/host.rs");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} host_oom SEC(".maps");

SEC("tracepoint/oom/mark_victim")
int host_oom_mark_victim(void *ctx)
{
	__u32 killer = bpf_get_current_pid_tgid() >> 32;
	__u32 victim = 0;
	bpf_probe_read_kernel(&victim, sizeof(victim), (char *)ctx + oom_pid_off);
	/* The victim is watched (its pid is the process's in the usual case of a
	 * single-threaded kill target), or the allocation that ran out was a watched
	 * process's (a cgroup at its limit kills within the cgroup). */
	if (!traced(killer) && !bpf_map_lookup_elem(&filter_pids, &victim))
		return 0;
	struct oom_event *ev = bpf_ringbuf_reserve(&host_oom, sizeof(*ev), 0);
	if (!ev) {
		COUNT_DROP(host_drops, HOST_DROP_OOM_RINGBUF_FULL);
		return 0;
	}
	ev->timestamp_ns = bpf_ktime_get_ns();
	ev->victim = victim;
	ev->killer = killer;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->_reserved[0] = 0;
	__u64 rss = 0, v = 0;
	if (oom_anon_off) {
		bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + oom_anon_off);
		rss += v;
	}
	if (oom_file_off) {
		bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + oom_file_off);
		rss += v;
	}
	if (oom_shmem_off) {
		bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + oom_shmem_off);
		rss += v;
	}
	ev->rss_kb = rss;
	__builtin_memset(ev->comm, 0, sizeof(ev->comm));
	if (oom_comm_off) {
		/* __data_loc: offset in the low 16 bits, length in the high 16. */
		__u32 loc = 0;
		bpf_probe_read_kernel(&loc, sizeof(loc), (char *)ctx + oom_comm_off);
		bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), (char *)ctx + (loc & 0xffff));
	}
	bpf_ringbuf_submit(ev, 0);
	return 0;
}
