/* reresolve_test: the lookup backoff of writer names, as tables of events and delays. */
#include "reresolve.h"

#include <stdio.h>

#include "st_test.h"
#include "st_util.h"

/* One step: a lookup applied ('k') or a pipe change ('p'), with the name's
 * addresses dialed and pipes up after it, and the delay wanted (0 for 'p':
 * leave the timer). */
typedef struct step {
	char ev;
	unsigned dialed, up;
	unsigned want_ms;
} step;

static void
run(const char *name, const step *steps, size_t n, unsigned min_ms, unsigned max_ms)
{
	reresolve r = { 0 };

	for (size_t i = 0; i < n; i++) {
		const step *s = &steps[i];
		unsigned got = s->ev == 'p' ? reresolve_pipe_ms(&r, s->dialed, s->up, min_ms, max_ms)
					    : reresolve_next_ms(&r, s->dialed, s->up, min_ms, max_ms);

		if (got != s->want_ms)
			fprintf(stderr,
				"%s: step %zu ('%c', %u dialed, %u up): got %u ms, want %u ms (attempt %u, want %u)\n",
				name, i, s->ev, s->dialed, s->up, got, s->want_ms, r.attempt, r.want);
		ST_CHECK(got == s->want_ms);
	}
}

static void
t_start_then_regular(void)
{
	/* The first lookup dials two addresses that are still connecting. */
	static const step s[] = {
		{ 'k', 2, 0, 250 }, { 'p', 2, 1, 0 }, { 'p', 2, 2, 0 }, { 'k', 2, 2, 10000 }, { 'k', 2, 2, 10000 },
	};

	run("start", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_replaced_on_new_address(void)
{
	/* A writer's pod goes: its pipe is lost, the name drops it (every
	 * dialed address is up, but one fewer than before: still short), the
	 * new pod's address is listed, dialed, connects. */
	static const step s[] = {
		{ 'k', 2, 2, 10000 }, { 'p', 2, 1, 250 }, { 'k', 1, 1, 500 },   { 'k', 1, 1, 1000 },
		{ 'k', 2, 1, 2000 },  { 'p', 2, 2, 0 },   { 'k', 2, 2, 10000 },
	};

	run("replaced", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_second_writer_right_after(void)
{
	/* writer1 replaced and its new address up (whole again) before the
	 * next lookup; writer2 goes: start over, not wait for writer1's 4 s. */
	static const step s[] = {
		{ 'k', 2, 2, 10000 },
		{ 'p', 2, 1, 250 },
		{ 'k', 1, 1, 500 },
		{ 'k', 2, 1, 1000 },
		{ 'p', 2, 2, 0 },
		{ 'p', 2, 1, 250 },
		{ 'k', 1, 1, 500 },
		/* a loss while climbing, not whole since: left alone */
		{ 'p', 1, 0, 0 },
		{ 'k', 2, 1, 1000 },
		{ 'p', 2, 2, 0 },
		{ 'k', 2, 2, 10000 },
	};

	run("second", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_removed_for_good_settles(void)
{
	/* Three writers scaled to two: short through the backoff, then the
	 * name settles at two and is whole at the regular interval. */
	static const step s[] = {
		{ 'k', 3, 3, 10000 }, { 'p', 3, 2, 250 },  { 'k', 2, 2, 500 },  { 'k', 2, 2, 1000 },
		{ 'k', 2, 2, 2000 },  { 'k', 2, 2, 4000 }, { 'k', 2, 2, 8000 }, { 'k', 2, 2, 10000 },
		{ 'k', 2, 2, 10000 }, { 'p', 2, 1, 250 },
	};

	run("settles", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_dead_address_capped(void)
{
	/* An address listed but never up: quick lookups climb to the regular
	 * interval and stay there; another loss there starts over once. */
	static const step s[] = {
		{ 'k', 2, 1, 250 },   { 'k', 2, 1, 500 },  { 'p', 2, 1, 0 },    { 'k', 2, 1, 1000 },
		{ 'k', 2, 1, 2000 },  { 'k', 2, 1, 4000 }, { 'k', 2, 1, 8000 }, { 'k', 2, 1, 10000 },
		{ 'k', 2, 1, 10000 }, { 'p', 2, 0, 250 },  { 'p', 2, 0, 0 },    { 'k', 2, 0, 500 },
	};

	run("dead", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_bounds(void)
{
	reresolve r = { 0 };

	for (unsigned i = 0; i < 1000; i++)
		ST_CHECK(reresolve_next_ms(&r, 1, 0, 250, 10000) <= 10000);
	ST_CHECK(reresolve_next_ms(&r, 1, 0, 250, 10000) == 10000);
	ST_CHECK(reresolve_pipe_ms(&r, 1, 0, 250, 10000) == 250);
	/* nothing dialed (the name resolved to nothing yet) is never whole */
	r = (reresolve){ 0 };
	ST_CHECK(reresolve_next_ms(&r, 0, 0, 250, 10000) == 250);
	/* min above max: never more often than max */
	r = (reresolve){ 0 };
	ST_CHECK(reresolve_pipe_ms(&r, 1, 0, 20000, 10000) == 10000);
	ST_CHECK(reresolve_next_ms(&r, 1, 0, 20000, 10000) == 10000);
}

int
main(void)
{
	ST_RUN(t_start_then_regular);
	ST_RUN(t_replaced_on_new_address);
	ST_RUN(t_second_writer_right_after);
	ST_RUN(t_removed_for_good_settles);
	ST_RUN(t_dead_address_capped);
	ST_RUN(t_bounds);
	return st_test_done();
}
