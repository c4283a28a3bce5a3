"""writer: a flush that stores nothing new (every event's key is stored
already) still publishes the head, so the edges stay ready while producers
only resend stored keys (docs/writer.md, "Flush")."""
import subprocess
import threading
import time

import harness as h

t = h.Tests()

INTERVAL_MS = 200  # the edge turns unready after 3 intervals without a message
RESEND_S = 5.0
PRODUCERS = 4


@t.case
def resent_key_keeps_edges_ready():
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=INTERVAL_MS).wait_ready()
        e = env.start_edge([w], flush_interval_ms=INTERVAL_MS).wait_ready()
        first = h.request(w, {"topic": "dup", "data": "1", "key": "K"})
        h.check(first.get("ok") is True, "first publish of key K: %r" % (first,))
        seq = first["seqs"][0]
        h.wait_until(lambda: h.http_get(e.url + "/readyz")[0] == 200, 10, "the edge ready after the first event")

        tail = subprocess.Popen([h.program("studioctl"), "tail", "--writer", w.publish, "--ticks",
                                 "--timeout-s", str(int(RESEND_S))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stop = threading.Event()
        replies, bad = [], []

        def producer():
            # nothing new: only key K again, so every flush of the interval finds it stored
            while not stop.is_set():
                r = h.request(w, {"topic": "dup", "data": "2", "key": "K"})
                (replies if r == {"ok": True, "seqs": [seq]} else bad).append(r)

        threads = [threading.Thread(target=producer) for _ in range(PRODUCERS)]
        for th in threads:
            th.start()
        statuses = []
        deadline = time.monotonic() + RESEND_S
        while time.monotonic() < deadline:
            statuses.append(h.http_get(e.url + "/readyz")[0])
            time.sleep(0.02)
        stop.set()
        for th in threads:
            th.join(30)
        out, err = tail.communicate(timeout=30)

        h.check(not bad, "replies to a resent key other than its stored seq: %r" % (bad[:3],))
        h.check(len(replies) >= 10, "resends answered: %d" % len(replies))
        not_ready = sum(1 for s in statuses if s != 200)
        h.log("FIGURE dup_flush readyz_polls=%d not_ready=%d resends=%d" % (len(statuses), not_ready, len(replies)))
        h.check_eq(not_ready, 0, "edge /readyz answers other than 200 in %d polls while a stored key was resent"
                   % len(statuses))
        ticks = [ln for ln in out.splitlines() if ln.startswith('{"tick":')]
        h.check(len(ticks) >= RESEND_S * 1000 / INTERVAL_MS / 4,
                "ticks published by the writer in %.0f s of resends: %d (stderr %s)" % (RESEND_S, len(ticks), err))
        h.check(all(ln == '{"tick":%d}' % seq for ln in ticks), "every tick carries head %d: %r" % (seq, ticks[:5]))
        h.check_eq(int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event")), 1, "rows stored")
        h.check_eq(w.stop(), 0, "writer exit status")


t.main()
