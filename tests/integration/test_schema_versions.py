#!/usr/bin/env python3
"""Schema versions, `broker-writer migrate`, the encoding check, and what
version 3 changed in the functions (issue 10, items 1 and 8).

- `migrate` upgrades a version-2 database (as the version-2 writer created
  it) to 3, keeps the data and the version-2 function working, and a second
  `migrate` issues no DDL;
- a version-1 database: the daemon refuses (exit 2, one line: run migrate),
  `migrate` upgrades it, retrying while a reader holds broker_flush;
- a newer schema: the daemon runs on it while the functions it calls exist,
  and refuses (exit 2) when they are gone;
- a LATIN1 database: daemon and migrate refuse with exit 2 and one line;
- created_at is the time the flush got its advisory lock (not its start);
- broker_flush records are kept 24 hours.
Real PostgreSQL, real processes.
"""
import os
import subprocess
import threading
import time

import harness as h
import schema_fixture as sf
from harness import check, check_eq, log

t = h.Tests()
LOCK_KEY = 7450001


def run_migrate(dsn, timeout=120):
    p = subprocess.run([h.program("broker-writer"), "migrate", "--pg-dsn", dsn], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def refusal(env, what, must_contain):
    """The daemon exits 2 with one error line naming what is wrong."""
    w = env.start_writer()
    rc = w.wait_exit(30)
    check_eq(rc, 2, "the daemon's exit status on %s" % what)
    with open(w.stderr_path, encoding="utf-8", errors="replace") as f:
        errs = [ln for ln in f.read().splitlines() if ln.strip()]
    check(len(errs) == 1 and " error " in errs[0], "one error line and nothing else on %s: %r" % (what, errs))
    for word in must_contain:
        check(word in errs[0], "the line names %r: %s" % (word, errs[0]))
    log("refused (%s): %s" % (what, errs[0]))


def v2_flush(dsn, fid, topic):
    row = h.psql(dsn, "SELECT prev, first_seq, n_fresh FROM broker_append2(%d, '%s', ARRAY['%s'], ARRAY['{}'], "
                 "ARRAY['1'], NULL)" % (LOCK_KEY, fid, topic))[0]
    return tuple(int(x) for x in row)


@t.case
def migrate_upgrades_version_2_and_a_second_run_changes_nothing():
    with h.Env(migrate=False) as env:
        sf.load_v2(env.dsn)
        check_eq(sf.schema_version(env.dsn), 2, "the fixture is version 2")
        p1 = v2_flush(env.dsn, "old:1", "up")
        rc, out = run_migrate(env.dsn)
        check_eq(rc, 0, "migrate on version 2 exits 0 (%s)" % out.strip())
        check("upgraded schema version 2 to 4" in out, "migrate says what it did: %s" % out.strip())
        check_eq(sf.schema_version(env.dsn), 4, "version after migrate")
        check_eq(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"), "1", "the data is kept")
        # a version-2 writer still running keeps flushing through its function
        p2 = v2_flush(env.dsn, "old:2", "up")
        check_eq(p2, (p1[1], p1[1] + 1, 1), "broker_append2 after the upgrade continues the seqs")
        check_eq(v2_flush(env.dsn, "old:2", "up"), p2, "a retried version-2 flush_id gets its recorded answer")
        sf.ddl_probe_install(env.dsn)
        rc, out = run_migrate(env.dsn)
        check_eq(rc, 0, "a second migrate exits 0 (%s)" % out.strip())
        check("schema version 4 is current" in out, "the second migrate says the schema is current: %s" % out)
        check_eq(sf.ddl_seen(env.dsn), [], "DDL statements issued by a second migrate")
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        s = h.publish(w, "up", {"new": True})
        check_eq(s, p2[1] + 1, "the new writer continues the seqs")


@t.case
def version_1_needs_migrate_which_waits_for_a_reader_with_bounded_locks():
    with h.Env(migrate=False) as env:
        # version 1's tables: broker_flush without dup_ords / dup_seqs
        with open(sf.V2_SQL, encoding="utf-8") as f:
            v1 = "\n".join(ln for ln in f.read().splitlines() if "ADD COLUMN IF NOT EXISTS dup_" not in ln)
        h.psql(env.dsn, v1)
        h.psql(env.dsn, "UPDATE broker_meta SET schema_version = 1")
        refusal(env, "a version-1 schema", ["schema version 1", "broker-writer migrate"])
        check_eq(sf.schema_version(env.dsn), 1, "the refusing daemon changed nothing")
        reader = sf.Reader(env.dsn, "broker_flush")
        p = subprocess.Popen([h.program("broker-writer"), "migrate", "--pg-dsn", env.dsn], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out = []
        collector = threading.Thread(target=lambda: out.append(p.stdout.read().decode(errors="replace")), daemon=True)
        collector.start()
        try:
            # its ALTER TABLE gives up after lock_timeout and is retried, so a
            # flush behind it never waits longer than that
            h.wait_until(lambda: h.psql_one(env.dsn, (
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted "
                "AND a.application_name = 'broker-writer' AND l.relation = 'broker_flush'::regclass")) == "1",
                30, "migrate waits for its lock on broker_flush")
            h.wait_until(lambda: h.psql_one(env.dsn, (
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted "
                "AND a.application_name = 'broker-writer'")) == "0", 10,
                "migrate stops waiting within its lock_timeout (1 s)")
            check(p.poll() is None, "migrate retries instead of failing")
        finally:
            reader.end()
        rc = p.wait(60)
        collector.join(10)
        text = "".join(out)
        check_eq(rc, 0, "migrate exits 0 once the reader ended (%s)" % text.strip())
        check("lock timeout" in text and "retrying" in text, "migrate said it retried: %s" % text.strip())
        check_eq(sf.schema_version(env.dsn), 4, "version after migrate")
        check_eq(h.psql_one(env.dsn, "SELECT count(*) FROM information_schema.columns WHERE table_name = "
                            "'broker_flush' AND column_name IN ('dup_ords', 'dup_seqs')"), "2",
                 "version 1's broker_flush got its columns")
        env.start_writer(flush_interval_ms=100).wait_ready()


@t.case
def a_newer_schema_runs_while_its_functions_exist():
    with h.Env() as env:
        h.psql(env.dsn, "UPDATE broker_meta SET schema_version = 5")
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        h.publish(w, "newer", {"x": 1})
        check("schema version 5 is newer" in w.logs(), "the writer says it runs on a newer schema")
        check_eq(w.stop(), 0, "writer exits 0")
        check_eq(sf.schema_version(env.dsn), 5, "an older program never lowers the version")
        rc, out = run_migrate(env.dsn)
        check_eq((rc, sf.schema_version(env.dsn)), (0, 5), "migrate on a newer compatible schema (%s)" % out)
        h.psql(env.dsn, "DROP FUNCTION broker_append4(bigint, text, text[], text[], text[], text[])")
        refusal(env, "a newer schema without broker_append4", ["schema version 5", "upgrade this program"])
        rc, out = run_migrate(env.dsn)
        check_eq(rc, 2, "migrate on a newer incompatible schema exits 2 (%s)" % out.strip())


@t.case
def a_database_that_is_not_utf8_is_refused():
    admin = h.os.environ["STUDIO_TEST_PG_DSN"]
    name = "it_latin1_%d" % h.os.getpid()
    h.psql(admin, "CREATE DATABASE %s ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" % name)
    try:
        dsn = h.dsn_with_db(admin, name)
        p = subprocess.run([h.program("broker-writer"), "--pg-dsn", dsn, "--http", "", "--ingest",
                            "tcp://127.0.0.1:%d" % h.free_port(), "--publish", "tcp://127.0.0.1:%d" % h.free_port()],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=30)
        err = p.stderr.decode(errors="replace").strip().splitlines()
        log("daemon: exit %d, %r" % (p.returncode, err))
        check_eq(p.returncode, 2, "the daemon's exit status on a LATIN1 database")
        check(len(err) == 1 and "LATIN1" in err[0] and "UTF8" in err[0],
              "one line naming the encoding: %r" % err)
        rc, out = run_migrate(dsn)
        check_eq(rc, 2, "migrate's exit status on a LATIN1 database (%s)" % out.strip())
        check_eq(h.psql_one(dsn, "SELECT to_regclass('broker_event') IS NULL"), "t", "no table was created")
    finally:
        h.psql(admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)


@t.case
def created_at_is_taken_under_the_flush_lock():
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        holder = subprocess.Popen(["psql", "-X", "-q", env.dsn], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, text=True)
        res = {}
        try:
            holder.stdin.write("SELECT pg_advisory_lock(%d);\n" % LOCK_KEY)
            holder.stdin.flush()
            h.wait_until(lambda: h.psql_one(env.dsn, (
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d AND granted")
                % LOCK_KEY) == "1", 10, "the test holds the flush lock")
            th = threading.Thread(target=lambda: res.update(seq=h.publish(w, "late", {"x": 1})), daemon=True)
            th.start()
            h.wait_until(lambda: h.psql_one(env.dsn, (
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d AND NOT granted")
                % LOCK_KEY) == "1", 10, "the writer's flush waits for the lock")
            released = h.psql_one(env.dsn, "SELECT clock_timestamp()")
            holder.stdin.write("SELECT pg_advisory_unlock(%d);\n" % LOCK_KEY)
            holder.stdin.flush()
            th.join(30)
        finally:
            holder.stdin.close()
            holder.wait(10)
        check("seq" in res, "the event was stored once the lock was free")
        ev, fl = h.psql(env.dsn, (
            "SELECT created_at, (SELECT created_at FROM broker_flush WHERE seqs[1] = %d) FROM broker_event "
            "WHERE seq = %d") % (res["seq"], res["seq"]))[0]
        ok = h.psql(env.dsn, "SELECT '%s'::timestamptz >= '%s', '%s'::timestamptz >= '%s'"
                    % (ev, released, fl, released))[0]
        log("FIGURE created_at %s, broker_flush.created_at %s, lock released after %s" % (ev, fl, released))
        check_eq(ok, ("t", "t"), "created_at (event, flush record) is at or after the lock was released")


@t.case
def flush_records_are_kept_24_hours():
    with h.Env() as env:
        h.psql(env.dsn, "INSERT INTO broker_flush (id, prev, created_at) VALUES "
               "('h2', 0, now() - interval '2 hours'), ('h23', 0, now() - interval '23 hours'), "
               "('h25', 0, now() - interval '25 hours')")
        env.start_writer(flush_interval_ms=100, retention="0").wait_ready()
        h.wait_until(lambda: h.psql_one(env.dsn, "SELECT count(*) FROM broker_flush WHERE id = 'h25'") == "0",
                     30, "retention trims the 25-hour-old flush record")
        left = sorted(r[0] for r in h.psql(env.dsn, "SELECT id FROM broker_flush WHERE id LIKE 'h%'"))
        check_eq(left, ["h2", "h23"], "flush records younger than 24 hours are kept")


def v3_flush(dsn, fid, topic, data):
    """A flush as a version-3 writer sends it (its function, its lock key)."""
    row = h.psql(dsn, "SELECT prev, first_seq, n_fresh FROM broker_append3(%d, '%s', ARRAY['%s'], ARRAY['{}'], "
                 "ARRAY['%s'], NULL)" % (LOCK_KEY, fid, topic, data))[0]
    return tuple(int(x) for x in row)


def languages(dsn, names):
    """{function name: its language} for the functions of these names that exist."""
    rows = h.psql(dsn, "SELECT p.proname, l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                  "WHERE p.proname IN (%s)" % ", ".join("'%s'" % n for n in names))
    return dict(rows)


@t.case
def migrate_keeps_the_language_of_each_function_it_replaces():
    """The older names become wrappers of broker_append4 / broker_retain4 in
    the language they had.  A call that began before the replacement looks
    the function up twice (fmgr picks the language's handler, the handler
    reads the body again): a plpgsql handler given an SQL body fails with
    "syntax error at or near SELECT", which a version-3 writer flushing
    through a migrate once hit in CI.  Version 2 and 3 databases, then the
    wrappers are called."""
    for fixture, names in (("schema_v2.sql", ["broker_append2", "broker_retain"]),
                           ("schema_v3.sql", ["broker_append3", "broker_retain3", "broker_append2", "broker_retain"])):
        with h.Env(migrate=False) as env:
            with open(os.path.join(sf.HERE, fixture), encoding="utf-8") as f:
                h.psql(env.dsn, f.read())
            before = languages(env.dsn, names)
            check_eq(sorted(before), sorted(names), "the functions of %s" % fixture)
            rc, out = run_migrate(env.dsn)
            check_eq(rc, 0, "migrate on %s exits 0 (%s)" % (fixture, out.strip()))
            check_eq(languages(env.dsn, names), before, "the languages after migrating %s (before: %s)"
                     % (fixture, before))
            first = v2_flush(env.dsn, "w2:1", "lang")[1]
            if "broker_append3" in names:
                check_eq(v3_flush(env.dsn, "w3:1", "lang", "{}")[1], first + 1, "broker_append3 continues the seqs")
            for fn in ("broker_retain", "broker_retain3"):
                if fn in names:
                    n = h.psql_one(env.dsn, "SELECT %s(%d, interval '1 day', 100)" % (fn, LOCK_KEY))
                    check_eq(n, "0", "%s after the upgrade (nothing is a day old)" % fn)
    with h.Env(migrate=False) as env:
        env.start_writer().wait_ready()
        check_eq(languages(env.dsn, ["broker_append3", "broker_append2"]),
                 {"broker_append3": "sql", "broker_append2": "sql"}, "wrappers created on a new database")


class V3Flusher(threading.Thread):
    """Flushes through broker_append3 from psql, one event at a time, as a
    version-3 writer does; records when each flush returned."""

    def __init__(self, dsn, keyed=False):
        super().__init__(daemon=True)
        self.dsn, self.replies, self.errors, self.stop = dsn, [], [], False
        self.keyed = keyed  # each flush with a fresh key and a key stored before (probed, not stored)

    def run(self):
        i = 0
        while not self.stop:
            try:
                if self.keyed:
                    h.psql(self.dsn, "SET lock_timeout = '5s'; SELECT * FROM broker_append3(%d, 'v3k:%d', "
                           "ARRAY['mig', 'mig'], ARRAY['{}', '{}'], ARRAY['{\"i\":%d}', '0'], "
                           "ARRAY['v3k-%d', 'v3k-0'])" % (LOCK_KEY, i, i, i + 1))
                else:
                    h.psql(self.dsn, "SET lock_timeout = '5s'; SELECT * FROM broker_append3(%d, 'v3:%d', "
                           "ARRAY['mig'], ARRAY['{}'], ARRAY['{\"i\":%d}'], NULL)" % (LOCK_KEY, i, i))
                self.replies.append(time.monotonic())
            except h.TestFailure as e:
                self.errors.append(str(e))
            i += 1

    def longest_gap(self, t0, t1):
        times = [t0] + [x for x in self.replies if t0 < x < t1] + [t1]
        return max(b - a for a, b in zip(times, times[1:]))


@t.case
def version_3_is_upgraded_by_migrate_while_version_3_writers_flush():
    """Version 4 adds broker_event.data_bytes (an ALTER TABLE: AccessExclusiveLock,
    metadata only) and an index on broker_flush: the daemon refuses a version-3
    schema (exit 2, one line, no DDL), `migrate` upgrades it while a version-3
    writer keeps flushing (its longest gap bounded by one lock_timeout), rows
    stored before keep data_bytes NULL (measured by the edge when replayed),
    and the version-3 function, now a wrapper, records data_bytes."""
    with h.Env(migrate=False) as env:
        with open(os.path.join(sf.HERE, "schema_v3.sql"), encoding="utf-8") as f:
            h.psql(env.dsn, f.read())
        check_eq(sf.schema_version(env.dsn), 3, "the fixture is version 3")
        old = [v3_flush(env.dsn, "old:%d" % i, "up", '{"old":%d}' % i)[1] for i in range(3)]
        sf.ddl_probe_install(env.dsn)
        refusal(env, "a version-3 schema", ["schema version 3", "broker-writer migrate"])
        check_eq(sf.ddl_seen(env.dsn), [], "DDL statements issued by the refusing daemon")
        fl = V3Flusher(env.dsn)
        fl.start()
        try:
            h.wait_until(lambda: len(fl.replies) >= 5, 30, "the version-3 flushes run")
            t0 = time.monotonic()
            rc, out = run_migrate(env.dsn)
            h.wait_until(lambda: fl.replies and fl.replies[-1] > time.monotonic() - 0.5 and
                         len([x for x in fl.replies if x > t0]) >= 5, 30, "version-3 flushes after the upgrade")
            t1 = time.monotonic()
        finally:
            fl.stop = True
        fl.join(60)
        gap = fl.longest_gap(t0, t1)
        log("FIGURE longest gap of version-3 flushes while migrate upgraded 3 to 4: %.3f s (%d flushes in %.1f s)"
            % (gap, len([x for x in fl.replies if t0 < x < t1]), t1 - t0))
        check_eq(rc, 0, "migrate on version 3 exits 0 (%s)" % out.strip())
        check("upgraded schema version 3 to 4" in out, "migrate says what it did: %s" % out.strip())
        check_eq(sf.schema_version(env.dsn), 4, "version after migrate")
        check(not fl.errors, "every version-3 flush succeeds: %s" % fl.errors[:3])
        check(gap < 2.0, "longest gap of the version-3 flushes during the upgrade: %.3f s (bound 2 s: one "
              "lock_timeout of 1 s and a flush)" % gap)
        tags = sorted(set(r[1] for r in sf.ddl_seen(env.dsn)))
        check_eq(tags, ["ALTER TABLE", "CREATE FUNCTION", "CREATE INDEX", "CREATE TABLE", "DROP INDEX"],
                 "the statement kinds of the upgrade")
        rows = h.psql(env.dsn, "SELECT seq, data_bytes, octet_length(data::text) FROM broker_event ORDER BY seq")
        before = [(int(a), b) for a, b, _ in rows if int(a) in old]
        check_eq(before, [(x, None) for x in old], "rows stored before the upgrade: data_bytes NULL")
        late = v3_flush(env.dsn, "late:1", "up", '{"after": "the upgrade"}')[1]
        # the flushes that ran during the upgrade: before it NULL, after it recorded; never wrong
        wrong = [r for r in rows if int(r[0]) > old[-1] and r[1] is not None and r[1] != r[2]]
        check_eq(wrong, [], "rows whose data_bytes differs from their data's length")
        got = h.psql(env.dsn, "SELECT data_bytes, octet_length(data::text) FROM broker_event WHERE seq = %d" % late)
        n = str(len('{"after": "the upgrade"}'))
        check_eq(got, [(n, n)], "data_bytes recorded by the version-3 function (a wrapper now) after the upgrade")
        # An edge replays old rows (measured) and new ones (recorded) alike.
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        new = h.publish(w, "up", {"new": True})
        check_eq(h.psql_one(env.dsn, "SELECT data_bytes FROM broker_event WHERE seq = %d" % new), "12",
                 "data_bytes recorded by the version-4 writer (its data {\"new\": true} is 12 bytes)")
        edge = env.start_edge([w]).wait_ready()
        c = h.SseClient(edge.url + "/v1/stream?topic=up&until=head", headers={"Last-Event-ID": "0"})
        c.wait_items(len(old) + 2, 30)
        c.close()
        ids = [int(x["id"]) for x in c.items()]
        check_eq(ids[:len(old)] + ids[-2:], old + [late, new], "replayed ids over rows from before and after")


@t.case
def migrate_pins_the_session_settings_of_the_flush():
    """A database default (ALTER DATABASE ... SET) does not change what the
    migration does: it runs schema_session_sql first, as every flush
    connection does (a read-only default used to fail migrate)."""
    with h.Env(migrate=False) as env:
        env.psql("ALTER DATABASE %s SET synchronous_commit = off" % env.dbname)
        env.psql("ALTER DATABASE %s SET default_transaction_read_only = on" % env.dbname)
        rc, out = run_migrate(env.dsn)
        check_eq(rc, 0, "migrate on a database whose default is read-only exits 0 (%s)" % out.strip())
        check_eq(sf.schema_version(env.dsn), 4, "version after migrate")


@t.case
def the_flush_record_trim_is_an_index_scan():
    """broker_retain4 trims broker_flush records older than 24 hours by an
    index range scan of broker_flush_created_at, at most `chunk` rows a call,
    not a sequential scan of the whole table: the plans of its nested
    statements, from auto_explain, name the index and no Seq Scan on
    broker_flush."""
    with h.Env() as env:
        env.psql("INSERT INTO broker_flush (id, prev, created_at) SELECT 'x' || i, 0, "
                 "now() - interval '48 hours' + i * interval '1 second' FROM generate_series(1, 100000) i "
                 # none within a minute of the 24-hour line: one crossing it between the count below and
                 # the call would be trimmed but not counted
                 "WHERE i NOT BETWEEN 86400 - 60 AND 86400 + 60")
        env.psql("ANALYZE broker_flush")
        expired = int(env.psql("SELECT count(*) FROM broker_flush WHERE created_at < now() - interval '24 hours'")[0][0])
        p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", env.dsn],
                           input="LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                           "SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; "
                           "SET client_min_messages = notice; SELECT broker_retain4(%d, NULL, 5000);\n" % LOCK_KEY,
                           capture_output=True, text=True, timeout=60)
        check_eq(p.returncode, 0, "psql exit status (%s)" % p.stderr[-500:])
        plans = [b for b in p.stderr.split("NOTICE:") if "broker_flush" in b and "Delete" in b]
        log("FIGURE the trim's plan:\n%s" % (plans[0].strip() if plans else p.stderr[-2000:]))
        check(plans, "auto_explain printed the trim's plan")
        check("broker_flush_created_at" in plans[0], "the trim walks the index broker_flush_created_at")
        check("Seq Scan on broker_flush" not in plans[0], "the trim does not scan broker_flush sequentially")
        left = int(env.psql("SELECT count(*) FROM broker_flush WHERE created_at < now() - interval '24 hours'")[0][0])
        check_eq(left, expired - 5000, "expired records left after one call (of %d: it trims its chunk, 5,000)"
                 % expired)

@t.case
def the_key_probe_is_one_probe_of_the_topic_key_index():
    """broker_append4 finds stored keys per (topic, key) with the unique index
    broker_event_topic_key (issue 24 item 3), one probe a keyed row: not the
    (topic, seq) index, which would walk every row of a busy topic, and not a
    Seq Scan.  The global key index is gone."""
    with h.Env() as env:
        env.psql("INSERT INTO broker_event (topic, key) SELECT 'busy', 'k' || i FROM generate_series(1, 100000) i")
        env.psql("ANALYZE broker_event")
        indexes = sorted(r[0] for r in env.psql("SELECT indexname FROM pg_indexes WHERE tablename = 'broker_event'"))
        check_eq(indexes, ["broker_event_pkey", "broker_event_topic_key", "broker_event_topic_seq"],
                 "broker_event's indexes (no global key index)")
        p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", env.dsn],
                           input="LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                           "SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; "
                           "SET client_min_messages = notice; SELECT * FROM broker_append4(%d, 'probe:1', "
                           "ARRAY['busy', 'other'], ARRAY['{}', '{}'], ARRAY['1', '2'], ARRAY['k77', 'k77']);\n"
                           % LOCK_KEY, capture_output=True, text=True, timeout=60)
        check_eq(p.returncode, 0, "psql exit status (%s)" % p.stderr[-500:])
        plans = [b for b in p.stderr.split("NOTICE:") if "unnest" in b and "Aggregate" in b]
        log("FIGURE the key probe's plan:\n%s" % (plans[0].strip() if plans else p.stderr[-2000:]))
        check(plans, "auto_explain printed the key probe's plan")
        check("broker_event_topic_key" in plans[0], "the probe uses the index broker_event_topic_key")
        check("broker_event_topic_seq" not in plans[0] and "Seq Scan on broker_event" not in plans[0],
              "the probe neither walks a topic nor scans broker_event")
        got = env.psql("SELECT dup_ords, dup_seqs FROM broker_flush WHERE id = 'probe:1'")
        k77 = h.psql_one(env.dsn, "SELECT seq FROM broker_event WHERE topic = 'busy' AND key = 'k77'")
        check_eq(got, [("{1}", "{%s}" % k77)], "k77 is stored on busy (row 1), new on other (row 2)")

def v3_keyed(dsn, fid, topic, key):
    """A keyed one-event flush through broker_append3 (a version-3 writer): (first_seq, n_fresh, dup_seqs)."""
    row = h.psql(dsn, "SELECT first_seq, n_fresh, dup_seqs FROM broker_append3(%d, '%s', ARRAY['%s'], "
                 "ARRAY['{}'], ARRAY['1'], ARRAY['%s'])" % (LOCK_KEY, fid, topic, key))[0]
    return int(row[0]), int(row[1]), row[2]


class Snapshot:
    """A repeatable-read transaction that keeps its snapshot open (a report, a
    pg_dump): CREATE INDEX CONCURRENTLY waits for it to end."""

    def __init__(self, dsn):
        env = dict(os.environ, PGAPPNAME="old_snapshot")
        self.p = subprocess.Popen(["psql", "-X", "-q", dsn], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        self.p.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM broker_meta;\n")
        self.p.stdin.flush()
        h.wait_until(lambda: h.psql_one(dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                        "'old_snapshot' AND state = 'idle in transaction' AND backend_xmin IS "
                                        "NOT NULL") == "1", 10, "the old snapshot is held")

    def end(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("COMMIT;\n")
                self.p.stdin.close()
            except OSError:
                pass
            self.p.wait(10)


@t.case
def version_3_keys_become_per_topic_with_the_index_built_concurrently():
    """Issue 24 item 3 on an existing database: `migrate` builds the unique
    index on (topic, key) with CREATE INDEX CONCURRENTLY, next to version-3
    writers flushing keyed events (their longest gap bounded by one
    lock_timeout); an old snapshot makes the build time out (lock_timeout),
    which leaves an INVALID index: migrate retries, drops it and builds it
    again, as it does with an invalid index found at its start.  Afterwards
    the global key index is gone and a version-3 writer (its function a
    wrapper) stores a key squatted on another topic as a new event."""
    with h.Env(migrate=False) as env:
        with open(os.path.join(sf.HERE, "schema_v3.sql"), encoding="utf-8") as f:
            h.psql(env.dsn, f.read())
        squat = v3_keyed(env.dsn, "squat:1", "junk/x", "pay-777")
        check_eq(squat[1], 1, "the squatter's event is stored on version 3")
        check_eq(v3_keyed(env.dsn, "real:0", "payments/777", "pay-777"), (0, 0, "{%d}" % squat[0]),
                 "version 3's global key: the real event is taken for the squatter's (the defect)")
        # an invalid index of that name, as a failed earlier build leaves it (here: a unique violation)
        h.psql(env.dsn, "INSERT INTO broker_event (topic) VALUES ('dup'), ('dup')")
        try:
            h.psql(env.dsn, "CREATE UNIQUE INDEX CONCURRENTLY broker_event_topic_key ON broker_event (topic)")
        except h.TestFailure:
            pass
        check_eq(h.psql_one(env.dsn, "SELECT indisvalid FROM pg_index WHERE indexrelid = "
                            "'broker_event_topic_key'::regclass"), "f", "the planted index is invalid")
        fl = V3Flusher(env.dsn, keyed=True)
        fl.start()
        snap = None
        lines = []
        p = None
        try:
            h.wait_until(lambda: len(fl.replies) >= 5, 30, "the version-3 keyed flushes run")
            snap = Snapshot(env.dsn)
            t0 = time.monotonic()
            p = subprocess.Popen([h.program("broker-writer"), "migrate", "--pg-dsn", env.dsn], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
            reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
            reader.start()
            h.wait_until(lambda: any("lock timeout" in x and "retrying" in x for x in lines), 60,
                         "migrate's concurrent build times out behind the old snapshot and is retried")
            h.wait_until(lambda: len([x for x in fl.replies if x > t0]) >= 5, 30,
                         "version-3 flushes go on while the build waits")
            snap.end()
            rc = p.wait(120)
            reader.join(10)
            h.wait_until(lambda: fl.replies and fl.replies[-1] > time.monotonic() - 0.5, 30,
                         "version-3 flushes after the upgrade")
            t1 = time.monotonic()
        finally:
            fl.stop = True
            if snap is not None:
                snap.end()
            if p is not None and p.poll() is None:
                p.kill()
        fl.join(60)
        text = "".join(lines)
        log("migrate said:\n%s" % text.strip())
        gap = fl.longest_gap(t0, t1)
        log("FIGURE longest gap of version-3 keyed flushes while migrate built the key index next to an old "
            "snapshot: %.3f s (%d flushes in %.1f s)" % (gap, len([x for x in fl.replies if t0 < x < t1]), t1 - t0))
        check_eq(rc, 0, "migrate exits 0 once the snapshot ended (%s)" % text.strip())
        check("dropping the invalid index broker_event_topic_key" in text, "migrate dropped an invalid index: %s"
              % text.strip())
        check(not fl.errors, "every version-3 flush succeeds: %s" % fl.errors[:3])
        check(gap < 2.0, "longest gap of the version-3 flushes during the upgrade: %.3f s (bound 2 s)" % gap)
        check_eq(sf.schema_version(env.dsn), 4, "version after migrate")
        idx = h.psql(env.dsn, "SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                     "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'broker_event'::regclass "
                     "AND c.relname IN ('broker_event_key', 'broker_event_topic_key') ORDER BY 1")
        check_eq(idx, [("broker_event_topic_key", "t", "CREATE UNIQUE INDEX broker_event_topic_key ON "
                        "public.broker_event USING btree (topic, key) WHERE (key IS NOT NULL)")],
                 "the key indexes after migrate")
        n = int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE key = 'v3k-0'"))
        check_eq(n, 1, "the key every version-3 flush repeated is stored once")
        real = v3_keyed(env.dsn, "real:1", "payments/777", "pay-777")
        check(real[1] == 1 and real[0] > squat[0], "a version-3 writer now stores the real event: %r" % (real,))
        check_eq(v3_keyed(env.dsn, "real:2", "payments/777", "pay-777"), (0, 0, "{%d}" % real[0]),
                 "and a resend on payments/777 gets its seq")


t.main()
