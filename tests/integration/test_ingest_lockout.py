"""ingest: connections that never complete a request cannot lock producers
out (docs/writer.md "Connections: deadline, caps"; issue 24 item 4: "260
idle connections that send only the 8-byte SP header lock every producer
out").

- 300 connections that send only the SP header (from five loopback
  addresses, 60 each: more than the global cap of 256, under the
  per-address cap of 64) and 300 that send nothing at all: a real producer
  (studioctl publish) still publishes, and promptly (the figure is printed;
  the bound asserted is generous for a busy machine but far below the
  forever of the old code, where the 256 pipes were held until the clients
  left).  Every header-only connection is then closed by the writer, 10 s
  after it arrived (seen from the client: EOF or a reset), the ones past the
  cap sooner (displacing an older silent one, or refused while all are
  younger than 1 s); /metrics counts them.
- The same over tls+tcp, with 300 silent TCP connections (not even a
  ClientHello: nng 1.5.2 alone holds these for ever) closed at ~10 s.
- The per-address cap: 64 connections from one address that each complete a
  request are kept; a 65th from that address is closed as it arrives
  (refused{reason="address_cap"}), while a producer from another address
  publishes.
"""
import selectors
import socket
import ssl
import struct
import time

import harness as h
import test_tls

t = h.Tests()

IDLE_S = 10.0          # the contract's deadline
SP_REQ_HEADER = b"\x00SP\x00\x00\x30\x00\x00"   # SP over TCP, protocol req0 (0x30)
OK_TRUE = b"\xa2ok\xc3"   # msgpack "ok": true in a reply map
PUBLISH_BOUND_S = 5.0  # asserted; the issue asks for "within a second": measured and printed


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def connect(port, src, header=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    if header:
        s.sendall(SP_REQ_HEADER)
    return s


def metric(w, name, **labels):
    v = h.metric(w.http_url, name, labels or None)
    return None if v is None else int(v)


def metrics_text(w):
    st, _, body = h.http_get(w.http_url + "/metrics")
    return "\n".join(l for l in body.decode(errors="replace").splitlines() if "ingest_conns" in l)


def wait_closed(socks, born, timeout):
    """Reads every socket until EOF/reset; returns {sock: seconds from its connect to its close}."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = {}
    deadline = time.monotonic() + timeout
    while len(closed) < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            except BlockingIOError:
                continue
            if not data:
                closed[s] = time.monotonic() - born[s]
                sel.unregister(s)
    sel.close()
    return closed


def publish_timed(w, topic, url=None, flags=()):
    t0 = time.monotonic()
    p = h.studioctl("publish", "--writer", url or w.ingest, "--topic", topic, "--data", "1", "--timeout-ms", "20000",
                    *flags, timeout=60)
    took = time.monotonic() - t0
    return p, took


@t.case
def idle_connections_do_not_lock_producers_out():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        port = port_of(w.ingest)
        born = {}
        silent = []
        header_only = []
        for i in range(300):
            s = connect(port, "127.0.0.%d" % (2 + i % 5))
            born[s] = time.monotonic()
            header_only.append(s)
        for i in range(300):
            s = connect(port, "127.0.0.7", header=False)
            born[s] = time.monotonic()
            silent.append(s)
        # every header-only connection has become a pipe (or displaced one)
        h.wait_until(lambda: (metric(w, "studio_writer_ingest_conns") or 0) +
                     (metric(w, "studio_writer_ingest_conns_closed_total", reason="displaced") or 0) +
                     (metric(w, "studio_writer_ingest_conns_refused_total", reason="global_cap") or 0) >= 300,
                     30, "300 header-only connections seen by the writer", detail=lambda: metrics_text(w))
        held = metric(w, "studio_writer_ingest_conns")
        h.log("open ingest connections with 300 header-only and 300 silent ones: %s" % held)
        h.check_eq(held, 256, "open connections at the global cap")

        p, took = publish_timed(w, "lockout")
        h.log("FIGURE a producer published in %.3f s with 300 header-only and 300 silent connections held" % took)
        h.check(p.returncode == 0, "studioctl publish succeeds (rc %d, %.1f s): %s %s"
                % (p.returncode, took, p.stdout.decode()[-300:], p.stderr.decode()[-300:]))
        h.check(took < PUBLISH_BOUND_S, "the producer published within %.1f s: took %.3f s" % (PUBLISH_BOUND_S, took))
        h.check_eq(int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = 'lockout'")), 1,
                   "rows stored")

        closed = wait_closed(header_only, born, IDLE_S + 60)
        h.check_eq(len(closed), 300, "header-only connections closed by the writer")
        displaced = sorted(v for v in closed.values() if v < IDLE_S - 1.0)
        idled = sorted(v for v in closed.values() if v >= IDLE_S - 1.0)
        h.log("FIGURE header-only connections: %d closed early (displaced by newer ones, max %.2f s), "
              "%d at the deadline (%.2f .. %.2f s after connecting)"
              % (len(displaced), max(displaced or [0]), len(idled), min(idled or [0]), max(idled or [0])))
        n_displaced = metric(w, "studio_writer_ingest_conns_closed_total", reason="displaced")
        n_refused = metric(w, "studio_writer_ingest_conns_refused_total", reason="global_cap")
        n_idle = metric(w, "studio_writer_ingest_conns_closed_total", reason="idle")
        h.log(metrics_text(w))
        # past the cap a newcomer displaces a silent connection at least 1 s old, or is
        # refused when all are younger; the producer's own connection displaced one more.
        # The producer may be refused first and redial: on a slow (sanitizer) writer the
        # 256 pipes are all younger than 1 s when it arrives (cc8 counted 70 here), so
        # the exact count is the one seen from the clients: 44 + 1 header-only closed early.
        h.log("FIGURE displaced %d + refused %d = %d (45 + the producer's refused tries)"
              % (n_displaced, n_refused, n_displaced + n_refused))
        h.check_eq(len(displaced), 45, "header-only connections closed early (44 past the cap + 1 by the producer)")
        h.check(n_displaced + n_refused >= 45, "connections displaced or refused: %d + %d, at least 45"
                % (n_displaced, n_refused))
        h.check(n_displaced >= 1, "the producer displaced a silent connection: %d" % n_displaced)
        h.check_eq(n_idle, 255, "connections closed for idling")
        h.check(all(v < IDLE_S + 15 for v in idled),
                "the idle ones are closed soon after %.0f s: latest %.2f s" % (IDLE_S, max(idled or [0])))
        # the silent ones never became pipes: nng's own 10 s negotiation deadline closes them
        closed = wait_closed(silent, born, IDLE_S + 60)
        h.check_eq(len(closed), 300, "silent connections closed by the writer")
        h.log("FIGURE silent connections closed %.2f .. %.2f s after connecting"
              % (min(closed.values()), max(closed.values())))
        h.check_eq(metric(w, "studio_writer_ingest_conns"), 0, "open ingest connections at the end")
        h.check_eq(w.stop(), 0, "writer exit status")


def recv_exactly(s, n):
    buf = b""
    while len(buf) < n:
        data = s.recv(n - len(buf))
        if not data:
            raise h.TestFailure("connection closed after %d of %d bytes" % (len(buf), n))
        buf += data
    return buf


def tls_connect(ctx, port, src):
    """A TLS connection (handshake done) that has sent the SP header."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.bind((src, 0))
    raw.settimeout(20)
    raw.connect(("127.0.0.1", port))
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    s.sendall(SP_REQ_HEADER)
    return s


def sp_open(port, src, ctx=None):
    """A raw SP req0 connection (over TLS with ctx), past the header exchange."""
    s = connect(port, src) if ctx is None else tls_connect(ctx, port, src)
    s.settimeout(20)
    hdr = recv_exactly(s, 8)
    h.check_eq(hdr[:4], b"\x00SP\x00", "the writer's SP header")
    return s


def sp_request(s, req_id, body):
    """One req0 request on a raw SP/TCP connection; returns the reply body."""
    msg = struct.pack(">I", req_id | 0x80000000) + body
    s.sendall(struct.pack(">Q", len(msg)) + msg)
    n = struct.unpack(">Q", recv_exactly(s, 8))[0]
    rep = recv_exactly(s, n)
    h.check_eq(struct.unpack(">I", rep[:4])[0], req_id | 0x80000000, "the reply's request id")
    return rep[4:]


@t.case
def per_address_cap_refuses_past_64_active_connections():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        port = port_of(w.ingest)
        active = []
        for i in range(64):
            s = sp_open(port, "127.0.0.2")
            rep = sp_request(s, i + 1, h.mp_pack({"topic": "cap", "data": "1"}))
            h.check(OK_TRUE in rep, "request %d on its own connection answered ok: %r" % (i, rep))
            active.append(s)
        extra = connect(port, "127.0.0.2")
        born = {extra: time.monotonic()}
        closed = wait_closed([extra], born, 20)
        h.check(extra in closed, "a 65th connection from one address is closed")
        h.log("FIGURE the 65th connection from one address was closed %.3f s after connecting" % closed[extra])
        h.check(closed[extra] < IDLE_S - 1, "closed as it arrives, not at the idle deadline: %.2f s" % closed[extra])
        h.log(metrics_text(w))
        h.check_eq(metric(w, "studio_writer_ingest_conns_refused_total", reason="address_cap"), 1,
                   "refusals at the per-address cap")
        h.check_eq(metric(w, "studio_writer_ingest_conns_refused_total", reason="global_cap"), 0,
                   "refusals at the global cap")
        h.check("from one address" in w.logs(), "the per-address cap is logged\n" + w.logs())
        # the active ones are past their first request: kept beyond the idle deadline
        h.check_eq(metric(w, "studio_writer_ingest_conns"), 64, "open connections")
        p, took = publish_timed(w, "other")
        h.check(p.returncode == 0, "a producer from 127.0.0.1 publishes (rc %d): %s"
                % (p.returncode, p.stderr.decode()[-300:]))
        h.log("FIGURE a producer from another address published in %.3f s" % took)
        h.wait_until(lambda: (metric(w, "studio_writer_ingest_conns_closed_total", reason="idle") or 0) == 0
                     and time.monotonic() - born[extra] > IDLE_S + 2, IDLE_S + 30,
                     "the idle deadline passing without closing active connections")
        rep = sp_request(active[0], 1000, h.mp_pack({"topic": "cap", "data": "2"}))
        h.check(OK_TRUE in rep, "a connection past its first request still works after %.0f s idle: %r"
                % (IDLE_S, rep))
        for s in active:
            s.close()
        h.check_eq(w.stop(), 0, "writer exit status")


def wait_closed_tls(socks, born, timeout):
    """wait_closed for TLS sockets: blocking reads with a deadline (TLS buffers hide readiness)."""
    closed = {}
    deadline = time.monotonic() + timeout
    pending = list(socks)
    while pending and time.monotonic() < deadline:
        s = pending.pop(0)
        s.settimeout(max(0.05, min(0.5, deadline - time.monotonic())))
        try:
            data = s.recv(4096)
        except (socket.timeout, ssl.SSLWantReadError):
            pending.append(s)
            continue
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
            data = b""
        if not data:
            closed[s] = time.monotonic() - born[s]
        else:
            pending.append(s)
    return closed


@t.case
def tls_idle_and_silent_connections_do_not_lock_producers_out():
    with h.Env() as env:
        pki = test_tls.Pki(env.tmp)
        port = h.free_port()
        w = env.start_writer(ingest="tls+tcp://127.0.0.1:%d" % port, tls_cert=pki.server[0],
                             tls_key=pki.server[1], tls_ca=pki.ca).wait_ready()
        ctx = ssl.create_default_context(cafile=pki.ca)
        ctx.load_cert_chain(pki.client[0], pki.client[1])
        # one connection past its first request, held beyond the deadline
        active = sp_open(port, "127.0.0.1", ctx)
        h.check(OK_TRUE in sp_request(active, 1, h.mp_pack({"topic": "tls.lockout", "data": "1"})),
                "a request over TLS")
        born = {}
        silent, header_only = [], []
        for i in range(300):
            s = connect(port, "127.0.0.7", header=False)   # not even a ClientHello
            born[s] = time.monotonic()
            silent.append(s)
        t0 = time.monotonic()
        for i in range(300):
            s = tls_connect(ctx, port, "127.0.0.%d" % (2 + i % 5))
            born[s] = time.monotonic()
            header_only.append(s)
        h.log("300 TLS handshakes took %.2f s" % (time.monotonic() - t0))
        # every header-only connection has become a pipe; the first ones may have met their
        # deadline already where 300 handshakes take more than 10 s (ASan: 16 s)
        h.wait_until(lambda: (metric(w, "studio_writer_ingest_conns") or 0) +
                     (metric(w, "studio_writer_ingest_conns_closed_total", reason="displaced") or 0) +
                     (metric(w, "studio_writer_ingest_conns_closed_total", reason="idle") or 0) +
                     (metric(w, "studio_writer_ingest_conns_refused_total", reason="global_cap") or 0) >= 301,
                     30, "300 header-only TLS connections seen by the writer", detail=lambda: metrics_text(w))

        p, took = publish_timed(w, "tls.lockout", "tls+tcp://localhost:%d" % port, test_tls.tls_flags(pki, pki.client))
        h.log("FIGURE a producer published over TLS in %.3f s with 300 header-only TLS and 300 silent "
              "connections held" % took)
        h.check(p.returncode == 0, "studioctl publish succeeds (rc %d, %.1f s): %s"
                % (p.returncode, took, p.stderr.decode()[-300:]))
        h.check(took < PUBLISH_BOUND_S, "the producer published within %.1f s: took %.3f s" % (PUBLISH_BOUND_S, took))

        closed = wait_closed(silent, born, IDLE_S + 60)
        h.log("FIGURE silent connections to a tls+tcp ingest closed %.2f .. %.2f s after connecting (%d of 300)"
              % (min(closed.values() or [0]), max(closed.values() or [0]), len(closed)))
        h.check_eq(len(closed), 300, "silent connections to the TLS ingest closed by the writer")
        h.check(max(closed.values()) < IDLE_S + 15, "closed soon after %.0f s: latest %.2f s"
                % (IDLE_S, max(closed.values())))
        closed = wait_closed_tls(header_only, born, IDLE_S + 60)
        h.check_eq(len(closed), 300, "header-only TLS connections closed by the writer")
        h.log("FIGURE header-only TLS connections closed %.2f .. %.2f s after connecting"
              % (min(closed.values()), max(closed.values())))
        h.log(metrics_text(w))
        h.check_eq(metric(w, "studio_writer_ingest_conns_closed_total", reason="handshake"), 300,
                   "connections closed before finishing their TLS handshake")
        # the connection past its first request survived all this, and still works
        h.check(OK_TRUE in sp_request(active, 2, h.mp_pack({"topic": "tls.lockout", "data": "2"})),
                "the active TLS connection still answers after %.0f s" % IDLE_S)
        h.check_eq(metric(w, "studio_writer_ingest_conns"), 1, "open ingest connections at the end")
        active.close()
        h.check_eq(w.stop(), 0, "writer exit status")


if __name__ == "__main__":
    t.main()
