/*
 * A preload that gives a process HERD_EXTRA_MAPS more mappings before
 * main: single anonymous pages, alternately writable and read-only so
 * that no two merge. scripts/micro-vs-herd.sh --layouts uses it to vary
 * the shape of the process's VMA tree (the kernel's maple tree) from
 * round to round, the same way for every program of the round: past
 * vm.max_map_count the cost of each failing pthread_create (an mmap, a
 * failing mprotect and a munmap at the edge of the tree) depends on that
 * shape much more than on the program (docs/results-herd.md).
 *
 * Build: gcc -O2 -shared -fPIC -o extra_maps.so extra_maps.c
 * Use:   LD_PRELOAD=./extra_maps.so HERD_EXTRA_MAPS=3 PROGRAM ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

__attribute__((constructor)) static void extra_maps(void)
{
	const char *s = getenv("HERD_EXTRA_MAPS");
	long n = s ? strtol(s, NULL, 10) : 0;
	for (long i = 0; i < n; i++) {
		int prot = (i & 1) ? PROT_READ : PROT_READ | PROT_WRITE;
		if (mmap(NULL, 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
			perror("extra_maps: mmap");
			exit(125);
		}
	}
}
