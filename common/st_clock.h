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
#include <sys/time.h>

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

/* ms as a struct timeval, the unit of libevent's timers. */
struct timeval st_timeval_ms(uint64_t ms);

/*
 * A doubling back-off for reconnects and retries: st_backoff_next gives
 * the delay to wait now (min_ms the first time) and doubles the next one
 * up to max_ms; st_backoff_reset after a success starts again from min_ms.
 * No jitter: its users retry one resource each (their database connection,
 * a flush), not a shared one at a common instant.
 */
typedef struct st_backoff {
	uint32_t min_ms, max_ms;
	uint32_t next_ms;
} st_backoff;

void st_backoff_init(st_backoff *b, uint32_t min_ms, uint32_t max_ms);
uint32_t st_backoff_next(st_backoff *b);
void st_backoff_reset(st_backoff *b);

/*
 * The same doubling for a retry against a shared resource, stateless and
 * with equal jitter: the wait before retry number attempt (1, 2, ...) is
 * half of min(cap_ms, base_ms * 2^(attempt-1)) plus a random part of the
 * other half (rnd: 64 random bits), so clients that failed together do not
 * come back together.  Never 0 when base_ms > 0.
 */
uint32_t st_backoff_jitter_ms(uint32_t attempt, uint32_t base_ms, uint32_t cap_ms, uint64_t rnd);

#endif
