/*
 * flush_test: the writer's flush machine (flush.h).
 *
 * Without a database: the transition table's shape, and a transition
 * outside it aborts the process (flush_goto, checked in a child).
 *
 * Against a real PostgreSQL (STUDIO_TEST_PG_DSN; unset: those cases are
 * skipped and the test exits 77): the machine, on a real st_pgconn in a
 * private schema made by the writer's own migration, driven through every
 * transition: a tick, a commit, requests that came due while a flush was
 * out (sent before the committed one is answered), a whole flush that
 * does not wait for the tick, a data error split by request, a lost connection resent, the give-up
 * after give_up_ms (an injected clock), unavailability after 10 s of
 * failures, and a stop.  Only the answers to the producers are the test's
 * own (the hooks); publish listens on inproc://.
 */
#include "flush.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "schema.h"
#include "st_log.h"
#include "st_test.h"
#include "st_test_loop.h"
#include "st_test_pg.h"
#include "st_util.h"

/* ---- the table, no database ---- */

/* Exactly the transitions of the diagram in flush.c, nothing more. */
static void
t_edges(void)
{
	static const struct {
		enum flush_state from, to;
	} want[] = {
		{ FLUSH_IDLE, FLUSH_TICK },    { FLUSH_IDLE, FLUSH_WAITING }, { FLUSH_TICK, FLUSH_IDLE },
		{ FLUSH_WAITING, FLUSH_SENT }, { FLUSH_SENT, FLUSH_IDLE },    { FLUSH_SENT, FLUSH_WAITING },
	};
	size_t n = 0;

	for (size_t i = 0; i < ST_ARRAY_LEN(want); i++)
		ST_CHECK(flush_state_can(want[i].from, want[i].to));
	for (int f = 0; f < FLUSH_STATE_COUNT; f++)
		for (int t = 0; t < FLUSH_STATE_COUNT; t++)
			n += flush_state_can((enum flush_state)f, (enum flush_state)t);
	ST_CHECK_EQ_U64(n, ST_ARRAY_LEN(want));
	ST_CHECK(!flush_state_can((enum flush_state)FLUSH_STATE_COUNT, FLUSH_IDLE));
	ST_CHECK(!flush_state_can(FLUSH_IDLE, (enum flush_state)FLUSH_STATE_COUNT));
	ST_CHECK_STR(flush_state_name(FLUSH_WAITING), "waiting");
	ST_CHECK_STR(flush_state_name((enum flush_state)FLUSH_STATE_COUNT), "?");
}

/* Every state leads back to IDLE (a flush always ends), and fl is only sent from WAITING. */
static void
t_back_to_idle(void)
{
	for (int s = 0; s < FLUSH_STATE_COUNT; s++) {
		bool seen[FLUSH_STATE_COUNT] = { false };
		bool grew = true;

		seen[s] = true;
		while (grew) {
			grew = false;
			for (int f = 0; f < FLUSH_STATE_COUNT; f++)
				for (int t = 0; t < FLUSH_STATE_COUNT; t++)
					if (seen[f] && !seen[t] &&
					    flush_state_can((enum flush_state)f, (enum flush_state)t))
						seen[t] = grew = true;
		}
		ST_CHECK(seen[FLUSH_IDLE]);
	}
	for (int f = 0; f < FLUSH_STATE_COUNT; f++)
		ST_CHECK(flush_state_can((enum flush_state)f, FLUSH_SENT) == (f == FLUSH_WAITING));
}

/* flush_goto walks the diagram, and a transition outside it ends the process (SIGABRT). */
static void
t_refused_transition(void)
{
	static const enum flush_state walk[] = { FLUSH_TICK,    FLUSH_IDLE, FLUSH_WAITING, FLUSH_SENT,
						 FLUSH_WAITING, FLUSH_SENT, FLUSH_IDLE };
	static const struct {
		enum flush_state from, to;
	} refused[] = { { FLUSH_IDLE, FLUSH_SENT },
			{ FLUSH_TICK, FLUSH_WAITING },
			{ FLUSH_WAITING, FLUSH_IDLE },
			{ FLUSH_SENT, FLUSH_TICK },
			{ FLUSH_IDLE, FLUSH_IDLE } };
	enum flush_state s = FLUSH_IDLE;

	for (size_t i = 0; i < ST_ARRAY_LEN(walk); i++) {
		flush_goto(&s, walk[i]);
		ST_CHECK_EQ_U64(s, walk[i]);
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(refused); i++) {
		int status = 0;
		pid_t pid;

		fflush(NULL);
		if ((pid = fork()) == 0) {
			enum flush_state c = refused[i].from;

			flush_goto(&c, refused[i].to);
			_exit(0); /* not reached when the transition is refused */
		}
		ST_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
			fprintf(stderr, "  %s -> %s: child status %d, want killed by SIGABRT\n",
				flush_state_name(refused[i].from), flush_state_name(refused[i].to), status);
		ST_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	}
}

/* ---- the machine against PostgreSQL ---- */

static struct event_base *B;
static st_clock_fake CLK;
static st_pgconn *DB;
static publish *PUB;
static flush *F;
static st_metrics *M;
static flush_metrics FM;
static int REACHABLE, SETTLED, FATAL;

/* One producer request of one event; the event's bytes live here until it is answered. */
typedef struct req {
	proto_event ev;
	char topic[32], data[32];
	int answered, refused;
	size_t n;                 /* events (1 but for t_whole_flush's) */
	size_t pending_at_answer; /* events still in cur (not taken into a flush) inside the answer hook */
	uint64_t seq;
	char code[32], detail[400];
} req;

static void
on_answer(void *owner, const uint64_t *seqs, size_t n)
{
	req *r = owner;
	flush_stats fs;

	flush_stats_get(F, &fs);
	r->answered++;
	r->pending_at_answer = fs.pending_events;
	if (n == r->n)
		r->seq = seqs[0];
	else
		fprintf(stderr, "  answer with %zu seqs, want %zu\n", n, r->n);
}

static void
on_refuse(void *owner, const char *code, const char *detail)
{
	req *r = owner;

	r->refused++;
	snprintf(r->code, sizeof(r->code), "%s", code);
	snprintf(r->detail, sizeof(r->detail), "%s", detail);
}

static void
on_reachable(void *arg)
{
	(void)arg;
	REACHABLE++;
}

static void
on_settled(void *arg)
{
	(void)arg;
	SETTLED++;
}

static void
on_fatal(void *arg)
{
	(void)arg;
	FATAL++;
}

static void
on_db(void *arg, bool up)
{
	(void)arg;
	if (F != NULL)
		flush_db_state(F, up);
}

static const proto_event *
at(const void *src, size_t i)
{
	return &((const proto_event *)src)[i];
}

static void
add(req *r, const char *topic, const char *data)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->topic, sizeof(r->topic), "%s", topic);
	snprintf(r->data, sizeof(r->data), "%s", data);
	r->ev.topic = (proto_str){ r->topic, strlen(r->topic) };
	r->ev.data = (proto_str){ r->data, strlen(r->data) };
	r->ev.has_data = true;
	r->n = 1;
	ST_CHECK(flush_add(F, r, 1, r->ev.topic.len + r->ev.data.len, at, &r->ev) == ST_OK);
}

static bool
is_idle(void *arg)
{
	(void)arg;
	return flush_get_state(F) == FLUSH_IDLE;
}

static bool
is_up(void *arg)
{
	(void)arg;
	return st_pgconn_idle(DB);
}

static bool
settled(void *arg)
{
	req *r = arg;

	return r->answered + r->refused > 0;
}

/* Waits (wide limit) for r's answer; false, printed, when none came. */
static bool
wait_settled(req *r, const char *what)
{
	if (st_test_loop_until(B, settled, r, 20000))
		return true;
	fprintf(stderr, "  %s: no answer in 20 s (state %s)\n", what, flush_state_name(flush_get_state(F)));
	return false;
}

static uint64_t
failures(void)
{
	return st_counter_get(FM.failures);
}

/* IDLE, cur empty: the head query (TICK), answered: IDLE, the database reachable. */
static void
t_tick(void)
{
	int reachable = REACHABLE, settled_before = SETTLED;

	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_TICK);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK_EQ_U64(REACHABLE, reachable + 1);
	ST_CHECK_EQ_U64(SETTLED, settled_before + 1);
	ST_CHECK(flush_done(F));
}

/* IDLE -> WAITING -> SENT -> IDLE: two requests in one transaction, consecutive seqs. */
static void
t_commit(void)
{
	static req a, b;
	uint64_t committed = st_counter_get(FM.committed);
	flush_stats fs;

	add(&a, "t", "1");
	add(&b, "t", "{\"x\":2}");
	flush_stats_get(F, &fs);
	ST_CHECK_EQ_U64(fs.pending_events, 2);
	ST_CHECK(!flush_done(F));
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	flush_stats_get(F, &fs);
	ST_CHECK(fs.inflight);
	ST_CHECK_EQ_U64(fs.inflight_events, 2);
	ST_CHECK_EQ_U64(fs.pending_events, 0);
	ST_CHECK(wait_settled(&a, "a") && wait_settled(&b, "b"));
	ST_CHECK_EQ_U64(a.answered, 1);
	ST_CHECK_EQ_U64(b.answered, 1);
	ST_CHECK(a.seq > 0);
	ST_CHECK_EQ_U64(b.seq, a.seq + 1);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_IDLE);
	ST_CHECK_EQ_U64(st_counter_get(FM.committed), committed + 2);
	flush_stats_get(F, &fs);
	ST_CHECK_EQ_U64(fs.unstored_events, 0);
	ST_CHECK(flush_done(F));
}

/* A tick while a flush is out marks cur due: it goes right after the commit, without another tick. */
static void
t_due(void)
{
	static req a, b;

	add(&a, "t", "1");
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	add(&b, "t", "2");
	flush_start(F); /* refused while SENT: b becomes due */
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	ST_CHECK(wait_settled(&a, "a") && wait_settled(&b, "b"));
	ST_CHECK_EQ_U64(b.seq, a.seq + 1);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(flush_done(F));
}

/* A due flush is sent before the committed one is answered: the database works while the loop answers. */
static void
t_next_before_answers(void)
{
	static req a, b;

	add(&a, "t", "1");
	flush_start(F);
	add(&b, "t", "2");
	flush_start(F); /* b due */
	ST_CHECK(wait_settled(&a, "a") && wait_settled(&b, "b"));
	/* b had left cur (its flush sent) when a was answered */
	ST_CHECK_EQ_U64(a.pending_at_answer, 0);
	ST_CHECK_EQ_U64(b.seq, a.seq + 1);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(flush_done(F));
}

static bool
left_idle(void *arg)
{
	(void)arg;
	return flush_get_state(F) != FLUSH_IDLE;
}

/* A whole flush accepted while IDLE goes without a tick (no flush_start here), committed whole. */
static void
t_whole_flush(void)
{
	static proto_event evs[FLUSH_MAX_EVENTS];
	static req r[FLUSH_MAX_EVENTS / PROTO_MAX_BATCH];
	size_t per = PROTO_MAX_BATCH;

	for (size_t i = 0; i < ST_ARRAY_LEN(evs); i++)
		evs[i] = (proto_event){ .topic = { "w", 1 }, .data = { "1", 1 }, .has_data = true };
	for (size_t i = 0; i < ST_ARRAY_LEN(r); i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].n = per;
		ST_CHECK(flush_add(F, &r[i], per, per * 2, at, &evs[i * per]) == ST_OK);
	}
	/* not from inside flush_add: on the loop's next turn */
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_IDLE);
	if (!st_test_loop_until(B, left_idle, NULL, 20000))
		fprintf(stderr, "  %u events waiting, no flush started in 20 s\n", FLUSH_MAX_EVENTS);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	for (size_t i = 0; i < ST_ARRAY_LEN(r); i++) {
		ST_CHECK(wait_settled(&r[i], "whole flush"));
		ST_CHECK_EQ_U64(r[i].answered, 1);
	}
	ST_CHECK_EQ_U64(r[1].seq, r[0].seq + per);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(flush_done(F));
}

/* SENT -> IDLE on a data error: split by request, the bad one refused, the others stored in order. */
static void
t_data_error(void)
{
	static req a, bad, c;
	uint64_t fails = failures(), invalid = st_counter_get(FM.rej_invalid);

	add(&a, "t", "1");
	add(&bad, "t", "{not json"); /* 22P02 in broker_append4's cast to json: class 22, permanent */
	add(&c, "t", "3");
	flush_start(F);
	ST_CHECK(wait_settled(&a, "a") && wait_settled(&bad, "bad") && wait_settled(&c, "c"));
	ST_CHECK_EQ_U64(a.answered, 1);
	ST_CHECK_EQ_U64(c.answered, 1);
	ST_CHECK(c.seq > a.seq);
	ST_CHECK_EQ_U64(bad.refused, 1);
	ST_CHECK_STR(bad.code, "invalid");
	if (strstr(bad.detail, "SQLSTATE 22") == NULL)
		fprintf(stderr, "  refusal detail: %s\n", bad.detail);
	ST_CHECK(strstr(bad.detail, "SQLSTATE 22") != NULL);
	/* the whole flush failed once, then the bad request alone */
	ST_CHECK_EQ_U64(failures(), fails + 2);
	ST_CHECK_EQ_U64(st_counter_get(FM.rej_invalid), invalid + 1);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(flush_done(F));
}

/* SENT -> WAITING on a lost connection, WAITING -> SENT once it is back, then committed. */
static void
t_lost_connection(void)
{
	static req a;
	uint64_t fails = failures();

	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	add(&a, "t", "1");
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	st_pgconn_drop(DB, "flush_test");
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_WAITING);
	ST_CHECK_EQ_U64(failures(), fails + 1);
	ST_CHECK(wait_settled(&a, "a"));
	ST_CHECK_EQ_U64(a.answered, 1);
	ST_CHECK_EQ_U64(FATAL, 0);
	ST_CHECK(flush_done(F));
}

/* Failed round trips for more than 10 s (the injected clock): unavailable, until one succeeds. */
static void
t_unavailable(void)
{
	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	ST_CHECK(!flush_db_unavailable(F));
	st_pgconn_drop(DB, "flush_test"); /* the state callback: down */
	CLK.now += FLUSH_UNAVAILABLE_AFTER_MS;
	ST_CHECK(!flush_db_unavailable(F));
	CLK.now += 1;
	ST_CHECK(flush_db_unavailable(F));
	/* the connection back does not end it; an answered tick does */
	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	ST_CHECK(flush_db_unavailable(F));
	flush_start(F);
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(!flush_db_unavailable(F));
}

/* A flush failing for give_up_ms since its first attempt calls the fatal hook (the writer exits 1). */
static void
t_give_up(void)
{
	static req a;

	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	add(&a, "t", "1");
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_SENT);
	CLK.now += 5000; /* the give_up_ms of flush_new below */
	st_pgconn_drop(DB, "flush_test");
	ST_CHECK_EQ_U64(FATAL, 1);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_WAITING);
	ST_CHECK_EQ_U64(a.answered + a.refused, 0);
	/* not the machine's to end: the connection back still resends it */
	ST_CHECK(wait_settled(&a, "a"));
	ST_CHECK_EQ_U64(a.answered, 1);
	FATAL = 0;
}

/* Stopping: no tick any more, and what is accepted still goes. */
static void
t_stopping(void)
{
	static req a;

	ST_CHECK(st_test_loop_until(B, is_up, NULL, 20000));
	flush_set_stopping(F);
	flush_start(F);
	ST_CHECK_EQ_U64(flush_get_state(F), FLUSH_IDLE);
	add(&a, "t", "1");
	flush_start(F);
	ST_CHECK(wait_settled(&a, "a"));
	ST_CHECK(st_test_loop_until(B, is_idle, NULL, 20000));
	ST_CHECK(flush_done(F));
}

static int
run_db(const char *dsn)
{
	static const st_pgconn_opts db_opts = { .name = "flush",
						.application_name = "flush_test",
						.setup_sql = schema_session_sql,
						.query_deadline_ms = 60000,
						.writes = true };
	static const double bounds[] = { 0.1, 1 };
	const flush_hooks hooks = { .answer = on_answer,
				    .refuse = on_refuse,
				    .reachable = on_reachable,
				    .settled = on_settled,
				    .fatal = on_fatal,
				    .arg = NULL };
	const flush_config cfg = { .instance = "flush_test", .lock_key = 4243, .give_up_ms = 5000 };
	volatile sig_atomic_t stop = 0;
	char schema[64], q[256];
	PGconn *admin = PQconnectdb(dsn);
	struct event *tick;
	char *pdsn;
	bool made;

	if (PQstatus(admin) != CONNECTION_OK) {
		fprintf(stderr, "cannot connect: %s", PQerrorMessage(admin));
		PQfinish(admin);
		return 1;
	}
	snprintf(schema, sizeof(schema), "flush_test_%d", (int)getpid());
	snprintf(q, sizeof(q), "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s",
		 schema, schema);
	pdsn = st_test_pg_dsn_schema(dsn, schema);
	made = st_test_pg_exec(admin, q) && schema_migrate_retry(pdsn, SCHEMA_ALL, 0, &stop) == 0;
	ST_CHECK(made);
	if (made) {
		M = st_metrics_new();
		FM = (flush_metrics){ .committed = st_metrics_counter(M, "t_committed_total", NULL, "-"),
				      .rej_invalid = st_metrics_counter(M, "t_invalid_total", NULL, "-"),
				      .failures = st_metrics_counter(M, "t_failures_total", NULL, "-"),
				      .seconds = st_metrics_histogram(M, "t_seconds", NULL, "-", bounds, 2),
				      .pending = st_metrics_gauge(M, "t_pending", NULL, "-") };
		st_clock_fake_init(&CLK, 1000000);
		B = event_base_new();
		tick = st_test_loop_tick(B);
		ST_CHECK(st_pgconn_new(B, pdsn, &db_opts, on_db, NULL, &DB) == ST_OK);
		ST_CHECK(publish_new("inproc://flush_test", "flush_test", &PUB) == ST_OK);
		ST_CHECK(flush_new(B, &CLK.clock, DB, PUB, &cfg, &FM, &hooks, &F) == ST_OK);
		ST_RUN(t_tick);
		ST_RUN(t_commit);
		ST_RUN(t_due);
		ST_RUN(t_next_before_answers);
		ST_RUN(t_whole_flush);
		ST_RUN(t_data_error);
		ST_RUN(t_lost_connection);
		ST_RUN(t_unavailable);
		ST_RUN(t_give_up);
		ST_RUN(t_stopping);
		flush_free(F);
		F = NULL;
		st_pgconn_free(DB);
		publish_free(PUB);
		event_free(tick);
		event_base_free(B);
		st_metrics_free(M);
	}
	free(pdsn);
	snprintf(q, sizeof(q), "DROP SCHEMA %s CASCADE", schema);
	(void)st_test_pg_exec(admin, q);
	PQfinish(admin);
	return 0;
}

int
main(void)
{
	const char *dsn = getenv("STUDIO_TEST_PG_DSN");

	st_log_init("flush_test");
	ST_RUN(t_edges);
	ST_RUN(t_back_to_idle);
	ST_RUN(t_refused_transition);
	if (dsn == NULL || dsn[0] == '\0') {
		printf("skip: STUDIO_TEST_PG_DSN not set (the table cases ran)\n");
		return st_test_done() != 0 ? 1 : 77;
	}
	evthread_use_pthreads();
	run_db(dsn);
	return st_test_done();
}
