#!/usr/bin/env python3
"""A resume over 2,000 events of 200 KiB: every row is read from PostgreSQL
once, the edge's memory stays bounded, and the client gets every event.

A replay chunk is cut by bytes in the database (about 1 MiB, ADR-0197's
bound of what a stream holds) and by rows; a chunk that kept 5 rows of a
1,000-row result and read the rest again would read each row ~200 times
here and hold ~200 MB per chunk.  Checked: studio_replay_rows_total grows
by exactly the number of events replayed, the edge's resident memory
during the replay stays within a bound written as arithmetic below, and
the NDJSON client (curl) receives every event, in order, byte for byte the
size published, then `complete`.
"""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
N = 2000
SIZE = 200 * 1024
# What the replay may add to the edge's memory: one chunk (<= 1 MiB of
# rows + one row of <= 270 KiB) held as frames, each frame's envelope plus
# its NDJSON bytes (2x), the libpq result of the chunk (1x), and as much
# again for what the socket has not taken yet and malloc's slack: 4 x 1.3 MiB
# ~ 5 MiB; the bound below leaves room for allocator noise, and is far below
# the ~200 MB a single row-count-sized chunk of these rows would hold.
RSS_BOUND_KIB = 48 * 1024


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop_ev = pid, 0, threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                self.peak = max(self.peak, harness.rss_kb(self.pid))
            except Exception:  # the process ended: the test says so elsewhere
                return
            time.sleep(0.01)


@t.case
def resume_over_large_rows_reads_each_row_once():
    with harness.Env() as env:
        writer = env.start_writer(flush_interval_ms=200)
        writer.wait_ready()
        edge = env.start_edge([writer], replay_cap=100000)
        edge.wait_ready()
        seqs = []
        for b in range(0, N, 50):
            evs = [{"topic": "big", "about": ["a"],
                    "data": json.dumps({"i": b + i, "p": ("%06d" % (b + i)) * (SIZE // 6)})}
                   for i in range(50)]
            seqs += sc.publish_batch(writer, evs)
        check_eq(len(seqs), N, "events published")
        # The edge has seen them live (nothing of the replay comes from its memory).
        harness.wait_until(lambda: (harness.metric(edge.url, "studio_frames_delivered_total") is not None
                                    and sc.db_head(env.dsn) == seqs[-1]), 30, "the events committed")
        rows0 = harness.metric(edge.url, "studio_replay_rows_total") or 0
        base = harness.rss_kb(edge.pid)
        sampler = RssSampler(edge.pid)
        sampler.start()
        out = os.path.join(env.tmp, "replay.ndjson")
        t0 = time.monotonic()
        p = subprocess.run(["curl", "-sS", "-N", "--max-time", "300", "-o", out,
                            "-H", "Last-Event-ID: %d" % (seqs[0] - 1),
                            edge.url + "/v1/stream?topic=big&format=ndjson&until=head"],
                           capture_output=True, text=True, timeout=320)
        secs = time.monotonic() - t0
        sampler.stop_ev.set()
        sampler.join(5)
        rows = (harness.metric(edge.url, "studio_replay_rows_total") or 0) - rows0
        size = os.path.getsize(out)
        log("FIGURE replay of %d x %d KiB: %.1f s (%.0f MB/s), rows read %d, edge RSS %d -> peak %d KiB "
            "(+%d KiB, bound +%d KiB)" % (N, SIZE // 1024, secs, size / secs / 1e6 if secs else 0, rows,
                                          base, sampler.peak, sampler.peak - base, RSS_BOUND_KIB))
        check_eq(p.returncode, 0, "curl exit status (%s)" % p.stderr.strip())
        ids, types, lens = [], [], []
        with open(out, "rb") as f:
            for line in f:
                env_ = json.loads(line)
                types.append(env_["type"])
                if env_["type"] == "item":
                    ids.append(int(env_["id"]))
                    lens.append(len(json.dumps(env_["data"], separators=(",", ":"))))
        check_eq(types[-1:], ["complete"], "the stream ends with complete")
        check_eq(ids, seqs, "ids received: every event once, in order")
        check(all(n > SIZE for n in lens), "every event arrived whole (smallest data %d bytes)" % min(lens))
        check_eq(rows, float(N), "rows read from PostgreSQL by the replay (each row once)")
        check(sampler.peak - base <= RSS_BOUND_KIB,
              "edge RSS grew by %d KiB during the replay, bound %d KiB" % (sampler.peak - base, RSS_BOUND_KIB))


t.main()
