# ctest-labels: browser
"""The JavaScript stream client (clients/js) against the real system, in Node
and in headless Chromium at the same time.

Every case runs the same scenario (js/scenario.mjs) in several clients at
once: Node 20 (NDJSON over fetch), Chromium with fetch (SSE, headers) and,
where the case applies to it, Chromium with EventSource (SSE, cookies,
?last_event_id=).  The Python side starts PostgreSQL, a writer and edges,
publishes, drains, kills, and compares what each client delivered with the
table's rows.

- drain_and_kill_lose_nothing: two edges; the clients start on the first;
  it drains (SIGTERM: `reconnect draining`) and they move to the second,
  which is then SIGKILLed (a cut without a terminal envelope) while the
  first is back: every client's ids equal the rows after its start, no gap,
  no duplicate (and the client dropped none as a duplicate either).
- token_expiry_loses_nothing: tokens live 3 s; the edge ends each stream
  with `reconnect token_expired`; the token provider is asked again and the
  ids still equal the rows.
- complete_and_failure_end_for_good: `until=head` ends in `complete`, a bad
  topic in a 400 failure, a token without the topic in a 403 failure; each
  client made exactly one connection in an observation window after the end,
  and the Node processes exit by themselves (no reconnection timer left).
- resync_calls_back_once: a last id 30 events back on an edge with
  --replay-cap 5 gives one `resync replay_cap`; the callback runs once and
  the live items after its id follow without a gap.
- fresh_subscription_cut_before_first_item_loses_nothing (issue 22, 8):
  clients without a last id open on an edge, which tells them its position
  P (the fetch clients report it as their lastEventId; EventSource keeps it
  to itself); the edge is SIGKILLed before any item, events are published
  while it is down, it comes back on the same address: every client gets
  every event after P.  A Node and a Chromium client whose onItem throws
  once (6) and whose onOpen/onOutcome always throw (7) lose and repeat
  nothing either.
- stopped_edge_is_cut_by_the_headers_timeout (9): an edge SIGSTOPped
  before the clients connect (the kernel accepts, nothing answers): each
  client leaves `connecting` with outcome cut "no response headers".
- complete_and_failure_end_for_good also has an EventSource client whose
  last id is beyond the head: the GET is a 400 (a HEAD answered 200 and the
  client looped), and onFailure gets the problem's detail.
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "browser"))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402
import driver  # noqa: E402
import tokens  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CLIENT_DIR = os.path.join(ROOT, "clients", "js")
JS_DIR = os.path.join(HERE, "js")
NODE = "/usr/bin/node"
TOPIC = "js.acct/7"

t = harness.Tests()
rc = 1


class Reports:
    """Every report of every client, by client name, in arrival order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by = {}

    def add(self, r):
        with self.lock:
            self.by.setdefault(r.get("name"), []).append(r)

    def of(self, name, ev=None):
        with self.lock:
            return [r for r in self.by.get(name, []) if ev is None or r["ev"] == ev]

    def ids(self, name):
        return [i for r in self.of(name, "items") for i in r["ids"]]

    def end(self, name):
        e = self.of(name, "end")
        return e[0] if e else None

    def summary(self, names):
        out = []
        for n in names:
            ids = self.ids(n)
            out.append("%s: %d ids (last %s), opens %s, outcomes %s, end %s" % (
                n, len(ids), ids[-1:], [r["url"][-20:] for r in self.of(n, "open")],
                [(r["kind"], r["reason"] or r["status"] or r["error"]) for r in self.of(n, "outcome")],
                self.end(n)))
        return "\n".join(out)


class PageServer:
    """Serves the page, the scenario and the client module to Chromium, mints
    tokens (/token), says the target id (/target), takes reports (/report)."""

    def __init__(self, reports):
        self.reports = reports
        self.target = None
        self.mint = None   # () -> token text
        outer = self
        roots = {"/client/": CLIENT_DIR, "/js/": JS_DIR}

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path = urllib.parse.urlsplit(self.path).path
                if path == "/target":
                    t = outer.target
                    return self._send(200, "text/plain", b"" if t is None else str(t).encode())
                if path == "/token":
                    return self._send(200, "text/plain", outer.mint().encode())
                if path == "/page.html":
                    return self._file(os.path.join(JS_DIR, "page.html"), "text/html; charset=utf-8")
                for prefix, root in roots.items():
                    if path.startswith(prefix):
                        rel = os.path.normpath(path[len(prefix):])
                        if rel.startswith(".."):
                            break
                        return self._file(os.path.join(root, rel), "text/javascript; charset=utf-8")
                self._send(404, "text/plain", b"no")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(n, 64 << 20))
                if self.path == "/report":
                    for r in json.loads(body):
                        outer.reports.add(r)
                self._send(204, "text/plain", b"")

            def _file(self, p, ctype):
                try:
                    with open(p, "rb") as f:
                        return self._send(200, ctype, f.read())
                except OSError:
                    return self._send(404, "text/plain", b"no")

            def _send(self, code, ctype, body):
                driver.http_send(self, code, ctype, body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.origin = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def page_url(self, cfgs):
        return "%s/page.html?%s" % (self.origin, urllib.parse.urlencode({"cfg": json.dumps(cfgs)}))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class NodeClient:
    """node js/node_driver.mjs: reports on stdout, the target on stdin."""

    def __init__(self, cfg, reports, logdir):
        self.name = cfg["name"]
        self.err = open(os.path.join(logdir, "node-%s.log" % self.name), "wb")
        self.p = subprocess.Popen([NODE, os.path.join(JS_DIR, "node_driver.mjs"),
                                   os.path.join(CLIENT_DIR, "src", "index.js"), json.dumps(cfg)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.reports = reports
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                self.reports.add(json.loads(line))
            except ValueError:
                self.reports.add({"name": self.name, "ev": "garbage", "line": line[:200].decode("utf-8", "replace")})

    def target(self, seq):
        try:
            self.p.stdin.write(b"%d\n" % seq)
            self.p.stdin.flush()
        except OSError:
            pass

    def wait_exit(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)
        self.err.close()


def stream_url(edge):
    return edge.url + "/v1/stream"


class Clients:
    """Node clients and one Chromium page running the browser configs."""

    def __init__(self, env, page, reports, node_cfgs, browser_cfgs):
        self.page, self.reports = page, reports
        self.names = [c["name"] for c in node_cfgs + browser_cfgs]
        self.nodes = [NodeClient(c, reports, env.tmp) for c in node_cfgs]
        self.browser = driver.Browser(page.page_url(browser_cfgs), logdir=env.tmp) if browser_cfgs else None

    def detail(self):
        d = self.reports.summary(self.names)
        if self.browser:
            d += "\nchromium log tail:\n" + self.browser.log_tail(15)
        return d

    def wait(self, pred, timeout, what):
        harness.wait_until(lambda: all(pred(n) for n in self.names), timeout, what, interval=0.1,
                           detail=self.detail)

    def run_to_last_row(self, env, flow, after):
        """Stops the publisher, announces the last row on TOPIC as the target
        and waits until every client reached it; returns the rows after `after`."""
        flow.finish()
        rows = sc.table_rows(env.dsn, [TOPIC], after=after)
        self.set_target(rows[-1][0])
        self.wait(lambda n: self.reports.end(n), 60, "every client reached the last row")
        return rows

    def set_target(self, seq):
        self.page.target = seq
        for n in self.nodes:
            n.target(seq)

    def close(self):
        for n in self.nodes:
            n.close()
        if self.browser:
            self.browser.close()
        self.page.target = None


def opens_on(reports, name, edge):
    return [r for r in reports.of(name, "open") if r["url"] == stream_url(edge)]


def check_ids_equal_rows(reports, name, rows, after):
    ids = reports.ids(name)
    want = [r[0] for r in rows if r[0] > after]
    if ids != want:
        missing = sorted(set(want) - set(ids))
        extra = [i for i in ids if i not in set(want)]
        dups = len(ids) - len(set(ids))
        raise harness.TestFailure("%s: ids differ from the rows after %d: %d ids vs %d rows; missing %s; "
                                  "not rows %s; duplicates %d" % (name, after, len(ids), len(want),
                                                                  missing[:10], extra[:10], dups))
    log("%s: %d ids equal the rows after %d" % (name, len(ids), after))
    end = reports.end(name)
    check_eq(end["stats"]["duplicatesDropped"], 0, "%s: the edge sent no item twice" % name)


with harness.Env() as env:
    check(os.path.exists(NODE), "node is installed at %s" % NODE)
    check(os.path.exists(driver.CHROMIUM), "chromium is installed at %s" % driver.CHROMIUM)
    secret = os.urandom(32)
    jwks = os.path.join(env.tmp, "jwks.json")
    with open(jwks, "w") as f:
        json.dump({"keys": [{"kty": "oct", "kid": "web", "alg": "HS256", "k": tokens.b64u(secret)}]}, f)
    reports = Reports()
    page = PageServer(reports)
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()

    def edge(**flags):
        f = {"cors_origins": page.origin, "heartbeat_s": 1, "drain_grace_s": 2}
        f.update(flags)
        e = env.start_edge([writer], **f)
        e.wait_ready()
        return e

    def start_after():
        sc.publish_batch(writer, [{"topic": TOPIC, "data": {"start": 1}}])
        return sc.db_head(env.dsn)

    @t.case
    def drain_and_kill_lose_nothing():
        e1, e2 = edge(), edge()
        start = start_after()
        base = {"urls": [stream_url(e1), stream_url(e2)], "topics": [TOPIC], "lastEventId": start}
        cl = Clients(env, page, reports,
                     [dict(base, name="node-ndjson", format="ndjson")],
                     [dict(base, name="chromium-fetch", format="sse", transport="fetch"),
                      dict(base, name="chromium-eventsource", format="sse", transport="eventsource")])
        flow = sc.PublishFlow(writer, TOPIC, "js.other", 0.05)
        try:
            cl.wait(lambda n: opens_on(reports, n, e1), 60, "every client open on the first edge")
            flow.start()
            cl.wait(lambda n: len(reports.ids(n)) >= 20, 60, "20 items in every client")
            e1.signal(signal.SIGTERM)
            cl.wait(lambda n: opens_on(reports, n, e2), 60, "every client moved to the second edge")
            check_eq(e1.wait_stopped(30), 0, "the drained edge's exit status")
            e1b = env.start_edge([writer], listen=e1.listen, cors_origins=page.origin, heartbeat_s=1)
            e1b.wait_ready()
            n0 = {n: len(reports.ids(n)) for n in cl.names}
            cl.wait(lambda n: len(reports.ids(n)) >= n0[n] + 20, 60, "20 more items on the second edge")
            e2.kill()
            cl.wait(lambda n: len(opens_on(reports, n, e1)) >= 2, 60, "every client back on the first address")
            n1 = {n: len(reports.ids(n)) for n in cl.names}
            cl.wait(lambda n: len(reports.ids(n)) >= n1[n] + 20, 60, "20 more items after the kill")
            rows = cl.run_to_last_row(env, flow, start)
        finally:
            flow.stop.set()
            cl.close()
        for n in cl.names:
            check_ids_equal_rows(reports, n, rows, start)
            kinds = [(r["kind"], r["reason"]) for r in reports.of(n, "outcome")]
            check(("reconnect", "draining") in kinds, "%s saw reconnect draining: %s" % (n, kinds))
            check(any(k == "cut" for k, _ in kinds), "%s saw the cut of the killed edge: %s" % (n, kinds))
        log("FIGURE js drain+kill: %s" % "; ".join("%s %d ids %d connects" % (
            n, len(reports.ids(n)), reports.end(n)["stats"]["connects"]) for n in cl.names))
        e1b.stop()

    @t.case
    def token_expiry_loses_nothing():
        page.mint = lambda: tokens.hs256(secret, "web", {"exp": int(time.time()) + 3, "topics": ["js.acct/*"]})
        e3 = edge(auth_keys=jwks)
        start = start_after()
        base = {"urls": [stream_url(e3)], "topics": [TOPIC], "lastEventId": start}
        cl = Clients(env, page, reports,
                     [dict(base, name="node-token", format="ndjson", tokenUrl=page.origin + "/token")],
                     [dict(base, name="chromium-token", format="sse", transport="fetch", tokenUrl="/token")])
        flow = sc.PublishFlow(writer, TOPIC, "js.other", 0.05)
        expired = lambda n: [r for r in reports.of(n, "outcome") if r["reason"] == "token_expired"]  # noqa: E731
        try:
            cl.wait(lambda n: reports.of(n, "open"), 60, "every client open")
            flow.start()
            cl.wait(lambda n: len(expired(n)) >= 2, 60, "two token expiries in every client")
            rows = cl.run_to_last_row(env, flow, start)
        finally:
            flow.stop.set()
            cl.close()
        for n in cl.names:
            check_ids_equal_rows(reports, n, rows, start)
        refused = sc.metric(sc.get_metrics(sc.edge_port(e3)), "studio_auth_refused_total", reason="expired") or 0
        check_eq(refused, 0, "no request went out with an expired token")
        e3.stop()

    @t.case
    def complete_and_failure_end_for_good():
        page.mint = lambda: tokens.hs256(secret, "web", {"exp": int(time.time()) + 600, "topics": ["js.acct/*"]})
        e5 = edge()
        e6 = edge(auth_keys=jwks)
        start = start_after() - 1
        sc.publish_batch(writer, [{"topic": TOPIC, "data": {"n": i}} for i in range(10)])
        rows = sc.table_rows(env.dsn, [TOPIC], after=start)
        u5, u6 = [stream_url(e5)], [stream_url(e6)]
        obs = 1500
        done = dict(topics=[TOPIC], lastEventId=start, until="head", observeMs=obs)
        bad = dict(topics=["no spaces allowed"], observeMs=obs)
        scope = dict(topics=["elsewhere/1"], observeMs=obs)
        future = dict(topics=[TOPIC], lastEventId=sc.db_head(env.dsn) + 1000, observeMs=obs)
        nodes = [dict(done, name="node-complete", urls=u5, format="ndjson"),
                 dict(bad, name="node-400", urls=u5, format="ndjson"),
                 dict(scope, name="node-403", urls=u6, format="ndjson", tokenUrl=page.origin + "/token")]
        browsers = [dict(done, name="chromium-complete", urls=u5, transport="fetch"),
                    dict(done, name="chromium-es-complete", urls=u5, transport="eventsource"),
                    dict(bad, name="chromium-400", urls=u5, transport="fetch"),
                    dict(bad, name="chromium-es-400", urls=u5, transport="eventsource"),
                    dict(future, name="chromium-es-future-400", urls=u5, transport="eventsource"),
                    dict(scope, name="chromium-403", urls=u6, transport="fetch", tokenUrl="/token")]
        cl = Clients(env, page, reports, nodes, browsers)
        try:
            cl.wait(lambda n: reports.end(n), 60, "every subscription ended by itself")
            for nc in cl.nodes:
                check_eq(nc.wait_exit(10), 0, "%s: Node exits by itself (no timer left)" % nc.name)
        finally:
            cl.close()
        for n in cl.names:
            end = reports.end(n)
            want = "complete" if n.endswith("complete") else "failure"
            check_eq(end["why"], want, "%s ended with" % n)
            check_eq(end["state"], "closed", "%s state" % n)
            check_eq(end["stats"]["connects"], 1, "%s connections within %d ms of the end" % (n, obs))
            outs = reports.of(n, "outcome")
            if want == "failure":
                check_eq(outs[-1]["status"], 403 if n.endswith("403") else 400, "%s failure status" % n)
                if "future" in n:
                    check_eq(outs[-1]["detail"], "Last-Event-ID is beyond the newest committed event",
                             "%s: the problem document reached onFailure" % n)
            else:
                check_ids_equal_rows(reports, n, rows, start)
        e5.stop()
        e6.stop()

    @t.case
    def resync_calls_back_once():
        e4 = edge(replay_cap=5)
        sc.publish_batch(writer, [{"topic": TOPIC, "data": {"n": i}} for i in range(30)])
        back = sc.table_rows(env.dsn, [TOPIC])[-30][0] - 1
        head = sc.db_head(env.dsn)
        base = {"urls": [stream_url(e4)], "topics": [TOPIC], "lastEventId": back}
        cl = Clients(env, page, reports, [dict(base, name="node-resync", format="ndjson")],
                     [dict(base, name="chromium-resync", transport="fetch")])
        flow = sc.PublishFlow(writer, TOPIC, "js.other", 0.05)
        try:
            cl.wait(lambda n: reports.of(n, "resync"), 60, "a resync in every client")
            flow.start()
            cl.wait(lambda n: len(reports.ids(n)) >= 20, 60, "20 live items after the resync")
            rows = cl.run_to_last_row(env, flow, back)
        finally:
            flow.stop.set()
            cl.close()
        for n in cl.names:
            rs = reports.of(n, "resync")
            check_eq([r["reason"] for r in rs], ["replay_cap"], "%s resync callbacks" % n)
            after = int(rs[0]["id"])
            check(after >= head, "%s: the resync id %d is at least the head %d when it came" % (
                n, after, head))
            check_ids_equal_rows(reports, n, rows, after)
        e4.stop()

    @t.case
    def fresh_subscription_cut_before_first_item_loses_nothing():
        e7 = edge()
        head = start_after()
        harness.wait_until(lambda: (sc.metric(sc.get_metrics(sc.edge_port(e7)), "studio_history_head") or 0) >= head,
                           30, "the edge's history reached the database head %d" % head)
        base = {"urls": [stream_url(e7)], "topics": [TOPIC]}
        nodes = [dict(base, name="node-fresh", format="ndjson"),
                 dict(base, name="node-fresh-throws", format="ndjson", throwOnce=3, throwAlways=True)]
        browsers = [dict(base, name="chromium-fresh-fetch", format="sse", transport="fetch"),
                    dict(base, name="chromium-fresh-throws", format="sse", transport="fetch", throwOnce=3,
                         throwAlways=True),
                    dict(base, name="chromium-fresh-eventsource", format="sse", transport="eventsource")]
        cl = Clients(env, page, reports, nodes, browsers)
        fetchers = [c["name"] for c in nodes + browsers if c.get("transport") != "eventsource"]
        last = lambda n: [r["id"] for r in reports.of(n, "last")]  # noqa: E731
        try:
            cl.wait(lambda n: reports.of(n, "open"), 60, "every client open")
            harness.wait_until(lambda: all(last(n) for n in fetchers), 30,
                               "every fetch client holds a position", detail=cl.detail)
            pos = {n: last(n)[0] for n in fetchers}
            log("positions %s, database head %d" % (pos, head))
            for n in fetchers:
                check_eq(int(pos[n]), head, "%s: its lastEventId before any item is the position" % n)
                check_eq(reports.ids(n), [], "%s: no item before the cut" % n)
            e7.kill()
            cl.wait(lambda n: reports.of(n, "outcome"), 60, "every client saw the cut")
            sc.publish_batch(writer, [{"topic": TOPIC, "data": {"n": i}} for i in range(10)])
            sc.publish_batch(writer, [{"topic": "js.other", "data": {"n": 0}}])
            e7b = env.start_edge([writer], listen=e7.listen, cors_origins=page.origin, heartbeat_s=1)
            e7b.wait_ready()
            rows = sc.table_rows(env.dsn, [TOPIC], after=head)
            cl.set_target(rows[-1][0])
            cl.wait(lambda n: reports.end(n), 60, "every client reached the last row")
        finally:
            cl.close()
        for n in cl.names:
            check_ids_equal_rows(reports, n, rows, head)
            opens = reports.of(n, "open")
            check(len(opens) >= 1, "%s opened" % n)
        for n in ("node-fresh-throws", "chromium-fresh-throws"):
            errs = [(r["callback"]) for r in reports.of(n, "error")]
            check_eq(errs.count("onItem"), 1, "%s: onItem threw once, reported: %s" % (n, errs[:6]))
            check("onOutcome" in errs and "onOpen" in errs, "%s: onOpen/onOutcome errors reported" % n)
            kinds = [r["kind"] for r in reports.of(n, "outcome")]
            check("callback" in kinds, "%s: the throw ended a connection: %s" % (n, kinds))
        e7b.stop()

    @t.case
    def stopped_edge_is_cut_by_the_headers_timeout():
        e8 = edge()
        e8.signal(signal.SIGSTOP)
        limit = 1500
        base = {"urls": [stream_url(e8)], "topics": [TOPIC], "connectTimeoutMs": limit}
        cl = Clients(env, page, reports, [dict(base, name="node-stopped", format="ndjson")],
                     [dict(base, name="chromium-stopped-fetch", transport="fetch"),
                      dict(base, name="chromium-stopped-es", transport="eventsource")])
        t0 = time.monotonic()
        cut = lambda n: [r for r in reports.of(n, "outcome")  # noqa: E731
                         if r["kind"] == "cut" and "no response headers" in (r["error"] or "")]
        try:
            cl.wait(lambda n: cut(n), 60, "every client cut by its headers timeout")
            took = time.monotonic() - t0
            # Read while the edge is still stopped: after SIGCONT they open.
            opened = {n: reports.of(n, "open") for n in cl.names}
        finally:
            e8.signal(signal.SIGCONT)
            cl.close()
        for n in cl.names:
            check_eq(cut(n)[0]["error"], "no response headers within %d ms" % limit, "%s outcome" % n)
            check_eq(opened[n], [], "%s never opened while the edge was stopped" % n)
        log("FIGURE js headers timeout %d ms: every client cut within %.1f s of starting "
            "(Chromium start included)" % (limit, took))
        e8.stop()

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
    finally:
        page.close()
sys.exit(rc)
