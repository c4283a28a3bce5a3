"""Subscriber access control on the edge-gateway (issue 13, docs/security.md).

A real edge with --auth-keys (a JWKS file with an HS256, an RS256 and an
ES256 key), a real writer and PostgreSQL.  Tokens are minted here: HS256
with hmac, RS256 and ES256 with the openssl command (keys generated into
the test's temp dir; an ES256 DER signature is turned into raw r||s).

- each algorithm's token streams the topics it covers;
- alg none, HS256 keyed with the RSA public key, an unknown kid, expired,
  nbf in the future, wrong aud, wrong iss, a bad signature, a truncated
  token, a 16 KiB token: 401 problem with WWW-Authenticate: Bearer
  error="invalid_token", and nothing streamed; no token: 401 with a bare
  Bearer challenge; a token not covering a topic: 403;
- orders/* reads orders/1 and gets 403 for users/1;
- access_token= in the query is not looked at (a second edge with
  --auth-query-token takes it);
- a token expiring while the stream is open ends it at exp with reconnect
  token_expired, and the client resumes with a fresh token from its last id;
- SIGHUP rotates the keys: an open stream of a removed key ends with
  reconnect token_expired, a new-key token is accepted, an old-key token
  refused; a broken key file keeps the keys;
  {"cmd":"reload"} over the control socket does the same;
- a key file in a Secret-like volume (..data swapped on update) is reloaded
  by itself (--auth-keys-watch);
- CORS with credentials: the origin is echoed with
  Access-Control-Allow-Credentials, never *;
- studio_auth_refused_total counts by reason;
- --max-streams-per-ip: the third stream from one address gets 429 with
  Retry-After; X-Forwarded-For counts only from --trusted-proxies.
"""

import hashlib
import hmac
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402
import tokens  # noqa: E402

t = harness.Tests()

AUD, ISS = tokens.AUD, tokens.ISS
b64u, openssl, Keys, write_jwks, bearer = tokens.b64u, tokens.openssl, tokens.Keys, tokens.write_jwks, tokens.bearer


def non_meta(frames):
    return [f for f in frames if f["type"] not in ("heartbeat", "comment")]


def refused(port, topic, headers, status, challenge, what, query=""):
    """The request is refused with a problem, the right challenge, and no stream."""
    c = sc.fetch(port, "/v1/stream?topic=%s%s" % (topic, query), headers=headers, timeout=10)
    errs = sc.check_problem(c, status)
    check(not errs, "%s: %s" % (what, "; ".join(errs)))
    check_eq(c.header("www-authenticate"), challenge, "%s: WWW-Authenticate" % what)
    check_eq(c.frames, [], "%s: nothing streamed" % what)
    doc = c.body_json()
    # The client learns the RFC 6750 code only, never which check failed.
    for word in ("exp", "nbf", "kid", "aud", "iss", "signature", "alg"):
        check(word not in doc.get("detail", ""), "%s: detail %r names the check (%s)" % (what, doc["detail"], word))
    return c


INVALID = 'Bearer error="invalid_token"'


def first_items(port, topic, headers, after, n, what, timeout=15):
    """Streams topic from after (a replay), until n items came; returns the client."""
    c = sc.StreamClient(port, "/v1/stream?topic=%s" % topic, headers=dict(headers, **{"Last-Event-ID": str(after)}),
                        stop=lambda cl: cl.n_items >= n)
    sc.run_clients([c], timeout)
    c.close()
    check_eq(c.status, 200, "%s: status (body %r)" % (what, bytes(c.raw[:200])))
    check(c.n_items >= n, "%s: %d items, want %d" % (what, c.n_items, n))
    return c


with harness.Env() as env:
    keys_a = Keys(env.tmp, "a")
    keys_b = Keys(env.tmp, "b")
    jwks_path = os.path.join(env.tmp, "jwks.json")
    write_jwks(jwks_path, keys_a.jwks)

    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()
    edge = env.start_edge([writer], auth_keys=jwks_path, auth_audience=AUD, auth_issuer=ISS,
                          cors_origins="https://app.test", heartbeat_s=1,
                          extra_env={"STUDIO_LOG_LEVEL": "debug"})
    edge.wait_ready()
    port = sc.edge_port(edge)

    base = sc.publish_batch(writer, [{"topic": "orders/0", "data": {"n": 0}}])[-1]
    seqs = sc.publish_batch(writer, [{"topic": t_, "data": {"n": i}} for i, t_ in
                                     enumerate(["orders/1", "users/1", "orders/1", "users/1"])])
    harness.wait_until(lambda: (sc.metric(sc.get_metrics(port), "studio_history_head") or 0) >= seqs[-1],
                       10, "the edge's history reached the rows")

    @t.case
    def startup_says_auth_is_on():
        harness.wait_until(lambda: "access control on: 3 keys" in edge.logs(200), 5, "the start line")

    @t.case
    def each_algorithm_streams():
        for alg in ("HS256", "RS256", "ES256"):
            c = first_items(port, "orders/1", bearer(keys_a.token(alg)), base, 2, alg)
            check_eq([int(f["env"]["id"]) for f in c.items()][:2], [seqs[0], seqs[2]], "%s: the orders/1 items" % alg)

    @t.case
    def cookie_streams():
        first_items(port, "orders/1", {"Cookie": "x=1; studio_token=" + keys_a.token("ES256")}, base, 1, "cookie")

    @t.case
    def head_is_checked_too():
        c = sc.fetch(port, "/v1/stream?topic=orders/1", method="HEAD", timeout=5)
        check_eq(c.status, 401, "HEAD without a token")
        c = sc.fetch(port, "/v1/stream?topic=orders/1", method="HEAD", headers=bearer(keys_a.token()), timeout=5)
        check_eq(c.status, 200, "HEAD with a token")

    @t.case
    def refusals():
        now = int(time.time())
        ka = keys_a
        rsa_pub = ka.rsa_pub_pem
        # HS256 keyed with the RSA public key's PEM text, under the RSA key's kid.
        h = {"alg": "HS256", "typ": "JWT", "kid": "rsa-a"}
        claims = {"exp": now + 600, "aud": AUD, "iss": ISS, "topics": ["*"]}
        signing = (b64u(json.dumps(h).encode()) + "." + b64u(json.dumps(claims).encode())).encode()
        confused = signing.decode() + "." + b64u(hmac.new(rsa_pub, signing, hashlib.sha256).digest())
        good = ka.token("RS256")
        bad_sig = good[:-6] + ("AAAAAA" if not good.endswith("AAAAAA") else "BBBBBB")
        cases = [
            ("alg none", ka.token(header={"alg": "none", "typ": "JWT", "kid": "hs-a"})),
            ("alg none without kid", ka.token(header={"alg": "none"})),
            ("HS256 keyed with the RSA public key", confused),
            ("unknown kid", ka.token("HS256", kid="nope")),
            ("a key from another set", keys_b.token("ES256")),
            ("expired", ka.token("ES256", exp=now - 120)),
            ("nbf in the future", ka.token("HS256", nbf=now + 300)),
            ("wrong aud", ka.token("RS256", aud="another-service")),
            ("wrong iss", ka.token("HS256", iss="https://evil.test")),
            ("no exp", ka.token("HS256", exp=None)),
            ("bad signature", bad_sig),
            ("truncated", good[:len(good) // 2]),
            ("16 KiB", ka.token("HS256", pad="x" * 12000)),
            ("garbage", "not-a-token"),
        ]
        before = sc.get_metrics(port)
        for what, tok in cases:
            for fmt in ("sse", "ndjson"):
                refused(port, "orders/1", bearer(tok), 401, INVALID, "%s (%s)" % (what, fmt), "&format=" + fmt)
        refused(port, "orders/1", {"Cookie": "studio_token=" + cases[0][1]}, 401, INVALID, "alg none in the cookie")
        refused(port, "orders/1", {}, 401, "Bearer", "no token")
        refused(port, "orders/1", {"Authorization": "Basic dTpw"}, 401, "Bearer", "Basic credentials")
        after = sc.get_metrics(port)

        def delta(reason):
            return (sc.metric(after, "studio_auth_refused_total", reason=reason) or 0) - \
                (sc.metric(before, "studio_auth_refused_total", reason=reason) or 0)
        check_eq(delta("expired"), 2, "refusals counted as expired")
        check_eq(delta("invalid"), 2 * (len(cases) - 1) + 1, "refusals counted as invalid")
        check_eq(delta("missing"), 2, "refusals counted as missing")
        logs = edge.logs(2000)
        check("stream refused (invalid): alg differs from the key's alg" in logs, "the reason is logged at debug")
        check(good not in logs and confused not in logs, "no token in the logs")

    @t.case
    def prefix_pattern_covers_only_its_topics():
        tok = keys_a.token("HS256", topics=["orders/*"])
        first_items(port, "orders/1", bearer(tok), base, 1, "orders/* reads orders/1")
        refused(port, "users/1", bearer(tok), 403, 'Bearer error="insufficient_scope"', "orders/* on users/1")
        refused(port, "orders/1&topic=users/1", bearer(tok), 403, 'Bearer error="insufficient_scope"',
                "orders/* on orders/1 and users/1")
        refused(port, "orders", bearer(tok), 403, 'Bearer error="insufficient_scope"', "orders/* on orders")
        exact = keys_a.token("ES256", topics=["users/1"])
        first_items(port, "users/1", bearer(exact), base, 1, "an exact topic")
        m = sc.get_metrics(port)
        check((sc.metric(m, "studio_auth_refused_total", reason="forbidden") or 0) >= 3, "forbidden counted")

    @t.case
    def query_token_refused_by_default():
        tok = keys_a.token("HS256")
        refused(port, "orders/1", {}, 401, "Bearer", "access_token= by default", "&access_token=" + tok)
        check(tok not in edge.logs(2000), "the query token is not logged")

    @t.case
    def cors_with_credentials():
        c = sc.fetch(port, "/v1/stream?topic=orders/1", method="OPTIONS",
                     headers={"Origin": "https://app.test", "Access-Control-Request-Method": "GET"}, timeout=5)
        check_eq(c.header("access-control-allow-origin"), "https://app.test", "preflight origin echoed")
        check_eq(c.header("access-control-allow-credentials"), "true", "preflight credentials")
        check("Authorization" in (c.header("access-control-allow-headers") or ""), "Authorization allowed")
        c = sc.fetch(port, "/v1/stream?topic=orders/1", headers={"Origin": "https://app.test"}, timeout=5)
        check_eq(c.status, 401, "a refusal")
        check_eq(c.header("access-control-allow-origin"), "https://app.test", "401 readable by the page")
        check_eq(c.header("access-control-allow-credentials"), "true", "401 with credentials")
        c = first_items(port, "orders/1", dict(bearer(keys_a.token()), Origin="https://app.test"), base, 1, "stream")
        check_eq(c.header("access-control-allow-origin"), "https://app.test", "stream origin echoed (never *)")
        check_eq(c.header("access-control-allow-credentials"), "true", "stream credentials")
        c = sc.fetch(port, "/v1/stream?topic=orders/1", headers={"Origin": "https://evil.test"}, timeout=5)
        check_eq(c.header("access-control-allow-origin"), None, "another origin gets nothing")
        check_eq(c.header("access-control-allow-credentials"), None, "another origin: no credentials")

    @t.case
    def token_expiry_ends_the_stream_at_exp():
        """exp 3 s ahead: live items flow, then reconnect token_expired at exp;
        a fresh token from the last id resumes with no gap."""
        exp = int(time.time()) + 3
        tok = keys_a.token("HS256", exp=exp, topics=["orders/*"])
        c = sc.StreamClient(port, "/v1/stream?topic=orders/e", headers=bearer(tok))
        sent = []

        def tick(now):
            if c.status == 200 and len(sent) < 2 and time.time() < exp - 1.5:
                sent.extend(sc.publish_batch(writer, [{"topic": "orders/e", "data": {"k": len(sent)}}]))
        sc.run_clients([c], 15, tick=tick)
        t_end = time.time()
        c.close()
        check_eq(c.status, 200, "status")
        frames = non_meta(c.frames)
        check(frames and frames[-1]["type"] == "reconnect", "last frame %r, want reconnect" %
              [(f["type"], f["env"]) for f in frames][-3:])
        check_eq(frames[-1]["env"].get("reason"), "token_expired", "reconnect reason")
        check_eq(c.outcome, "reconnect", "outcome")
        check(exp - 0.2 <= t_end <= exp + 2.0, "ended at %.2f, exp %d" % (t_end, exp))
        check_eq(c.ids(), sent, "the live items before exp")
        errs = sc.check_envelopes(c, "sse")
        check(not errs, "; ".join(errs))
        # Resume with a fresh token from the last id: what was published meanwhile comes, no gap.
        more = sc.publish_batch(writer, [{"topic": "orders/e", "data": {"k": 9}}])
        last = c.ids()[-1] if c.ids() else base
        c2 = first_items(port, "orders/e", bearer(keys_a.token("ES256", topics=["orders/*"])), last, 1, "resume")
        check_eq(c2.ids()[:1], more, "resumed from the last id with no gap")

    @t.case
    def sighup_rotates_keys_and_ends_the_old_keys_streams():
        """Rotation from key set a to b: the stream verified by a key that is
        gone ends at once with reconnect token_expired (issue 25: a leaked
        key stops working at once), and resumes with a token of b."""
        old = keys_a.token("HS256", topics=["rot/*"])
        c = sc.StreamClient(port, "/v1/stream?topic=rot/1", headers=bearer(old))
        state = {"phase": 0}

        def tick(now):
            if c.status == 200 and state["phase"] == 0:
                write_jwks(jwks_path, keys_b.jwks)
                edge.signal(signal.SIGHUP)
                state["phase"] = 1
        sc.run_clients([c], 20, until=lambda: c.outcome is not None, tick=tick)
        c.close()
        check_eq(state["phase"], 1, "the reload happened while the stream was open")
        frames = non_meta(c.frames)
        check(frames and frames[-1]["type"] == "reconnect", "last frame %r, want reconnect" %
              [(f["type"], f["env"]) for f in frames][-3:])
        check_eq(frames[-1]["env"].get("reason"), "token_expired", "reconnect reason")
        harness.wait_until(lambda: "reloaded, 3 keys" in edge.logs(300), 5, "the reload log")
        seq = sc.publish_batch(writer, [{"topic": "rot/1", "data": {"r": 1}}])[-1]
        c2 = first_items(port, "rot/1", bearer(keys_b.token("HS256", topics=["rot/*"])), seq - 1, 1, "resume with b")
        check_eq(c2.ids()[:1], [seq], "the event after the reload, with the new key")
        refused(port, "rot/1", bearer(keys_a.token("HS256", topics=["rot/*"])), 401, INVALID, "old key after rotation")
        first_items(port, "orders/1", bearer(keys_b.token("RS256")), base, 1, "new RSA key after rotation")
        # A broken file keeps the keys in use and says why.
        with open(jwks_path, "w") as f:
            f.write('{"keys":[{"kty":"oct","kid":"x","alg":"HS256","k":"c2hvcnQ"}]}')
        edge.signal(signal.SIGHUP)
        harness.wait_until(lambda: "reload failed, keeping the 3 keys in use" in edge.logs(300), 5, "the failure log")
        first_items(port, "orders/1", bearer(keys_b.token("ES256")), base, 1, "keys kept after a failed reload")
        # Control: reload refuses the broken file, then takes the fixed one.
        p = harness.studioctl("reload", "--control", edge.control, timeout=20)
        check_eq(p.returncode, 1, "studioctl reload of a broken file")
        check("shorter than 32 bytes" in p.stdout.decode(), "the reason in the reply: %r" % p.stdout)
        write_jwks(jwks_path, keys_a.jwks + keys_b.jwks)
        p = harness.studioctl("reload", "--control", edge.control, timeout=20)
        check_eq(p.returncode, 0, "studioctl reload: %r" % p.stdout)
        check_eq(json.loads(p.stdout.decode()).get("keys"), 6, "keys after reload")
        first_items(port, "orders/1", bearer(keys_a.token("ES256")), base, 1, "old key back after control reload")

    # A second edge that accepts query tokens, without aud/iss, and with 2 loops.
    edge2 = env.start_edge([writer], auth_keys=jwks_path, auth_query_token=True, threads=2)
    edge2.wait_ready()
    port2 = sc.edge_port(edge2)

    @t.case
    def query_token_when_allowed():
        tok = keys_a.token("HS256", aud=None, iss=None)
        c = sc.StreamClient(port2, "/v1/stream?topic=orders/1&access_token=" + tok,
                            headers={"Last-Event-ID": str(base)}, stop=lambda cl: cl.n_items >= 1)
        sc.run_clients([c], 15)
        c.close()
        check_eq(c.status, 200, "query token with --auth-query-token")
        check(tok not in edge2.logs(2000), "the query token is not logged")
        refused(port2, "orders/1", {}, 401, INVALID, "a bad query token", "&access_token=x.y.z")

    # A third edge without access control, with a per-address bound of 2 and
    # 127.0.0.2 as its trusted proxy (every 127/8 address is loopback).
    edge3 = env.start_edge([writer], max_streams_per_ip=2, trusted_proxies="127.0.0.2/32")
    edge3.wait_ready()
    port3 = sc.edge_port(edge3)

    def open_raw(src, xff=None, topic="orders/1"):
        """A stream over a socket bound to src; returns (socket, status, head text)."""
        return sc.open_raw_stream(port3, "/v1/stream?topic=%s&format=ndjson" % topic,
                                  [("X-Forwarded-For", xff)] if xff else [], src)

    @t.case
    def without_keys_the_edge_says_so():
        harness.wait_until(lambda: "access control off" in edge3.logs(200), 5, "the start warning")

    @t.case
    def per_ip_limit_and_trusted_proxy():
        held = []
        try:
            for i in range(2):
                s, st, _ = open_raw("127.0.0.1")
                held.append(s)
                check_eq(st, 200, "stream %d from 127.0.0.1" % (i + 1))
            s, st, head = open_raw("127.0.0.1")
            s.close()
            check_eq(st, 429, "the third stream from 127.0.0.1")
            check("\r\nRetry-After: " in head, "Retry-After on the 429: %r" % head)
            check("application/problem+json" in head, "a problem document: %r" % head)
            # 127.0.0.1 is no proxy of ours: its X-Forwarded-For is ignored.
            s, st, _ = open_raw("127.0.0.1", xff="198.51.100.1")
            s.close()
            check_eq(st, 429, "an untrusted peer cannot pick its address")
            # Through the trusted proxy the forwarded address counts.
            for i in range(2):
                s, st, _ = open_raw("127.0.0.2", xff="203.0.113.5, 198.51.100.1")
                held.append(s)
                check_eq(st, 200, "stream %d for 198.51.100.1 via the proxy" % (i + 1))
            s, st, _ = open_raw("127.0.0.2", xff="198.51.100.1")
            s.close()
            check_eq(st, 429, "the third stream for 198.51.100.1 via the proxy")
            s, st, _ = open_raw("127.0.0.2", xff="198.51.100.2")
            held.append(s)
            check_eq(st, 200, "another client behind the same proxy")
            s, st, _ = open_raw("127.0.0.2")
            held.append(s)
            check_eq(st, 200, "the proxy itself, without the header")
            m = sc.get_metrics(port3)
            check_eq(sc.metric(m, "studio_ip_limit_refused_total"), 3, "refusals counted")
            # A closed stream gives its slot back.
            held.pop(0).close()

            def reopened():
                s2, st2, _ = open_raw("127.0.0.1")
                if st2 == 200:
                    held.append(s2)
                    return True
                s2.close()
                return False
            harness.wait_until(reopened, 10, "a slot of 127.0.0.1 freed by the close")
        finally:
            for s in held:
                s.close()

    @t.case
    def rotated_secret_is_reloaded_without_a_signal():
        """A key file in a volume laid out as the kubelet lays out a Secret:
        after the update (..data swapped) the edge takes the new keys by
        itself (--auth-keys-watch; 200 ms here, 10 s by default)."""
        vol = os.path.join(env.tmp, "secret")
        os.makedirs(vol)
        path = tokens.secret_volume(vol, keys_a.jwks, 1)
        e4 = env.start_edge([writer], auth_keys=path, auth_keys_watch="200ms")
        e4.wait_ready()
        p4 = sc.edge_port(e4)
        first_items(p4, "orders/1", bearer(keys_a.token("HS256", aud=None, iss=None)), base, 1, "key a before")
        tokens.secret_volume(vol, keys_b.jwks, 2)
        harness.wait_until(lambda: "--auth-keys %s: reloaded, 3 keys" % path in e4.logs(300), 30,
                           "the edge reloads the rotated Secret by itself")
        refused(p4, "orders/1", bearer(keys_a.token("HS256", aud=None, iss=None)), 401, INVALID,
                "key a after the rotation")
        first_items(p4, "orders/1", bearer(keys_b.token("RS256", aud=None, iss=None)), base, 1, "key b after")
        rc = e4.stop()
        check_eq(rc, 0, "%s exit status (logs: %s)" % (e4.name, e4.logs(40) if rc else ""))
        check("Sanitizer" not in e4.logs(400), "%s: a sanitizer report" % e4.name)

    @t.case
    def edges_exit_cleanly():
        """SIGTERM: exit 0 (a sanitizer build fails here on a leak or a race)."""
        for p in (edge, edge2, edge3):
            rc = p.stop()
            check_eq(rc, 0, "%s exit status (logs: %s)" % (p.name, p.logs(40) if rc else ""))
            check("Sanitizer" not in p.logs(400), "%s: a sanitizer report" % p.name)

    t.main()
