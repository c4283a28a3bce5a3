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
