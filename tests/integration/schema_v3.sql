-- Schema version 3 exactly as the version-3 writer (commit 1504ee2,
-- broker-writer/schema.c tables_sql + functions_sql) created it: the fixture
-- of the version 3 -> 4 upgrade tests (test_schema_versions.py,
-- test_migration_locks.py).  Do not edit: it stands for databases that exist.
CREATE TABLE IF NOT EXISTS broker_event (
  seq bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
  topic text NOT NULL,
  about text[] NOT NULL DEFAULT '{}',
  data json,
  key text,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE UNIQUE INDEX IF NOT EXISTS broker_event_key ON broker_event (key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS broker_event_topic_seq ON broker_event (topic, seq);
CREATE TABLE IF NOT EXISTS broker_meta (id int PRIMARY KEY CHECK (id = 1),
  horizon bigint NOT NULL DEFAULT 0, schema_version int NOT NULL);
INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS broker_flush (id text PRIMARY KEY, prev bigint NOT NULL,
  seqs bigint[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE broker_flush ALTER COLUMN seqs SET DEFAULT '{}';
ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_ords int[];
ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_seqs bigint[];

CREATE OR REPLACE FUNCTION broker_append3(lock_key bigint, flush_id text, topics text[],
    abouts text[], datas text[], keys text[])
  RETURNS TABLE(prev bigint, first_seq bigint, n_fresh int, dup_ords int[], dup_seqs bigint[])
  LANGUAGE plpgsql SET jit = off SET work_mem = '64MB' AS $fn$
DECLARE
  v_prev bigint;
  v_first bigint := 0;
  v_n int;
  v_do int[] := '{}';
  v_ds bigint[] := '{}';
  v_seq regclass;
  v_ins bigint;
  v_now timestamptz;
  r record;
BEGIN
  PERFORM pg_advisory_xact_lock(lock_key);
  v_now := clock_timestamp();
  SELECT f.prev, f.seqs, f.dup_ords, f.dup_seqs INTO r FROM broker_flush f WHERE f.id = flush_id;
  IF FOUND THEN
    RETURN QUERY SELECT r.prev, coalesce(r.seqs[1], 0), coalesce(r.seqs[2] - r.seqs[1] + 1, 0)::int,
      coalesce(r.dup_ords, '{}'), coalesce(r.dup_seqs, '{}');
    RETURN;
  END IF;
  SELECT coalesce(max(e.seq), 0) INTO v_prev FROM broker_event e;
  IF keys IS NOT NULL THEN
    SELECT coalesce(array_agg(i.o::int ORDER BY i.o), '{}'), coalesce(array_agg(e.seq ORDER BY i.o), '{}')
      INTO v_do, v_ds
      FROM unnest(keys) WITH ORDINALITY AS i(k, o)
      CROSS JOIN LATERAL (SELECT e.seq FROM broker_event e WHERE e.key = i.k LIMIT 1) e;
  END IF;
  v_n := coalesce(cardinality(topics), 0) - cardinality(v_do);
  IF v_n > 0 THEN
    v_seq := pg_get_serial_sequence('broker_event', 'seq')::regclass;
    v_first := nextval(v_seq);
    IF v_n > 1 THEN
      PERFORM setval(v_seq, v_first + v_n - 1);
    END IF;
    IF cardinality(v_do) = 0 THEN
      INSERT INTO broker_event (seq, topic, about, data, key, created_at) OVERRIDING SYSTEM VALUE
      SELECT v_first - 1 + i.o, i.t, i.a::text[], i.d::json, i.k, v_now
        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o);
    ELSE
      INSERT INTO broker_event (seq, topic, about, data, key, created_at) OVERRIDING SYSTEM VALUE
      SELECT v_first - 1 + row_number() OVER (ORDER BY i.o), i.t, i.a::text[], i.d::json, i.k, v_now
        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o)
       WHERE NOT EXISTS (SELECT 1 FROM unnest(v_do) AS s(o) WHERE s.o = i.o);
    END IF;
    GET DIAGNOSTICS v_ins = ROW_COUNT;
    IF v_ins <> v_n THEN
      RAISE EXCEPTION 'broker_append3: % rows inserted, % expected (a key repeated in one call?)',
        v_ins, v_n;
    END IF;
  END IF;
  INSERT INTO broker_flush (id, prev, seqs, dup_ords, dup_seqs, created_at)
    VALUES (flush_id, v_prev, CASE WHEN v_n > 0 THEN ARRAY[v_first, v_first + v_n - 1] ELSE '{}' END,
            v_do, v_ds, v_now);
  RETURN QUERY SELECT v_prev, v_first, v_n, v_do, v_ds;
END
$fn$;

CREATE OR REPLACE FUNCTION broker_retain3(lock_key bigint, older_than interval, chunk int)
  RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
  v_horizon bigint;
  v_lo bigint;
  v_hi bigint;
  v_newest bigint;
  v_keep bigint;
  v_cut bigint;
  v_n int := 0;
BEGIN
  IF NOT pg_try_advisory_xact_lock(lock_key + 1) THEN
    RETURN 0;
  END IF;
  IF older_than IS NOT NULL AND chunk > 0 THEN
    SELECT m.horizon INTO v_horizon FROM broker_meta m WHERE m.id = 1;
    SELECT e.seq INTO v_lo FROM broker_event e WHERE e.seq > coalesce(v_horizon, 0) ORDER BY e.seq LIMIT 1;
    SELECT e.seq INTO v_newest FROM broker_event e ORDER BY e.seq DESC LIMIT 1;
    v_hi := least(v_lo + chunk - 1, v_newest - 1);
    IF v_hi >= v_lo THEN
      SELECT e.seq INTO v_keep FROM broker_event e
       WHERE e.seq BETWEEN v_lo AND v_hi AND e.created_at >= now() - older_than ORDER BY e.seq LIMIT 1;
      v_cut := coalesce(v_keep - 1, v_hi);
      IF v_cut >= v_lo THEN
        UPDATE broker_meta SET horizon = greatest(horizon, v_cut) WHERE id = 1;
        DELETE FROM broker_event e WHERE e.seq BETWEEN v_lo AND v_cut;
        GET DIAGNOSTICS v_n = ROW_COUNT;
      END IF;
    END IF;
  END IF;
  IF v_n = 0 THEN
    DELETE FROM broker_flush WHERE created_at < now() - interval '24 hours';
  END IF;
  RETURN v_n;
END
$fn$;

CREATE OR REPLACE FUNCTION broker_append2(lock_key bigint, flush_id text, topics text[],
    abouts text[], datas text[], keys text[])
  RETURNS TABLE(prev bigint, first_seq bigint, n_fresh int, dup_ords int[], dup_seqs bigint[])
  LANGUAGE sql AS $fn$ SELECT * FROM broker_append3(lock_key, flush_id, topics, abouts, datas, keys) $fn$;

CREATE OR REPLACE FUNCTION broker_retain(lock_key bigint, older_than interval, chunk int)
  RETURNS int LANGUAGE sql AS $fn$ SELECT broker_retain3(lock_key, older_than, chunk) $fn$;

UPDATE broker_meta SET schema_version = greatest(schema_version, 3) WHERE id = 1;
