/*
 * pgpool: N connections (st_pgconn, each its own state machine: resolve
 * off the loop, connect, session setup, reconnect with back-off) and a
 * bounded two-priority queue of queries for them.
 *
 * Queries wait in two intrusive FIFO lists (fills before replays), bounded
 * in total.  Submitting only makes a "kick" event active; the kick hands
 * queued queries to idle connections, so submit never re-enters a
 * connection's code from inside one of its callbacks.  A connection that
 * comes up kicks too; one whose query ends takes the next at once.
 * Cancelling a queued query unlinks it; cancelling one in flight only
 * marks it, and its result is discarded when it ends (there is no
 * non-blocking cancel in libpq 15; the query's deadline or statement_timeout
 * bounds it).
 *
 * Every query has a deadline (see on_sweep); a connection stuck mid-query
 * counts as up, so the wait-for-a-connection rule alone would not end it.
 * The first `reserved` connections run fills only (pgpool_reserve_fills):
 * a fill never waits behind replays that hold every other connection.
 */
#include "pgpool.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_dlist.h"
#include "st_log.h"
#include "st_pgconn.h"
#include "st_util.h"

/*
 * enable_bitmapscan off: every query of the edge reads an index range in
 * order and stops at a LIMIT.  On a table filled faster than autovacuum
 * analyses it (a burst, a bulk load), the planner's estimate of the range
 * is tiny and it picks a bitmap scan of the WHOLE range plus a top-N sort:
 * a replay chunk of 1,000 rows read 50,000 (80 ms instead of 3 ms, measured
 * on 100,000 fresh rows).  Without bitmap scans the ordered index scan is
 * what is left, whatever the statistics say.
 */
#define SETUP_SQL "SET statement_timeout = '15s'; SET client_encoding = 'UTF8'; SET enable_bitmapscan = off"
#define SWEEP_MS 250u

/* Q_DUE: taken out of the queue by the sweep, its callback not run yet (on the sweep's own list). */
enum query_state { Q_QUEUED, Q_DUE, Q_INFLIGHT, Q_CALLING };

struct pgpool_query {
	st_dlink link; /* on queue[prio] while Q_QUEUED, on the sweep's list while Q_DUE */
	pgpool *pool;
	int prio;
	enum query_state state;
	bool cancelled;
	char *sql;
	int nparams;
	const char **vals;
	int *lens;
	int *fmts;
	int binary;
	pgpool_fn fn;
	void *arg;
	uint64_t queued_at;   /* monotonic ms of the submit */
	uint32_t deadline_ms; /* from queued_at, queue wait included */
};

/* One connection of the pool and the query it runs. */
typedef struct slot {
	pgpool *pool;
	st_pgconn *pg;        /* owned */
	pgpool_query *q;      /* in flight, owned until its end is delivered */
	bool deadline_passed; /* the sweep dropped the connection for q's deadline */
} slot;

struct pgpool {
	st_dlink queue[2]; /* by priority, oldest first (pgpool_query.link) */
	size_t queued;
	size_t inflight;
	unsigned n;
	slot *slots; /* owned, n of them */
	struct event *kick;
	struct event *sweep; /* fails queries past their deadline */
	const st_clock *clock;
	unsigned reserved; /* slots[0 .. reserved-1] take only PGPOOL_PRIO_FILL queries */
	atomic_uint up_n;  /* connections up, kept by on_slot_state: pgpool_ready from any thread */
};

static void dispatch(pgpool *p);

static void
query_free(pgpool_query *q)
{
	free(q); /* one allocation holds the arrays and the copies */
}

/* Runs the callback of a finished query (unless cancelled) and frees it. */
static void
deliver(pgpool_query *q, st_err err, const PGresult *res)
{
	if (!q->cancelled) {
		q->state = Q_CALLING;
		q->fn(q->arg, err, res);
	}
	query_free(q);
}

static void
on_slot_state(void *arg, bool up)
{
	slot *s = arg;

	/* st_pgconn reports each transition once (down only after up), so the count stays exact. */
	if (up) {
		atomic_fetch_add(&s->pool->up_n, 1);
		event_active(s->pool->kick, 0, 0);
	} else {
		atomic_fetch_sub(&s->pool->up_n, 1);
	}
}

/* The end of a slot's query: a result, or none when the connection was lost or dropped. */
static void
on_slot_result(void *arg, PGresult *res, const char *err)
{
	slot *s = arg;
	pgpool *p = s->pool;
	pgpool_query *q = s->q;

	(void)err; /* logged by st_pgconn */
	s->q = NULL;
	p->inflight--;
	if (res == NULL) {
		deliver(q, s->deadline_passed ? ST_ETIMEDOUT : ST_EDB, NULL);
	} else if (!st_pgconn_result_ok(res)) {
		char msg[512];
		st_pgconn_result_text(res, msg, sizeof(msg));
		st_warn("pgpool: query failed: %s", msg);
		deliver(q, ST_EDB, res);
	} else {
		deliver(q, ST_OK, res);
	}
	s->deadline_passed = false;
	/* The callback may have queued work; this connection is free for it now. */
	dispatch(p);
}

static void
send_next(slot *s, pgpool_query *q)
{
	pgpool *p = s->pool;

	q->state = Q_INFLIGHT;
	s->q = q;
	p->inflight++;
	if (st_pgconn_send(s->pg, q->sql, q->nparams, NULL, q->vals, q->lens, q->fmts, q->binary, on_slot_result, s) !=
	    ST_OK) {
		/* the connection broke as the query went out (st_pgconn logged it); no callback will come */
		s->q = NULL;
		p->inflight--;
		deliver(q, ST_EDB, NULL);
	}
}

/* Takes a queued query out of its list. */
static void
queue_unlink(pgpool *p, pgpool_query *q)
{
	st_dlink_unlink(&q->link);
	p->queued--;
}

/* The next query slots[idx] may run: a reserved connection takes fills only. */
static pgpool_query *
queue_pop(pgpool *p, unsigned idx)
{
	int lists = idx < p->reserved ? 1 : 2;

	for (int i = 0; i < lists; i++) {
		st_dlink *n = st_dlist_first(&p->queue[i]);

		if (n != NULL) {
			pgpool_query *q = ST_CONTAINER_OF(n, pgpool_query, link);

			queue_unlink(p, q);
			return q;
		}
	}
	return NULL;
}

static void
dispatch(pgpool *p)
{
	for (unsigned i = 0; i < p->n && p->queued > 0; i++) {
		slot *s = &p->slots[i];
		pgpool_query *q;

		if (st_pgconn_idle(s->pg) && (q = queue_pop(p, i)) != NULL)
			send_next(s, q);
	}
}

/*
 * Deadlines.  A query that is past its deadline (counted from the submit,
 * the wait for a connection included) ends with ST_ETIMEDOUT: queued, it
 * is taken out of the queue; in flight, its connection is dropped
 * (PQfinish closes the socket at once, the server aborts the query at its
 * next write or at statement_timeout) and made again.  libpq 15 has only a
 * blocking PQcancel, which opens a new connection to the very server that
 * does not answer; dropping needs no thread and frees the slot now.
 * While no connection is up, a queued query also ends after
 * PGPOOL_WAIT_MS, with ST_EUNAVAIL.
 *
 * Expired queued queries are unlinked first, marked Q_DUE (a cancel from a
 * callback then only marks them) and called back afterwards, since a
 * callback may submit or cancel.
 */
static void
on_sweep(evutil_socket_t fd, short what, void *arg)
{
	pgpool *p = arg;
	uint64_t now = st_clock_now(p->clock);
	bool ready = pgpool_ready(p);
	st_dlink expired, *n, *next;

	(void)fd;
	(void)what;
	st_dlist_init(&expired);
	for (int i = 0; i < 2; i++) {
		for (n = st_dlist_first(&p->queue[i]); n != NULL; n = next) {
			pgpool_query *q = ST_CONTAINER_OF(n, pgpool_query, link);
			uint64_t waited = now - q->queued_at;

			next = st_dlist_after(&p->queue[i], n);
			if (waited < q->deadline_ms && (ready || waited < PGPOOL_WAIT_MS))
				continue;
			queue_unlink(p, q);
			q->state = Q_DUE;
			st_dlist_push_back(&expired, &q->link); /* in submit order */
		}
	}
	for (unsigned i = 0; i < p->n; i++) {
		slot *s = &p->slots[i];

		if (s->q != NULL && now - s->q->queued_at >= s->q->deadline_ms) {
			s->deadline_passed = true;
			st_pgconn_drop(s->pg, "query deadline passed"); /* delivers ST_ETIMEDOUT from inside */
		}
	}
	/* A callback may cancel a later one (only marked while Q_DUE): each is taken off before its call. */
	while ((n = st_dlist_first(&expired)) != NULL) {
		pgpool_query *q = ST_CONTAINER_OF(n, pgpool_query, link);
		uint64_t waited = now - q->queued_at;

		st_dlink_unlink(n);
		if (waited >= q->deadline_ms)
			st_warn("pgpool: a query waited %llu ms for a connection, past its deadline",
				(unsigned long long)waited);
		deliver(q, waited >= q->deadline_ms ? ST_ETIMEDOUT : ST_EUNAVAIL, NULL);
	}
}

static void
on_kick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	dispatch(arg);
}

st_err
pgpool_new(struct event_base *base, const char *dsn, unsigned n, pgpool **out)
{
	pgpool *p;

	if (n == 0 || n > PGPOOL_MAX_CONNS)
		return ST_EINVAL;
	p = st_xcalloc(1, sizeof(*p));
	p->n = n;
	p->clock = st_clock_system();
	st_dlist_init(&p->queue[0]);
	st_dlist_init(&p->queue[1]);
	p->slots = st_xcalloc(n, sizeof(slot));
	p->kick = event_new(base, -1, 0, on_kick, p);
	p->sweep = event_new(base, -1, EV_PERSIST, on_sweep, p);
	ST_ASSERT(p->kick != NULL && p->sweep != NULL);
	for (unsigned i = 0; i < n; i++) {
		char name[32];
		st_pgconn_opts o = {
			.name = name, .application_name = "edge-gateway", .setup_sql = SETUP_SQL, .log_notices = true
		}; /* deadlines: the sweep's, per query */
		st_err rv;

		snprintf(name, sizeof(name), "pgpool: connection %u", i);
		p->slots[i].pool = p;
		if ((rv = st_pgconn_new(base, dsn, &o, on_slot_state, &p->slots[i], &p->slots[i].pg)) != ST_OK) {
			pgpool_free(p);
			return rv;
		}
	}
	{
		struct timeval tv = st_timeval_ms(SWEEP_MS);

		event_add(p->sweep, &tv);
	}
	*out = p;
	return ST_OK;
}

pgpool_query *
pgpool_submit(pgpool *p, enum pgpool_prio prio, const char *sql, int nparams, const char *const *vals, const int *lens,
	      const int *fmts, int result_binary, pgpool_fn fn, void *arg)
{
	size_t sql_len = strlen(sql) + 1, data = 0, size;
	pgpool_query *q;
	char *at;

	ST_ASSERT(fn != NULL && (prio == PGPOOL_PRIO_FILL || prio == PGPOOL_PRIO_REPLAY));
	if (p->queued >= PGPOOL_MAX_QUEUED || nparams < 0 || (unsigned)nparams > PGPOOL_MAX_PARAMS)
		return NULL;
	for (int i = 0; i < nparams; i++) {
		size_t len;
		if (vals[i] == NULL)
			continue;
		if (fmts != NULL && fmts[i] == 1) {
			if (lens == NULL || lens[i] < 0)
				return NULL;
			len = (size_t)lens[i];
		} else {
			len = strlen(vals[i]) + 1;
		}
		if (len > PGPOOL_MAX_PARAM_BYTES - data)
			return NULL;
		data += len;
	}
	size = sizeof(*q) + (size_t)nparams * (sizeof(char *) + 2 * sizeof(int)) + sql_len + data;
	q = st_xcalloc(1, size);
	q->pool = p;
	q->prio = prio;
	q->state = Q_QUEUED;
	q->nparams = nparams;
	q->binary = result_binary ? 1 : 0;
	q->fn = fn;
	q->arg = arg;
	q->queued_at = st_clock_now(p->clock);
	q->deadline_ms = prio == PGPOOL_PRIO_FILL ? PGPOOL_FILL_DEADLINE_MS : PGPOOL_REPLAY_DEADLINE_MS;
	q->vals = (const char **)(q + 1);
	q->lens = (int *)(q->vals + nparams);
	q->fmts = q->lens + nparams;
	at = (char *)(q->fmts + nparams);
	q->sql = at;
	memcpy(at, sql, sql_len);
	at += sql_len;
	for (int i = 0; i < nparams; i++) {
		bool bin = fmts != NULL && fmts[i] == 1;
		size_t len;
		q->fmts[i] = bin ? 1 : 0;
		if (vals[i] == NULL) {
			q->vals[i] = NULL;
			continue;
		}
		len = bin ? (size_t)lens[i] : strlen(vals[i]) + 1;
		q->lens[i] = bin ? lens[i] : 0;
		memcpy(at, vals[i], len);
		q->vals[i] = at;
		at += len;
	}
	if (nparams == 0) {
		q->vals = NULL;
		q->lens = NULL;
		q->fmts = NULL;
	}

	st_dlist_push_back(&p->queue[prio], &q->link);
	p->queued++;
	event_active(p->kick, 0, 0);
	return q;
}

void
pgpool_cancel(pgpool_query *q)
{
	pgpool *p;

	if (q == NULL)
		return;
	switch (q->state) {
	case Q_QUEUED:
		p = q->pool;
		queue_unlink(p, q);
		query_free(q);
		return;
	case Q_DUE:
	case Q_INFLIGHT: q->cancelled = true; return;
	case Q_CALLING: return;
	}
}

void
pgpool_set_deadline(pgpool_query *q, uint32_t ms)
{
	q->deadline_ms = ms;
}

void
pgpool_reserve_fills(pgpool *p, unsigned k)
{
	p->reserved = k < p->n ? k : p->n - 1;
}

void
pgpool_set_clock(pgpool *p, const st_clock *clock)
{
	p->clock = clock;
}

bool
pgpool_ready(const pgpool *p)
{
	return atomic_load(&((pgpool *)p)->up_n) > 0;
}

size_t
pgpool_up(const pgpool *p)
{
	size_t n = 0;

	for (unsigned i = 0; i < p->n; i++)
		n += st_pgconn_up(p->slots[i].pg);
	return n;
}

size_t
pgpool_queued(const pgpool *p)
{
	return p->queued;
}

size_t
pgpool_inflight(const pgpool *p)
{
	return p->inflight;
}

void
pgpool_free(pgpool *p)
{
	pgpool_query *q;

	if (p == NULL)
		return;
	for (unsigned i = 0; i < p->n; i++) {
		st_pgconn_free(p->slots[i].pg); /* no callbacks */
		if (p->slots[i].q != NULL)
			query_free(p->slots[i].q);
	}
	while ((q = queue_pop(p, p->n)) != NULL)
		query_free(q);
	if (p->kick != NULL)
		event_free(p->kick);
	if (p->sweep != NULL)
		event_free(p->sweep);
	free(p->slots);
	free(p);
}
