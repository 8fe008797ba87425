/*
 * Thread churn with liburcu's call_rcu, the counterpart of
 * benches/examples/churn.rs: waves of short-lived threads, each
 * registering with urcu-memb, entering a read section, handing 16 freshly
 * allocated 32-byte nodes to call_rcu (the callback checks, frees and
 * counts each), unregistering and exiting. Wave i - LAG is joined after
 * wave i has been started. urcu_memb_barrier() then waits for every
 * callback; the count must be complete.
 *
 *     gcc -O2 -pthread -o urcu_churn urcu_churn.c -lurcu-memb
 *     ./urcu_churn MODE [WAVES] [PER_WAVE] [LAG]
 *
 * MODE: "urcu" (call_rcu, liburcu's default call_rcu thread) or "none"
 * (the same threads free their nodes at once: C's floor). Defaults: 200
 * waves of 100 threads, lag 2, default thread attributes.
 *
 * WAVES is at most 10^6, PER_WAVE and LAG 20000 (bench_args.h).
 * Prints: MODE THREADS WALL_NS NS_PER_THREAD. Exit 2 on bad usage, 3 if a
 * thread cannot be created (the limits named), 1 if a callback did not
 * run.
 */
#define _LGPL_SOURCE
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <urcu/urcu-memb.h>

#include "bench_args.h"

#define PER_THREAD 16

struct node {
	uint64_t key, value, next, seq; /* 32 bytes, as the Rust node */
	struct rcu_head head;           /* call_rcu's link (16 bytes more) */
};

static _Atomic uint64_t freed;
static int use_rcu;

static void check_free_count(struct node *n)
{
	if ((n->key ^ 0x5555) != n->value)
		abort();
	free(n);
	atomic_fetch_add_explicit(&freed, 1, memory_order_relaxed);
}

static void free_node(struct rcu_head *h)
{
	check_free_count(caa_container_of(h, struct node, head));
}

static struct node *new_node(uint64_t i)
{
	struct node *n = malloc(sizeof(*n));
	if (!n)
		abort();
	n->key = i;
	n->value = i ^ 0x5555;
	n->next = 0;
	n->seq = i;
	return n;
}

static void *churn_thread(void *arg)
{
	uint64_t s = (uintptr_t)arg;
	if (use_rcu) {
		urcu_memb_register_thread();
		urcu_memb_read_lock();
		for (uint64_t i = 0; i < PER_THREAD; i++)
			urcu_memb_call_rcu(&new_node(s * PER_THREAD + i)->head, free_node);
		urcu_memb_read_unlock();
		urcu_memb_unregister_thread();
	} else {
		for (uint64_t i = 0; i < PER_THREAD; i++) {
			struct node *volatile n = new_node(s * PER_THREAD + i);
			check_free_count(n);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 5 || (strcmp(argv[1], "urcu") && strcmp(argv[1], "none"))) {
		fprintf(stderr, "usage: urcu_churn urcu|none [WAVES] [PER_WAVE] [LAG]\n");
		return 2;
	}
	use_rcu = !strcmp(argv[1], "urcu");
	/* Bounds as churn.rs's: no product below wraps (LAG = 2^64 - 1 made
	 * lag + 1 zero, and `w % slots` a division by zero). */
	unsigned long waves = argc > 2 ? count("urcu_churn", argv[2], "WAVES", 1000000) : 200;
	unsigned long per_wave = argc > 3 ? count("urcu_churn", argv[3], "PER_WAVE", 20000) : 100;
	unsigned long lag = argc > 4 ? count("urcu_churn", argv[4], "LAG", 20000) : 2;
	if (per_wave * (lag + 1) > 20000) {
		fprintf(stderr, "urcu_churn: PER_WAVE x (LAG + 1) threads alive at once is more than 20000\n");
		return 2;
	}
	unsigned long slots = lag + 1;
	pthread_t *tids = calloc(slots * per_wave, sizeof(*tids));
	if (!tids)
		return 3;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t seq = 0;
	for (unsigned long w = 0; w < waves; w++) {
		pthread_t *wave = tids + (w % slots) * per_wave;
		for (unsigned long k = 0; k < per_wave; k++) {
			int e = pthread_create(&wave[k], NULL, churn_thread, (void *)(uintptr_t)seq++);
			if (e) {
				thread_error("urcu_churn", seq, e);
				return 3;
			}
		}
		if (w >= lag) {
			pthread_t *old = tids + ((w - lag) % slots) * per_wave;
			for (unsigned long k = 0; k < per_wave; k++)
				pthread_join(old[k], NULL);
		}
	}
	for (unsigned long w = waves > lag ? waves - lag : 0; w < waves; w++) {
		pthread_t *old = tids + (w % slots) * per_wave;
		for (unsigned long k = 0; k < per_wave; k++)
			pthread_join(old[k], NULL);
	}
	if (use_rcu) {
		urcu_memb_register_thread();
		urcu_memb_barrier();
		urcu_memb_unregister_thread();
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t expected = (uint64_t)waves * per_wave * PER_THREAD;
	uint64_t got = atomic_load(&freed);
	if (got != expected) {
		fprintf(stderr, "urcu_churn: %llu of %llu callbacks ran\n",
			(unsigned long long)got, (unsigned long long)expected);
		return 1;
	}
	uint64_t ns = (t1.tv_sec - t0.tv_sec) * 1000000000ull + (t1.tv_nsec - t0.tv_nsec);
	printf("urcu-%s %llu %llu %.0f\n", argv[1], (unsigned long long)(waves * per_wave),
	       (unsigned long long)ns, (double)ns / (waves * per_wave));
	return 0;
}
