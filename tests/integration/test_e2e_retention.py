#!/usr/bin/env python3
"""Retention in broker-writer (docs/api.md --retention; issue: chunked deletes,
one replica at a time, the newest event kept, the horizon recorded).

Rows are aged by moving their created_at into the past (a test fixture: the
writer itself only ever inserts).  Real PostgreSQL, real writer processes.
"""
import subprocess
import time

import harness
import sse_client as sc
from harness import check, check_eq, log

LOCK_KEY = 7450001          # the writer's default --lock-key
RETAIN_LOCK = LOCK_KEY + 1  # retention takes pg_try_advisory_xact_lock(lock_key + 1)

t = harness.Tests()


def count(env):
    return int(env.psql("SELECT count(*) FROM broker_event")[0][0])


def horizon(env):
    return int(env.psql("SELECT horizon FROM broker_meta WHERE id = 1")[0][0])


def age_all(env, upto=None):
    where = "" if upto is None else " WHERE seq <= %d" % upto
    env.psql("UPDATE broker_event SET created_at = now() - interval '3 hours'" + where)


@t.case
def chunked_deletes_keep_the_newest_and_record_the_horizon():
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=100, retention="0")
        w.wait_ready()
        harness.publish_file(w, [{"topic": "ret", "data": {"i": i}} for i in range(12000)])
        newest = int(env.psql("SELECT max(seq) FROM broker_event")[0][0])
        age_all(env)  # every row is old, the newest too
        # The function itself deletes in chunks: one call removes at most its chunk.
        n1 = int(env.psql("SELECT broker_retain(%d, interval '1 hour', 5000)" % LOCK_KEY)[0][0])
        check_eq(n1, 5000, "one retention call deletes one chunk of 5,000")
        h1 = horizon(env)
        check(h1 >= 5000 and h1 < newest, "the horizon covers the deleted chunk (%d)" % h1)
        w.stop()
        # A writer with retention finishes the job in chunks and keeps the newest.
        w2 = env.start_writer(flush_interval_ms=100, retention="1h")
        w2.wait_ready()
        harness.wait_until(lambda: count(env) == 1, 60, "retention deletes every old row but the newest")
        rows = env.psql("SELECT seq FROM broker_event")
        check_eq(int(rows[0][0]), newest, "the newest event is never deleted")
        check_eq(horizon(env), newest - 1, "horizon = the highest seq that may be gone")
        # The horizon never goes back, and new events are untouched.
        s = harness.publish(w2, "ret", {"fresh": True})
        time.sleep(1.5)
        check(count(env) == 2 and horizon(env) == newest - 1, "fresh events stay, horizon unchanged")
        log("FIGURE retention: 12,000 rows aged, %d deleted in the first chunk, horizon %d, kept seq %d and %d"
            % (n1, newest - 1, newest, s))
        check_eq(w2.stop(), 0, "writer exits 0 on SIGTERM")


@t.case
def one_replica_at_a_time():
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=100, retention="0")
        w.wait_ready()
        harness.publish_file(w, [{"topic": "ret2", "data": {"i": i}} for i in range(3000)])
        newest = int(env.psql("SELECT max(seq) FROM broker_event")[0][0])
        w.stop()
        age_all(env, upto=newest - 1000)
        # Hold the retention lock from another session: no writer may delete meanwhile.
        holder = subprocess.Popen(["psql", "-X", "-q", env.dsn], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        try:
            holder.stdin.write("SELECT pg_advisory_lock(%d);\n" % RETAIN_LOCK)
            holder.stdin.flush()
            harness.wait_until(lambda: int(env.psql(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d AND granted"
                % (RETAIN_LOCK & 0xffffffff))[0][0]) == 1, 10, "the test holds the retention lock")
            ws = [env.start_writer(flush_interval_ms=100, retention="1h") for _ in range(2)]
            for x in ws:
                x.wait_ready()
            time.sleep(3.0)  # retention runs 1 s after start, then every 10 s
            check_eq(count(env), 3000, "no replica deletes while another holds the retention lock")
            holder.stdin.write("SELECT pg_advisory_unlock(%d);\n" % RETAIN_LOCK)
            holder.stdin.flush()
            harness.wait_until(lambda: count(env) == 1000, 30, "one replica deletes once the lock is free")
            check_eq(horizon(env), newest - 1000, "horizon = the newest deleted seq")
            for x in ws:
                check_eq(x.stop(), 0, "writer exits 0")
        finally:
            holder.stdin.close()
            holder.wait(10)


@t.case
def rows_deleted_under_a_slow_replay_give_a_resync():
    # ADR-WEB-ADV-001: never a silent jump.  A replay paced by a slow reader
    # whose next rows retention deletes meanwhile must say cursor_expired.
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=100, retention="0")
        w.wait_ready()
        # The rows deleted must lie beyond what the edge may already have read: its
        # lookahead is the server's socket send buffer (loopback autotunes it to 4 MB),
        # the output watermark and two replay chunks (2 x 512 KiB), about 6 MB; rows of
        # 8 KB put the cut (row 2,000) 16 MB in.  With 2 KB rows the read-ahead chunk
        # made the edge read past the cut before the delete: no resync, and rightly.
        pad = "x" * 8000
        seqs = sc.publish_many(w, [{"topic": "ret3", "data": {"i": i, "p": pad}} for i in range(3000)], batch=500)
        edge = env.start_edge([w], replay_cap=100000, flush_interval_ms=100)
        edge.wait_ready()
        c = sc.StreamClient(sc.edge_port(edge), "/v1/stream?topic=ret3&format=ndjson", rcvbuf=8192,
                            read_rate=100000, headers={"Last-Event-ID": str(seqs[0] - 1)})
        sc.run_until_open([c], also=lambda: len(c.items()) > 0)
        check(c.status == 200 and 0 < len(c.items()) < 1500, "the replay is under way (%d items)"
              % len(c.items()))
        # What retention does, in one transaction: record the horizon, delete up to it.
        cut = seqs[2000]
        env.psql("BEGIN; UPDATE broker_meta SET horizon = %d WHERE id = 1; "
                 "DELETE FROM broker_event WHERE seq <= %d; COMMIT" % (cut, cut))
        c.read_rate = None
        sc.run_clients([c], 20.0, until=lambda: bool(c.of_type("resync")))
        sc.run_clients([c], 1.0)  # whatever follows the resync
        resyncs = c.of_type("resync")
        log("FIGURE slow replay: %d items, then %s" % (len(c.items()), [r["env"] for r in resyncs]))
        check_eq([r["env"].get("reason") for r in resyncs], ["cursor_expired"], "one resync cursor_expired")
        ids = c.ids(("item", "resync"))
        check(all(a < b for a, b in zip(ids, ids[1:])), "ids strictly increase")
        rid = int(resyncs[0]["env"]["id"])
        check(rid >= cut, "the resync id (%d) is at or past every deleted seq (%d)" % (rid, cut))
        after = [int(f["env"]["id"]) for f in c.items() if int(f["env"]["id"]) > rid]
        check(all(i > cut for i in after), "no deleted row follows the resync")
        c.close()


t.main()
