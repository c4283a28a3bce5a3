/*
 * st_metrics: a registry of families, each a list of labelled series.
 *
 * DESIGN
 * Values are C11 atomics with relaxed ordering: a scrape wants each number
 * to be one that really existed, not a cross-metric snapshot, so no lock is
 * taken on the update path, which runs on nng threads and the loop alike.
 * A histogram keeps one atomic count per bucket (not cumulative: an
 * observation touches one bucket) and its sum as the bits of a double in an
 * atomic uint64, updated by compare-and-swap.  Rendering adds the buckets up
 * and prints the total as _count, so the +Inf bucket and _count always agree
 * within one scrape even while observations race with it.
 *
 * The family/series structure is only appended to, under a mutex that
 * rendering also takes, so a late registration cannot tear a scrape.
 * Numbers are printed the way Prometheus' own clients print them: integers
 * in decimal, doubles in the shortest form that reads back exactly, "+Inf".
 */
#include "st_metrics.h"
#include "st_buf.h"
#include "st_util.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_COUNTER, K_GAUGE, K_HISTOGRAM };

struct st_counter {
	_Atomic uint64_t v;
};

struct st_gauge {
	_Atomic int64_t v;
};

struct st_histogram {
	double *bounds;
	size_t n; /* finite bounds; buckets has n + 1 entries */
	_Atomic uint64_t *buckets;
	_Atomic uint64_t sum_bits;
};

struct series {
	struct series *next;
	char *labels; /* NULL or the inside of the braces */
	union {
		struct st_counter c;
		struct st_gauge g;
		struct st_histogram h;
	} u;
};

struct family {
	struct family *next;
	char *name, *help;
	enum kind kind;
	struct series *first, *last;
};

struct st_metrics {
	pthread_mutex_t mu;
	struct family *first, *last;
};

st_metrics *
st_metrics_new(void)
{
	st_metrics *m = st_xcalloc(1, sizeof(*m));

	pthread_mutex_init(&m->mu, NULL);
	return m;
}

void
st_metrics_free(st_metrics *m)
{
	struct family *f, *fn;
	struct series *s, *sn;

	if (m == NULL)
		return;
	for (f = m->first; f; f = fn) {
		fn = f->next;
		for (s = f->first; s; s = sn) {
			sn = s->next;
			if (f->kind == K_HISTOGRAM) {
				free(s->u.h.bounds);
				free((void *)s->u.h.buckets);
			}
			free(s->labels);
			free(s);
		}
		free(f->name);
		free(f->help);
		free(f);
	}
	pthread_mutex_destroy(&m->mu);
	free(m);
}

/* Finds or appends the family, then appends one series to it. */
static struct series *
add_series(st_metrics *m, const char *name, const char *labels, const char *help, enum kind kind)
{
	struct family *f;
	struct series *s = st_xcalloc(1, sizeof(*s));

	ST_ASSERT(name != NULL && name[0] != '\0');
	s->labels = labels && labels[0] ? st_xstrdup(labels) : NULL;
	pthread_mutex_lock(&m->mu);
	for (f = m->first; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			break;
	if (f == NULL) {
		f = st_xcalloc(1, sizeof(*f));
		f->name = st_xstrdup(name);
		f->help = st_xstrdup(help ? help : "");
		f->kind = kind;
		if (m->last)
			m->last->next = f;
		else
			m->first = f;
		m->last = f;
	}
	/* One name with two types is a programming error, not input. */
	ST_ASSERT(f->kind == kind);
	if (f->last)
		f->last->next = s;
	else
		f->first = s;
	f->last = s;
	pthread_mutex_unlock(&m->mu);
	return s;
}

st_counter *
st_metrics_counter(st_metrics *m, const char *name, const char *labels, const char *help)
{
	return &add_series(m, name, labels, help, K_COUNTER)->u.c;
}

st_gauge *
st_metrics_gauge(st_metrics *m, const char *name, const char *labels, const char *help)
{
	return &add_series(m, name, labels, help, K_GAUGE)->u.g;
}

st_histogram *
st_metrics_histogram(st_metrics *m, const char *name, const char *labels, const char *help, const double *bounds,
		     size_t n_bounds)
{
	struct series *s;
	struct st_histogram *h;

	for (size_t i = 1; i < n_bounds; i++)
		ST_ASSERT(bounds[i - 1] < bounds[i]);
	s = add_series(m, name, labels, help, K_HISTOGRAM);
	h = &s->u.h;
	h->n = n_bounds;
	h->bounds = st_xmalloc((n_bounds ? n_bounds : 1) * sizeof(double));
	if (n_bounds)
		memcpy(h->bounds, bounds, n_bounds * sizeof(double));
	h->buckets = st_xcalloc(n_bounds + 1, sizeof(*h->buckets));
	for (size_t i = 0; i <= n_bounds; i++)
		atomic_init(&h->buckets[i], 0);
	atomic_init(&h->sum_bits, 0); /* the bits of +0.0 */
	return h;
}

void
st_counter_add(st_counter *c, uint64_t n)
{
	atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

uint64_t
st_counter_get(const st_counter *c)
{
	return atomic_load_explicit(&((st_counter *)c)->v, memory_order_relaxed);
}

void
st_gauge_set(st_gauge *g, int64_t v)
{
	atomic_store_explicit(&g->v, v, memory_order_relaxed);
}

void
st_gauge_add(st_gauge *g, int64_t delta)
{
	atomic_fetch_add_explicit(&g->v, delta, memory_order_relaxed);
}

bool
st_gauge_inc_below(st_gauge *g, int64_t max)
{
	int64_t v = atomic_load_explicit(&g->v, memory_order_relaxed);

	do {
		if (v >= max)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&g->v, &v, v + 1, memory_order_relaxed, memory_order_relaxed));
	return true;
}

int64_t
st_gauge_get(const st_gauge *g)
{
	return atomic_load_explicit(&((st_gauge *)g)->v, memory_order_relaxed);
}

static double
bits_to_double(uint64_t b)
{
	double d;

	memcpy(&d, &b, sizeof(d));
	return d;
}

static uint64_t
double_to_bits(double d)
{
	uint64_t b;

	memcpy(&b, &d, sizeof(b));
	return b;
}

void
st_histogram_observe(st_histogram *h, double v)
{
	size_t lo = 0, hi = h->n;
	uint64_t old, upd;

	/* First bucket whose upper bound is >= v ("le" is inclusive); NaN
	 * compares false everywhere and lands in +Inf. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v <= h->bounds[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	if (isnan(v))
		lo = h->n;
	atomic_fetch_add_explicit(&h->buckets[lo], 1, memory_order_relaxed);
	old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
	do {
		upd = double_to_bits(bits_to_double(old) + v);
	} while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, upd, memory_order_relaxed,
							memory_order_relaxed));
}

/*
 * Shortest decimal text that reads back as exactly d, laid out as Go's
 * strconv.FormatFloat(d, 'g', -1, 64) does (what Prometheus' own clients
 * print): exponent form only below 1e-4 or from 1e6 up, so 200000 is
 * "200000", not C's "2e+05".
 */
static void
put_double(st_buf *b, double d)
{
	char tmp[48];
	int prec, exp10;
	const char *e;

	if (isnan(d)) {
		st_buf_puts(b, "NaN");
		return;
	}
	if (isinf(d)) {
		st_buf_puts(b, d > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	e = strchr(tmp, 'e');
	exp10 = atoi(e + 1);
	if (exp10 < -4 || exp10 >= 6) {
		st_buf_puts(b, tmp);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%.*f", prec - exp10 > 0 ? prec - exp10 : 0, d);
	st_buf_puts(b, tmp);
}

/* HELP text escapes only backslash and newline (format 0.0.4). */
static void
put_help(st_buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			st_buf_puts(b, "\\\\");
		else if (*s == '\n')
			st_buf_puts(b, "\\n");
		else
			st_buf_putc(b, *s);
	}
}

/* name[suffix]{labels[,extra]} with the braces only when there is a label. */
static void
put_name(st_buf *b, const char *name, const char *suffix, const char *labels, const char *extra)
{
	st_buf_puts(b, name);
	st_buf_puts(b, suffix);
	if (labels == NULL && extra == NULL)
		return;
	st_buf_putc(b, '{');
	if (labels)
		st_buf_puts(b, labels);
	if (labels && extra)
		st_buf_putc(b, ',');
	if (extra)
		st_buf_puts(b, extra);
	st_buf_putc(b, '}');
}

static void
render_histogram(st_buf *b, const char *name, const struct series *s)
{
	const struct st_histogram *h = &s->u.h;
	uint64_t cum = 0;
	st_buf le;

	st_buf_init(&le);
	for (size_t i = 0; i <= h->n; i++) {
		cum += atomic_load_explicit(&((struct st_histogram *)h)->buckets[i], memory_order_relaxed);
		st_buf_reset(&le);
		st_buf_puts(&le, "le=\"");
		put_double(&le, i < h->n ? h->bounds[i] : INFINITY);
		st_buf_putc(&le, '"');
		put_name(b, name, "_bucket", s->labels, le.p);
		st_buf_putc(b, ' ');
		st_buf_put_u64(b, cum);
		st_buf_putc(b, '\n');
	}
	st_buf_fini(&le);
	put_name(b, name, "_sum", s->labels, NULL);
	st_buf_putc(b, ' ');
	put_double(b,
		   bits_to_double(atomic_load_explicit(&((struct st_histogram *)h)->sum_bits, memory_order_relaxed)));
	st_buf_putc(b, '\n');
	put_name(b, name, "_count", s->labels, NULL);
	st_buf_putc(b, ' ');
	st_buf_put_u64(b, cum);
	st_buf_putc(b, '\n');
}

char *
st_metrics_render(st_metrics *m, size_t *len)
{
	static const char *types[] = { "counter", "gauge", "histogram" };
	st_buf b;

	st_buf_init(&b);
	pthread_mutex_lock(&m->mu);
	for (const struct family *f = m->first; f; f = f->next) {
		st_buf_printf(&b, "# HELP %s ", f->name);
		put_help(&b, f->help);
		st_buf_printf(&b, "\n# TYPE %s %s\n", f->name, types[f->kind]);
		for (const struct series *s = f->first; s; s = s->next) {
			if (f->kind == K_HISTOGRAM) {
				render_histogram(&b, f->name, s);
				continue;
			}
			put_name(&b, f->name, "", s->labels, NULL);
			if (f->kind == K_COUNTER)
				st_buf_printf(&b, " %llu\n", (unsigned long long)st_counter_get(&s->u.c));
			else
				st_buf_printf(&b, " %lld\n", (long long)st_gauge_get(&s->u.g));
		}
	}
	pthread_mutex_unlock(&m->mu);
	return st_buf_steal(&b, len);
}
