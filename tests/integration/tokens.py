"""JWTs and JWKS files for the access-control tests (docs/security.md).

Tokens are minted here rather than with a library, so the tests need
nothing beyond python's standard library and the openssl command: HS256
with hmac, RS256 and ES256 with `openssl dgst -sign` (an ES256 DER
signature is turned into raw r||s, RFC 7518 3.4).  Keys(d, tag) makes a
secret and two key pairs in d; write_jwks writes what --auth-keys reads.
"""

import base64
import hashlib
import hmac
import json
import os
import subprocess
import time

from harness import check

AUD, ISS = "studio-edge", "https://issuer.test"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def openssl(*args, data=None):
    p = subprocess.run(["openssl"] + list(args), input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    check(p.returncode == 0, "openssl %s: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p.stdout


def der_int(b, i):
    """One DER INTEGER at b[i]: (value bytes without sign padding, next index)."""
    check(b[i] == 0x02, "DER INTEGER expected at %d" % i)
    n = b[i + 1]
    v = b[i + 2:i + 2 + n].lstrip(b"\x00")
    return v, i + 2 + n


def ecdsa_raw(der):
    """ECDSA-Sig-Value (SEQUENCE of r, s) -> r||s, 32 bytes each (RFC 7518 3.4)."""
    check(der[0] == 0x30, "DER SEQUENCE expected")
    i = 3 if der[1] & 0x80 else 2
    r, i = der_int(der, i)
    s, _ = der_int(der, i)
    return r.rjust(32, b"\x00") + s.rjust(32, b"\x00")


class Keys:
    """An HS256 secret, an RSA and an EC key pair (files in d), and their JWKs."""

    def __init__(self, d, tag):
        self.tag = tag
        self.secret = os.urandom(32)
        self.rsa = os.path.join(d, "rsa-%s.pem" % tag)
        self.ec = os.path.join(d, "ec-%s.pem" % tag)
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.rsa)
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.ec)
        self.rsa_pub_pem = openssl("pkey", "-in", self.rsa, "-pubout")
        mod = openssl("rsa", "-in", self.rsa, "-noout", "-modulus").decode().strip().split("=", 1)[1]
        spki = openssl("pkey", "-in", self.ec, "-pubout", "-outform", "DER")
        pt = spki[-65:]
        check(pt[0] == 4, "uncompressed EC point at the end of the SPKI")
        self.jwks = [
            {"kty": "oct", "kid": "hs-" + tag, "alg": "HS256", "k": b64u(self.secret)},
            {"kty": "RSA", "kid": "rsa-" + tag, "alg": "RS256", "use": "sig",
             "n": b64u(bytes.fromhex(mod)), "e": b64u((65537).to_bytes(3, "big"))},
            {"kty": "EC", "kid": "ec-" + tag, "alg": "ES256", "crv": "P-256",
             "x": b64u(pt[1:33]), "y": b64u(pt[33:65])},
        ]

    def token(self, alg="HS256", claims=None, kid=None, header=None, **over):
        now = int(time.time())
        c = {"exp": now + 600, "iat": now, "aud": AUD, "iss": ISS, "topics": ["*"]}
        if claims is not None:
            c = claims
        c.update(over)
        c = {k: v for k, v in c.items() if v is not None}
        h = header or {"alg": alg, "typ": "JWT",
                       "kid": kid or {"HS256": "hs-", "RS256": "rsa-", "ES256": "ec-"}[alg] + self.tag}
        signing = (b64u(json.dumps(h).encode()) + "." + b64u(json.dumps(c).encode())).encode()
        if h["alg"] == "none":
            sig = b""
        elif h["alg"] == "HS256":
            sig = hmac.new(self.secret, signing, hashlib.sha256).digest()
        elif h["alg"] == "RS256":
            sig = openssl("dgst", "-sha256", "-sign", self.rsa, data=signing)
        else:
            sig = ecdsa_raw(openssl("dgst", "-sha256", "-sign", self.ec, data=signing))
        return signing.decode() + "." + b64u(sig)


def write_jwks(path, keys):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"keys": keys}, f)
    os.replace(tmp, path)


def bearer(tok):
    return {"Authorization": "Bearer " + tok}


def hs256(secret, kid, claims):
    """A token signed with one shared secret, when a test needs no key pairs."""
    signing = (b64u(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode()) + "." +
               b64u(json.dumps(claims).encode())).encode()
    return signing.decode() + "." + b64u(hmac.new(secret, signing, hashlib.sha256).digest())


def secret_volume(d, keys, n):
    """A Kubernetes Secret volume as the kubelet lays it out: the file is a
    symlink through ..data to a timestamped directory, and an update swaps
    ..data (rename of a new symlink over it) to a new directory."""
    ts = os.path.join(d, "..2026_12_05_%d" % n)
    os.makedirs(ts)
    write_jwks(os.path.join(ts, "jwks.json"), keys)
    tmp = os.path.join(d, "..data_tmp")
    os.symlink(os.path.basename(ts), tmp)
    os.replace(tmp, os.path.join(d, "..data"))
    if not os.path.lexists(os.path.join(d, "jwks.json")):
        os.symlink("..data/jwks.json", os.path.join(d, "jwks.json"))
    return os.path.join(d, "jwks.json")
