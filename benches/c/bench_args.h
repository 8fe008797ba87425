/*
 * The command line and thread-creation errors of the C benchmark programs
 * (urcu_churn.c, urcu_defer_free.c), as their Rust counterparts report
 * them.
 *
 * count(): a count is digits only, 1..=max. strtoull alone takes "-1" (it
 * negates: 2^64 - 1 ops, a run that never ends), leading blanks and a
 * '+', and saturates on overflow; each caller's max keeps its products
 * (waves x per-wave x 16, per-wave x (lag + 1)) from wrapping.
 *
 * thread_error(): a failed pthread_create with the limits that can stop
 * a thread's creation and their values now (exitq::limits::diagnose reads
 * the same ones and says which was reached; `herd env` prints them all).
 * Exit 3 follows: a resource refusal.
 */
#ifndef BENCH_ARGS_H
#define BENCH_ARGS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t count(const char *prog, const char *s, const char *what, uint64_t max)
{
	char *end;
	errno = 0;
	unsigned long long v = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
	if (*s < '0' || *s > '9' || *end != '\0' || errno || v == 0 || v > max) {
		fprintf(stderr, "%s: %s must be a count in 1..=%llu, got '%s'\n", prog, what,
			(unsigned long long)max, s);
		exit(2);
	}
	return v;
}

/* The first line of FILE into buf (newline dropped), or "?". */
static const char *first_line(const char *file, char *buf, size_t n)
{
	FILE *f = fopen(file, "r");
	if (!f || !fgets(buf, (int)n, f))
		snprintf(buf, n, "?");
	else
		buf[strcspn(buf, "\n")] = '\0';
	if (f)
		fclose(f);
	return buf;
}

/* RLIMIT's soft limit as text: a number or "unlimited". */
static const char *rlimit_text(int resource, char *buf, size_t n)
{
	struct rlimit rl;
	if (getrlimit(resource, &rl) != 0)
		snprintf(buf, n, "?");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, n, "unlimited");
	else
		snprintf(buf, n, "%llu", (unsigned long long)rl.rlim_cur);
	return buf;
}

/* The pids.max of this process's cgroup (v2), or "?". */
static const char *cgroup_pids_max(char *buf, size_t n)
{
	char line[4096], path[4200];
	first_line("/proc/self/cgroup", line, sizeof(line));
	if (strncmp(line, "0::", 3) != 0) {
		snprintf(buf, n, "?");
		return buf;
	}
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/pids.max", line + 3);
	return first_line(path, buf, n);
}

static void thread_error(const char *prog, uint64_t which, int e)
{
	char nproc[32], as[32], data[32], tmax[64], maps[64], cg[64];
	/* RLIMIT_DATA: thread stacks count as data since Linux 4.7. */
	fprintf(stderr,
		"%s: cannot create thread %llu: %s (%s; the limits: RLIMIT_NPROC %s%s, "
		"cgroup pids.max %s, kernel.threads-max %s, vm.max_map_count %s, RLIMIT_AS %s, "
		"RLIMIT_DATA %s)\n",
		prog, (unsigned long long)which, strerror(e),
		e == EAGAIN ? "EAGAIN" : e == ENOMEM ? "ENOMEM" : e == EPERM ? "EPERM" : "E?",
		rlimit_text(RLIMIT_NPROC, nproc, sizeof(nproc)),
		getuid() == 0 ? " (not applied to root)" : "", cgroup_pids_max(cg, sizeof(cg)),
		first_line("/proc/sys/kernel/threads-max", tmax, sizeof(tmax)),
		first_line("/proc/sys/vm/max_map_count", maps, sizeof(maps)),
		rlimit_text(RLIMIT_AS, as, sizeof(as)), rlimit_text(RLIMIT_DATA, data, sizeof(data)));
}

#endif
