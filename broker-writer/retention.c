/*
 * retention: a timer and a chain of statements.
 *
 * The work is in SQL (broker_retain4) so that the horizon update and the
 * chunk's delete are one transaction: an edge that reads the horizon never
 * sees a missing seq above it.  This module only paces the chunks: the next
 * chunk is sent from the previous one's result callback, so one statement
 * at a time, and a round stops at the first chunk that deletes nothing (done,
 * or another replica holds the lock), at an error (logged; the next round
 * retries), or when the connection is down.
 *
 * After every round, also one that failed, one more statement measures how
 * far behind retention is (studio_writer_retention_lag_seconds): the first
 * row above the horizon that is not the newest event (which is never
 * deleted) is the oldest row retention could delete; by how much it is
 * older than --retention is the lag.  Two probes of the primary key, so it
 * costs nothing whatever the table's size, and a retention that keeps
 * failing, or is slower than the rows expire, shows as a lag that grows
 * (the "retention behind" alert, docs/operations.md).
 */
#include "retention.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_util.h"

struct retention {
	st_pgconn *sink;
	struct event *timer;
	char lock_key[24];
	char interval[48]; /* "N milliseconds", or "" for keep-all */
	char chunk[16];
	st_counter *deleted;
	st_gauge *lag;
	uint64_t round_deleted;
};

static const char retain_sql[] = "SELECT broker_retain4($1::bigint, $2::interval, $3::int)";
/* No row: nothing is deletable (empty, or only the newest event left): no lag. */
static const char lag_sql[] =
	"SELECT greatest(0, floor(extract(epoch FROM now() - $1::interval - o.created_at)))::bigint"
	" FROM (SELECT e.created_at FROM broker_event e"
	" WHERE e.seq > (SELECT m.horizon FROM broker_meta m WHERE m.id = 1)"
	" AND e.seq < (SELECT max(x.seq) FROM broker_event x) ORDER BY e.seq LIMIT 1) o";

static void
arm(retention *r, int ms)
{
	struct timeval tv = st_timeval_ms(ms > 0 ? (uint64_t)ms : 0);

	evtimer_add(r->timer, &tv);
}

static void chunk_send(retention *r);

static void
on_lag(void *arg, PGresult *res, const char *err)
{
	retention *r = arg;

	if (res == NULL) {
		st_warn("retention lag: %s", err);
	} else if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		char msg[512];

		st_pgconn_result_text(res, msg, sizeof(msg));
		st_warn("retention lag: %s", msg);
	} else {
		st_gauge_set(r->lag, PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0);
	}
	arm(r, RETENTION_PERIOD_MS);
}

static void
round_end(retention *r)
{
	const char *vals[1] = { r->interval };

	if (r->round_deleted > 0)
		st_info("retention: deleted %" PRIu64 " events", r->round_deleted);
	r->round_deleted = 0;
	/* keep-all has no lag; down or busy: measured after the next round */
	if (r->interval[0] == '\0' ||
	    st_pgconn_send(r->sink, lag_sql, 1, NULL, vals, NULL, NULL, 0, on_lag, r) != ST_OK)
		arm(r, RETENTION_PERIOD_MS);
}

static void
on_result(void *arg, PGresult *res, const char *err)
{
	retention *r = arg;
	long n;

	if (res == NULL) {
		st_warn("retention: %s", err);
		round_end(r);
		return;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		char msg[512];

		st_pgconn_result_text(res, msg, sizeof(msg));
		st_warn("retention: %s", msg);
		round_end(r);
		return;
	}
	n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
	if (n <= 0) {
		round_end(r);
		return;
	}
	r->round_deleted += (uint64_t)n;
	st_counter_add(r->deleted, (uint64_t)n);
	chunk_send(r);
}

static void
chunk_send(retention *r)
{
	const char *vals[3] = { r->lock_key, r->interval[0] ? r->interval : NULL, r->chunk };

	if (st_pgconn_send(r->sink, retain_sql, 3, NULL, vals, NULL, NULL, 0, on_result, r) != ST_OK)
		round_end(r); /* down or busy: try next round */
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	chunk_send(arg);
}

st_err
retention_new(struct event_base *base, st_pgconn *sink, int64_t lock_key, int64_t retention_ms, st_metrics *m,
	      retention **out)
{
	retention *r = st_xcalloc(1, sizeof(*r));

	r->sink = sink;
	r->deleted = st_metrics_counter(m, "studio_writer_retention_deleted_total", NULL,
					"Events deleted by retention (by this replica)");
	r->lag =
		st_metrics_gauge(m, "studio_writer_retention_lag_seconds", NULL,
				 "Seconds by which the oldest deletable event is older than --retention (0: caught up, "
				 "or keep-all)");
	snprintf(r->lock_key, sizeof(r->lock_key), "%" PRId64, lock_key);
	if (retention_ms > 0)
		snprintf(r->interval, sizeof(r->interval), "%" PRId64 " milliseconds", retention_ms);
	snprintf(r->chunk, sizeof(r->chunk), "%d", RETENTION_CHUNK);
	if ((r->timer = evtimer_new(base, on_timer, r)) == NULL) {
		free(r);
		return ST_ESYS;
	}
	arm(r, RETENTION_FIRST_MS);
	*out = r;
	return ST_OK;
}

void
retention_free(retention *r)
{
	if (r == NULL)
		return;
	event_free(r->timer);
	free(r);
}
