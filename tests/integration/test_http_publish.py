"""Publishing over HTTP: broker-writer --ingest-http (issue 24 items 2 and 5,
docs/publishing.md).  A real writer, edge and PostgreSQL; clients are Python's
http.client (keep-alive), raw sockets for the malformed cases, curl and Node
for the documented examples.

- shapes: one object, an array, change signals (data null, data absent) and
  unicode/escaped data over one kept-alive connection; an edge's SSE stream
  shows each `data` byte for byte as posted (posted in compact form: stored
  data is compact, docs/publishing.md), the about entries as posted.
- idempotency: the same Idempotency-Key over HTTP and then over nng
  (studioctl publish --key) stores one event and answers its seq twice; the
  header with an array, or beside a different `key`, is a 400.
- token_matrix: --ingest-keys; no token, expired, alg none, unknown kid,
  a 30-day token (--ingest-max-lifetime 24h): 401
  with WWW-Authenticate: Bearer; a batch whose token does not cover one
  event: 403; nothing of them stored; a valid token stores.
- bad_input: wrong content type 415, invalid JSON 400, unknown member 400,
  10,001 events 400, 17 MiB 413 (answered before the body is sent), a body
  cut short by the client's close, a body at 1 byte/s cut by the deadline
  (408, then close); each a problem+json and nothing stored.
- sigkill_under_load: four keep-alive clients post batches while the writer
  is SIGKILLed; every event answered 200 is stored exactly once, with the
  seq the answer named.
- docs_examples: the curl, Python and Node code blocks of
  docs/publishing.md, extracted from the document and run against a writer.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from harness import check, check_eq  # noqa: E402
import tokens  # noqa: E402

t = h.Tests()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(env, port=None, **flags):
    port = port or h.free_port()
    w = env.start_writer(ingest_http="127.0.0.1:%d" % port, **flags).wait_ready()
    w.ingest_http = ("127.0.0.1", port)
    return w


def conn(w, timeout=60):
    return http.client.HTTPConnection(*w.ingest_http, timeout=timeout)


def post(c, body, headers=None, ctype="application/json"):
    """POST /v1/events on connection c; returns (status, headers dict, parsed body or text)."""
    hd = {"Content-Type": ctype} if ctype else {}
    hd.update(headers or {})
    if not isinstance(body, (bytes, bytearray)):
        body = body.encode()
    c.request("POST", "/v1/events", body=body, headers=hd)
    r = c.getresponse()
    raw = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode(errors="replace")
    return r.status, hdrs, parsed


def ok(c, body, headers=None, n=None, what=""):
    st, hd, p = post(c, body, headers)
    check_eq(st, 200, "%s: status (answer %r)" % (what, p))
    check(isinstance(p, dict) and isinstance(p.get("seqs"), list), "%s: {seqs} answer, got %r" % (what, p))
    if n is not None:
        check_eq(len(p["seqs"]), n, "%s: seqs" % what)
    return p["seqs"]


def problem(st, hd, p, status, what, words=None):
    check_eq(st, status, "%s: status (answer %r)" % (what, p))
    check(hd.get("content-type", "").startswith("application/problem+json"),
          "%s: problem+json, got %r" % (what, hd.get("content-type")))
    check(isinstance(p, dict) and p.get("status") == status and p.get("detail"),
          "%s: an RFC 9457 problem with a detail, got %r" % (what, p))
    if words:
        check(words in p["detail"], "%s: detail %r says %r" % (what, p["detail"], words))


def count(env):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"))


@t.case
def shapes():
    with h.Env() as env:
        w = start(env)
        e = env.start_edge([w]).wait_ready()
        sse = h.SseClient(e.url + "/v1/stream?topic=h/1&topic=h/2")
        h.wait_until(lambda: sse.status is not None, 10, "the SSE response head")
        c = conn(w)
        datas = ['{"a":1,"b":[true,false,null],"c":{"d":"e"}}',
                 '"caf\u00e9 \u2603 \U0001F600"',
                 '"esc \\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0000 \\u00e9 \\ud83d\\ude00"',
                 '-1.5e+300', '[]', '{}', '0', 'true']
        seqs = []
        # one object each, with the data text put in the body verbatim
        for d in datas:
            body = '{"topic":"h/1","about":["x","\u00fc"],"data":%s}' % d
            seqs += ok(c, body, n=1, what="object %s" % d[:20])
        # an array mixing data and change signals (null and absent)
        # (signals of one topic in a row would be coalesced on the stream, ADR-0197)
        arr = '[{"topic":"h/2","data":{"k":"v"}},{"topic":"h/2","data":null},{"topic":"h/1","data":"\\u2028"},' \
              '{"topic":"h/1"}]'
        seqs += ok(c, arr, n=4, what="array")
        want = [(s, d) for s, d in zip(seqs, datas + ['{"k":"v"}', None, '"\\u2028"', None])]
        sse.wait_items(len(want), 30)
        items = sse.items()
        check_eq([int(it["id"]) for it in items], [s for s, _ in want], "stream ids are the answered seqs")
        for it, (s, d) in zip(items, want):
            got = h.envelope_data_text(it["data"])
            if d is None:
                check(got is None or got == "null", "seq %d: a change signal, got data %r" % (s, got))
            else:
                check_eq(got, d, "seq %d: data on the stream byte for byte as posted" % s)
        rows = h.db_events(env.dsn)
        check_eq(rows[0][2], '["x","\u00fc"]', "about as posted")
        sse.close()


@t.case
def idempotency():
    with h.Env() as env:
        w = start(env)
        c = conn(w)
        s1 = ok(c, '{"topic":"k/1","data":{"n":1}}', {"Idempotency-Key": "pay-777"}, 1, "HTTP with a key")[0]
        s2 = h.publish(w, "k/1", data='{"n":1}', key="pay-777")
        check_eq(s2, s1, "nng with the same key answers the stored seq")
        s3 = ok(c, '{"topic":"k/1","key":"pay-777","data":{"n":2}}', None, 1, "HTTP key member, same key")[0]
        check_eq(s3, s1, "the key member is the same key")
        check_eq(count(env), 1, "one event stored")
        problem(*post(c, '[{"topic":"k/1"}]', {"Idempotency-Key": "x"}), 400, "header with an array",
                "single event")
        problem(*post(c, '{"topic":"k/1","key":"a"}', {"Idempotency-Key": "b"}), 400, "header and key differ",
                "differ")
        check_eq(count(env), 1, "still one event")


KEYDIR = tempfile.mkdtemp(prefix="studio-http-publish-")
KA = tokens.Keys(KEYDIR, "a")
JWKS = os.path.join(KEYDIR, "ingest-keys.json")


def tok(publish=("*",), exp_in=600, **kw):
    now = int(time.time())
    return KA.token(claims={"exp": now + exp_in, "iat": now, "publish": list(publish)}, **kw)


@t.case
def token_matrix():
    tokens.write_jwks(JWKS, KA.jwks)
    with h.Env() as env:
        w = start(env, ingest_keys=JWKS)
        c = conn(w)
        batch = '[{"topic":"orders/1","data":1},{"topic":"users/1","data":2}]'
        now = int(time.time())
        cases = [
            ("no token", None, 401),
            ("expired", tok(exp_in=-120), 401),
            ("alg none", KA.token(claims={"exp": now + 600, "publish": ["*"]},
                                  header={"alg": "none", "typ": "JWT", "kid": "hs-a"}), 401),
            ("unknown kid", KA.token(claims={"exp": now + 600, "publish": ["*"]}, kid="nope"), 401),
            # --ingest-max-lifetime (24 h by default, the edge's rule): a 30-day token is refused.
            ("30-day token", tok(exp_in=30 * 86400), 401),
            ("not covering one event", tok(publish=["orders/*"]), 403),
        ]
        for what, token, status in cases:
            hd = {"Authorization": "Bearer " + token} if token else {}
            st, rh, p = post(c, batch, hd)
            problem(st, rh, p, status, what)
            if status == 401:
                check(rh.get("www-authenticate", "").startswith("Bearer"), "%s: WWW-Authenticate %r" %
                      (what, rh.get("www-authenticate")))
            if st == 401:
                c = conn(w)  # refused before the body was read: the writer closes the connection
        ok(conn(w), batch, {"Authorization": "Bearer " + tok()}, 2, "valid token")
        check_eq(count(env), 2, "exactly the valid request's events stored")


def raw(w, data, timeout=30):
    """Sends bytes on a fresh connection, half-closes nothing, returns what comes back until close."""
    s = socket.create_connection(w.ingest_http, timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


def head_status(resp):
    m = re.match(rb"HTTP/1\.1 (\d{3})", resp)
    return int(m.group(1)) if m else None


@t.case
def bad_input():
    with h.Env() as env:
        w = start(env)
        c = conn(w)
        problem(*post(c, '{"topic":"b/1"}', ctype="text/plain"), 415, "text/plain")
        c = conn(w)
        problem(*post(c, '{"topic":"b/1"}', ctype=None), 415, "no content type")
        c = conn(w)
        problem(*post(c, '{"topic":"b/1",'), 400, "invalid JSON", "not valid JSON")
        problem(*post(c, '{"topic":"b/1","colour":"red"}'), 400, "unknown member", 'unknown member "colour"')
        problem(*post(c, '{"topic":"b/1","data":"x","data":"y"}'), 400, "member twice", "twice")
        problem(*post(c, '{"topic":"b/ 1"}'), 400, "bad topic (the nng decoder's words)", "topic")
        problem(*post(c, json.dumps([{"topic": "b/1"}] * 10001)), 400, "10,001 events", "10000")
        problem(*post(c, '[]'), 400, "empty array", "1..10000")
        problem(*post(c, '{"topic":"b/1","data":"%s"}' % ("x" * (256 * 1024))), 400, "data over 256 KiB",
                "data")
        # 17 MiB: the head alone gets the 413 (the body is never sent)
        s = socket.create_connection(w.ingest_http, timeout=30)
        s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (17 * 1024 * 1024))
        resp = s.recv(65536)
        s.close()
        check_eq(head_status(resp), 413, "17 MiB declared: answer %r" % resp[:200])
        check(b"request too large" in resp, "17 MiB: the nng detail words, got %r" % resp[-200:])
        # a truncated body: the client closes after half of it
        body = b'{"topic":"b/1","data":{"x":1}}'
        s = socket.create_connection(w.ingest_http, timeout=30)
        s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:len(body) // 2])
        s.shutdown(socket.SHUT_WR)
        resp = s.recv(65536)
        s.close()
        check_eq(resp, b"", "truncated body: no answer (the request is gone), got %r" % resp[:200])
        # 1 byte/s: cut by the deadline (10 s grace + 1 s per 64 KiB), 408 then close
        s = socket.create_connection(w.ingest_http, timeout=60)
        body = b'{"topic":"b/1","data":"' + b"y" * 40 + b'"}'
        s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        t0 = time.monotonic()
        resp = b""
        s.settimeout(1.0)
        for i in range(len(body)):
            try:
                s.sendall(body[i:i + 1])
            except OSError:
                break
            try:
                got = s.recv(65536)
                if not got:
                    break
                resp += got
            except socket.timeout:
                pass
        cut = time.monotonic() - t0
        s.close()
        check_eq(head_status(resp), 408, "1 byte/s: 408 (after %.1f s), got %r" % (cut, resp[:200]))
        check(cut < len(body) - 5, "cut before the body was complete (%.1f s of %d)" % (cut, len(body)))
        h.log("slow body cut after %.1f s" % cut)
        # keep-alive still works on a good connection after all of that, and nothing above was stored
        ok(conn(w), '{"topic":"b/2"}', None, 1, "a valid event after the refusals")
        rows = h.db_events(env.dsn)
        check_eq([r[1] for r in rows], ["b/2"], "only the valid event stored")


@t.case
def sigkill_under_load():
    with h.Env() as env:
        port = h.free_port()
        w = start(env, port)
        acked = {}  # marker -> seq
        lock = threading.Lock()
        stop = threading.Event()

        def client(k):
            i = 0
            while not stop.is_set():
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    while not stop.is_set():
                        evs = [{"topic": "load/%d" % k, "data": {"m": "%d-%d-%d" % (k, i, j)}} for j in range(200)]
                        st, _, p = post(c, json.dumps(evs))
                        if st == 200:
                            with lock:
                                for j, s in enumerate(p["seqs"]):
                                    acked["%d-%d-%d" % (k, i, j)] = s
                        i += 1
                except (OSError, http.client.HTTPException):
                    i += 1
                    time.sleep(0.05)

        ths = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(4)]
        for th in ths:
            th.start()
        h.wait_until(lambda: len(acked) >= 2000, 60, "2,000 events answered before the kill")
        w.kill()
        n_before = len(acked)
        w2 = start(env, port, http=w.http, ingest=w.ingest, publish=w.publish, control=w.control)
        h.wait_until(lambda: len(acked) >= n_before + 2000, 60, "2,000 more answered by the new writer")
        stop.set()
        for th in ths:
            th.join(60)
        check(w2.alive(), "the restarted writer is up")
        rows = h.psql(env.dsn, "SELECT seq, data->>'m' FROM broker_event")
        stored = {}
        for seq, m in rows:
            stored.setdefault(m, []).append(int(seq))
        for m, s in acked.items():
            if stored.get(m) != [s]:
                raise h.TestFailure("event %s answered seq %d, stored as %r" % (m, s, stored.get(m)))
        h.log("%d events answered 200 (%d before the SIGKILL), each stored once with its seq; %d rows" %
              (len(acked), n_before, len(rows)))


def doc_blocks(lang):
    text = open(os.path.join(ROOT, "docs", "publishing.md"), encoding="utf-8").read()
    return re.findall(r"```%s\n(.*?)```" % lang, text, re.S)


@t.case
def docs_examples():
    with h.Env() as env:
        w = start(env)
        base = "http://%s:%d" % w.ingest_http
        envv = dict(os.environ, STUDIO_URL=base)
        blocks = [("sh", ["sh", "-e"]), ("python", [sys.executable, "-"]), ("js", ["node", "--input-type=module", "-"])]
        ran = 0
        for lang, cmd in blocks:
            for code in doc_blocks(lang):
                p = subprocess.run(cmd, input=code.encode(), env=envv, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=60)
                check_eq(p.returncode, 0, "docs/publishing.md %s block exits 0 (stderr %r, stdout %r)" %
                         (lang, p.stderr.decode()[-400:], p.stdout.decode()[-400:]))
                check('"seqs"' in p.stdout.decode(), "%s block prints the answer, got %r" % (lang, p.stdout[-300:]))
                ran += 1
        check(ran >= 3, "curl, Python and Node examples found and run (%d)" % ran)
        rows = h.db_events(env.dsn)
        check(len(rows) >= 3, "the examples' events are stored (%d rows)" % len(rows))


if __name__ == "__main__":
    t.main()
