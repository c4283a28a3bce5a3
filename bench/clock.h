/*
 * bench/clock.h: the one clock of the bench tools.  CLOCK_MONOTONIC in ns:
 * loadgen, pubgen, subgen and sweep run on one machine, so their stamps
 * compare (the publisher's stamp in an event, the reader's at arrival).
 */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
