"""Claims hardening on the edge-gateway (issue 25 item 3, docs/security.md).

A real edge with --auth-keys (two HS256 keys, "a" and "b", and an ES256
key) and --threads 2, a real writer
and PostgreSQL; tokens are minted here (HMAC, standard library), some with
a payload written by hand.

- a payload repeating a claim ("topics":["orders/*"],"topics":["*"]): 401
  invalid_token, where the first value used to be honoured;
- a 30-day token under the default --auth-max-lifetime (24 h): 401; a token
  of 23 h streams;
- a token past its exp but inside the leeway (30 s): refused at admission
  (401), not admitted and ended at once;
- an ES256 signature segment that is not canonical base64url (a leftover
  bit set: the same bytes to libjwt's lenient decoder): 401;
- a reload that removes key "a": the open stream verified by "a" ends at
  once with reconnect token_expired; the stream verified by "b" goes on and
  gets the next event; a new "a" token is refused;
- the edge exits 0 (a sanitizer build fails here on a leak).
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
from harness import check, check_eq  # noqa: E402
import sse_client as sc  # noqa: E402
import tokens  # noqa: E402

t = harness.Tests()
b64u = tokens.b64u
INVALID = 'Bearer error="invalid_token"'
SECRET_A, SECRET_B = os.urandom(32), os.urandom(32)
KEY_A = {"kty": "oct", "kid": "hs-a", "alg": "HS256", "k": b64u(SECRET_A)}
KEY_B = {"kty": "oct", "kid": "hs-b", "alg": "HS256", "k": b64u(SECRET_B)}


def raw_token(secret, kid, payload_text):
    """An HS256 token over a payload given as text (so it may repeat a member)."""
    signing = b64u(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode()) + "." + \
        b64u(payload_text.encode())
    return signing + "." + b64u(hmac.new(secret, signing.encode(), hashlib.sha256).digest())


def token(secret=SECRET_A, kid="hs-a", exp_in=600, topics=("*",)):
    now = int(time.time())
    return tokens.hs256(secret, kid, {"exp": now + exp_in, "iat": now, "topics": list(topics)})


def refused(port, tok, what):
    c = sc.fetch(port, "/v1/stream?topic=orders/1", headers=tokens.bearer(tok), timeout=10)
    check_eq(c.status, 401, "%s: status (body %r)" % (what, bytes(c.raw[:200])))
    check_eq(c.header("www-authenticate"), INVALID, "%s: WWW-Authenticate" % what)
    check_eq(c.frames, [], "%s: nothing streamed" % what)


def streams(port, tok, what):
    """A HEAD answers with the GET's status after the same checks, and opens nothing."""
    c = sc.fetch(port, "/v1/stream?topic=orders/1", method="HEAD", headers=tokens.bearer(tok), timeout=10)
    check_eq(c.status, 200, "%s: status" % what)


with harness.Env() as env:
    jwks = os.path.join(env.tmp, "jwks.json")
    # An EC key for the signature case: libjwt compares an HMAC as text, but decodes an ECDSA signature.
    keys_c = tokens.Keys(env.tmp, "c")
    KEY_C = [k for k in keys_c.jwks if k["alg"] == "ES256"]
    tokens.write_jwks(jwks, [KEY_A, KEY_B] + KEY_C)
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()
    # Two loops: the removal reaches streams on every worker (main's tick -> each worker's mailbox).
    edge = env.start_edge([writer], auth_keys=jwks, auth_keys_watch="0", heartbeat_s=1, threads=2,
                          extra_env={"STUDIO_LOG_LEVEL": "debug"})
    edge.wait_ready()
    port = sc.edge_port(edge)

    @t.case
    def repeated_claim_is_refused():
        exp = int(time.time()) + 600
        tok = raw_token(SECRET_A, "hs-a", '{"exp":%d,"topics":["users/*"],"topics":["*"]}' % exp)
        refused(port, tok, "topics twice")
        harness.wait_until(lambda: "claims repeat a member" in edge.logs(200), 5, "the debug reason")
        # The same claims once each: fine.
        streams(port, raw_token(SECRET_A, "hs-a", '{"exp":%d,"topics":["*"]}' % exp), "topics once")

    @t.case
    def long_lived_token_is_refused():
        refused(port, token(exp_in=30 * 86400), "a 30-day token under the default 24 h")
        streams(port, token(exp_in=23 * 3600), "a 23 h token")

    @t.case
    def expired_within_leeway_is_refused_at_admission():
        refused(port, token(exp_in=-5), "exp 5 s ago (leeway 30 s)")
        harness.wait_until(lambda: "within the leeway" in edge.logs(200), 5, "the debug reason")

    @t.case
    def non_canonical_signature_is_refused():
        tok = keys_c.token("ES256", claims={"exp": int(time.time()) + 600, "topics": ["*"]})
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        v = alphabet.index(tok[-1])
        check_eq(v & 15, 0, "an ES256 signature's last character carries 4 zero bits")
        streams(port, tok, "the canonical token")
        refused(port, tok[:-1] + alphabet[v | 1], "a leftover bit set in the signature")

    @t.case
    def removed_key_ends_its_streams():
        ca = sc.StreamClient(port, "/v1/stream?topic=keys/1", headers=tokens.bearer(token(topics=["keys/*"])))
        cb = sc.StreamClient(port, "/v1/stream?topic=keys/1",
                             headers=tokens.bearer(token(SECRET_B, "hs-b", topics=["keys/*"])))
        state = {"reloaded_at": None, "seq": None}

        def tick(now):
            if state["reloaded_at"] is None and ca.status == 200 and cb.status == 200:
                tokens.write_jwks(jwks, [KEY_B] + KEY_C)
                edge.signal(signal.SIGHUP)
                state["reloaded_at"] = time.time()
            elif state["reloaded_at"] and state["seq"] is None and ca.outcome is not None:
                state["seq"] = sc.publish_batch(writer, [{"topic": "keys/1", "data": {"k": 1}}])[-1]

        sc.run_clients([ca, cb], 20, tick=tick,
                       until=lambda: ca.outcome is not None and state["seq"] is not None and state["seq"] in cb.ids())
        t_end = time.time()
        b_outcome = cb.outcome
        ca.close()
        cb.close()
        check(state["reloaded_at"] is not None, "both streams opened (status %r, %r)" % (ca.status, cb.status))
        frames = [f for f in ca.frames if f["type"] not in ("heartbeat", "comment")]
        check(frames and frames[-1]["type"] == "reconnect", "a's last frame %r, want reconnect" %
              [(f["type"], f["env"]) for f in frames][-3:])
        check_eq(frames[-1]["env"].get("reason"), "token_expired", "reconnect reason")
        check_eq(ca.outcome, "reconnect", "a's outcome")
        check(t_end - state["reloaded_at"] < 10, "ended %.1f s after the reload (its exp is 600 s away)" %
              (t_end - state["reloaded_at"]))
        check_eq(b_outcome, None, "b's stream is still open")
        check(state["seq"] in cb.ids(), "b's stream got the event after the reload: %r" % cb.ids())
        harness.wait_until(lambda: "streams verified by a removed key told to reconnect" in edge.logs(300), 5,
                           "the log line of the ended stream")
        refused(port, token(), "a new token of the removed key")
        streams(port, token(SECRET_B, "hs-b"), "a token of the kept key")

    @t.case
    def edge_exits_cleanly():
        rc = edge.stop()
        check_eq(rc, 0, "exit status (logs: %s)" % (edge.logs(40) if rc else ""))
        check("Sanitizer" not in edge.logs(400), "a sanitizer report")

    t.main()
