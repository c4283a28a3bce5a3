/* Unit tests for st_heap: the trim decision as tables of (time, open
 * connections, due?) ticks on an injected clock, and one real release. */
#include "st_heap.h"
#include "st_test.h"
#include "st_util.h"

#include <stdio.h>
#include <stdlib.h>

struct tick {
	uint64_t ms, open;
	bool due;
};

/* Feeds the ticks in order; a due tick is followed by a trim at its count. */
static void
run(const char *what, const struct tick *ticks, size_t n)
{
	st_heap_trim *t = st_heap_trim_new();

	ST_CHECK(t != NULL);
	for (size_t i = 0; i < n && t != NULL; i++) {
		bool due = st_heap_trim_due(t, ticks[i].ms, ticks[i].open);

		if (due != ticks[i].due) {
			fprintf(stderr, "%s: tick %zu (%llu ms, %llu open): due %d, expected %d\n", what, i,
				(unsigned long long)ticks[i].ms, (unsigned long long)ticks[i].open, due, ticks[i].due);
			ST_CHECK(0);
		}
		if (due)
			st_heap_trim_done(t, ticks[i].open);
	}
	st_heap_trim_free(t);
}

#define Q ST_HEAP_TRIM_QUIET_MS

static void
t_burst_then_quiet(void)
{
	/* 10,000 streams connect in 2 s, then stand still: one trim, QUIET_MS after the last rise */
	const struct tick k[] = {
		{ 1000, 0, false },
		{ 1500, 2500, false },
		{ 2000, 5000, false },
		{ 2500, 7500, false },
		{ 3000, 10000, false },
		{ 3050, 10000, false },
		{ 3000 + Q - 50, 10000, false },
		{ 3000 + Q, 10000, true },
		{ 3000 + Q + 50, 10000, false },
		{ 9000 + Q, 10000, false },
		{ 90000 + Q, 10000, false },
	};
	run("burst", k, ST_ARRAY_LEN(k));
}

static void
t_small_changes_never_trim(void)
{
	/* 999 streams, and a few coming and going: below the step, never */
	const struct tick k[] = {
		{ 1000, 999, false },
		{ 5000, 999, false },
		{ 60000, 990, false },
		{ 200000, 999, false },
	};
	run("small", k, ST_ARRAY_LEN(k));
}

static void
t_drop_trims_too(void)
{
	/* 5,000 open, trimmed; 3,000 close at once: trimmed again once still */
	const uint64_t t1 = 1000 + Q + 100;
	const struct tick k[] = {
		{ 1000, 5000, false },         { 1000 + Q, 5000, true }, { t1, 2000, false },
		{ t1 + Q - 100, 2000, false }, { t1 + Q, 2000, true },   { t1 + Q + 500, 2000, false },
	};
	run("drop", k, ST_ARRAY_LEN(k));
}

static void
t_up_and_back_down(void)
{
	/* 2,000 connect and leave again before a tick is still: the excursion counts */
	const struct tick k[] = {
		{ 1000, 0, false },           { 1200, 2000, false }, { 1400, 0, false },
		{ 1400 + Q - 100, 0, false }, { 1400 + Q, 0, true },
	};
	run("excursion", k, ST_ARRAY_LEN(k));
}

static void
t_churn_waits_at_most_max_wait(void)
{
	/* the count never holds still (a steady reconnect storm): one trim MAX_WAIT_MS after the step */
	struct tick k[200];
	size_t n = 0;
	uint64_t ms = 1000;

	for (; n < sizeof(k) / sizeof(k[0]); n++, ms += 400) {
		k[n].ms = ms;
		k[n].open = 5000 + (n % 2) * 200; /* moves by more than a tenth of the step each tick */
		k[n].due = false;
	}
	/* the step was reached at the first tick (5,000 from 0): due MAX_WAIT_MS later */
	for (size_t i = 0; i < n; i++)
		if (k[i].ms - k[0].ms >= ST_HEAP_TRIM_MAX_WAIT_MS) {
			k[i].due = true;
			break;
		}
	run("churn", k, n);
}

static void
t_release(void)
{
	/* blocks freed in the middle of the heap: malloc_trim gives their pages back */
	enum { N = 4096 };
	void **p = calloc(N, sizeof(void *));

	ST_CHECK(p != NULL);
	for (size_t i = 0; p != NULL && i < N; i++)
		p[i] = malloc(4000);
	for (size_t i = 0; p != NULL && i + 1 < N; i++) /* the last stays: the pages are inside the heap */
		free(p[i]);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* the sanitizer's allocator served these, not glibc's heap: nothing for malloc_trim to give back */
	fprintf(stderr, "  release not checked under a sanitizer (its allocator is not glibc's)\n");
	(void)st_heap_release();
#else
	ST_CHECK(st_heap_release());
#endif
	if (p != NULL)
		free(p[N - 1]);
	free(p);
}

int
main(void)
{
	ST_RUN(t_burst_then_quiet);
	ST_RUN(t_small_changes_never_trim);
	ST_RUN(t_drop_trims_too);
	ST_RUN(t_up_and_back_down);
	ST_RUN(t_churn_waits_at_most_max_wait);
	ST_RUN(t_release);
	return st_test_done();
}
