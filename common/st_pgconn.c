/*
 * st_pgconn: the state machine of st_pgconn.h around one non-blocking PGconn.
 *
 * One persistent event watches PQsocket() for what libpq wants; it is made
 * again only when the socket or the wanted conditions change (PQconnectPoll
 * may switch sockets between attempts, and a statement whose output libpq
 * has not flushed needs EV_WRITE too).  One timer serves every state:
 * DOWN, the back-off before the next attempt; RESOLVING, CONNECTING and
 * SETUP, the connect deadline; BUSY, the statement's deadline; IDLE, off.
 *
 * Results are drained as libpq requires: after PQconsumeInput, PQgetResult
 * while PQisBusy is false, until it returns NULL; of several results the
 * first error (or else the last result) is kept and handed over.
 */
#include "st_pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_pgdsn.h"
#include "st_resolve.h"
#include "st_util.h"

enum pgconn_state { PC_DOWN, PC_RESOLVING, PC_CONNECTING, PC_SETUP, PC_IDLE, PC_BUSY };

struct st_pgconn {
	struct event_base *base;
	st_pgdsn *dsn;            /* owned */
	st_resolver *resolver;    /* owned */
	st_resolve_req *lookup;   /* RESOLVING only */
	char name[64];
	st_pgconn_opts opts;      /* name points at name[] */
	st_pgconn_state_fn on_state;
	void *state_arg;
	enum pgconn_state st;
	PGconn *pg;               /* owned; NULL while DOWN and RESOLVING */
	struct event *ev;         /* socket watch, persistent */
	evutil_socket_t ev_fd;
	short ev_what;
	struct event *timer;      /* back-off, connect deadline or statement deadline, by state */
	st_backoff backoff;
	PGresult *res;            /* owned: the result kept while a statement's results are read */
	st_pgconn_result_fn fn;   /* BUSY: the statement's callback */
	void *fn_arg;
	bool flushing;            /* PQflush returned 1: libpq still holds output */
	bool outage_logged;       /* the current outage was logged at warn */
};

static void on_socket(evutil_socket_t fd, short what, void *arg);
static void conn_start(st_pgconn *c);

static void
timer_arm(st_pgconn *c, uint32_t ms)
{
	struct timeval tv = st_timeval_ms(ms);

	evtimer_add(c->timer, &tv);
}

static void
sock_unwatch(st_pgconn *c)
{
	if (c->ev != NULL) {
		event_free(c->ev);
		c->ev = NULL;
	}
}

/*
 * Tears the connection down and tells whoever waits.  The callbacks run
 * last, with the connection already consistent (DOWN, reconnect timer set),
 * so they may call anything but st_pgconn_free.
 */
static void
conn_lost(st_pgconn *c, const char *why)
{
	bool was_up = c->st == PC_IDLE || c->st == PC_BUSY;
	st_pgconn_result_fn fn = c->st == PC_BUSY ? c->fn : NULL;
	void *fn_arg = c->fn_arg;
	const char *pq = c->pg != NULL ? PQerrorMessage(c->pg) : "";
	uint32_t wait = st_backoff_next(&c->backoff);
	char msg[512];

	snprintf(msg, sizeof(msg), "%s%s%s", why, pq[0] != '\0' ? ": " : "", pq);
	st_one_line(msg);
	if (was_up || !c->outage_logged)
		st_warn("%s: database connection lost: %s (reconnecting in %u ms)", c->opts.name, msg, wait);
	else
		st_debug("%s: database connection failed again: %s (next attempt in %u ms)", c->opts.name, msg, wait);
	c->outage_logged = true;
	st_resolve_cancel(c->lookup);
	c->lookup = NULL;
	sock_unwatch(c);
	PQclear(c->res);
	c->res = NULL;
	PQfinish(c->pg);
	c->pg = NULL;
	c->st = PC_DOWN;
	c->fn = NULL;
	c->flushing = false;
	timer_arm(c, wait);
	if (fn != NULL)
		fn(fn_arg, NULL, msg);
	if (was_up && c->on_state != NULL)
		c->on_state(c->state_arg, false);
}

/* Makes the socket event watch exactly `what`; false (connection lost) when there is no socket. */
static bool
sock_watch(st_pgconn *c, short what)
{
	evutil_socket_t fd = PQsocket(c->pg);

	if (fd < 0) {
		conn_lost(c, "no socket");
		return false;
	}
	if (c->ev != NULL && c->ev_fd == fd && c->ev_what == what)
		return true;
	sock_unwatch(c);
	c->ev = event_new(c->base, fd, what | EV_PERSIST, on_socket, c);
	ST_ASSERT(c->ev != NULL);
	c->ev_fd = fd;
	c->ev_what = what;
	event_add(c->ev, NULL);
	return true;
}

/* Pushes what libpq holds; watches for the rest.  false: the connection was lost. */
static bool
conn_flush(st_pgconn *c)
{
	int r = PQflush(c->pg);

	if (r < 0) {
		conn_lost(c, "send failed");
		return false;
	}
	c->flushing = r == 1;
	return sock_watch(c, c->flushing ? EV_READ | EV_WRITE : EV_READ);
}

static void
on_notice(void *arg, const char *message)
{
	st_pgconn *c = arg;
	char msg[512];

	if (!c->opts.log_notices)
		return;
	snprintf(msg, sizeof(msg), "%s", message);
	st_one_line(msg);
	st_info("%s: server: %s", c->opts.name, msg);
}

/* Opens the connection by address (addrs from st_resolve; NULL when the DSN names no host). */
static void
conn_open(st_pgconn *c, const char *const *addrs)
{
	const char *const xkeys[] = {"application_name", "keepalives", "keepalives_idle", "keepalives_interval",
	                             "keepalives_count", "tcp_user_timeout", NULL};
	const char *const xvals[] = {c->opts.application_name, "1", "5", "2", "3", "10000", NULL};
	const char *const *keys, *const *vals;

	if (st_pgdsn_params(c->dsn, addrs, xkeys, xvals, &keys, &vals) != ST_OK) {
		conn_lost(c, "no address to connect to");
		return;
	}
	/* expand_dbname 0: the DSN was parsed already, and dbname is only a name now */
	c->pg = PQconnectStartParams(keys, vals, 0);
	if (c->pg == NULL) {
		conn_lost(c, "out of memory");
		return;
	}
	if (PQstatus(c->pg) == CONNECTION_BAD) {
		conn_lost(c, "connect failed");
		return;
	}
	PQsetNoticeProcessor(c->pg, on_notice, c);
	c->st = PC_CONNECTING;
	timer_arm(c, ST_PGCONN_CONNECT_DEADLINE_MS); /* connect and session setup together */
	/* libpq: behave as if PQconnectPoll had returned PGRES_POLLING_WRITING */
	sock_watch(c, EV_WRITE);
}

static void
on_resolved(void *arg, const char *const *addrs, size_t n, const char *err)
{
	st_pgconn *c = arg;

	(void)n;
	ST_ASSERT(c->st == PC_RESOLVING);
	c->lookup = NULL;
	evtimer_del(c->timer);
	if (err != NULL)
		conn_lost(c, err);
	else
		conn_open(c, addrs);
}

static void
conn_start(st_pgconn *c)
{
	const char *const *names;
	size_t n = st_pgdsn_names(c->dsn, &names);

	ST_ASSERT(c->st == PC_DOWN);
	if (n == 0) {
		conn_open(c, NULL);
		return;
	}
	if (st_resolver_lookup(c->resolver, names, n, on_resolved, c, &c->lookup) != ST_OK) {
		c->lookup = NULL;
		conn_lost(c, "cannot start name resolution");
		return;
	}
	c->st = PC_RESOLVING;
	timer_arm(c, ST_PGCONN_CONNECT_DEADLINE_MS);
}

static void
conn_connect_poll(st_pgconn *c)
{
	switch (PQconnectPoll(c->pg)) {
	case PGRES_POLLING_READING:
		sock_watch(c, EV_READ);
		return;
	case PGRES_POLLING_WRITING:
		sock_watch(c, EV_WRITE);
		return;
	case PGRES_POLLING_OK:
		break;
	default:
		conn_lost(c, "connect failed");
		return;
	}
	if (PQsetnonblocking(c->pg, 1) != 0 || !PQsendQuery(c->pg, c->opts.setup_sql)) {
		conn_lost(c, "session setup could not be sent");
		return;
	}
	c->st = PC_SETUP;
	conn_flush(c);
}

bool
st_pgconn_result_ok(const PGresult *res)
{
	ExecStatusType s = PQresultStatus(res);

	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK || s == PGRES_EMPTY_QUERY;
}

/* All results of the session setup or of the statement are in. */
static void
conn_finished(st_pgconn *c)
{
	PGresult *res = c->res;
	st_pgconn_result_fn fn = c->fn;
	void *fn_arg = c->fn_arg;

	c->res = NULL;
	evtimer_del(c->timer);
	if (c->st == PC_SETUP) {
		if (res == NULL || !st_pgconn_result_ok(res)) {
			PQclear(res);
			conn_lost(c, "session setup failed"); /* libpq's message (appended) says why */
			return;
		}
		PQclear(res);
		c->st = PC_IDLE;
		st_backoff_reset(&c->backoff);
		c->outage_logged = false;
		st_info("%s: connected to the database", c->opts.name);
		if (sock_watch(c, EV_READ) && c->on_state != NULL)
			c->on_state(c->state_arg, true);
		return;
	}
	c->st = PC_IDLE;
	c->fn = NULL;
	sock_watch(c, EV_READ); /* (a connection without a socket is DOWN by now; the result came all the same) */
	fn(fn_arg, res, NULL);
	PQclear(res);
}

/* SETUP and BUSY: flush what is left, then read results. */
static void
conn_io(st_pgconn *c, short what)
{
	if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
		conn_lost(c, "connection lost");
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
		if (c->res != NULL && !st_pgconn_result_ok(c->res)) {
			PQclear(r); /* keep the first error */
		} else {
			PQclear(c->res); /* of successes, keep the last */
			c->res = r;
		}
	}
	if (PQstatus(c->pg) == CONNECTION_BAD)
		conn_lost(c, "connection lost");
}

/* IDLE: nothing is expected; EOF, an error before the server closes, a notice or a notification. */
static void
conn_idle_read(st_pgconn *c)
{
	PGresult *r;

	if (!PQconsumeInput(c->pg) || PQstatus(c->pg) == CONNECTION_BAD) {
		conn_lost(c, "connection lost while idle");
		return;
	}
	while (!PQisBusy(c->pg) && (r = PQgetResult(c->pg)) != NULL)
		PQclear(r);
	for (PGnotify *n; (n = PQnotifies(c->pg)) != NULL;)
		PQfreemem(n);
}

static void
on_socket(evutil_socket_t fd, short what, void *arg)
{
	st_pgconn *c = arg;

	(void)fd;
	switch (c->st) {
	case PC_CONNECTING:
		conn_connect_poll(c);
		return;
	case PC_SETUP:
	case PC_BUSY:
		conn_io(c, what);
		return;
	case PC_IDLE:
		conn_idle_read(c);
		return;
	case PC_DOWN:
	case PC_RESOLVING:
		return;
	}
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	st_pgconn *c = arg;

	(void)fd;
	(void)what;
	switch (c->st) {
	case PC_DOWN:
		conn_start(c);
		return;
	case PC_RESOLVING:
		conn_lost(c, "name resolution timed out");
		return;
	case PC_CONNECTING:
	case PC_SETUP:
		conn_lost(c, "connect timed out");
		return;
	case PC_BUSY:
		conn_lost(c, "statement timed out on the client");
		return;
	case PC_IDLE:
		return;
	}
}

st_err
st_pgconn_new(struct event_base *base, const char *dsn, const st_pgconn_opts *opts, st_pgconn_state_fn on_state,
              void *arg, st_pgconn **out)
{
	st_pgconn *c = st_xcalloc(1, sizeof(*c));
	char err[512];

	ST_ASSERT(opts->name != NULL && opts->application_name != NULL && opts->setup_sql != NULL);
	snprintf(c->name, sizeof(c->name), "%s", opts->name);
	if (st_pgdsn_parse(dsn, &c->dsn, err, sizeof(err)) != ST_OK) {
		st_error("%s: %s", c->name, err);
		free(c);
		return ST_EINVAL;
	}
	c->base = base;
	c->opts = *opts;
	c->opts.name = c->name;
	c->on_state = on_state;
	c->state_arg = arg;
	c->st = PC_DOWN;
	st_backoff_init(&c->backoff, ST_PGCONN_BACKOFF_MIN_MS, ST_PGCONN_BACKOFF_MAX_MS);
	if ((c->timer = evtimer_new(base, on_timer, c)) == NULL || st_resolver_new(base, &c->resolver) != ST_OK) {
		st_pgconn_free(c);
		return ST_ESYS;
	}
	timer_arm(c, 0); /* the first attempt from the loop, so no callback runs inside this call */
	*out = c;
	return ST_OK;
}

void
st_pgconn_free(st_pgconn *c)
{
	if (c == NULL)
		return;
	sock_unwatch(c);
	if (c->timer != NULL)
		event_free(c->timer);
	PQclear(c->res);
	PQfinish(c->pg);
	st_resolve_cancel(c->lookup);
	st_resolver_free(c->resolver);
	st_pgdsn_free(c->dsn);
	free(c);
}

bool
st_pgconn_up(const st_pgconn *c)
{
	return c->st == PC_IDLE || c->st == PC_BUSY;
}

bool
st_pgconn_idle(const st_pgconn *c)
{
	return c->st == PC_IDLE;
}

st_err
st_pgconn_send(st_pgconn *c, const char *sql, int n_params, const Oid *types, const char *const *values,
               const int *lengths, const int *formats, int result_format, st_pgconn_result_fn fn, void *arg)
{
	if (c->st != PC_IDLE)
		return ST_EUNAVAIL;
	if (!PQsendQueryParams(c->pg, sql, n_params, types, values, lengths, formats, result_format)) {
		/* libpq refuses only when the connection is broken */
		conn_lost(c, "send failed");
		return ST_EUNAVAIL;
	}
	c->st = PC_BUSY;
	c->fn = fn;
	c->fn_arg = arg;
	if (c->opts.query_deadline_ms > 0)
		timer_arm(c, c->opts.query_deadline_ms);
	conn_flush(c);
	return ST_OK;
}

void
st_pgconn_drop(st_pgconn *c, const char *why)
{
	if (c->st != PC_DOWN)
		conn_lost(c, why);
}
