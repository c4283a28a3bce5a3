/*
 * hist.h: a log-linear latency histogram in microseconds (64 sub-buckets per
 * power of two, so a reported percentile is within 1.6% of the true value),
 * fixed size, no allocation.  Header-only: the bench tools are single files.
 */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#define HIST_LIN 128u
#define HIST_SUB 64u
#define HIST_EXP 40u
#define HIST_N (HIST_LIN + HIST_EXP * HIST_SUB)

typedef struct {
	uint64_t b[HIST_N];
	uint64_t count;
	uint64_t max;
	double sum;
} hist;

static inline unsigned
hist_index(uint64_t us)
{
	if (us < HIST_LIN)
		return (unsigned)us;
	unsigned e = 63u - (unsigned)__builtin_clzll(us); /* >= 7 */
	unsigned idx = HIST_LIN + (e - 7u) * HIST_SUB + (unsigned)((us >> (e - 6u)) - HIST_SUB);

	return idx < HIST_N ? idx : HIST_N - 1;
}

/* The upper bound of bucket i (the value a percentile in it reports). */
static inline uint64_t
hist_value(unsigned i)
{
	if (i < HIST_LIN)
		return i;
	unsigned e = (i - HIST_LIN) / HIST_SUB + 7u, s = (i - HIST_LIN) % HIST_SUB;

	return ((uint64_t)(HIST_SUB + s + 1) << (e - 6u)) - 1;
}

static inline void
hist_add(hist *h, uint64_t us)
{
	h->b[hist_index(us)]++;
	h->count++;
	h->sum += (double)us;
	if (us > h->max)
		h->max = us;
}

static inline uint64_t
hist_pct(const hist *h, double p)
{
	uint64_t want = (uint64_t)((double)h->count * p / 100.0 + 0.5), seen = 0;

	if (h->count == 0)
		return 0;
	if (want == 0)
		want = 1;
	for (unsigned i = 0; i < HIST_N; i++) {
		seen += h->b[i];
		if (seen >= want)
			return hist_value(i) < h->max ? hist_value(i) : h->max;
	}
	return h->max;
}

static inline void
hist_json(const hist *h, FILE *f)
{
	fprintf(f,
		"{\"count\":%" PRIu64 ",\"mean\":%.1f,\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
		",\"p999\":%" PRIu64 ",\"max\":%" PRIu64 "}",
		h->count, h->count ? h->sum / (double)h->count : 0.0, hist_pct(h, 50), hist_pct(h, 90), hist_pct(h, 99),
		hist_pct(h, 99.9), h->max);
}

#endif
