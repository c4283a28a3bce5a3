/* st_tlsstat: failed TLS handshakes per listener, from nng's listener statistics (st_tlsstat.h). */
#include "st_tlsstat.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_util.h"

/*
 * The kinds of failed handshake: refused (reported by st_tls_engine, one
 * call per refusal) and nng 1.5's listener statistics "timeout" and
 * "proto" (st_tlsstat.h).  nng's "auth" is not read: it counts the same
 * refusals, fewer of them.
 */
enum { R_REFUSED, R_TIMEOUT, R_PROTO, R_N };
static const char *const stat_names[R_N] = { NULL, "timeout", "proto" };

/* The labels a process counts: one per listener role. */
#define MAX_LABELS 8

/* Refusals reported by the engine, per label, not yet polled; and the dialers' log limit.  Guarded by rmu, */
/* taken on nng's threads with a connection locked: never held while calling nng. */
static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER;
static struct refusals {
	const char *label; /* NULL: a free slot */
	uint64_t n;
	char last[ST_TLSSTAT_REASON_MAX];
} refusals[MAX_LABELS];
static struct {
	uint64_t last_ns; /* when the last dialer line was written (0: never) */
	uint64_t skipped; /* refusals since, not written */
} dial_log;

/* Everything below is guarded by mu: st_tls_listen tracks from any thread, scrapes poll from any thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct tracked {
	const char *label; /* NULL: a free slot */
	nng_listener l;
	uint64_t seen[R_N]; /* nng's values already counted */
} tracked[ST_TLSSTAT_MAX];

struct st_tlsstat {
	struct event *timer; /* owned */
	uint64_t interval_ms;
	size_t n;
	const char *labels[MAX_LABELS];               /* borrowed, static strings */
	st_counter *counters[MAX_LABELS];             /* owned by the registry; NULL when nng has no statistics */
	uint64_t pending[MAX_LABELS][R_N];            /* failures since the last summary line (mu) */
	char last[MAX_LABELS][ST_TLSSTAT_REASON_MAX]; /* the latest refusal's reason since the last line (mu) */
};

void
st_tlsstat_track(const char *label, nng_listener l)
{
	size_t i;

	pthread_mutex_lock(&mu);
	for (i = 0; i < ST_TLSSTAT_MAX && tracked[i].label != NULL; i++)
		;
	/* Full: forget the closed ones now (nng no longer knows their id) rather than at the next poll. */
	for (size_t j = 0; i == ST_TLSSTAT_MAX && j < ST_TLSSTAT_MAX; j++) {
		size_t sz;

		if (nng_listener_get_size(tracked[j].l, NNG_OPT_RECVMAXSZ, &sz) == NNG_ENOENT)
			tracked[i = j].label = NULL;
	}
	if (i < ST_TLSSTAT_MAX)
		tracked[i] = (struct tracked){ .label = label, .l = l };
	pthread_mutex_unlock(&mu);
	if (i == ST_TLSSTAT_MAX)
		st_warn("tls: %s listener: more than %d tls+tcp listeners, its failed handshakes are not counted",
			label, ST_TLSSTAT_MAX);
}

static int
label_index(const st_tlsstat *s, const char *label)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->labels[i], label) == 0)
			return (int)i;
	return -1;
}

/* Adds what nng counted since the last poll for the tracked listener t, whose statistics are ls. Holds mu. */
static void
take(st_tlsstat *s, struct tracked *t, nng_stat *ls)
{
	int k = label_index(s, t->label);
	uint64_t added = 0;

	for (int r = R_REFUSED + 1; r < R_N; r++) {
		nng_stat *v = nng_stat_find(ls, stat_names[r]);
		uint64_t now = v != NULL ? nng_stat_value(v) : 0;
		uint64_t d = now >= t->seen[r] ? now - t->seen[r] : 0;

		t->seen[r] = now;
		added += d;
		if (k >= 0)
			s->pending[k][r] += d;
	}
	if (k >= 0 && added > 0)
		st_counter_add(s->counters[k], added);
}

/*
 * Walks nng's tree for "listener" scopes (children of the root in nng 1.5;
 * one level deeper is looked at too) and matches their "id" to the tracked
 * listeners.  Not nng_stat_find_listener: in nng 1.5.2 it returns the first
 * listener's statistics whatever the id (nng issue 1577, fixed in 1.10).
 * Holds mu; seen[i] is set for each tracked slot found.
 */
static void
walk(st_tlsstat *s, nng_stat *scope, int depth, bool *seen)
{
	for (nng_stat *c = nng_stat_child(scope); c != NULL; c = nng_stat_next(c)) {
		nng_stat *id;

		if (nng_stat_type(c) != NNG_STAT_SCOPE)
			continue;
		if (strcmp(nng_stat_name(c), "listener") != 0) {
			if (depth > 0)
				walk(s, c, depth - 1, seen);
			continue;
		}
		if ((id = nng_stat_find(c, "id")) == NULL)
			continue;
		for (size_t i = 0; i < ST_TLSSTAT_MAX; i++)
			if (tracked[i].label != NULL && (uint64_t)nng_listener_id(tracked[i].l) == nng_stat_value(id)) {
				take(s, &tracked[i], c);
				seen[i] = true;
			}
	}
}

/* Takes every tracked listener's new failures; forgets those nng no longer has (closed). Holds mu. */
static void
poll_locked(st_tlsstat *s, nng_stat *all)
{
	bool seen[ST_TLSSTAT_MAX] = { false };

	walk(s, all, 1, seen);
	for (size_t i = 0; i < ST_TLSSTAT_MAX; i++)
		if (!seen[i])
			tracked[i].label = NULL;
}

void
st_tlsstat_refused(const char *label, const char *reason)
{
	uint64_t now = st_clock_mono_ns(), skipped = 0;
	bool write = false;
	size_t i;

	pthread_mutex_lock(&rmu);
	if (label == NULL) {
		/* A dialer: no listener line carries it, so it is written here, at most once per interval. */
		if (dial_log.last_ns == 0 || now - dial_log.last_ns >= (uint64_t)ST_TLSSTAT_INTERVAL_MS * 1000000u) {
			write = true;
			skipped = dial_log.skipped;
			dial_log.last_ns = now;
			dial_log.skipped = 0;
		} else {
			dial_log.skipped++;
		}
	} else {
		for (i = 0; i < MAX_LABELS && refusals[i].label != NULL && strcmp(refusals[i].label, label) != 0; i++)
			;
		if (i < MAX_LABELS) {
			refusals[i].label = label;
			refusals[i].n++;
			snprintf(refusals[i].last, sizeof(refusals[i].last), "%s", reason);
		}
	}
	pthread_mutex_unlock(&rmu);
	if (write)
		st_warn("tls: handshake failed: %s (%" PRIu64 " more failed dials not logged in the last %u s)", reason,
			skipped, ST_TLSSTAT_INTERVAL_MS / 1000);
}

/* Moves the engine's refusals of s's labels into the counters and the pending summary.  Holds mu. */
static void
take_refusals(st_tlsstat *s)
{
	pthread_mutex_lock(&rmu);
	for (size_t i = 0; i < MAX_LABELS && refusals[i].label != NULL; i++) {
		int k = label_index(s, refusals[i].label);

		if (k < 0 || refusals[i].n == 0)
			continue;
		s->pending[k][R_REFUSED] += refusals[i].n;
		st_counter_add(s->counters[k], refusals[i].n);
		memcpy(s->last[k], refusals[i].last, sizeof(s->last[k]));
		refusals[i].n = 0;
	}
	pthread_mutex_unlock(&rmu);
}

void
st_tlsstat_poll(st_tlsstat *s)
{
	nng_stat *all = NULL;
	bool any = false;

	if (s == NULL || s->counters[0] == NULL)
		return;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < ST_TLSSTAT_MAX; i++)
		any |= tracked[i].label != NULL;
	/* No tls+tcp listener: nothing to pay for (the snapshot covers every pipe of the process). */
	if (any && nng_stats_get(&all) == 0)
		poll_locked(s, all);
	take_refusals(s);
	pthread_mutex_unlock(&mu);
	if (all != NULL)
		nng_stats_free(all);
}

/* The timer: poll, then one line per listener whose count rose, with the latest refusal's reason. */
static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	st_tlsstat *s = arg;
	uint64_t p[MAX_LABELS][R_N];
	char last[MAX_LABELS][ST_TLSSTAT_REASON_MAX];

	(void)fd;
	(void)what;
	st_tlsstat_poll(s);
	pthread_mutex_lock(&mu);
	memcpy(p, s->pending, sizeof(p));
	memcpy(last, s->last, sizeof(last));
	memset(s->pending, 0, sizeof(s->pending));
	memset(s->last, 0, sizeof(s->last));
	pthread_mutex_unlock(&mu);
	for (size_t k = 0; k < s->n; k++) {
		uint64_t sum = p[k][R_REFUSED] + p[k][R_TIMEOUT] + p[k][R_PROTO];

		if (sum == 0)
			continue;
		st_warn("tls: %s listener: %" PRIu64 " failed handshakes in the last %" PRIu64 " s (%" PRIu64
			" refused%s%s; %" PRIu64 " timed out; %" PRIu64 " bad SP header)",
			s->labels[k], sum, (s->interval_ms + 999) / 1000, p[k][R_REFUSED],
			last[k][0] ? ", the last: " : "", last[k], p[k][R_TIMEOUT], p[k][R_PROTO]);
	}
}

st_tlsstat *
st_tlsstat_new(struct event_base *base, st_metrics *m, const char *name, const char *const *labels, size_t n,
	       uint64_t interval_ms)
{
	st_tlsstat *s = st_xcalloc(1, sizeof(*s));
	nng_stat *probe = NULL;
	struct timeval tv = { .tv_sec = (time_t)(interval_ms / 1000),
			      .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000 };
	int rv;

	ST_ASSERT(n > 0 && n <= MAX_LABELS);
	s->interval_ms = interval_ms;
	s->n = n;
	if ((rv = nng_stats_get(&probe)) != 0) {
		st_warn("tls: nng has no statistics (%s): failed handshakes are not counted", nng_strerror(rv));
		return s;
	}
	nng_stats_free(probe);
	for (size_t i = 0; i < n; i++) {
		char label[64];

		snprintf(label, sizeof(label), "listener=\"%s\"", labels[i]);
		s->labels[i] = labels[i];
		s->counters[i] = st_metrics_counter(m, name, label,
						    "Failed TLS handshakes on a tls+tcp listener (nng's listener "
						    "statistics: refused, timed out, bad SP header)");
	}
	if ((s->timer = event_new(base, -1, EV_PERSIST, on_timer, s)) == NULL || event_add(s->timer, &tv) != 0)
		st_oom("the TLS statistics timer", sizeof(*s));
	return s;
}

void
st_tlsstat_free(st_tlsstat *s)
{
	if (s == NULL)
		return;
	if (s->timer != NULL)
		event_free(s->timer);
	free(s);
}
