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
import subprocess
import threading

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
        check("upgraded schema version 2 to 3" in out, "migrate says what it did: %s" % out.strip())
        check_eq(sf.schema_version(env.dsn), 3, "version after migrate")
        check_eq(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"), "1", "the data is kept")
        # a version-2 writer still running keeps flushing through its function
        p2 = v2_flush(env.dsn, "old:2", "up")
        check_eq(p2, (p1[1], p1[1] + 1, 1), "broker_append2 after the upgrade continues the seqs")
        check_eq(v2_flush(env.dsn, "old:2", "up"), p2, "a retried version-2 flush_id gets its recorded answer")
        sf.ddl_probe_install(env.dsn)
        rc, out = run_migrate(env.dsn)
        check_eq(rc, 0, "a second migrate exits 0 (%s)" % out.strip())
        check("schema version 3 is current" in out, "the second migrate says the schema is current: %s" % out)
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
        check_eq(sf.schema_version(env.dsn), 3, "version after migrate")
        check_eq(h.psql_one(env.dsn, "SELECT count(*) FROM information_schema.columns WHERE table_name = "
                            "'broker_flush' AND column_name IN ('dup_ords', 'dup_seqs')"), "2",
                 "version 1's broker_flush got its columns")
        env.start_writer(flush_interval_ms=100).wait_ready()


@t.case
def a_newer_schema_runs_while_its_functions_exist():
    with h.Env() as env:
        h.psql(env.dsn, "UPDATE broker_meta SET schema_version = 4")
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        h.publish(w, "newer", {"x": 1})
        check("schema version 4 is newer" in w.logs(), "the writer says it runs on a newer schema")
        check_eq(w.stop(), 0, "writer exits 0")
        check_eq(sf.schema_version(env.dsn), 4, "an older program never lowers the version")
        rc, out = run_migrate(env.dsn)
        check_eq((rc, sf.schema_version(env.dsn)), (0, 4), "migrate on a newer compatible schema (%s)" % out)
        h.psql(env.dsn, "DROP FUNCTION broker_append2(bigint, text, text[], text[], text[], text[]); "
               "DROP FUNCTION broker_append3(bigint, text, text[], text[], text[], text[])")
        refusal(env, "a newer schema without broker_append3", ["schema version 4", "upgrade this program"])
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


t.main()
