/*
 * schema: the schema script and its blocking migration.
 *
 * Everything is CREATE ... IF NOT EXISTS or CREATE OR REPLACE, so the
 * script is its own upgrade: running it again on a current database is a
 * no-op, and on an older one adds what is missing.  broker_meta's single
 * row records the schema version (never lowered by an older binary).
 *
 * broker_append is the whole flush (see docs/writer.md): it is set-based
 * (one statement for the lookup, the allocation and the insert, one for the
 * record), because a per-row plpgsql loop costs a round of the executor per
 * event, and a flush can hold 200,000 events.  Fresh seqs are allocated
 * with nextval in input order and inserted with OVERRIDING SYSTEM VALUE, so
 * each input ordinal knows its seq without relying on the (undocumented)
 * order of RETURNING.  A recorded flush returns fresh = (seq > prev): every
 * seq allocated by the flush is above the prev it read under the lock, and
 * every seq of an already stored key is at or below it.
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
    "  seqs bigint[] NOT NULL, created_at timestamptz NOT NULL DEFAULT now());\n"
    "\n"
    "CREATE OR REPLACE FUNCTION broker_append(lock_key bigint, flush_id text, topics text[],\n"
    "    abouts text[], datas text[], keys text[])\n"
    "  RETURNS TABLE(ord int, seq bigint, fresh boolean, prev bigint)\n"
    "  LANGUAGE plpgsql AS $fn$\n"
    "DECLARE\n"
    "  v_prev bigint;\n"
    "  v_seqs bigint[];\n"
    "  v_seq regclass;\n"
    "BEGIN\n"
    "  PERFORM pg_advisory_xact_lock(lock_key);\n"
    "  SELECT f.prev, f.seqs INTO v_prev, v_seqs FROM broker_flush f WHERE f.id = flush_id;\n"
    "  IF FOUND THEN\n"
    "    RETURN QUERY SELECT u.o::int, u.s, u.s > v_prev, v_prev\n"
    "      FROM unnest(v_seqs) WITH ORDINALITY AS u(s, o) ORDER BY u.o;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  SELECT coalesce(max(e.seq), 0) INTO v_prev FROM broker_event e;\n"
    "  v_seq := pg_get_serial_sequence('broker_event', 'seq')::regclass;\n"
    "  WITH inp AS (\n"
    "    SELECT i.o::int AS o, i.t, i.a, i.d, i.k\n"
    "      FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o)\n"
    "  ), old AS (\n"
    "    SELECT inp.o, e.seq AS s FROM inp JOIN broker_event e ON e.key = inp.k\n"
    "  ), neu AS (\n"
    "    SELECT n.o, nextval(v_seq) AS s\n"
    "      FROM (SELECT inp.o FROM inp WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.o = inp.o)\n"
    "            ORDER BY inp.o) n\n"
    "  ), ins AS (\n"
    "    INSERT INTO broker_event (seq, topic, about, data, key) OVERRIDING SYSTEM VALUE\n"
    "    SELECT neu.s, inp.t, ARRAY(SELECT json_array_elements_text(inp.a::json)), inp.d::json, inp.k\n"
    "      FROM neu JOIN inp ON inp.o = neu.o ORDER BY neu.s\n"
    "    RETURNING 1\n"
    "  )\n"
    "  SELECT array_agg(coalesce(neu.s, old.s) ORDER BY inp.o) INTO v_seqs\n"
    "    FROM inp LEFT JOIN old ON old.o = inp.o LEFT JOIN neu ON neu.o = inp.o;\n"
    "  v_seqs := coalesce(v_seqs, '{}');\n"
    "  INSERT INTO broker_flush (id, prev, seqs) VALUES (flush_id, v_prev, v_seqs);\n"
    "  RETURN QUERY SELECT u.o::int, u.s, u.s > v_prev, v_prev\n"
    "    FROM unnest(v_seqs) WITH ORDINALITY AS u(s, o) ORDER BY u.o;\n"
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
