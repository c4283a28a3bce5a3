"""ingest: a REQ resend never stores an event twice (docs/writer.md "Request
slots, resends").  A resend is the same request id with the same bytes; these
cases put exactly the bytes a req0 socket sends on real nng sockets
(tests/tools/nngreq: --request-id uses a raw req0 socket with a chosen id,
--contexts sends from several contexts of one socket), with unkeyed events,
so no idempotency key helps."""
import subprocess
import time

import harness as h

t = h.Tests()


def nngreq_lines(url, payload, *args, timeout_ms=15000):
    """Runs nngreq with extra args; returns (rc, [reply per line], stderr)."""
    p = subprocess.run([h.program("nngreq", h.TOOLS_DIR), "--timeout-ms", str(timeout_ms)] + list(args) + [url],
                       input=payload, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout_ms / 1000.0 + 30)
    lines = [h.json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
    return p.returncode, lines, p.stderr.decode(errors="replace").strip()


def rows(env, topic):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = '%s'" % topic))


def settle(env, w):
    """Anything a resend wrongly added is committed once a later request is."""
    r = h.request(w, {"topic": "settle"}, timeout_ms=15000)
    h.check(r.get("ok") is True, "a later request is accepted: %r" % (r,))


@t.case
def a_resend_after_the_answer_gets_the_same_answer():
    # The reply was lost on the way (REQ never saw it), so REQ resends the
    # request after it was answered: same request id, same bytes.  Twice on
    # the same connection, then once more on a new connection.
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        payload = h.mp_pack({"topic": "late", "data": "{\"n\":1}"})
        rc, reps, err = nngreq_lines(w.ingest, payload, "--request-id", "1234", "--repeat", "2")
        h.check_eq(rc, 0, "nngreq exit (%s)" % err)
        h.check_eq(len(reps), 2, "two replies on one connection")
        h.check(reps[0].get("ok") is True, "first answer: %r" % (reps[0],))
        h.check_eq(reps[1], reps[0], "the resend on the same connection gets the first answer")
        rc, reps2, err = nngreq_lines(w.ingest, payload, "--request-id", "1234")
        h.check_eq(rc, 0, "nngreq exit, new connection (%s)" % err)
        h.check_eq(reps2, [reps[0]], "the resend on a new connection gets the first answer")
        # the same bytes under another request id are another request
        rc, reps3, err = nngreq_lines(w.ingest, payload, "--request-id", "1235")
        h.check_eq(rc, 0, "nngreq exit, other id (%s)" % err)
        h.check(reps3[0].get("ok") is True and reps3[0]["seqs"] != reps[0]["seqs"],
                "another request id with the same bytes is a new request: %r vs %r" % (reps3, reps))
        settle(env, w)
        h.check_eq(rows(env, "late"), 2, "rows stored: the request once, the other id once")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def a_resend_on_a_new_connection_while_pending():
    # The producer's connection drops while its request waits for the commit;
    # REQ resends on its new connection (a new pipe).  The writer must answer
    # the resend with the original's seqs and store the event once.
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=3000).wait_ready()
        h.request(w, {"topic": "warmup"}, timeout_ms=15000)  # the next tick is ~3 s away
        payload = h.mp_pack({"topic": "moved", "data": "[1,2,3]"})
        first = subprocess.Popen([h.program("nngreq", h.TOOLS_DIR), "--timeout-ms", "300", "--request-id", "77",
                                  w.ingest], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = first.communicate(payload, timeout=30)
        h.check_eq(first.returncode, 3, "the first connection gave up before the commit (%s %s)"
                   % (out.decode().strip(), err.decode().strip()))
        t0 = time.monotonic()
        rc, reps, err = nngreq_lines(w.ingest, payload, "--request-id", "77")
        h.log("FIGURE resend on a new connection answered after %.1f s" % (time.monotonic() - t0))
        h.check_eq(rc, 0, "the resend got an answer (%s)" % err)
        h.check(reps[0].get("ok") is True and len(reps[0]["seqs"]) == 1, "answer: %r" % (reps,))
        settle(env, w)
        stored = h.psql(env.dsn, "SELECT seq FROM broker_event WHERE topic = 'moved'")
        h.check_eq(stored, [(str(reps[0]["seqs"][0]),)], "the event stored once, under the seq answered")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def identical_requests_from_two_contexts_are_two_requests():
    # Two different requests (two contexts of one socket: one connection, two
    # request ids) with identical bytes: both are stored and both answered at
    # once, without waiting for a resend (resending is off here).
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        payload = h.mp_pack({"topic": "twins"})
        t0 = time.monotonic()
        rc, reps, err = nngreq_lines(w.ingest, payload, "--contexts", "2", timeout_ms=10000)
        waited = time.monotonic() - t0
        h.check_eq(rc, 0, "both contexts answered (%s) %r" % (err, reps))
        h.check(all(r.get("ok") is True for r in reps), "answers: %r" % (reps,))
        h.check(reps[0]["seqs"] != reps[1]["seqs"], "two requests, two seqs: %r" % (reps,))
        h.log("FIGURE two identical requests answered in %.2f s" % waited)
        settle(env, w)
        h.check_eq(rows(env, "twins"), 2, "rows stored for two identical requests")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def a_resend_while_pending_same_connection_is_dropped():
    # The classic: REQ's resend timer fires while the request waits for the
    # commit (same connection).  Stored once, answered once.
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=2000).wait_ready()
        payload = h.mp_pack({"topic": "timer", "data": "true"})
        rc, reps, err = nngreq_lines(w.ingest, payload, "--resend-ms", "100", timeout_ms=15000)
        h.check_eq(rc, 0, "answer (%s)" % err)
        h.check(reps[0].get("ok") is True, "answer: %r" % (reps,))
        settle(env, w)
        h.check_eq(rows(env, "timer"), 1, "rows stored for a request resent every 100 ms")
        h.check_eq(w.stop(), 0, "writer exit status")


if __name__ == "__main__":
    t.main()
