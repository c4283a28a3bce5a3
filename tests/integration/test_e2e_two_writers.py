"""e2e: two writers on one database (same --lock-key) hammered concurrently.
(a) commit order equals seq order (track_commit_timestamp), (b) seqs skip only
at identity holes (never inside a transaction; each flush's prev is the row
before it), (c) an edge subscribed to both delivers every row once, in order."""
import json
import subprocess
import threading
import time

import harness as h

t = h.Tests()
CHUNKS = 30       # studioctl --file runs per producer
CHUNK = 100       # events per run
SINGLES = 40      # single-event nngreq requests per raw producer


@t.case
def two_writers_one_history():
    with h.Env() as env:
        tc = h.psql_one(env.dsn, "SHOW track_commit_timestamp")
        h.check_eq(tc, "on", "track_commit_timestamp of the test cluster (scripts/lib.sh sets it)")
        w1 = env.start_writer(lock_key=9001, flush_interval_ms=50).wait_ready()
        w2 = env.start_writer(lock_key=9001, flush_interval_ms=50).wait_ready()
        e = env.start_edge([w1, w2]).wait_ready()
        both = h.SseClient(e.url + "/v1/stream?topic=ham&topic=ham2")
        one = h.SseClient(e.url + "/v1/stream?topic=ham")
        h.wait_until(lambda: both.status and one.status, 10, "SSE response heads")
        h.check_eq((both.status, one.status), (200, 200), "stream statuses")
        h.publish(w1, "ham", data='"start"')
        both.wait_items(1, 30)
        one.wait_items(1, 30)

        errors = []

        def file_producer(k, w):
            for c in range(CHUNKS):
                lines = [json.dumps({"topic": "ham" if (c + k) % 2 else "ham2",
                                     "data": {"p": k, "c": c, "i": i}}) for i in range(CHUNK)]
                p = h.publish_file(w, lines, check=False, timeout=120)
                if p.returncode != 0:
                    errors.append("producer %d chunk %d: studioctl exit %d %s" % (
                        k, c, p.returncode, p.stderr.decode(errors="replace")[-300:]))

        def raw_producer(k, w):
            for i in range(SINGLES):
                try:
                    rep = h.request(w, {"topic": "ham", "data": '{"raw":%d,"i":%d}' % (k, i)})
                    if rep.get("ok") is not True:
                        errors.append("raw %d/%d: %r" % (k, i, rep))
                except h.TestFailure as ex:
                    errors.append("raw %d/%d: %s" % (k, i, ex))

        threads = [threading.Thread(target=file_producer, args=(k, w)) for k, w in
                   enumerate((w1, w2, w1, w2))]
        threads += [threading.Thread(target=raw_producer, args=(k, w)) for k, w in enumerate((w1, w2))]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join(600)
        elapsed = time.monotonic() - t0
        h.check(not any(th.is_alive() for th in threads), "producers finished within 600 s")
        h.check(not errors, "%d publish errors, first: %s" % (len(errors), errors[:3]))
        expected = 1 + 4 * CHUNKS * CHUNK + 2 * SINGLES

        rows = h.psql(env.dsn, "SELECT seq, xmin::text FROM broker_event "
                               "ORDER BY pg_xact_commit_timestamp(xmin), seq")
        h.check_eq(len(rows), expected, "rows stored")
        seqs = [int(r[0]) for r in rows]
        # (a) commit order == seq order.
        for a, b in zip(seqs, seqs[1:]):
            if b <= a:
                raise h.TestFailure("commit order is not seq order: seq %d committed before seq %d" % (a, b))
        # (b) within a transaction seqs are contiguous; a skip may only sit between
        # two transactions (identity values of a rolled-back attempt).
        holes = 0
        txs = 1
        for (sa, xa), (sb, xb) in zip(rows, rows[1:]):
            if xa != xb:
                txs += 1
                holes += int(sb) - int(sa) - 1
            elif int(sb) != int(sa) + 1:
                raise h.TestFailure("seq skip inside one transaction: %s -> %s" % (sa, sb))
        # Each flush's prev (recorded in broker_flush; seqs[1] is its first fresh seq)
        # is the row committed just before it: across both writers, one chain.
        flushes = h.psql(env.dsn, "SELECT prev, seqs[1], (SELECT max(seq) FROM broker_event e "
                                  "WHERE e.seq < f.seqs[1]) FROM broker_flush f "
                                  "WHERE cardinality(seqs) > 0 AND seqs[1] > prev ORDER BY seqs[1]")
        for prev, first, before in flushes:
            h.check_eq(int(prev), int(before or 0), "prev recorded for the flush starting at %s" % first)
        h.check(len(flushes) >= 2, "at least two flushes were checked (%d)" % len(flushes))
        h.log("figures: %d events from 6 producers in %.1fs (%.0f/s), %d transactions, %d identity holes, "
              "%d flushes' prev checked" % (expected, elapsed, expected / elapsed, txs, holes, len(flushes)))

        # (c) the edge delivers the one history, each row once, in order.
        all_rows = h.db_events(env.dsn, ["ham", "ham2"])
        ham_rows = [r for r in all_rows if r[1] == "ham"]
        both.wait_items(len(all_rows), 180)
        one.wait_items(len(ham_rows), 180)
        h.check_items_match_rows(both.items(), all_rows, "client of ham+ham2")
        h.check_items_match_rows(one.items(), ham_rows, "client of ham")
        fills = h.metric(e.url, "studio_gap_fills_total")
        h.log("figures: studio_gap_fills_total = %s" % fills)
        both.close()
        one.close()
        for p in (e, w1, w2):
            h.check_eq(p.stop(), 0, "%s exit status on SIGTERM" % p.name)


if __name__ == "__main__":
    t.main()
