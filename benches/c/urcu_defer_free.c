/*
 * liburcu's call_rcu on the realistic deferred callback, the counterpart of
 * benches/examples/defer_free.rs: each operation enters a read section,
 * allocates a node, takes a reference on a shared object (an atomic count,
 * the Rust side's Arc clone) and hands the node to call_rcu, whose callback
 * frees it and drops the reference. After the producers finish,
 * urcu_memb_barrier() (urcu_memb_defer_barrier() for "defer") waits for
 * every callback; the count must be back to 0.
 *
 *     gcc -O2 -pthread -o urcu_defer_free urcu_defer_free.c -lurcu-memb
 *     ./urcu_defer_free MODE THREADS OPS
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
 * what it queued) before it exits. The read side is the urcu-memb flavour
 * (membarrier on the writer side, as exitq), with the inlined
 * (_LGPL_SOURCE) read_lock/read_unlock.
 *
 * THREADS is 1..=4096, OPS 1..=10^12 (bench_args.h).
 * Prints: urcu-MODE THREADS OPS WALL_NS NS_PER_OP. Exit 2 on bad usage, 3
 * if a thread cannot be created (the limits named), 1 if a callback did
 * not run.
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
#include <urcu/urcu-memb.h>

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
static int use_defer;                   /* MODE "defer" */
static uint64_t per_thread, remainder;
static pthread_barrier_t start;

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

static void *defer_producer(uint64_t n)
{
	if (urcu_memb_defer_register_thread() != 0) {
		fprintf(stderr, "urcu_defer_free: defer_register_thread failed\n");
		exit(3);
	}
	pthread_barrier_wait(&start);
	for (uint64_t i = 0; i < n; i++) {
		urcu_memb_read_lock();
		void *node = new_node(sizeof(struct plain_node), i);
		urcu_memb_read_unlock();
		urcu_memb_defer_rcu(drop_node, node);
	}
	urcu_memb_defer_unregister_thread();
	urcu_memb_unregister_thread();
	return NULL;
}

static void *producer(void *arg)
{
	uint64_t t = (uintptr_t)arg;
	uint64_t n = per_thread + (t < remainder);
	urcu_memb_register_thread();
	if (use_defer)
		return defer_producer(n);
	pthread_barrier_wait(&start);
	for (uint64_t i = 0; i < n; i++) {
		urcu_memb_read_lock();
		struct node *node = new_node(sizeof(struct node), i);
		urcu_memb_call_rcu(&node->head, free_node);
		urcu_memb_read_unlock();
	}
	urcu_memb_unregister_thread();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "global") && strcmp(argv[1], "percpu") &&
			  strcmp(argv[1], "defer"))) {
		fprintf(stderr, "usage: urcu_defer_free global|percpu|defer THREADS OPS\n");
		return 2;
	}
	/* Bounds as defer_free.rs's ("-1" was 2^64 - 1 ops: a run without
	 * end). */
	uint64_t threads = count("urcu_defer_free", argv[2], "THREADS", 4096);
	uint64_t ops = count("urcu_defer_free", argv[3], "OPS", 1000000000000ull);
	if (!strcmp(argv[1], "percpu") && urcu_memb_create_all_cpu_call_rcu_data(0) != 0) {
		perror("urcu_defer_free: create_all_cpu_call_rcu_data");
		return 3;
	}
	use_defer = !strcmp(argv[1], "defer");
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
	urcu_memb_register_thread();
	if (use_defer)
		urcu_memb_defer_barrier();
	else
		urcu_memb_barrier();
	urcu_memb_unregister_thread();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long left = atomic_load(&refs);
	if (left != 0) {
		fprintf(stderr, "urcu_defer_free: %ld callbacks did not run\n", left);
		return 1;
	}
	uint64_t ns = (t1.tv_sec - t0.tv_sec) * 1000000000ull + (t1.tv_nsec - t0.tv_nsec);
	printf("urcu-%s %llu %llu %llu %.2f\n", argv[1], (unsigned long long)threads,
	       (unsigned long long)ops, (unsigned long long)ns, (double)ns / ops);
	return 0;
}
