# ctest-labels: browser
"""A real browser's EventSource against the edge-gateway.

Headless Chromium (/usr/bin/chromium) loads browser/page.html from a tiny
http.server on 127.0.0.1 (its own origin, so the edge's CORS answer for
--cors-origins is exercised) and opens an EventSource on the edge.  While
events flow, the edge process is killed and a new edge is started on the same
address: the browser reconnects by itself and sends Last-Event-ID; the new
edge replays what it missed.  Then a second edge-side cut, a drain: the
browser gets reconnect (draining) with a short retry hint.  The ids the page
collected must be exactly the table's rows on its topic from the first one it
saw: no gap, no duplicate.

Then a third cut: the browser comes back into an edge that is draining as
well (a rolling restart).  An EventSource gives up for good on any answer but
200, so a draining or not-yet-ready edge answers an SSE request with 200 and
one reconnect envelope; the browser retries by itself until the next edge
streams.  The page would open a new EventSource after a give-up (counted as
manual); the count must stay 0.
"""

import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "browser"))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402
import driver  # noqa: E402

t = harness.Tests()
rc = 1
TOPIC = "b.a"


class Flow(threading.Thread):
    def __init__(self, writer):
        super().__init__(daemon=True)
        self.writer = writer
        self.stop = threading.Event()
        self.seqs = []
        self.error = None

    def run(self):
        k = 0
        try:
            while not self.stop.is_set():
                evs = [{"topic": TOPIC if i % 2 == 0 else "b.other", "about": ["x"],
                        "data": '{"k":%d}' % (k + i)} for i in range(10)]
                k += 10
                self.seqs += sc.publish_batch(self.writer, evs)
                time.sleep(0.1)
        except Exception as e:  # reported by the test
            self.error = e


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()
    page = driver.PageServer()

    @t.case
    def eventsource_reconnects_without_gap_or_duplicate():
        check(os.path.exists(driver.CHROMIUM), "chromium is installed at %s" % driver.CHROMIUM)
        edge = env.start_edge([writer], cors_origins=page.origin, drain_grace_s=1, heartbeat_s=2)
        edge.wait_ready()
        listen = edge.listen
        port = sc.edge_port(edge)
        src = "http://%s/v1/stream?topic=%s" % (listen, TOPIC)
        b = driver.Browser(page.page_url(src, budget_ms=50000), logdir=env.tmp)
        try:
            harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 1.0,
                               30, "the browser's stream open on the edge")
            flow = Flow(writer)
            flow.start()
            time.sleep(2.5)
            edge.kill()                       # cut 1: the edge process dies mid-stream
            time.sleep(0.5)
            edge = env.start_edge([writer], listen=listen, cors_origins=page.origin,
                                  drain_grace_s=1, heartbeat_s=2)
            edge.wait_ready()
            harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 1.0,
                               30, "the browser reconnected to the new edge")
            time.sleep(2.0)
            edge.signal(signal.SIGTERM)       # cut 2: drain, reconnect hint <= 1 s
            check_eq(edge.wait_exit(5), 0, "drained edge exit status")
            # cut 3: the browser comes back into an edge that is draining too
            # (a rolling restart): it must hear reconnect, not a final 503.
            edge = env.start_edge([writer], listen=listen, cors_origins=page.origin, heartbeat_s=2)
            edge.wait_ready()
            p = harness.studioctl("drain", "--control", edge.control, timeout=20)
            check_eq(p.returncode, 0, "studioctl drain: %s %s" % (p.stdout, p.stderr))
            harness.wait_until(lambda: (sc.metric(sc.get_metrics(port), "studio_stream_refusals_total",
                                                  reason="draining") or 0) >= 2, 30,
                               "the browser refused twice by the draining edge (200 + reconnect)")
            edge.signal(signal.SIGTERM)
            check_eq(edge.wait_exit(5), 0, "the draining edge's exit status")
            edge = env.start_edge([writer], listen=listen, cors_origins=page.origin, heartbeat_s=2)
            edge.wait_ready()
            harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 1.0,
                               30, "the browser streams from the next edge")
            time.sleep(2.0)
            flow.stop.set()
            flow.join(30)
            check(flow.error is None, "publisher: %r" % flow.error)
            rows = [r[0] for r in sc.table_rows(env.dsn, [TOPIC])]
            page.target = rows[-1]
            got = page.done.wait(60)
            log("FIGURE page result: why=%s" % (page.result or {}).get("why"))
            check(got, "the page reported its ids (chromium log tail:\n%s)" % b.log_tail())
        finally:
            b.close()
        r = page.result
        ids = r.get("ids", [])
        log("FIGURE browser: %d ids, %d EventSource errors, %d opens (%d of them by a new EventSource after "
            "a 503 made the old one give up), reconnect envelopes %s, why=%s, %d ms" % (
                len(ids), r.get("errors"), r.get("opens"), r.get("manual"), r.get("reconnects"), r.get("why"),
                r.get("elapsed_ms")))
        check_eq(r.get("why"), "target", "the page reached the last id")
        check_eq(r.get("others"), [], "no unexpected frames")
        check(ids and ids[0] in rows, "first id is a row")
        want = rows[rows.index(ids[0]):] if ids and ids[0] in rows else rows
        dups = len(ids) - len(set(ids))
        missing = sorted(set(want) - set(ids))
        log("FIGURE duplicates %d, missing %d %s" % (dups, len(missing), missing[:10]))
        check(ids == want, "ids equal the table rows from the first one seen: no gap, no duplicate")
        check_eq(ids[0], flow.seqs[0] if flow.seqs and flow.seqs[0] in rows else rows[0],
                 "the page saw the first event published after it connected")
        check(r.get("opens", 0) >= 4, "4 streaming connections opened (%s)" % r.get("opens"))
        check_eq(r.get("manual"), 0, "times the EventSource gave up for good (a non-200 answer)")
        check(any(x.get("reason") == "draining" for x in r.get("reconnects", [])),
              "the browser received reconnect draining")

    @t.case
    def eventsource_over_its_address_limit_comes_back_by_itself():
        """Issue 25 item 6: a 429 would end an EventSource for good; the per-address
        limit answers SSE with 200 + reconnect (overloaded, retry >= 10 s), and the
        browser streams once its address holds a free slot."""
        check(os.path.exists(driver.CHROMIUM), "chromium is installed at %s" % driver.CHROMIUM)
        pg = driver.PageServer()
        edge = env.start_edge([writer], cors_origins=pg.origin, max_streams_per_ip=1, heartbeat_s=2)
        edge.wait_ready()
        port = sc.edge_port(edge)
        topic = "b.limit"
        # This test's own stream from 127.0.0.1 holds the address's one slot.
        held = sc.StreamClient(port, "/v1/stream?topic=%s&format=ndjson" % topic)
        b = None
        try:
            sc.run_until_open([held])
            check_eq(held.status, 200, "the held stream")
            b = driver.Browser(pg.page_url("http://%s/v1/stream?topic=%s" % (edge.listen, topic), budget_ms=60000),
                               logdir=env.tmp)
            harness.wait_until(lambda: (sc.metric(sc.get_metrics(port), "studio_ip_limit_refused_total") or 0) >= 1,
                               30, "the browser refused by the per-address limit")
            held.close()
            harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 1.0, 40,
                               "the browser's EventSource streams after the slot freed (retry 10..15 s)")
            seqs = sc.publish_batch(writer, [{"topic": topic, "about": ["x"], "data": '{"k":%d}' % i}
                                             for i in range(3)])
            pg.target = seqs[-1]
            check(pg.done.wait(30), "the page reported (chromium log tail:\n%s)" % b.log_tail())
        finally:
            held.close()
            if b is not None:
                b.close()
            pg.close()
        r = pg.result
        log("FIGURE per-address limit: reconnects %s, errors %d, manual %d, why=%s, %d ms"
            % (r.get("reconnects"), r.get("errors"), r.get("manual"), r.get("why"), r.get("elapsed_ms")))
        check_eq(r.get("why"), "target", "the page reached the last id")
        check_eq(r.get("ids"), seqs, "the items published once it streamed")
        check_eq(r.get("manual"), 0, "times the EventSource gave up for good (a non-200 answer)")
        over = [x for x in r.get("reconnects", []) if x.get("reason") == "overloaded"]
        check(over and all(x.get("retry_ms", 0) >= 10000 for x in over),
              "reconnect overloaded with retry_ms >= 10000: %s" % r.get("reconnects"))
        check_eq(edge.stop(), 0, "edge exit")

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
    finally:
        page.close()
sys.exit(rc)
