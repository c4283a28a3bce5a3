/*
 * pgsink: an explicit state machine around one non-blocking PGconn.
 *
 *   DOWN --timer--> RESOLVING --addresses--> CONNECTING --PQconnectPoll OK--> SETUP --result--> IDLE
 *   DOWN --timer (no host name in the DSN)--> CONNECTING
 *   IDLE --pgsink_query--> BUSY --last result--> IDLE
 *   any --error, EOF, deadline--> DOWN (callback of a BUSY statement gets NULL)
 *
 * RESOLVING: the DSN's host names are resolved on a thread (st_resolve) and
 * the connection is opened by address (st_pgdsn: host=name for TLS,
 * hostaddr=address), because PQconnectStartParams would resolve a name
 * synchronously on the loop.  The backoff timer doubles as the deadline of
 * RESOLVING (CONNECT_DEADLINE_MS); every reconnect resolves again.
 *
 * One libevent event is (re)created for every wait, because PQsocket may
 * change across PQconnectPoll calls and between connections, and the set
 * of interesting conditions changes (write while libpq's output buffer is
 * not flushed, read otherwise).  Every wait has a deadline: connect 10 s,
 * a statement 60 s (twice statement_timeout: past it the server or the path
 * is gone, even if TCP has not noticed yet).
 *
 * Results are drained as the libpq docs require: after PQconsumeInput,
 * PQgetResult until it returns NULL while PQisBusy is false; the first
 * error result (or the last result) is handed to the callback.
 */
#include "pgsink.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_pgdsn.h"
#include "st_resolve.h"
#include "st_util.h"

enum pgsink_state { PS_DOWN, PS_RESOLVING, PS_CONNECTING, PS_SETUP, PS_IDLE, PS_BUSY };

#define CONNECT_DEADLINE_MS 10000
#define QUERY_DEADLINE_MS 60000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

/*
 * Pinned on every session, so that a database or role default (ALTER
 * DATABASE/ROLE ... SET) cannot change what the flush relies on:
 * - default_transaction_isolation read committed: broker_append2 reads
 *   max(seq) and the stored keys AFTER taking the advisory lock; under
 *   repeatable read or serializable its snapshot would be taken at the
 *   lock call's statement start, before the previous holder committed, and
 *   it would miss that flush's rows (a stale prev, a stored key taken
 *   for new: a serialization failure on every contended flush);
 * - default_transaction_read_only off: a read-only default fails every flush;
 * - synchronous_commit at least on: a reply says "stored", so the commit
 *   must be durable before it.  off and local are raised to on; remote_write
 *   and remote_apply (a synchronous standby) are stronger and kept;
 * - the timeouts bound a flush (a hung replica cannot hold the lock), and
 *   client_encoding UTF8 is what the events are.
 */
static const char session_sql[] =
    "SET lock_timeout = '5s'; SET statement_timeout = '30s'; "
    "SET idle_in_transaction_session_timeout = '10s'; SET client_encoding = 'UTF8'; "
    "SET application_name = 'broker-writer'; "
    "SET default_transaction_isolation = 'read committed'; SET default_transaction_read_only = off; "
    "SELECT set_config('synchronous_commit', 'on', false) "
    "WHERE current_setting('synchronous_commit') IN ('off', 'local')";

struct pgsink {
	struct event_base *base;
	st_pgdsn *dsn;
	st_resolver *resolver;
	st_resolve_req *lookup; /* RESOLVING */
	const char *name;
	pgsink_state_fn on_state;
	void *state_arg;
	enum pgsink_state st;
	PGconn *conn;
	struct event *ev;     /* socket wait */
	struct event *timer;  /* reconnect backoff */
	st_backoff backoff;   /* reconnect delays: BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS */
	PGresult *res;        /* result being collected */
	pgsink_result_fn fn;
	void *fn_arg;
	bool flushing;        /* PQflush returned 1: libpq still holds output */
	bool logged_down;
};

static void on_socket(evutil_socket_t fd, short what, void *arg);
static void start_connect(pgsink *s);


static void
watch(pgsink *s, short what, int deadline_ms)
{
	struct timeval tv = st_timeval_ms(deadline_ms > 0 ? (uint64_t)deadline_ms : 0);

	if (s->ev != NULL) {
		event_free(s->ev);
		s->ev = NULL;
	}
	s->ev = event_new(s->base, PQsocket(s->conn), what, on_socket, s);
	ST_ASSERT(s->ev != NULL);
	event_add(s->ev, deadline_ms > 0 ? &tv : NULL);
}

static void
schedule_reconnect(pgsink *s)
{
	struct timeval tv = st_timeval_ms(st_backoff_next(&s->backoff));

	evtimer_add(s->timer, &tv);
}

/* Tears the connection down and tells whoever waits.  Callbacks run last,
 * with the sink already consistent (DOWN, reconnect scheduled). */
static void
lost(pgsink *s, const char *why)
{
	bool was_up = s->st == PS_IDLE || s->st == PS_BUSY || s->st == PS_SETUP;
	pgsink_result_fn fn = s->st == PS_BUSY ? s->fn : NULL;
	void *fn_arg = s->fn_arg;
	char msg[512];

	snprintf(msg, sizeof(msg), "%s", why);
	if (s->conn != NULL && why[0] == '\0')
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(s->conn));
	st_one_line(msg);
	if (!s->logged_down || was_up)
		st_warn("%s: database connection lost: %s", s->name, msg);
	s->logged_down = true;
	st_resolve_cancel(s->lookup);
	s->lookup = NULL;
	if (s->ev != NULL) {
		event_free(s->ev);
		s->ev = NULL;
	}
	PQclear(s->res);
	s->res = NULL;
	PQfinish(s->conn);
	s->conn = NULL;
	s->st = PS_DOWN;
	s->fn = NULL;
	s->flushing = false;
	schedule_reconnect(s);
	if (fn != NULL)
		fn(fn_arg, NULL, msg);
	if (was_up && s->on_state != NULL)
		s->on_state(s->state_arg, false);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	pgsink *s = arg;

	(void)fd;
	(void)what;
	if (s->st == PS_RESOLVING)
		lost(s, "name resolution timed out");
	else
		start_connect(s);
}

static void
send_flush(pgsink *s, int deadline_ms)
{
	int r = PQflush(s->conn);

	if (r == -1) {
		lost(s, "");
		return;
	}
	s->flushing = r == 1;
	watch(s, s->flushing ? EV_READ | EV_WRITE : EV_READ, deadline_ms);
}

static void
connect_poll(pgsink *s)
{
	switch (PQconnectPoll(s->conn)) {
	case PGRES_POLLING_READING:
		watch(s, EV_READ, CONNECT_DEADLINE_MS);
		return;
	case PGRES_POLLING_WRITING:
		watch(s, EV_WRITE, CONNECT_DEADLINE_MS);
		return;
	case PGRES_POLLING_OK:
		break;
	default:
		lost(s, "");
		return;
	}
	if (PQsetnonblocking(s->conn, 1) != 0 || !PQsendQuery(s->conn, session_sql)) {
		lost(s, "");
		return;
	}
	s->st = PS_SETUP;
	send_flush(s, CONNECT_DEADLINE_MS);
}

static void
quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/*
 * Opens the connection by address (addrs from st_resolve, NULL when the DSN
 * names no host).  Keepalives and tcp_user_timeout override the DSN's: a
 * partitioned connection is noticed within about 11 s idle (5 s + 3 probes
 * 2 s apart) or 10 s with unacknowledged data, not after the kernel's
 * 2 hours / 15 minutes.
 */
static void
connect_to(pgsink *s, const char *const *addrs)
{
	static const char *const xkeys[] = { "keepalives", "keepalives_idle", "keepalives_interval",
		                             "keepalives_count", "tcp_user_timeout", "application_name", NULL };
	static const char *const xvals[] = { "1", "5", "2", "3", "10000", "broker-writer", NULL };
	const char *const *keys, *const *vals;

	if (st_pgdsn_params(s->dsn, addrs, xkeys, xvals, &keys, &vals) != ST_OK) {
		lost(s, "no address to connect to");
		return;
	}
	/* expand_dbname 0: the DSN was parsed already, and dbname is only a name now */
	s->conn = PQconnectStartParams(keys, vals, 0);
	if (s->conn == NULL) {
		lost(s, "out of memory");
		return;
	}
	if (PQstatus(s->conn) == CONNECTION_BAD) {
		lost(s, "");
		return;
	}
	/* notices (e.g. from DDL) are not errors; libpq would print them to stderr */
	PQsetNoticeProcessor(s->conn, quiet_notice, NULL);
	s->st = PS_CONNECTING;
	watch(s, EV_WRITE, CONNECT_DEADLINE_MS);
}

static void
on_resolved(void *arg, const char *const *addrs, size_t n, const char *err)
{
	pgsink *s = arg;

	(void)n;
	ST_ASSERT(s->st == PS_RESOLVING);
	s->lookup = NULL;
	evtimer_del(s->timer);
	if (err != NULL) {
		lost(s, err);
		return;
	}
	connect_to(s, addrs);
}

static void
start_connect(pgsink *s)
{
	const char *const *names;
	size_t n = st_pgdsn_names(s->dsn, &names);
	struct timeval tv = { CONNECT_DEADLINE_MS / 1000, 0 };

	ST_ASSERT(s->st == PS_DOWN);
	if (n == 0) {
		connect_to(s, NULL);
		return;
	}
	if (st_resolver_lookup(s->resolver, names, n, on_resolved, s, &s->lookup) != ST_OK) {
		lost(s, "cannot start name resolution");
		return;
	}
	s->st = PS_RESOLVING;
	evtimer_add(s->timer, &tv);
}

static bool
is_error(const PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);

	return st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK;
}

/* Reads what arrived; returns true when the statement's last result is in. */
static bool
collect(pgsink *s)
{
	while (!PQisBusy(s->conn)) {
		PGresult *r = PQgetResult(s->conn);
		if (r == NULL)
			return true;
		if (s->res == NULL) {
			s->res = r;
		} else if (is_error(s->res)) {
			PQclear(r); /* keep the first error */
		} else {
			PQclear(s->res); /* of successes, keep the last */
			s->res = r;
		}
	}
	return false;
}

static void
finished(pgsink *s)
{
	PGresult *res = s->res;

	s->res = NULL;
	if (s->st == PS_SETUP) {
		ExecStatusType st = PQresultStatus(res);
		if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
			char msg[512];
			snprintf(msg, sizeof(msg), "session setup: %s", res ? PQresultErrorMessage(res) : "no result");
			PQclear(res);
			lost(s, msg);
			return;
		}
		PQclear(res);
		s->st = PS_IDLE;
		st_backoff_reset(&s->backoff);
		s->logged_down = false;
		st_info("%s: connected to the database", s->name);
		watch(s, EV_READ, 0);
		if (s->on_state != NULL)
			s->on_state(s->state_arg, true);
		return;
	}
	pgsink_result_fn fn = s->fn;
	void *fn_arg = s->fn_arg;

	s->st = PS_IDLE;
	s->fn = NULL;
	watch(s, EV_READ, 0);
	fn(fn_arg, res, NULL);
	PQclear(res);
}

static void
on_socket(evutil_socket_t fd, short what, void *arg)
{
	pgsink *s = arg;

	(void)fd;
	if (what & EV_TIMEOUT) {
		lost(s, s->st == PS_CONNECTING ? "connect timed out" : "statement timed out on the client");
		return;
	}
	switch (s->st) {
	case PS_CONNECTING:
		connect_poll(s);
		return;
	case PS_IDLE:
		/* nothing is expected: EOF, an error, or a notice */
		if (!PQconsumeInput(s->conn) || PQstatus(s->conn) != CONNECTION_OK) {
			lost(s, "");
			return;
		}
		while (!PQisBusy(s->conn)) {
			PGresult *r = PQgetResult(s->conn);
			if (r == NULL)
				break;
			PQclear(r);
		}
		watch(s, EV_READ, 0);
		return;
	case PS_SETUP:
	case PS_BUSY:
		if ((what & EV_READ) && !PQconsumeInput(s->conn)) {
			lost(s, "");
			return;
		}
		if (s->flushing) {
			int r = PQflush(s->conn);
			if (r == -1) {
				lost(s, "");
				return;
			}
			s->flushing = r == 1;
		}
		if (collect(s)) {
			finished(s);
			return;
		}
		if (PQstatus(s->conn) != CONNECTION_OK) {
			lost(s, "");
			return;
		}
		watch(s, s->flushing ? EV_READ | EV_WRITE : EV_READ,
		      s->st == PS_SETUP ? CONNECT_DEADLINE_MS : QUERY_DEADLINE_MS);
		return;
	case PS_DOWN:
	case PS_RESOLVING:
		return;
	}
}

st_err
pgsink_new(struct event_base *base, const char *dsn, const char *name, pgsink_state_fn on_state, void *arg,
           pgsink **out)
{
	pgsink *s = st_xcalloc(1, sizeof(*s));
	char err[512];

	s->base = base;
	if (st_pgdsn_parse(dsn, &s->dsn, err, sizeof(err)) != ST_OK) {
		st_error("%s: %s", name, err);
		free(s);
		return ST_EINVAL;
	}
	s->name = name;
	s->on_state = on_state;
	s->state_arg = arg;
	s->st = PS_DOWN;
	st_backoff_init(&s->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
	if ((s->timer = evtimer_new(base, on_timer, s)) == NULL || st_resolver_new(base, &s->resolver) != ST_OK) {
		pgsink_free(s);
		return ST_ESYS;
	}
	start_connect(s);
	*out = s;
	return ST_OK;
}

void
pgsink_free(pgsink *s)
{
	if (s == NULL)
		return;
	if (s->ev != NULL)
		event_free(s->ev);
	if (s->timer != NULL)
		event_free(s->timer);
	PQclear(s->res);
	PQfinish(s->conn);
	st_resolve_cancel(s->lookup);
	st_resolver_free(s->resolver);
	st_pgdsn_free(s->dsn);
	free(s);
}

bool
pgsink_up(const pgsink *s)
{
	return s->st == PS_IDLE || s->st == PS_BUSY;
}

bool
pgsink_idle(const pgsink *s)
{
	return s->st == PS_IDLE;
}

st_err
pgsink_query(pgsink *s, const char *sql, int n_params, const Oid *types, const char *const *values,
             const int *lengths, const int *formats, pgsink_result_fn fn, void *arg)
{
	if (s->st != PS_IDLE)
		return ST_EUNAVAIL;
	if (!PQsendQueryParams(s->conn, sql, n_params, types, values, lengths, formats, 0)) {
		/* libpq refuses only when the connection is broken */
		lost(s, "");
		return ST_EUNAVAIL;
	}
	s->st = PS_BUSY;
	s->fn = fn;
	s->fn_arg = arg;
	send_flush(s, QUERY_DEADLINE_MS);
	return ST_OK;
}
