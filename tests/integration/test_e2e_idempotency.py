"""e2e: an idempotency key stores an event once; every retry, same request or
not, through the same writer or another replica, gets the seq stored first."""
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


@t.case
def same_key_to_two_replicas_at_once():
    with h.Env() as env:
        w1 = env.start_writer(lock_key=77).wait_ready()
        w2 = env.start_writer(lock_key=77).wait_ready()
        payload = h.mp_pack({"topic": "idem2", "data": '{"x":1}', "key": "race"})
        seqs = set()
        for rnd in range(10):
            payload = h.mp_pack({"topic": "idem2", "data": '{"x":%d}' % rnd, "key": "race%d" % rnd})
            procs = [subprocess.Popen([h.program("nngreq", h.TOOLS_DIR), u.ingest], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for u in (w1, w2, w1, w2)]
            outs = [p.communicate(payload, timeout=30) for p in procs]
            got = set()
            for p, (out, err) in zip(procs, outs):
                h.check_eq(p.returncode, 0, "nngreq exit (%s)" % err.decode().strip())
                rep = h.json.loads(out)
                h.check(rep.get("ok") is True, "reply %r" % (rep,))
                got.add(rep["seqs"][0])
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
