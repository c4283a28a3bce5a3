/* st_heap: the trim decision (st_heap.h) and glibc's malloc_trim. */
#include "st_heap.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct st_heap_trim {
	uint64_t base;      /* open connections at the last trim (0 at start) */
	uint64_t moved;     /* the largest distance from base since then */
	uint64_t moved_ms;  /* when moved first reached the step; 0: it has not */
	uint64_t quiet_ref; /* the count the current still period started at */
	uint64_t quiet_ms;  /* when that period started */
};

st_heap_trim *
st_heap_trim_new(void)
{
	return calloc(1, sizeof(st_heap_trim));
}

void
st_heap_trim_free(st_heap_trim *t)
{
	free(t);
}

static uint64_t
dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

bool
st_heap_trim_due(st_heap_trim *t, uint64_t now_ms, uint64_t open)
{
	if (dist(open, t->quiet_ref) > ST_HEAP_TRIM_STEP / 10) {
		t->quiet_ref = open;
		t->quiet_ms = now_ms;
	}
	if (dist(open, t->base) > t->moved)
		t->moved = dist(open, t->base);
	if (t->moved < ST_HEAP_TRIM_STEP)
		return false;
	if (t->moved_ms == 0)
		t->moved_ms = now_ms != 0 ? now_ms : 1;
	return now_ms - t->quiet_ms >= ST_HEAP_TRIM_QUIET_MS || now_ms - t->moved_ms >= ST_HEAP_TRIM_MAX_WAIT_MS;
}

void
st_heap_trim_done(st_heap_trim *t, uint64_t open)
{
	t->base = open;
	t->moved = 0;
	t->moved_ms = 0;
}

bool
st_heap_release(void)
{
	return malloc_trim(0) == 1;
}

uint64_t
st_heap_rss_bytes(void)
{
	unsigned long long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	long page = sysconf(_SC_PAGESIZE);

	if (f == NULL)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &rss) != 2 || page <= 0)
		rss = 0;
	fclose(f);
	return (uint64_t)rss * (uint64_t)page;
}
