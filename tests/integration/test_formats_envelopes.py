"""Stream formats, envelopes, negotiation and every problem status of the
edge-gateway (docs/api.md "GET /v1/stream", ADR-WEB-ADV-001).

Real broker-writer, real edge-gateway, real PostgreSQL (harness.Env).  For
each format (sse, ndjson, json-seq) a client parses whole sessions: items
compared byte for byte with the table, a resync, heartbeats, and each
terminal envelope (complete via until=head, reconnect via a drain, failure
by making the database unreachable in the middle of a replay).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

FORMATS = ("sse", "ndjson", "json-seq")
CTYPE = {"sse": "text/event-stream", "ndjson": "application/x-ndjson",
         "json-seq": "application/json-seq"}
ORIGIN = "http://127.0.0.1:9"
t = harness.Tests()


def events(topic, n, about=("a",), signal_every=0, pad=0):
    out = []
    for i in range(n):
        if signal_every and i % signal_every == signal_every - 1:
            out.append({"topic": topic, "about": list(about)})
        else:
            # whitespace outside strings: the writer stores the compact form
            out.append({"topic": topic, "about": list(about),
                        "data": '{ "n" : %d, "s": "a b\\u00e9 %s" }' % (i, "p" * pad)})
    return out


def stream_path(topics, fmt=None, **q):
    parts = ["topic=%s" % tp for tp in topics]
    if fmt:
        parts.append("format=%s" % fmt)
    parts += ["%s=%s" % kv for kv in q.items()]
    return "/v1/stream?" + "&".join(parts)


def errs_of(c, fmt):
    return sc.check_envelopes(c, fmt)


@t.case
def unit_parsers_resync_after_cut():
    """Parser-level proof the tests can see a cut record (RFC 7464 2.3)."""
    recs = [b'{"type":"item","id":"%d","topic":"t","about":[]}' % i for i in range(1, 6)]
    whole = b"".join(b"\x1e" + r + b"\n" for r in recs)
    cut = whole.replace(recs[2] + b"\n", recs[2][:17])   # record 3 cut in the middle
    for pieces in (1, 4, len(cut)):
        fr, errs = sc.parse_bytes("json-seq", cut, pieces)
        check_eq([f["env"]["id"] for f in fr], ["1", "2", "4", "5"], "json-seq resync at next RS")
        check_eq([e[0] for e in errs], ["truncated"], "json-seq reports the cut record")
    fr, errs = sc.parse_bytes("ndjson", b"".join(r + b"\n" for r in recs)[:-10], 3)
    check_eq(len(fr), 4, "ndjson keeps the complete lines")
    check(errs and errs[0][0] == "truncated", "ndjson reports the truncated tail")


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()
    edge = env.start_edge([writer], replay_cap=5, heartbeat_s=1, drain_grace_s=2,
                          cors_origins=ORIGIN)
    edge.wait_ready()
    port = sc.edge_port(edge)
    TOPIC = "fmt.a"
    seqs0 = sc.publish_batch(writer, events(TOPIC, 12, signal_every=4))
    harness.wait_until(lambda: sc.db_head(env.dsn) >= seqs0[-1], 10, "rows committed")

    @t.case
    def complete_via_until_head_each_format():
        d = seqs0[-1]
        rows = sc.table_rows(env.dsn, [TOPIC], after=d - 4)
        for fmt in FORMATS:
            c = sc.fetch(port, stream_path([TOPIC], fmt, until="head"), timeout=15,
                         headers={"Last-Event-ID": str(d - 4)})
            check_eq(c.status, 200, "%s status" % fmt)
            check_eq((c.header("content-type") or "").split(";")[0], CTYPE[fmt], "%s content-type" % fmt)
            check_eq(c.outcome, "complete", "%s outcome" % fmt)
            check_eq(errs_of(c, fmt), [], "%s envelopes" % fmt)
            check_eq(sc.item_errors(c.frames, rows), [], "%s items equal the table" % fmt)
            check_eq(c.frames[-1]["env"], {"type": "complete"}, "%s complete envelope" % fmt)
            if fmt == "sse":
                check_eq(c.frames[-1]["sse_event"], "complete", "sse event: complete")
            check(c.transport_complete, "%s: the response ended cleanly after complete" % fmt)

    @t.case
    def until_head_states_its_bound():
        # The bound until=head resolved to, in a header a reconnecting client sends instead of
        # "head" (so a cut never moves it forward), readable cross-origin.
        head = sc.db_head(env.dsn)
        st, hdrs, body = harness.http_get("http://127.0.0.1:%d%s" % (port, stream_path([TOPIC], "ndjson", until="head")),
                                          headers={"Last-Event-ID": str(head - 1), "Origin": ORIGIN}, timeout=30)
        check_eq((st, hdrs.get("studio-until")), (200, str(head)), "status and Studio-Until of an until=head stream")
        check("Studio-Until" in hdrs.get("access-control-expose-headers", ""),
              "Studio-Until exposed to cross-origin scripts: %r" % hdrs.get("access-control-expose-headers"))
        st, hdrs, _ = harness.http_get("http://127.0.0.1:%d%s" % (port, stream_path([TOPIC], "ndjson", until=str(head))),
                                       headers={"Last-Event-ID": str(head - 1)}, timeout=30)
        check_eq((st, hdrs.get("studio-until")), (200, str(head)), "a numeric until is stated as it is")

    @t.case
    def curl_consumes_sse():
        d = seqs0[-1]
        p = subprocess.run(["curl", "-sN", "--max-time", "10", "-H", "Last-Event-ID: %d" % (d - 3),
                            "http://127.0.0.1:%d%s" % (port, stream_path([TOPIC], until="head"))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        check_eq(p.returncode, 0, "curl exit status")
        fr, errs = sc.parse_bytes("sse", p.stdout, 1)
        check_eq(errs, [], "curl output parses")
        check_eq([f["type"] for f in fr if f["type"] not in ("heartbeat", "comment")],
                 ["item"] * 3 + ["complete"], "curl saw 3 items then complete")

    @t.case
    def resync_heartbeat_item_reconnect_each_format():
        # replay_cap 5 < 12 events: one resync replay_cap at the db head, then live.
        head = sc.db_head(env.dsn)
        cs = {fmt: sc.StreamClient(port, stream_path([TOPIC], fmt), headers={"Last-Event-ID": "0"})
              for fmt in FORMATS}
        # heartbeats come every second (heartbeat_s 1): wait for two on each, not for a fixed time
        sc.run_until_open(cs.values(), also=lambda: all(
            [f["type"] for f in c.frames].count("heartbeat") >= 2 for c in cs.values()))
        new = sc.publish_batch(writer, events(TOPIC, 3, signal_every=3))
        sc.run_clients(cs.values(), 2.0, until=lambda: all(len(c.items()) >= 3 for c in cs.values()))
        p = harness.studioctl("drain", "--control", edge.control, timeout=20)
        check_eq(p.returncode, 0, "studioctl drain exit status (%s)" % p.stderr.decode(errors="replace"))
        sc.run_clients(cs.values(), 10)
        rows = sc.table_rows(env.dsn, [TOPIC], after=head)
        for fmt, c in cs.items():
            types = [f["type"] for f in c.frames]
            log("%s session: %s" % (fmt, types))
            check_eq(errs_of(c, fmt), [], "%s envelopes" % fmt)
            check_eq(c.frames[0]["env"], {"type": "resync", "id": str(head), "reason": "replay_cap"},
                     "%s: first frame is one resync replay_cap at the head" % fmt)
            check_eq(types.count("resync"), 1, "%s: exactly one resync" % fmt)
            check(types.count("heartbeat") >= 2, "%s: heartbeats every second (%d)"
                  % (fmt, types.count("heartbeat")))
            hb = [f for f in c.frames if f["type"] == "heartbeat"]
            if fmt != "sse":
                check(all(f["env"] == {"type": "heartbeat"} for f in hb), "%s heartbeat envelope" % fmt)
            else:
                check(all(f["env"] is None and f["comment"] == "heartbeat" for f in hb),
                      "sse heartbeat is the comment ': heartbeat'")
            check_eq(sc.item_errors(c.frames, rows), [], "%s: live items equal the table" % fmt)
            check_eq([int(f["env"]["id"]) for f in c.items()], new, "%s: live ids" % fmt)
            check_eq(c.outcome, "reconnect", "%s outcome" % fmt)
            env_r = c.terminal["env"]
            check_eq(sorted(env_r), ["reason", "retry_ms", "type"], "%s reconnect keys" % fmt)
            check_eq(env_r["reason"], "draining", "%s reconnect reason" % fmt)
            check(isinstance(env_r["retry_ms"], int) and 0 <= env_r["retry_ms"] <= 2000,
                  "%s retry_ms within the 2 s grace: %r" % (fmt, env_r["retry_ms"]))
        time.sleep(3)
        log("FIGURE edge alive 3 s after the drain command and its 2 s grace: %s" % edge.alive())
        if edge.alive():
            check_eq(edge.stop(10), 0, "drained edge exit status on SIGTERM")

    edge2 = env.start_edge([writer], replay_cap=100000, heartbeat_s=1, drain_grace_s=3,
                           max_streams=3, cors_origins=ORIGIN)
    edge2.wait_ready()
    port2 = sc.edge_port(edge2)

    @t.case
    def stream_position_each_format():
        # A stream without a last id starts with its position P, the edge's
        # head (contract: Stream position); a client cut before its first
        # item resumes from P and gets everything published meanwhile.
        head = sc.db_head(env.dsn)
        want = {"sse": b"id: %d\n\n" % head, "ndjson": b'{"type":"heartbeat","id":"%d"}\n' % head,
                "json-seq": b'\x1e{"type":"heartbeat","id":"%d"}\n' % head}
        cs = {fmt: sc.StreamClient(port2, stream_path([TOPIC], fmt), keep_raw=True) for fmt in FORMATS}
        sc.run_clients(cs.values(), 10, until=lambda: all(len(c.raw) >= len(want[f]) for f, c in cs.items()))
        for fmt, c in cs.items():
            c.close()
            check_eq(bytes(c.raw[:len(want[fmt])]), want[fmt], "%s: the first bytes are the position" % fmt)
            check_eq(errs_of(c, fmt), [], "%s envelopes" % fmt)
            if fmt == "sse":
                check_eq(c.parser.last_id, str(head), "sse: the event stream's last event id is P")
                check_eq([f for f in c.frames if f["type"] not in ("heartbeat", "comment")], [],
                         "sse: the position dispatches no event")
            else:
                check_eq(c.frames[0]["env"], {"type": "heartbeat", "id": str(head)}, "%s first envelope" % fmt)
        new = sc.publish_batch(writer, events(TOPIC, 3))
        for fmt in FORMATS:
            c = sc.fetch(port2, stream_path([TOPIC], fmt, until="head"), timeout=15,
                         headers={"Last-Event-ID": str(head)})
            check_eq([int(f["env"]["id"]) for f in c.items()], new, "%s: resumed from P, every item" % fmt)
            check_eq(c.outcome, "complete", "%s outcome" % fmt)

    @t.case
    def negotiation_format_and_accept():
        cases = [({}, None, "sse"), ({"Accept": "*/*"}, None, "sse"),
                 ({"Accept": "text/event-stream"}, None, "sse"),
                 ({"Accept": "application/x-ndjson"}, None, "ndjson"),
                 ({"Accept": "application/json-seq"}, None, "json-seq"),
                 ({"Accept": "text/event-stream"}, "ndjson", "ndjson"),
                 ({"Accept": "application/x-ndjson"}, "json-seq", "json-seq"),
                 ({"Accept": "application/json-seq"}, "sse", "sse")]
        d = sc.db_head(env.dsn)
        for hdrs, fmt, want in cases:
            h = dict(hdrs, **{"Last-Event-ID": str(d - 1)})
            c = sc.fetch(port2, stream_path([TOPIC], fmt, until="head"), headers=h, timeout=10)
            check_eq((c.status, (c.header("content-type") or "").split(";")[0]), (200, CTYPE[want]),
                     "Accept %r format=%r" % (hdrs.get("Accept"), fmt))
            check_eq(c.outcome, "complete", "negotiated %s stream completes" % want)
        c = sc.fetch(port2, stream_path([TOPIC]), headers={"Accept": "application/xml"})
        check_eq(sc.check_problem(c, 406), [], "Accept application/xml -> 406 problem")
        c = sc.fetch(port2, stream_path([TOPIC], "xml"))
        check_eq(sc.check_problem(c, 406), [], "format=xml (unsupported format) -> 406 problem")

    @t.case
    def problem_statuses():
        head = sc.db_head(env.dsn)
        bad = [
            ("/v1/stream", {}, 400, "no topic"),
            ("/v1/stream?format=sse", {}, 400, "no topic, only a format"),
            (stream_path(["t%d" % i for i in range(65)]), {}, 400, "65 topics"),
            (stream_path(["bad%20topic"]), {}, 400, "topic with a space"),
            (stream_path([""]), {}, 400, "empty topic"),
            (stream_path(["x" * 201]), {}, 400, "topic of 201 bytes"),
            (stream_path([TOPIC]), {"Last-Event-ID": "abc"}, 400, "Last-Event-ID abc"),
            (stream_path([TOPIC]), {"Last-Event-ID": "-1"}, 400, "Last-Event-ID -1"),
            (stream_path([TOPIC]), {"Last-Event-ID": "99999999999999999999999"}, 400, "id overflow"),
            (stream_path([TOPIC], last_event_id="1x"), {}, 400, "last_event_id=1x"),
            (stream_path([TOPIC]), {"Last-Event-ID": str(head + 1000)}, 400, "future id"),
            ("/nope", {}, 404, "unknown path"),
            ("/v1/streams?topic=a", {}, 404, "unknown path near the real one"),
        ]
        for path, hdrs, status, what in bad:
            c = sc.fetch(port2, path, headers=hdrs)
            check_eq(sc.check_problem(c, status), [], what)
            check_eq(c.header("cache-control"), "no-store", "%s: Cache-Control" % what)
        c = sc.fetch(port2, stream_path([TOPIC]), method="POST", body=b"")
        check_eq(sc.check_problem(c, 405), [], "POST /v1/stream -> 405")
        check("GET" in (c.header("allow") or ""), "405 carries Allow: %r" % c.header("allow"))
        c = sc.fetch(port2, stream_path([TOPIC]), method="POST", body=b"{}",
                     headers={"Content-Type": "application/json"})
        check_eq(sc.check_problem(c, 405), [], "POST /v1/stream with a 2-byte body -> 405")
        # 64 topics is fine
        c = sc.fetch(port2, stream_path(["t%d" % i for i in range(64)], until="head"),
                     headers={"Last-Event-ID": str(head)})
        check_eq((c.status, c.outcome), (200, "complete"), "64 topics accepted")
        # the query id wins... unless the header is given: the header wins
        c = sc.fetch(port2, stream_path([TOPIC], last_event_id=str(head - 2), until="head"),
                     headers={"Last-Event-ID": str(head - 1)})
        check_eq(c.ids(), [r[0] for r in sc.table_rows(env.dsn, [TOPIC], after=head - 1)],
                 "Last-Event-ID header wins over last_event_id")
        c = sc.fetch(port2, stream_path([TOPIC], last_event_id=str(head - 2), until="head"))
        check_eq(c.ids(), [r[0] for r in sc.table_rows(env.dsn, [TOPIC], after=head - 2)],
                 "last_event_id query parameter resumes")

    @t.case
    def stream_headers_cors_head_options():
        c = sc.StreamClient(port2, stream_path([TOPIC]), headers={"Origin": ORIGIN})
        sc.run_until_open([c])
        check_eq(c.status, 200, "stream status")
        check_eq(c.header("cache-control"), "no-store", "Cache-Control: no-store")
        check_eq(c.header("x-accel-buffering"), "no", "X-Accel-Buffering: no")
        check_eq(c.header("access-control-allow-origin"), ORIGIN, "CORS origin echoed")
        c.close()
        c = sc.StreamClient(port2, stream_path([TOPIC]), headers={"Origin": "http://evil.example"})
        sc.run_until_open([c])
        check_eq((c.status, c.header("access-control-allow-origin")), (200, None),
                 "no CORS header for an origin not configured")
        c.close()
        c = sc.fetch(port2, stream_path([TOPIC]), method="HEAD")
        check_eq((c.status, (c.header("content-type") or "").split(";")[0], len(c.raw)),
                 (200, "text/event-stream", 0), "HEAD: status, type, no body")
        c = sc.fetch(port2, stream_path([TOPIC]), method="OPTIONS",
                     headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET",
                              "Access-Control-Request-Headers": "last-event-id"})
        check(c.status in (200, 204), "OPTIONS status %r" % c.status)
        check_eq(c.header("access-control-allow-origin"), ORIGIN, "preflight allows the origin")
        check("GET" in (c.header("access-control-allow-methods") or ""), "preflight allows GET")
        check("last-event-id" in (c.header("access-control-allow-headers") or "").lower(),
              "preflight allows Last-Event-ID: %r" % c.header("access-control-allow-headers"))

    @t.case
    def too_many_streams_429():
        cs = [sc.StreamClient(port2, stream_path([TOPIC])) for _ in range(3)]
        sc.run_until_open(cs)
        check_eq([c.status for c in cs], [200, 200, 200], "three streams within --max-streams 3")
        c = sc.fetch(port2, stream_path([TOPIC]))
        check_eq(sc.check_refusal(c, "sse", "overloaded", 429), [], "fourth SSE stream -> reconnect overloaded")
        r = c.frames[0]["env"]["retry_ms"]
        check(2500 <= r <= 7500, "overloaded retry_ms %d is seconds (2.5..7.5 s)" % r)
        c = sc.fetch(port2, stream_path([TOPIC], "ndjson"))
        check_eq(sc.check_refusal(c, "ndjson", "overloaded", 429), [], "fourth NDJSON stream -> 429 problem")
        for x in cs:
            x.close()
        time.sleep(0.5)   # the edge notices the closed sockets
        c = sc.StreamClient(port2, stream_path([TOPIC]))
        sc.run_until_open([c])
        check_eq(c.status, 200, "a stream fits again once the others closed")
        c.close()

    @t.case
    def slow_request_headers_are_closed():
        s = socket.create_connection(("127.0.0.1", port2))
        s.settimeout(1.0)
        req = b"GET /v1/stream?topic=fmt.a HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
        t0 = time.monotonic()
        closed_at = None
        for i, ch in enumerate(req):
            try:
                s.send(bytes([ch]))
            except OSError:
                closed_at = time.monotonic() - t0
                break
            try:
                d = s.recv(4096)
                if d == b"" or d.startswith(b"HTTP/1.1 408") or d:
                    closed_at = time.monotonic() - t0
                    break
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.monotonic() - t0
                break
            if time.monotonic() - t0 > 90:
                break
        s.close()
        log("FIGURE slow header sender closed after %s s" % (None if closed_at is None else round(closed_at, 1)))
        check(closed_at is not None and closed_at < 90, "a client sending headers 1 byte/s is closed")

    @t.case
    def database_lost_after_first_byte_is_a_reconnect_envelope():
        # 3,000 events of ~2 KiB: a replay that a slow reader keeps in progress.
        big = sc.publish_many(writer, events("fmt.big", 3000, pad=2000), batch=500)
        harness.wait_until(lambda: sc.db_head(env.dsn) >= big[-1], 30, "big rows committed")
        cs = {fmt: sc.StreamClient(port2, stream_path(["fmt.big"], fmt), rcvbuf=8192,
                                   read_rate=200000, keep_raw=True,
                                   headers={"Last-Event-ID": str(big[0] - 1)}) for fmt in FORMATS}
        sc.run_until_open(cs.values(), also=lambda: all(c.items() for c in cs.values()))
        check(all(c.status == 200 and c.items() for c in cs.values()), "replays started")
        sc.set_db_connections(env.admin_dsn, env.dbname, False)
        try:
            t_end = time.monotonic() + 20
            while time.monotonic() < t_end and not all(c.done for c in cs.values()):
                sc.set_db_connections(env.admin_dsn, env.dbname, False)
                sc.run_clients([c for c in cs.values() if not c.done], 1.0)
                for c in cs.values():
                    c.read_rate = None   # now read the rest at full speed
        finally:
            sc.set_db_connections(env.admin_dsn, env.dbname, True)
        for fmt, c in cs.items():
            log("FIGURE %s: %d items before the outcome %s" % (fmt, len(c.items()), c.outcome))
            # A database that fails mid-replay passes: the client is told to come back
            # with its last id (reconnect unavailable), never a problem document.
            check_eq((c.outcome, c.terminal and c.terminal["env"].get("reason")), ("reconnect", "unavailable"),
                     "%s: the replay ends with reconnect unavailable" % fmt)
            r = c.terminal["env"].get("retry_ms")
            check(isinstance(r, int) and 500 <= r <= 1500, "%s: a jittered retry hint, got %r" % (fmt, r))
            check_eq(errs_of(c, fmt), [], "%s: the whole body parses as frames (no problem document "
                     "glued on)" % fmt)
            check(b"application/problem+json" not in bytes(c.raw), "%s: no problem document in the body" % fmt)
            check(len(c.items()) < 3000, "%s: the reconnect came during the replay" % fmt)

    @t.case
    def unavailable_before_first_byte_is_503():
        sc.set_db_connections(env.admin_dsn, env.dbname, False)
        try:
            time.sleep(0.5)
            c = sc.fetch(port2, stream_path([TOPIC], "ndjson"), headers={"Last-Event-ID": "1"}, timeout=30)
            cs = sc.fetch(port2, stream_path([TOPIC]), headers={"Last-Event-ID": "1"}, timeout=30)
        finally:
            sc.set_db_connections(env.admin_dsn, env.dbname, True)
        check_eq(sc.check_refusal(c, "ndjson", "unavailable", 503), [],
                 "NDJSON replay with the database down -> 503 problem")
        # The database is gone, so the edge is not ready either: SSE hears a reconnect.
        errs = sc.check_refusal(cs, "sse", "unavailable", 503)
        if errs:
            errs = sc.check_refusal(cs, "sse", "not_ready", 503)
        check_eq(errs, [], "SSE replay with the database down -> 200 + reconnect (unavailable or not_ready)")

    @t.case
    def abrupt_close_when_the_edge_dies():
        # The cases before took the database away: the writer answers unavailable
        # until it has reconnected (back-off up to 5 s), which /readyz shows.
        harness.wait_until(lambda: harness.http_get(writer.http_url + "/readyz")[0] == 200, 30,
                           "the writer is ready again after the database came back")
        # A new stream needs the edge's own readiness (database and a recent tick).
        harness.wait_until(lambda: harness.http_get(edge2.url + "/readyz")[0] == 200, 30,
                           "edge2 is ready again after the database came back")
        c = sc.StreamClient(port2, stream_path([TOPIC], "json-seq"))
        sc.run_until_open([c])
        check_eq(c.status, 200, "json-seq stream open")
        sc.publish_batch(writer, events(TOPIC, 2))
        sc.run_clients([c], 3.0, until=lambda: len(c.items()) >= 2)
        edge2.kill()
        sc.run_clients([c], 5.0)
        check_eq(c.outcome, "abrupt_close", "EOF without a terminal envelope is abrupt_close")
        check_eq(len(c.items()), 2, "items before the cut were parsed")

    edge3 = env.start_edge([writer], heartbeat_s=1, drain_grace_s=3)
    edge3.wait_ready()
    port3 = sc.edge_port(edge3)

    @t.case
    def draining_503_with_retry_after():
        # edge3 started before the cases that took the database away: its pool reconnects with
        # back-off (up to 5 s, longer on a loaded machine), and until then a stream is told
        # reconnect not_ready.  Its /readyz says when.
        harness.wait_until(lambda: harness.http_get(edge3.url + "/readyz")[0] == 200, 30,
                           "edge3 is ready again after the database came back",
                           detail=lambda: harness.http_get(edge3.url + "/readyz")[:3:2])
        c = sc.StreamClient(port3, stream_path([TOPIC]))
        sc.run_until_open([c])
        check_eq((c.status, c.done), (200, False),
                 "edge3 stream open (readyz: %r)" % (harness.http_get(edge3.url + "/readyz")[:3:2],))
        edge3.signal(signal.SIGTERM)
        # the signal is handled asynchronously: wait (bounded) for /readyz first
        harness.wait_until(lambda: harness.http_get(edge3.url + "/readyz")[0] == 503, 3,
                           "/readyz 503 after SIGTERM")
        n = sc.fetch(port3, stream_path([TOPIC], "json-seq"), timeout=5)
        check_eq(sc.check_refusal(n, "json-seq", "draining", 503), [], "new json-seq stream while draining -> 503")
        n = sc.fetch(port3, stream_path([TOPIC]), timeout=5)
        check_eq(sc.check_refusal(n, "sse", "draining", 503), [], "new SSE stream while draining -> reconnect")
        sc.run_clients([c], 6.0)
        check_eq((c.outcome, c.terminal and c.terminal["env"].get("reason")), ("reconnect", "draining"),
                 "open stream got reconnect draining")
        check_eq(edge3.wait_exit(6), 0, "edge exit status after drain")

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
sys.exit(rc)
