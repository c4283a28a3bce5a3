/*
 * pgpool: asynchronous libpq connections driven by libevent.
 *
 * DESIGN.  Each connection is a small state machine:
 *
 *   DOWN --timer--> RESOLVING --addresses--> CONNECTING --PQconnectPoll OK--> SETUP --results--> IDLE <--> BUSY
 *     ^                 |                         |                              |                 |        |
 *     +---- fail: PQfinish, back-off (100 ms .. 5 s) -------------------------------+-----------------+--------+
 *
 * RESOLVING (only when the DSN names a host): libpq would resolve a host
 * name synchronously inside PQconnectStartParams, so the pool resolves the
 * DSN's names on a thread (st_resolve) and opens connections by address
 * (st_pgdsn: host=name, hostaddr=address).  One lookup per reconnect round:
 * a connection that needs addresses joins the lookup in flight, or starts
 * one; its answer opens every connection waiting for it.  The lookup has
 * the connect deadline (10 s, the pool's own timer).
 *
 * One persistent event per connection watches PQsocket() for what libpq
 * wants (it is re-created whenever the socket or the wanted events change,
 * since PQconnectPoll may switch sockets).  An IDLE connection watches
 * EV_READ too, so a server that goes away is noticed before a query is
 * given to it.  While a query is being sent PQflush is repeated on
 * EV_WRITE until it returns 0; results are read with PQconsumeInput /
 * PQisBusy / PQgetResult and the callback runs once PQgetResult returns
 * NULL, when the connection is already IDLE again (so a callback can submit
 * freely).  Connect and session setup are bounded by a 10 s timer on the
 * same event that times the back-off.
 *
 * Queries wait in two intrusive FIFO lists (fills before replays), bounded
 * in total.  Submitting only makes a "kick" event active; the kick hands
 * queued queries to idle connections, so submit never re-enters a
 * connection's code from inside one of its callbacks.  Cancelling a queued
 * query unlinks it; cancelling one in flight only marks it, and its result
 * is discarded when it ends (there is no non-blocking cancel in libpq 15;
 * the query's deadline or statement_timeout bounds it).
 *
 * Every query has a deadline (see on_sweep); a connection stuck mid-query
 * counts as up, so the wait-for-a-connection rule alone would not end it.
 * The first `reserved` connections run fills only (pgpool_reserve_fills):
 * a fill never waits behind replays that hold every other connection.
 */
#include "pgpool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_dlist.h"
#include "st_log.h"
#include "st_pgdsn.h"
#include "st_resolve.h"
#include "st_util.h"

#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 5000u
#define CONNECT_TIMEOUT_MS 10000u
#define SETUP_SQL "SET statement_timeout = '15s'; SET client_encoding = 'UTF8'"
#define SWEEP_MS 250u

enum conn_state { C_DOWN, C_RESOLVING, C_CONNECTING, C_SETUP, C_IDLE, C_BUSY };
/* Q_DUE: taken out of the queue by the sweep, its callback not run yet (on the sweep's own list). */
enum query_state { Q_QUEUED, Q_DUE, Q_INFLIGHT, Q_CALLING };

struct pgpool_query {
	st_dlink link;           /* on queue[prio] while Q_QUEUED, on the sweep's list while Q_DUE */
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
	uint64_t queued_at;      /* monotonic ms of the submit */
	uint32_t deadline_ms;    /* from queued_at, queue wait included */
};

typedef struct conn {
	pgpool *pool;
	unsigned idx;
	enum conn_state st;
	PGconn *pg;
	struct event *ev;
	evutil_socket_t ev_fd;
	short ev_what;
	struct event *timer;
	st_backoff backoff;      /* reconnect delays, BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS */
	pgpool_query *q; /* in flight (C_BUSY) */
	PGresult *res;   /* the result kept while the query's results are read */
	bool flushing;
} conn;

struct pgpool {
	struct event_base *base;
	st_pgdsn *dsn;
	st_resolver *resolver;
	st_resolve_req *lookup;      /* the round's lookup in flight */
	struct event *lookup_timer;  /* its deadline */
	unsigned n;
	conn *conns;
	st_dlink queue[2];       /* by priority, oldest first (pgpool_query.link) */
	size_t queued;
	size_t inflight;
	struct event *kick;
	struct event *sweep;     /* fails queries past their deadline */
	const st_clock *clock;
	unsigned reserved;       /* conns[0 .. reserved-1] take only PGPOOL_PRIO_FILL queries */
};

static void conn_start(conn *c);
static void dispatch(pgpool *p);

static void
trim_msg(char *buf, size_t len, const char *msg)
{
	size_t n;

	snprintf(buf, len, "%s", msg ? msg : "");
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\t')
			buf[i] = ' ';
}

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
sock_unwatch(conn *c)
{
	if (c->ev != NULL) {
		event_free(c->ev);
		c->ev = NULL;
	}
}

static void on_sock(evutil_socket_t fd, short what, void *arg);
static void conn_fail(conn *c, const char *why);

/* Makes the socket event watch exactly `what`; false (connection failed) when there is no socket. */
static bool
sock_watch(conn *c, short what)
{
	evutil_socket_t fd = PQsocket(c->pg);

	if (fd < 0) {
		conn_fail(c, "no socket");
		return false;
	}
	if (c->ev != NULL && c->ev_fd == fd && c->ev_what == what)
		return true;
	sock_unwatch(c);
	c->ev = event_new(c->pool->base, fd, what | EV_PERSIST, on_sock, c);
	ST_ASSERT(c->ev != NULL);
	c->ev_fd = fd;
	c->ev_what = what;
	event_add(c->ev, NULL);
	return true;
}

static void
timer_arm(conn *c, uint32_t ms)
{
	struct timeval tv = st_timeval_ms(ms);

	evtimer_add(c->timer, &tv);
}

/* Drops the connection, fails its query with err (after the state is clean), schedules a reconnect. */
static void
conn_drop(conn *c, const char *why, st_err err)
{
	char msg[512];
	pgpool_query *q = c->q;
	uint32_t wait = st_backoff_next(&c->backoff);

	trim_msg(msg, sizeof(msg), c->pg ? PQerrorMessage(c->pg) : "");
	st_warn("pgpool: connection %u: %s%s%s (reconnect in %u ms)", c->idx, why, msg[0] ? ": " : "", msg, wait);
	sock_unwatch(c);
	evtimer_del(c->timer);
	if (c->res != NULL) {
		PQclear(c->res);
		c->res = NULL;
	}
	if (c->pg != NULL) {
		PQfinish(c->pg);
		c->pg = NULL;
	}
	c->q = NULL;
	c->flushing = false;
	c->st = C_DOWN;
	timer_arm(c, wait);
	if (q != NULL) {
		c->pool->inflight--;
		deliver(q, err, NULL);
	}
}

static void
conn_fail(conn *c, const char *why)
{
	conn_drop(c, why, ST_EDB);
}

static void
on_notice(void *arg, const char *message)
{
	conn *c = arg;
	char msg[512];

	trim_msg(msg, sizeof(msg), message);
	st_info("pgpool: connection %u: server: %s", c->idx, msg);
}

/*
 * Opens c by address (addrs: the round's answer, NULL when the DSN names no
 * host).  Keepalives and tcp_user_timeout override the DSN's: a partitioned
 * connection is noticed within about 11 s idle (5 s + 3 probes 2 s apart)
 * or 10 s with unacknowledged data.
 */
static void
conn_open(conn *c, const char *const *addrs)
{
	static const char *const xkeys[] = {"application_name", "keepalives", "keepalives_idle",
	                                    "keepalives_interval", "keepalives_count", "tcp_user_timeout", NULL};
	static const char *const xvals[] = {"edge-gateway", "1", "5", "2", "3", "10000", NULL};
	const char *const *keys, *const *vals;

	if (st_pgdsn_params(c->pool->dsn, addrs, xkeys, xvals, &keys, &vals) != ST_OK) {
		conn_fail(c, "no address to connect to");
		return;
	}
	/* expand_dbname 0: the DSN was parsed already */
	c->pg = PQconnectStartParams(keys, vals, 0);
	if (c->pg == NULL) {
		conn_fail(c, "out of memory");
		return;
	}
	if (PQstatus(c->pg) == CONNECTION_BAD) {
		conn_fail(c, "connect failed");
		return;
	}
	PQsetNoticeProcessor(c->pg, on_notice, c);
	c->st = C_CONNECTING;
	timer_arm(c, CONNECT_TIMEOUT_MS);
	/* libpq: behave as if PQconnectPoll had returned PGRES_POLLING_WRITING. */
	sock_watch(c, EV_WRITE);
}

/* The round's answer: opens (or fails) every connection that waits for it. */
static void
on_resolved(void *arg, const char *const *addrs, size_t n, const char *err)
{
	pgpool *p = arg;

	(void)n;
	p->lookup = NULL;
	evtimer_del(p->lookup_timer);
	for (unsigned i = 0; i < p->n; i++) {
		conn *c = &p->conns[i];
		if (c->st != C_RESOLVING)
			continue;
		if (err != NULL)
			conn_fail(c, err);
		else
			conn_open(c, addrs);
	}
}

static void
on_lookup_timeout(evutil_socket_t fd, short what, void *arg)
{
	pgpool *p = arg;

	(void)fd;
	(void)what;
	st_resolve_cancel(p->lookup);
	p->lookup = NULL;
	for (unsigned i = 0; i < p->n; i++)
		if (p->conns[i].st == C_RESOLVING)
			conn_fail(&p->conns[i], "name resolution timed out");
}

static void
conn_start(conn *c)
{
	pgpool *p = c->pool;
	const char *const *names;
	size_t n = st_pgdsn_names(p->dsn, &names);
	struct timeval tv = st_timeval_ms(CONNECT_TIMEOUT_MS);

	if (n == 0) {
		conn_open(c, NULL);
		return;
	}
	c->st = C_RESOLVING;
	if (p->lookup != NULL)
		return; /* joins the round in flight */
	if (st_resolver_lookup(p->resolver, names, n, on_resolved, p, &p->lookup) != ST_OK) {
		p->lookup = NULL;
		conn_fail(c, "cannot start name resolution");
		return;
	}
	evtimer_add(p->lookup_timer, &tv);
}

/* Flushes the outgoing query; watches the socket accordingly.  false: the connection failed. */
static bool
conn_flush(conn *c)
{
	int r = PQflush(c->pg);

	if (r < 0) {
		conn_fail(c, "send failed");
		return false;
	}
	c->flushing = r == 1;
	return sock_watch(c, c->flushing ? EV_READ | EV_WRITE : EV_READ);
}

static void
conn_connect_poll(conn *c)
{
	switch (PQconnectPoll(c->pg)) {
	case PGRES_POLLING_READING:
		sock_watch(c, EV_READ);
		return;
	case PGRES_POLLING_WRITING:
		sock_watch(c, EV_WRITE);
		return;
	case PGRES_POLLING_OK:
		if (PQsetnonblocking(c->pg, 1) != 0) {
			conn_fail(c, "PQsetnonblocking failed");
			return;
		}
		if (!PQsendQuery(c->pg, SETUP_SQL)) {
			conn_fail(c, "session setup failed");
			return;
		}
		c->st = C_SETUP;
		conn_flush(c);
		return;
	default:
		conn_fail(c, "connect failed");
		return;
	}
}

static bool
is_error(const PGresult *r)
{
	ExecStatusType s = PQresultStatus(r);

	return s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK && s != PGRES_EMPTY_QUERY;
}

/* Keeps the last result, or the first error. */
static void
collect(conn *c, PGresult *r)
{
	if (c->res != NULL && is_error(c->res)) {
		PQclear(r);
		return;
	}
	if (c->res != NULL)
		PQclear(c->res);
	c->res = r;
}

static void
send_next(conn *c, pgpool_query *q)
{
	pgpool *p = c->pool;

	q->state = Q_INFLIGHT;
	c->q = q;
	c->st = C_BUSY;
	p->inflight++;
	if (!PQsendQueryParams(c->pg, q->sql, q->nparams, NULL, q->vals, q->lens, q->fmts, q->binary)) {
		conn_fail(c, "send failed");
		return;
	}
	conn_flush(c);
}

/* All results of the current operation are in. */
static void
conn_finished(conn *c)
{
	pgpool *p = c->pool;
	PGresult *res = c->res;
	pgpool_query *q = c->q;

	c->res = NULL;
	if (c->st == C_SETUP) {
		if (res == NULL || is_error(res)) {
			PQclear(res);
			conn_fail(c, "session setup failed");
			return;
		}
		PQclear(res);
		evtimer_del(c->timer);
		st_backoff_reset(&c->backoff);
		c->st = C_IDLE;
		st_info("pgpool: connection %u up", c->idx);
		if (sock_watch(c, EV_READ))
			dispatch(p);
		return;
	}
	c->q = NULL;
	c->st = C_IDLE;
	p->inflight--;
	if (res == NULL) {
		deliver(q, ST_EDB, NULL);
	} else if (is_error(res)) {
		char msg[512];
		trim_msg(msg, sizeof(msg), PQresultErrorMessage(res));
		st_warn("pgpool: query failed: %s", msg);
		deliver(q, ST_EDB, res);
	} else {
		deliver(q, ST_OK, res);
	}
	PQclear(res);
	/* The callback may have queued work; this connection is free for it now. */
	if (c->st == C_IDLE && sock_watch(c, EV_READ))
		dispatch(p);
}

/* SETUP and BUSY: flush what is left, then read results. */
static void
conn_io(conn *c, short what)
{
	if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
		conn_fail(c, c->st == C_BUSY ? "connection lost during a query" : "connection lost");
		return;
	}
	if (c->flushing && !conn_flush(c))
		return;
	while (!PQisBusy(c->pg)) {
		PGresult *r = PQgetResult(c->pg);
		if (r == NULL) {
			conn_finished(c);
			return;
		}
		collect(c, r);
	}
	if (PQstatus(c->pg) == CONNECTION_BAD)
		conn_fail(c, "connection lost");
}

static void
conn_idle_read(conn *c)
{
	PGresult *r;

	if (!PQconsumeInput(c->pg) || PQstatus(c->pg) == CONNECTION_BAD) {
		conn_fail(c, "connection lost while idle");
		return;
	}
	/* Nothing is expected; discard whatever arrived (a server error before it closes). */
	while (!PQisBusy(c->pg) && (r = PQgetResult(c->pg)) != NULL)
		PQclear(r);
	for (PGnotify *n; (n = PQnotifies(c->pg)) != NULL;)
		PQfreemem(n);
}

static void
on_sock(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;

	(void)fd;
	switch (c->st) {
	case C_CONNECTING:
		conn_connect_poll(c);
		break;
	case C_SETUP:
	case C_BUSY:
		conn_io(c, what);
		break;
	case C_IDLE:
		conn_idle_read(c);
		break;
	case C_DOWN:
	case C_RESOLVING:
		break;
	}
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;

	(void)fd;
	(void)what;
	if (c->st == C_DOWN)
		conn_start(c);
	else if (c->st == C_CONNECTING || c->st == C_SETUP)
		conn_fail(c, "connect timed out");
}

/* Takes a queued query out of its list. */
static void
queue_unlink(pgpool *p, pgpool_query *q)
{
	st_dlink_unlink(&q->link);
	p->queued--;
}

/* The next query conns[idx] may run: a reserved connection takes fills only. */
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
		conn *c = &p->conns[i];
		pgpool_query *q;

		if (c->st == C_IDLE && (q = queue_pop(p, i)) != NULL)
			send_next(c, q);
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
		conn *c = &p->conns[i];

		if (c->st == C_BUSY && c->q != NULL && now - c->q->queued_at >= c->q->deadline_ms)
			conn_drop(c, "query deadline passed", ST_ETIMEDOUT);
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
	char err[512];
	st_pgdsn *d;
	pgpool *p;

	if (n == 0 || n > PGPOOL_MAX_CONNS)
		return ST_EINVAL;
	if (st_pgdsn_parse(dsn, &d, err, sizeof(err)) != ST_OK) {
		st_error("pgpool: %s", err);
		return ST_EINVAL;
	}

	p = st_xcalloc(1, sizeof(*p));
	p->base = base;
	p->dsn = d;
	p->n = n;
	p->clock = st_clock_system();
	st_dlist_init(&p->queue[0]);
	st_dlist_init(&p->queue[1]);
	p->lookup_timer = evtimer_new(base, on_lookup_timeout, p);
	ST_ASSERT(p->lookup_timer != NULL && st_resolver_new(base, &p->resolver) == ST_OK);
	p->conns = st_xcalloc(n, sizeof(conn));
	p->kick = event_new(base, -1, 0, on_kick, p);
	p->sweep = event_new(base, -1, EV_PERSIST, on_sweep, p);
	ST_ASSERT(p->kick != NULL && p->sweep != NULL);
	{
		struct timeval tv = st_timeval_ms(SWEEP_MS);

		event_add(p->sweep, &tv);
	}
	for (unsigned i = 0; i < n; i++) {
		conn *c = &p->conns[i];
		c->pool = p;
		c->idx = i;
		c->st = C_DOWN;
		st_backoff_init(&c->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
		c->timer = evtimer_new(base, on_timer, c);
		ST_ASSERT(c->timer != NULL);
		timer_arm(c, 0);
	}
	*out = p;
	return ST_OK;
}

pgpool_query *
pgpool_submit(pgpool *p, enum pgpool_prio prio, const char *sql, int nparams, const char *const *vals,
              const int *lens, const int *fmts, int result_binary, pgpool_fn fn, void *arg)
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
	case Q_INFLIGHT:
		q->cancelled = true;
		return;
	case Q_CALLING:
		return;
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
	for (unsigned i = 0; i < p->n; i++)
		if (p->conns[i].st == C_IDLE || p->conns[i].st == C_BUSY)
			return true;
	return false;
}

size_t
pgpool_up(const pgpool *p)
{
	size_t n = 0;

	for (unsigned i = 0; i < p->n; i++)
		n += p->conns[i].st == C_IDLE || p->conns[i].st == C_BUSY;
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
		conn *c = &p->conns[i];
		sock_unwatch(c);
		if (c->timer != NULL)
			event_free(c->timer);
		if (c->res != NULL)
			PQclear(c->res);
		if (c->pg != NULL)
			PQfinish(c->pg);
		if (c->q != NULL)
			query_free(c->q);
	}
	while ((q = queue_pop(p, p->n)) != NULL)
		query_free(q);
	if (p->kick != NULL)
		event_free(p->kick);
	if (p->sweep != NULL)
		event_free(p->sweep);
	st_resolve_cancel(p->lookup);
	st_resolver_free(p->resolver);
	event_free(p->lookup_timer);
	free(p->conns);
	st_pgdsn_free(p->dsn);
	free(p);
}
