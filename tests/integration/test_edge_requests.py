"""Request-level limits and forms of the edge-gateway (issue 11):

- until=N with a replay cap: the resume check counts only the events up to
  N, so a client whose until covers fewer events than --replay-cap gets
  them and `complete`, never a needless `resync replay_cap`;
- absolute-form request targets (RFC 9112 3.2.2) are served like their
  path and query, from curl and from a raw socket; '*' only for OPTIONS;
- --max-streams with --threads 2 is one bound for the whole edge: N + 1
  concurrent streams get exactly one refusal (SSE: 200 + reconnect
  overloaded, NDJSON: 429), and the HTTP connection limit (max-streams +
  1024) is shared by the loops, not per loop.

Real broker-writer, edge-gateway and PostgreSQL (harness.Env).
"""

import os
import resource
import select
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()


def evs(topic, n):
    return [{"topic": topic, "about": ["r"], "data": {"n": i}} for i in range(n)]


def non_meta(frames):
    return [f for f in frames if f["type"] not in ("heartbeat", "comment")]


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()
    edge = env.start_edge([writer], replay_cap=5, heartbeat_s=1, drain_grace_s=1)
    edge.wait_ready()
    port = sc.edge_port(edge)

    TOPIC = "req.u"
    last = sc.publish_batch(writer, evs(TOPIC, 1))[-1]
    after = sc.publish_batch(writer, evs(TOPIC, 20))
    harness.wait_until(lambda: sc.db_head(env.dsn) >= after[-1], 10, "rows committed")
    harness.wait_until(lambda: (sc.metric(sc.get_metrics(port), "studio_history_head") or 0) >= after[-1],
                       10, "the edge's history reached the rows")

    @t.case
    def until_number_within_cap_completes():
        """replay-cap 5, 20 events after L, until covering 3 of them: 3 items and
        complete (the old check counted all 20 and answered resync replay_cap)."""
        until = after[2]
        rows = sc.table_rows(env.dsn, [TOPIC], after=last, upto=until)
        check_eq(len(rows), 3, "rows in (L, until]")
        for fmt in ("sse", "ndjson"):
            c = sc.fetch(port, "/v1/stream?topic=%s&format=%s&until=%d" % (TOPIC, fmt, until), timeout=15,
                         headers={"Last-Event-ID": str(last)})
            check_eq(c.status, 200, "%s status" % fmt)
            got = [(f["type"], f["env"].get("id"), f["env"].get("reason")) for f in non_meta(c.frames)]
            check_eq(got, [("item", str(r[0]), None) for r in rows] + [("complete", None, None)],
                     "%s: the 3 events up to until, then complete (no resync)" % fmt)
            check_eq(sc.item_errors(c.frames, rows), [], "%s items equal the table" % fmt)

    @t.case
    def until_number_beyond_cap_still_resyncs():
        """The cap still applies to what until covers: 6 events > cap 5."""
        until = after[5]
        c = sc.fetch(port, "/v1/stream?topic=%s&until=%d" % (TOPIC, until), timeout=15,
                     headers={"Last-Event-ID": str(last)})
        first = non_meta(c.frames)[0]
        check_eq((first["type"], first["env"].get("reason")), ("resync", "replay_cap"),
                 "6 events up to until with cap 5: resync replay_cap first")

    @t.case
    def absolute_form_curl():
        """curl --request-target with an absolute URI: served like the path."""
        target = "http://127.0.0.1:%d/v1/stream?topic=%s&until=%d" % (port, TOPIC, after[2])
        p = subprocess.run(["curl", "-sN", "--max-time", "10", "-H", "Last-Event-ID: %d" % last,
                            "--request-target", target, "http://127.0.0.1:%d/" % port],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        check_eq(p.returncode, 0, "curl exit status (stderr %r)" % p.stderr[-300:])
        fr, errs = sc.parse_bytes("sse", p.stdout, 1)
        check_eq(errs, [], "curl output parses (got %r)" % p.stdout[:300])
        check_eq([(f["type"], f["env"].get("id")) for f in non_meta(fr)],
                 [("item", str(s)) for s in after[:3]] + [("complete", None)],
                 "absolute-form: 3 items then complete")

    @t.case
    def absolute_form_raw_and_other_forms():
        """A raw absolute-form request with another Host header; '*' only for
        OPTIONS; authority-form (CONNECT) is not served."""
        raw = ("GET HTTP://127.0.0.1:%d/v1/stream?topic=%s&format=ndjson&until=%d HTTP/1.1\r\n"
               "Host: elsewhere.example\r\nLast-Event-ID: %d\r\n\r\n" % (port, TOPIC, after[0], last)).encode()
        c = sc.StreamClient(port, None, raw_request=raw)
        sc.run_clients([c], 10)
        check_eq(c.status, 200, "raw absolute-form status")
        check_eq([(f["type"], f["env"].get("id")) for f in non_meta(c.frames)],
                 [("item", str(after[0])), ("complete", None)], "raw absolute-form frames")
        c = sc.StreamClient(port, None, raw_request=b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        sc.run_clients([c], 10)
        check_eq(c.status, 204, "OPTIONS * status")
        check_eq(c.header("allow"), "GET, HEAD, OPTIONS", "OPTIONS * Allow")
        for req, want in ((b"GET * HTTP/1.1\r\n\r\n", 400), (b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n", 405),
                          (b"GET 127.0.0.1:443 HTTP/1.1\r\n\r\n", 400)):
            c = sc.StreamClient(port, None, raw_request=req)
            sc.run_clients([c], 10)
            check_eq(c.status, want, "status of %r" % req)
            check_eq(sc.check_problem(c, want), [], "problem of %r" % req)

    edge2 = None

    def threaded_edge():
        global edge2
        if edge2 is None:
            edge2 = env.start_edge([writer], threads=2, max_streams=3, heartbeat_s=1, drain_grace_s=1)
            edge2.wait_ready()
        return edge2

    @t.case
    def max_streams_one_bound_across_threads():
        """--threads 2 --max-streams 3: 4 concurrent streams, exactly one refusal;
        then an NDJSON stream beyond the bound gets 429."""
        p2 = sc.edge_port(threaded_edge())
        for rnd in range(5):
            cs = [sc.StreamClient(p2, "/v1/stream?topic=req.live%d" % i, name="c%d" % i) for i in range(4)]
            sc.run_clients(cs, 10, until=lambda: sum(1 for c in cs if c.done) >= 1 and
                           sum(1 for c in cs if c.status == 200) == 4)
            refused = [c for c in cs if c.done]
            check_eq(len(refused), 1, "round %d: streams refused of 4 with max 3 (statuses %r, outcomes %r)"
                     % (rnd, [c.status for c in cs], [c.outcome for c in cs]))
            check_eq(sc.check_refusal(refused[0], "sse", "overloaded", 429), [], "round %d: the refusal" % rnd)
            check_eq(int(sc.metric(sc.get_metrics(p2), "studio_streams_open") or 0), 3,
                     "round %d: streams open" % rnd)
            nd = sc.fetch(p2, "/v1/stream?topic=req.x&format=ndjson", timeout=10)
            check_eq(sc.check_refusal(nd, "ndjson", "overloaded", 429), [], "round %d: NDJSON 429" % rnd)
            for c in cs:
                c.close()
            harness.wait_until(lambda: int(sc.metric(sc.get_metrics(p2), "studio_streams_open") or 0) == 0,
                               10, "round %d: streams closed" % rnd)

    @t.case
    def connection_limit_shared_by_loops():
        """The HTTP connection bound (max-streams + 1024 = 1027) is the edge's:
        1100 idle connections to a 2-loop edge, exactly 73 closed at once (each
        loop allowed 1027 before: none closed)."""
        p2 = sc.edge_port(threaded_edge())
        total, limit = 1100, 3 + 1024
        socks = []

        def conns_open():
            # Connection: close, read to EOF: the edge gives the slot back
            # before it closes, so a scrape leaves nothing counted behind it.
            c = sc.fetch(p2, "/metrics", headers={"Connection": "close"}, timeout=5)
            v = sc.metric(sc.parse_metrics(bytes(c.raw).decode("utf-8", "replace")),
                          "studio_http_connections_open")
            return None if v is None else int(v)
        # Earlier cases' clients closed their sockets first; the edge counts
        # them until it has read their EOF.  Start from none but the scrape.
        harness.wait_until(lambda: conns_open() == 1, 10, "only the scrape's own connection open",
                           detail=lambda: "studio_http_connections_open %r" % conns_open())
        try:
            for _ in range(total):
                s = socket.create_connection(("127.0.0.1", p2), timeout=5)
                s.setblocking(False)
                socks.append(s)
            closed = set()
            poll = select.poll()
            by_fd = {s.fileno(): s for s in socks}
            for fd in by_fd:
                poll.register(fd, select.POLLIN)

            def count_closed():
                for fd, _ in poll.poll(50):
                    try:
                        gone = by_fd[fd].recv(1) == b""
                    except BlockingIOError:
                        gone = False
                    except ConnectionResetError:
                        gone = True
                    if gone:
                        closed.add(fd)
                        poll.unregister(fd)
                return len(closed) >= total - limit

            harness.wait_until(count_closed, 8, "connections beyond %d closed" % limit,
                               detail=lambda: "%d of %d closed" % (len(closed), total))
            # settle: nothing more closes before the 10 s head timeout
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                count_closed()
            log("FIGURE connections_closed_at_once %d of %d (limit %d)" % (len(closed), total, limit))
            check_eq(len(closed), total - limit, "connections closed at once (one limit for both loops)")
            # The gauge: free 10 slots, then a scrape sees the rest plus itself.
            held = [s for s in socks if s.fileno() not in closed]
            for s in held[:10]:
                s.close()
            harness.wait_until(lambda: conns_open() == limit - 10 + 1, 10,
                               "studio_http_connections_open = %d held + the scrape" % (limit - 10),
                               detail=lambda: "gauge %r" % conns_open())
        finally:
            for s in socks:
                s.close()

    t.main()
