"""Mutual TLS roles, revocation, failed handshakes counted, TLS 1.2 only
(docs/security.md, "nng links").

One PKI per case (pki.py): a server CA that signs the writer's and the
edge's certificate (name localhost), and one CA per trust level: the ingest
CA signs a producer, the publish CA an edge, the control CA an operator.
The writer listens on tls+tcp:// for ingest, publish and control with
--ingest-tls-ca, --publish-tls-ca and --control-tls-ca.  Handshakes are
made by real programs (studioctl) and by `openssl s_client`, which says
whether the handshake completed and which alert the server sent.

- roles: the producer publishes (a row; a pipe is not a failure: the
  counters stay 0) and completes a handshake on ingest only; publish and
  control refuse it (s_client, studioctl stats); the edge's certificate
  opens publish and is refused by ingest (studioctl publish stores
  nothing); the operator's opens control (studioctl stats); each listener
  counts its refusals in studio_writer_tls_handshake_failures_total
  {listener=...} (refusals reported by the engine, nng's statistics for
  timeouts) and logs one summary line per 10 s whose counts add up to the
  counter, with the latest refusal's reason and the peer's certificate;
- edge control: the edge's --control-tls-ca refuses the producer and
  admits the operator (the counter stays 0), and counts the refusal;
- revoked: with --tls-crl listing one producer certificate, the engine
  refuses that certificate (s_client hears the alert "certificate
  revoked", the summary line says "revoked" and names it) and that producer stores nothing, while another from the same
  CA publishes; a CRL past its nextUpdate refuses every certificate of its
  CA (fail closed) and none of another CA;
- protocol: TLS 1.0, TLS 1.1 and a TLS 1.3-only client are refused; with an
  EC key (the tests' and docs/deploy.md's) AES128-SHA (static RSA) is
  refused and ECDHE-ECDSA-AES128-GCM-SHA256 completes;
- suites (the programs' engine, common/st_tls_engine.c): with an EC key
  ECDHE-ECDSA with CBC (SHA-1, SHA-256), CCM and CCM-8 refused, AES-GCM and
  ChaCha20-Poly1305 completed; with an RSA key static RSA (CBC and GCM),
  DHE-RSA and ECDHE-RSA with CBC refused, ECDHE-RSA-AES128-GCM completed;
  the summary line gives mbedTLS's reason ("no ciphersuites in common");
- bad options exit 2 with one line: a role CA without a certificate, a CRL
  that is not a CRL.
"""
import os
import re
import subprocess
import tempfile

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


SUMMARY = r"tls: %s listener: (\d+) failed handshakes in the last 10 s \((\d+) refused(?:, the last: (.*?))?; " \
    r"\d+ timed out; \d+ bad SP header\)"


def summaries(proc, listener):
    """[(failed, refused)] of the listener's summary lines so far."""
    return [(int(a), int(b)) for a, b, _ in re.findall(SUMMARY % listener, log_text(proc))]


def reasons(proc, listener):
    """The latest refusal's reason of each of the listener's summary lines so far."""
    return [r for _, _, r in re.findall(SUMMARY % listener, log_text(proc))]


def logged_as_counted(proc, read, listeners):
    """Waits until each listener's summary lines add up to its counter (read(listener)); the lines
    come every 10 s.  Returns {listener: refused in its lines}."""
    h.wait_until(lambda: all(sum(f for f, _ in summaries(proc, k)) == (read(k) or 0) for k in listeners), 25,
                 "the summary lines add up to the counters",
                 detail=lambda: {k: (summaries(proc, k), read(k)) for k in listeners})
    return {k: sum(r for _, r in summaries(proc, k)) for k in listeners}


def stopped_clean(*procs):
    """SIGTERM each; exit 0 (under AddressSanitizer: no leak, no error at teardown)."""
    got = {p.name: p.stop() for p in procs}
    h.check_eq(got, {p.name: 0 for p in procs}, "exit status on SIGTERM")


def wait_counted(read, listener, n):
    """nng skips a failure that ends within 100 ms of some earlier ones (docs/security.md): tests wait
    for at least n."""
    h.wait_until(lambda: (read(listener) or 0) >= n, 20, "%s: at least %d failed handshakes counted" % (listener, n),
                 detail=lambda: read(listener))


@t.case
def each_listener_admits_only_its_ca():
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = start_tls_writer(env, p)
        roles = ("ingest", "publish", "control")
        r = publish(w, p, p.producer, 1)
        h.check_eq((r.returncode, rows(env)), (0, 1),
                   "producer publishes on ingest (stderr %s)" % r.stderr.decode(errors="replace")[-300:])
        h.check_eq({k: failures(w, k) for k in roles}, {"ingest": 0, "publish": 0, "control": 0},
                   "failure counters after a publish (a pipe is not a failure)")

        h.check_eq(pki.handshake(w.ports["publish"], p.server_ca[0], p.producer)[0], False, "producer on publish")
        wait_counted(lambda k: failures(w, k), "publish", 1)
        h.check_eq(pki.handshake(w.ports["ingest"], p.server_ca[0], p.edge)[0], False, "edge on ingest")
        wait_counted(lambda k: failures(w, k), "ingest", 1)

        got = {k: pki.handshake(w.ports[k], p.server_ca[0], p.producer)[0] for k in roles}
        h.check_eq(got, {"ingest": True, "publish": False, "control": False},
                   "handshakes completed with the producer's certificate")
        r = h.studioctl("stats", "--control", "tls+tcp://localhost:%d" % w.ports["control"], "--timeout-ms", "1500",
                        *as_peer(p, p.producer))
        h.check(r.returncode != 0, "studioctl stats with the producer's certificate: exit %d, %r"
                % (r.returncode, r.stdout[:200]))
        wait_counted(lambda k: failures(w, k), "control", 1)

        got = {k: pki.handshake(w.ports[k], p.server_ca[0], p.edge)[0] for k in roles}
        h.check_eq(got, {"ingest": False, "publish": True, "control": False},
                   "handshakes completed with the edge's certificate")
        r = publish(w, p, p.edge, 2, refused=True)
        h.check_eq((r.returncode != 0, rows(env)), (True, 1), "publish with the edge's certificate: failed, rows")

        r = h.studioctl("stats", "--control", "tls+tcp://localhost:%d" % w.ports["control"], *as_peer(p, p.operator))
        h.check_eq(r.returncode, 0, "studioctl stats with the operator's certificate (stderr %s)"
                   % r.stderr.decode(errors="replace")[-300:])

        # one line per listener per 10 s, no failure left out: the lines add up to the counters
        refused = logged_as_counted(w, lambda k: failures(w, k), roles)
        h.check(all(refused[k] >= 1 for k in roles), "refusals in the summary lines per listener: %r" % refused)
        # the reason (st_tls_engine's: mbedTLS's verification result) and the peer's certificate
        got = {k: any("not correctly signed by the trusted CA" in r and "(peer certificate CN=" in r
                      for r in reasons(w, k)) for k in roles}
        h.check_eq(got, {k: True for k in roles},
                   "a summary line says why (wrong CA) and whose certificate: %r"
                   % {k: reasons(w, k) for k in roles})
        # and from where: the peer's address and port (the peers dial localhost)
        got = {k: any(re.match(r"client (127\.0\.0\.1|\[::1\]):\d+: ", r) for r in reasons(w, k)) for k in roles}
        h.check_eq(got, {k: True for k in roles},
                   "a summary line names the peer's address: %r" % {k: reasons(w, k) for k in roles})
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

        def counted(k):
            return h.metric(e.url, "studio_edge_tls_handshake_failures_total", {"listener": k})
        h.check_eq(counted("control"), 0, "the edge's failures after the operator's stats")
        r = h.studioctl("stats", "--control", url, "--timeout-ms", "2000", *as_peer(p, p.producer))
        h.check(r.returncode != 0, "edge control with the producer's certificate: exit %d" % r.returncode)
        wait_counted(counted, "control", 1)  # its summary line is st_tlsstat's, as the writer's (checked above)
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
        ok, out = pki.handshake(w.ports["ingest"], p.server_ca[0], stolen)
        h.check_eq((ok, "certificate revoked" in out), (False, True),
                   "s_client with the revoked certificate: completed, heard 'certificate revoked' (%r)" % out[-300:])
        r = publish(w, p, p.producer, 2)
        h.check_eq((r.returncode, rows(env)), (0, 1), "publish with a certificate of the same CA not revoked (%s)"
                   % r.stderr.decode(errors="replace")[-300:])
        wait_counted(lambda k: failures(w, k), "ingest", 1)
        h.wait_until(lambda: any("revoked" in r and "CN=stolen" in r for r in reasons(w, "ingest")), 25,
                     "the ingest summary line names the revocation and the certificate",
                     detail=lambda: reasons(w, "ingest"))
        # a CRL past its nextUpdate fails closed: no certificate of its CA is admitted any more
        old = start_tls_writer(env, p, tls_crl=p.crl("old", p.ingest_ca, [stolen[0]], expired=True))
        got = (pki.handshake(old.ports["ingest"], p.server_ca[0], p.producer)[0],
               pki.handshake(old.ports["publish"], p.server_ca[0], p.edge)[0])
        h.check_eq(got, (False, True), "expired ingest CRL: (producer on ingest, edge on publish) completed")
        stopped_clean(old, w)


@t.case
def tls_1_2_only_and_no_static_rsa_with_an_ec_key():
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = start_tls_writer(env, p)
        port, ca = w.ports["ingest"], p.server_ca[0]
        old = "ALL:@SECLEVEL=0"  # let s_client offer what its defaults no longer do
        got = {
            "TLS 1.0": pki.handshake(port, ca, p.producer, "-cipher", old, version="-tls1"),
            "TLS 1.1": pki.handshake(port, ca, p.producer, "-cipher", old, version="-tls1_1"),
            "TLS 1.3 only": pki.handshake(port, ca, p.producer, version="-tls1_3"),
            "AES128-SHA": pki.handshake(port, ca, p.producer, "-cipher", "AES128-SHA"),
            "ECDHE-ECDSA-AES128-GCM-SHA256": pki.handshake(port, ca, p.producer, "-cipher",
                                                           "ECDHE-ECDSA-AES128-GCM-SHA256"),
        }
        h.check_eq({k: v[0] for k, v in got.items()},
                   {"TLS 1.0": False, "TLS 1.1": False, "TLS 1.3 only": False, "AES128-SHA": False,
                    "ECDHE-ECDSA-AES128-GCM-SHA256": True}, "handshakes completed")
        # refused by the server (its alert), not by s_client before it connected
        alerts = {k: re.findall(r"alert ([a-z ]+):", v[1]) for k, v in got.items() if not v[0]}
        h.check_eq(alerts, {"TLS 1.0": ["protocol version"], "TLS 1.1": ["protocol version"],
                            "TLS 1.3 only": ["handshake failure"], "AES128-SHA": ["handshake failure"]},
                   "the server's alerts")
        wait_counted(lambda k: failures(w, k), "ingest", 1)
        stopped_clean(w)


def suites_completed(port, p, suites):
    """{suite: handshake completed} with s_client offering only that TLS 1.2 suite (SECLEVEL 0: s_client's
    own floor does not decide)."""
    return {c: pki.handshake(port, p.server_ca[0], p.producer, "-cipher", c + ":@SECLEVEL=0")[0] for c in suites}


@t.case
def only_ecdhe_with_aead_suites():
    """st_tls_engine's policy, from outside: CBC, CCM, CCM-8, static RSA and DHE refused whatever the key."""
    with h.Env() as env:
        p = RolePki(env.tmp)
        w = start_tls_writer(env, p)
        want = {"ECDHE-ECDSA-AES128-SHA": False, "ECDHE-ECDSA-AES128-SHA256": False,
                "ECDHE-ECDSA-AES128-CCM8": False, "ECDHE-ECDSA-AES128-CCM": False,
                "ECDHE-ECDSA-AES128-GCM-SHA256": True, "ECDHE-ECDSA-CHACHA20-POLY1305": True}
        h.check_eq(suites_completed(w.ports["ingest"], p, want), want, "EC key: handshakes completed per suite")
        rsa = p.leaf("server-rsa", p.server_ca, "localhost", pki.SERVER_EXT, rsa=True)
        wr = start_tls_writer(env, p, tls_cert=rsa[0], tls_key=rsa[1])
        want = {"AES128-SHA": False, "AES128-GCM-SHA256": False, "DHE-RSA-AES128-GCM-SHA256": False,
                "ECDHE-RSA-AES128-SHA": False, "ECDHE-RSA-AES128-GCM-SHA256": True}
        h.check_eq(suites_completed(wr.ports["ingest"], p, want), want, "RSA key: handshakes completed per suite")
        # the refusal is logged with mbedTLS's reason
        h.wait_until(lambda: any("no ciphersuites in common" in r for r in reasons(wr, "ingest")), 25,
                     "the ingest summary line says 'no ciphersuites in common'",
                     detail=lambda: reasons(wr, "ingest"))
        stopped_clean(wr, w)


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
