"""e2e: a writer killed (SIGKILL) after a commit and before publishing it
(STUDIO_TEST_CRASH_AFTER_COMMIT=N, a hook of broker-writer).  The committed
events were never published: the edge must fill the gap from PostgreSQL, and
its SSE client misses nothing while a second writer, then a restarted first
one, keep publishing."""
import signal
import subprocess

import harness as h

t = h.Tests()
CRASH_AT = 3


@t.case
def gap_after_a_crash_is_filled():
    with h.Env() as env:
        w1 = env.start_writer(lock_key=31, extra_env={"STUDIO_TEST_CRASH_AFTER_COMMIT": CRASH_AT}).wait_ready()
        w2 = env.start_writer(lock_key=31).wait_ready()
        e = env.start_edge([w1, w2]).wait_ready()
        sse = h.SseClient(e.url + "/v1/stream?topic=crash")
        h.wait_until(lambda: sse.status, 10, "the SSE response head")
        h.check_eq(sse.status, 200, "stream status")

        failed = []  # events whose publish got no reply (the crash cut it off)
        for i in range(20):
            if not w1.alive():
                break
            lines = ['{"topic":"crash","data":{"w":1,"round":%d,"i":%d}}' % (i, k) for k in range(5)]
            try:
                p = h.publish_file(w1, lines, check=False, timeout=30)
            except subprocess.TimeoutExpired:  # no reply ever: counted like a refusal
                failed.append(i)
                continue
            if p.returncode != 0:
                failed.append(i)
        rc = w1.wait_exit(30)
        h.check_eq(rc, -signal.SIGKILL, "writer 1 killed itself with SIGKILL after commit %d" % CRASH_AT)
        h.check(failed, "a publish to writer 1 went unanswered")
        rounds = h.psql(env.dsn, "SELECT DISTINCT (data->>'round')::int FROM broker_event "
                                 "WHERE topic = 'crash' AND (data->>'w')::int = 1")
        stored_rounds = sorted(int(r[0]) for r in rounds)
        h.check(failed[0] in stored_rounds,
                "the unanswered round %d was committed before the kill (stored rounds %s)" % (failed[0], stored_rounds))
        h.log("figures: writer 1 died at round %d; rounds stored %s" % (failed[0], stored_rounds))

        # The second writer goes on; its first batch reveals the gap to the edge.
        for i in range(10):
            h.publish(w2, "crash", data='{"w":2,"i":%d}' % i)
        # The first one comes back (same flags, no crash hook) and publishes too.
        w1b = env.start_writer(name="writer1-restarted", **dict(w1.flags)).wait_ready()
        for i in range(10):
            h.publish(w1b, "crash", data='{"w":3,"i":%d}' % i)

        rows = h.db_events(env.dsn, ["crash"])
        sse.wait_items(len(rows), 60)
        h.check_items_match_rows(sse.items(), rows, "stream across the crash")
        fills = h.metric(e.url, "studio_gap_fills_total")
        h.log("figures: %d rows, studio_gap_fills_total = %s" % (len(rows), fills))
        h.check(fills is not None and fills >= 1, "the edge counted a gap fill (%s)" % fills)
        sse.close()
        for p in (e, w2, w1b):
            h.check_eq(p.stop(), 0, "%s exit status on SIGTERM" % p.name)


if __name__ == "__main__":
    t.main()
