"""Issue 25 items 4-6 at run time, from outside (docs/security.md, docs/edge.md).

Refusals at start (null origin, plain tcp control off loopback, key files
writable by others) are in test_config_errors.py; here the running
programs, a real writer and PostgreSQL:

- the control socket on ipc:// is mode 0600 even when started under umask
  0 (edge and writer), and still answers studioctl;
- --metrics-listen: /metrics there (200, the edge's metrics), 404 on the
  public port; the metrics port serves nothing else;
- CORS headers only on /v1/stream: an allowed Origin gets none on
  /metrics, /healthz, /readyz (nor their preflights);
- a token in the cookie with an Origin not in --cors-origins: 403 before a
  stream opens; the same cookie from an allowed origin or with no Origin,
  and a bearer header from any origin, stream;
- a reload of a key file made group-writable keeps the keys in use, says
  why (warn) and answers the control client with the reason;
- over --max-streams-per-ip, SSE gets 200 + reconnect (overloaded) with a
  retry of 10..15 s, NDJSON and JSON-seq 429 with Retry-After 10..15;
  counted in studio_ip_limit_refused_total, not as a full edge.
"""

import os
import signal
import socket
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402
import tokens  # noqa: E402

t = harness.Tests()

ORIGIN, FOREIGN = "https://app.test", "https://evil.test"


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def head_status(port, headers, what):
    """HEAD /v1/stream: the checks of a GET (access control, CORS) without a stream to hold."""
    c = sc.fetch(port, "/v1/stream?topic=orders/1", method="HEAD", headers=headers, timeout=10)
    log("  %s: %s" % (what, c.status))
    return c


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()
    secret = os.urandom(32)
    jwks = os.path.join(env.tmp, "jwks.json")
    tokens.write_jwks(jwks, [{"kty": "oct", "kid": "k1", "alg": "HS256", "k": tokens.b64u(secret)}])
    os.chmod(jwks, 0o600)

    def token():
        return tokens.hs256(secret, "k1", {"exp": int(time.time()) + 600, "topics": ["*"]})

    @t.case
    def control_ipc_socket_is_0600():
        old = os.umask(0)   # the programs inherit it: the mode must not be the umask's
        try:
            e_path = os.path.join(env.tmp, "edge.ctl")
            w_path = os.path.join(env.tmp, "writer.ctl")
            w2 = env.start_writer(control="ipc://" + w_path, flush_interval_ms=100)
            edge = env.start_edge([writer], control="ipc://" + e_path)
        finally:
            os.umask(old)
        w2.wait_ready()
        edge.wait_ready()
        for who, path in [("edge", e_path), ("writer", w_path)]:
            check(stat.S_ISSOCK(os.stat(path).st_mode), "%s: %s is a socket" % (who, path))
            check_eq(oct(mode_of(path)), oct(0o600), "%s control socket mode under umask 0" % who)
            p = harness.studioctl("stats", "--control", "ipc://" + path, timeout=20)
            check_eq(p.returncode, 0, "%s: studioctl stats over the 0600 socket: %s %s" % (who, p.stdout, p.stderr))
        check_eq(w2.stop(), 0, "writer exit")
        check_eq(edge.stop(), 0, "edge exit")

    @t.case
    def metrics_on_their_own_listener_and_cors_only_on_streams():
        mport = harness.free_port()
        edge = env.start_edge([writer], metrics_listen="127.0.0.1:%d" % mport, cors_origins=ORIGIN)
        edge.wait_ready()
        port = sc.edge_port(edge)
        st, _, body = harness.http_get("http://127.0.0.1:%d/metrics" % port)
        check_eq(st, 404, "/metrics on the public port with --metrics-listen (body %r)" % body[:200])
        st, hd, body = harness.http_get("http://127.0.0.1:%d/metrics" % mport, headers={"Origin": ORIGIN})
        check_eq(st, 200, "/metrics on --metrics-listen")
        text = body.decode()
        for name in ("studio_streams_open", "studio_history_head", "studio_ready 1", "studio_database_up 1"):
            check(name in text, "%s in the metrics (%d bytes)" % (name, len(text)))
        check_eq(hd.get("access-control-allow-origin"), None, "no CORS on the metrics port's /metrics")
        st, _, _ = harness.http_get("http://127.0.0.1:%d/v1/stream?topic=a" % mport)
        check_eq(st, 404, "the metrics port serves no streams")
        # CORS headers: on /v1/stream only.
        for path in ("/healthz", "/readyz"):
            st, hd, _ = harness.http_get("http://127.0.0.1:%d%s" % (port, path), headers={"Origin": ORIGIN})
            check_eq(st, 200, "%s status" % path)
            check_eq(hd.get("access-control-allow-origin"), None, "no CORS header on %s for an allowed origin" % path)
            c = sc.fetch(port, path, method="OPTIONS", headers={"Origin": ORIGIN,
                                                                 "Access-Control-Request-Method": "GET"})
            check_eq(c.header("access-control-allow-origin"), None, "no CORS on the preflight of %s" % path)
        c = head_status(port, {"Origin": ORIGIN}, "HEAD /v1/stream from the allowed origin")
        check_eq(c.status, 200, "HEAD /v1/stream")
        check_eq(c.header("access-control-allow-origin"), ORIGIN, "CORS on /v1/stream")
        check_eq(edge.stop(), 0, "edge exit")

    @t.case
    def cookie_from_a_foreign_origin_is_403():
        edge = env.start_edge([writer], auth_keys=jwks, cors_origins=ORIGIN)
        edge.wait_ready()
        port = sc.edge_port(edge)
        tok = token()
        cookie = {"Cookie": "other=1; studio_token=%s" % tok}
        c = sc.fetch(port, "/v1/stream?topic=orders/1", headers=dict(cookie, Origin=FOREIGN), timeout=10)
        errs = sc.check_problem(c, 403)
        check(not errs, "cookie from %s: %s" % (FOREIGN, "; ".join(errs)))
        check_eq(c.frames, [], "nothing streamed to the foreign origin")
        check_eq(c.header("access-control-allow-origin"), None, "no CORS header on the 403")
        check_eq(sc.metric(sc.get_metrics(port), "studio_streams_open"), 0.0, "no stream opened")
        check_eq(sc.metric(sc.get_metrics(port), "studio_auth_refused_total", reason="forbidden"), 1.0,
                 "counted as forbidden")
        for headers, what in [(dict(cookie, Origin=ORIGIN), "cookie from the allowed origin"),
                              (cookie, "cookie without Origin (not a cross-origin browser request)"),
                              ({"Authorization": "Bearer " + tok, "Origin": FOREIGN},
                               "bearer header from a foreign origin (not ambient)")]:
            check_eq(head_status(port, headers, what).status, 200, what)
        # A real stream too, not only its headers.
        c = sc.StreamClient(port, "/v1/stream?topic=orders/1", headers=dict(cookie, Origin=ORIGIN),
                            stop=lambda cl: cl.status is not None)
        sc.run_clients([c], 10)
        c.close()
        check_eq(c.status, 200, "GET with the cookie from the allowed origin")
        check_eq(c.header("access-control-allow-credentials"), "true", "credentials allowed for it")

        # Item 6: a reload of a key file others may write keeps the keys in use.
        os.chmod(jwks, 0o664)
        try:
            edge.signal(signal.SIGHUP)
            harness.wait_until(lambda: "reload failed, keeping the 1 keys in use: writable by its group"
                               in edge.logs(400), 10, "the reload refused with a warning", detail=edge.logs)
            p = harness.studioctl("reload", "--control", edge.control, timeout=20)
            out = (p.stdout + p.stderr).decode(errors="replace")
            check_eq(p.returncode, 1, "studioctl reload of a group-writable file: %s" % out)
            check("writable by its group" in out, "the reason reaches the operator: %r" % out)
            check_eq(head_status(port, dict(cookie, Origin=ORIGIN), "the kept key still verifies").status, 200,
                     "a token of the kept key")
        finally:
            os.chmod(jwks, 0o600)
        check_eq(edge.stop(), 0, "edge exit")

    @t.case
    def per_address_limit_answers_sse_with_reconnect():
        edge = env.start_edge([writer], max_streams_per_ip=1)
        edge.wait_ready()
        port = sc.edge_port(edge)
        held = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            held.sendall(b"GET /v1/stream?topic=orders/1&format=ndjson HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                b = held.recv(4096)
                check(b, "the held stream's head")
                head += b
            check(head.startswith(b"HTTP/1.1 200 "), "the one stream allowed: %r" % head[:80])
            c = sc.fetch(port, "/v1/stream?topic=orders/1", headers={"Accept": "text/event-stream"}, timeout=10)
            errs = sc.check_refusal(c, "sse", "overloaded", 200)
            check(not errs, "SSE over the per-address limit: %s" % "; ".join(errs))
            r = c.frames[-1]["env"]["retry_ms"]
            log("FIGURE SSE refusal retry_ms %d" % r)
            check(10000 <= r <= 15000, "retry_ms %d in [10000, 15000] (an EventSource must not loop)" % r)
            for fmt in ("ndjson", "json-seq"):
                c = sc.fetch(port, "/v1/stream?topic=orders/1&format=%s" % fmt, timeout=10)
                errs = sc.check_refusal(c, fmt, "overloaded", 429)
                check(not errs, "%s over the per-address limit: %s" % (fmt, "; ".join(errs)))
                ra = int(c.header("retry-after"))
                check(10 <= ra <= 15, "%s Retry-After %d in [10, 15]" % (fmt, ra))
            m = sc.get_metrics(port)
            check_eq(sc.metric(m, "studio_ip_limit_refused_total"), 3.0, "per-address refusals counted")
            check_eq(sc.metric(m, "studio_stream_refusals_total", reason="overloaded"), 0.0,
                     "not counted as a full edge")
        finally:
            held.close()
        check_eq(edge.stop(), 0, "edge exit")

    t.main()
