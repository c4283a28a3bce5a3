/*
 * st_clock: an injectable monotonic clock in milliseconds.
 *
 * Every timing rule (ADR-0197's 60 s window and 30 s blocked write, drain
 * spreading, sequencer waits) reads time through an st_clock so that unit
 * tests drive it by hand instead of sleeping.  The layout is public on
 * purpose: a test clock is a struct with a function pointer.
 */
#ifndef ST_CLOCK_H
#define ST_CLOCK_H

#include <stdint.h>

typedef struct st_clock {
	uint64_t (*now_ms)(void *arg);
	void *arg;
} st_clock;

static inline uint64_t
st_clock_now(const st_clock *c)
{
	return c->now_ms(c->arg);
}

/* CLOCK_MONOTONIC in ms; the static object lives for the whole process. */
const st_clock *st_clock_system(void);

/* CLOCK_MONOTONIC in ns, for measurements only (latency metrics), never
 * for a timing rule: those go through an st_clock. */
uint64_t st_clock_mono_ns(void);

/* Wall-clock time in ms since the epoch (for logs and event timestamps). */
uint64_t st_clock_wall_ms(void);

/*
 * The wall clock as an st_clock (ms since the epoch), for rules stated in
 * calendar time by someone else, such as a token's exp: it may jump, so
 * durations measured on the loop still use st_clock_system().  A test
 * gives a st_clock_fake started at an epoch time instead.
 */
const st_clock *st_clock_realtime(void);

/* A hand-driven clock for tests: st_clock_fake_init(&f, 1000); f.now += 30100; */
typedef struct st_clock_fake {
	st_clock clock;
	uint64_t now;
} st_clock_fake;

void st_clock_fake_init(st_clock_fake *f, uint64_t start_ms);

#endif
