/*
 * st_pgconn: the state machine of st_pgconn.h around one non-blocking PGconn.
 *
 * One persistent event watches PQsocket() for what libpq wants.  While
 * connecting it is made again after every PQconnectPoll: libpq may close
 * its socket and open another inside that call (sslmode=prefer falling back
 * to plain, gssencmode, the next host), the new one often on the same fd
 * number, and the kernel drops an epoll registration when its socket
 * closes, so "same fd, same events" does not mean "still watched".  Once
 * up, it is made again only when the wanted conditions change (a statement
 * whose output libpq has not flushed needs EV_WRITE too).  One timer serves
 * every state: DOWN, the back-off before the next round; RESOLVING, the
 * resolution deadline; CONNECTING and SETUP, the deadline of the attempt at
 * one address; BUSY, the statement's deadline; IDLE, off.
 *
 * A round tries the DSN's addresses one at a time (st_pgdsn.h says why):
 * an attempt that fails, or outlives its deadline, closes its PGconn and
 * the next address is tried at once; only when every address of the round
 * failed is the connection DOWN, with the back-off before the next round.
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
	st_pgdsn *dsn;          /* owned */
	st_resolver *resolver;  /* owned */
	st_resolve_req *lookup; /* RESOLVING only */
	char name[64];
	st_pgconn_opts opts; /* name points at name[] */
	st_pgconn_state_fn on_state;
	void *state_arg;
	enum pgconn_state st;
	PGconn *pg;       /* owned; NULL while DOWN and RESOLVING */
	struct event *ev; /* socket watch, persistent */
	evutil_socket_t ev_fd;
	short ev_what;
	struct event *timer; /* back-off, connect deadline or statement deadline, by state */
	st_backoff backoff;
	PGresult *res;          /* owned: the result kept while a statement's results are read */
	st_pgconn_result_fn fn; /* BUSY: the statement's callback */
	void *fn_arg;
	bool flushing;            /* PQflush returned 1: libpq still holds output */
	bool outage_logged;       /* the current outage was logged at warn */
	size_t attempt, attempts; /* CONNECTING, SETUP: the address tried, of the round's */
	size_t failed;            /* attempts of this round that failed */
	char last_err[400];       /* the last failed attempt's address and reason */
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

/* Closes the PGconn and what belongs to it (the state is the caller's to set). */
static void
conn_close(st_pgconn *c)
{
	sock_unwatch(c);
	PQclear(c->res);
	c->res = NULL;
	PQfinish(c->pg);
	c->pg = NULL;
	c->flushing = false;
}

/*
 * Tears the connection down and tells whoever waits.  The callbacks run
 * last, with the connection already consistent (DOWN, reconnect timer set),
 * so they may call anything but st_pgconn_free.
 */
static void
conn_down(st_pgconn *c, char *msg)
{
	bool was_up = c->st == PC_IDLE || c->st == PC_BUSY;
	st_pgconn_result_fn fn = c->st == PC_BUSY ? c->fn : NULL;
	void *fn_arg = c->fn_arg;
	uint32_t wait = st_backoff_next(&c->backoff);

	st_one_line(msg);
	if (was_up || !c->outage_logged)
		st_warn("%s: database connection lost: %s (reconnecting in %u ms)", c->opts.name, msg, wait);
	else
		st_debug("%s: database connection failed again: %s (next attempt in %u ms)", c->opts.name, msg, wait);
	c->outage_logged = true;
	st_resolve_cancel(c->lookup);
	c->lookup = NULL;
	conn_close(c);
	c->st = PC_DOWN;
	c->fn = NULL;
	timer_arm(c, wait);
	if (fn != NULL)
		fn(fn_arg, NULL, msg);
	if (was_up && c->on_state != NULL)
		c->on_state(c->state_arg, false);
}

/* conn_down with why and libpq's own message. */
static void
conn_lost(st_pgconn *c, const char *why)
{
	const char *pq = c->pg != NULL ? PQerrorMessage(c->pg) : "";
	char msg[512];

	snprintf(msg, sizeof(msg), "%s%s%s", why, pq[0] != '\0' ? ": " : "", pq);
	conn_down(c, msg);
}

static void attempt_failed(st_pgconn *c, const char *why);

/* A failure: while connecting, of this address's attempt (the next is
 * tried); once up, of the session. */
static void
conn_fail(st_pgconn *c, const char *why)
{
	if (c->st == PC_CONNECTING || c->st == PC_SETUP)
		attempt_failed(c, why);
	else
		conn_lost(c, why);
}

/* Makes the socket event watch exactly `what`; false (connection lost) when there is no socket. */
static bool
sock_watch(st_pgconn *c, short what)
{
	evutil_socket_t fd = PQsocket(c->pg);

	if (fd < 0) {
		conn_fail(c, "no socket");
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
		conn_fail(c, "send failed");
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

/*
 * Opens the connection to the round's address c->attempt.  false: it failed
 * at once (recorded in last_err, nothing left open); the caller moves on.
 */
static bool
attempt_open(st_pgconn *c)
{
	const char *const xkeys[] = {
		"application_name", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
		"tcp_user_timeout", NULL
	};
	const char *const xvals[] = { c->opts.application_name, "1", "5", "2", "3", "10000", NULL };
	const char *const *keys, *const *vals;

	st_pgdsn_params(c->dsn, c->attempt, xkeys, xvals, &keys, &vals);
	/* expand_dbname 0: the DSN was parsed already, and dbname is only a name now */
	c->pg = PQconnectStartParams(keys, vals, 0);
	if (c->pg == NULL) {
		snprintf(c->last_err, sizeof(c->last_err), "%s: out of memory", st_pgdsn_label(c->dsn, c->attempt));
		return false;
	}
	if (PQstatus(c->pg) == CONNECTION_BAD || PQsocket(c->pg) < 0) {
		snprintf(c->last_err, sizeof(c->last_err), "%s: %s", st_pgdsn_label(c->dsn, c->attempt),
			 PQerrorMessage(c->pg));
		st_one_line(c->last_err);
		st_debug("%s: %s", c->opts.name, c->last_err);
		PQfinish(c->pg);
		c->pg = NULL;
		c->failed++;
		return false;
	}
	PQsetNoticeProcessor(c->pg, on_notice, c);
	c->st = PC_CONNECTING;
	timer_arm(c, st_pgdsn_attempt_ms(c->dsn, ST_PGCONN_CONNECT_DEADLINE_MS)); /* connect and setup together */
	/* libpq: behave as if PQconnectPoll had returned PGRES_POLLING_WRITING */
	sock_watch(c, EV_WRITE);
	return true;
}

/* From the current attempt on, the first address whose connection starts; DOWN when none is left. */
static void
attempts_run(st_pgconn *c)
{
	char msg[512];

	for (; c->attempt < c->attempts; c->attempt++)
		if (attempt_open(c))
			return;
	if (c->attempts > 1)
		snprintf(msg, sizeof(msg), "no address answered (%zu tried), the last: %s", c->attempts, c->last_err);
	else
		snprintf(msg, sizeof(msg), "%s", c->last_err[0] != '\0' ? c->last_err : "no address to connect to");
	conn_down(c, msg);
}

/* The attempt at one address failed: close it, try the next. */
static void
attempt_failed(st_pgconn *c, const char *why)
{
	const char *pq = c->pg != NULL ? PQerrorMessage(c->pg) : "";

	snprintf(c->last_err, sizeof(c->last_err), "%s: %s%s%s", st_pgdsn_label(c->dsn, c->attempt), why,
		 pq[0] != '\0' ? ": " : "", pq);
	st_one_line(c->last_err);
	st_debug("%s: %s", c->opts.name, c->last_err);
	evtimer_del(c->timer);
	conn_close(c);
	c->failed++;
	c->attempt++;
	attempts_run(c);
}

static void
round_start(st_pgconn *c, const char *const *addrs)
{
	c->attempts = st_pgdsn_round(c->dsn, addrs);
	c->attempt = 0;
	c->failed = 0;
	c->last_err[0] = '\0';
	attempts_run(c);
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
		round_start(c, addrs);
}

static void
conn_start(st_pgconn *c)
{
	const char *const *names;
	size_t n = st_pgdsn_names(c->dsn, &names);

	ST_ASSERT(c->st == PC_DOWN);
	if (n == 0) {
		round_start(c, NULL);
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

/* PostgreSQL 14+ reports it at connect; older servers do not (a write then meets 25006). */
static bool
in_hot_standby(const PGconn *pg)
{
	const char *v = PQparameterStatus(pg, "in_hot_standby");

	return v != NULL && strcmp(v, "on") == 0;
}

static void
conn_connect_poll(st_pgconn *c)
{
	PostgresPollingStatusType r = PQconnectPoll(c->pg);

	/* the socket may be another one now, even on the same fd number (at the top) */
	sock_unwatch(c);
	switch (r) {
	case PGRES_POLLING_READING: sock_watch(c, EV_READ); return;
	case PGRES_POLLING_WRITING: sock_watch(c, EV_WRITE); return;
	case PGRES_POLLING_OK: break;
	default: attempt_failed(c, "connect failed"); return;
	}
	if (c->opts.writes && in_hot_standby(c->pg)) {
		attempt_failed(c, "the server is a standby (in_hot_standby), and this connection writes");
		return;
	}
	if (PQsetnonblocking(c->pg, 1) != 0 || !PQsendQuery(c->pg, c->opts.setup_sql)) {
		attempt_failed(c, "session setup could not be sent");
		return;
	}
	c->st = PC_SETUP;
	conn_flush(c);
}

void
st_pgconn_result_text(const PGresult *res, char *buf, size_t cap)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	if (primary == NULL) /* not an error result (or one libpq made itself, without fields) */
		primary = PQresultStatus(res) == PGRES_FATAL_ERROR ? "error without a message"
								   : PQresStatus(PQresultStatus(res));
	snprintf(buf, cap, "SQLSTATE %.5s: %s", state != NULL ? state : "?????", primary);
	st_one_line(buf);
}

bool
st_pgconn_result_ok(const PGresult *res)
{
	ExecStatusType s = PQresultStatus(res);

	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK || s == PGRES_EMPTY_QUERY;
}

static bool
read_only(const PGresult *res)
{
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state != NULL && strcmp(state, "25006") == 0;
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
			attempt_failed(c, "session setup failed"); /* libpq's message (appended) says why */
			return;
		}
		PQclear(res);
		c->st = PC_IDLE;
		st_backoff_reset(&c->backoff);
		c->outage_logged = false;
		if (c->failed > 0)
			st_info("%s: connected to the database at %s, after %zu address%s failed (the last: %s)",
				c->opts.name, st_pgdsn_label(c->dsn, c->attempt), c->failed, c->failed == 1 ? "" : "es",
				c->last_err);
		else
			st_info("%s: connected to the database", c->opts.name);
		if (sock_watch(c, EV_READ) && c->on_state != NULL)
			c->on_state(c->state_arg, true);
		return;
	}
	c->st = PC_IDLE;
	c->fn = NULL;
	if (read_only(res)) {
		/* A failover made this session's server a standby (or it was one): no
		 * retry on it can succeed, so find the read-write server now. */
		char msg[] = "the server refused a write as read-only (SQLSTATE 25006: a standby, or a primary "
			     "demoted by a failover); reconnecting";
		conn_down(c, msg);
	} else {
		sock_watch(c,
			   EV_READ); /* (a connection without a socket is DOWN by now; the result came all the same) */
	}
	fn(fn_arg, res, NULL);
	PQclear(res);
}

/* SETUP and BUSY: flush what is left, then read results. */
static void
conn_io(st_pgconn *c, short what)
{
	if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
		conn_fail(c, "connection lost");
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
		conn_fail(c, "connection lost");
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
	case PC_CONNECTING: conn_connect_poll(c); return;
	case PC_SETUP:
	case PC_BUSY: conn_io(c, what); return;
	case PC_IDLE: conn_idle_read(c); return;
	case PC_DOWN:
	case PC_RESOLVING: return;
	}
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	st_pgconn *c = arg;

	(void)fd;
	(void)what;
	switch (c->st) {
	case PC_DOWN: conn_start(c); return;
	case PC_RESOLVING: conn_lost(c, "name resolution timed out"); return;
	case PC_CONNECTING:
	case PC_SETUP: attempt_failed(c, "no answer within the attempt's deadline (connect_timeout)"); return;
	case PC_BUSY: conn_lost(c, "statement timed out on the client"); return;
	case PC_IDLE: return;
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
