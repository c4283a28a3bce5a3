"""Producer credentials on the writer's ingest (issue 24 item 1, docs/security.md).

A real broker-writer with --ingest-keys (a JWKS file with an HS256, an RS256
and an ES256 key: tokens.py, the edge's test helpers), PostgreSQL, requests
sent with nngreq (raw msgpack), studioctl and the producer library.

- token_matrix: no token (a bare event, a bare batch, a request map without
  one), expired, alg none, HS256 keyed with the RSA public key (alg
  confusion), an unknown kid, a bad signature, no exp: `unauthorized`; a
  batch whose token does not cover one event's topic, or a subscriber's
  token (claim topics, no publish): `forbidden`; nothing
  of any of them stored (the table holds exactly the valid requests sent
  after them); valid HS256/RS256/ES256 tokens store; the refusals counted
  in studio_writer_rejected_total{error=...}.
- no_keys_all_shapes: without --ingest-keys the bare event, the bare batch
  and the request map (its token not looked at) are all stored.
- reload_sighup_and_control: SIGHUP swaps in a key file of other keys (old
  tokens refused, new ones stored); a broken file keeps the keys; the
  control command reload swaps back.
- rotated_secret_is_reloaded_without_a_signal: the key file in a volume laid
  out as the kubelet lays out a Secret (..data symlink swapped on update);
  the writer reloads the new keys by itself (--ingest-keys-watch).
- startup_warning: plain tcp:// (or ws://) on 0.0.0.0 without keys logs one
  warning naming the risk of each socket; loopback, or keys, log none.
- studioctl_token: --token and STUDIO_TOKEN publish; without one studioctl
  exits 1 saying unauthorized.
- producer_lib_tokens: the library with a static token, then with a token
  function that reads a file at every try: an expired token answered
  `unauthorized` is retried once with the function's next token; after the
  test rotates the file and the writer's keys, the next publish uses the
  new token.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from harness import check, check_eq  # noqa: E402
import tokens  # noqa: E402

t = h.Tests()

KEYDIR = tempfile.mkdtemp(prefix="studio-ingest-auth-")
KA = tokens.Keys(KEYDIR, "a")
KB = tokens.Keys(KEYDIR, "b")
JWKS = os.path.join(KEYDIR, "ingest-keys.json")
DRIVE = h.program("producer_drive", h.TOOLS_DIR)


def claims(publish, exp_in=600, **over):
    now = int(time.time())
    c = {"exp": now + exp_in, "iat": now, "publish": publish}
    c.update(over)
    return {k: v for k, v in c.items() if v is not None}


def tok(keys=KA, alg="HS256", publish=("*",), **over):
    return keys.token(alg, claims=claims(list(publish), **over))


def ev(topic, data=None):
    e = {"topic": topic}
    if data is not None:
        e["data"] = json.dumps(data)
    return e


def req(token, events):
    m = {"events": events}
    if token is not None:
        m["token"] = token
    return m


def count(env, where=""):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event %s" % where))


def refused(w, payload, code, what):
    rep = h.request(w, payload, timeout_ms=10000)
    check(rep.get("ok") is False, "%s: refused, got %r" % (what, rep))
    check_eq(rep.get("error"), code, "%s: error code (detail %r)" % (what, rep.get("detail")))
    return rep


def stored(w, payload, n, what):
    rep = h.request(w, payload, timeout_ms=20000)
    check(rep.get("ok") is True, "%s: stored, got %r" % (what, rep))
    check_eq(len(rep.get("seqs", [])), n, "%s: seqs" % what)
    return rep["seqs"]


def hs256_with_rsa_public_key():
    """alg confusion: an HS256 token for the RSA key's kid, its HMAC keyed with the public key's PEM."""
    import hashlib
    import hmac
    head = {"alg": "HS256", "typ": "JWT", "kid": "rsa-a"}
    signing = (tokens.b64u(json.dumps(head).encode()) + "." +
               tokens.b64u(json.dumps(claims(["*"])).encode())).encode()
    return signing.decode() + "." + tokens.b64u(hmac.new(KA.rsa_pub_pem, signing, hashlib.sha256).digest())


@t.case
def token_matrix():
    tokens.write_jwks(JWKS, KA.jwks)
    with h.Env() as env:
        w = env.start_writer(ingest_keys=JWKS).wait_ready()
        h.wait_until(lambda: "3 keys; every request needs a producer token" in w.logs(200), 10, "the start line")
        batch = [ev("orders/1", {"i": 1}), ev("users/1", {"i": 2})]
        cases = [
            ("bare event", ev("orders/1", {"a": 1}), "unauthorized"),
            ("bare batch", batch, "unauthorized"),
            ("map without token", req(None, batch), "unauthorized"),
            ("expired", req(tok(exp_in=-120), batch), "unauthorized"),
            ("no exp", req(tok(exp=None), batch), "unauthorized"),
            ("alg none", req(KA.token(claims=claims(["*"]), header={"alg": "none", "typ": "JWT", "kid": "hs-a"}),
                             batch), "unauthorized"),
            ("HS256 keyed with the RSA public key", req(hs256_with_rsa_public_key(), batch), "unauthorized"),
            ("unknown kid", req(KA.token(claims=claims(["*"]), kid="nope"), batch), "unauthorized"),
            ("key b's token", req(tok(KB), batch), "unauthorized"),
            ("bad signature", req(tok()[:-4] + "AAAA", batch), "unauthorized"),
            ("garbage token", req("x.y.z", batch), "unauthorized"),
            # a subscriber's token (claim "topics", no "publish") grants no publishing
            ("topics claim, not publish", req(KA.token(claims={"exp": int(time.time()) + 600, "topics": ["*"]}),
                                              batch), "forbidden"),
            ("one event of the batch not covered", req(tok(publish=["orders/*"]), batch), "forbidden"),
            ("exact topic only", req(tok(publish=["orders/1"]), [ev("orders/1"), ev("orders/2")]), "forbidden"),
        ]
        for what, payload, code in cases:
            rep = refused(w, payload, code, what)
            check(rep.get("detail"), "%s: a detail" % what)
        # The valid ones, after the refusals: once they are committed, anything
        # of the refused ones that had been accepted would be committed too.
        stored(w, req(tok(), batch), 2, "HS256 '*'")
        stored(w, req(tok(alg="RS256", publish=["orders/*", "users/1"]), batch), 2, "RS256 covering both")
        stored(w, req(tok(alg="ES256", publish=["orders/1"]), [ev("orders/1")]), 1, "ES256 exact")
        check_eq(count(env), 5, "rows: exactly the valid requests' events, nothing of the refused ones")
        n_unauth = sum(1 for c in cases if c[2] == "unauthorized")
        check_eq(h.metric(w.http_url, "studio_writer_rejected_total", {"error": "unauthorized"}), float(n_unauth),
                 "unauthorized counted")
        check_eq(h.metric(w.http_url, "studio_writer_rejected_total", {"error": "forbidden"}), 3.0,
                 "forbidden counted")
        logs = w.logs(400)
        for what, payload, code in cases:
            if isinstance(payload, dict) and payload.get("token"):
                check(payload["token"] not in logs, "%s: the token is not logged" % what)


@t.case
def no_keys_all_shapes():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        stored(w, ev("a/1", {"x": 1}), 1, "bare event")
        stored(w, [ev("a/1"), ev("a/2")], 2, "bare batch")
        stored(w, req("not-looked-at", [ev("a/3")]), 1, "request map with a token")
        stored(w, req(None, [ev("a/4")]), 1, "request map without a token")
        check_eq(count(env), 5, "rows")


@t.case
def reload_sighup_and_control():
    tokens.write_jwks(JWKS, KA.jwks)
    with h.Env() as env:
        w = env.start_writer(ingest_keys=JWKS).wait_ready()
        one = [ev("r/1")]
        stored(w, req(tok(KA), one), 1, "key a before the reload")
        refused(w, req(tok(KB), one), "unauthorized", "key b before the reload")
        tokens.write_jwks(JWKS, KB.jwks)
        w.signal(signal.SIGHUP)
        h.wait_until(lambda: "--ingest-keys %s: reloaded, 3 keys" % JWKS in w.logs(300), 10, "the SIGHUP reload")
        refused(w, req(tok(KA), one), "unauthorized", "key a after SIGHUP")
        stored(w, req(tok(KB, alg="ES256"), one), 1, "key b after SIGHUP")
        # A broken file keeps the keys in use and says why.
        with open(JWKS, "w") as f:
            f.write('{"keys":[{"kty":"oct","kid":"x","alg":"HS256","k":"c2hvcnQ"}]}')
        w.signal(signal.SIGHUP)
        h.wait_until(lambda: "reload failed, keeping the 3 keys in use" in w.logs(300), 10, "the failure log")
        stored(w, req(tok(KB), one), 1, "key b kept after a failed reload")
        p = h.studioctl("reload", "--control", w.control, timeout=20)
        check_eq(p.returncode, 1, "studioctl reload of a broken file (%r)" % p.stdout)
        check("shorter than 32 bytes" in p.stdout.decode(), "the reason in the reply: %r" % p.stdout)
        tokens.write_jwks(JWKS, KA.jwks)
        p = h.studioctl("reload", "--control", w.control, timeout=20)
        check_eq(p.returncode, 0, "studioctl reload: %r %r" % (p.stdout, p.stderr))
        check_eq(json.loads(p.stdout.decode()).get("keys"), 3, "keys after the control reload")
        stored(w, req(tok(KA, alg="RS256"), one), 1, "key a after the control reload")
        refused(w, req(tok(KB), one), "unauthorized", "key b after the control reload")
        check_eq(count(env), 4, "rows")
        # One key watcher, on the loop: a second one made before the loop existed printed
        # libevent's "event has no event_base set" and leaked (exit 1 under LeakSanitizer).
        logs = w.logs(100000)
        check("no event_base" not in logs, "libevent warnings in the writer's log: %r"
              % [ln for ln in logs.splitlines() if "event_base" in ln])
        check_eq(w.stop(), 0, "writer exit status")


@t.case
def rotated_secret_is_reloaded_without_a_signal():
    """docs/deploy.md "Producer keys": a rotated Secret reaches the writer's
    keys by itself (--ingest-keys-watch; 200 ms here, 10 s by default)."""
    vol = tempfile.mkdtemp(prefix="secret-", dir=KEYDIR)
    path = tokens.secret_volume(vol, KA.jwks, 1)
    with h.Env() as env:
        w = env.start_writer(ingest_keys=path, ingest_keys_watch="200ms").wait_ready()
        one = [ev("rot/1")]
        stored(w, req(tok(KA), one), 1, "key a before the rotation")
        refused(w, req(tok(KB), one), "unauthorized", "key b before the rotation")
        tokens.secret_volume(vol, KB.jwks, 2)
        h.wait_until(lambda: "--ingest-keys %s: reloaded, 3 keys" % path in w.logs(300), 30,
                     "the writer reloads the rotated Secret by itself\n" + w.logs(20))
        refused(w, req(tok(KA), one), "unauthorized", "key a after the rotation")
        stored(w, req(tok(KB, alg="ES256"), one), 1, "key b after the rotation")
        check_eq(count(env), 2, "rows")


def host_port():
    return h.free_port()


@t.case
def startup_warning():
    tokens.write_jwks(JWKS, KA.jwks)
    risk_in, risk_pub = "can publish to any topic", "reads every topic"
    with h.Env() as env:
        open_in = env.start_writer(ingest="tcp://0.0.0.0:%d" % host_port()).wait_ready()
        open_pub = env.start_writer(publish="tcp://0.0.0.0:%d" % host_port()).wait_ready()
        loop = env.start_writer().wait_ready()
        keyed = env.start_writer(ingest="tcp://0.0.0.0:%d" % host_port(),
                                 publish="tcp://0.0.0.0:%d" % host_port(), ingest_keys=JWKS).wait_ready()
        lines = [ln for ln in open_in.logs(400).splitlines() if "--ingest-keys" in ln and "tcp://" in ln]
        check_eq(len(lines), 1, "one warning for an open ingest: %r" % lines)
        check(lines and risk_in in lines[0] and open_in.ingest in lines[0] and risk_pub not in lines[0],
              "the warning names the ingest's risk: %r" % lines)
        lines = [ln for ln in open_pub.logs(400).splitlines() if "--ingest-keys" in ln and "tcp://" in ln]
        check_eq(len(lines), 1, "one warning for an open publish socket: %r" % lines)
        check(lines and risk_pub in lines[0] and open_pub.publish in lines[0] and risk_in not in lines[0],
              "the warning names the publish socket's risk: %r" % lines)
        open_ws = env.start_writer(ingest="ws://0.0.0.0:%d/ingest" % host_port()).wait_ready()
        lines = [ln for ln in open_ws.logs(400).splitlines() if "--ingest-keys" in ln and risk_in in ln]
        check_eq(len(lines), 1, "one warning for an open ws:// ingest: %r" % lines)
        for name, p in (("loopback", loop), ("with keys", keyed)):
            logs = p.logs(400)
            check(risk_in not in logs and risk_pub not in logs, "%s: no warning: %r" % (name, logs[-600:]))


@t.case
def studioctl_token():
    tokens.write_jwks(JWKS, KA.jwks)
    with h.Env() as env:
        w = env.start_writer(ingest_keys=JWKS).wait_ready()
        base = ["publish", "--writer", w.ingest, "--topic", "cli/1", "--data", "{}"]
        p = h.studioctl(*base)
        check_eq(p.returncode, 1, "no token: exit 1 (%r %r)" % (p.stdout, p.stderr))
        check(b"unauthorized" in p.stdout + p.stderr, "no token: says unauthorized: %r" % (p.stdout + p.stderr))
        p = h.studioctl(*(base + ["--token", tok(publish=["cli/*"])]))
        check_eq(p.returncode, 0, "--token: %r %r" % (p.stdout, p.stderr))
        p = h.studioctl(*(base[:3] + ["--topic", "other/1", "--data", "{}", "--token", tok(publish=["cli/*"])]))
        check_eq(p.returncode, 1, "--token not covering: exit 1")
        check(b"forbidden" in p.stdout + p.stderr, "not covering: says forbidden: %r" % (p.stdout + p.stderr))
        old = os.environ.get("STUDIO_TOKEN")
        os.environ["STUDIO_TOKEN"] = tok(alg="ES256", publish=["cli/1"])
        try:
            p = h.studioctl(*base)
        finally:
            if old is None:
                del os.environ["STUDIO_TOKEN"]
            else:
                os.environ["STUDIO_TOKEN"] = old
        check_eq(p.returncode, 0, "STUDIO_TOKEN: %r %r" % (p.stdout, p.stderr))
        check_eq(count(env, "WHERE topic = 'cli/1'"), 2, "rows of the two publishes with a token")
        check_eq(count(env), 2, "nothing else stored")


@t.case
def producer_lib_tokens():
    tokens.write_jwks(JWKS, KA.jwks)
    with h.Env() as env:
        w = env.start_writer(ingest_keys=JWKS).wait_ready()
        tfile = os.path.join(env.tmp, "token")
        with open(tfile, "w") as f:
            # the first call's token expired: the writer's `unauthorized` makes the
            # library ask the function once more and retry at once (second line)
            f.write(tok(KA, publish=["lib/*"], exp_in=-120) + "\n" + tok(KA, publish=["lib/*"]) + "\n")
        p = subprocess.Popen([DRIVE, w.ingest, "--tokens", "lib/1", tok(KA, alg="RS256", publish=["lib/1"]), tfile],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            lines = [p.stdout.readline().decode().split() for _ in range(2)]
            check(lines[0][:2] == ["static", "ok"], "static token: %r" % lines[0])
            check(lines[1][:2] == ["fn1", "ok"], "token function, first key: %r" % lines[1])
            # Rotate: the writer trusts key b only, the file holds a key-b token.
            tokens.write_jwks(JWKS, KB.jwks)
            w.signal(signal.SIGHUP)
            h.wait_until(lambda: "reloaded, 3 keys" in w.logs(300), 10, "the reload")
            with open(tfile + ".tmp", "w") as f:
                f.write(tok(KB, alg="ES256", publish=["lib/1"]))
            os.replace(tfile + ".tmp", tfile)
            out, err = p.communicate(b"go\n", timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        rest = [ln.split() for ln in out.decode().splitlines()]
        check_eq(p.returncode, 0, "producer_drive exit (stderr %r)" % err[-300:])
        check(rest and rest[0][:2] == ["fn2", "ok"], "token function after the rotation: %r" % rest)
        calls = [int(r[1]) for r in rest if r and r[0] == "calls"]
        check_eq(calls, [3], "the function asked at every try: fn1 twice (expired, then fresh), fn2 once")
        check_eq(count(env, "WHERE topic = 'lib/1'"), 3, "rows of the three publishes")


if __name__ == "__main__":
    t.main()
