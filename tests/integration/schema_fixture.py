"""schema_fixture: what the schema tests share (test_migration_locks.py,
test_schema_versions.py, test_retention_scale.py).

  Reader(dsn, table)     a psql session holding `BEGIN; SELECT count(*) FROM table;`
                         open (what pg_dump does): an AccessShareLock until .end().
  ddl_probe_install(dsn) an event trigger on ddl_command_start that records every
                         DDL statement (even a CREATE ... IF NOT EXISTS that changes
                         nothing) in ddl_seen(app, tag, query); ddl_seen(dsn) reads it.
  load_v2(dsn)           creates schema version 2 exactly as the version-2 writer did.
  schema_version(dsn)
"""
import os
import subprocess

import harness as h

HERE = os.path.dirname(os.path.abspath(__file__))
V2_SQL = os.path.join(HERE, "schema_v2.sql")


class Reader:
    """A transaction that has read `table` and stays open."""

    def __init__(self, dsn, table):
        self.table = table
        self.app = "reader_" + table
        env = dict(os.environ, PGAPPNAME=self.app)
        self.p = subprocess.Popen(["psql", "-X", "-q", dsn], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        self.p.stdin.write("BEGIN; SELECT count(*) FROM %s;\n" % table)
        self.p.stdin.flush()
        h.wait_until(lambda: h.psql_one(dsn, (
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE a.application_name = '%s' AND l.relation = '%s'::regclass AND l.mode = 'AccessShareLock' "
            "AND l.granted AND a.state = 'idle in transaction'") % (self.app, table)) == "1",
            10, "the reader holds its transaction on %s" % table)

    def end(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("COMMIT;\n")
                self.p.stdin.close()
            except OSError:
                pass
            self.p.wait(10)


def ddl_probe_install(dsn):
    h.psql(dsn, """
        CREATE TABLE ddl_seen (at timestamptz NOT NULL DEFAULT clock_timestamp(), app text, tag text, query text);
        CREATE FUNCTION ddl_seen_log() RETURNS event_trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO ddl_seen (app, tag, query)
            VALUES (current_setting('application_name'), tg_tag, left(current_query(), 120));
        END $$;
        CREATE EVENT TRIGGER ddl_seen_start ON ddl_command_start EXECUTE FUNCTION ddl_seen_log();""")
    # The probe must see a DDL statement that changes nothing, or it proves nothing.
    h.psql(dsn, "CREATE INDEX IF NOT EXISTS broker_event_topic_seq ON broker_event (topic, seq)")
    rows = ddl_seen(dsn)
    h.check(len(rows) == 1 and rows[0][1] == "CREATE INDEX",
            "the DDL probe records a no-op CREATE INDEX IF NOT EXISTS (got %r)" % (rows,))
    h.psql(dsn, "DELETE FROM ddl_seen")


def ddl_seen(dsn):
    """[(app, tag, query)] in order."""
    return h.psql(dsn, "SELECT app, tag, query FROM ddl_seen ORDER BY at")


def load_v2(dsn):
    with open(V2_SQL, encoding="utf-8") as f:
        h.psql(dsn, f.read())


def schema_version(dsn):
    return int(h.psql_one(dsn, "SELECT schema_version FROM broker_meta WHERE id = 1"))
