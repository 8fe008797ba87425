/*
 * liburcu's call_rcu on the realistic deferred callback, the counterpart of
 * benches/examples/defer_free.rs: each operation enters a read section,
 * allocates a node, takes a reference on a shared object (an atomic count,
 * the Rust side's Arc clone) and hands the node to call_rcu, whose callback
 * frees it and drops the reference. After the producers finish,
 * rcu_barrier() (rcu_defer_barrier() for "defer") waits for every
 * callback; the count must be back to 0.
 *
 *     gcc -O2 -pthread -o urcu_defer_free urcu_defer_free.c -lurcu-memb
 *     gcc -O2 -pthread -DURCU_QSBR -o urcu_qsbr_defer_free urcu_defer_free.c -lurcu-qsbr
 *     [URCU_QS_PERIOD=N] ./urcu_qsbr_defer_free MODE THREADS OPS
 *
 * MODE: "global" (liburcu's default: one call_rcu thread for the process)
 * or "percpu" (create_all_cpu_call_rcu_data: one call_rcu thread per CPU,
 * each thread's callbacks queued on its CPU's), or "defer": liburcu's
 * other deferral, defer_rcu (urcu/defer.h: a per-thread queue of 4096
 * slots, no rcu_head, so a 32-byte node; a full queue makes the thread
 * itself wait a grace period and run its callbacks, and a defer thread
 * runs every registered queue now and then; liburcu's README: its
 * best-case overhead is better than call_rcu's). defer_rcu may wait for a
 * grace period, so it is called just after the read section, never in
 * it (README: "Do _not_ use defer_rcu() within a read-side critical
 * section"); each producer registers for it and unregisters (which runs
 * what it queued) before it exits.
 *
 * The flavour is chosen at build time (two flavours' headers do not go
 * in one file: their urcu/call-rcu.h and urcu/defer.h declare one
 * flavour's names under one include guard).
 *
 * Default: urcu-memb (membarrier on the writer side, as exitq), the
 * inlined (_LGPL_SOURCE) read_lock/read_unlock.
 *
 * -DURCU_QSBR: urcu-qsbr. Its read_lock/read_unlock are empty; a
 * registered thread is "online" (in a read section, as far as grace
 * periods go) until it reports a quiescent state (rcu_quiescent_state: a
 * load and a compare while no grace period waits for it) or goes offline.
 * Each producer reports one every URCU_QS_PERIOD operations (default 1,
 * at most 2^20) and goes offline around anything that blocks (the start
 * barrier, registering for defer_rcu, unregistering). liburcu's README
 * ("Interaction with mutexes"): a mutex held across synchronize_rcu may
 * be taken only offline. defer_rcu takes such a mutex when the thread's
 * queue is full (urcu-defer-impl.h, 0.13.2: _defer_rcu calls
 * rcu_defer_barrier_thread, which takes rcu_defer_mutex and calls
 * synchronize_rcu with it held; the defer thread's rcu_defer_barrier does
 * the same for every queue), so under qsbr an online producer calling it
 * can wait for that mutex while its holder waits for that producer's
 * quiescent state: a deadlock (a run of defer_rcu called as under memb
 * hung). So two qsbr-only ways to call it:
 *   "defer": each producer empties its own queue (rcu_defer_barrier_thread,
 *     offline) every DEFER_FLUSH = 4000 calls, below the 4094 entries
 *     (DEFER_QUEUE_SIZE - 2, one entry per call while the function
 *     repeats) at which defer_rcu would; so defer_rcu itself never
 *     blocks. It relies on liburcu's queue size, an internal constant
 *     (1 << 12 in every release from 0.7 to 0.15.6).
 *   "defer-offline": the README's rule as written: offline around every
 *     defer_rcu call (three full fences and two stores more per call).
 *
 * THREADS is 1..=4096, OPS 1..=10^12 (bench_args.h).
 * Prints: urcu-MODE THREADS OPS WALL_NS NS_PER_OP (urcu-qsbr-MODE for the
 * qsbr build). Exit 2 on bad usage (and URCU_QS_PERIOD given to the memb
 * build), 3 if a thread cannot be created (the limits named), 1 if a
 * callback did not run.
 */
#define _LGPL_SOURCE
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef URCU_QSBR
#include <urcu/urcu-qsbr.h>
#define FLAVOUR "qsbr-"
#define F(name) urcu_qsbr_##name
#else
#include <urcu/urcu-memb.h>
#define FLAVOUR ""
#define F(name) urcu_memb_##name
#endif

#include "bench_args.h"

/* The node: 32 bytes, as the Rust node; defer_rcu needs no link in it. */
struct plain_node {
	uint64_t key, value, next, seq;
};

/* call_rcu's node: the same, then its link (16 bytes more). */
struct node {
	struct plain_node n;
	struct rcu_head head;
};

static _Atomic long refs;               /* the shared object's count */
static int use_defer;                   /* MODE "defer" or "defer-offline" */
static int defer_offline;               /* MODE "defer-offline" */
static uint64_t per_thread, remainder;
static pthread_barrier_t start;

/* Operations between two quiescent states (URCU_QS_PERIOD; qsbr's). */
static uint64_t qs_period = 1;

#ifdef URCU_QSBR
/* Calls to defer_rcu between two emptyings of the thread's own queue: below
 * the 4094 entries at which defer_rcu would empty it itself. */
#define DEFER_FLUSH 4000
#endif

/* Offline, online and a quiescent state every qs_period operations (LEFT
 * counts down to it): qsbr's; nothing under memb. */
static inline void offline(void)
{
#ifdef URCU_QSBR
	urcu_qsbr_thread_offline();
#endif
}

static inline void online(void)
{
#ifdef URCU_QSBR
	urcu_qsbr_thread_online();
#endif
}

static inline void quiescent(uint64_t *left)
{
#ifdef URCU_QSBR
	if (--*left == 0) {
		*left = qs_period;
		urcu_qsbr_quiescent_state();
	}
#else
	(void)left;
#endif
}

/* A producer's node of SIZE bytes for its operation I, with a reference
 * taken on the shared object (the Rust side's Arc clone). */
static inline void *new_node(size_t size, uint64_t i)
{
	struct plain_node *node = malloc(size);
	if (!node)
		abort();
	node->key = i;
	node->value = i ^ 0x5555;
	node->next = 0;
	node->seq = i;
	atomic_fetch_add_explicit(&refs, 1, memory_order_relaxed);
	return node;
}

/* The callback's work: check the node, free it, drop its reference. */
static void drop_node(void *p)
{
	struct plain_node *n = p;
	if ((n->key ^ 0x5555) != n->value)
		abort();
	free(n);
	atomic_fetch_sub_explicit(&refs, 1, memory_order_relaxed);
}

static void free_node(struct rcu_head *h)
{
	drop_node(caa_container_of(h, struct node, head));
}

/* defer_rcu's producer: registered (and offline under qsbr) on entry. */
static void defer_producer(uint64_t n)
{
	if (F(defer_register_thread)() != 0) {
		fprintf(stderr, "urcu_defer_free: defer_register_thread failed\n");
		exit(3);
	}
	pthread_barrier_wait(&start);
	online();
	uint64_t left = qs_period;
#ifdef URCU_QSBR
	uint64_t until_flush = DEFER_FLUSH;
#endif
	for (uint64_t i = 0; i < n; i++) {
		F(read_lock)();
		void *node = new_node(sizeof(struct plain_node), i);
		F(read_unlock)();
#ifdef URCU_QSBR
		if (defer_offline) {
			urcu_qsbr_thread_offline();
			urcu_qsbr_defer_rcu(drop_node, node);
			urcu_qsbr_thread_online();
			continue; /* offline was a quiescent state */
		}
		urcu_qsbr_defer_rcu(drop_node, node);
		if (--until_flush == 0) {
			until_flush = DEFER_FLUSH;
			urcu_qsbr_thread_offline();
			urcu_qsbr_defer_barrier_thread();
			urcu_qsbr_thread_online();
			left = qs_period; /* offline was a quiescent state */
			continue;
		}
#else
		F(defer_rcu)(drop_node, node);
#endif
		quiescent(&left);
	}
	offline();
	F(defer_unregister_thread)();
}

static void *producer(void *arg)
{
	uint64_t t = (uintptr_t)arg;
	uint64_t n = per_thread + (t < remainder);
	F(register_thread)();
	offline();
	if (use_defer) {
		defer_producer(n);
		F(unregister_thread)();
		return NULL;
	}
	pthread_barrier_wait(&start);
	online();
	uint64_t left = qs_period;
	for (uint64_t i = 0; i < n; i++) {
		F(read_lock)();
		struct node *node = new_node(sizeof(struct node), i);
		F(call_rcu)(&node->head, free_node);
		F(read_unlock)();
		quiescent(&left);
	}
	offline();
	F(unregister_thread)();
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc == 4 ? argv[1] : "";
	int known = !strcmp(mode, "global") || !strcmp(mode, "percpu") || !strcmp(mode, "defer");
#ifdef URCU_QSBR
	known = known || !strcmp(mode, "defer-offline");
	if (!known) {
		fprintf(stderr, "usage: [URCU_QS_PERIOD=N] urcu_qsbr_defer_free "
				"global|percpu|defer|defer-offline THREADS OPS\n");
		return 2;
	}
	const char *period = getenv("URCU_QS_PERIOD");
	if (period)
		qs_period = count("urcu_qsbr_defer_free", period, "URCU_QS_PERIOD", 1u << 20);
#else
	if (!known) {
		fprintf(stderr, "usage: urcu_defer_free global|percpu|defer THREADS OPS\n");
		return 2;
	}
	if (getenv("URCU_QS_PERIOD")) {
		fprintf(stderr, "urcu_defer_free: URCU_QS_PERIOD is the qsbr build's (-DURCU_QSBR); "
				"this is the memb build\n");
		return 2;
	}
#endif
	/* Bounds as defer_free.rs's ("-1" was 2^64 - 1 ops: a run without
	 * end). */
	uint64_t threads = count("urcu_defer_free", argv[2], "THREADS", 4096);
	uint64_t ops = count("urcu_defer_free", argv[3], "OPS", 1000000000000ull);
	if (!strcmp(mode, "percpu") && F(create_all_cpu_call_rcu_data)(0) != 0) {
		perror("urcu_defer_free: create_all_cpu_call_rcu_data");
		return 3;
	}
	use_defer = !strncmp(mode, "defer", 5);
	defer_offline = !strcmp(mode, "defer-offline");
	per_thread = ops / threads;
	remainder = ops % threads;
	pthread_t *tids = calloc(threads, sizeof(*tids));
	pthread_barrier_init(&start, NULL, threads + 1);
	for (uint64_t t = 0; t < threads; t++) {
		int e = pthread_create(&tids[t], NULL, producer, (void *)(uintptr_t)t);
		if (e) {
			thread_error("urcu_defer_free", t + 1, e);
			return 3;
		}
	}
	struct timespec t0, t1;
	pthread_barrier_wait(&start);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
	/* Registered (and, under qsbr, offline: rcu_barrier goes offline
	 * itself, rcu_defer_barrier waits a grace period holding a mutex). */
	F(register_thread)();
	offline();
	if (use_defer)
		F(defer_barrier)();
	else
		F(barrier)();
	F(unregister_thread)();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long left = atomic_load(&refs);
	if (left != 0) {
		fprintf(stderr, "urcu_defer_free: %ld callbacks did not run\n", left);
		return 1;
	}
	uint64_t ns = (t1.tv_sec - t0.tv_sec) * 1000000000ull + (t1.tv_nsec - t0.tv_nsec);
	printf("urcu-%s%s %llu %llu %llu %.2f\n", FLAVOUR, mode, (unsigned long long)threads,
	       (unsigned long long)ops, (unsigned long long)ns, (double)ns / ops);
	return 0;
}
