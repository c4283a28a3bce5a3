"""Mutual TLS on the nng links (docs/security.md, "nng links").

Certificates are made here with the openssl command: a CA, an unrelated
second CA, a server certificate for the name localhost (the writer's), and
client certificates from each CA.  A writer listens on tls+tcp:// for
ingest, publish and control; then:

- a producer (studioctl) with a certificate from the CA publishes, and the
  event is stored;
- a producer that presents no certificate, and one whose certificate comes
  from the other CA, gets no answer and stores nothing (broker_event count);
- a producer on plain tcp:// to the TLS port stores nothing either;
- an edge dials the writer's publish socket as tls+tcp://localhost:P (it
  resolves the name and dials the address, checking the name in the
  certificate), turns ready and streams the stored event to an HTTP client;
- studioctl stats over the TLS control socket answers;
- a tls+tcp URL without the files, an unreadable file and a key that does
  not match the certificate each exit 2 with one line, before the network.
"""
import json
import os
import tempfile

import harness as h
import pki

t = h.Tests()


class Pki(pki.Pki):
    """Two CAs and certificates in d; paths as attributes."""

    def __init__(self, d):
        super().__init__(d)
        ca, other = self.ca("ca"), self.ca("other-ca")  # then the attribute ca shadows the method
        self.ca, self.ca_key = ca
        self.other_ca, self.other_key = other
        self.server = self.leaf("server", (self.ca, self.ca_key), "localhost", pki.SERVER_EXT)
        self.client = self.leaf("client", (self.ca, self.ca_key), "producer")
        self.stranger = self.leaf("stranger", (self.other_ca, self.other_key), "producer")


def tls_flags(pki, leaf):
    crt, key = leaf
    return ["--tls-cert", crt, "--tls-key", key, "--tls-ca", pki.ca]


def count_rows(env):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"))


@t.case
def mutual_tls_on_every_link():
    with h.Env() as env:
        pki = Pki(env.tmp)
        crt, key = pki.server
        # the writer listens on the address; clients dial the name its certificate carries
        in_port, pub_port, ctl_port = h.free_port(), h.free_port(), h.free_port()
        ingest = "tls+tcp://localhost:%d" % in_port
        w = env.start_writer(ingest="tls+tcp://127.0.0.1:%d" % in_port, publish="tls+tcp://127.0.0.1:%d" % pub_port,
                             control="tls+tcp://127.0.0.1:%d" % ctl_port,
                             tls_cert=crt, tls_key=key, tls_ca=pki.ca).wait_ready()

        p = h.studioctl("publish", "--writer", ingest, "--topic", "tls.a", "--data", '{"n":1}',
                        *tls_flags(pki, pki.client))
        h.check_eq((p.returncode, count_rows(env)), (0, 1),
                   "publish with a certificate from the CA (stderr %s)" % p.stderr.decode(errors="replace")[-300:])
        seq = int(p.stdout.decode().split()[-1])

        refused = {
            "no certificate": ["--tls-ca", pki.ca],
            "certificate from another CA": ["--tls-cert", pki.stranger[0], "--tls-key", pki.stranger[1],
                                            "--tls-ca", pki.ca],
        }
        for what, flags in refused.items():
            p = h.studioctl("publish", "--writer", ingest, "--topic", "tls.a", "--data", '{"n":2}',
                            "--timeout-ms", "2000", *flags)
            h.check_eq((p.returncode != 0, count_rows(env)), (True, 1),
                       "publish with %s: exit %d, rows" % (what, p.returncode))
        rc, reply, out, err = h.nngreq("tcp://127.0.0.1:%d" % in_port,
                                       h.mp_pack({"topic": "tls.a", "data": "3"}), timeout_ms=2000)
        h.check_eq((rc != 0, count_rows(env)), (True, 1), "plain tcp to the TLS port: nngreq exit %d, rows" % rc)

        e = env.start_edge(["tls+tcp://localhost:%d" % pub_port], tls_cert=pki.client[0], tls_key=pki.client[1],
                           tls_ca=pki.ca)
        e.wait_ready()
        h.wait_until(lambda: h.http_get(e.url + "/readyz")[0] == 200, 20,
                     "the edge ready over tls+tcp://localhost (a writer tick arrived)")
        p = h.studioctl("publish", "--writer", ingest, "--topic", "tls.a", "--data", '{"n":4}',
                        *tls_flags(pki, pki.client))
        h.check_eq(p.returncode, 0, "second publish")
        seq2 = int(p.stdout.decode().split()[-1])
        st, hd, body = h.http_get(e.url + "/v1/stream?topic=tls.a&until=head",
                                  headers={"Accept": "application/x-ndjson"}, timeout=20)
        lines = [json.loads(ln) for ln in body.decode().splitlines() if ln.strip()]
        ids = [int(x["id"]) for x in lines if x.get("type") == "item"]
        h.check_eq((st, ids, lines[-1].get("type") if lines else None), (200, [seq, seq2], "complete"),
                   "the edge streams what came over TLS")

        p = h.studioctl("stats", "--control", "tls+tcp://localhost:%d" % ctl_port, *tls_flags(pki, pki.client))
        h.check_eq(p.returncode, 0, "studioctl stats over TLS (stderr %s)" % p.stderr.decode(errors="replace")[-300:])
        h.check("committed_total" in p.stdout.decode(), "stats answer: %r" % p.stdout[:200])


@t.case
def bad_tls_configuration_exits_2():
    d = tempfile.mkdtemp(prefix="studio-tls-")
    pki = Pki(d)
    url = "tls+tcp://127.0.0.1:%d" % h.free_port()
    cases = {
        "tls URL without files": [],
        "missing file": ["--tls-ca", os.path.join(d, "nope.pem")],
        "key of another certificate": ["--tls-cert", pki.server[0], "--tls-key", pki.client[1], "--tls-ca", pki.ca],
        "cert without key": ["--tls-cert", pki.server[0], "--tls-ca", pki.ca],
    }
    for what, flags in cases.items():
        p = h.studioctl("publish", "--writer", url, "--topic", "x", *flags, timeout=20)
        err = p.stderr.decode(errors="replace").strip()
        h.check_eq((p.returncode, len(err.splitlines())), (2, 1), "%s: exit code and one line (%r)" % (what, err))


if __name__ == "__main__":
    t.main()
