/*
 * The thread-exit storm micro in plain C: the baseline herd's pthread
 * backend is compared with (scripts/micro-vs-herd.sh).
 *
 * As posted on the kernel list: WAVES waves of PER_WAVE threads; a ring
 * of SLOTS wave slots holds the handles; after spawning wave i, wave
 * i-LAG is cancelled (pthread_cancel, deferred: it acts at sleep); no
 * thread is ever joined or detached. Each thread spins SPIN iterations,
 * then sleeps. Default attributes. Like the original, a failing
 * pthread_create is not retried; unlike it, failures are counted and
 * printed, so the two programs can be checked to do the same work.
 *
 * Usage: storm_micro [WAVES PER_WAVE SLOTS LAG SPIN SLEEP_MS]
 *        (defaults: 1000 100 20 5 1000000 1000, the posted settings)
 *
 * The spin loop: `__asm__ volatile("" : "+r"(i))` keeps the loop (gcc
 * may not delete it) without adding memory traffic: inc/cmp/jne on a
 * register, the same code herd's spin::spin compiles to.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long spin_iters = 1000000;
static unsigned long sleep_ms = 1000;

static void *body(void *arg)
{
	(void)arg;
	for (unsigned long i = 0; i < spin_iters; i++)
		__asm__ volatile("" : "+r"(i));
	struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
	nanosleep(&ts, NULL); /* the cancellation point */
	return NULL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	unsigned long waves = 1000, per_wave = 100, slots = 20, lag = 5;
	if (argc > 1) waves = strtoul(argv[1], NULL, 0);
	if (argc > 2) per_wave = strtoul(argv[2], NULL, 0);
	if (argc > 3) slots = strtoul(argv[3], NULL, 0);
	if (argc > 4) lag = strtoul(argv[4], NULL, 0);
	if (argc > 5) spin_iters = strtoul(argv[5], NULL, 0);
	if (argc > 6) sleep_ms = strtoul(argv[6], NULL, 0);
	if (lag >= slots || !waves || !per_wave) {
		fprintf(stderr, "usage: %s [WAVES PER_WAVE SLOTS LAG SPIN SLEEP_MS] (LAG < SLOTS)\n", argv[0]);
		return 2;
	}
	pthread_t *tids = calloc(slots * per_wave, sizeof(pthread_t));
	char *ok = calloc(slots * per_wave, 1);
	unsigned long created = 0, failed = 0, cancelled = 0;
	int last_err = 0;
	double t0 = now();
	for (unsigned long i = 0; i < waves; i++) {
		unsigned long s = (i % slots) * per_wave;
		for (unsigned long j = 0; j < per_wave; j++) {
			int rc = pthread_create(&tids[s + j], NULL, body, NULL);
			ok[s + j] = rc == 0;
			if (rc == 0)
				created++;
			else {
				failed++;
				last_err = rc;
			}
		}
		if (i >= lag) {
			unsigned long o = ((i - lag) % slots) * per_wave;
			for (unsigned long j = 0; j < per_wave; j++)
				if (ok[o + j] && pthread_cancel(tids[o + j]) == 0)
					cancelled++;
		}
	}
	double t1 = now();
	printf("wall_s %.3f created %lu failed %lu (%s) cancelled %lu\n", t1 - t0, created, failed,
	       failed ? strerror(last_err) : "-", cancelled);
	return 0;
}
