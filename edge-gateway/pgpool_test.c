/*
 * pgpool_test: the pool against a real PostgreSQL.
 *
 * STUDIO_TEST_PG_DSN names the database (unset: skip, exit 77).
 * STUDIO_TEST_PG_RESTART, when set, is a shell command that restarts the
 * server (e.g. "su postgres -c 'pg_ctl -D DIR -m fast -w restart'"); without
 * it the restart test kills the pool's backends with pg_terminate_backend,
 * which the client sees the same way (the connection drops mid-query).
 */
#include "pgpool.h"

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
static int ORDER;

typedef struct res {
	int done;
	st_err err;
	int order;
	char val[64];
	char sqlstate[8];
	size_t len;
	int binary;
} res;

static void
on_done(void *arg, st_err err, const PGresult *r)
{
	res *x = arg;

	x->done++;
	x->err = err;
	x->order = ++ORDER;
	if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
		x->len = (size_t)PQgetlength(r, 0, 0);
		x->binary = PQfformat(r, 0);
		memcpy(x->val, PQgetvalue(r, 0, 0), ST_MIN(x->len + 1, sizeof(x->val)));
	}
	if (r != NULL && err != ST_OK) {
		const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		snprintf(x->sqlstate, sizeof(x->sqlstate), "%s", s ? s : "");
	}
}

static bool
is_ready(void *p)
{
	return pgpool_ready(p);
}

typedef struct many {
	res *r;
	size_t n;
} many;

static bool
all_done(void *arg)
{
	many *m = arg;

	for (size_t i = 0; i < m->n; i++)
		if (!m->r[i].done)
			return false;
	return true;
}

static pgpool *
pool(unsigned n)
{
	pgpool *p = NULL;

	ST_CHECK(pgpool_new(B, DSN, n, &p) == ST_OK);
	ST_CHECK(st_test_loop_until(B, is_ready, p, 10000));
	return p;
}

static pgpool_query *
sub(pgpool *p, enum pgpool_prio prio, const char *sql, res *r)
{
	return pgpool_submit(p, prio, sql, 0, NULL, NULL, NULL, 0, on_done, r);
}

static void
t_concurrent(void)
{
	pgpool *p = pool(4);
	res r[48];
	many m = { r, 48 };
	char bufs[40][24];

	memset(r, 0, sizeof(r));
	for (int i = 0; i < 40; i++) {
		const char *v[1] = { bufs[i] };
		snprintf(bufs[i], sizeof(bufs[i]), "%d", i);
		ST_CHECK(pgpool_submit(p, i % 2, "SELECT $1::int8 * 2", 1, v, NULL, NULL, 0, on_done, &r[i]) != NULL);
	}
	for (int i = 40; i < 48; i++)
		ST_CHECK(sub(p, PGPOOL_PRIO_REPLAY, "SELECT pg_backend_pid() FROM pg_sleep(0.2)", &r[i]) != NULL);
	ST_CHECK(st_test_loop_until(B, all_done, &m, 20000));
	for (int i = 0; i < 40; i++) {
		char want[24];
		snprintf(want, sizeof(want), "%d", i * 2);
		ST_CHECK_EQ_U64(r[i].done, 1);
		ST_CHECK(r[i].err == ST_OK);
		ST_CHECK_STR(r[i].val, want);
	}
	/* the sleeps ran on several connections at once */
	int distinct = 0;
	for (int i = 40; i < 48; i++) {
		bool seen = false;
		for (int j = 40; j < i; j++)
			seen |= strcmp(r[i].val, r[j].val) == 0;
		distinct += !seen;
		ST_CHECK(r[i].err == ST_OK);
	}
	ST_CHECK(distinct >= 2);
	ST_CHECK_EQ_U64(pgpool_queued(p), 0);
	ST_CHECK_EQ_U64(pgpool_inflight(p), 0);

	/* binary parameter and result */
	uint64_t be = htobe64(0x0102030405060708ull);
	const char *v[1] = { (const char *)&be };
	int len[1] = { 8 }, fmt[1] = { 1 };
	res b;
	many mb = { &b, 1 };
	memset(&b, 0, sizeof(b));
	ST_CHECK(pgpool_submit(p, PGPOOL_PRIO_FILL, "SELECT $1::int8 + 1", 1, v, len, fmt, 1, on_done, &b) != NULL);
	ST_CHECK(st_test_loop_until(B, all_done, &mb, 5000));
	ST_CHECK(b.err == ST_OK);
	ST_CHECK_EQ_U64(b.len, 8);
	ST_CHECK_EQ_U64(b.binary, 1);
	uint64_t got;
	memcpy(&got, b.val, 8);
	ST_CHECK_EQ_U64(be64toh(got), 0x0102030405060709ull);
	pgpool_free(p);
}

static void
t_error(void)
{
	pgpool *p = pool(1);
	res r[3];
	many m = { r, 3 };

	memset(r, 0, sizeof(r));
	sub(p, PGPOOL_PRIO_FILL, "SELECT 1/0", &r[0]);
	sub(p, PGPOOL_PRIO_FILL, "SELEKT", &r[1]);
	sub(p, PGPOOL_PRIO_FILL, "SELECT 7", &r[2]);
	ST_CHECK(st_test_loop_until(B, all_done, &m, 5000));
	ST_CHECK(r[0].err == ST_EDB);
	ST_CHECK_STR(r[0].sqlstate, "22012");
	ST_CHECK(r[1].err == ST_EDB);
	ST_CHECK_STR(r[1].sqlstate, "42601");
	ST_CHECK(r[2].err == ST_OK);
	ST_CHECK_STR(r[2].val, "7");
	/* the session settings were applied */
	res s;
	many ms = { &s, 1 };
	memset(&s, 0, sizeof(s));
	sub(p, PGPOOL_PRIO_FILL,
	    "SELECT current_setting('statement_timeout') || ' ' || current_setting('client_encoding') || ' ' || "
	    "current_setting('application_name')",
	    &s);
	ST_CHECK(st_test_loop_until(B, all_done, &ms, 5000));
	ST_CHECK_STR(s.val, "15s UTF8 edge-gateway");
	pgpool_free(p);
}

static void
t_priority(void)
{
	pgpool *p = pool(1);
	res r[5];
	many m = { r, 5 };

	memset(r, 0, sizeof(r));
	ORDER = 0;
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT pg_sleep(0.1)", &r[0]);
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT 1", &r[1]);
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT 2", &r[2]);
	sub(p, PGPOOL_PRIO_FILL, "SELECT 3", &r[3]);
	sub(p, PGPOOL_PRIO_FILL, "SELECT 4", &r[4]);
	ST_CHECK(st_test_loop_until(B, all_done, &m, 5000));
	/* the kick runs after all five are queued: fills first, each list in order */
	ST_CHECK_EQ_U64(r[3].order, 1);
	ST_CHECK_EQ_U64(r[4].order, 2);
	ST_CHECK_EQ_U64(r[0].order, 3);
	ST_CHECK_EQ_U64(r[1].order, 4);
	ST_CHECK_EQ_U64(r[2].order, 5);
	pgpool_free(p);
}

static pgpool_query *VICTIM;
static res CANCELLER;

static void
on_cancel_other(void *arg, st_err err, const PGresult *r)
{
	on_done(arg, err, r);
	pgpool_cancel(VICTIM);
	VICTIM = NULL;
}

static void
t_cancel(void)
{
	pgpool *p = pool(1);
	res r[5];
	many last = { &r[4], 1 };

	memset(r, 0, sizeof(r));
	memset(&CANCELLER, 0, sizeof(CANCELLER));
	pgpool_query *inflight = sub(p, PGPOOL_PRIO_FILL, "SELECT pg_sleep(0.2)", &r[0]);
	pgpool_query *queued = sub(p, PGPOOL_PRIO_FILL, "SELECT 1", &r[1]);
	pgpool_cancel(queued);
	ST_CHECK_EQ_U64(pgpool_queued(p), 1); /* the first waits for the kick */
	/* let the first one start, then cancel it in flight */
	while (pgpool_inflight(p) == 0)
		event_base_loop(B, EVLOOP_ONCE);
	pgpool_cancel(inflight);
	/* a callback cancels a queued query */
	ST_CHECK(pgpool_submit(p, PGPOOL_PRIO_FILL, "SELECT 2", 0, NULL, NULL, NULL, 0, on_cancel_other, &r[2]) !=
		 NULL);
	VICTIM = sub(p, PGPOOL_PRIO_FILL, "SELECT 3", &r[3]);
	sub(p, PGPOOL_PRIO_FILL, "SELECT 4", &r[4]);
	ST_CHECK(st_test_loop_until(B, all_done, &last, 5000));
	ST_CHECK_EQ_U64(r[0].done, 0);
	ST_CHECK_EQ_U64(r[1].done, 0);
	ST_CHECK_EQ_U64(r[2].done, 1);
	ST_CHECK_EQ_U64(r[3].done, 0);
	ST_CHECK_EQ_U64(r[4].done, 1);
	ST_CHECK_STR(r[4].val, "4");
	pgpool_free(p);
}

static void
t_queue_bound(void)
{
	/* nothing listens there: the queries wait, the queue is bounded */
	pgpool *p = NULL;
	static res r;
	size_t ok = 0;

	ST_CHECK(pgpool_new(B, "host=127.0.0.1 port=1 dbname=x connect_timeout=1", 2, &p) == ST_OK);
	for (unsigned i = 0; i < PGPOOL_MAX_QUEUED + 5; i++)
		ok += sub(p, PGPOOL_PRIO_REPLAY, "SELECT 1", &r) != NULL;
	ST_CHECK_EQ_U64(ok, PGPOOL_MAX_QUEUED);
	st_test_loop_for(B, 500);
	ST_CHECK(!pgpool_ready(p));
	ST_CHECK_EQ_U64(r.done, 0);
	pgpool_free(p); /* drops the queue without callbacks (ASan checks the leaks) */
	ST_CHECK(pgpool_new(B, "host='unterminated", 1, &p) == ST_EINVAL);
	ST_CHECK(pgpool_new(B, DSN, 0, &p) == ST_EINVAL);
}

/*
 * Deadlines, on a hand-driven clock: a query stuck in flight ends with
 * ST_ETIMEDOUT when its deadline passes (its connection is dropped and made
 * again), and a query still waiting for a connection ends at its own.
 */
static bool
is_up2(void *p)
{
	return pgpool_up(p) == 1;
}

static void
t_deadline(void)
{
	st_clock_fake f;
	pgpool *p = NULL;
	res r[3];
	many m0 = { &r[1], 1 }, m1 = { &r[0], 1 }, m2 = { &r[2], 1 };
	pgpool_query *q;

	st_clock_fake_init(&f, 1000);
	ST_CHECK(pgpool_new(B, DSN, 1, &p) == ST_OK);
	pgpool_set_clock(p, &f.clock);
	ST_CHECK(st_test_loop_until(B, is_ready, p, 10000));
	memset(r, 0, sizeof(r));
	q = sub(p, PGPOOL_PRIO_FILL, "SELECT pg_sleep(60)", &r[0]);
	pgpool_set_deadline(q, 3000);
	q = sub(p, PGPOOL_PRIO_REPLAY, "SELECT 'late'", &r[1]);
	pgpool_set_deadline(q, 1000);
	while (pgpool_inflight(p) == 0)
		event_base_loop(B, EVLOOP_ONCE);
	/* before the deadlines nothing ends (several sweeps run meanwhile) */
	f.now += 999;
	st_test_loop_for(B, 600);
	ST_CHECK_EQ_U64(r[0].done + r[1].done, 0);
	/* the queued one's deadline: it ends, the stuck one goes on */
	f.now += 1;
	ST_CHECK(st_test_loop_until(B, all_done, &m0, 2000));
	ST_CHECK(r[1].err == ST_ETIMEDOUT);
	ST_CHECK_EQ_U64(r[0].done, 0);
	ST_CHECK_EQ_U64(pgpool_queued(p), 0);
	ST_CHECK_EQ_U64(pgpool_inflight(p), 1);
	/* the stuck one's deadline: its connection is dropped, the query fails */
	f.now += 2000;
	ST_CHECK(st_test_loop_until(B, all_done, &m1, 2000));
	ST_CHECK(r[0].err == ST_ETIMEDOUT);
	ST_CHECK_EQ_U64(pgpool_inflight(p), 0);
	/* the connection is made again and serves the next query */
	sub(p, PGPOOL_PRIO_FILL, "SELECT 'again'", &r[2]);
	ST_CHECK(st_test_loop_until(B, all_done, &m2, 10000));
	ST_CHECK(r[2].err == ST_OK);
	ST_CHECK_STR(r[2].val, "again");
	ST_CHECK(st_test_loop_until(B, is_up2, p, 1000));
	pgpool_free(p);
}

/*
 * The sweep fails expired queries from its own list; a callback that
 * cancels another query on that list must only mark it (the old code
 * unlinked it from the real queue, where it no longer was: the queue's
 * count wrapped and the query was freed while the sweep still held it).
 */
typedef struct pair {
	res r;
	pgpool_query *q; /* this pair's own query */
	struct pair *peer;
} pair;

static void
on_cancel_peer(void *arg, st_err err, const PGresult *r)
{
	pair *x = arg;

	on_done(&x->r, err, r);
	pgpool_cancel(x->peer->q);
	x->peer->q = NULL;
}

static void
t_sweep_cancel(void)
{
	st_clock_fake f;
	pgpool *p = NULL;
	pair a, b;
	res c;
	many mc = { &c, 1 };

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	st_clock_fake_init(&f, 1000);
	/* nothing listens there: the queries wait until PGPOOL_WAIT_MS */
	ST_CHECK(pgpool_new(B, "host=127.0.0.1 port=1 dbname=x connect_timeout=1", 1, &p) == ST_OK);
	pgpool_set_clock(p, &f.clock);
	a.peer = &b;
	b.peer = &a;
	/* each cancels the other: whichever is called first, the other is on the sweep's list */
	a.q = pgpool_submit(p, PGPOOL_PRIO_REPLAY, "SELECT 1", 0, NULL, NULL, NULL, 0, on_cancel_peer, &a);
	b.q = pgpool_submit(p, PGPOOL_PRIO_REPLAY, "SELECT 2", 0, NULL, NULL, NULL, 0, on_cancel_peer, &b);
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT 3", &c);
	ST_CHECK_EQ_U64(pgpool_queued(p), 3);
	f.now += PGPOOL_WAIT_MS;
	ST_CHECK(st_test_loop_until(B, all_done, &mc, 2000));
	ST_CHECK(c.err == ST_EUNAVAIL);
	ST_CHECK_EQ_U64(a.r.done + b.r.done, 1);
	ST_CHECK_EQ_U64(pgpool_queued(p), 0);
	pgpool_free(p);
}

/*
 * A reserved connection runs fills only: with replays holding every other
 * connection, a fill submitted after them runs at once (the old pool gave
 * both connections to the replays and the fill waited for one to end).
 */
static bool
both_up(void *p)
{
	return pgpool_up(p) == 2;
}

static void
t_reserve(void)
{
	pgpool *p = NULL;
	res r[3];
	many m = { r, 3 };

	ST_CHECK(pgpool_new(B, DSN, 2, &p) == ST_OK);
	pgpool_reserve_fills(p, 1);
	ST_CHECK(st_test_loop_until(B, both_up, p, 10000));
	memset(r, 0, sizeof(r));
	ORDER = 0;
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT pg_sleep(0.3)", &r[0]);
	sub(p, PGPOOL_PRIO_REPLAY, "SELECT pg_sleep(0.3)", &r[1]);
	while (pgpool_inflight(p) == 0)
		event_base_loop(B, EVLOOP_ONCE);
	ST_CHECK_EQ_U64(pgpool_inflight(p), 1);
	ST_CHECK_EQ_U64(pgpool_queued(p), 1);
	sub(p, PGPOOL_PRIO_FILL, "SELECT 'fill'", &r[2]);
	ST_CHECK(st_test_loop_until(B, all_done, &m, 5000));
	ST_CHECK_EQ_U64(r[2].order, 1);
	ST_CHECK_STR(r[2].val, "fill");
	ST_CHECK(r[0].err == ST_OK && r[1].err == ST_OK);
	pgpool_free(p);
}

static void
kill_backends(void)
{
	const char *cmd = getenv("STUDIO_TEST_PG_RESTART");

	if (cmd != NULL && cmd[0] != 0) {
		fprintf(stderr, "restarting the server: %s\n", cmd);
		ST_CHECK(system(cmd) == 0);
		return;
	}
	/* Test code, not the pool: a blocking connection is fine here. */
	PGconn *c = PQconnectdb(DSN);
	ST_CHECK(PQstatus(c) == CONNECTION_OK);
	PGresult *r = PQexec(c, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
				"WHERE application_name = 'edge-gateway'");
	ST_CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
	PQclear(r);
	PQfinish(c);
}

static void
t_restart(void)
{
	pgpool *p = pool(4);
	res r[4], after[6];
	many m = { r, 4 }, ma = { after, 6 };

	memset(r, 0, sizeof(r));
	memset(after, 0, sizeof(after));
	for (int i = 0; i < 4; i++)
		sub(p, PGPOOL_PRIO_FILL, "SELECT pg_sleep(30)", &r[i]);
	/* wait until the server runs all four */
	st_test_loop_for(B, 500);
	ST_CHECK_EQ_U64(pgpool_inflight(p), 4);
	kill_backends();
	ST_CHECK(st_test_loop_until(B, all_done, &m, 10000));
	for (int i = 0; i < 4; i++) {
		ST_CHECK_EQ_U64(r[i].done, 1);
		ST_CHECK(r[i].err == ST_EDB);
	}
	/* submitted while down: they wait for the reconnect and succeed */
	for (int i = 0; i < 6; i++)
		sub(p, i % 2, "SELECT 'back'", &after[i]);
	ST_CHECK(st_test_loop_until(B, all_done, &ma, 20000));
	for (int i = 0; i < 6; i++) {
		ST_CHECK(after[i].err == ST_OK);
		ST_CHECK_STR(after[i].val, "back");
	}
	ST_CHECK(pgpool_ready(p));
	pgpool_free(p);
}

/*
 * A host NAME in the DSN: resolved on the resolver thread, connected by
 * address with the name kept (host=localhost, hostaddr=...); localhost may
 * resolve to ::1 first, where nothing listens, and the next address is
 * tried as libpq would have.
 */
static void
t_host_name(void)
{
	char dsn[512];
	const char *at = strstr(DSN, "host=127.0.0.1");
	pgpool *p = NULL;
	res r;
	many m = { &r, 1 };

	if (at == NULL) {
		printf("t_host_name: the DSN has no host=127.0.0.1, nothing to rename\n");
		return;
	}
	snprintf(dsn, sizeof(dsn), "%.*shost=localhost%s", (int)(at - DSN), DSN, at + strlen("host=127.0.0.1"));
	ST_CHECK(pgpool_new(B, dsn, 2, &p) == ST_OK);
	ST_CHECK(st_test_loop_until(B, is_ready, p, 10000));
	memset(&r, 0, sizeof(r));
	ST_CHECK(sub(p, PGPOOL_PRIO_FILL, "SELECT 41 + 1", &r) != NULL);
	ST_CHECK(st_test_loop_until(B, all_done, &m, 5000));
	ST_CHECK(r.err == ST_OK);
	ST_CHECK_STR(r.val, "42");
	pgpool_free(p);
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
	ST_RUN(t_concurrent);
	ST_RUN(t_error);
	ST_RUN(t_priority);
	ST_RUN(t_cancel);
	ST_RUN(t_queue_bound);
	ST_RUN(t_restart);
	ST_RUN(t_host_name);
	ST_RUN(t_deadline);
	ST_RUN(t_sweep_cancel);
	ST_RUN(t_reserve);
	event_free(tick);
	event_base_free(B);
	return st_test_done();
}
