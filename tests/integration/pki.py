"""Test certificates made with the openssl command (docs/security.md, "nng links").

Pki(d) makes CAs, leaf certificates signed by them, and CRLs, as PEM files
under d.  EC P-256 keys, valid two days.  Every openssl failure is a
TestFailure with its stderr.
"""
import os
import subprocess

import harness as h

SERVER_EXT = "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


def openssl(*args, cwd=None):
    p = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, cwd=cwd)
    h.check(p.returncode == 0, "openssl %s: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p


class Pki:
    """CAs and certificates in d; ca(name) and leaf(...) return paths."""

    def __init__(self, d):
        self.d = d

    def path(self, name):
        return os.path.join(self.d, name)

    def ca(self, name):
        """A self-signed CA: (certificate, key)."""
        key, crt = self.path(name + ".key"), self.path(name + ".pem")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                "-subj", "/CN=%s" % name, "-keyout", key, "-out", crt)
        return crt, key

    def leaf(self, name, ca, cn, ext=CLIENT_EXT, rsa=False):
        """A certificate for cn signed by ca (a (certificate, key) pair): (certificate, key).
        rsa: an RSA 2048 key (static RSA and ECDHE-RSA suites need one) instead of EC P-256."""
        key, csr, crt, extf = (self.path(name + s) for s in (".key", ".csr", ".pem", ".ext"))
        with open(extf, "w") as f:
            f.write(ext)
        kind = ["rsa:2048"] if rsa else ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        openssl("req", "-newkey", *kind, "-nodes", "-subj", "/CN=%s" % cn, "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-days", "2",
                "-extfile", extf, "-out", crt)
        return crt, key

    def crl(self, name, ca, revoked, expired=False):
        """A PEM CRL of ca listing the certificates in revoked (paths); returns its path.
        expired: its lastUpdate and nextUpdate are in the past (2000-01-01, 2000-01-02)."""
        d = self.path(name + ".db")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "crlnumber"), "w") as f:
            f.write("01\n")
        cnf = os.path.join(d, "ca.cnf")
        with open(cnf, "w") as f:
            f.write("[ca]\ndefault_ca = c\n[c]\ndatabase = %s/index.txt\ncrlnumber = %s/crlnumber\n"
                    "default_md = sha256\ndefault_crl_days = 2\n" % (d, d))
        for crt in revoked:
            openssl("ca", "-config", cnf, "-cert", ca[0], "-keyfile", ca[1], "-revoke", crt)
        out = self.path(name + ".crl.pem")
        when = ["-crl_lastupdate", "20000101000000Z", "-crl_nextupdate", "20000102000000Z"] if expired else []
        openssl("ca", "-config", cnf, "-cert", ca[0], "-keyfile", ca[1], "-gencrl", "-out", out, *when)
        return out


def handshake(port, ca, leaf=None, *extra, version="-tls1_2"):
    """openssl s_client to 127.0.0.1:port with one protocol version (version: -tls1_2, -tls1_1...;
    extra: more flags, e.g. -cipher X); (True, output) when the handshake completed, (False, output)
    when it failed.  s_client refuses contradictory version flags before it connects: give the
    version here, not in extra."""
    args = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile", ca, version,
            "-verify_return_error", "-brief"]
    if leaf is not None:
        args += ["-cert", leaf[0], "-key", leaf[1]]
    p = subprocess.run(args + list(extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    out = p.stdout.decode(errors="replace")
    return p.returncode == 0 and "CONNECTION ESTABLISHED" in out, out
