/*
 * schema: the schema script and its blocking migration.
 *
 * Everything is CREATE ... IF NOT EXISTS, ADD COLUMN IF NOT EXISTS or
 * CREATE OR REPLACE, so the script is its own upgrade: running it again on a
 * current database is a no-op, and on an older one adds what is missing.
 * broker_meta's single row records the schema version (never lowered by an
 * older binary).
 *
 * broker_append2 is the whole flush (docs/writer.md).  It replaces version
 * 1's broker_append, which this script no longer creates but does not drop:
 * a version-1 writer still running during a rolling upgrade keeps its own
 * function (its migration re-creates it), takes the same advisory lock and
 * allocates with nextval under it, so both kinds of flush stay serial and
 * their seqs consecutive.  broker_flush records the compact answer: seqs
 * is now the fresh range {first, last} ('{}' when nothing was fresh; in a
 * version-1 row it was every row's seq, so seqs[1] > prev is the first
 * fresh seq in both), and the new nullable columns dup_ords / dup_seqs hold
 * the rows whose key was stored (nullable: version 1's INSERT still works).
 *
 * Why broker_append2 is fast (each step checked with EXPLAIN ANALYZE, see
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
 * - Keys: one probe of the unique key index per keyed row finds the stored
 *   ones (returned, not inserted).  The LATERAL ... LIMIT 1 forces that
 *   nested loop: a plain join was planned as a hash or merge join over a
 *   sequential scan of the whole table, which grows with the table (154 ms
 *   at 370,000 rows, against 7 us a probe).  The others are found by ordinal (a hash
 *   anti-join of two in-memory lists, never a second look at broker_event:
 *   a NOT EXISTS on broker_event was planned as a sequential scan of the
 *   whole table) and ranked with row_number() over the ordinal.  Keys repeated
 *   within one call must already be folded by the caller (batch.c); a call
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

#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS broker_event (\n"
    "  seq bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,\n"
    "  topic text NOT NULL,\n"
    "  about text[] NOT NULL DEFAULT '{}',\n"
    "  data json,\n"
    "  key text,\n"
    "  created_at timestamptz NOT NULL DEFAULT now());\n"
    "CREATE UNIQUE INDEX IF NOT EXISTS broker_event_key ON broker_event (key) WHERE key IS NOT NULL;\n"
    "CREATE INDEX IF NOT EXISTS broker_event_topic_seq ON broker_event (topic, seq);\n"
    "CREATE TABLE IF NOT EXISTS broker_meta (id int PRIMARY KEY CHECK (id = 1),\n"
    "  horizon bigint NOT NULL DEFAULT 0, schema_version int NOT NULL);\n"
    "INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 0, " STR(SCHEMA_VERSION) ")\n"
    "  ON CONFLICT (id) DO UPDATE SET schema_version = greatest(broker_meta.schema_version, EXCLUDED.schema_version);\n"
    "CREATE TABLE IF NOT EXISTS broker_flush (id text PRIMARY KEY, prev bigint NOT NULL,\n"
    "  seqs bigint[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());\n"
    "ALTER TABLE broker_flush ALTER COLUMN seqs SET DEFAULT '{}';\n"
    "ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_ords int[];\n"
    "ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_seqs bigint[];\n"
    "\n"
    "CREATE OR REPLACE FUNCTION broker_append2(lock_key bigint, flush_id text, topics text[],\n"
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
    "  r record;\n"
    "BEGIN\n"
    "  PERFORM pg_advisory_xact_lock(lock_key);\n"
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
    "      FROM unnest(keys) WITH ORDINALITY AS i(k, o)\n"
    "      CROSS JOIN LATERAL (SELECT e.seq FROM broker_event e WHERE e.key = i.k LIMIT 1) e;\n"
    "  END IF;\n"
    "  v_n := coalesce(cardinality(topics), 0) - cardinality(v_do);\n"
    "  IF v_n > 0 THEN\n"
    "    v_seq := pg_get_serial_sequence('broker_event', 'seq')::regclass;\n"
    "    v_first := nextval(v_seq);\n"
    "    IF v_n > 1 THEN\n"
    "      PERFORM setval(v_seq, v_first + v_n - 1);\n"
    "    END IF;\n"
    "    IF cardinality(v_do) = 0 THEN\n"
    "      INSERT INTO broker_event (seq, topic, about, data, key) OVERRIDING SYSTEM VALUE\n"
    "      SELECT v_first - 1 + i.o, i.t, i.a::text[], i.d::json, i.k\n"
    "        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o);\n"
    "    ELSE\n"
    "      INSERT INTO broker_event (seq, topic, about, data, key) OVERRIDING SYSTEM VALUE\n"
    "      SELECT v_first - 1 + row_number() OVER (ORDER BY i.o), i.t, i.a::text[], i.d::json, i.k\n"
    "        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o)\n"
    "       WHERE NOT EXISTS (SELECT 1 FROM unnest(v_do) AS s(o) WHERE s.o = i.o);\n"
    "    END IF;\n"
    "    GET DIAGNOSTICS v_ins = ROW_COUNT;\n"
    "    IF v_ins <> v_n THEN\n"
    "      RAISE EXCEPTION 'broker_append2: % rows inserted, % expected (a key repeated in one call?)',\n"
    "        v_ins, v_n;\n"
    "    END IF;\n"
    "  END IF;\n"
    "  INSERT INTO broker_flush (id, prev, seqs, dup_ords, dup_seqs)\n"
    "    VALUES (flush_id, v_prev, CASE WHEN v_n > 0 THEN ARRAY[v_first, v_first + v_n - 1] ELSE '{}' END,\n"
    "            v_do, v_ds);\n"
    "  RETURN QUERY SELECT v_prev, v_first, v_n, v_do, v_ds;\n"
    "END\n"
    "$fn$;\n"
    "\n"
    "CREATE OR REPLACE FUNCTION broker_retain(lock_key bigint, older_than interval, chunk int)\n"
    "  RETURNS int LANGUAGE plpgsql AS $fn$\n"
    "DECLARE\n"
    "  v_newest bigint;\n"
    "  v_cut bigint;\n"
    "  v_n int;\n"
    "BEGIN\n"
    "  IF NOT pg_try_advisory_xact_lock(lock_key + 1) THEN\n"
    "    RETURN 0;\n"
    "  END IF;\n"
    "  DELETE FROM broker_flush WHERE created_at < now() - interval '1 hour';\n"
    "  IF older_than IS NULL THEN\n"
    "    RETURN 0;\n"
    "  END IF;\n"
    "  SELECT max(e.seq) INTO v_newest FROM broker_event e;\n"
    "  IF v_newest IS NULL THEN\n"
    "    RETURN 0;\n"
    "  END IF;\n"
    "  SELECT max(c.seq) INTO v_cut FROM (SELECT e.seq FROM broker_event e\n"
    "     WHERE e.seq < v_newest AND e.created_at < now() - older_than ORDER BY e.seq LIMIT chunk) c;\n"
    "  IF v_cut IS NULL THEN\n"
    "    RETURN 0;\n"
    "  END IF;\n"
    "  UPDATE broker_meta SET horizon = greatest(horizon, v_cut) WHERE id = 1;\n"
    "  DELETE FROM broker_event e WHERE e.seq <= v_cut;\n"
    "  GET DIAGNOSTICS v_n = ROW_COUNT;\n"
    "  RETURN v_n;\n"
    "END\n"
    "$fn$;\n";

static void
set_err(char *err, size_t errlen, const char *what, PGconn *conn)
{
	if (errlen == 0)
		return;
	snprintf(err, errlen, "%s: %s", what, PQerrorMessage(conn));
	/* libpq messages end in a newline; logs are one line */
	for (char *p = err; *p != '\0'; p++)
		if (*p == '\n')
			*p = ' ';
}

static st_err
exec_ok(PGconn *conn, const char *sql, const char *what, char *err, size_t errlen)
{
	PGresult *r = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(r);
	st_err rv = ST_OK;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		set_err(err, errlen, what, conn);
		rv = ST_EDB;
	}
	PQclear(r);
	return rv;
}

st_err
schema_migrate(PGconn *conn, char *err, size_t errlen)
{
	st_err rv;

	if ((rv = exec_ok(conn, "SELECT pg_advisory_lock(" STR(SCHEMA_MIGRATE_LOCK_KEY) ")", "migrate lock", err,
	                  errlen)) != ST_OK)
		return rv;
	if ((rv = exec_ok(conn, "BEGIN", "migrate", err, errlen)) != ST_OK)
		goto unlock;
	if ((rv = exec_ok(conn, schema_sql, "migrate", err, errlen)) != ST_OK) {
		(void)exec_ok(conn, "ROLLBACK", "rollback", NULL, 0);
		goto unlock;
	}
	rv = exec_ok(conn, "COMMIT", "migrate commit", err, errlen);
unlock:
	/* a lost connection releases the session lock by itself */
	(void)exec_ok(conn, "SELECT pg_advisory_unlock(" STR(SCHEMA_MIGRATE_LOCK_KEY) ")", "migrate unlock", NULL,
	              0);
	return rv;
}
