/* reresolve_test: the lookup backoff of writer names, as tables of events and delays. */
#include "reresolve.h"

#include <stdio.h>

#include "st_test.h"
#include "st_util.h"

/* One step: a lookup applied ('w': whole, 's': short of pipes), a pipe lost
 * ('l'), or the name whole again as a pipe came up ('u'; want_ms unused). */
typedef struct step {
	char ev;
	unsigned want_ms;
} step;

static void
run(const char *name, const step *steps, size_t n, unsigned min_ms, unsigned max_ms)
{
	reresolve r = { 0 };

	for (size_t i = 0; i < n; i++) {
		unsigned got;

		if (steps[i].ev == 'u') {
			reresolve_whole(&r);
			continue;
		}
		got = steps[i].ev == 'l' ? reresolve_lost_ms(&r, min_ms, max_ms)
		                         : reresolve_next_ms(&r, steps[i].ev == 'w', min_ms, max_ms);
		if (got != steps[i].want_ms)
			fprintf(stderr, "%s: step %zu ('%c'): got %u ms, want %u ms (attempt now %u)\n", name, i,
			        steps[i].ev, got, steps[i].want_ms, r.attempt);
		ST_CHECK(got == steps[i].want_ms);
	}
}

static void
t_whole_is_regular(void)
{
	static const step s[] = { { 'w', 10000 }, { 'w', 10000 }, { 'w', 10000 } };

	run("whole", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_loss_then_backoff_then_whole(void)
{
	/* A writer replaced on a new address: lost, the name still lists the
	 * old one for two lookups, then the new one is dialed and connects. */
	static const step s[] = {
		{ 'w', 10000 }, { 'l', 250 }, { 's', 500 }, { 's', 1000 }, { 's', 2000 }, { 'w', 10000 },
		/* whole again: the next loss is quick again */
		{ 'l', 250 }, { 'w', 10000 },
	};

	run("replaced", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_capped_and_no_restart_while_quick(void)
{
	static const step s[] = {
		{ 'l', 250 }, { 's', 500 },
		{ 'l', 0 }, /* a second loss during the backoff leaves the timer */
		{ 's', 1000 }, { 's', 2000 }, { 's', 4000 }, { 's', 8000 }, { 's', 10000 }, { 's', 10000 },
		/* at the regular interval with an address that stays dead: a new loss starts over */
		{ 'l', 250 }, { 'l', 0 }, { 's', 500 },
	};

	run("capped", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_second_writer_right_after(void)
{
	/* writer1 replaced: quick lookups; its new address connects (whole);
	 * writer2 goes before the next lookup: start over, not wait for 4 s. */
	static const step s[] = {
		{ 'l', 250 }, { 's', 500 }, { 's', 1000 }, { 'u', 0 }, { 'l', 250 }, { 's', 500 },
		/* a loss while climbing, not whole since: left alone */
		{ 'l', 0 }, { 's', 1000 }, { 'w', 10000 }, { 'u', 0 }, { 'l', 250 },
	};

	run("second", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_short_from_start(void)
{
	/* The first lookup dialed addresses that are still connecting. */
	static const step s[] = { { 's', 250 }, { 's', 500 }, { 'w', 10000 } };

	run("start", s, ST_ARRAY_LEN(s), 250, 10000);
}

static void
t_saturates(void)
{
	reresolve r = { 0 };

	for (unsigned i = 0; i < 1000; i++)
		ST_CHECK(reresolve_next_ms(&r, false, 250, 10000) <= 10000);
	ST_CHECK(reresolve_next_ms(&r, false, 250, 10000) == 10000);
	ST_CHECK(reresolve_lost_ms(&r, 250, 10000) == 250);
	/* min above max: never more often than max */
	r = (reresolve){ 0 };
	ST_CHECK(reresolve_lost_ms(&r, 20000, 10000) == 10000);
	ST_CHECK(reresolve_next_ms(&r, false, 20000, 10000) == 10000);
}

int
main(void)
{
	ST_RUN(t_whole_is_regular);
	ST_RUN(t_loss_then_backoff_then_whole);
	ST_RUN(t_capped_and_no_restart_while_quick);
	ST_RUN(t_second_writer_right_after);
	ST_RUN(t_short_from_start);
	ST_RUN(t_saturates);
	return st_test_done();
}
