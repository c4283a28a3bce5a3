#!/usr/bin/env python3
"""A writer starting up never stalls the serving ones (issue 10, item 1).

A reader holding a plain transaction that has read broker_flush and
broker_event (what pg_dump does) used to make a second writer's start-up
migration queue an exclusive lock request behind it, and every flush of the
serving writer behind that request, for as long as the reader held on.  Now
a writer on a current schema issues no DDL at all, and one on an older
schema either upgrades with statements that take no table lock or, when
the upgrade alters a table (version 3 to 4 adds a column to broker_event),
refuses at once with no DDL and leaves the upgrade to `broker-writer
migrate` (test_schema_versions.py runs that one under a serving writer).

Real PostgreSQL, real writer processes, nngreq producers; the DDL a process
issues is recorded by an event trigger on ddl_command_start.
"""
import os
import threading
import time

import harness as h
import schema_fixture as sf
from harness import check, check_eq, log

t = h.Tests()
HOLD_S = 10.0      # how long the readers hold on when the new writer does not come up
GAP_BOUND_S = 3.0  # longest gap between the serving writer's replies (flush every 100 ms)


class Producer(threading.Thread):
    """Sends one event at a time to a writer; records when each ok reply came."""

    def __init__(self, w):
        super().__init__(daemon=True)
        self.w = w
        self.replies = []
        self.errors = []
        self.stop = False

    def run(self):
        i = 0
        while not self.stop:
            try:
                rep = h.request(self.w, {"topic": "mig", "data": '{"i":%d}' % i}, timeout_ms=60000)
                if rep.get("ok") is True:
                    self.replies.append(time.monotonic())
                else:
                    self.errors.append(repr(rep))
            except h.TestFailure as e:
                self.errors.append(str(e))
            i += 1

    def longest_gap(self, t0, t1):
        """The longest time without a reply between t0 and t1 (edges included)."""
        times = [t0] + [x for x in self.replies if t0 < x < t1] + [t1]
        return max(b - a for a, b in zip(times, times[1:]))


def serve_while_a_second_writer_starts(env, prepare=None):
    """Writer A serves under a producer; readers hold broker_flush and
    broker_event; writer B starts.  Returns (gap, b_up_while_held, b)."""
    a = env.start_writer(flush_interval_ms=100, retention="1d").wait_ready()
    prod = Producer(a)
    prod.start()
    readers = []
    try:
        h.wait_until(lambda: len(prod.replies) >= 5, 30, "writer A answers the producer")
        if prepare:
            prepare()
        readers = [sf.Reader(env.dsn, "broker_flush"), sf.Reader(env.dsn, "broker_event")]
        t_b = time.monotonic()
        b = env.start_writer(flush_interval_ms=100, retention="1d")
        try:
            b.wait_ready(timeout=HOLD_S)
            up = True
        except h.TestFailure as e:
            if not b.alive():
                raise
            log("writer B is not up after %.0f s with the readers holding on: %s" % (HOLD_S, str(e)[:200]))
            up = False
        if up:
            # B's start-up is over once its first retention round ran (1 s after start):
            # keep the readers until A has answered for 2 s more
            t_up = time.monotonic()
            h.wait_until(lambda: prod.replies and prod.replies[-1] > t_up + 2.0, 30,
                         "writer A answers for 2 s after writer B came up")
        t_rel = time.monotonic()
        for r in readers:
            r.end()
        if not up:
            b.wait_ready(timeout=30)
        n = len(prod.replies)
        h.wait_until(lambda: len(prod.replies) > n, 30, "writer A answers after the readers ended")
    finally:
        prod.stop = True
        for r in readers:
            r.end()
    prod.join(90)
    check(not prod.errors, "every request to writer A is answered ok: %s" % prod.errors[:3])
    gap = prod.longest_gap(t_b, t_rel)
    log("FIGURE writer A's longest reply gap while writer B started under two readers: %.3f s "
        "(%d replies in %.1f s; B up while the readers held on: %s)"
        % (gap, len([x for x in prod.replies if t_b < x < t_rel]), t_rel - t_b, up))
    return gap, up, b


@t.case
def a_starting_writer_never_stalls_the_serving_one():
    with h.Env() as env:
        gap, up, b = serve_while_a_second_writer_starts(env)
        check(up, "writer B comes up while the readers hold their transactions (it must not wait for them)")
        check(gap < GAP_BOUND_S, "writer A's longest reply gap while writer B started: %.3f s (bound %.1f s)"
              % (gap, GAP_BOUND_S))
        rep = h.request(b, {"topic": "mig", "data": '"from b"'})
        check(rep.get("ok") is True, "writer B serves: %r" % rep)


@t.case
def the_daemon_issues_no_ddl_on_a_current_schema():
    with h.Env() as env:
        sf.ddl_probe_install(env.dsn)
        ws = [env.start_writer(flush_interval_ms=100, retention="1d").wait_ready() for _ in range(2)]
        for w in ws:
            h.publish(w, "noddl", {"x": 1})
        # both writers' first retention round (1 s after start) has run as well: a
        # round's last statement is broker_retain4 or, with a --retention, the lag
        # probe that follows it (reads broker_meta's horizon)
        h.wait_until(lambda: h.psql_one(env.dsn, (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'broker-writer' "
            "AND (query LIKE '%broker_retain%' OR query LIKE '%m.horizon%')")) == "2", 30,
            "both writers ran a retention round")
        seen = [(app, tag) for app, tag, _ in sf.ddl_seen(env.dsn)]
        check_eq(seen, [], "DDL statements (application, tag) issued by two writers starting on a current schema")
        check_eq(sf.schema_version(env.dsn), 4, "schema version")


@t.case
def a_daemon_on_an_older_schema_refuses_at_once_under_readers_without_ddl():
    with h.Env(migrate=False) as env:
        with open(os.path.join(sf.HERE, "schema_v3.sql"), encoding="utf-8") as f:
            h.psql(env.dsn, f.read())
        sf.ddl_probe_install(env.dsn)
        # The version-3 writers serve through their function while the new
        # writer starts, as in a rolling upgrade done in the wrong order.
        fl = V2Flusher(env.dsn, function="broker_append3")
        fl.start()
        readers = []
        try:
            h.wait_until(lambda: len(fl.replies) >= 5, 30, "the version-3 flushes run")
            readers = [sf.Reader(env.dsn, "broker_flush"), sf.Reader(env.dsn, "broker_event")]
            t_b = time.monotonic()
            b = env.start_writer(flush_interval_ms=100, retention="1d")
            rc = b.wait_exit(HOLD_S)
            t_exit = time.monotonic()
            h.wait_until(lambda: fl.replies and fl.replies[-1] > t_exit + 1.0, 30,
                         "version-3 flushes for 1 s after the new writer exited")
            t_rel = time.monotonic()
        finally:
            fl.stop = True
            for r in readers:
                r.end()
        fl.join(90)
        gap = fl.longest_gap(t_b, t_rel)
        log("FIGURE the new writer on a version-3 schema under two readers: exit %s after %.2f s; longest gap "
            "of the version-3 flushes %.3f s" % (rc, t_exit - t_b, gap))
        check_eq(rc, 2, "the new writer's exit status on a version-3 schema (it needs `migrate`)")
        check("broker-writer migrate" in b.logs(), "the writer says to run migrate: %s" % b.logs()[-400:])
        check(not fl.errors, "every version-3 flush succeeds: %s" % fl.errors[:3])
        check(gap < GAP_BOUND_S, "longest gap of the version-3 flushes while the new writer started: %.3f s "
              "(bound %.1f s)" % (gap, GAP_BOUND_S))
        check_eq(sf.ddl_seen(env.dsn), [], "DDL statements issued by the refusing writer")
        check_eq(sf.schema_version(env.dsn), 3, "schema version left as it was")


class V2Flusher(threading.Thread):
    """Flushes through broker_append2 (or `function`) from psql, one event at
    a time, as a version-2 (or 3) writer does (same advisory lock key)."""

    def __init__(self, dsn, function="broker_append2"):
        super().__init__(daemon=True)
        self.dsn = dsn
        self.function = function
        self.replies = []
        self.errors = []
        self.stop = False

    def run(self):
        i = 0
        while not self.stop:
            try:
                h.psql(self.dsn, "SET lock_timeout = '5s'; SELECT * FROM %s(7450001, 'v2:%d', "
                       "ARRAY['mig'], ARRAY['{}'], ARRAY['{\"i\":%d}'], NULL)" % (self.function, i, i))
                self.replies.append(time.monotonic())
            except h.TestFailure as e:
                self.errors.append(str(e))
            i += 1

    longest_gap = Producer.longest_gap


t.main()
