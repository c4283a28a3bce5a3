-- The schema script of schema version 2, exactly as broker-writer 0.1
-- (schema version 2) ran it at every start: the fixture of the upgrade tests
-- (tests/integration/test_schema_versions.py, test_migration_locks.py).
-- Do not edit: it stands for databases that exist.
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
INSERT INTO broker_meta (id, horizon, schema_version) VALUES (1, 0, 2)
  ON CONFLICT (id) DO UPDATE SET schema_version = greatest(broker_meta.schema_version, EXCLUDED.schema_version);
CREATE TABLE IF NOT EXISTS broker_flush (id text PRIMARY KEY, prev bigint NOT NULL,
  seqs bigint[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE broker_flush ALTER COLUMN seqs SET DEFAULT '{}';
ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_ords int[];
ALTER TABLE broker_flush ADD COLUMN IF NOT EXISTS dup_seqs bigint[];

CREATE OR REPLACE FUNCTION broker_append2(lock_key bigint, flush_id text, topics text[],
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
  r record;
BEGIN
  PERFORM pg_advisory_xact_lock(lock_key);
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
      INSERT INTO broker_event (seq, topic, about, data, key) OVERRIDING SYSTEM VALUE
      SELECT v_first - 1 + i.o, i.t, i.a::text[], i.d::json, i.k
        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o);
    ELSE
      INSERT INTO broker_event (seq, topic, about, data, key) OVERRIDING SYSTEM VALUE
      SELECT v_first - 1 + row_number() OVER (ORDER BY i.o), i.t, i.a::text[], i.d::json, i.k
        FROM unnest(topics, abouts, datas, keys) WITH ORDINALITY AS i(t, a, d, k, o)
       WHERE NOT EXISTS (SELECT 1 FROM unnest(v_do) AS s(o) WHERE s.o = i.o);
    END IF;
    GET DIAGNOSTICS v_ins = ROW_COUNT;
    IF v_ins <> v_n THEN
      RAISE EXCEPTION 'broker_append2: % rows inserted, % expected (a key repeated in one call?)',
        v_ins, v_n;
    END IF;
  END IF;
  INSERT INTO broker_flush (id, prev, seqs, dup_ords, dup_seqs)
    VALUES (flush_id, v_prev, CASE WHEN v_n > 0 THEN ARRAY[v_first, v_first + v_n - 1] ELSE '{}' END,
            v_do, v_ds);
  RETURN QUERY SELECT v_prev, v_first, v_n, v_do, v_ds;
END
$fn$;

CREATE OR REPLACE FUNCTION broker_retain(lock_key bigint, older_than interval, chunk int)
  RETURNS int LANGUAGE plpgsql AS $fn$
DECLARE
  v_newest bigint;
  v_cut bigint;
  v_n int;
BEGIN
  IF NOT pg_try_advisory_xact_lock(lock_key + 1) THEN
    RETURN 0;
  END IF;
  DELETE FROM broker_flush WHERE created_at < now() - interval '1 hour';
  IF older_than IS NULL THEN
    RETURN 0;
  END IF;
  SELECT max(e.seq) INTO v_newest FROM broker_event e;
  IF v_newest IS NULL THEN
    RETURN 0;
  END IF;
  SELECT max(c.seq) INTO v_cut FROM (SELECT e.seq FROM broker_event e
     WHERE e.seq < v_newest AND e.created_at < now() - older_than ORDER BY e.seq LIMIT chunk) c;
  IF v_cut IS NULL THEN
    RETURN 0;
  END IF;
  UPDATE broker_meta SET horizon = greatest(horizon, v_cut) WHERE id = 1;
  DELETE FROM broker_event e WHERE e.seq <= v_cut;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END
$fn$;
