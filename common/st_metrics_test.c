/* Unit tests for st_metrics: exact exposition text, atomics under threads. */
#include "st_metrics.h"
#include "st_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static void
t_render_exact(void)
{
	st_metrics *m = st_metrics_new();
	static const double b[] = { 0.005, 0.01, 0.1, 1, 2.5 };
	st_counter *ov = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"overflow\"", "Frames dropped.");
	st_gauge *open = st_metrics_gauge(m, "studio_streams_open", NULL, "Open streams.");
	st_counter *co = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"coalesced\"", "ignored");
	st_histogram *h = st_metrics_histogram(m, "studio_writer_flush_seconds", NULL, "Flush time.", b, 5);
	st_histogram *hl = st_metrics_histogram(m, "studio_x_seconds", "a=\"1\"", "Line\\one\ntwo", b, 2);
	st_counter *plain = st_metrics_counter(m, "studio_plain_total", "", "Plain.");
	char *text;
	size_t len = 0;
	const char *want = "# HELP studio_sse_dropped_total Frames dropped.\n"
			   "# TYPE studio_sse_dropped_total counter\n"
			   "studio_sse_dropped_total{reason=\"overflow\"} 3\n"
			   "studio_sse_dropped_total{reason=\"coalesced\"} 18446744073709551615\n"
			   "# HELP studio_streams_open Open streams.\n"
			   "# TYPE studio_streams_open gauge\n"
			   "studio_streams_open -2\n"
			   "# HELP studio_writer_flush_seconds Flush time.\n"
			   "# TYPE studio_writer_flush_seconds histogram\n"
			   "studio_writer_flush_seconds_bucket{le=\"0.005\"} 2\n"
			   "studio_writer_flush_seconds_bucket{le=\"0.01\"} 2\n"
			   "studio_writer_flush_seconds_bucket{le=\"0.1\"} 3\n"
			   "studio_writer_flush_seconds_bucket{le=\"1\"} 4\n"
			   "studio_writer_flush_seconds_bucket{le=\"2.5\"} 4\n"
			   "studio_writer_flush_seconds_bucket{le=\"+Inf\"} 5\n"
			   "studio_writer_flush_seconds_sum 4.5675\n"
			   "studio_writer_flush_seconds_count 5\n"
			   "# HELP studio_x_seconds Line\\\\one\\ntwo\n"
			   "# TYPE studio_x_seconds histogram\n"
			   "studio_x_seconds_bucket{a=\"1\",le=\"0.005\"} 0\n"
			   "studio_x_seconds_bucket{a=\"1\",le=\"0.01\"} 0\n"
			   "studio_x_seconds_bucket{a=\"1\",le=\"+Inf\"} 0\n"
			   "studio_x_seconds_sum{a=\"1\"} 0\n"
			   "studio_x_seconds_count{a=\"1\"} 0\n"
			   "# HELP studio_plain_total Plain.\n"
			   "# TYPE studio_plain_total counter\n"
			   "studio_plain_total 0\n";

	st_counter_inc(ov);
	st_counter_add(ov, 2);
	st_counter_add(co, UINT64_MAX);
	st_gauge_set(open, 5);
	st_gauge_add(open, -7);
	st_histogram_observe(h, 0.0);    /* le 0.005 */
	st_histogram_observe(h, 0.005);  /* inclusive bound */
	st_histogram_observe(h, 0.0625); /* le 0.1 */
	st_histogram_observe(h, 1.0);    /* le 1 */
	st_histogram_observe(h, 3.5);    /* +Inf */
	(void)hl;
	(void)plain;
	text = st_metrics_render(m, &len);
	ST_CHECK_MEM(text, len, want);
	ST_CHECK_EQ_U64(st_counter_get(ov), 3);
	ST_CHECK(st_gauge_get(open) == -2);
	free(text);
	st_metrics_free(m);
	st_metrics_free(NULL);
}

static void
t_empty(void)
{
	st_metrics *m = st_metrics_new();
	size_t len = 99;
	char *text = st_metrics_render(m, &len);

	ST_CHECK_EQ_U64(len, 0);
	ST_CHECK_STR(text, "");
	free(text);
	st_metrics_free(m);
}

static void
t_double_format(void)
{
	st_metrics *m = st_metrics_new();
	static const double b[] = { 1e-9, 0.25, 1e6 };
	st_histogram *h = st_metrics_histogram(m, "h", NULL, "", b, 3);
	char *text;
	size_t len;

	st_histogram_observe(h, 0.1);
	st_histogram_observe(h, 0.2);
	text = st_metrics_render(m, &len);
	ST_CHECK(strstr(text, "h_bucket{le=\"1e-09\"} 0\n") != NULL);
	ST_CHECK(strstr(text, "h_bucket{le=\"0.25\"} 2\n") != NULL);
	ST_CHECK(strstr(text, "h_bucket{le=\"1e+06\"} 2\n") != NULL);
	/* 0.1 + 0.2 is not 0.3 in binary; the shortest exact text shows it. */
	ST_CHECK(strstr(text, "h_sum 0.30000000000000004\n") != NULL);
	ST_CHECK(strstr(text, "# HELP h \n# TYPE h histogram\n") != NULL);
	free(text);
	st_metrics_free(m);
}

/* Sums print like Go's strconv.FormatFloat(v, 'g', -1, 64). */
static void
t_double_table(void)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{ 200000, "s_sum 200000\n" }, { 1234567, "s_sum 1.234567e+06\n" },
		{ 0.0001, "s_sum 0.0001\n" }, { 0.00001, "s_sum 1e-05\n" },
		{ -2.5, "s_sum -2.5\n" },     { 123.456, "s_sum 123.456\n" },
		{ INFINITY, "s_sum +Inf\n" }, { NAN, "s_sum NaN\n" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		st_metrics *m = st_metrics_new();
		st_histogram *h = st_metrics_histogram(m, "s", NULL, "", NULL, 0);
		char *text;
		size_t len;

		st_histogram_observe(h, cases[i].v);
		text = st_metrics_render(m, &len);
		ST_CHECK(strstr(text, cases[i].want) != NULL);
		ST_CHECK(strstr(text, "s_bucket{le=\"+Inf\"} 1\n") != NULL);
		if (strstr(text, cases[i].want) == NULL)
			fprintf(stderr, "want %s got:\n%s", cases[i].want, text);
		free(text);
		st_metrics_free(m);
	}
}

#define NTHREADS 4
#define PER_THREAD 100000

struct race {
	st_counter *c;
	st_gauge *g;
	st_histogram *h;
};

static void *
hammer(void *arg)
{
	struct race *r = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		st_counter_inc(r->c);
		st_gauge_add(r->g, 1);
		st_histogram_observe(r->h, 0.5);
	}
	return NULL;
}

static void
t_threads(void)
{
	st_metrics *m = st_metrics_new();
	static const double b[] = { 1 };
	struct race r = { st_metrics_counter(m, "c_total", NULL, "c"), st_metrics_gauge(m, "g", NULL, "g"),
			  st_metrics_histogram(m, "h", NULL, "h", b, 1) };
	pthread_t t[NTHREADS];
	char *text;
	size_t len;

	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&t[i], NULL, hammer, &r);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	ST_CHECK_EQ_U64(st_counter_get(r.c), NTHREADS * PER_THREAD);
	ST_CHECK(st_gauge_get(r.g) == NTHREADS * PER_THREAD);
	text = st_metrics_render(m, &len);
	/* Every 0.5 is exact, so a lost CAS update would show in the sum. */
	ST_CHECK(strstr(text, "h_sum 200000\n") != NULL);
	if (strstr(text, "h_sum 200000\n") == NULL)
		fprintf(stderr, "%s", text);
	ST_CHECK(strstr(text, "h_count 400000\n") != NULL);
	ST_CHECK(strstr(text, "h_bucket{le=\"1\"} 400000\n") != NULL);
	free(text);
	st_metrics_free(m);
}

/*
 * --max-streams across loops: threads take and give back slots under a
 * bound; with check-then-add two threads could both take the last slot.
 */
#define SLOT_MAX 8
struct slots {
	st_gauge *g;
	_Atomic int64_t over; /* times a taker saw more than SLOT_MAX held */
};

static void *
taker(void *arg)
{
	struct slots *sl = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		if (!st_gauge_inc_below(sl->g, SLOT_MAX))
			continue;
		if (st_gauge_get(sl->g) > SLOT_MAX)
			atomic_fetch_add(&sl->over, 1);
		st_gauge_add(sl->g, -1);
	}
	return NULL;
}

static void
t_inc_below(void)
{
	st_metrics *m = st_metrics_new();
	struct slots sl = { st_metrics_gauge(m, "open", NULL, "o"), 0 };
	pthread_t t[NTHREADS];

	st_gauge_set(sl.g, SLOT_MAX - 1);
	ST_CHECK(st_gauge_inc_below(sl.g, SLOT_MAX));
	ST_CHECK(!st_gauge_inc_below(sl.g, SLOT_MAX));
	ST_CHECK(st_gauge_get(sl.g) == SLOT_MAX);
	st_gauge_set(sl.g, SLOT_MAX - 2); /* two slots free, NTHREADS racing for them */
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&t[i], NULL, taker, &sl);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	ST_CHECK(atomic_load(&sl.over) == 0);
	ST_CHECK(st_gauge_get(sl.g) == SLOT_MAX - 2);
	st_metrics_free(m);
}

int
main(void)
{
	ST_RUN(t_render_exact);
	ST_RUN(t_empty);
	ST_RUN(t_double_format);
	ST_RUN(t_double_table);
	ST_RUN(t_threads);
	ST_RUN(t_inc_below);
	return st_test_done();
}
