/*
 * st_test_loop: a unit test driving a libevent loop, header only (with
 * st_test.h).  The tests of the asynchronous modules against a real server
 * (st_pgconn_test, pgpool_test, replay_test) share it:
 *
 *   struct event *tick = st_test_loop_tick(base);   20 ms persistent tick
 *   ST_CHECK(st_test_loop_until(base, is_up, conn, 10000));
 *   st_test_loop_for(base, 100);
 *   event_free(tick);
 *
 * The tick keeps EVLOOP_ONCE from blocking for long, so the deadlines are
 * re-checked; they are wide limits for a check to fail by, never a
 * measurement.
 */
#ifndef ST_TEST_LOOP_H
#define ST_TEST_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "st_clock.h"

static inline void
st_test_loop_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

/* A 20 ms persistent tick on base; the caller frees it. */
static inline struct event *
st_test_loop_tick(struct event_base *base)
{
	struct timeval tv = { 0, 20000 };
	struct event *ev = event_new(base, -1, EV_PERSIST, st_test_loop_tick_cb, NULL);

	event_add(ev, &tv);
	return ev;
}

/* Runs the loop until cond(arg) or ms pass; returns cond's last value. */
static inline bool
st_test_loop_until(struct event_base *base, bool (*cond)(void *), void *arg, uint64_t ms)
{
	uint64_t end = st_clock_now(st_clock_system()) + ms;

	while (!cond(arg) && st_clock_now(st_clock_system()) < end)
		event_base_loop(base, EVLOOP_ONCE);
	return cond(arg);
}

/* Runs the loop for ms. */
static inline void
st_test_loop_for(struct event_base *base, uint64_t ms)
{
	uint64_t end = st_clock_now(st_clock_system()) + ms;

	while (st_clock_now(st_clock_system()) < end)
		event_base_loop(base, EVLOOP_ONCE);
}

/* A cond for st_test_loop_until: the bool arg points at is true. */
static inline bool
st_test_flag(void *arg)
{
	return *(bool *)arg;
}

#endif
