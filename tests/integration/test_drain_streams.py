"""Drain of an edge-gateway (docs/api.md "Operations", ADR-WEB-ADV-001
"Every stream is in a registry, and shutdown drains it").

2,000 open SSE streams (tests/tools/streamload), SIGTERM with
--drain-grace-s 10: /readyz turns 503 at once, new streams are refused
(SSE: 200 + reconnect draining; NDJSON/json-seq: 503 with Retry-After), every stream gets reconnect (reason draining) before its end,
the retry hints are spread over the grace, and the process exits 0 within
the grace plus a second.  Then the same through studioctl drain --control.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

N = 2000
GRACE = 10
t = harness.Tests()
rc = 1

with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()

    @t.case
    def sigterm_drains_2000_streams():
        edge = env.start_edge([writer], drain_grace_s=GRACE, heartbeat_s=5)
        edge.wait_ready()
        port = sc.edge_port(edge)
        load = sc.Streamload(port, "/v1/stream?topic=d.a", N, env.tmp, rate=500,
                             timeout_s=GRACE + 60)
        load.wait_ready(60)
        # One stalled client whose socket is full: its reconnect may not be
        # writable, so the drain may last up to the grace (then it is closed).
        stalled = sc.StreamClient(port, "/v1/stream?topic=d.big", stall=True, rcvbuf=4096)
        sc.run_clients([stalled], 0.5)
        sc.publish_batch(writer, [{"topic": "d.big", "about": [], "data": '{"p":"%s"}' % ("q" * 2000)}] * 500)
        seqs = sc.publish_batch(writer, [{"topic": "d.a", "about": [], "data": '{"x":1}'}] * 3)
        m = sc.get_metrics(port)
        fails = []

        def soft(cond, msg):
            log(("PASS " if cond else "FAIL ") + msg)
            if not cond:
                fails.append(msg)

        def soft_eq(a, b, msg):
            soft(a == b, "%s: got %r, expected %r" % (msg, a, b))
        log("FIGURE streams open before SIGTERM: %s" % sc.metric(m, "studio_streams_open"))
        soft_eq(sc.metric(m, "studio_streams_open"), float(N + 1), "studio_streams_open")
        time.sleep(1.0)   # let the 3 items reach every stream
        t_sig = time.monotonic()
        edge.signal(signal.SIGTERM)
        # The signal is handled asynchronously: poll /readyz (each request
        # timestamped when sent) until it answers 503; then a new stream.
        last200 = None
        ready503 = None
        while ready503 is None and time.monotonic() < t_sig + 3 and edge.alive():
            ts = time.monotonic()
            rz = sc.fetch(port, "/readyz", timeout=2)
            if rz.status == 200:
                last200 = ts
            elif rz.status == 503:
                ready503 = ts
        c = sc.fetch(port, "/v1/stream?topic=d.a", timeout=5)
        cn = sc.fetch(port, "/v1/stream?topic=d.a&format=ndjson", timeout=5)
        soft(ready503 is not None, "/readyz turned 503 after SIGTERM")
        soft_eq(sc.check_refusal(c, "sse", "draining", 503), [],
                "a new SSE stream while draining -> 200 + reconnect draining")
        soft_eq(sc.check_refusal(cn, "ndjson", "draining", 503), [],
                "a new NDJSON stream while draining -> 503 problem with Retry-After")
        code = edge.wait_exit(GRACE + 5)
        t_exit = time.monotonic() - t_sig
        stalled.unstall()
        sc.run_clients([stalled], 10)
        log("FIGURE the stalled stream: outcome %s after %d items" % (stalled.outcome, stalled.n_items))
        soft(stalled.done and stalled.outcome in ("abrupt_close", "reconnect"),
             "the stream still open after the grace was closed (%s)" % stalled.outcome)
        soft_eq(sc.check_envelopes(stalled), [], "what the stalled stream got is well formed")
        r = load.result(30)
        retries = r.pop("retry_ms")
        log("FIGURE streamload: %s" % r)
        log("FIGURE exit %.2f s after SIGTERM (code %s); /readyz last 200 sent at %s s, first 503 at %s s; "
            "first reconnect received %.3f s, last %.3f s after SIGTERM" % (
                t_exit, code, last200 and round(last200 - t_sig, 3), ready503 and round(ready503 - t_sig, 3),
                r["t_terminal_min"] - t_sig, r["t_terminal_max"] - t_sig))
        soft(last200 is None or last200 < r["t_terminal_min"],
             "/readyz turns 503 first: no 200 for a request sent after the first reconnect arrived")
        soft_eq(code, 0, "exit status")
        soft(t_exit <= GRACE + 1.0, "exit within the grace plus a second (%.2f s)" % t_exit)
        soft_eq(r["status"], {"200": N}, "every stream was open")
        soft_eq(r["outcomes"]["reconnect"], N, "every stream got reconnect")
        soft_eq(r["reasons"], {"draining": N}, "reason draining")
        soft_eq(r["outcomes"]["abrupt_close"], 0, "no stream was cut before its reconnect")
        soft_eq((r["frames_after_terminal"], r["parse_errors"], r["id_regressions"]), (0, 0, 0),
                 "well-formed streams")
        soft_eq(r["items_min"], 3, "every stream had its 3 items before the drain")
        soft(r["t_terminal_min"] >= t_sig, "reconnects only after the signal")
        # the distribution of the retry hints over the grace
        g = GRACE * 1000
        soft(all(isinstance(x, int) and 0 <= x <= g for x in retries), "every hint within [0, grace]")
        buckets = [0] * 10
        for x in retries:
            buckets[min(9, x * 10 // g)] += 1
        cover = (max(retries) - min(retries)) / g
        log("FIGURE retry_ms min %d max %d cover %.0f%% buckets(10%%) %s" % (
            min(retries), max(retries), cover * 100, buckets))
        soft(cover >= 0.8, "hints cover at least 80% of the grace range")
        soft(max(buckets) <= 0.25 * N, "no 10% bucket holds more than 25% of the hints")
        soft(sorted(set(retries)) != [retries[0]], "hints are not all equal")
        check(not fails, "%d checks failed: %s" % (len(fails), "; ".join(fails)))

    @t.case
    def studioctl_drain_via_control():
        edge = env.start_edge([writer], drain_grace_s=3, heartbeat_s=5)
        edge.wait_ready()
        port = sc.edge_port(edge)
        cs = [sc.StreamClient(port, "/v1/stream?topic=d.b&format=%s" % f)
              for f in ("sse", "ndjson", "json-seq") for _ in range(10)]
        sc.run_until_open(cs)
        check(all(c.status == 200 for c in cs), "30 streams open: statuses %r" % sorted({c.status for c in cs}, key=str))
        p = harness.studioctl("drain", "--control", edge.control, timeout=20)
        check_eq(p.returncode, 0, "studioctl drain exit status: %s %s" % (p.stdout, p.stderr))
        st, _, _ = harness.http_get(edge.url + "/readyz", timeout=5)
        check_eq(st, 503, "/readyz after the drain command")
        n = sc.fetch(port, "/v1/stream?topic=d.b", timeout=5)
        check_eq(sc.check_refusal(n, "sse", "draining", 503), [],
                 "new SSE stream after the drain command -> 200 + reconnect draining")
        n = sc.fetch(port, "/v1/stream?topic=d.b&format=json-seq", timeout=5)
        check_eq(sc.check_refusal(n, "json-seq", "draining", 503), [],
                 "new json-seq stream after the drain command -> 503")
        sc.run_clients(cs, 6)
        fmts = ["sse"] * 10 + ["ndjson"] * 10 + ["json-seq"] * 10
        for c, f in zip(cs, fmts):
            check_eq(sc.check_envelopes(c, f), [], "%s well formed" % f)
            check_eq((c.outcome, c.terminal["env"].get("reason") if c.terminal else None),
                     ("reconnect", "draining"), "%s stream got reconnect draining" % f)
        log("FIGURE edge alive after drain command + grace: %s" % edge.alive())

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
sys.exit(rc)
