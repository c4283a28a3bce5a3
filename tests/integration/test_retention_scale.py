#!/usr/bin/env python3
# ctest-labels: measure
"""Retention stays cheap on a large table (issue 10, item 2).

broker_event gets N_ROWS rows (INSERT ... SELECT generate_series), of which
only a few, then many, are older than the retention.  Each retention call
may read at most its window of seqs (RETENTION_CHUNK, a range of the
primary key) twice (find the first row to keep, delete the rows before it)
plus a few probes of the primary key's ends, whatever the table's size: the
assertions are that arithmetic, against the rows read counted by PostgreSQL
(seq_tup_read + idx_tup_fetch of broker_event).  The figures print the time
and the rows read per call.

1. The daemon (--retention) on a table where 1,000 rows have expired: the
   rows it reads until they are gone.
2. broker_retain called round by round (the name version 2 called; since
   version 4 a wrapper of broker_retain4, which the writer calls), with
   pg_stat_xact_user_tables read in the same transaction: few expired
   (1,000), then many (148,000).
"""
import subprocess
import time

import harness as h
from harness import check, check_eq, log

t = h.Tests()
N_ROWS = 3_000_000
CHUNK = 5000            # RETENTION_CHUNK (broker-writer/retention.h)
LOCK_KEY = 7450001
PER_CALL_BOUND = 2 * CHUNK + 16  # the window twice, plus probes of the primary key's ends (function, planner)

MEASURED = """
CREATE FUNCTION retain_measured(lk bigint, older interval, chunk int,
    OUT deleted int, OUT rows_read bigint, OUT ms float8) LANGUAGE plpgsql AS $$
DECLARE
  r0 bigint;
  t0 timestamptz;
BEGIN
  SELECT coalesce(sum(seq_tup_read), 0) + coalesce(sum(idx_tup_fetch), 0) INTO r0
    FROM pg_stat_xact_user_tables WHERE relname = 'broker_event';
  t0 := clock_timestamp();
  deleted := broker_retain(lk, older, chunk);
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
  SELECT coalesce(sum(seq_tup_read), 0) + coalesce(sum(idx_tup_fetch), 0) - r0 INTO rows_read
    FROM pg_stat_xact_user_tables WHERE relname = 'broker_event';
END $$;
"""


def table_reads(env):
    r = env.psql("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0), n_tup_del "
                 "FROM pg_stat_user_tables WHERE relname = 'broker_event'")[0]
    return int(r[0]), int(r[1])


def horizon(env):
    return int(env.psql("SELECT horizon FROM broker_meta WHERE id = 1")[0][0])


class Session:
    """One psql session (like the writer's retention connection, whose
    plpgsql plans are cached: after five calls PostgreSQL may switch to a
    generic plan, which must stay bounded too)."""

    def __init__(self, dsn):
        self.p = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-F", ",", "-v", "ON_ERROR_STOP=1", dsn],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)

    def one(self, sql):
        self.p.stdin.write(sql + ";\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        check(line != "" and not line.startswith(("ERROR", "psql")), "psql answered %r to %s" % (line, sql))
        return line.split(",")

    def close(self):
        self.p.stdin.close()
        self.p.wait(10)


def rounds(session, older, what):
    """Calls retention until it deletes nothing; returns [(deleted, rows_read, ms)]."""
    out = []
    while True:
        d, r, ms = session.one("SELECT * FROM retain_measured(%d, interval '%s', %d)" % (LOCK_KEY, older, CHUNK))
        out.append((int(d), int(r), float(ms)))
        if int(d) == 0 or len(out) > 1000:
            break
    total = sum(x[0] for x in out)
    worst = max(x[1] for x in out)
    log("FIGURE retention %s on %d rows: %d calls, %d deleted, rows read per call %s, ms per call %s"
        % (what, N_ROWS, len(out), total, [x[1] for x in out][:8] + (["..."] if len(out) > 8 else []),
           ["%.1f" % x[2] for x in out][:8] + (["..."] if len(out) > 8 else [])))
    log("FIGURE retention %s: worst %d rows read in one call (bound %d), %.1f ms worst, %.1f ms mean"
        % (what, worst, PER_CALL_BOUND, max(x[2] for x in out), sum(x[2] for x in out) / len(out)))
    for i, (d, r, ms) in enumerate(out):
        check(r <= PER_CALL_BOUND, "%s: call %d read %d rows of broker_event (bound 2 x %d + 16, table %d rows)"
              % (what, i + 1, r, CHUNK, N_ROWS))
    return out


@t.case
def retention_reads_are_bounded_by_the_chunk_not_the_table():
    with h.Env() as env:
        t0 = time.monotonic()
        # ages: 1..1000 five days, 1001..2000 four days, 2001..150000 three days, the rest now
        env.psql("INSERT INTO broker_event (seq, topic, created_at) OVERRIDING SYSTEM VALUE "
                 "SELECT g, 'scale', now() - CASE WHEN g <= 1000 THEN interval '5 days' "
                 "WHEN g <= 2000 THEN interval '4 days' WHEN g <= 150000 THEN interval '3 days' "
                 "ELSE interval '0' END FROM generate_series(1, %d) g" % N_ROWS)
        env.psql("SELECT setval(pg_get_serial_sequence('broker_event', 'seq'), %d)" % N_ROWS)
        env.psql("VACUUM ANALYZE broker_event")
        log("FIGURE built broker_event with %d rows in %.1f s" % (N_ROWS, time.monotonic() - t0))

        # 1. the daemon, 1,000 rows expired
        r0, d0 = table_reads(env)
        t1 = time.monotonic()
        w = env.start_writer(flush_interval_ms=200, retention="108h")   # 4.5 days
        w.wait_ready()
        h.wait_until(lambda: horizon(env) == 1000, 60, "the daemon's retention deletes the 1,000 expired rows")
        took = time.monotonic() - t1
        # the reads of a transaction reach pg_stat_user_tables with its deletes
        h.wait_until(lambda: table_reads(env)[1] - d0 >= 1000, 30, "the retention's statistics are reported")
        check_eq(w.stop(), 0, "writer exits 0")
        r1, d1 = table_reads(env)
        log("FIGURE daemon retention, 1,000 of %d rows expired: %d deleted, %d rows of broker_event read "
            "(start to done %.2f s)" % (N_ROWS, d1 - d0, r1 - r0, took))
        check(r1 - r0 <= 4 * PER_CALL_BOUND,
              "the daemon read %d rows of broker_event to delete 1,000 (bound: a few windows of %d, not the "
              "table's %d rows)" % (r1 - r0, CHUNK, N_ROWS))

        # 2. round by round, in the function's own transaction
        env.psql(MEASURED)
        session = Session(env.dsn)
        try:
            few = rounds(session, "84 hours", "few expired (1,000)")
            many = rounds(session, "60 hours", "many expired (148,000)")
        finally:
            session.close()
        check_eq(sum(x[0] for x in few), 1000, "rows deleted when 1,000 have expired")
        check_eq(sum(x[0] for x in many), 148000, "rows deleted when 148,000 have expired")
        check_eq(horizon(env), 150000, "the horizon is the last expired row")
        check_eq(env.psql("SELECT min(seq) FROM broker_event")[0][0], "150001", "the first row kept")


t.main()
