"""Slow and stalled stream subscribers (ADR-0197, docs/api.md "Slow
subscribers follow ADR-0197 exactly").

1. Coalescing: a client reading slowly but steadily on a stream of change
   signals (no data) about three resources gets coalesced signals and never a
   resync; /metrics counts studio_sse_dropped_total{reason="coalesced"}.
2. Stalled clients: 200 clients that connect and never read (small receive
   buffers, tests/tools/streamload --stall-s) next to 20 readers while events
   flow at a high rate.  The readers get every event in order with no resync;
   the edge's VmRSS stays below idle + 200 x 1 MiB + a margin; stalled
   clients that start reading within the blocked-write limit find a
   well-formed stream ending in reconnect slow_consumer; the others are
   closed within the ADR's limits; overflow drops are counted.
"""

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
rc = 1
STALLED = 200
READERS = 20
MARGIN_KIB = 64 * 1024
# events per ingest request; each waits for its flush, so about 2 requests a
# second: a few hundred events a second to each of 224 streams
RATE_BATCH = int(os.environ.get("G2_SLOW_BATCH", "300"))
PAD = int(os.environ.get("G2_SLOW_PAD", "1000"))   # bytes of padding per event: 300 KB a request
# ASan's quarantine keeps freed memory resident; keep it small for the RSS bound.
EDGE_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:quarantine_size_mb=8:malloc_context_size=5"}


def flow(writer, topic, seconds, batch, pause, pad, stop, seqs, errors):
    k = 0
    t_end = time.monotonic() + seconds
    try:
        while time.monotonic() < t_end and not stop.is_set():
            evs = [{"topic": topic, "about": ["h%d" % (i % 5)],
                    "data": '{"k":%d,"p":"%s"}' % (k + i, "z" * pad)} for i in range(batch)]
            k += batch
            seqs += sc.publish_batch(writer, evs)
            time.sleep(pause)
    except Exception as e:  # reported by the test
        errors.append(e)


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()
    edge = harness.start_edge(env.dsn, [writer], env=env, extra_env=EDGE_ENV, heartbeat_s=2)
    edge.wait_ready()
    port = sc.edge_port(edge)

    @t.case
    def slow_signal_reader_gets_coalesced_signals():
        m0 = sc.get_metrics(port)
        c = sc.StreamClient(port, "/v1/stream?topic=s.sig", rcvbuf=4096, read_rate=4000)
        sc.run_until_open([c])
        check_eq(c.status, 200, "stream open")
        published = []
        for _ in range(8):
            evs = [{"topic": "s.sig", "about": ["res%d" % (i % 3)]} for i in range(1500)]
            published += sc.publish_batch(writer, evs)
            sc.run_clients([c], 0.8)
        sc.run_clients([c], 2.0)
        slow_items = c.n_items
        slow_bytes = c.bytes_in
        c.read_rate = None     # now read what is left at full speed
        sc.run_clients([c], 3.0)
        c.close()
        m1 = sc.get_metrics(port)
        co = (sc.metric(m1, "studio_sse_dropped_total", reason="coalesced") or 0) - \
            (sc.metric(m0, "studio_sse_dropped_total", reason="coalesced") or 0)
        items = c.items()
        log("FIGURE %d signals published, %d delivered to the slow reader while it read slowly "
            "(%d bytes), %d in all; coalesced counter +%d"
            % (len(published), slow_items, slow_bytes, len(items), co))
        check_eq(sc.check_envelopes(c), [], "well formed")
        check_eq(c.of_type("resync"), [], "never a resync")
        check(c.outcome == "client_closed", "no terminal envelope (outcome %r)" % c.outcome)
        check(all("data" not in f["env"] for f in items), "signals carry no data")
        check(0 < len(items) < len(published), "signals were coalesced")
        check(set(int(f["env"]["id"]) for f in items) <= set(published), "only published ids")
        check(co > 0, 'studio_sse_dropped_total{reason="coalesced"} grew')
        ids = [int(f["env"]["id"]) for f in items]
        check(all(a < b for a, b in zip(ids, ids[1:])), "ids strictly increase")
        # ADR-0197 with the contract's increasing ids: a queued signal absorbs the
        # newer ones for its resource and keeps its place and id (edge-gateway/subq.h
        # rule 4); the client's refetch when it arrives sees the newer changes.
        # Nothing may be lost: every signal not delivered was coalesced.
        check_eq(len(published) - len(items), co, "every undelivered signal was coalesced, none lost")
        seen = set(tuple(f["env"]["about"]) for f in items)
        check_eq(seen, {("res0",), ("res1",), ("res2",)}, "every resource got its signals")

    @t.case
    def stalled_clients_do_not_hurt_readers_or_memory():
        time.sleep(1)
        idle = edge.rss_kb()
        start = sc.db_head(env.dsn)
        path = "/v1/stream?topic=s.hot"
        stalled = sc.Streamload(port, path, STALLED, env.tmp, rate=400, stall_s=50, rcvbuf=4096,
                                timeout_s=90, per_stream=True)
        readers = sc.Streamload(port, path, READERS, env.tmp, rate=100, timeout_s=90, hold_s=None)
        stalled.wait_ready(30)
        readers.wait_ready(30)
        # three Python clients stall too, then read within the 30 s blocked-write limit
        late = [sc.StreamClient(port, path, stall=True, rcvbuf=4096) for _ in range(3)]
        full = sc.StreamClient(port, path)   # one reader checked id by id
        sc.run_clients(late + [full], 1.0)
        stop = threading.Event()
        seqs, errors = [], []
        pub = threading.Thread(target=flow, args=(writer, "s.hot", 12, RATE_BATCH, 0.05, PAD, stop, seqs, errors),
                               daemon=True)
        peak = [idle]

        def sample(now):
            v = sc.vm_rss_kib(edge.pid)
            if v and v > peak[0]:
                peak[0] = v
        pub.start()
        t0 = time.monotonic()
        sc.run_clients([full], 14, until=lambda: not pub.is_alive(), tick=sample)
        pub.join(60)
        check(not errors, "publisher: %r" % errors)
        flow_s = time.monotonic() - t0
        target = seqs[-1]
        sc.run_clients([full], 30, until=lambda: (full.last_id or 0) >= target, tick=sample)
        m_mid = sc.get_metrics(port)
        # the late readers now read all they were sent
        for c in late:
            c.unstall()
        sc.run_clients(late + [full], 20, until=lambda: all(c.done for c in late), tick=sample)
        full.close()
        time.sleep(1.0)
        rr = readers.result(0.1)   # live streams never end: SIGTERM makes streamload print its stats
        # by 47 s after they connected, every stalled stream must be gone
        # (reconnect after 3 overflows, and a write blocked > 30 s is interrupted)
        while time.monotonic() < stalled.t0 + 47:
            time.sleep(0.5)
        m_47 = sc.get_metrics(port)
        open47 = sc.metric(m_47, "studio_streams_open")
        sr = stalled.result(60)
        m_end = sc.get_metrics(port)
        limit = idle + STALLED * 1024 + MARGIN_KIB
        log("FIGURE %d events in %.1f s (%.0f/s); VmRSS idle %d KiB, peak %d KiB, limit %d KiB"
            % (len(seqs), flow_s, len(seqs) / flow_s, idle, peak[0], limit))
        per = sr.pop("per_stream")
        sr.pop("retry_ms")
        log("FIGURE stalled streamload: %s" % sr)
        log("FIGURE readers streamload: %s" % {k: v for k, v in rr.items() if k != "retry_ms"})
        log("FIGURE late readers: %s" % [(c.outcome, c.n_items, c.terminal and c.terminal["env"]) for c in late])
        for k in ("overflow", "blocked", "coalesced", "replay"):
            log("FIGURE studio_sse_dropped_total{reason=%s} = %s" % (k, sc.metric(m_end, "studio_sse_dropped_total", reason=k)))
        rows = [r[0] for r in sc.table_rows(env.dsn, ["s.hot"], after=start)]
        # readers
        check_eq(sc.check_envelopes(full), [], "full reader well formed")
        check_eq(full.of_type("resync"), [], "full reader: no resync")
        check(full.ids() == rows, "full reader got every event in order (%d of %d)" % (len(full.ids()), len(rows)))
        check_eq((rr["resyncs"], rr["id_regressions"], rr["parse_errors"]), (0, 0, 0), "readers: no resync")
        check_eq((rr["items_min"], rr["items_max"], rr["last_id_max"]), (len(rows), len(rows), rows[-1]),
                 "every reader got every event")
        check(peak[0] < limit, "edge VmRSS peak %d KiB below idle + 200 MiB + margin (%d KiB)" % (peak[0], limit))
        # stalled ones
        log("FIGURE studio_streams_open 47 s after the stalled clients connected: %s" % open47)
        check(open47 is not None and open47 <= 0, "no stalled stream is still open after 47 s "
              "(the readers were closed too): %s" % open47)
        check_eq(sr["outcomes"]["open"], 0, "every stalled stream was ended by the edge")
        ok_outcomes = sr["outcomes"]["reconnect"] + sr["outcomes"]["abrupt_close"]
        check_eq(ok_outcomes, STALLED, "stalled streams end in reconnect or are closed")
        check(set(sr["reasons"]) <= {"slow_consumer", "blocked"}, "reconnect reasons %r" % sr["reasons"])
        check_eq((sr["frames_after_terminal"], sr["id_regressions"]), (0, 0), "stalled streams well formed")
        ends = [p["t_end"] - sr["t_start"] for p in per]
        log("FIGURE stalled streams: reading from 50 s, all %d bytes read by %.1f..%.1f s after they connected"
            % (sr["bytes"], min(ends), max(ends)))
        for c in late:
            check_eq(sc.check_envelopes(c), [], "late reader well formed")
            check_eq((c.outcome, c.terminal and c.terminal["env"].get("reason")), ("reconnect", "slow_consumer"),
                     "a stalled client that reads later finds reconnect slow_consumer")
        ov = (sc.metric(m_mid, "studio_sse_dropped_total", reason="overflow") or 0)
        check(ov > 0, 'studio_sse_dropped_total{reason="overflow"} counts the stalled streams (%s)' % ov)
        ro = sc.metric(m_end, "studio_stream_outcomes_total", outcome="reconnect") or 0
        check(ro >= 3, "reconnect outcomes counted (%s)" % ro)

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
sys.exit(rc)
