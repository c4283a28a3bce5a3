/*
 * replay: history queries (Last-Event-ID check and replay chunks, gap fills).
 *
 * DESIGN.  Each job is one pgpool query with binary parameters (the topic
 * list as a binary text[], so no topic needs quoting or escaping, and the
 * seqs as int8) and binary results.  Topic filters use the LATERAL form of
 * PITFALLS.md §3: one index range scan of (topic, seq) per distinct topic,
 * each LIMITed, then a merge to the overall LIMIT, instead of reading every
 * match of `topic = ANY(...)` and sorting it.  The check counts through the
 * same LIMITed subquery so that a huge backlog costs cap + 1 index entries,
 * and runs as one statement so D, the horizon and the count share one
 * snapshot.  Rows become frames with one function shared by replays and
 * fills; every length that comes back from the server is checked against
 * the bytes actually there before it is used.
 */
#include "replay.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "st_log.h"
#include "st_pgarray.h"
#include "st_util.h"

#define MAX_TOPIC_BYTES (1024u * 1024) /* a topic read back; the contract's are <= 200 bytes */

static const char CHECK_SQL[] =
	"SELECT (SELECT coalesce(max(seq), 0) FROM broker_event)::int8,"
	" coalesce((SELECT horizon FROM broker_meta WHERE id = 1), 0)::int8,"
	" (SELECT count(*) FROM (SELECT 1 FROM (SELECT DISTINCT u FROM unnest($1::text[]) AS u) AS t(topic)"
	"   CROSS JOIN LATERAL (SELECT e.seq FROM broker_event e WHERE e.topic = t.topic AND e.seq > $2::int8"
	"                       AND e.seq <= $4::int8 ORDER BY e.seq LIMIT $3::int8) AS x"
	"   LIMIT $3::int8) AS c)::int8";

/*
 * What a row may cost the edge, in SQL, computed without reading the data:
 * the envelope's fixed part, the topic, the about list and the data's
 * length as the flush recorded it (data_bytes, schema version 4).  json has
 * no binary cast to text, so octet_length(data::text) runs json's output
 * function, which detoasts and copies the whole value: it is the fallback
 * only for rows stored before version 4 (data_bytes NULL; a change signal's
 * data is NULL too and costs nothing to measure).  COST is computed where
 * the rows are scanned, so the window below sums integers and carries the
 * data column as the stored (TOAST) reference, which is only read when the
 * row is sent.
 */
#define COST(t)                                                                                            \
	"(160 + octet_length(" t ".topic) + octet_length(" t ".about::text) + coalesce(" t ".data_bytes, " \
	"octet_length(" t ".data::text), 0)) AS cost"

/*
 * Each chunk is cut by rows ($4) AND by bytes ($5): rows are taken in seq
 * order while what came before them costs less than $5, so a chunk keeps
 * at most $5 plus one row, and the data of a row beyond the cut is never
 * read (the window sums the costs, the outer query returns only what is
 * kept; the next chunk starts after the last row kept, so every row's data
 * is read once: test_replay_toast.py counts the TOAST blocks).  `next` is
 * the seq after each row among those the LIMIT let through: on the last
 * row returned, not NULL means the chunk was cut by bytes, not at the end
 * of the range.
 *
 * The retention horizon comes with every chunk, read in the same snapshot
 * as the rows: a slow replay whose rows retention deleted meanwhile is told
 * so (horizon above its cursor) instead of skipping them silently.  The
 * one-row LEFT JOIN makes an empty chunk still carry it (one row, seq NULL).
 */
static const char FETCH_SQL[] =
	"SELECT z.seq, z.topic, z.about, z.data, h.horizon, z.next"
	" FROM (SELECT coalesce((SELECT horizon FROM broker_meta WHERE id = 1), 0)::int8 AS horizon) AS h"
	" LEFT JOIN LATERAL (SELECT w.seq, w.topic, w.about, w.data, w.next FROM"
	"  (SELECT x.seq, x.topic, x.about, x.data, lead(x.seq) OVER o AS next,"
	"    sum(x.cost) OVER o - x.cost AS before"
	"   FROM (SELECT y.* FROM (SELECT DISTINCT u FROM unnest($1::text[]) AS u) AS t(topic)"
	"    CROSS JOIN LATERAL (SELECT e.seq, e.topic, e.about, e.data, " COST(
		"e") " FROM broker_event e"
		     "      WHERE e.topic = t.topic AND e.seq > $2::int8 AND e.seq <= $3::int8"
		     "      ORDER BY e.seq LIMIT $4::int8) AS y"
		     "    ORDER BY y.seq LIMIT $4::int8) AS x WINDOW o AS (ORDER BY x.seq)) AS w"
		     "  WHERE w.before < $5::int8) AS z ON true"
		     " ORDER BY z.seq";

/*
 * The same for a single topic (most streams): the (topic, seq) index gives
 * the rows in seq order, so neither the per-topic merge nor its sort is
 * needed.
 */
static const char FETCH1_SQL[] =
	"SELECT z.seq, z.topic, z.about, z.data, h.horizon, z.next"
	" FROM (SELECT coalesce((SELECT horizon FROM broker_meta WHERE id = 1), 0)::int8 AS horizon) AS h"
	" LEFT JOIN LATERAL (SELECT w.seq, w.topic, w.about, w.data, w.next FROM"
	"  (SELECT x.seq, x.topic, x.about, x.data, lead(x.seq) OVER o AS next,"
	"    sum(x.cost) OVER o - x.cost AS before"
	"   FROM (SELECT e.seq, e.topic, e.about, e.data, " COST(
		"e") " FROM broker_event e"
		     "     WHERE e.topic = ($1::text[])[1] AND e.seq > $2::int8 AND e.seq <= $3::int8"
		     "     ORDER BY e.seq LIMIT $4::int8) AS x WINDOW o AS (ORDER BY x.seq)) AS w"
		     "  WHERE w.before < $5::int8) AS z ON true"
		     " ORDER BY z.seq";

static const char FILL_SQL[] =
	"SELECT w.seq, w.topic, w.about, w.data, w.next FROM"
	" (SELECT e.seq, e.topic, e.about, e.data, lead(e.seq) OVER o AS next, sum(e.cost) OVER o - e.cost AS before"
	"  FROM (SELECT b.seq, b.topic, b.about, b.data, " COST(
		"b") " FROM broker_event b"
		     "   WHERE b.seq > $1::int8 AND b.seq <= $2::int8 ORDER BY b.seq LIMIT $3::int8) AS e"
		     "  WINDOW o AS (ORDER BY e.seq)) AS w"
		     " WHERE w.before < $4::int8 ORDER BY w.seq";

enum job_kind { J_CHECK, J_FETCH, J_FILL };

struct replay_job {
	pgpool_query *q;
	enum job_kind kind;
	bool calling;
	uint32_t limit;
	uint64_t upto;
	replay_check_fn check_fn;
	replay_rows_fn rows_fn;
	replay_fill_fn fill_fn;
	void *arg;
};

static bool
get_i8(const PGresult *r, int row, int col, uint64_t *out)
{
	uint64_t v;

	if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
		return false;
	memcpy(&v, PQgetvalue(r, row, col), 8);
	*out = be64toh(v);
	return true;
}

/* One row (seq, topic, about, data) -> an item frame. */
static st_err
row_frame(const PGresult *r, int row, frame **out)
{
	st_pgarray_elem el[REPLAY_MAX_ABOUT];
	proto_str about[REPLAY_MAX_ABOUT];
	uint64_t seq;
	uint32_t n_about;
	const char *topic, *data = NULL;
	size_t topic_len, data_len = 0;

	if (!get_i8(r, row, 0, &seq) || seq == 0 || seq > INT64_MAX || PQgetisnull(r, row, 1) || PQgetisnull(r, row, 2))
		return ST_EPROTO;
	topic = PQgetvalue(r, row, 1);
	topic_len = (size_t)PQgetlength(r, row, 1);
	if (topic_len == 0 || topic_len > MAX_TOPIC_BYTES)
		return ST_EPROTO;
	if (st_pgarray_binary_parse(PQgetvalue(r, row, 2), (size_t)PQgetlength(r, row, 2), el, REPLAY_MAX_ABOUT,
				    &n_about) != ST_OK)
		return ST_EPROTO;
	for (uint32_t i = 0; i < n_about; i++)
		about[i] = (proto_str){ el[i].p, el[i].len };
	if (!PQgetisnull(r, row, 3)) {
		/* json's binary form is its text, byte for byte. */
		data = PQgetvalue(r, row, 3);
		data_len = (size_t)PQgetlength(r, row, 3);
		if (data_len == 0)
			return ST_EPROTO;
	}
	*out = frame_item_new(seq, topic, topic_len, about, n_about, data, data_len);
	return ST_OK;
}

/*
 * All rows -> frames (*out malloc'd, *n entries), ascending seqs checked;
 * *cut: the chunk stopped at the byte budget with rows left in its LIMIT
 * (the last column, the next seq, is not NULL on the last row).  With
 * horizon (the fetch), the fifth column carries it, and a single row whose
 * seq is NULL means "no rows".
 */
static st_err
rows_frames(const PGresult *r, uint32_t limit, frame ***out, size_t *n, bool *cut, uint64_t *horizon)
{
	int rows = PQntuples(r), cols = horizon ? 6 : 5;
	frame **f;
	st_err rv = ST_OK;
	int i;

	*out = NULL;
	*n = 0;
	*cut = false;
	if (PQnfields(r) != cols || rows < 0 || (uint32_t)rows > limit)
		return ST_EPROTO;
	for (int c = 0; c < cols; c++)
		if (PQfformat(r, c) != 1)
			return ST_EPROTO;
	if (horizon) {
		if (rows < 1 || !get_i8(r, 0, 4, horizon))
			return ST_EPROTO;
		if (rows == 1 && PQgetisnull(r, 0, 0))
			rows = 0;
	}
	if (rows == 0)
		return ST_OK;
	*cut = !PQgetisnull(r, rows - 1, cols - 1);
	f = st_xcalloc((size_t)rows, sizeof(*f));
	for (i = 0; i < rows; i++) {
		if ((rv = row_frame(r, i, &f[i])) != ST_OK)
			break;
		if (i > 0 && frame_seq(f[i]) <= frame_seq(f[i - 1])) {
			frame_unref(f[i]);
			rv = ST_EPROTO;
			break;
		}
	}
	if (rv != ST_OK) {
		st_warn("replay: row %d of %d cannot be read", i, rows);
		for (int j = 0; j < i; j++)
			frame_unref(f[j]);
		free(f);
		return rv;
	}
	*out = f;
	*n = (size_t)rows;
	return ST_OK;
}

static void
on_result(void *arg, st_err err, const PGresult *res)
{
	replay_job *j = arg;
	frame **f = NULL;
	size_t n = 0;
	uint64_t d = 0, horizon = 0, count = 0, fetch_horizon = 0;
	bool cut = false;

	j->q = NULL;
	j->calling = true;
	switch (j->kind) {
	case J_CHECK:
		if (err == ST_OK && (PQntuples(res) != 1 || PQnfields(res) != 3 || !get_i8(res, 0, 0, &d) ||
				     !get_i8(res, 0, 1, &horizon) || !get_i8(res, 0, 2, &count))) {
			st_warn("replay: unexpected check result");
			err = ST_EPROTO;
		}
		j->check_fn(j->arg, err, d, horizon, count);
		break;
	case J_FETCH:
	case J_FILL:
		if (err == ST_OK)
			err = rows_frames(res, j->limit, &f, &n, &cut, j->kind == J_FETCH ? &fetch_horizon : NULL);
		/* The range is exhausted when neither the LIMIT nor the byte budget cut the chunk. */
		if (j->kind == J_FETCH) {
			j->rows_fn(j->arg, err, f, n, err == ST_OK && n < j->limit && !cut, fetch_horizon);
		} else {
			uint64_t upto = n < j->limit && !cut ? j->upto : frame_seq(f[n - 1]);
			j->fill_fn(j->arg, err, f, n, err == ST_OK ? upto : 0);
		}
		for (size_t i = 0; i < n; i++)
			frame_unref(f[i]);
		free(f);
		break;
	}
	free(j);
}

/* The binary text[] of the topics into out; false when out of bounds. */
static bool
topics_array(const char *const *topics, const size_t *lens, size_t n, st_buf *out)
{
	st_pgarray_writer w;

	if (n == 0 || n > REPLAY_MAX_TOPICS)
		return false;
	for (size_t i = 0; i < n; i++)
		if (lens[i] > PROTO_MAX_TOPIC)
			return false;
	st_pgarray_begin(&w, out, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		st_pgarray_add(&w, topics[i], lens[i]);
	return st_pgarray_end(&w) == ST_OK;
}

static uint64_t
clamp_i8(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : v;
}

/* Submits sql with binary params: an optional text[] followed by int8s. */
static replay_job *
job_submit(pgpool *p, enum pgpool_prio prio, const char *sql, replay_job *j, const char *arr, int arr_len,
	   const uint64_t *ints, int n_ints)
{
	const char *vals[5];
	int lens[5], fmts[5], np = 0;
	uint64_t be[4];

	ST_ASSERT(n_ints <= 4);
	if (arr != NULL) {
		vals[np] = arr;
		lens[np] = arr_len;
		fmts[np++] = 1;
	}
	for (int i = 0; i < n_ints; i++) {
		be[i] = htobe64(clamp_i8(ints[i]));
		vals[np] = (const char *)&be[i];
		lens[np] = 8;
		fmts[np++] = 1;
	}
	j->q = pgpool_submit(p, prio, sql, np, vals, lens, fmts, 1, on_result, j);
	if (j->q == NULL) {
		free(j);
		return NULL;
	}
	return j;
}

replay_job *
replay_check(pgpool *p, const char *const *topics, const size_t *lens, size_t n, uint64_t after, uint64_t until,
	     uint64_t cap, replay_check_fn fn, void *arg)
{
	uint64_t ints[3] = { after, cap >= INT64_MAX ? INT64_MAX : cap + 1, until >= INT64_MAX ? INT64_MAX : until };
	replay_job *j = NULL;
	st_buf arr;

	st_buf_init(&arr);
	if (topics_array(topics, lens, n, &arr)) {
		j = st_xcalloc(1, sizeof(*j));
		j->kind = J_CHECK;
		j->check_fn = fn;
		j->arg = arg;
		j = job_submit(p, PGPOOL_PRIO_REPLAY, CHECK_SQL, j, arr.p, (int)arr.len, ints, 3);
		if (j != NULL) /* the client waits for this answer before its first byte */
			pgpool_set_deadline(j->q, REPLAY_CHECK_DEADLINE_MS);
	}
	st_buf_fini(&arr);
	return j;
}

replay_job *
replay_fetch(pgpool *p, const char *const *topics, const size_t *lens, size_t n, uint64_t cursor, uint64_t upto,
	     uint32_t limit, size_t max_bytes, replay_rows_fn fn, void *arg)
{
	uint64_t ints[4] = { cursor, upto, limit, max_bytes };
	replay_job *j = NULL;
	st_buf arr;

	if (limit == 0 || limit > REPLAY_MAX_LIMIT || max_bytes == 0)
		return NULL;
	st_buf_init(&arr);
	if (topics_array(topics, lens, n, &arr)) {
		j = st_xcalloc(1, sizeof(*j));
		j->kind = J_FETCH;
		j->limit = limit;
		j->upto = upto;
		j->rows_fn = fn;
		j->arg = arg;
		j = job_submit(p, PGPOOL_PRIO_REPLAY, n == 1 ? FETCH1_SQL : FETCH_SQL, j, arr.p, (int)arr.len, ints, 4);
	}
	st_buf_fini(&arr);
	return j;
}

replay_job *
replay_fill(pgpool *p, uint64_t after, uint64_t upto, uint32_t limit, size_t max_bytes, replay_fill_fn fn, void *arg)
{
	uint64_t ints[4] = { after, upto, limit, max_bytes };
	replay_job *j;

	if (limit == 0 || limit > REPLAY_MAX_LIMIT || max_bytes == 0)
		return NULL;
	j = st_xcalloc(1, sizeof(*j));
	j->kind = J_FILL;
	j->limit = limit;
	j->upto = upto;
	j->fill_fn = fn;
	j->arg = arg;
	return job_submit(p, PGPOOL_PRIO_FILL, FILL_SQL, j, NULL, 0, ints, 4);
}

void
replay_cancel(replay_job *j)
{
	if (j == NULL || j->calling)
		return;
	pgpool_cancel(j->q);
	free(j);
}

/* ---- replay_buf ---------------------------------------------------------- */

void
replay_buf_clear(replay_buf *b)
{
	for (size_t k = b->i; k < b->n; k++)
		frame_unref(b->f[k]);
	ST_FREE(&b->f);
	b->n = b->i = b->mark = 0;
}

void
replay_buf_add(replay_buf *b, frame *const *frames, size_t n, bool done)
{
	/*
	 * The chunk was cut by the database to its byte bound (ADR-0197 bounds
	 * what a stream holds) or to limit rows: every row is kept, none is
	 * read twice.  The next limit follows what the bytes allow, so a chunk
	 * of large rows does not make the database walk (index entries and row
	 * headers, not data) far past the cut every time.
	 */
	if (!done && n < b->limit)
		b->limit = (uint32_t)ST_MAX(8, ST_MIN(2 * n, REPLAY_BUF_CHUNK_ROWS));
	else
		b->limit = (uint32_t)ST_MIN(2u * b->limit, REPLAY_BUF_CHUNK_ROWS);
	if (n) {
		/* After what the older chunk has not written yet (the fetch ran while it was written). */
		size_t left = b->n - b->i;
		frame **c = st_xcalloc(left + n, sizeof(*c));

		if (left)
			memcpy(c, b->f + b->i, left * sizeof(*c));
		for (size_t k = 0; k < n; k++)
			c[left + k] = frame_ref(frames[k]);
		free(b->f);
		b->f = c;
		b->i = 0;
		b->n = left + n;
		b->mark = left;
		b->last = frame_seq(frames[n - 1]);
	}
}

frame *
replay_buf_next(replay_buf *b)
{
	return b->i < b->n ? b->f[b->i++] : NULL;
}

bool
replay_buf_read_ahead_due(const replay_buf *b)
{
	return b->i == b->mark && b->i < b->n;
}

uint64_t
replay_buf_last_seq(const replay_buf *b, uint64_t cursor)
{
	/* Not f[n - 1]: once written, the connection held its only reference and may have freed it. */
	return b->n > 0 ? b->last : cursor;
}
