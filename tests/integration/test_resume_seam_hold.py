"""The resume seam under load: live frames the edge receives while a resumed
stream is still checking (its database head d not known yet) must not cost
the client a resync (docs/architecture.md "Resume", docs/edge.md "Resume and
the seam").

This was the cause of the flaky 50,000-event replay of test_resume_replay.py
(ASan, --threads 2, a loaded machine): an edge still fanning out the burst
when the client resumed filled the stream's hold buffer with frames the
replay sends anyway; the hold overflowed and dropped the live frames above d
with them, and the client got `resync overflow` though it read at full speed.

Both cases make the timing deterministic with real parts only:
- a psql session holding ACCESS EXCLUSIVE on broker_meta keeps the resume
  check waiting (the check reads broker_meta; the writers' flushes do not);
- a TCP relay between the edge and PostgreSQL holds back the server's
  answer to the check after the server has run it (its snapshot is taken).
The third case is the second with a --replay-cap the dropped frames pass:
the answer is resync replay_cap, never a replay past the cap.
Deliveries to the hub are observed through a live client on the same edge
(--threads 1: one hub, which delivers a batch to every subscriber in one
callback), so nothing here waits for a fixed time.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()


def evs(topic, n, pad, start=0):
    return [{"topic": topic, "about": ["a"], "data": '{"i":%d,"p":"%s"}' % (start + i, "x" * pad)}
            for i in range(n)]


def path(topic):
    return "/v1/stream?topic=%s" % topic


def drive(clients, what, pred, timeout=60):
    if not sc.run_clients(clients, timeout, until=pred):
        raise harness.TestFailure("timed out after %ss waiting for %s (clients: %s)" % (
            timeout, what, ["%s outcome=%s items=%d last=%s error=%s" % (
                c.target, c.outcome, c.n_items, c.last_id, c.error) for c in clients]))


def check_stream(c, dsn, topic, after, last):
    rows = sc.table_rows(dsn, [topic], after=after, upto=last)
    got = c.ids()
    resyncs = [f["env"] for f in c.of_type("resync")]
    log("FIGURE %s: %d items for %d rows after %d, resyncs %s" % (topic, len(got), len(rows), after, resyncs))
    check_eq(sc.check_envelopes(c), [], "stream well formed")
    check_eq(resyncs, [], "no resync (the client read everything it was sent)")
    want = [r[0] for r in rows]
    check(got == want, "every event once, in order: %d items, %d rows, first difference at index %s "
          "(got %s, want %s)" % (len(got), len(want),
                                 next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None),
                                 got[:3] + ["..."] + got[-3:], want[:3] + ["..."] + want[-3:]))
    check_eq(sc.item_errors(c.frames, rows), [], "items equal the rows")


def replay_metric(edge, name, **labels):
    return sc.metric(sc.get_metrics(sc.edge_port(edge)), name, **labels) or 0


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()

    @t.case
    def frames_the_replay_covers_do_not_overflow_the_hold():
        edge = env.start_edge([writer], replay_cap=100000, threads=1).wait_ready()
        port = sc.edge_port(edge)
        # A replay far larger than every buffer between edge and client, so
        # the stalled client keeps the stream replaying until it reads.
        backlog = sc.publish_many(writer, evs("s.a", 3000, 4000), batch=500)
        L = backlog[0] - 1
        wmem_max = int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
        replay_bytes = 3000 * 4000
        check(replay_bytes > 2 * (wmem_max + 65536),
              "precondition: the replay (%d bytes) cannot sit in the socket buffers (%d)" % (replay_bytes, wmem_max))
        live = sc.StreamClient(port, path("s.a"))
        drive([live], "the live stream's headers", lambda: live.status is not None)
        lock = harness.PsqlSession(env.dsn)
        try:
            lock.execute("BEGIN; LOCK TABLE broker_meta IN ACCESS EXCLUSIVE MODE;")
            c = sc.StreamClient(port, path("s.a"), headers={"Last-Event-ID": str(L)}, stall=True, rcvbuf=4096)
            drive([c], "the resumed request sent", lambda: c.state in ("headers", "done"))
            harness.wait_until(lambda: int(harness.psql_one(
                env.admin_dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND "
                "wait_event_type = 'Lock' AND query LIKE '%%count(*)%%'" % env.dbname)) >= 1,
                30, "the resume check waiting on the lock")
            # 300 events of about 2.7 KB each (819 KB of the 1 MiB hold) reach
            # the hub while the stream checks: all at or below its d.
            held = sc.publish_batch(writer, evs("s.a", 300, 2500, start=10**6))
            drive([live], "the live client at %d" % held[-1], lambda: (live.last_id or 0) >= held[-1])
            lock.execute("COMMIT;")
        finally:
            lock.close()
        harness.wait_until(lambda: replay_metric(edge, "studio_replay_total", result="ok") >= 1, 30,
                           "the resume check answered (replay started)")
        # 200 more (546 KB) after d, while the stalled stream still replays.
        more = sc.publish_batch(writer, evs("s.a", 200, 2500, start=2 * 10**6))
        drive([live], "the live client at %d" % more[-1], lambda: (live.last_id or 0) >= more[-1])
        check(not c.done and c.bytes_in == 0, "the resumed client has read nothing yet")
        c.unstall()
        drive([c, live], "the resumed client at %d" % more[-1], lambda: (c.last_id or 0) >= more[-1])
        c.close()
        live.close()
        dropped = replay_metric(edge, "studio_sse_dropped_total", reason="replay")
        log("FIGURE held frames dropped (studio_sse_dropped_total{reason=replay}): %d" % dropped)
        check_stream(c, env.dsn, "s.a", L, more[-1])
        check_eq(dropped, 0, "no held frame dropped")
        check_eq(edge.stop(), 0, "edge exit status")

    @t.case
    def frames_dropped_while_checking_are_replayed():
        relay = harness.TcpRelay(*harness.dsn_params(env.dsn))
        t0 = harness.psql_one(env.admin_dsn, "SELECT now()")
        try:
            edge = env.start_edge([writer], replay_cap=100000, threads=1,
                                  pg_dsn=harness.dsn_with(env.dsn, host="127.0.0.1", port=relay.port)).wait_ready()
            port = sc.edge_port(edge)
            first = sc.publish_batch(writer, evs("s.b", 100, 10))
            L = first[0] - 1
            live = sc.StreamClient(port, path("s.b"))
            drive([live], "the live stream's headers", lambda: live.status is not None)
            relay.pause_down()
            c = sc.StreamClient(port, path("s.b"), headers={"Last-Event-ID": str(L)})
            drive([c], "the resumed request sent", lambda: c.state in ("headers", "done"))
            # The server ran the check (its snapshot, d, is taken); the edge has
            # not seen the answer.
            harness.wait_until(lambda: int(harness.psql_one(
                env.admin_dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND "
                "state = 'idle' AND query LIKE '%%count(*)%%' AND backend_start >= '%s'"
                % (env.dbname, t0))) >= 1,
                30, "the resume check answered by the server")
            # 1,200 events after d reach the hub while the stream still checks:
            # the 1,001st overflows the 1,000-frame hold.
            after = sc.publish_batch(writer, evs("s.b", 1200, 10, start=10**6))
            drive([live], "the live client at %d" % after[-1], lambda: (live.last_id or 0) >= after[-1])
            relay.resume_down()
            drive([c, live], "the resumed client at %d" % after[-1], lambda: (c.last_id or 0) >= after[-1])
            c.close()
            live.close()
            dropped = replay_metric(edge, "studio_sse_dropped_total", reason="replay")
            log("FIGURE held frames dropped while checking: %d (replayed from PostgreSQL instead)" % dropped)
            check_stream(c, env.dsn, "s.b", L, after[-1])
        finally:
            relay.close()

    @t.case
    def a_hold_overflow_while_checking_never_replays_past_the_cap():
        # The case above with --replay-cap 500: the check counts 100 events
        # (within the cap), then 1,200 more reach the hold while the answer
        # is held back and overflow it.  Replaying what the hold dropped
        # would send some 1,100 events: more than the cap.  ADR-0197 and
        # docs/edge.md: more than --replay-cap events to replay gives one
        # resync replay_cap instead, then the live events after its id.
        cap = 500
        relay = harness.TcpRelay(*harness.dsn_params(env.dsn))
        t0 = harness.psql_one(env.admin_dsn, "SELECT now()")
        try:
            edge = env.start_edge([writer], replay_cap=cap, threads=1,
                                  pg_dsn=harness.dsn_with(env.dsn, host="127.0.0.1", port=relay.port)).wait_ready()
            port = sc.edge_port(edge)
            first = sc.publish_batch(writer, evs("s.c", 100, 10))
            L = first[0] - 1
            live = sc.StreamClient(port, path("s.c"))
            drive([live], "the live stream's headers", lambda: live.status is not None)
            relay.pause_down()
            c = sc.StreamClient(port, path("s.c"), headers={"Last-Event-ID": str(L)})
            drive([c], "the resumed request sent", lambda: c.state in ("headers", "done"))
            harness.wait_until(lambda: int(harness.psql_one(
                env.admin_dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND "
                "state = 'idle' AND query LIKE '%%count(*)%%' AND backend_start >= '%s'"
                % (env.dbname, t0))) >= 1,
                30, "the resume check answered by the server")
            after = sc.publish_batch(writer, evs("s.c", 1200, 10, start=10**6))
            drive([live], "the live client at %d" % after[-1], lambda: (live.last_id or 0) >= after[-1])
            relay.resume_down()
            drive([c, live], "the resumed client at %d" % after[-1], lambda: (c.last_id or 0) >= after[-1])
            c.close()
            live.close()
            resyncs = [f["env"] for f in c.of_type("resync")]
            ids = c.ids()
            cut = int(resyncs[0]["id"]) if resyncs else None
            replayed = [i for i in ids if cut is None or i <= cut]
            dropped = replay_metric(edge, "studio_sse_dropped_total", reason="replay")
            capped = replay_metric(edge, "studio_replay_total", result="replay_cap")
            log("FIGURE hold overflow while checking, --replay-cap %d: %d counted by the check, %d held frames "
                "dropped, items %d (%d replayed before/at the cut), resyncs %s, replay_cap results %d"
                % (cap, len(first), dropped, len(ids), len(replayed), resyncs, capped))
            check(dropped > 0, "precondition: the hold overflowed while checking (dropped %d)" % dropped)
            check(len(replayed) <= cap, "the resume sent %d events at or below its cut (no resync: every event "
                  "counts), more than --replay-cap %d" % (len(replayed), cap))
            check_eq([(r["reason"]) for r in resyncs], ["replay_cap"], "one resync, reason replay_cap")
            check_eq(sc.check_envelopes(c), [], "stream well formed")
            rows = sc.table_rows(env.dsn, ["s.c"], after=cut, upto=after[-1])
            check_eq(ids, [r[0] for r in rows], "after the resync, every event above its id once, in order")
            check_eq(capped, 1, "studio_replay_total{result=replay_cap}")
        finally:
            relay.close()

    t.main()
