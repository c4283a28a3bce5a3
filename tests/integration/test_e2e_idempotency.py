"""e2e: an idempotency key stores an event once per topic; every retry, same
request or not, through the same writer or another replica, gets the seq
stored first.  The same key on another topic is another event (issue 24
item 3: a key squatted on junk/x must not swallow the event on payments/777)."""
import subprocess
import time

import harness as h

t = h.Tests()


def rows_with_key(env, key):
    return h.psql(env.dsn, "SELECT seq, data::text FROM broker_event WHERE key = '%s' ORDER BY seq" % key)


@t.case
def same_key_same_seq():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        e = env.start_edge([w]).wait_ready()
        sse = h.SseClient(e.url + "/v1/stream?topic=idem")
        h.wait_until(lambda: sse.status is not None, 10, "the SSE response head")
        h.check_eq(sse.status, 200, "stream status")

        r1 = h.request(w, {"topic": "idem", "data": "1", "key": "k1"})
        h.check(r1.get("ok") is True, "first publish: %r" % (r1,))
        s1 = r1["seqs"][0]
        r2 = h.request(w, {"topic": "idem", "data": "1", "key": "k1"})
        h.check_eq(r2, {"ok": True, "seqs": [s1]}, "the same request again")
        r3 = h.request(w, {"topic": "idem", "data": "2", "about": ["x"], "key": "k1"})
        h.check_eq(r3, {"ok": True, "seqs": [s1]}, "a different request with the same key")
        h.check_eq(rows_with_key(env, "k1"), [(str(s1), "1")], "rows with key k1")

        r4 = h.request(w, [{"topic": "idem", "data": "3", "key": "k2"},
                           {"topic": "idem", "data": "4", "key": "k2"},
                           {"topic": "idem", "data": "5", "key": "k1"},
                           {"topic": "idem", "data": "6"}])
        h.check(r4.get("ok") is True and len(r4["seqs"]) == 4, "batch with repeated keys: %r" % (r4,))
        a, b, c, d = r4["seqs"]
        h.check_eq(a, b, "a key repeated inside one batch gets one seq")
        h.check_eq(c, s1, "an old key inside a batch gets the old seq")
        h.check(d > a > s1, "fresh events get fresh seqs: %r" % (r4["seqs"],))
        h.check_eq(rows_with_key(env, "k2"), [(str(a), "3")], "rows with key k2 (the first one wins)")
        h.check_eq(h.publish(w, "idem", data=7, key="k3"), h.publish(w, "idem", data=8, key="k3"),
                   "harness publish with a key, twice")

        rows = h.db_events(env.dsn, ["idem"])
        h.check_eq(len(rows), 4, "rows stored: k1, k2, the keyless one, k3")
        sse.wait_items(len(rows), 30)
        h.check_items_match_rows(sse.items(), rows, "stream of topic idem")
        sse.close()


def key_rows(env, key):
    """(seq, topic, data) of the stored rows with this key, in seq order."""
    return [(int(a), b, c) for a, b, c in
            h.psql(env.dsn, "SELECT seq, topic, data::text FROM broker_event WHERE key = '%s' ORDER BY seq" % key)]


def send_at_once(jobs):
    """Sends every (writer, event) at the same time (one nngreq each); returns their replies in order."""
    procs = [subprocess.Popen([h.program("nngreq", h.TOOLS_DIR), w.ingest], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for w, _ in jobs]
    # every payload first: communicate() one after the other would send the next only after the
    # previous reply, i.e. after its flush
    for p, (_, ev) in zip(procs, jobs):
        p.stdin.write(h.mp_pack(ev))
        p.stdin.close()
    outs = [(p.stdout.read(), p.stderr.read(), p.wait(30)) for p in procs]
    outs = [(o, e) for o, e, _ in outs]
    replies = []
    for p, (out, err) in zip(procs, outs):
        h.check_eq(p.returncode, 0, "nngreq exit (%s)" % err.decode().strip())
        rep = h.json.loads(out)
        h.check(rep.get("ok") is True and len(rep.get("seqs", [])) == 1, "reply %r" % (rep,))
        replies.append(rep["seqs"][0])
    return replies


@t.case
def key_squatting_across_topics_stores_both_events():
    """A peer publishes pay-777 on junk/x first; the real event with key
    pay-777 on payments/777 is another event: stored, with its own seq, and
    streamed to payments/777.  Also when both arrive in one request, in one
    flush, and at two writers at once; the same (topic, key) still stores once."""
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=1500).wait_ready()
        e = env.start_edge([w]).wait_ready()
        sse = h.SseClient(e.url + "/v1/stream?topic=payments/777")
        h.wait_until(lambda: sse.status is not None, 10, "the SSE response head")
        h.check_eq(sse.status, 200, "stream status")

        # separate flushes: the squatter's row is committed first
        squat = h.request(w, {"topic": "junk/x", "data": '"squat"', "key": "pay-777"})
        h.check(squat.get("ok") is True, "squatter's publish: %r" % (squat,))
        s_junk = squat["seqs"][0]
        real = h.request(w, {"topic": "payments/777", "data": '{"amount":777}', "key": "pay-777"})
        h.check(real.get("ok") is True, "real publish: %r" % (real,))
        s_pay = real["seqs"][0]
        h.check(s_pay != s_junk, "the event on payments/777 gets its own seq, not the squatter's: %d vs %d"
                % (s_pay, s_junk))
        h.check_eq(key_rows(env, "pay-777"), [(s_junk, "junk/x", '"squat"'), (s_pay, "payments/777",
                                                                              '{"amount":777}')],
                   "rows with key pay-777")
        h.check_eq(h.request(w, {"topic": "payments/777", "data": '{"amount":1}', "key": "pay-777"}),
                   {"ok": True, "seqs": [s_pay]}, "a resend on payments/777 gets the seq stored on payments/777")
        h.check_eq(h.request(w, {"topic": "junk/x", "data": '"again"', "key": "pay-777"}),
                   {"ok": True, "seqs": [s_junk]}, "a resend on junk/x gets the seq stored on junk/x")
        sse.wait_items(1, 30)
        h.check_items_match_rows(sse.items()[:1], h.db_events(env.dsn, ["payments/777"]),
                                 "the payments/777 stream carries the real event")

        # one request: the same key on two topics is two rows; repeated on one topic, one
        r = h.request(w, [{"topic": "junk/y", "data": "1", "key": "pay-778"},
                          {"topic": "payments/778", "data": "2", "key": "pay-778"},
                          {"topic": "payments/778", "data": "3", "key": "pay-778"},
                          {"topic": "junk/y", "data": "4", "key": "pay-778"}])
        h.check(r.get("ok") is True and len(r["seqs"]) == 4, "one request: %r" % (r,))
        a, b, c, d = r["seqs"]
        h.check(a != b, "one request: another topic, another seq: %r" % (r["seqs"],))
        h.check(c == b and d == a, "one request: the same (topic, key) folds: %r" % (r["seqs"],))
        h.check_eq(key_rows(env, "pay-778"), [(a, "junk/y", "1"), (b, "payments/778", "2")], "rows with key pay-778")

        # one flush, two requests: retried with a new key until both landed in the same flush (same created_at)
        same_flush = False
        for rnd in range(5):
            k = "pay-779-%d" % rnd
            s1, s2, s3 = send_at_once([(w, {"topic": "junk/z", "data": "1", "key": k}),
                                       (w, {"topic": "payments/779", "data": "2", "key": k}),
                                       (w, {"topic": "payments/779", "data": "3", "key": k})])
            h.check(s1 != s2 and s2 == s3, "round %d: seqs %r (another topic another seq, the same topic one)"
                    % (rnd, (s1, s2, s3)))
            h.check_eq([(x[0], x[1]) for x in key_rows(env, k)], sorted([(s1, "junk/z"), (s2, "payments/779")]),
                       "round %d: rows with key %s" % (rnd, k))
            times = [r[0] for r in h.psql(env.dsn, "SELECT created_at FROM broker_event WHERE key = '%s'" % k)]
            h.log("round %d: seqs %r, created_at %r" % (rnd, (s1, s2, s3), times))
            if len(set(times)) == 1:
                same_flush = True
                break
        h.check(same_flush, "some round put both topics' events into one flush (created_at of the last: %r)"
                % (times,))
        sse.close()

        # two writers at once: the database's unique index on (topic, key) decides
        w1 = env.start_writer(lock_key=79).wait_ready()
        w2 = env.start_writer(lock_key=79).wait_ready()
        for rnd in range(5):
            k = "pay-780-%d" % rnd
            junk = {"topic": "junk/w", "data": "1", "key": k}
            pay = {"topic": "payments/780", "data": "2", "key": k}
            j1, p2, p1, j2 = send_at_once([(w1, junk), (w2, pay), (w1, pay), (w2, junk)])
            h.check(j1 == j2 and p1 == p2 and j1 != p1, "round %d: two writers: junk %r, payments %r"
                    % (rnd, (j1, j2), (p1, p2)))
            h.check_eq([(x[0], x[1]) for x in key_rows(env, k)], sorted([(j1, "junk/w"), (p1, "payments/780")]),
                       "round %d: rows with key %s" % (rnd, k))
        h.check_eq(w1.stop(), 0, "writer 1 exit status")
        h.check_eq(w2.stop(), 0, "writer 2 exit status")


@t.case
def same_key_to_two_replicas_at_once():
    with h.Env() as env:
        w1 = env.start_writer(lock_key=77).wait_ready()
        w2 = env.start_writer(lock_key=77).wait_ready()
        seqs = set()
        for rnd in range(10):
            ev = {"topic": "idem2", "data": '{"x":%d}' % rnd, "key": "race%d" % rnd}
            # all four at once (send_at_once): communicate() in turn sent each after the previous reply
            got = set(send_at_once([(u, ev) for u in (w1, w2, w1, w2)]))
            h.check_eq(len(got), 1, "round %d: one seq for one key across replicas (%r)" % (rnd, got))
            seqs |= got
        n = int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = 'idem2'"))
        h.check_eq(n, 10, "rows stored for 10 keys sent 4 times each")
        h.check_eq(w1.stop(), 0, "writer 1 exit status")
        h.check_eq(w2.stop(), 0, "writer 2 exit status")


@t.case
def a_req_resend_is_not_a_second_request():
    # nng REQ resends a request it has no answer for (NNG_OPT_REQ_RESENDTIME).
    # A resend of a request still waiting for its commit must not be stored
    # again, nor refused while the original commits: the writer drops it and
    # the original's reply answers it.  Unkeyed, so no idempotency key helps.
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=3000).wait_ready()
        ev = {"topic": "resend", "data": "{\"once\":true}"}
        t0 = time.monotonic()
        rc, reply, out, err = h.nngreq(w.ingest, h.mp_pack(ev), timeout_ms=15000, resend_ms=150)
        waited = time.monotonic() - t0
        h.check_eq(rc, 0, "reply received (%s %s)" % (out.strip(), err.strip()))
        h.check(reply.get("ok") is True and len(reply.get("seqs", [])) == 1, "one ok reply: %r" % reply)
        time.sleep(3.5)  # one more flush: anything a resend added would be stored now
        n = int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = 'resend'"))
        h.log("FIGURE reply after %.1f s with REQ resending every 150 ms; rows stored: %d" % (waited, n))
        h.check(waited > 0.5, "the reply waited for the commit, so REQ did resend meanwhile")
        h.check_eq(n, 1, "the event is stored once")


if __name__ == "__main__":
    t.main()
