/* st_clock: the system monotonic clock and a hand-driven one for tests. */
#include "st_clock.h"

#include <time.h>

static uint64_t
system_now(void *arg)
{
	struct timespec ts;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const st_clock system_clock = { system_now, NULL };

const st_clock *
st_clock_system(void)
{
	return &system_clock;
}

uint64_t
st_clock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t
st_clock_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t
realtime_now(void *arg)
{
	(void)arg;
	return st_clock_wall_ms();
}

static const st_clock realtime_clock = { realtime_now, NULL };

const st_clock *
st_clock_realtime(void)
{
	return &realtime_clock;
}

static uint64_t
fake_now(void *arg)
{
	return ((st_clock_fake *)arg)->now;
}

void
st_clock_fake_init(st_clock_fake *f, uint64_t start_ms)
{
	f->clock.now_ms = fake_now;
	f->clock.arg = f;
	f->now = start_ms;
}

struct timeval
st_timeval_ms(uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

	return tv;
}

void
st_backoff_init(st_backoff *b, uint32_t min_ms, uint32_t max_ms)
{
	b->min_ms = min_ms;
	b->max_ms = max_ms;
	b->next_ms = min_ms;
}

uint32_t
st_backoff_next(st_backoff *b)
{
	uint32_t now = b->next_ms;

	b->next_ms = b->next_ms > b->max_ms / 2 ? b->max_ms : b->next_ms * 2;
	return now;
}

void
st_backoff_reset(st_backoff *b)
{
	b->next_ms = b->min_ms;
}

uint32_t
st_backoff_jitter_ms(uint32_t attempt, uint32_t base_ms, uint32_t cap_ms, uint64_t rnd)
{
	uint64_t step = base_ms;
	uint32_t half;

	for (uint32_t i = 1; i < attempt && step < cap_ms; i++)
		step *= 2;
	if (step > cap_ms)
		step = cap_ms;
	half = (uint32_t)(step / 2);
	return half + (uint32_t)(rnd % ((uint64_t)(step - half) + 1));
}
