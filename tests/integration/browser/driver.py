"""Headless Chromium driver for the browser EventSource test.

Design: PageServer is a tiny http.server on 127.0.0.1 (its own origin) that
serves page.html, answers GET /target with the id the page must reach (set by
the test once it knows the last seq; empty until then), and receives the
page's result as POST /done.  Browser launches /usr/bin/chromium headless in
its own session (so its whole process tree is killed by its process-group id,
never by name) with a throw-away profile.  The page opens an EventSource on
the URL it is given (cross-origin, so the edge's CORS answer is exercised too)
and reports every item id it received, the reconnect envelopes, and how often
EventSource reported an error (each automatic reconnection).

`python3 driver.py --selftest` proves the browser part against a fake SSE
server defined below (chunked, CORS, drops the connection mid-stream with a
reconnect envelope and honours Last-Event-ID); the real test
(test_browser_*.py) uses the real edge-gateway.
"""

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def http_send(handler, code, ctype, body, cookie=None):
    """One whole, uncached answer of a test page server."""
    handler.send_response(code)
    handler.send_header("Content-Type", ctype)
    if cookie:
        handler.send_header("Set-Cookie", cookie)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    if body:
        handler.wfile.write(body)


class PageServer:
    def __init__(self):
        self.target = None
        self.cookie = None   # a Set-Cookie value sent with the page (the access control test)
        self.result = None
        self.done = threading.Event()
        self.requests = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                if self.path.startswith("/page.html"):
                    with open(os.path.join(HERE, "page.html"), "rb") as f:
                        body = f.read()
                    self._send(200, "text/html; charset=utf-8", body, outer.cookie)
                elif self.path.startswith("/target"):
                    t = outer.target
                    self._send(200, "text/plain", b"" if t is None else str(t).encode())
                else:
                    self._send(404, "text/plain", b"no")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(n, 64 << 20))
                if self.path == "/done":
                    try:
                        outer.result = json.loads(body)
                    except ValueError:
                        outer.result = {"bad": body[:200].decode("utf-8", "replace")}
                    outer.done.set()
                self._send(204, "text/plain", b"")

            def _send(self, code, ctype, body, cookie=None):
                http_send(self, code, ctype, body, cookie)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.origin = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def page_url(self, src, budget_ms=60000, credentials=False):
        q = {"src": src, "budget_ms": str(budget_ms)}
        if credentials:
            q["cred"] = "1"   # EventSource with withCredentials: cookies go cross-origin
        return "%s/page.html?%s" % (self.origin, urllib.parse.urlencode(q))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Browser:
    def __init__(self, url, logdir=None):
        self.profile = tempfile.mkdtemp(prefix="g2-chromium-")
        logdir = logdir or self.profile
        self.log_path = os.path.join(logdir, "chromium.log")
        self._log = open(self.log_path, "wb")
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--remote-debugging-port=0",
                "--user-data-dir=" + self.profile, url]
        self.p = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self):
        return self.p.poll() is None

    def close(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(10)
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return ""


# ------------------------------------------------------------ selftest only


def _fake_sse_server(total, drop_every, allow_origin):
    """A fake edge for the selftest: items 1..total, drops every connection
    after drop_every items with a reconnect envelope, resumes after the
    Last-Event-ID header.  Records the Last-Event-ID values it saw."""
    seen = []
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)

    def one(s):
        req = b""
        while b"\r\n\r\n" not in req:
            d = s.recv(4096)
            if not d:
                s.close()
                return
            req += d
        head = req.decode("latin-1").split("\r\n")
        hdrs = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip()
                for ln in head[1:] if ":" in ln}
        last = int(hdrs.get("last-event-id", "0") or 0)
        seen.append((hdrs.get("last-event-id"), hdrs.get("origin")))
        s.sendall(("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                   "Access-Control-Allow-Origin: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                   % allow_origin).encode())

        def chunk(b):
            s.sendall(b"%x\r\n%s\r\n" % (len(b), b))
        try:
            n = 0
            for i in range(last + 1, total + 1):
                chunk(b'id: %d\ndata: {"type":"item","id":"%d","topic":"t","about":[]}\n\n' % (i, i))
                n += 1
                time.sleep(0.005)
                if n == drop_every:
                    chunk(b'event: reconnect\nretry: 200\ndata: {"type":"reconnect","retry_ms":200,'
                          b'"reason":"draining"}\n\n')
                    s.sendall(b"0\r\n\r\n")
                    break
            else:
                while True:   # idle like a live stream
                    time.sleep(0.5)
                    chunk(b": heartbeat\n")
        except OSError:
            pass
        s.close()

    def serve():
        while True:
            try:
                s, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(s,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return ls, seen


def _selftest():
    total = 300
    ps = PageServer()
    ls, seen = _fake_sse_server(total, 70, ps.origin)
    src = "http://127.0.0.1:%d/v1/stream?topic=t" % ls.getsockname()[1]
    ps.target = total
    b = Browser(ps.page_url(src, budget_ms=40000))
    t0 = time.monotonic()
    ok = ps.done.wait(60)
    el = time.monotonic() - t0
    b.close()
    ls.close()
    ps.close()
    failed = 0
    if not ok:
        print("FAIL no result from the page within 60s")
        print(b.log_tail())
        print("0 passed, 1 failed")
        return 1
    r = ps.result
    ids = r.get("ids", [])
    checks = [
        (ids == list(range(1, total + 1)), "ids 1..%d without gap or duplicate (got %d, first %s, last %s)"
         % (total, len(ids), ids[:1], ids[-1:])),
        (len(r.get("reconnects", [])) == total // 70, "reconnect envelopes seen: %d" % len(r.get("reconnects", []))),
        ([x[0] for x in seen[1:]] == [str(70 * k) for k in range(1, len(seen))],
         "browser sent Last-Event-ID itself: %s" % [x[0] for x in seen]),
        (r.get("others") == [], "no unexpected frames: %s" % r.get("others")),
    ]
    for cond, what in checks:
        print("%s %s" % ("PASS" if cond else "FAIL", what))
        failed += not cond
    print("FIGURE browser selftest took %.1fs, %d connections, %d EventSource errors"
          % (el, len(seen), r.get("errors", -1)))
    print("%d passed, %d failed" % (len(checks) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    if "--selftest" in sys.argv:
        raise SystemExit(_selftest())
    print("usage: driver.py --selftest (the real test is test_browser_eventsource.py)")
    raise SystemExit(2)
