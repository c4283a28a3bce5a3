"""A drain's first requests are refused as draining, never not_ready (issue
21, item 7; docs/api.md "Operations": SSE 200 + reconnect draining,
NDJSON/JSON-seq 503 problem saying draining).

The edge's readiness turned false at the drain at once, but each worker's
registry learns of the drain through its mailbox a moment later; a request
answered in between was refused as not_ready, which tells a client the edge
is starting, not leaving.  Here K connections each have all of a stream
request but its last byte sent; SIGTERM goes to the edge in the middle of
sending those last bytes, so requests land before, at and after the drain.
Every answer must be a stream that was open (it then gets reconnect
draining), or a refusal saying draining: no not_ready at all.  (A request
the edge had not read when it exited, which it does as soon as no stream is
left, is cut without an answer: counted as unanswered, not judged here.)  Rounds with a
fresh edge each, since one edge drains once.
"""

import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
# --threads 2: each worker's loop answers requests while main's signal handler drains, so the window
# between the two is wide enough to hit (measured before the fix: 17 % of the answers were not_ready;
# with --threads 1 the mailbox runs on the same loop and the window is rarely hit).
THREADS = max(2, int(os.environ.get("STUDIO_THREADS", "2") or 2))
K = int(os.environ.get("DRAIN_K", "200"))
ROUNDS = int(os.environ.get("DRAIN_ROUNDS", "4"))
# More rounds, up to this many, while none has seen a request answered during the drain: on a loaded
# machine an edge can find no stream open yet at the signal and exit before reading any request.
ROUNDS_MAX = 3 * ROUNDS


def classify(fmt, raw):
    """(kind, detail) of one whole response: kind is 'open-draining' (a stream that was open and got
    reconnect draining), 'refused-<reason>' or 'other'."""
    if not raw.startswith(b"HTTP/"):
        # reset or closed unanswered: the edge exits as soon as no stream is left, and requests it had
        # not read by then are cut (not what this test is about; counted and printed)
        return "unanswered", raw[:80].decode("latin-1", "replace")
    head, _, body = raw.partition(b"\r\n\r\n")
    first = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    status = first.split(" ")[1] if len(first.split(" ")) > 1 else "?"
    text = body.decode("utf-8", "replace")
    if status == "200":
        # Substring checks need no de-chunking.  An open stream first tells its position (SSE "id: P",
        # NDJSON a heartbeat with "id"); a refusal is one reconnect envelope, which has no id.
        reasons = [r for r in ("draining", "not_ready", "overloaded", "unavailable", "slow_consumer")
                   if '"reason":"%s"' % r in text]
        opened = "\nid: " in "\n" + text or '"id":"' in text
        kind = ("open-" if opened else "refused-") + (reasons[0] if reasons else "none")
        return kind, "%s %s" % (first, text[-160:])
    if status == "503":
        reason = "draining" if "draining" in text else ("not_ready" if "not ready" in text else "other503")
        return "refused-" + reason, "%s %s" % (first, text[:200])
    return "other", "%s %s" % (first, text[:200])


@t.case
def first_requests_of_a_drain_are_refused_as_draining():
    totals = {}
    bad = []
    with harness.Env() as env:
        writer = env.start_writer(flush_interval_ms=100)
        writer.wait_ready()
        for rnd in range(ROUNDS_MAX):
            if rnd >= ROUNDS and any("refused-draining" in k for k in totals):
                break
            edge = env.start_edge([writer], drain_grace_s=2, heartbeat_s=5, threads=THREADS)
            edge.wait_ready()
            port = sc.edge_port(edge)
            socks = []
            for i in range(K):
                fmt = "sse" if i % 2 == 0 else "ndjson"
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                req = ("GET /v1/stream?topic=dr.a&format=%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                       % fmt).encode()
                s.sendall(req[:-1])
                socks.append((fmt, s, req[-1:]))
            # the edge holds K half-sent requests; the last bytes go around the signal
            # A request whose last byte cannot go out any more (the edge had no stream left, so it
            # exited, and reset the connection it had not read): unanswered, like one it never read.
            # On a loaded machine it can exit before the test sends the bytes after the signal.
            cut = set()
            for j, (fmt, s, last) in enumerate(socks):
                if j == K // 3:
                    edge.signal(signal.SIGTERM)
                try:
                    s.sendall(last)
                except OSError as e:
                    cut.add(j)
                    log("round %d: request %d's last byte not sent: %s" % (rnd, j, e))
            counts = {}
            for j, (fmt, s, _) in enumerate(socks):
                buf = bytearray()
                s.settimeout(30)
                try:
                    while j not in cut:
                        b = s.recv(65536)
                        if not b:
                            break
                        buf += b
                except OSError as e:
                    buf += ("<%s>" % e).encode()
                s.close()
                kind, detail = classify(fmt, bytes(buf))
                counts[fmt + ":" + kind] = counts.get(fmt + ":" + kind, 0) + 1
                if kind not in ("open-draining", "refused-draining", "unanswered"):
                    bad.append((rnd, fmt, kind, detail))
            code = edge.wait_exit(30)
            log("FIGURE round %d threads=%d answers %s exit %s" % (rnd, THREADS, counts, code))
            check_eq(code, 0, "round %d: edge exit status" % rnd)
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
    log("FIGURE totals %s" % totals)
    check(sum(v for k, v in totals.items() if "refused-draining" in k) > 0,
          "precondition: some requests were answered during the drain: %s" % totals)
    check_eq(bad[:5], [], "answers other than an open stream told draining or a refusal saying draining "
             "(%d of %d)" % (len(bad), sum(totals.values())))


t.main()
