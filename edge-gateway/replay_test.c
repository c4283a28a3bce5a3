/*
 * replay_test: the history queries against a real PostgreSQL.
 *
 * STUDIO_TEST_PG_DSN names the database (unset: skip, exit 77).  The test
 * works in a private schema (dropped at the end) with the tables of
 * docs/architecture.md, so it never touches a real broker_event.
 */
#include "replay.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "st_buf.h"
#include "st_pgarray.h"
#include "st_test.h"
#include "st_test_pg.h"
#include "st_test_loop.h"
#include "st_util.h"

static struct event_base *B;
static pgpool *P;
static PGconn *ADMIN; /* test-side blocking connection for set-up */
static char SCHEMA[64];

static bool
sql(const char *q)
{
	return st_test_pg_exec(ADMIN, q);
}

/* ---- results ---- */

typedef struct got {
	bool done_cb;
	int calls;
	st_err err;
	uint64_t d, horizon, count;
	uint64_t seqs[1100];
	char env[8][512];
	size_t n;
	bool done;
	uint64_t upto;
} got;

static void
on_check(void *arg, st_err err, uint64_t d, uint64_t horizon, uint64_t count)
{
	got *g = arg;

	g->calls++;
	g->done_cb = true;
	g->err = err;
	g->d = d;
	g->horizon = horizon;
	g->count = count;
}

static void
keep(got *g, frame *const *f, size_t n)
{
	g->n = n;
	for (size_t i = 0; i < n && i < ST_ARRAY_LEN(g->seqs); i++) {
		size_t len;
		const char *e = frame_envelope(f[i], &len);
		g->seqs[i] = frame_seq(f[i]);
		if (i < ST_ARRAY_LEN(g->env))
			snprintf(g->env[i], sizeof(g->env[i]), "%.*s", (int)len, e);
	}
}

static void
on_rows(void *arg, st_err err, frame *const *f, size_t n, bool done, uint64_t horizon)
{
	got *g = arg;

	g->horizon = horizon;
	g->calls++;
	g->done_cb = true;
	g->err = err;
	g->done = done;
	keep(g, f, n);
}

static void
on_fill(void *arg, st_err err, frame *const *f, size_t n, uint64_t upto)
{
	got *g = arg;

	g->calls++;
	g->done_cb = true;
	g->err = err;
	g->upto = upto;
	keep(g, f, n);
}

static const char *T1 = "t1", *T2 = "t2", *T3 = "t3";
static const size_t L2 = 2;

static void
check(got *g, const char *const *t, const size_t *l, size_t n, uint64_t after, uint64_t cap)
{
	memset(g, 0, sizeof(*g));
	ST_CHECK(replay_check(P, t, l, n, after, UINT64_MAX, cap, on_check, g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g->done_cb, 10000));
	ST_CHECK(g->err == ST_OK);
}

/* The byte budget of fetch() and fill(); the byte-cut test lowers it. */
static size_t MAXB = 64u * 1024 * 1024;

static void
fetch(got *g, const char *const *t, const size_t *l, size_t n, uint64_t cursor, uint64_t upto, uint32_t limit)
{
	memset(g, 0, sizeof(*g));
	ST_CHECK(replay_fetch(P, t, l, n, cursor, upto, limit, MAXB, on_rows, g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g->done_cb, 10000));
	ST_CHECK(g->err == ST_OK);
}

static void
fill(got *g, uint64_t after, uint64_t upto, uint32_t limit)
{
	memset(g, 0, sizeof(*g));
	ST_CHECK(replay_fill(P, after, upto, limit, MAXB, on_fill, g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g->done_cb, 10000));
	ST_CHECK(g->err == ST_OK);
}

/* seqs 1..10 with a hole at 5 and 8 (rolled back). */
static bool
load_small(void)
{
	return sql("TRUNCATE broker_event") && sql("DELETE FROM broker_meta") &&
	       sql("INSERT INTO broker_event (seq, topic, about, data) OVERRIDING SYSTEM VALUE VALUES"
		   " (1, 't1', '{}', '{\"a\":1}'),"
		   " (2, 't1', ARRAY['a\"b', 'c,d', E'\\u00fc\\u20ac\\U0001F600', '{x}', 'NULL', E'back\\\\slash', ' sp '], "
		   "'{ \"a\" : [1, 2] }'),"
		   " (3, 't2', '{one}', NULL),"
		   " (4, 't3', '{}', '[]'),"
		   " (6, 't1', '{}', NULL),"
		   " (7, 't2', '{}', '\"x\"'),"
		   " (9, 't3', '{}', '1'),"
		   " (10, 't1', '{}', 'true')");
}

static void
t_check(void)
{
	const char *t[] = { T1, T2, T1 };
	const size_t l[] = { L2, L2, L2 };
	got g;

	ST_CHECK(load_small());
	check(&g, t, l, 1, 0, 100);
	ST_CHECK_EQ_U64(g.d, 10);
	ST_CHECK_EQ_U64(g.horizon, 0);
	ST_CHECK_EQ_U64(g.count, 4); /* t1: 1 2 6 10 */
	check(&g, t, l, 3, 2, 100);  /* t1 twice counts once */
	ST_CHECK_EQ_U64(g.count, 4); /* 3 6 7 10 */
	check(&g, t, l, 2, 0, 2);    /* capped at cap + 1 */
	ST_CHECK_EQ_U64(g.count, 3);
	check(&g, t, l, 2, 10, 5);
	ST_CHECK_EQ_U64(g.count, 0);
	/* until bounds the count (events after it are never sent); d stays the head */
	memset(&g, 0, sizeof(g));
	ST_CHECK(replay_check(P, t, l, 1, 0, 6, 100, on_check, &g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g.done_cb, 10000));
	ST_CHECK_EQ_U64(g.count, 3); /* t1: 1 2 6 */
	ST_CHECK_EQ_U64(g.d, 10);
	memset(&g, 0, sizeof(g));
	ST_CHECK(replay_check(P, t, l, 1, 1, 5, 100, on_check, &g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g.done_cb, 10000));
	ST_CHECK_EQ_U64(g.count, 1); /* t1: 2 */
	ST_CHECK(sql("INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 3, 1)"));
	check(&g, t, l, 2, 0, 100);
	ST_CHECK_EQ_U64(g.horizon, 3);
	ST_CHECK_EQ_U64(g.d, 10);
	ST_CHECK_EQ_U64(g.calls, 1);
}

static void
t_fetch(void)
{
	const char *t[] = { T1, T2, T2 };
	const size_t l[] = { L2, L2, L2 };
	got g;

	ST_CHECK(load_small());
	fetch(&g, t, l, 3, 0, 10, 3);
	ST_CHECK_EQ_U64(g.n, 3);
	ST_CHECK(!g.done);
	ST_CHECK_EQ_U64(g.seqs[0], 1);
	ST_CHECK_EQ_U64(g.seqs[1], 2);
	ST_CHECK_EQ_U64(g.seqs[2], 3);
	ST_CHECK_STR(g.env[0], "{\"type\":\"item\",\"id\":\"1\",\"topic\":\"t1\",\"about\":[],\"data\":{\"a\":1}}");
	ST_CHECK_STR(g.env[1], "{\"type\":\"item\",\"id\":\"2\",\"topic\":\"t1\",\"about\":[\"a\\\"b\",\"c,d\","
			       "\"\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80\",\"{x}\",\"NULL\",\"back\\\\slash\",\" sp \"],"
			       "\"data\":{ \"a\" : [1, 2] }}");
	ST_CHECK_STR(g.env[2], "{\"type\":\"item\",\"id\":\"3\",\"topic\":\"t2\",\"about\":[\"one\"]}");
	fetch(&g, t, l, 3, 3, 10, 3);
	ST_CHECK_EQ_U64(g.n, 3);
	ST_CHECK(!g.done);
	ST_CHECK_EQ_U64(g.seqs[0], 6);
	ST_CHECK_EQ_U64(g.seqs[1], 7);
	ST_CHECK_EQ_U64(g.seqs[2], 10);
	fetch(&g, t, l, 3, 10, 10, 3);
	ST_CHECK_EQ_U64(g.n, 0);
	ST_CHECK(g.done);
	/* upto bounds the range */
	fetch(&g, t, l, 2, 0, 6, 100);
	ST_CHECK_EQ_U64(g.n, 4);
	ST_CHECK(g.done);
	ST_CHECK_EQ_U64(g.seqs[3], 6);
	const char *t3[] = { T3 };
	fetch(&g, t3, l, 1, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 2);
	ST_CHECK_EQ_U64(g.seqs[0], 4);
	ST_CHECK_EQ_U64(g.seqs[1], 9);
	const char *none[] = { "nope" };
	const size_t l4[] = { 4 };
	fetch(&g, none, l4, 1, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 0);
	ST_CHECK(g.done);
	ST_CHECK_EQ_U64(g.horizon, 0); /* no broker_meta row: 0 */
	/* Every chunk carries the retention horizon of its snapshot, an empty one too. */
	ST_CHECK(sql("INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 5, 1)"));
	fetch(&g, t, l, 3, 0, 10, 3);
	ST_CHECK_EQ_U64(g.n, 3);
	ST_CHECK_EQ_U64(g.horizon, 5);
	fetch(&g, none, l4, 1, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 0);
	ST_CHECK(g.done);
	ST_CHECK_EQ_U64(g.horizon, 5);
}

static void
t_fill(void)
{
	got g;

	ST_CHECK(load_small());
	fill(&g, 0, 10, 4);
	ST_CHECK_EQ_U64(g.n, 4);
	ST_CHECK_EQ_U64(g.upto, 4); /* partial: the last row */
	fill(&g, 4, 10, 4);
	ST_CHECK_EQ_U64(g.n, 4);
	ST_CHECK_EQ_U64(g.seqs[0], 6);
	ST_CHECK_EQ_U64(g.seqs[3], 10);
	ST_CHECK_EQ_U64(g.upto, 10);
	fill(&g, 4, 9, 4); /* 6 7 9: complete, upto is the asked upto */
	ST_CHECK_EQ_U64(g.n, 3);
	ST_CHECK_EQ_U64(g.upto, 9);
	fill(&g, 4, 5, 4); /* only a hole */
	ST_CHECK_EQ_U64(g.n, 0);
	ST_CHECK_EQ_U64(g.upto, 5);
	ST_CHECK_STR(g.env[0], "");
	fill(&g, 1, 3, 10);
	ST_CHECK_EQ_U64(g.n, 2);
	ST_CHECK(strstr(g.env[0], "\"\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80\"") != NULL);
}

static void
on_raw(void *arg, st_err err, const PGresult *r)
{
	got *g = arg;
	st_pgarray_elem about[16];
	uint32_t n = 0;

	g->done_cb = true;
	g->err = err;
	if (err != ST_OK || PQntuples(r) != 1) {
		g->err = ST_EINVAL;
		return;
	}
	g->err = st_pgarray_binary_parse(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0), about, 16, &n);
	g->n = n;
	for (uint32_t i = 0; i < n && i < ST_ARRAY_LEN(g->env); i++)
		snprintf(g->env[i], sizeof(g->env[i]), "%.*s", (int)about[i].len, about[i].p);
}

static void
t_array_parse(void)
{
	got g;
	memset(&g, 0, sizeof(g));
	ST_CHECK(load_small());
	ST_CHECK(pgpool_submit(P, PGPOOL_PRIO_FILL, "SELECT about FROM broker_event WHERE seq = 2", 0, NULL, NULL, NULL,
			       1, on_raw, &g) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &g.done_cb, 10000));
	ST_CHECK(g.err == ST_OK);
	ST_CHECK_EQ_U64(g.n, 7);
	ST_CHECK_STR(g.env[0], "a\"b");
	ST_CHECK_STR(g.env[1], "c,d");
	ST_CHECK_STR(g.env[2], "\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80");
	ST_CHECK_STR(g.env[3], "{x}");
	ST_CHECK_STR(g.env[4], "NULL");
	ST_CHECK_STR(g.env[5], "back\\slash");
	ST_CHECK_STR(g.env[6], " sp ");
}

static void
t_cancel_bounds(void)
{
	const char *t[65];
	size_t l[65];
	got g, h;

	for (int i = 0; i < 65; i++) {
		t[i] = T1;
		l[i] = 2;
	}
	memset(&g, 0, sizeof(g));
	memset(&h, 0, sizeof(h));
	replay_job *j = replay_fetch(P, t, l, 1, 0, 100, 10, MAXB, on_rows, &g);
	ST_CHECK(j != NULL);
	replay_cancel(j);
	replay_job *k = replay_check(P, t, l, 1, 0, UINT64_MAX, 10, on_check, &g);
	replay_cancel(k);
	replay_job *f = replay_fill(P, 0, 10, 10, MAXB, on_fill, &g);
	replay_cancel(f);
	/* a later job completes, the cancelled ones never call */
	ST_CHECK(replay_fill(P, 0, 10, 10, MAXB, on_fill, &h) != NULL);
	ST_CHECK(st_test_loop_until(B, st_test_flag, &h.done_cb, 10000));
	st_test_loop_for(B, 200);
	ST_CHECK_EQ_U64(g.calls, 0);
	ST_CHECK(replay_fetch(P, t, l, 0, 0, 10, 10, MAXB, on_rows, &g) == NULL);
	ST_CHECK(replay_fetch(P, t, l, 65, 0, 10, 10, MAXB, on_rows, &g) == NULL);
	ST_CHECK(replay_fetch(P, t, l, 64, 0, 10, 0, MAXB, on_rows, &g) == NULL);
	ST_CHECK(replay_fetch(P, t, l, 64, 0, 10, REPLAY_MAX_LIMIT + 1, MAXB, on_rows, &g) == NULL);
	ST_CHECK(replay_fill(P, 0, 10, 0, MAXB, on_fill, &g) == NULL);
	ST_CHECK(replay_fetch(P, t, l, 1, 0, 10, 10, 0, on_rows, &g) == NULL);
	ST_CHECK(replay_fill(P, 0, 10, 10, 0, on_fill, &g) == NULL);
	l[0] = PROTO_MAX_TOPIC + 1;
	ST_CHECK(replay_check(P, t, l, 1, 0, UINT64_MAX, 10, on_check, &g) == NULL);
}

/*
 * Chunks are cut by bytes in the database: rows of ~100 KiB with a 250 KiB
 * budget come three at a time (the rows before the third cost 200 KiB <
 * 250 KiB), a chunk cut by bytes is not "done", and walking the range
 * chunk by chunk returns every row exactly once.  The same for fills.
 */
static void
t_byte_cut(void)
{
	const char *t[] = { "cut" };
	const size_t l[] = { 3 };
	uint64_t cursor = 0, total = 0, prev = 0;
	got g;
	int chunks = 0;

	ST_CHECK(sql("TRUNCATE broker_event"));
	ST_CHECK(sql(
		"INSERT INTO broker_event (topic, about, data) SELECT 'cut', '{}', ('\"' || repeat(md5(i::text), 3200) || '\"')::json"
		" FROM generate_series(1, 10) i"));
	MAXB = 250u * 1024;
	for (;;) {
		fetch(&g, t, l, 1, cursor, 1000, 100);
		chunks++;
		ST_CHECK(g.n <= 3);
		for (size_t i = 0; i < g.n; i++) {
			ST_CHECK(g.seqs[i] > prev);
			prev = g.seqs[i];
		}
		total += g.n;
		if (g.n)
			cursor = g.seqs[g.n - 1];
		ST_CHECK(g.done == (total == 10));
		if (g.done || chunks > 10)
			break;
	}
	ST_CHECK_EQ_U64(total, 10);
	ST_CHECK_EQ_U64(chunks, 4); /* 3 + 3 + 3 + 1 */
	/* at least one row, however small the budget */
	MAXB = 1;
	fetch(&g, t, l, 1, 0, 1000, 100);
	ST_CHECK_EQ_U64(g.n, 1);
	ST_CHECK(!g.done);
	/* fills: upto_reached is the last row kept while cut by bytes */
	MAXB = 250u * 1024;
	fill(&g, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 3);
	ST_CHECK_EQ_U64(g.upto, g.seqs[2]);
	fill(&g, g.seqs[2], 10, 100);
	ST_CHECK_EQ_U64(g.n, 3);
	MAXB = 64u * 1024 * 1024;
	fill(&g, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 10);
	ST_CHECK_EQ_U64(g.upto, 10);
	/* The rows above have no recorded size (stored before schema version 4): measured from the data.
	 * A recorded size is what the cut uses: with 1 byte recorded each, all 10 fit one chunk. */
	ST_CHECK(sql("UPDATE broker_event SET data_bytes = 1"));
	MAXB = 250u * 1024;
	fetch(&g, t, l, 1, 0, 1000, 100);
	ST_CHECK_EQ_U64(g.n, 10);
	ST_CHECK(g.done);
	fill(&g, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 10);
	/* ... and rows with and without a recorded size mix: 3 measured ones cut the chunk again */
	ST_CHECK(sql("UPDATE broker_event SET data_bytes = NULL WHERE seq > 5"));
	fill(&g, 0, 10, 100);
	ST_CHECK_EQ_U64(g.n, 8); /* 5 of 1 byte, then 3 measured ones of ~100 KiB (as in 3 + 3 + 3 + 1 above) */
}

static void
t_big(void)
{
	const char *t[] = { "big", T1 };
	const size_t l[] = { 3, 2 };
	uint64_t cursor = 0, total = 0, prev = 0, t0, ms;
	got *g = calloc(1, sizeof(*g));
	bool ordered = true;
	int chunks = 0;

	/* 50,000 events on "big" mixed with 50,000 on 200 other topics */
	ST_CHECK(sql("TRUNCATE broker_event"));
	ST_CHECK(sql(
		"INSERT INTO broker_event (topic, about, data) SELECT CASE WHEN i % 2 = 0 THEN 'big' ELSE "
		"'other' || (i % 200) END, ARRAY['r' || i], ('{\"i\":' || i || '}')::json FROM generate_series(1, 100000) i"));
	ST_CHECK(sql("ANALYZE broker_event"));
	check(g, t, l, 2, 0, 100000);
	uint64_t d = g->d;
	ST_CHECK_EQ_U64(g->count, 50000);
	t0 = st_clock_now(st_clock_system());
	for (;;) {
		fetch(g, t, l, 2, cursor, d, 1000);
		if (g->err != ST_OK)
			break;
		chunks++;
		for (size_t i = 0; i < g->n; i++) {
			ordered &= g->seqs[i] > prev;
			prev = g->seqs[i];
		}
		total += g->n;
		if (g->n > 0)
			cursor = g->seqs[g->n - 1];
		if (g->done)
			break;
	}
	ms = st_clock_now(st_clock_system()) - t0;
	ST_CHECK_EQ_U64(total, 50000);
	ST_CHECK(ordered);
	ST_CHECK_EQ_U64(chunks, 51); /* 50 full chunks, then an empty one says done */
	printf("replay: %llu rows in %d chunks in %llu ms (%.0f rows/s)\n", (unsigned long long)total, chunks,
	       (unsigned long long)ms, ms ? total * 1000.0 / (double)ms : 0.0);
	free(g);
}

/* replay_buf (no database): the read-ahead, the order of rows across chunks, the adaptive limit. */
static void
t_buf(void)
{
	static const struct {
		size_t n; /* rows in the chunk that arrives */
		bool done;
		size_t write;   /* rows written after it arrived */
		uint32_t limit; /* the next limit */
		bool ahead;     /* read-ahead due after the writes */
	} steps[] = {
		{ 1000, false, 0, 1000, true }, /* full chunk: limit stays at the cap; the writer is at its start */
		{ 0, false, 0, 8, true },       /* an empty chunk cut by bytes: the floor of 8 */
		{ 10, false, 5, 16, false },    /* appended after the 1,000 unwritten; a full chunk: doubles */
		{ 10, true, 1015, 32, false },  /* the range is done: the limit still doubles; all written */
	};
	replay_buf b = { .limit = REPLAY_BUF_CHUNK_ROWS };
	frame *rows[1000];
	uint64_t seq = 0, next = 1;

	ST_CHECK(!replay_buf_read_ahead_due(&b));
	ST_CHECK_EQ_U64(replay_buf_last_seq(&b, 42), 42);
	for (size_t i = 0; i < ST_ARRAY_LEN(steps); i++) {
		for (size_t k = 0; k < steps[i].n; k++)
			rows[k] = frame_resync_new(++seq, "gap");
		replay_buf_add(&b, rows, steps[i].n, steps[i].done);
		for (size_t k = 0; k < steps[i].n; k++)
			frame_unref(rows[k]); /* the buffer took its own references */
		for (size_t k = 0; k < steps[i].write; k++) {
			frame *f = replay_buf_next(&b);

			ST_CHECK(f != NULL);
			if (f == NULL)
				break;
			if (frame_seq(f) != next)
				fprintf(stderr, "  step %zu: wrote seq %llu, want %llu\n", i,
					(unsigned long long)frame_seq(f), (unsigned long long)next);
			ST_CHECK_EQ_U64(frame_seq(f), next);
			next++;
			frame_unref(f);
		}
		if (b.limit != steps[i].limit || replay_buf_read_ahead_due(&b) != steps[i].ahead)
			fprintf(stderr, "  step %zu: limit %u ahead %d, want %u %d\n", i, b.limit,
				replay_buf_read_ahead_due(&b), steps[i].limit, steps[i].ahead);
		ST_CHECK_EQ_U64(b.limit, steps[i].limit);
		ST_CHECK(replay_buf_read_ahead_due(&b) == steps[i].ahead);
		ST_CHECK_EQ_U64(replay_buf_last_seq(&b, 0), b.n > 0 ? seq : 0);
	}
	ST_CHECK(replay_buf_next(&b) == NULL);
	/* a clear releases what is left (ASan: no leak) */
	for (size_t k = 0; k < 3; k++)
		rows[k] = frame_resync_new(++seq, "gap");
	replay_buf_add(&b, rows, 3, false);
	for (size_t k = 0; k < 3; k++)
		frame_unref(rows[k]);
	replay_buf_clear(&b);
	ST_CHECK(b.n == 0 && b.f == NULL && replay_buf_next(&b) == NULL);
}

int
main(void)
{
	const char *dsn = getenv("STUDIO_TEST_PG_DSN");
	struct event *tick;
	char q[2048];
	char *pdsn;
	int rc;

	ST_RUN(t_buf);
	if (dsn == NULL || dsn[0] == 0) {
		printf("skip: STUDIO_TEST_PG_DSN not set\n");
		return st_test_failed ? 1 : 77;
	}
	snprintf(SCHEMA, sizeof(SCHEMA), "replay_test_%d", (int)getpid());
	ADMIN = PQconnectdb(dsn);
	if (PQstatus(ADMIN) != CONNECTION_OK) {
		fprintf(stderr, "cannot connect: %s", PQerrorMessage(ADMIN));
		return 1;
	}
	snprintf(
		q, sizeof(q),
		"SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s; SET search_path = %s;"
		"CREATE TABLE broker_event (seq bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,"
		" topic text NOT NULL, about text[] NOT NULL DEFAULT '{}', data json, key text,"
		" created_at timestamptz NOT NULL DEFAULT now(), data_bytes int);"
		"CREATE UNIQUE INDEX broker_event_topic_key ON broker_event (topic, key) WHERE key IS NOT NULL;"
		"CREATE INDEX broker_event_topic_seq ON broker_event (topic, seq);"
		"CREATE TABLE broker_meta (id int PRIMARY KEY CHECK (id = 1), horizon bigint NOT NULL DEFAULT 0,"
		" schema_version int NOT NULL)",
		SCHEMA, SCHEMA, SCHEMA);
	if (!sql(q))
		return 1;

	B = event_base_new();
	tick = st_test_loop_tick(B);
	pdsn = st_test_pg_dsn_schema(dsn, SCHEMA);
	if (pgpool_new(B, pdsn, 4, &P) != ST_OK)
		return 1;
	free(pdsn);
	ST_RUN(t_check);
	ST_RUN(t_fetch);
	ST_RUN(t_fill);
	ST_RUN(t_array_parse);
	ST_RUN(t_cancel_bounds);
	ST_RUN(t_byte_cut);
	ST_RUN(t_big);
	pgpool_free(P);
	event_free(tick);
	event_base_free(B);
	snprintf(q, sizeof(q), "DROP SCHEMA %s CASCADE", SCHEMA);
	sql(q);
	PQfinish(ADMIN);
	rc = st_test_done();
	return rc;
}
