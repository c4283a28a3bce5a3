# ctest-labels: browser
"""A real browser's EventSource with a cookie, across origins, under access control.

Headless Chromium loads browser/page.html from its own origin (a tiny
http.server on 127.0.0.1, another port than the edge's); the page's answer
sets the cookie studio_token (an HS256 token covering the test topic) for
the host.  The page opens `new EventSource(edge_url, {withCredentials:
true})`: the browser sends the cookie only because of withCredentials, and
hands the stream to the page only if the edge answers with
Access-Control-Allow-Origin equal to the page's origin and
Access-Control-Allow-Credentials: true.  The ids the page collects must be
exactly the table's rows on the topic from the first one it saw.

A second page without withCredentials sends no cookie: the edge refuses it
(401, counted as missing) and the page sees nothing.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "browser"))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402
import driver  # noqa: E402
import tokens  # noqa: E402

t = harness.Tests()
rc = 1
TOPIC = "acct/7"


b64u, hs256 = tokens.b64u, tokens.hs256


with harness.Env() as env:
    secret = os.urandom(32)
    jwks = os.path.join(env.tmp, "jwks.json")
    with open(jwks, "w") as f:
        json.dump({"keys": [{"kty": "oct", "kid": "web", "alg": "HS256", "k": b64u(secret)}]}, f)
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()
    page = driver.PageServer()

    @t.case
    def eventsource_with_credentials_streams_across_origins():
        check(os.path.exists(driver.CHROMIUM), "chromium is installed at %s" % driver.CHROMIUM)
        edge = env.start_edge([writer], auth_keys=jwks, cors_origins=page.origin, heartbeat_s=2)
        edge.wait_ready()
        port = sc.edge_port(edge)
        tok = hs256(secret, "web", {"exp": int(time.time()) + 600, "topics": ["acct/*"]})
        # Host-only cookie for 127.0.0.1 (cookies ignore ports): same site, other origin.
        page.cookie = "studio_token=%s; Path=/; HttpOnly; SameSite=Lax" % tok
        src = "http://%s/v1/stream?topic=%s" % (edge.listen, TOPIC)
        b = driver.Browser(page.page_url(src, budget_ms=40000, credentials=True), logdir=env.tmp)
        flow = sc.PublishFlow(writer, TOPIC, "acct/8", 0.1)
        try:
            harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 1.0,
                               30, "the browser's stream open on the edge",
                               detail=lambda: b.log_tail())
            flow.start()
            time.sleep(2.0)
            flow.finish()
            rows = [r[0] for r in sc.table_rows(env.dsn, [TOPIC])]
            page.target = rows[-1]
            check(page.done.wait(40), "the page reported its ids (chromium log tail:\n%s)" % b.log_tail())
        finally:
            flow.stop.set()
            b.close()
        r = page.result
        ids = r.get("ids", [])
        log("FIGURE browser with credentials: %d ids, %d errors, %d opens, why=%s" % (
            len(ids), r.get("errors"), r.get("opens"), r.get("why")))
        check_eq(r.get("why"), "target", "the page reached the last id")
        check_eq(r.get("others"), [], "no unexpected frames")
        check(ids and ids[0] in rows, "first id is a row")
        want = rows[rows.index(ids[0]):] if ids and ids[0] in rows else rows
        check(ids == want, "ids equal the table rows from the first one seen: no gap, no duplicate")
        m = sc.get_metrics(port)
        check_eq(sc.metric(m, "studio_auth_refused_total", reason="missing") or 0, 0,
                 "the browser sent its cookie (no request without a token)")

        # Without withCredentials the cookie stays home: 401, nothing for the page.
        page.done.clear()
        page.result = None
        page.target = None
        b = driver.Browser(page.page_url(src, budget_ms=3000), logdir=env.tmp)
        try:
            harness.wait_until(lambda: (sc.metric(sc.get_metrics(port), "studio_auth_refused_total",
                                                  reason="missing") or 0) >= 1,
                               30, "the page without credentials refused for a missing token")
            check(page.done.wait(30), "the second page reported")
        finally:
            b.close()
        check_eq(page.result.get("ids"), [], "no item without credentials")
        check_eq(page.result.get("opens"), 0, "no stream opened without credentials")

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
    finally:
        page.close()
sys.exit(rc)
