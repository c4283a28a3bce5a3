/*
 * st_metrics: counters, gauges and histograms rendered in the Prometheus
 * text exposition format (version 0.0.4).
 *
 * Registration happens at start on the main thread and returns a handle
 * that lives as long as the registry.  Updates are lock-free atomics and may
 * come from any thread (nng callbacks count rejections).  Rendering takes a
 * consistent-enough snapshot (each value read atomically) from any thread.
 *
 * One metric family (name) may be registered several times with different
 * label sets: st_metrics_counter(m, "studio_sse_dropped_total",
 * "reason=\"overflow\"", "help").  # HELP / # TYPE are printed once per
 * family, families in registration order.
 */
#ifndef ST_METRICS_H
#define ST_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct st_metrics st_metrics;
typedef struct st_counter st_counter;
typedef struct st_gauge st_gauge;
typedef struct st_histogram st_histogram;

st_metrics *st_metrics_new(void);
void st_metrics_free(st_metrics *m); /* NULL-safe; frees every handle */

/* labels: NULL or the inside of the braces, e.g. "reason=\"overflow\"". */
st_counter *st_metrics_counter(st_metrics *m, const char *name, const char *labels, const char *help);
st_gauge *st_metrics_gauge(st_metrics *m, const char *name, const char *labels, const char *help);
/* bounds: ascending upper bounds (the +Inf bucket is added); copied. */
st_histogram *st_metrics_histogram(st_metrics *m, const char *name, const char *labels, const char *help,
				   const double *bounds, size_t n_bounds);

void st_counter_add(st_counter *c, uint64_t n);
static inline void
st_counter_inc(st_counter *c)
{
	st_counter_add(c, 1);
}
uint64_t st_counter_get(const st_counter *c);

void st_gauge_set(st_gauge *g, int64_t v);
void st_gauge_add(st_gauge *g, int64_t delta);
int64_t st_gauge_get(const st_gauge *g);
/* Adds 1 unless the value is already >= max (checked and added in one atomic step,
 * so threads sharing g never pass max together); true when it added. */
bool st_gauge_inc_below(st_gauge *g, int64_t max);

void st_histogram_observe(st_histogram *h, double v);

/* Renders every metric; the caller frees the returned NUL-terminated text. */
char *st_metrics_render(st_metrics *m, size_t *len);

#endif
