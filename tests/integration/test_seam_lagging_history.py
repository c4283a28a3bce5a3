#!/usr/bin/env python3
"""The resume seam when the edge's live history lags the database.

Two writers share one database; the edge dials only the second.  While that
writer is stopped (SIGSTOP: no messages, no ticks), the first one commits
events the edge has not seen.  A client resumes: the replay covers them up
to the database head D and the stream goes live.  Then the second writer
runs again, the edge fills the gap from PostgreSQL and hands the same events
to its live path.  They were covered by the replay: the seam must drop them
as overlap (studio_seam_overlap_total), so the last step's id guard
(studio_ids_refused_total, a bug alarm) never sees them, and the client
holds every event once, in order, then the next live one.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log, wait_until  # noqa: E402

t = harness.Tests()


@t.case
def live_frames_the_replay_covered_stop_at_the_seam():
    with harness.Env() as env:
        w1 = env.start_writer(flush_interval_ms=100)
        w2 = env.start_writer(flush_interval_ms=100)
        w1.wait_ready()
        w2.wait_ready()
        first = harness.publish(w2, "lag", data={"i": 0})
        # A long flush interval keeps the edge ready (a writer tick within 3
        # intervals) while its writer is stopped.
        edge = env.start_edge([w2], flush_interval_ms=20000)
        edge.wait_ready()
        # The edge must know the first event before the writer pauses.
        harness.SseClient(edge.url + "/v1/stream?topic=lag&until=head").wait_items(1, 20)

        os.kill(w2.pid, signal.SIGSTOP)
        try:
            seqs = [harness.publish(w1, "lag", data={"i": i}) for i in range(1, 6)]
            c = harness.SseClient(edge.url + "/v1/stream?topic=lag",
                                  headers={"Last-Event-ID": str(first)})
            c.wait_items(5, 30)
            check_eq([int(x["id"]) for x in c.items()], seqs, "replayed ids while the edge lags")
            overlap0 = harness.metric(edge.url, "studio_seam_overlap_total") or 0
        finally:
            os.kill(w2.pid, signal.SIGCONT)
        # The edge now learns of seqs[] live (a tick or the next batch, then a fill).
        nxt = harness.publish(w2, "lag", data={"i": 6})
        c.wait_items(6, 30)
        ids = [int(x["id"]) for x in c.items()]
        refused = harness.metric(edge.url, "studio_ids_refused_total")
        overlap = harness.metric(edge.url, "studio_seam_overlap_total") or 0
        log("FIGURE seam overlap dropped after release: %d, ids refused: %s" % (overlap - overlap0, refused))
        c.close()
        check_eq(ids, seqs + [nxt], "client ids after the edge caught up")
        check_eq(refused, 0.0, "studio_ids_refused_total (the guard saw replayed frames)")
        check(overlap - overlap0 >= len(seqs),
              "the %d replayed events were dropped at the seam (studio_seam_overlap_total grew by %d)"
              % (len(seqs), overlap - overlap0))


t.main()
