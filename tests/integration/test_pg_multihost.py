"""The database connection under real conditions: every address of a
multi-host DSN is tried, each with its own deadline, and a session that
turns read-only (a failover) is replaced (docs/architecture.md, "The
database connection").

- first_host_refuses: `host=127.0.0.1,127.0.0.1 port=CLOSED,OPEN`.  libpq
  closes the refused socket and opens the next one, often on the same fd
  number, inside PQconnectPoll; the kernel forgets the epoll registration
  on close, so a connection module that watches "the same fd" again waits
  for ever.  Both daemons must become ready and carry events.
- first_host_silent: the first address accepts TCP and never answers (a
  dead HA node); its attempt must end at connect_timeout and the next
  address be tried, well before the whole round's back-off.
- first_host_standby: the first address is a hot standby of the second (a
  host list that still leads to the old primary after a failover): the
  writer, whose sessions write, passes over it (migration included) and
  commits on the primary; the edge, which only reads, may use either.
- failover_to_read_only_reconnects: the writer's session becomes read-only
  (SQLSTATE 25006 on the flush); the writer must drop that session and
  reconnect (to a read-write one), not retry on the same session for the
  12 h give-up time.  Every accepted event is stored exactly once.
"""
import os
import time

import harness as h
from harness import check, check_eq

t = h.Tests()

READY_S = 60  # generous: a busy CI machine, and one silent address of connect_timeout


def closed_port():
    """A 127.0.0.1 port where nothing listens (a connect is refused at once)."""
    return h.free_port()


def status(url):
    try:
        return h.http_get(url, timeout=5)[0]
    except Exception as e:  # refused while starting: a fact to print, not a crash
        return repr(e)


def wait_ready_both(w, e, since):
    h.wait_until(lambda: status(w.http_url + "/readyz") == 200, READY_S, "writer /readyz 200",
                 interval=0.1, detail=lambda: "writer /readyz: %s\n%s" % (status(w.http_url + "/readyz"), w.logs()))
    h.wait_until(lambda: status(e.url + "/readyz") == 200, READY_S, "edge /readyz 200",
                 interval=0.1, detail=lambda: "edge /readyz: %s\n%s" % (status(e.url + "/readyz"), e.logs()))
    took = time.monotonic() - since
    h.log("FIGURE both daemons ready %.1f s after start" % took)
    return took


def carries_events(env, w, e):
    """An event published now is committed, and the edge replays it from its
    own connections (a resume from just before it)."""
    seq = h.publish(w, "mh", {"n": 1})
    check_eq(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE seq = %d" % seq), "1",
             "rows stored for the published seq %d" % seq)
    st, _, body = h.http_get(e.url + "/v1/stream?topic=mh&format=ndjson&until=head", timeout=60,
                             headers={"Last-Event-ID": str(seq - 1)})
    check(st == 200 and ('"id":"%d"' % seq).encode() in body and b'"complete"' in body,
          "the edge replays seq %d after Last-Event-ID %d: status %s, body %r" % (seq, seq - 1, st, body[:400]))
    return seq


@t.case
def first_host_refuses():
    with h.Env() as env:
        port = h.dsn_params(env.dsn)[1]
        dsn = h.dsn_with(env.dsn, host="127.0.0.1,127.0.0.1", port="%d,%d" % (closed_port(), port))
        t0 = time.monotonic()
        w = env.start_writer(pg_dsn=dsn).wait_ready()
        e = env.start_edge([w], pg_dsn=dsn)
        wait_ready_both(w, e, t0)
        carries_events(env, w, e)


@t.case
def first_host_silent():
    silent = h.SilentListener()
    try:
        with h.Env() as env:
            port = h.dsn_params(env.dsn)[1]
            dsn = h.dsn_with(env.dsn, host="127.0.0.1,127.0.0.1", port="%d,%d" % (silent.port, port),
                             connect_timeout="2")
            t0 = time.monotonic()
            w = env.start_writer(pg_dsn=dsn).wait_ready(timeout=READY_S)
            e = env.start_edge([w], pg_dsn=dsn)
            took = wait_ready_both(w, e, t0)
            check(silent.accepted >= 2, "the silent first address was tried by both daemons (accepted %d)"
                  % silent.accepted)
            carries_events(env, w, e)
            h.log("FIGURE silent first address: %d connections held, ready after %.1f s" % (silent.accepted, took))
    finally:
        silent.close()


@t.case
def first_host_standby():
    primary = h.PgServer("primary").start()
    standby = None
    try:
        h.psql(primary.dsn, "CREATE DATABASE app")
        standby = h.PgServer("standby", standby_of=primary).start()
        h.wait_until(lambda: h.psql_one(standby.dsn, "SELECT pg_is_in_recovery()") == "t", 60,
                     "the standby in recovery", detail=standby.logs)
        dsn = "host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=app" % (standby.port, primary.port)
        env = h.Env(migrate=False, admin_dsn=primary.dsn)
        with env:
            t0 = time.monotonic()
            w = env.start_writer(pg_dsn=dsn).wait_ready(timeout=READY_S)
            e = env.start_edge([w], pg_dsn=dsn)
            wait_ready_both(w, e, t0)
            seq = h.publish(w, "mh", {"n": 1})
            h.wait_until(lambda: h.psql_one(h.dsn_with_db(standby.dsn, "app"), "SELECT count(*) FROM broker_event WHERE seq = %d"
                                            % seq) == "1", 60, "the event replicated to the standby")
            log = open(w.stderr_path, errors="replace").read()
            check("standby" in log, "the writer says it passed over the standby (log tail: %r)" % log[-800:])
            check_eq(w.stop(), 0, "writer exit status")
            check_eq(e.stop(), 0, "edge exit status")
    finally:
        if standby is not None:
            standby.close()
        primary.close()


@t.case
def failover_to_read_only_reconnects():
    """The writer's flush session turns read-only, as a primary demoted under
    it would: a trigger raises SQLSTATE 25006 (read_only_sql_transaction)
    for that backend only, while a new session is writable (the promoted
    primary).  Only a writer that replaces its session commits again; one
    that retries on the same session never does (its give-up is 12 h)."""
    admin = os.environ["STUDIO_TEST_PG_DSN"]
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        h.wait_until(lambda: status(w.http_url + "/readyz") == 200, READY_S, "writer /readyz 200",
                     detail=w.logs)
        before = h.publish(w, "ro", {"n": 0})
        # the writer's two sessions (flush, retention) are demoted together
        pids = [r[0] for r in h.psql(admin, "SELECT pid FROM pg_stat_activity WHERE datname = '%s' "
                                            "AND application_name = 'broker-writer'" % env.dbname)]
        check(len(pids) >= 1, "the writer's sessions in pg_stat_activity: %r" % pids)
        env.psql("CREATE TABLE demoted (pid int PRIMARY KEY);"
                 "INSERT INTO demoted SELECT unnest(ARRAY[%s]::int[]);"
                 "CREATE FUNCTION demoted_check() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "IF EXISTS (SELECT 1 FROM demoted WHERE pid = pg_backend_pid()) THEN "
                 "RAISE EXCEPTION 'cannot execute INSERT in a read-only transaction' USING ERRCODE = '25006'; "
                 "END IF; RETURN NULL; END $$;"
                 "CREATE TRIGGER demoted_check BEFORE INSERT ON broker_event "
                 "FOR EACH STATEMENT EXECUTE FUNCTION demoted_check()" % ",".join(pids))
        t0 = time.monotonic()
        seqs = [h.publish(w, "ro", {"n": i}) for i in range(1, 4)]
        h.log("FIGURE 3 events committed %.1f s after the session was demoted" % (time.monotonic() - t0))
        rows = h.psql(env.dsn, "SELECT seq FROM broker_event WHERE topic = 'ro' ORDER BY seq")
        got = [int(r[0]) for r in rows]
        check_eq(got, [before] + seqs, "stored seqs of topic ro (each accepted event once)")
        now = [r[0] for r in h.psql(admin, "SELECT pid FROM pg_stat_activity WHERE datname = '%s' "
                                           "AND application_name = 'broker-writer'" % env.dbname)]
        # the flush session wrote and was replaced; retention wrote nothing meanwhile and may keep its own
        check(set(pids) - set(now), "a demoted session was replaced (before %r, now %r)" % (pids, now))
        log = open(w.stderr_path, errors="replace").read()
        check("read-only" in log, "the writer says why it replaced its session (log tail: %r)" % log[-800:])


if __name__ == "__main__":
    t.main()
