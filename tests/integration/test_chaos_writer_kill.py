"""Chaos: a writer SIGKILLed at a random point under load, then started again
on the same addresses.

Two writers (100 ms flush interval, one lock key) and one edge subscribed to
both; four producers send keyed batches round robin over the two writers;
a request that gets no answer (the killed writer), `busy` or `unavailable`
is resent with the same keys to the other writer.  Clients stream and
resume with Last-Event-ID when their stream ends.  The kill comes after a
count of acknowledgements plus a random delay (the point in the writer's
accept/flush/commit/publish/reply cycle is random; the verdict does not
depend on it).  The verdict is chaos.verify(): every acknowledged event
stored exactly once under its acknowledged seq, nothing stored twice,
every client got every committed event of its topics once, in order, and no
resync.  Events the killed writer committed without publishing reach the
edge through its gap fill from PostgreSQL.
"""

import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import chaos  # noqa: E402

t = harness.Tests()
TOPICS = ["k.a", "k.b", "k.c"]


acks = chaos.acks


@t.case
def writer_sigkill_under_load():
    seed = int(os.environ.get("STUDIO_TEST_SEED") or random.randrange(1 << 30))
    rnd = random.Random(seed)
    log("seed %d (STUDIO_TEST_SEED=%d repeats this run's kill delay)" % (seed, seed))
    producers, clients = [], []
    try:
        with harness.Env() as env:
            w1 = env.start_writer(flush_interval_ms=100, lock_key=78, name="writer1")
            w2 = env.start_writer(flush_interval_ms=100, lock_key=78, name="writer2")
            w1.wait_ready()
            w2.wait_ready()
            edge = env.start_edge([w1, w2], flush_interval_ms=100).wait_ready()
            clients = [chaos.ResumingClient(edge, ["k.a"], "A"), chaos.ResumingClient(edge, ["k.b"], "B"),
                       chaos.ResumingClient(edge, TOPICS, "ALL"),
                       chaos.ResumingClient(edge, ["k.a", "k.c"], "HOP", hop_s=0.3)]
            for c in clients:
                c.start()
            harness.wait_until(lambda: all(c.cur is not None and c.cur.status == 200 for c in clients), 30,
                               "every client streaming")
            # Producer i starts on writer i % 2 and alternates: both writers get traffic
            # all the time, so the kill always cuts requests off.
            producers = [chaos.Producer("p%d" % i, [w1, w2][i % 2:] + [w1, w2][:i % 2], TOPICS, batch=25)
                         for i in range(4)]
            t_start = time.monotonic()
            for p in producers:
                p.start()

            def progress(n, what):
                chaos.wait_acked(producers, n, what, logs=(w1, w2))

            progress(400, "before the first kill")
            # Two rounds: writer1 killed and started again, then writer2.
            writers = [w1, w2]
            for rnd_i in range(2):
                victim = writers[rnd_i]
                time.sleep(rnd.uniform(0.0, 0.5))  # a random point in the writer's cycle; decides nothing
                acked_before = acks(producers)
                rc = victim.kill()
                check_eq(rc, -signal.SIGKILL, "%s died of SIGKILL" % victim.name)
                log("FIGURE %s SIGKILLed with %d events acknowledged" % (victim.name, acked_before))
                progress(400, "one writer left after killing %s" % victim.name)
                # Same addresses: the producers (which alternate) and the edge reach it again.
                again = env.start_writer(name=victim.name + "b", **dict(victim.flags))
                again.wait_ready()
                writers[rnd_i] = again
                before = harness.metric(again.http_url, "studio_writer_events_committed_total") or 0
                progress(400, "%s restarted" % victim.name)
                harness.wait_until(lambda: (harness.metric(again.http_url, "studio_writer_events_committed_total")
                                            or 0) > before, 60, "the restarted %s committing events" % victim.name)
            for p in producers:
                p.finish(120)
            t_end = time.monotonic()
            chaos.wait_clients_caught_up(env, clients, 60)
            for c in clients:
                c.finish()
            fills = harness.metric(edge.url, "studio_gap_fills_total")
            log("FIGURE edge gap fills: %s" % fills)
            chaos.verify(env, producers, clients, t_start, t_end, "writer kill")
            chaos.check_clean_exit([edge] + writers)
    finally:
        for p in producers:
            p.stop_ev.set()
        for c in clients:
            c.stop_ev.set()


t.main()
