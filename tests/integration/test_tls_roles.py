"""Mutual TLS roles, revocation, handshake failures and the cipher policy
(docs/security.md, "nng links").

One PKI per case (pki.py): a server CA that signs the writer's and the
edge's certificate (name localhost), and one CA per trust level: the ingest
CA signs a producer, the publish CA an edge, the control CA an operator.
The writer listens on tls+tcp:// for ingest, publish and control with
--ingest-tls-ca, --publish-tls-ca and --control-tls-ca.  Handshakes are
made by real programs (studioctl) and by `openssl s_client -tls1_2`, which
says whether the handshake completed.

- roles: the producer publishes (a row) and completes a handshake on
  ingest only; publish and control refuse it (s_client, studioctl stats);
  the edge's certificate opens publish and is refused by ingest (studioctl
  publish stores nothing); the operator's opens control (studioctl stats);
  each refusal is counted in studio_writer_tls_handshake_failures_total
  {listener=...} and logged with the peer address and the reason;
- edge control: the edge's --control-tls-ca refuses the producer and
  admits the operator;
- revoked: with --tls-crl listing one producer certificate, that producer
  stores nothing (its log line says revoked) while another from the same
  CA publishes; a CRL past its nextUpdate refuses every certificate of its
  CA (fail closed) and none of another CA;
- ciphers, against a writer with an EC key and one with an RSA key:
  AES128-SHA (static RSA, CBC, SHA-1), ECDHE-*-AES128-SHA (CBC, SHA-1),
  AES128-GCM-SHA256 (no forward secrecy), AES-CCM and CCM-8, and TLS 1.1 are
  refused (before this change all but TLS 1.1 completed); ECDHE with AES-GCM
  and ChaCha20-Poly1305 complete;
- log rate limit: 12 failed handshakes in a burst are all counted, at most
  5 are logged per 10 s window and a line says how many were not;
- bad options exit 2 with one line: a role CA without a certificate, a CRL
  that is not a CRL.
"""
import os
import re
import subprocess
import tempfile
import time

import harness as h
import pki

t = h.Tests()


class RolePki(pki.Pki):
    def __init__(self, d):
        super().__init__(d)
        self.server_ca = self.ca("server-ca")
        self.ingest_ca, self.publish_ca, self.control_ca = self.ca("ingest-ca"), self.ca("publish-ca"), \
            self.ca("control-ca")
        self.server = self.leaf("server", self.server_ca, "localhost", pki.SERVER_EXT)
        self.producer = self.leaf("producer", self.ingest_ca, "producer")
        self.edge = self.leaf("edge", self.publish_ca, "edge")
        self.operator = self.leaf("operator", self.control_ca, "operator")


def start_tls_writer(env, p, **flags):
    ports = {k: h.free_port() for k in ("ingest", "publish", "control")}
    f = dict(ingest="tls+tcp://127.0.0.1:%d" % ports["ingest"], publish="tls+tcp://127.0.0.1:%d" % ports["publish"],
             control="tls+tcp://127.0.0.1:%d" % ports["control"], tls_cert=p.server[0], tls_key=p.server[1],
             tls_ca=p.server_ca[0], ingest_tls_ca=p.ingest_ca[0], publish_tls_ca=p.publish_ca[0],
             control_tls_ca=p.control_ca[0])
    f.update(flags)
    w = env.start_writer(**f).wait_ready()
    w.ports = ports
    return w


def as_peer(p, leaf):
    """studioctl flags: leaf's identity, the server CA to check the writer."""
    return ["--tls-cert", leaf[0], "--tls-key", leaf[1], "--tls-ca", p.server_ca[0]]


def rows(env):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"))


def publish(w, p, leaf, n, refused=False):
    """studioctl publish with leaf's identity; one that must be refused waits 1.5 s, one that must pass 30 s."""
    return h.studioctl("publish", "--writer", "tls+tcp://localhost:%d" % w.ports["ingest"], "--topic", "roles.a",
                       "--data", '{"n":%d}' % n, "--timeout-ms", "1500" if refused else "30000", *as_peer(p, leaf))


def failures(w, listener):
    return h.metric(w.http_url, "studio_writer_tls_handshake_failures_total", {"listener": listener})


def log_text(proc):
    with open(proc.stderr_path, "rb") as f:
        return f.read().decode(errors="replace")


def stopped_clean(*procs):
    """SIGTERM each; exit 0 (under AddressSanitizer: no leak, no error in the TLS engine's teardown)."""
    got = {p.name: p.stop() for p in procs}
    h.check_eq(got, {p.name: 0 for p in procs}, "exit status on SIGTERM")


def wait_log(proc, pattern, what):
    h.wait_until(lambda: re.search(pattern, log_text(proc)) is not None, 20,
                 "%s: a log line matching %r" % (what, pattern), detail=lambda: log_text(proc)[-2000:])


@t.case
def each_listener_admits_only_its_ca():
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = start_tls_writer(env, p)
        base = {k: failures(w, k) for k in ("ingest", "publish", "control")}
        h.check_eq(base, {"ingest": 0, "publish": 0, "control": 0}, "failure counters at start")

        r = publish(w, p, p.producer, 1)
        h.check_eq((r.returncode, rows(env)), (0, 1),
                   "producer publishes on ingest (stderr %s)" % r.stderr.decode(errors="replace")[-300:])
        # the first two refusals, each logged (the log keeps 5 lines per 10 s: later ones are counted only)
        h.check_eq(pki.handshake(w.ports["publish"], p.server_ca[0], p.producer)[0], False, "producer on publish")
        wait_log(w, r"tls: publish listener: handshake from 127\.0\.0\.1:\d+ failed: .*not correctly signed"
                    r".*CN=producer", "producer refused by publish")
        h.check_eq(pki.handshake(w.ports["ingest"], p.server_ca[0], p.edge)[0], False, "edge on ingest")
        wait_log(w, r"tls: ingest listener: handshake from 127\.0\.0\.1:\d+ failed: .*CN=edge", "edge refused by ingest")

        got = {k: pki.handshake(w.ports[k], p.server_ca[0], p.producer)[0] for k in ("ingest", "publish", "control")}
        h.check_eq(got, {"ingest": True, "publish": False, "control": False},
                   "handshakes completed with the producer's certificate")
        r = h.studioctl("stats", "--control", "tls+tcp://localhost:%d" % w.ports["control"], "--timeout-ms", "1500",
                        *as_peer(p, p.producer))
        h.check(r.returncode != 0, "studioctl stats with the producer's certificate: exit %d, %r"
                % (r.returncode, r.stdout[:200]))

        got = {k: pki.handshake(w.ports[k], p.server_ca[0], p.edge)[0] for k in ("ingest", "publish", "control")}
        h.check_eq(got, {"ingest": False, "publish": True, "control": False},
                   "handshakes completed with the edge's certificate")
        r = publish(w, p, p.edge, 2, refused=True)
        h.check_eq((r.returncode != 0, rows(env)), (True, 1), "publish with the edge's certificate: failed, rows")

        r = h.studioctl("stats", "--control", "tls+tcp://localhost:%d" % w.ports["control"], *as_peer(p, p.operator))
        h.check_eq(r.returncode, 0, "studioctl stats with the operator's certificate (stderr %s)"
                   % r.stderr.decode(errors="replace")[-300:])

        # ingest: 2 edge s_client + edge studioctl (>= 1: it may retry); publish: 2 producer s_client;
        # control: producer s_client, producer studioctl (>= 1), edge s_client
        h.wait_until(lambda: failures(w, "ingest") >= 3 and failures(w, "publish") >= 2 and
                     failures(w, "control") >= 3, 20, "failed handshakes counted per listener",
                     detail=lambda: {k: failures(w, k) for k in ("ingest", "publish", "control")})
        stopped_clean(w)


@t.case
def edge_control_has_its_own_ca():
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = env.start_writer().wait_ready()
        ctl = h.free_port()
        e = env.start_edge([w], control="tls+tcp://127.0.0.1:%d" % ctl, tls_cert=p.server[0], tls_key=p.server[1],
                           tls_ca=p.server_ca[0], control_tls_ca=p.control_ca[0])
        url = "tls+tcp://localhost:%d" % ctl
        h.wait_until(lambda: h.studioctl("stats", "--control", url, "--timeout-ms", "2000",
                                         *as_peer(p, p.operator)).returncode == 0, 30,
                     "studioctl stats on the edge's control with the operator's certificate", detail=e.logs)
        r = h.studioctl("stats", "--control", url, "--timeout-ms", "2000", *as_peer(p, p.producer))
        h.check(r.returncode != 0, "edge control with the producer's certificate: exit %d" % r.returncode)
        h.wait_until(lambda: (h.metric(e.url, "studio_edge_tls_handshake_failures_total",
                                       {"listener": "control"}) or 0) >= 1, 20, "the edge counts the refusal")
        wait_log(e, r"tls: control listener: handshake from 127\.0\.0\.1:\d+ failed: .*CN=producer", "edge log")
        stopped_clean(e, w)


@t.case
def revoked_certificate_is_refused():
    with h.Env() as env:
        p = RolePki(env.tmp)
        stolen = p.leaf("stolen", p.ingest_ca, "stolen")
        crl = p.crl("ingest", p.ingest_ca, [stolen[0]])
        w = start_tls_writer(env, p, tls_crl=crl)
        r = publish(w, p, stolen, 1, refused=True)
        h.check_eq((r.returncode != 0, rows(env)), (True, 0), "publish with the revoked certificate: failed, rows")
        wait_log(w, r"tls: ingest listener: handshake from 127\.0\.0\.1:\d+ failed: .*revoked.*CN=stolen",
                 "revocation logged")
        h.check_eq(pki.handshake(w.ports["ingest"], p.server_ca[0], stolen)[0], False, "s_client with the revoked")
        r = publish(w, p, p.producer, 2)
        h.check_eq((r.returncode, rows(env)), (0, 1), "publish with a certificate of the same CA not revoked (%s)"
                   % r.stderr.decode(errors="replace")[-300:])
        # a CRL past its nextUpdate fails closed: no certificate of its CA is admitted any more
        old = start_tls_writer(env, p, tls_crl=p.crl("old", p.ingest_ca, [stolen[0]], expired=True))
        got = (pki.handshake(old.ports["ingest"], p.server_ca[0], p.producer)[0],
               pki.handshake(old.ports["publish"], p.server_ca[0], p.edge)[0])
        h.check_eq(got, (False, True), "expired ingest CRL: (producer on ingest, edge on publish) completed")
        wait_log(old, r"tls: ingest listener: .*CRL is expired", "expired CRL logged")
        stopped_clean(old, w)


@t.case
def only_ecdhe_aead_on_tls_1_2():
    with h.Env() as env:
        p = RolePki(env.tmp)
        rsa = p.leaf("rsa-server", p.server_ca, "localhost", pki.SERVER_EXT, rsa=True)
        ec_w = start_tls_writer(env, p)
        rsa_w = start_tls_writer(env, p, tls_cert=rsa[0], tls_key=rsa[1])
        ca = p.server_ca[0]
        # (writer, suite) -> completed; main accepted every one of these (CBC-SHA1, CCM-8, static RSA)
        want = {("ec", "ECDHE-ECDSA-AES128-SHA"): False, ("ec", "ECDHE-ECDSA-AES128-CCM8"): False,
                ("ec", "ECDHE-ECDSA-AES128-CCM"): False,
                ("ec", "ECDHE-ECDSA-AES128-GCM-SHA256"): True, ("ec", "ECDHE-ECDSA-AES256-GCM-SHA384"): True,
                ("ec", "ECDHE-ECDSA-CHACHA20-POLY1305"): True,
                ("rsa", "AES128-SHA"): False, ("rsa", "ECDHE-RSA-AES128-SHA"): False,
                ("rsa", "AES128-GCM-SHA256"): False,
                ("rsa", "ECDHE-RSA-AES128-GCM-SHA256"): True, ("rsa", "ECDHE-RSA-CHACHA20-POLY1305"): True}
        got = {}
        for (which, suite) in want:
            w = ec_w if which == "ec" else rsa_w
            got[(which, suite)] = pki.handshake(w.ports["ingest"], ca, p.producer, "-cipher", suite)[0]
        h.check_eq(got, want, "handshakes completed per server key and cipher suite")
        ok, out = pki.handshake(rsa_w.ports["ingest"], ca, p.producer, "-cipher", "AES128-SHA")
        h.check("handshake failure" in out, "AES128-SHA: s_client says %r" % out[-300:])
        h.check_eq(pki.handshake(ec_w.ports["ingest"], ca, p.producer, "-no_tls1_2", "-tls1_1",
                                 "-cipher", "ALL:@SECLEVEL=0")[0], False, "TLS 1.1")
        wait_log(rsa_w, r"tls: ingest listener: handshake from 127\.0\.0\.1:\d+ failed: .*no ciphersuites in common",
                 "cipher refusal logged")
        stopped_clean(ec_w, rsa_w)


@t.case
def failure_log_is_rate_limited():
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = start_tls_writer(env, p)
        n = 12
        started = time.monotonic()
        first_done = None
        for _ in range(n):
            h.check_eq(pki.handshake(w.ports["publish"], p.server_ca[0], p.producer)[0], False, "refused")
            first_done = first_done or time.monotonic()  # the window began before this
        elapsed = time.monotonic() - started
        h.wait_until(lambda: failures(w, "publish") == n, 20, "every failed handshake counted",
                     detail=lambda: failures(w, "publish"))
        if elapsed < 9:  # one 10 s window: at most 5 lines (a slower machine may span two)
            logged = len(re.findall(r"tls: publish listener: handshake from", log_text(w)))
            h.check_eq(logged, 5, "lines logged for %d failures in %.1f s" % (n, elapsed))
            h.wait_until(lambda: time.monotonic() - first_done > 10.2, 15, "the next window")
            h.check_eq(pki.handshake(w.ports["publish"], p.server_ca[0], p.producer)[0], False, "refused")
            wait_log(w, r"tls: %d failed handshakes were not logged" % (n - 5), "the count of lines not logged")
        else:
            h.log("FIGURE %d handshakes took %.1f s: the one-window check is skipped" % (n, elapsed))


@t.case
def bad_role_options_exit_2():
    d = tempfile.mkdtemp(prefix="studio-tlsroles-")
    p = RolePki(d)
    notcrl = os.path.join(d, "notcrl.pem")
    with open(notcrl, "w") as f:
        f.write(open(p.server_ca[0]).read())
    url = "tls+tcp://127.0.0.1:%d" % h.free_port()
    ident = ["--tls-cert", p.server[0], "--tls-key", p.server[1], "--tls-ca", p.server_ca[0]]
    cases = {
        "role CA without a certificate": (["--tls-ca", p.server_ca[0], "--ingest-tls-ca", p.ingest_ca[0]],
                                          "need --tls-cert"),
        "a certificate as the CRL": (ident + ["--tls-crl", notcrl], "refused"),
        "missing role CA": (ident + ["--control-tls-ca", os.path.join(d, "nope.pem")], "--control-tls-ca"),
    }
    for what, (flags, say) in cases.items():
        r = subprocess.run([h.program("broker-writer"), "--pg-dsn", "host=/nonexistent", "--ingest", url,
                            "--publish", "tcp://127.0.0.1:%d" % h.free_port(), "--http", ""] + flags,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        err = r.stderr.decode(errors="replace").strip()
        h.check_eq((r.returncode, len(err.splitlines()), say in err), (2, 1, True),
                   "%s: exit code, one line, says %r (%r)" % (what, say, err))


if __name__ == "__main__":
    t.main()
