/*
 * st_pgconn_test: one connection against a real PostgreSQL.
 *
 * STUDIO_TEST_PG_DSN names the database (unset: skip, exit 77).  Server
 * sessions are ended from a second, plain blocking connection (the test's
 * own, not the module's) with pg_terminate_backend, which the module sees
 * as a server that went away.
 */
#include "st_pgconn.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "st_test.h"
#include "st_test_loop.h"
#include "st_util.h"

static struct event_base *B;
static const char *DSN;

/* What the callbacks saw. */
typedef struct seen {
	int ups, downs;        /* on_state(true), on_state(false) */
	int results;           /* result callbacks */
	bool res_null;         /* the last result callback had no result */
	ExecStatusType status; /* of the last result */
	char val[128];         /* its first value (text results) */
	size_t len;
	int format;
	char sqlstate[8];
	char err[256];        /* err of the last callback with no result */
	st_pgconn *send_next; /* when set, the result callback sends "SELECT 'next'" on it */
	int next_rv;
} seen;

static void
on_state(void *arg, bool up)
{
	seen *s = arg;

	if (up)
		s->ups++;
	else
		s->downs++;
}

static void
on_result(void *arg, PGresult *r, const char *err)
{
	seen *s = arg;

	s->results++;
	s->res_null = r == NULL;
	s->val[0] = s->sqlstate[0] = s->err[0] = '\0';
	s->len = 0;
	if (r == NULL) {
		snprintf(s->err, sizeof(s->err), "%s", err ? err : "(null)");
		return;
	}
	s->status = PQresultStatus(r);
	if (s->status == PGRES_TUPLES_OK && PQntuples(r) > 0) {
		s->len = (size_t)PQgetlength(r, 0, 0);
		s->format = PQfformat(r, 0);
		memcpy(s->val, PQgetvalue(r, 0, 0), ST_MIN(s->len + 1, sizeof(s->val)));
	}
	if (s->status == PGRES_FATAL_ERROR) {
		const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		snprintf(s->sqlstate, sizeof(s->sqlstate), "%s", st ? st : "");
	}
	if (s->send_next != NULL) {
		st_pgconn *c = s->send_next;
		s->send_next = NULL;
		s->next_rv = st_pgconn_send(c, "SELECT 'next'", 0, NULL, NULL, NULL, NULL, 0, on_result, s);
	}
}

static bool
is_up(void *arg)
{
	return st_pgconn_up(arg);
}

typedef struct want {
	seen *s;
	int results;
} want;

static bool
has_results(void *arg)
{
	want *w = arg;

	return w->s->results >= w->results;
}

static bool
downs_reach(void *arg)
{
	want *w = arg;

	return w->s->downs >= w->results;
}

static const st_pgconn_opts OPTS = { .name = "test",
				     .application_name = "st_pgconn_test",
				     .setup_sql = "SET statement_timeout = '7s'; SET client_encoding = 'UTF8'",
				     .log_notices = true };

static st_pgconn *
open_up(const char *dsn, const st_pgconn_opts *o, seen *s)
{
	st_pgconn *c = NULL;

	ST_CHECK(st_pgconn_new(B, dsn, o, on_state, s, &c) == ST_OK);
	ST_CHECK(c != NULL);
	ST_CHECK(!st_pgconn_up(c)); /* never connected inside st_pgconn_new */
	ST_CHECK(st_test_loop_until(B, is_up, c, 10000));
	return c;
}

/* Sends sql and waits for its callback; false when none came. */
static bool
query(st_pgconn *c, seen *s, const char *sql)
{
	want w = { s, s->results + 1 };

	if (st_pgconn_send(c, sql, 0, NULL, NULL, NULL, NULL, 0, on_result, s) != ST_OK)
		return false;
	return st_test_loop_until(B, has_results, &w, 15000);
}

/* The backend pid of c's session. */
static int
backend_pid(st_pgconn *c, seen *s)
{
	if (!query(c, s, "SELECT pg_backend_pid()") || s->res_null)
		return -1;
	return atoi(s->val);
}

/* Ends server session pid from the test's own blocking connection. */
static void
terminate(int pid)
{
	PGconn *admin = PQconnectdb(DSN);
	char sql[96];
	PGresult *r;

	ST_CHECK(PQstatus(admin) == CONNECTION_OK);
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", pid);
	r = PQexec(admin, sql);
	ST_CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		ST_CHECK_STR(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
	PQfinish(admin);
}

static void
t_bad_dsn(void)
{
	st_pgconn *c = NULL;

	ST_CHECK(st_pgconn_new(B, "no_such_keyword=1", &OPTS, NULL, NULL, &c) == ST_EINVAL);
	ST_CHECK(c == NULL);
	ST_CHECK(st_pgconn_new(B, "postgresql://[", &OPTS, NULL, NULL, &c) == ST_EINVAL);
}

/* Up once, the session settings and application_name applied, text and binary results. */
static void
t_session(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);

	ST_CHECK_EQ_U64(s.ups, 1);
	ST_CHECK(st_pgconn_idle(c));
	ST_CHECK(query(c, &s,
		       "SELECT current_setting('statement_timeout') || ' ' || "
		       "current_setting('client_encoding') || ' ' || current_setting('application_name')"));
	ST_CHECK(!s.res_null);
	ST_CHECK_STR(s.val, "7s UTF8 st_pgconn_test");

	uint64_t be = htobe64(0x0102030405060708ull);
	const char *v[1] = { (const char *)&be };
	int len[1] = { 8 }, fmt[1] = { 1 };
	Oid types[1] = { 20 }; /* int8 */
	want w = { &s, s.results + 1 };
	ST_CHECK(st_pgconn_send(c, "SELECT $1 + 1", 1, types, v, len, fmt, 1, on_result, &s) == ST_OK);
	ST_CHECK(st_test_loop_until(B, has_results, &w, 5000));
	ST_CHECK_EQ_U64(s.len, 8);
	ST_CHECK_EQ_U64(s.format, 1);
	uint64_t got = 0;
	memcpy(&got, s.val, 8);
	ST_CHECK_EQ_U64(be64toh(got), 0x0102030405060709ull);
	ST_CHECK_EQ_U64(s.downs, 0);
	st_pgconn_free(c);
}

/* One statement at a time; the callback may send the next one itself. */
static void
t_busy(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);
	want w = { &s, 2 };

	ST_CHECK(st_pgconn_send(c, "SELECT 'first' FROM pg_sleep(0.1)", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) ==
		 ST_OK);
	ST_CHECK(!st_pgconn_idle(c));
	ST_CHECK(st_pgconn_up(c));
	ST_CHECK(st_pgconn_send(c, "SELECT 'refused'", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_EUNAVAIL);
	s.send_next = c;
	ST_CHECK(st_test_loop_until(B, has_results, &w, 5000));
	ST_CHECK_EQ_U64(s.next_rv, ST_OK);
	ST_CHECK_EQ_U64(s.results, 2);
	ST_CHECK_STR(s.val, "next");
	ST_CHECK(st_pgconn_idle(c));
	st_pgconn_free(c);
}

/* An SQL error is a result; the connection stays up and takes the next statement. */
static void
t_sql_error(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);
	int pid = backend_pid(c, &s);

	ST_CHECK(query(c, &s, "SELECT 1/0"));
	ST_CHECK(!s.res_null);
	ST_CHECK(s.status == PGRES_FATAL_ERROR);
	ST_CHECK_STR(s.sqlstate, "22012");
	ST_CHECK(query(c, &s, "SELEKT"));
	ST_CHECK_STR(s.sqlstate, "42601");
	ST_CHECK(st_pgconn_idle(c));
	ST_CHECK_EQ_U64(backend_pid(c, &s), pid);
	ST_CHECK_EQ_U64(s.downs, 0);
	st_pgconn_free(c);
}

/*
 * The server ends the session: while idle it is noticed without a statement
 * (down at once, then up again on a new session); while a statement runs,
 * its callback gets no result and a reason.
 */
static void
t_server_gone(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);
	int pid = backend_pid(c, &s);
	want w;

	terminate(pid);
	w = (want){ &s, 1 };
	ST_CHECK(st_test_loop_until(B, downs_reach, &w, 10000));
	ST_CHECK_EQ_U64(s.downs, 1);
	ST_CHECK(st_test_loop_until(B, is_up, c, 10000));
	ST_CHECK_EQ_U64(s.ups, 2);
	int pid2 = backend_pid(c, &s);
	ST_CHECK(pid2 > 0 && pid2 != pid);

	w = (want){ &s, s.results + 1 };
	ST_CHECK(st_pgconn_send(c, "SELECT pg_sleep(30)", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_OK);
	terminate(pid2);
	ST_CHECK(st_test_loop_until(B, has_results, &w, 10000));
	/* the server's FATAL 57P01 may arrive as the statement's result before the socket closes */
	if (s.res_null)
		ST_CHECK(strstr(s.err, "connection lost") != NULL);
	else
		ST_CHECK_STR(s.sqlstate, "57P01");
	w = (want){ &s, 2 };
	ST_CHECK(st_test_loop_until(B, downs_reach, &w, 10000));
	ST_CHECK_EQ_U64(s.downs, 2);
	ST_CHECK(st_test_loop_until(B, is_up, c, 10000));
	ST_CHECK(query(c, &s, "SELECT 'back'"));
	ST_CHECK_STR(s.val, "back");
	st_pgconn_free(c);
}

/* st_pgconn_drop gives a statement up at once (its callback inside the call) and reconnects. */
static void
t_drop(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);

	ST_CHECK(st_pgconn_send(c, "SELECT pg_sleep(30)", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_OK);
	st_pgconn_drop(c, "given up by the test");
	ST_CHECK_EQ_U64(s.results, 1);
	ST_CHECK(s.res_null);
	ST_CHECK(strncmp(s.err, "given up by the test", 20) == 0);
	ST_CHECK(!st_pgconn_up(c));
	ST_CHECK_EQ_U64(s.downs, 1);
	st_pgconn_drop(c, "again, while down"); /* nothing happens */
	ST_CHECK_EQ_U64(s.results, 1);
	ST_CHECK(st_test_loop_until(B, is_up, c, 10000));
	ST_CHECK(query(c, &s, "SELECT 'back'"));
	ST_CHECK_STR(s.val, "back");
	st_pgconn_free(c);
}

/* A statement past opts.query_deadline_ms ends without a result; the session is made again. */
static void
t_deadline(void)
{
	seen s = { 0 };
	st_pgconn_opts o = OPTS;
	st_pgconn *c;
	want w = { &s, 1 };

	o.query_deadline_ms = 300;
	c = open_up(DSN, &o, &s);
	ST_CHECK(st_pgconn_send(c, "SELECT pg_sleep(30)", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_OK);
	ST_CHECK(st_test_loop_until(B, has_results, &w, 10000));
	ST_CHECK(s.res_null);
	ST_CHECK(strstr(s.err, "statement timed out on the client") != NULL);
	ST_CHECK(st_test_loop_until(B, is_up, c, 10000));
	ST_CHECK(query(c, &s, "SELECT 'quick'")); /* well within the deadline */
	ST_CHECK_STR(s.val, "quick");
	st_pgconn_free(c);
}

/* A session setup that fails is not up: the connection keeps trying and never reports up. */
static void
t_setup_fails(void)
{
	seen s = { 0 };
	st_pgconn_opts o = OPTS;
	st_pgconn *c = NULL;

	o.setup_sql = "SET no_such_setting_here = 1";
	ST_CHECK(st_pgconn_new(B, DSN, &o, on_state, &s, &c) == ST_OK);
	st_test_loop_for(B, 600); /* several attempts: 100 ms, 200 ms, ... */
	ST_CHECK(!st_pgconn_up(c));
	ST_CHECK_EQ_U64(s.ups, 0);
	ST_CHECK_EQ_U64(s.downs, 0);
	ST_CHECK(st_pgconn_send(c, "SELECT 1", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_EUNAVAIL);
	st_pgconn_free(c);
}

/* A host NAME: resolved off the loop, connected by address (localhost may give ::1 first). */
static void
t_host_name(void)
{
	char dsn[512];
	const char *at = strstr(DSN, "host=127.0.0.1");
	seen s = { 0 };
	st_pgconn *c;

	if (at == NULL) {
		printf("t_host_name: the DSN has no host=127.0.0.1, nothing to rename\n");
		return;
	}
	snprintf(dsn, sizeof(dsn), "%.*shost=localhost%s", (int)(at - DSN), DSN, at + strlen("host=127.0.0.1"));
	c = open_up(dsn, &OPTS, &s);
	ST_CHECK(query(c, &s, "SELECT 41 + 1"));
	ST_CHECK_STR(s.val, "42");
	st_pgconn_free(c);
}

/* Freed with a statement in flight: no callback, nothing leaks (ASan). */
static void
t_free_busy(void)
{
	seen s = { 0 };
	st_pgconn *c = open_up(DSN, &OPTS, &s);

	ST_CHECK(st_pgconn_send(c, "SELECT pg_sleep(30)", 0, NULL, NULL, NULL, NULL, 0, on_result, &s) == ST_OK);
	st_test_loop_for(B, 100);
	st_pgconn_free(c);
	st_test_loop_for(B, 100);
	ST_CHECK_EQ_U64(s.results, 0);
}

int
main(void)
{
	struct event *tick;

	DSN = getenv("STUDIO_TEST_PG_DSN");
	if (DSN == NULL || DSN[0] == 0) {
		printf("skip: STUDIO_TEST_PG_DSN not set\n");
		return 77;
	}
	evthread_use_pthreads(); /* the resolver answers through a mailbox */
	B = event_base_new();
	/* A 20 ms tick so st_test_loop_until re-checks its deadline. */
	tick = st_test_loop_tick(B);
	ST_RUN(t_bad_dsn);
	ST_RUN(t_session);
	ST_RUN(t_busy);
	ST_RUN(t_sql_error);
	ST_RUN(t_server_gone);
	ST_RUN(t_drop);
	ST_RUN(t_deadline);
	ST_RUN(t_setup_fails);
	ST_RUN(t_host_name);
	ST_RUN(t_free_busy);
	event_free(tick);
	event_base_free(B);
	return st_test_done();
}
