/*
 * schema: the schema, its versions and the migration between them.
 *
 * broker_meta's single row records the schema version (never lowered by an
 * older binary).  schema_migrate reads it first, with no lock and no DDL:
 * a current schema is left alone, so a writer starting next to serving
 * ones never queues a lock request in front of their flushes.  Otherwise it
 * takes the session advisory lock SCHEMA_MIGRATE_LOCK_KEY, reads the version
 * again and runs the steps that are missing in one transaction (only the
 * concurrent build of version 4's key index runs before it, outside: it
 * cannot run in a transaction block), with every lock wait bounded by
 * lock_timeout (a timeout is ST_EAGAIN: the caller retries).  The steps are split by the locks they take (tables_sql,
 * functions_sql below); the daemon only runs those that take no lock a
 * reader or a flush could be waiting on.
 *
 * History:
 * - 1: broker_append (nextval per row, a result row per event).
 * - 2: broker_append2 (one row back, consecutive seqs) and broker_flush's
 *   dup_ords / dup_seqs columns; seqs holds the fresh range {first, last}
 *   ('{}' when nothing was fresh; in a version-1 row it was every row's
 *   seq, so seqs[1] > prev is the first fresh seq in both).  The new columns
 *   are nullable so that version 1's INSERT still works.  broker_append is
 *   not dropped: a version-1 writer still running keeps its own function,
 *   takes the same advisory lock and allocates with nextval under it, so
 *   both kinds of flush stay serial and their seqs consecutive.
 * - 3: broker_append3 (created_at is the time the lock was obtained, so
 *   created_at never decreases along seq) and broker_retain3 (work bounded
 *   by a window of seqs, broker_flush records kept 24 hours); functions
 *   only, so the daemon may upgrade version 2 itself.
 * - 4: broker_event.data_bytes (the octet length of data's JSON text, taken
 *   by the flush from the text it inserts: a replay or a gap fill cuts its
 *   chunks by bytes on this column instead of octet_length(data::text),
 *   which json has no binary cast for, so it detoasted and copied every
 *   row of a chunk's window to measure it); NULL on rows stored before
 *   version 4 (the edge measures those as before: docs/writer.md).  An
 *   index on broker_flush (created_at), which broker_retain4's trim walks
 *   in bounded chunks instead of reading the whole table.  broker_append4
 *   and broker_retain4; the version-3 names become wrappers of them.  The
 *   ALTER TABLE takes an AccessExclusiveLock on broker_event: `broker-writer
 *   migrate` only, as from version 1.
 *   Also in version 4 (0.2 was not released between them, so one table-
 *   change version, one `migrate`): idempotency keys are scoped to their
 *   topic (issue 24).  The unique index broker_event_key on (key) becomes
 *   broker_event_topic_key on (topic, key), and broker_append4 probes
 *   (topic, key): with a global key, a peer that published `pay-777` on
 *   junk/x first made the real event with that key on payments/777 be
 *   answered with junk/x's seq and never stored.  The new index is built
 *   CONCURRENTLY before the transaction (key_index_build): inserts go on
 *   while it builds.  The old index is dropped inside the transaction,
 *   together with the switch of broker_append4's probe, so that no flush
 *   ever sees the new probe beside the old index (a key stored on another
 *   topic would then fail the insert on broker_event_key) or the old probe
 *   without it.  The version-3 names stay wrappers of broker_append4, so a
 *   version-3 writer still running stores per (topic, key) in the database
 *   too; only its own in-memory folding of one flush (batch.c) stays
 *   global until it is replaced.
 *
 * broker_append4 is the whole flush (docs/writer.md).
 *
 * Why broker_append4 is fast (each step checked with EXPLAIN ANALYZE, see
 * docs/performance.md):
 *
 * - O(1) sequence work.  Under pg_advisory_xact_lock(lock_key) the flush is
 *   the only inserter: only broker-writer inserts into broker_event, every
 *   writer takes the lock before it allocates, and the identity sequence
 *   has CACHE 1 (no session holds pre-allocated values).  So the n fresh
 *   events of one flush can take n CONSECUTIVE values: one nextval() for the
 *   first, setval(first + n - 1) for the rest, and row k of the fresh rows
 *   (in input order) is first + k - 1, inserted with OVERRIDING SYSTEM
 *   VALUE.  setval is not transactional: a flush that rolls back leaves a
 *   hole of n values, which the protocol already allows (a hole between
 *   prev and the first seq is a rolled-back identity value).  An inserter
 *   that does not take the lock (a manual INSERT, a COPY) would break this
 *   -- it could take a value inside [first, first + n - 1] and make the
 *   flush fail on the primary key -- just as it would break "commit order =
 *   seq order" anyway.
 * - No keys (the common case): the caller passes keys = NULL, and the flush
 *   is one INSERT ... SELECT first - 1 + o ... FROM unnest(...) WITH
 *   ORDINALITY: no join, no sort, no per-row nextval.
 * - Keys: one probe of the unique (topic, key) index per keyed row finds
 *   the stored ones (returned, not inserted).  The LATERAL ... LIMIT 1 forces that
 *   nested loop: a plain join was planned as a hash or merge join over a
 *   sequential scan of the whole table, which grows with the table (154 ms
 *   at 370,000 rows, against 7 us a probe).  The others are found by ordinal (a hash
 *   anti-join of two in-memory lists, never a second look at broker_event:
 *   a NOT EXISTS on broker_event was planned as a sequential scan of the
 *   whole table) and ranked with row_number() over the ordinal.  Keys repeated
 *   within one call (the same topic and key) must already be folded by the
 *   caller (batch.c); a call
 *   that breaks this fails on the count check instead of storing twice.
 * - about arrives as a PostgreSQL array literal per row ('{}', '{"a","b"}')
 *   and becomes text[] through array_in, instead of a JSON parse and a
 *   subquery per row.
 * - The answer is one row: prev, first_seq, n_fresh and the (ord, seq) of
 *   the rows whose key was stored; the caller derives every other seq.  The
 *   same compact form is recorded in broker_flush, so a retried flush_id
 *   (an earlier attempt committed, the connection died around COMMIT)
 *   rebuilds exactly the same answer and stores nothing.
 * - SET jit = off (compiling the statement cost more than running it) and
 *   work_mem = 64MB (the dup ranking sort never spills) for the call only.
 */
#include "schema.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_pgdsn.h"
#include "st_util.h"

#define STR2(x) #x
#define STR(x) STR2(x)

/*
 * Steps of the migration, by the locks they take (docs/writer.md "Schema and
 * migration").
 *
 * tables_sql creates what is missing, upgrades version 1's broker_flush and
 * adds version 4's column and index, and replaces the global key index by
 * the (topic, key) one that key_index_build has built concurrently just
 * before (on a fresh table it builds it here: nobody inserts yet).
 * On an existing table it takes exclusive locks even when it changes
 * nothing (CREATE INDEX IF NOT EXISTS a ShareLock on broker_event, ALTER
 * TABLE an AccessExclusiveLock on broker_flush): queued behind a reader's
 * AccessShareLock, such a request makes every later flush queue behind it.
 * So only a fresh database (nobody reads its tables yet) or `broker-writer
 * migrate` runs it.
 */
/*
 * Pinned on every session, so that a database or role default (ALTER
 * DATABASE/ROLE ... SET) cannot change what the flush relies on:
 * - default_transaction_isolation read committed: broker_append reads
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
#define SESSION_STATEMENT_TIMEOUT "'30s'"

const char schema_session_sql[] =
	"SET lock_timeout = '5s'; SET statement_timeout = " SESSION_STATEMENT_TIMEOUT "; "
	"SET idle_in_transaction_session_timeout = '10s'; SET client_encoding = 'UTF8'; "
	"SET default_transaction_isolation = 'read committed'; SET default_transaction_read_only = off; "
	"SELECT set_config('synchronous_commit', 'on', false) "
	"WHERE current_setting('synchronous_commit') IN ('off', 'local')";

static const char tables_sql[] =
	"CREATE TABLE IF NOT EXISTS broker_event (\n"
	"  seq bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,\n"
	"  topic text NOT NULL,\n"
	"  about text[] NOT NULL DEFAULT '{}',\n"
	"  data json,\n"
	"  key text,\n"
	"  created_at timestamptz NOT NULL DEFAULT now(),\n"
	"  data_bytes int);\n"
	"ALTER TABLE broker_event ADD COLUMN IF NOT EXISTS data_bytes int;\n"
	"CREATE UNIQUE INDEX IF NOT EXISTS broker_event_topic_key ON broker_event (topic, key) WHERE key IS NOT NULL;\n"
	/* IF NOT EXISTS skips an invalid index too: key_index_build replaced it, and this proves it */
	"DO $chk$ BEGIN\n"
	"  IF NOT (SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = 'broker_event_topic_key'::regclass) THEN\n"
	"    RAISE EXCEPTION 'broker_event_topic_key is invalid (a failed concurrent build): run migrate again';\n"
	"  END IF;\n"
	"END $chk$;\n"
	"DROP INDEX IF EXISTS broker_event_key;\n"
	"CREATE INDEX IF NOT EXISTS broker_event_topic_seq ON broker_event (topic, seq);\n"
	"CREATE TABLE IF NOT EXISTS broker_meta (id int PRIMARY KEY CHECK (id = 1),\n"
	"  horizon bigint NOT NULL DEFAULT 0, schema_version int NOT NULL);\n"
	"INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING;\n"
	"CREATE TABLE IF NOT EXISTS broker_flush (id text PRIMARY KEY, prev bigint NOT NULL,\n"
	"  seqs bigint[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());\n"
	"ALTER TABLE broker_flush ALTER COLUMN seqs SET DEFAULT '{}';\n"
	"ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_ords int[];\n"
	"ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_seqs bigint[];\n"
	"CREATE INDEX IF NOT EXISTS broker_flush_created_at ON broker_flush (created_at);\n";

/*
 * functions_sql: CREATE OR REPLACE FUNCTION only (the wrappers from a DO
 * block that reads their language first).  It updates pg_proc rows
 * and takes no lock on a table or on the function (a call in progress keeps
 * the definition it started with; checked with pg_locks), and the SQL
 * wrappers' bodies are analysed with at most an AccessShareLock.  So it is
 * safe while readers and flushes run: the daemon may run it.
 *
 * Version 3's functions had new names (broker_append3, broker_retain3), and
 * so do version 4's (broker_append4, broker_retain4), for this reason: a
 * version-2 writer that restarts during a rolling upgrade re-creates
 * broker_append2 and broker_retain with its own bodies, and the schema
 * recorded as current is never migrated again, so replacing the functions
 * version 3 calls in place would let that restart revert them for good.
 * The older names become wrappers of the newest functions, so a writer of
 * an older version still running gets the same answers with the newest
 * behaviour (created_at under the lock, bounded retention, 24 h of flush
 * records, data_bytes recorded) until it restarts.
 */
/* A wrapper's arguments, result, body and whether it returns a set (functions_sql's DO block). */
#define WRAP_APPEND                                                                                   \
	"'lock_key bigint, flush_id text, topics text[], abouts text[], datas text[], keys text[]', " \
	"'TABLE(prev bigint, first_seq bigint, n_fresh int, dup_ords int[], dup_seqs bigint[])', "    \
	"'SELECT * FROM broker_append4(lock_key, flush_id, topics, abouts, datas, keys)', true"
#define WRAP_RETAIN                                                  \
	"'lock_key bigint, older_than interval, chunk int', 'int', " \
	"'SELECT broker_retain4(lock_key, older_than, chunk)', false"

static const char functions_sql[] =
	"CREATE OR REPLACE FUNCTION broker_append4(lock_key bigint, flush_id text, topics text[],\n"
	"    abouts text[], datas text[], keys text[])\n"
	"  RETURNS TABLE(prev bigint, first_seq bigint, n_fresh int, dup_ords int[], dup_seqs bigint[])\n"
	"  LANGUAGE plpgsql SET jit = off SET work_mem = '64MB' AS $fn$\n"
	"DECLARE\n"
	"  v_prev bigint;\n"
	"  v_first bigint := 0;\n"
	"  v_n int;\n"
	"  v_do int[] := '{}';\n"
	"  v_ds bigint[] := '{}';\n"
	"  v_seq regclass;\n"
	"  v_ins bigint;\n"
	"  v_now timestamptz;\n"
	"  r record;\n"
	"BEGIN\n"
	"  PERFORM pg_advisory_xact_lock(lock_key);\n"
	"  v_now := clock_timestamp();\n"
	"  SELECT f.prev, f.seqs, f.dup_ords, f.dup_seqs INTO r FROM broker_flush f WHERE f.id = flush_id;\n"
	"  IF FOUND THEN\n"
	"    RETURN QUERY SELECT r.prev, coalesce(r.seqs[1], 0), coalesce(r.seqs[2] - r.seqs[1] + 1, 0)::int,\n"
	"      coalesce(r.dup_ords, '{}'), coalesce(r.dup_seqs, '{}');\n"
	"    RETURN;\n"
	"  END IF;\n"
	"  SELECT coalesce(max(e.seq), 0) INTO v_prev FROM broker_event e;\n"
	"  IF keys IS NOT NULL THEN\n"
	"    SELECT coalesce(array_agg(i.o::int ORDER BY i.o), '{}'), coalesce(array_agg(e.seq ORDER BY i.o), '{}')\n"
	"      INTO v_do, v_ds\n"
	"      FROM unnest(topics, keys) WITH ORDINALITY AS i(t, k, o)\n"
	"      CROSS JOIN LATERAL (SELECT e.seq FROM broker_event e WHERE e.topic = i.t AND e.key = i.k LIMIT 1) e;\n"
	"  END IF;\n"
	"  v_n := coalesce(cardinality(topics), 0) - cardinality(v_do);\n"
	"  IF v_n > 0 THEN\n"
	"    v_seq := pg_get_serial_sequence('broker_event', 'seq')::regclass;\n"
	"    v_first := nextval(v_seq);\n"
	"    IF v_n > 1 THEN\n"
	"      PERFORM setval(v_seq, v_first + v_n - 1);\n"
	"    END IF;\n"
	"    IF cardinality(v_do) = 0 THEN\n"
	"      INSERT INTO broker_event (seq, topic, about, data, key, created_at, data_bytes) OVERRIDING SYSTEM VALUE\n"
	"      SELECT v_first - 1 + i.o, i.t, i.a::text[], i.d::json, i.k, v_now, octet_length(i.d)\n"
	"        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o);\n"
	"    ELSE\n"
	"      INSERT INTO broker_event (seq, topic, about, data, key, created_at, data_bytes) OVERRIDING SYSTEM VALUE\n"
	"      SELECT v_first - 1 + row_number() OVER (ORDER BY i.o), i.t, i.a::text[], i.d::json, i.k, v_now,\n"
	"             octet_length(i.d)\n"
	"        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o)\n"
	"       WHERE NOT EXISTS (SELECT 1 FROM unnest(v_do) AS s(o) WHERE s.o = i.o);\n"
	"    END IF;\n"
	"    GET DIAGNOSTICS v_ins = ROW_COUNT;\n"
	"    IF v_ins <> v_n THEN\n"
	"      RAISE EXCEPTION 'broker_append4: % rows inserted, % expected (a topic and key repeated in one call?)',\n"
	"        v_ins, v_n;\n"
	"    END IF;\n"
	"  END IF;\n"
	"  INSERT INTO broker_flush (id, prev, seqs, dup_ords, dup_seqs, created_at)\n"
	"    VALUES (flush_id, v_prev, CASE WHEN v_n > 0 THEN ARRAY[v_first, v_first + v_n - 1] ELSE '{}' END,\n"
	"            v_do, v_ds, v_now);\n"
	"  RETURN QUERY SELECT v_prev, v_first, v_n, v_do, v_ds;\n"
	"END\n"
	"$fn$;\n"
	"\n"
	"CREATE OR REPLACE FUNCTION broker_retain4(lock_key bigint, older_than interval, chunk int)\n"
	"  RETURNS int LANGUAGE plpgsql AS $fn$\n"
	"DECLARE\n"
	"  v_horizon bigint;\n"
	"  v_lo bigint;\n"
	"  v_hi bigint;\n"
	"  v_newest bigint;\n"
	"  v_keep bigint;\n"
	"  v_cut bigint;\n"
	"  v_n int := 0;\n"
	"BEGIN\n"
	"  IF NOT pg_try_advisory_xact_lock(lock_key + 1) THEN\n"
	"    RETURN 0;\n"
	"  END IF;\n"
	"  IF older_than IS NOT NULL AND chunk > 0 THEN\n"
	"    SELECT m.horizon INTO v_horizon FROM broker_meta m WHERE m.id = 1;\n"
	"    SELECT e.seq INTO v_lo FROM broker_event e WHERE e.seq > coalesce(v_horizon, 0) ORDER BY e.seq LIMIT 1;\n"
	"    SELECT e.seq INTO v_newest FROM broker_event e ORDER BY e.seq DESC LIMIT 1;\n"
	"    v_hi := least(v_lo + chunk - 1, v_newest - 1);\n"
	"    IF v_hi >= v_lo THEN\n"
	"      SELECT e.seq INTO v_keep FROM broker_event e\n"
	"       WHERE e.seq BETWEEN v_lo AND v_hi AND e.created_at >= now() - older_than ORDER BY e.seq LIMIT 1;\n"
	"      v_cut := coalesce(v_keep - 1, v_hi);\n"
	"      IF v_cut >= v_lo THEN\n"
	"        UPDATE broker_meta SET horizon = greatest(horizon, v_cut) WHERE id = 1;\n"
	"        DELETE FROM broker_event e WHERE e.seq BETWEEN v_lo AND v_cut;\n"
	"        GET DIAGNOSTICS v_n = ROW_COUNT;\n"
	"      END IF;\n"
	"    END IF;\n"
	"  END IF;\n"
	"  IF v_n = 0 THEN\n"
	"    DELETE FROM broker_flush WHERE ctid = ANY(ARRAY(SELECT f.ctid FROM broker_flush f\n"
	"      WHERE f.created_at < now() - interval '" STR(
		SCHEMA_FLUSH_KEEP_HOURS) " hours'\n"
					 "      ORDER BY f.created_at LIMIT greatest(chunk, 1)));\n"
					 "  END IF;\n"
					 "  RETURN v_n;\n"
					 "END\n"
					 "$fn$;\n"
					 "\n"
					 /*
					  * The wrappers keep the language of the function they replace
					  * (a new name gets SQL).  A call that began before the
					  * replacement looks the function up twice: fmgr picks the
					  * language's handler, the handler reads the body again, and a
					  * replacement committed in between hands a plpgsql handler an
					  * SQL body ("syntax error at or near SELECT", seen while a
					  * version-3 writer flushed through a migrate).
					  */
					 "DO $do$\n"
					 "DECLARE\n"
					 "  w record;\n"
					 "  lang name;\n"
					 "BEGIN\n"
					 "  FOR w IN SELECT * FROM (VALUES\n"
					 "    ('broker_append3', " WRAP_APPEND "),\n"
					 "    ('broker_append2', " WRAP_APPEND "),\n"
					 "    ('broker_retain3', " WRAP_RETAIN "),\n"
					 "    ('broker_retain', " WRAP_RETAIN ")\n"
					 "  ) AS v(fn, args, ret, body, set_returning) LOOP\n"
					 "    lang := NULL;\n"
					 "    SELECT l.lanname INTO lang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang\n"
					 "      WHERE p.proname = w.fn AND p.pronamespace =\n"
					 "        (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema());\n"
					 "    IF lang = 'plpgsql' THEN\n"
					 "      EXECUTE format('CREATE OR REPLACE FUNCTION %I(%s) RETURNS %s LANGUAGE plpgsql AS %L',\n"
					 "        w.fn, w.args, w.ret, CASE WHEN w.set_returning\n"
					 "          THEN 'BEGIN RETURN QUERY ' || w.body || '; END'\n"
					 "          ELSE 'BEGIN RETURN (' || w.body || '); END' END);\n"
					 "    ELSE\n"
					 "      EXECUTE format('CREATE OR REPLACE FUNCTION %I(%s) RETURNS %s LANGUAGE sql AS %L',\n"
					 "        w.fn, w.args, w.ret, w.body);\n"
					 "    END IF;\n"
					 "  END LOOP;\n"
					 "END\n"
					 "$do$;\n";

/* Takes a row lock on broker_meta's one row; never lowers the version. */
static const char version_sql[] =
	"UPDATE broker_meta SET schema_version = greatest(schema_version, " STR(SCHEMA_VERSION) ") WHERE id = 1";

/* The signatures this program calls: a newer schema must still have them. */
static const char functions_present_sql[] =
	"SELECT to_regprocedure('broker_append4(bigint,text,text[],text[],text[],text[])') IS NOT NULL"
	" AND to_regprocedure('broker_retain4(bigint,interval,integer)') IS NOT NULL"
	" AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'broker_event'::regclass"
	"             AND attname = 'data_bytes' AND NOT attisdropped)";

static void
set_err(char *err, size_t errlen, const char *what, const char *msg)
{
	if (errlen == 0)
		return;
	snprintf(err, errlen, "%s: %s", what, msg);
	/* libpq messages end in a newline; logs are one line */
	for (char *p = err; *p != '\0'; p++)
		if (*p == '\n')
			*p = ' ';
}

/* ST_EAGAIN for a lock that lock_timeout gave up on (or a deadlock): retry later. */
static st_err
result_err(PGconn *conn, PGresult *r, const char *what, char *err, size_t errlen)
{
	const char *state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

	set_err(err, errlen, what, r != NULL ? PQresultErrorMessage(r) : PQerrorMessage(conn));
	if (state != NULL && (strcmp(state, "55P03") == 0 || strcmp(state, "40P01") == 0))
		return ST_EAGAIN;
	return ST_EDB;
}

static st_err
exec_ok(PGconn *conn, const char *sql, const char *what, char *err, size_t errlen)
{
	PGresult *r = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(r);
	st_err rv = ST_OK;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		rv = result_err(conn, r, what, err, errlen);
	PQclear(r);
	return rv;
}

/* One value of a one-row, one-column query; "" for NULL. */
static st_err
query_value(PGconn *conn, const char *sql, char *out, size_t outlen, char *err, size_t errlen)
{
	PGresult *r = PQexec(conn, sql);
	st_err rv = ST_OK;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 1) {
		rv = PQresultStatus(r) == PGRES_TUPLES_OK ? ST_EDB : result_err(conn, r, "schema check", err, errlen);
		if (rv == ST_EDB && PQresultStatus(r) == PGRES_TUPLES_OK)
			set_err(err, errlen, "schema check", "unexpected result shape");
	} else {
		snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
	}
	PQclear(r);
	return rv;
}

static st_err
read_version(PGconn *conn, int *version, char *err, size_t errlen)
{
	char v[32];
	st_err rv;

	/* broker_meta cannot be named before it exists: the query would fail to parse */
	if ((rv = query_value(conn, "SELECT to_regclass('broker_meta') IS NOT NULL", v, sizeof(v), err, errlen)) !=
	    ST_OK)
		return rv;
	if (strcmp(v, "t") != 0) {
		*version = 0;
		return ST_OK;
	}
	if ((rv = query_value(conn, "SELECT coalesce((SELECT schema_version FROM broker_meta WHERE id = 1), 0)", v,
			      sizeof(v), err, errlen)) != ST_OK)
		return rv;
	*version = (int)strtol(v, NULL, 10);
	return ST_OK;
}

/*
 * Whether a schema found at `version` needs work from this program.  ST_OK
 * with *done: usable as it is.  ST_EINVAL: this program must not run on it
 * (err says what the operator does).
 */
static st_err
judge(PGconn *conn, schema_mode mode, int version, bool *done, char *err, size_t errlen)
{
	char v[8];
	st_err rv;

	*done = false;
	if (version == SCHEMA_VERSION) {
		*done = true;
		return ST_OK;
	}
	if (version > SCHEMA_VERSION) {
		if ((rv = query_value(conn, functions_present_sql, v, sizeof(v), err, errlen)) != ST_OK)
			return rv;
		if (strcmp(v, "t") != 0) {
			snprintf(
				err, errlen,
				"schema version %d is newer than this program's %d and no longer has the functions "
				"this program calls (broker_append4, broker_retain4, broker_event.data_bytes): upgrade this program",
				version, SCHEMA_VERSION);
			return ST_EINVAL;
		}
		*done = true;
		return ST_OK;
	}
	if (mode == SCHEMA_ONLINE && version > 0 && version < SCHEMA_ONLINE_FROM) {
		snprintf(
			err, errlen,
			"schema version %d needs exclusive table locks to reach version %d: run `broker-writer migrate` "
			"before starting this writer",
			version, SCHEMA_VERSION);
		return ST_EINVAL;
	}
	return ST_OK;
}

st_err
schema_check_encoding(PGconn *conn, char *err, size_t errlen)
{
	const char *enc = PQparameterStatus(conn, "server_encoding");

	if (enc != NULL && strcmp(enc, "UTF8") == 0)
		return ST_OK;
	snprintf(err, errlen,
		 "the database's encoding is %s, not UTF8: it cannot store every event this writer accepts "
		 "(create the database with ENCODING 'UTF8')",
		 enc != NULL ? enc : "unknown");
	return ST_EINVAL;
}

/*
 * Version 4's unique index on (topic, key), built without blocking inserts
 * (issue 24): CREATE UNIQUE INDEX CONCURRENTLY takes a ShareUpdateExclusiveLock,
 * which no flush, retention call or reader conflicts with, and waits (each
 * wait bounded by lock_timeout: ST_EAGAIN, retried) for the transactions
 * that write broker_event or hold an old snapshot to end; it never makes
 * them wait.  It cannot run in a transaction block, so it runs here, as one
 * statement of its own, before the migration's transaction.  A build that
 * failed (a lock timeout, a lost connection) leaves an INVALID index that
 * inserts still maintain and IF NOT EXISTS would take for done: it is
 * dropped (concurrently too) and built again.  The caller holds the
 * migration lock, so an invalid index here is never another migrate's
 * build in progress.  statement_timeout is lifted for the build (a large
 * table takes longer than a flush's 30 s, and a cancelled build only leaves
 * an invalid index to rebuild again and again); lock waits stay bounded.
 */
static st_err
key_index_build(PGconn *conn, char *err, size_t errlen)
{
	char state[16];
	st_err rv;

	if ((rv = query_value(conn,
			      "SELECT CASE WHEN to_regclass('broker_event') IS NULL THEN 'none'"
			      " WHEN to_regclass('broker_event_topic_key') IS NULL THEN 'missing'"
			      " WHEN (SELECT i.indisvalid FROM pg_index i"
			      "       WHERE i.indexrelid = to_regclass('broker_event_topic_key')) THEN 'valid'"
			      " ELSE 'invalid' END",
			      state, sizeof(state), err, errlen)) != ST_OK)
		return rv;
	if (strcmp(state, "none") == 0 || strcmp(state, "valid") == 0)
		return ST_OK; /* a fresh table gets it in tables_sql; a valid one was built by an earlier attempt */
	if ((rv = exec_ok(conn, "SET statement_timeout = 0", "migrate key index", err, errlen)) != ST_OK)
		return rv;
	if (strcmp(state, "invalid") == 0) {
		st_warn("migrate: dropping the invalid index broker_event_topic_key left by a failed build");
		rv = exec_ok(conn, "DROP INDEX CONCURRENTLY IF EXISTS broker_event_topic_key", "migrate key index drop",
			     err, errlen);
	}
	if (rv == ST_OK)
		rv = exec_ok(conn,
			     "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS broker_event_topic_key"
			     " ON broker_event (topic, key) WHERE key IS NOT NULL",
			     "migrate key index", err, errlen);
	/* back to the session's bound for the rest (schema_session_sql) */
	if (exec_ok(conn, "SET statement_timeout = " SESSION_STATEMENT_TIMEOUT, "migrate", NULL, 0) != ST_OK &&
	    rv == ST_OK) {
		set_err(err, errlen, "migrate", PQerrorMessage(conn));
		rv = ST_EDB;
	}
	return rv;
}

st_err
schema_migrate(PGconn *conn, schema_mode mode, int *found, char *err, size_t errlen)
{
	int version = 0;
	bool done;
	st_err rv;

	if ((rv = schema_check_encoding(conn, err, errlen)) != ST_OK)
		return rv;
	/* the flush's own settings first (a read-only or serializable default would fail or change the
	 * steps below just as it would a flush); lock_timeout is then lowered for the migration */
	if ((rv = exec_ok(conn, schema_session_sql, "migrate settings", err, errlen)) != ST_OK)
		return rv;
	/* every lock below is waited for at most this long (then ST_EAGAIN) */
	if ((rv = exec_ok(conn, "SET lock_timeout = '" STR(SCHEMA_LOCK_TIMEOUT_MS) "ms'", "migrate", err, errlen)) !=
	    ST_OK)
		return rv;
	/* a current schema costs two catalog reads and one row: no lock, no DDL */
	if ((rv = read_version(conn, &version, err, errlen)) != ST_OK)
		return rv;
	*found = version;
	if ((rv = judge(conn, mode, version, &done, err, errlen)) != ST_OK || done)
		return rv;
	if ((rv = exec_ok(conn, "SELECT pg_advisory_lock(" STR(SCHEMA_MIGRATE_LOCK_KEY) ")", "migrate lock", err,
			  errlen)) != ST_OK)
		return rv;
	/* another replica may have migrated while this one waited */
	if ((rv = read_version(conn, &version, err, errlen)) != ST_OK ||
	    (rv = judge(conn, mode, version, &done, err, errlen)) != ST_OK || done)
		goto unlock;
	*found = version;
	if (version < SCHEMA_ONLINE_FROM && (rv = key_index_build(conn, err, errlen)) != ST_OK)
		goto unlock;
	if ((rv = exec_ok(conn, "BEGIN", "migrate", err, errlen)) != ST_OK)
		goto unlock;
	if ((version < SCHEMA_ONLINE_FROM &&
	     (rv = exec_ok(conn, tables_sql, "migrate tables", err, errlen)) != ST_OK) ||
	    (rv = exec_ok(conn, functions_sql, "migrate functions", err, errlen)) != ST_OK ||
	    (rv = exec_ok(conn, version_sql, "migrate version", err, errlen)) != ST_OK) {
		(void)exec_ok(conn, "ROLLBACK", "rollback", NULL, 0);
		goto unlock;
	}
	rv = exec_ok(conn, "COMMIT", "migrate commit", err, errlen);
unlock:
	/* a lost connection releases the session lock by itself */
	(void)exec_ok(conn, "SELECT pg_advisory_unlock(" STR(SCHEMA_MIGRATE_LOCK_KEY) ")", "migrate unlock", NULL, 0);
	return rv;
}

/* ---- the retrying driver (the daemon's start and `broker-writer migrate`) ---- */

/*
 * Blocking (before the loop runs).  libpq walks a host list itself here,
 * with connect_timeout per address.  Two defaults that the DSN's own values
 * win over: 5 s per address, and target_session_attrs=primary, so that the
 * migration, which writes, passes over a hot standby in a host list as the
 * daemon's connections do (libpq's "primary" asks in_hot_standby, not the
 * database's default_transaction_read_only, which the session overrides).
 */
static PGconn *
connect_blocking(const char *dsn)
{
	const char *keys[8] = { "dbname", "keepalives", "keepalives_idle", "tcp_user_timeout", "application_name" };
	const char *vals[8] = { dsn, "1", "5", "10000", "broker-writer" };
	size_t n = 5;
	st_pgdsn *d = NULL;
	char err[256];

	if (st_pgdsn_parse(dsn, &d, err, sizeof(err)) == ST_OK) { /* checked at start; a failure leaves libpq's say */
		if (st_pgdsn_option(d, "connect_timeout") == NULL) {
			keys[n] = "connect_timeout";
			vals[n++] = "5";
		}
		if (st_pgdsn_option(d, "target_session_attrs") == NULL) {
			keys[n] = "target_session_attrs";
			vals[n++] = "primary";
		}
		st_pgdsn_free(d);
	}
	keys[n] = vals[n] = NULL;
	return PQconnectdbParams(keys, vals, 1);
}

static void
quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static void
log_schema(int found)
{
	if (found == SCHEMA_VERSION)
		st_info("schema version %d is current", SCHEMA_VERSION);
	else if (found == 0)
		st_info("created schema version %d", SCHEMA_VERSION);
	else if (found < SCHEMA_VERSION)
		st_info("upgraded schema version %d to %d", found, SCHEMA_VERSION);
	else
		st_info("schema version %d is newer than this program's %d and keeps the functions it calls; left as it "
			"is",
			found, SCHEMA_VERSION);
}

bool
schema_connect_transient(const char *msg)
{
	/* libpq 15's texts (fe-connect.c) and the server's start/stop refusals (SQLSTATE 57P03). */
	static const char *const transient[] = {
		"Connection refused",
		"timeout expired",
		"Connection timed out",
		"No route to host",
		"Network is unreachable",
		"could not translate host name",
		"Temporary failure in name resolution",
		"the database system is starting up",
		"the database system is shutting down",
		"the database system is in recovery mode",
		"the database system is not yet accepting connections",
		"server closed the connection unexpectedly",
		"Connection reset by peer",
		"No such file or directory",
	};

	for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
		if (strstr(msg, transient[i]) != NULL)
			return true;
	return false;
}

int
schema_migrate_retry(const char *dsn, schema_mode mode, uint64_t wait_ms, volatile sig_atomic_t *stop)
{
	bool daemon = mode == SCHEMA_ONLINE;
	st_backoff backoff;
	int attempts = 0;
	bool logged = false;
	uint64_t start = st_clock_now(st_clock_system());

	st_backoff_init(&backoff, SCHEMA_RETRY_MIN_MS, SCHEMA_RETRY_MAX_MS);
	for (;;) {
		char err[512] = "";
		PGconn *c = connect_blocking(dsn);
		st_err rv = ST_EDB;
		int found = 0;
		bool unreached = false;

		if (PQstatus(c) == CONNECTION_OK) {
			PQsetNoticeProcessor(c, quiet_notice, NULL); /* "already exists, skipping" is expected */
			rv = schema_migrate(c, mode, &found, err, sizeof(err));
		} else {
			snprintf(err, sizeof(err), "cannot connect: %s", PQerrorMessage(c));
			unreached = schema_connect_transient(PQerrorMessage(c));
		}
		PQfinish(c);
		if (rv == ST_OK) {
			log_schema(found);
			return 0;
		}
		st_one_line(err);
		if (rv == ST_EINVAL) {
			st_error("%s", err);
			return 2;
		}
		attempts++;
		if (!daemon && unreached && st_clock_now(st_clock_system()) - start >= wait_ms) {
			st_error("migrate: %s (waited %llu ms for the database: --migrate-wait)", err,
				 (unsigned long long)(st_clock_now(st_clock_system()) - start));
			return 1;
		}
		if (!daemon && !unreached && (rv != ST_EAGAIN || attempts >= SCHEMA_MIGRATE_LOCK_ATTEMPTS)) {
			if (rv == ST_EAGAIN)
				st_error(
					"migrate: no lock in %d attempts of %d ms (%s); a long transaction holds a table "
					"or an old snapshot (see pg_stat_activity): run migrate again when it ends",
					attempts, SCHEMA_LOCK_TIMEOUT_MS, err);
			else
				st_error("migrate: %s", err);
			return 1;
		}
		if (!logged || rv == ST_EAGAIN)
			st_warn("migrate: %s (retrying)", err);
		logged = true;
		/* wait in small slices so that SIGTERM ends the wait at once */
		for (uint32_t waited = 0, wait = st_backoff_next(&backoff); waited < wait; waited += 50) {
			struct timespec ts = { 0, 50 * 1000000L };
			if (*stop)
				return -1;
			nanosleep(&ts, NULL);
		}
		if (*stop)
			return -1;
	}
}
