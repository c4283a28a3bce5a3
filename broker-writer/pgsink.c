/*
 * pgsink: an explicit state machine around one non-blocking PGconn.
 *
 *   DOWN --timer--> CONNECTING --PQconnectPoll OK--> SETUP --result--> IDLE
 *   IDLE --pgsink_query--> BUSY --last result--> IDLE
 *   any --error, EOF, deadline--> DOWN (callback of a BUSY statement gets NULL)
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

#include "st_log.h"
#include "st_util.h"

enum pgsink_state { PS_DOWN, PS_CONNECTING, PS_SETUP, PS_IDLE, PS_BUSY };

#define CONNECT_DEADLINE_MS 10000
#define QUERY_DEADLINE_MS 60000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

static const char session_sql[] =
    "SET lock_timeout = '5s'; SET statement_timeout = '30s'; "
    "SET idle_in_transaction_session_timeout = '10s'; SET client_encoding = 'UTF8'; "
    "SET application_name = 'broker-writer'";

struct pgsink {
	struct event_base *base;
	char *dsn;
	const char *name;
	pgsink_state_fn on_state;
	void *state_arg;
	enum pgsink_state st;
	PGconn *conn;
	struct event *ev;     /* socket wait */
	struct event *timer;  /* reconnect backoff */
	uint32_t backoff_ms;
	PGresult *res;        /* result being collected */
	pgsink_result_fn fn;
	void *fn_arg;
	bool flushing;        /* PQflush returned 1: libpq still holds output */
	bool logged_down;
};

static void on_socket(evutil_socket_t fd, short what, void *arg);
static void start_connect(pgsink *s);

static void
one_line(char *m)
{
	size_t n = strlen(m);

	while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
		m[--n] = '\0';
	for (char *p = m; *p != '\0'; p++)
		if (*p == '\n')
			*p = ' ';
}

static void
watch(pgsink *s, short what, int deadline_ms)
{
	struct timeval tv = { deadline_ms / 1000, (deadline_ms % 1000) * 1000 };

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
	struct timeval tv = { s->backoff_ms / 1000, (s->backoff_ms % 1000) * 1000 };

	evtimer_add(s->timer, &tv);
	s->backoff_ms = ST_MIN(s->backoff_ms * 2, BACKOFF_MAX_MS);
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
	one_line(msg);
	if (!s->logged_down || was_up)
		st_warn("%s: database connection lost: %s", s->name, msg);
	s->logged_down = true;
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
	(void)fd;
	(void)what;
	start_connect(arg);
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

static void
start_connect(pgsink *s)
{
	const char *const keys[] = { "dbname", "keepalives", "keepalives_idle", "tcp_user_timeout", "application_name",
		                     NULL };
	const char *const vals[] = { s->dsn, "1", "5", "10000", "broker-writer", NULL };

	ST_ASSERT(s->st == PS_DOWN);
	s->conn = PQconnectStartParams(keys, vals, 1);
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
		s->backoff_ms = BACKOFF_MIN_MS;
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
		return;
	}
}

st_err
pgsink_new(struct event_base *base, const char *dsn, const char *name, pgsink_state_fn on_state, void *arg,
           pgsink **out)
{
	pgsink *s = st_xcalloc(1, sizeof(*s));

	s->base = base;
	s->dsn = st_xstrdup(dsn);
	s->name = name;
	s->on_state = on_state;
	s->state_arg = arg;
	s->st = PS_DOWN;
	s->backoff_ms = BACKOFF_MIN_MS;
	if ((s->timer = evtimer_new(base, on_timer, s)) == NULL) {
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
	free(s->dsn);
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
