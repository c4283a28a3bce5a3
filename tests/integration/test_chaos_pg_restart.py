"""Chaos: PostgreSQL restarted (pg_ctl -m fast restart, three times, then
stopped until every program noticed and started again) while
producers publish continuously with idempotency keys and SSE clients stream.

The test runs a PostgreSQL server of its own (harness.PgServer: the shared
one must not be restarted).  Two writers (100 ms flush interval, one lock
key) and one edge; three producers send keyed batches round robin over both
writers and resend a request that got no answer, `busy` or `unavailable`
(same keys) as a real producer does; three clients stream and resume with
Last-Event-ID when their stream ends.  After the restarts the producers
stop and the verdict is chaos.verify(): every acknowledged event stored
exactly once under its acknowledged seq, nothing stored twice, every client
got every committed event of its topics once, in order, and no resync.

Every wait is bounded (wait_until); the restarts happen after a count of
acknowledgements, not after a sleep.
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, log  # noqa: E402
import chaos  # noqa: E402

t = harness.Tests()
TOPICS = ["c.a", "c.b", "c.c"]


acks = chaos.acks


@t.case
def pg_fast_restart_under_load():
    pg = harness.PgServer("chaos-pg").start()
    producers, clients = [], []
    try:
        with harness.Env(admin_dsn=pg.dsn) as env:
            w1 = env.start_writer(flush_interval_ms=100, lock_key=77)
            w2 = env.start_writer(flush_interval_ms=100, lock_key=77)
            w1.wait_ready()
            w2.wait_ready()
            edge = env.start_edge([w1, w2], flush_interval_ms=100).wait_ready()
            clients = [chaos.ResumingClient(edge, ["c.a"], "A"), chaos.ResumingClient(edge, ["c.b"], "B"),
                       chaos.ResumingClient(edge, TOPICS, "ALL"),
                       chaos.ResumingClient(edge, ["c.a", "c.c"], "HOP", hop_s=0.3)]
            for c in clients:
                c.start()
            harness.wait_until(lambda: all(c.cur is not None and c.cur.status == 200 for c in clients), 30,
                               "every client streaming")
            producers = [chaos.Producer("p%d" % i, [w1, w2][i % 2:] + [w1, w2][:i % 2], TOPICS, batch=20)
                         for i in range(4)]
            t_start = time.monotonic()
            for p in producers:
                p.start()

            def progress(n, what):
                chaos.wait_acked(producers, n, what, logs=(w1, w2, pg))

            progress(300, "before the restarts")
            took = []
            rnd = random.Random()
            for i in range(3):
                time.sleep(rnd.uniform(0.0, 0.3))  # a random point in the flush cycle; decides nothing
                before = acks(producers)
                took.append(pg.restart("fast"))
                log("FIGURE PostgreSQL fast restart %d took %.2f s (%d events acknowledged before it)"
                    % (i + 1, took[-1], before))
                progress(300, "after restart %d" % (i + 1))
            # A longer outage: stopped (fast) until the writers and the edge
            # report the database gone and a resume check was refused for a
            # retry, then started again.
            t_down = time.monotonic()
            pg.stop("fast")
            hop = clients[-1]
            def refusals():
                # Contract: an SSE resume the database cannot check is answered 200 +
                # reconnect "unavailable"; NDJSON/json-seq get 503.  Either counts here.
                return hop.outcomes.get("reconnect", 0) + hop.outcomes.get("refused 503", 0)
            refusals0 = refusals()

            def readiness():
                return [harness._http_status(u + "/readyz") for u in (w1.http_url, w2.http_url, edge.url)]

            def noticed():
                return readiness() == [503, 503, 503] and refusals() > refusals0
            harness.wait_until(noticed, 60, "writers and edge not ready, a resume refused for retry",
                               interval=0.2, detail=lambda: "/readyz of writer1, writer2, edge: %s; hop client "
                               "outcomes %s; acked %d" % (readiness(), hop.outcomes, acks(producers)))
            pg.start()
            log("FIGURE PostgreSQL stopped for %.2f s (until every program noticed)" % (time.monotonic() - t_down))
            progress(300, "after the outage")
            for p in producers:
                p.finish(120)
            t_end = time.monotonic()
            chaos.wait_clients_caught_up(env, clients, 60)
            for c in clients:
                c.finish()
            failures = harness.metric(w1.http_url, "studio_writer_flush_failures_total") or 0
            failures += harness.metric(w2.http_url, "studio_writer_flush_failures_total") or 0
            log("FIGURE writers' failed flushes during the run: %d" % failures)
            chaos.verify(env, producers, clients, t_start, t_end, "pg restart")
            chaos.check_clean_exit([edge, w1, w2])
    except BaseException:
        log(pg.logs(60))
        raise
    finally:
        for p in producers:
            p.stop_ev.set()
        for c in clients:
            c.stop_ev.set()
        pg.close()


t.main()
