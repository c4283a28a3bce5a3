#!/usr/bin/env python3
"""Queries in flight have deadlines (docs/edge.md "The database").

A TCP relay between the edge and PostgreSQL is frozen (it stops handing the
server's bytes to the edge without closing anything): the edge's
connections stay up, every query sent on them hangs.  The old edge waited
for TCP to give up (never, behind a relay that still acknowledges).

- a resume request still checking is answered within the check deadline
  (5 s): SSE 200 + reconnect `unavailable`, NDJSON 503 + Retry-After;
- a gap fill during the freeze fails (studio_gap_fill_errors_total) and is
  retried; once the relay forwards again live delivery resumes, no gap;
- with every connection but the reserved one stuck in resume checks (they
  wait for a lock on broker_meta, which only the check reads), a gap fill
  still runs: the live client has the filled events before any stuck
  check has been answered.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log, wait_until  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()


def path(topic, **q):
    return "/v1/stream?topic=%s" % topic + "".join("&%s=%s" % kv for kv in q.items())


def drive(clients, what, pred, timeout=60):
    if not sc.run_clients(clients, timeout, until=pred):
        raise harness.TestFailure("timed out after %ss waiting for %s (clients: %s)" % (
            timeout, what, ["%s state=%s outcome=%s items=%d last=%s" % (
                c.target, c.state, c.outcome, c.n_items, c.last_id) for c in clients]))


@t.case
def a_check_in_flight_is_answered_at_its_deadline():
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=200)
        w.wait_ready()
        relay = harness.TcpRelay(*harness.dsn_params(env.dsn))
        try:
            edge = env.start_edge([w], pg_dsn=harness.dsn_with(env.dsn, host="127.0.0.1", port=relay.port))
            edge.wait_ready()
            first = harness.publish(w, "dl.a", data={"i": 0})
            harness.publish(w, "dl.a", data={"i": 1})
            relay.pause_down()
            for fmt, status in (("sse", 200), ("ndjson", 503)):
                t0 = time.monotonic()
                c = sc.fetch(sc.edge_port(edge), path("dl.a", format=fmt), headers={"Last-Event-ID": str(first)},
                             timeout=30)
                took = time.monotonic() - t0
                log("FIGURE %s resume check answered after %.2f s with the database frozen (deadline 5 s)"
                    % (fmt, took))
                check(c.outcome != "timeout", "%s resume check with the database frozen: no answer in 30 s" % fmt)
                check_eq(sc.check_refusal(c, fmt, "unavailable", 503), [],
                         "%s resume check past its deadline -> retryable refusal" % fmt)
            relay.resume_down()
            # The edge recovers: the same resume now replays.
            c = sc.fetch(sc.edge_port(edge), path("dl.a", until="head"), headers={"Last-Event-ID": str(first)},
                         timeout=30)
            check_eq(len(c.ids()), 1, "events replayed after the relay forwards again (ids %r)" % c.ids())
        finally:
            relay.close()


def gap_setup(env):
    """Two writers on one database, the edge dials only the second: events
    committed by the first reach the edge as a gap behind the second's."""
    w1 = env.start_writer(flush_interval_ms=100)
    w2 = env.start_writer(flush_interval_ms=100)
    w1.wait_ready()
    w2.wait_ready()
    return w1, w2


@t.case
def b_a_fill_during_a_freeze_fails_and_is_retried():
    with harness.Env() as env:
        w1, w2 = gap_setup(env)
        relay = harness.TcpRelay(*harness.dsn_params(env.dsn))
        try:
            edge = env.start_edge([w2], pg_dsn=harness.dsn_with(env.dsn, host="127.0.0.1", port=relay.port))
            edge.wait_ready()
            port = sc.edge_port(edge)
            live = sc.StreamClient(port, path("dl.b"))
            drive([live], "the live stream's headers", lambda: live.status is not None)
            s0 = harness.publish(w2, "dl.b", data={"i": 0})
            drive([live], "the first live event", lambda: (live.last_id or 0) >= s0)
            errs0 = harness.metric(edge.url, "studio_gap_fill_errors_total") or 0
            relay.pause_down()
            gap = [harness.publish(w1, "dl.b", data={"i": i}) for i in range(1, 4)]
            nxt = harness.publish(w2, "dl.b", data={"i": 4})
            wait_until(lambda: (harness.metric(edge.url, "studio_gap_fill_errors_total") or 0) > errs0, 40,
                       "a gap fill failing while the database is frozen", detail=edge.logs)
            relay.resume_down()
            drive([live], "the live client at %d after the freeze" % nxt, lambda: (live.last_id or 0) >= nxt)
            live.close()
            ids = live.ids()
            errs = harness.metric(edge.url, "studio_gap_fill_errors_total") or 0
            log("FIGURE gap fills failed during the freeze: %d" % (errs - errs0))
            check_eq(ids, [s0] + gap + [nxt], "live ids across the freeze (no gap, no duplicate)")
        finally:
            relay.close()


@t.case
def c_a_fill_runs_while_checks_hold_every_other_connection():
    with harness.Env() as env:
        w1, w2 = gap_setup(env)
        edge = env.start_edge([w2])
        edge.wait_ready()
        port = sc.edge_port(edge)
        live = sc.StreamClient(port, path("dl.c"))
        drive([live], "the live stream's headers", lambda: live.status is not None)
        s0 = harness.publish(w2, "dl.c", data={"i": 0})
        drive([live], "the first live event", lambda: (live.last_id or 0) >= s0)
        # Only the resume check reads broker_meta: a lock on it holds every
        # check (and so every connection a replay may use).
        hold = subprocess.Popen(["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", env.dsn],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            hold.stdin.write("BEGIN; LOCK TABLE broker_meta IN ACCESS EXCLUSIVE MODE; SELECT 'locked';\n")
            hold.stdin.flush()
            check_eq(hold.stdout.readline().strip(), "locked", "the test's lock on broker_meta")
            checks = [sc.StreamClient(port, path("dl.c"), headers={"Last-Event-ID": str(s0)}) for _ in range(4)]
            sc.run_clients(checks, 0.2)
            waiting = lambda: int(harness.psql_one(  # noqa: E731
                env.admin_dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND "
                "application_name = 'edge-gateway' AND wait_event_type = 'Lock'" % env.dbname))
            n = wait_until(lambda: waiting() >= 3 and waiting(), 4, "three resume checks waiting for the lock")
            log("FIGURE edge connections held by checks: %d" % n)
            gap = [harness.publish(w1, "dl.c", data={"i": i}) for i in range(1, 4)]
            nxt = harness.publish(w2, "dl.c", data={"i": 4})
            drive([live] + checks, "the fill while the checks wait",
                  lambda: (live.last_id or 0) >= nxt or any(c.status is not None for c in checks), 20)
            answered = [c.status for c in checks if c.status is not None]
            check_eq(answered, [], "resume checks answered before the fill arrived (the fill waited for them)")
            check_eq(live.ids(), [s0] + gap + [nxt], "live ids with every other connection busy")
        finally:
            hold.stdin.write("COMMIT;\n")
            hold.stdin.close()
            hold.wait(10)
            live.close()


t.main()
