#!/usr/bin/env python3
"""TLS to the database, verified (issue 26 item 2; docs/deploy.md "TLS to the database").

The documented production DSN says sslmode=verify-full.  In the image
($HOME is /nonexistent) libpq looks for /nonexistent/.postgresql/root.crt,
so without the CA wiring `migrate` exits 1 at once and the init container
crash-loops.  The manifests mount the CA (Secret studio-pg-ca) and set
PGSSLROOTCERT to it; a DSN may also name sslrootcert= itself.

Against a PostgreSQL of the test's own with ssl = on and a certificate for
the name `localhost` only (no IP address in it, so a connection that
replaced the name by its address would fail verification), signed by a CA
made here:
- verify_full_with_the_ca_in_the_dsn: migrate, a writer and an edge with
  `host=localhost sslmode=verify-full sslrootcert=CA` connect; an event
  published reaches a stream; every backend of both programs is on TLS
  (pg_stat_ssl).
- verify_full_with_the_manifests_wiring: HOME=/nonexistent as in the image:
  without PGSSLROOTCERT migrate fails naming the missing root certificate (the
  report); with PGSSLROOTCERT (what the manifests set) it succeeds.
- a_wrong_ca_is_refused: a CA that did not sign the server's certificate:
  migrate exits non-zero naming the verification failure, and a writer
  keeps retrying, unready, logging the reason, nothing connected.
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = h.Tests()
state = {}


def openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=60)
    check_eq(p.returncode, 0, "openssl %s: %s" % (" ".join(args[:2]), p.stdout.decode(errors="replace")[-500:]))


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=%s" % name,
            "-keyout", name + ".key", "-out", name + ".crt", cwd=d)
    return os.path.join(d, name + ".crt")


def server():
    """The TLS PostgreSQL (started once for every case) and the CA files."""
    if "pg" in state:
        return state["pg"], state["ca"], state["wrong"]
    d = tempfile.mkdtemp(prefix="studio-pgtls-")
    atexit.register(shutil.rmtree, d, True)
    ca = make_ca(d, "ca")
    wrong = make_ca(d, "wrong")
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName = DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
            "-out", "server.csr", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.cnf", "-out", "server.crt", cwd=d)
    pg = h.PgServer("pgtls")
    # The server's files live in its own directory, owned by the server's user, the key 0600.
    for n in ("server.crt", "server.key"):
        dst = os.path.join(pg.base, n)
        shutil.copy(os.path.join(d, n), dst)
        os.chmod(dst, 0o600)
        if pg.root:
            import pwd
            pw = pwd.getpwnam("postgres")
            os.chown(dst, pw.pw_uid, pw.pw_gid)
    with open(os.path.join(pg.data, "postgresql.conf"), "a") as f:
        f.write("ssl = on\nssl_cert_file = '%s/server.crt'\nssl_key_file = '%s/server.key'\n" % (pg.base, pg.base))
    pg.start()
    state.update(pg=pg, ca=ca, wrong=wrong)
    return pg, ca, wrong


def tls_dsn(pg, env, extra=""):
    return "host=localhost port=%d user=postgres dbname=%s sslmode=verify-full %s" % (pg.port, env.dbname, extra)


def migrate(dsn, extra_env=None):
    p = subprocess.run([h.program("broker-writer"), "migrate", "--pg-dsn", dsn], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120, env=dict(os.environ, **(extra_env or {})))
    return p.returncode, p.stdout.decode(errors="replace")


def ssl_backends(env, app):
    """(backends of app, those on TLS) in the test database."""
    r = h.psql(env.admin_dsn, "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN "
                              "pg_stat_ssl s ON s.pid = a.pid WHERE a.datname = '%s' AND a.application_name = '%s'"
               % (env.dbname, app))[0]
    return int(r[0]), int(r[1])


@t.case
def verify_full_with_the_ca_in_the_dsn():
    pg, ca, _ = server()
    with h.Env(migrate=False, admin_dsn=pg.dsn) as env:
        dsn = tls_dsn(pg, env, "sslrootcert=%s" % ca)
        rc, out = migrate(dsn)
        check_eq(rc, 0, "migrate over verify-full with the CA named in the DSN: %s" % out[-600:])
        w = h.start_writer(dsn, env=env, flush_interval_ms=100).wait_ready()
        e = h.start_edge(dsn, [w], env=env).wait_ready()
        c = sc.StreamClient(sc.edge_port(e), "/v1/stream?topic=tls.a")
        sc.run_until_open([c])
        seq = h.publish(w, "tls.a", data={"over": "tls"})
        sc.run_clients([c], 30, until=lambda: seq in c.ids())
        check_eq(c.ids(), [seq], "the stream's events")
        c.close()
        for app in ("broker-writer", "edge-gateway"):
            n, on_tls = ssl_backends(env, app)
            log("FIGURE %s: %d backends, %d on TLS" % (app, n, on_tls))
            check(n >= 1, "%s has backends (%d)" % (app, n))
            check_eq(on_tls, n, "%s backends on TLS" % app)
        check_eq(e.stop(), 0, "edge exit status")
        check_eq(w.stop(), 0, "writer exit status")


@t.case
def verify_full_with_the_manifests_wiring():
    pg, ca, _ = server()
    with h.Env(migrate=False, admin_dsn=pg.dsn) as env:
        dsn = tls_dsn(pg, env)
        image = {"HOME": "/nonexistent", "PGSSLROOTCERT": ""}
        rc, out = migrate(dsn, image)
        log("without PGSSLROOTCERT: exit %d: %s" % (rc, out.strip()[-300:]))
        check(rc != 0 and "root certificate" in out,
              "verify-full without a CA in the image fails naming the root certificate: exit %d %r" % (rc, out[-300:]))
        rc, out = migrate(dsn, dict(image, PGSSLROOTCERT=ca))
        check_eq(rc, 0, "migrate with PGSSLROOTCERT (the manifests' wiring): %s" % out[-600:])
        w = h.start_writer(dsn, env=env, extra_env=dict(image, PGSSLROOTCERT=ca)).wait_ready()
        n, on_tls = ssl_backends(env, "broker-writer")
        check_eq((n >= 1, on_tls), (True, n), "the writer's backends (all on TLS)")
        check_eq(w.stop(), 0, "writer exit status")


@t.case
def a_wrong_ca_is_refused():
    pg, ca, wrong = server()
    with h.Env(migrate=False, admin_dsn=pg.dsn) as env:
        rc, out = migrate(tls_dsn(pg, env, "sslrootcert=%s" % ca))
        check_eq(rc, 0, "migrate with the right CA: %s" % out[-300:])
        dsn = tls_dsn(pg, env, "sslrootcert=%s" % wrong)
        rc, out = migrate(dsn)
        log("wrong CA: exit %d: %s" % (rc, out.strip()[-300:]))
        check(rc != 0 and "certificate verify failed" in out,
              "migrate with a CA that did not sign the server: exit %d %r" % (rc, out[-300:]))
        w = h.start_writer(dsn, env=env)
        h.wait_until(lambda: "certificate verify failed" in w.logs(), 60, "the writer logs the verification failure",
                     detail=lambda: w.logs()[-600:])
        # It retries (start-up migration first: its HTTP port is not open yet), never ready.
        try:
            st = h.http_get(w.http_url + "/readyz", timeout=5)[0]
        except OSError as ex:
            st = "not listening (%s)" % ex.__class__.__name__
        check(st != 200, "the writer with a wrong CA is not ready: /readyz %r" % st)
        check(w.alive(), "the writer keeps retrying (alive)")
        check_eq(ssl_backends(env, "broker-writer")[0], 0, "backends of the writer")
        check_eq(w.stop(), 0, "writer exit status")


t.main()
