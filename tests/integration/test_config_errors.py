"""Bad configuration exits 2 with one clear line, at once, before the network
(docs/api.md "Every flag ..."; docs/writer.md and docs/edge.md "Usage").

Every case starts the real program with one bad setting and asserts: exit
status 2, exactly one line on stderr that names the flag (or its variable)
and, unless secret, the value, and an exit well within the deadline even
though the DSN points at 127.0.0.1 on a port where nothing listens (a
program that tried the database first would retry for ever).  "Before the
network" is checked two ways: a tripwire socket that counts every
connection made to the DSN's and the writers' addresses, and, for the
writer, a real fresh database that must still have no schema afterwards.
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import harness as h
from harness import check, check_eq

t = h.Tests()

DEADLINE_S = 10  # "at once": a program that waits on the network never gets here


def clean_env(extra=None):
    """The environment without a developer's STUDIO_* settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STUDIO_")}
    env.update(extra or {})
    return env


def run(prog, args, env=None, timeout=DEADLINE_S):
    cmd = [h.program(prog)] + [str(a) for a in args]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                           env=clean_env(env), timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise h.TestFailure("%s did not exit within %d s (it waits on the network?): %s; stderr: %s"
                            % (prog, timeout, " ".join(cmd[1:])[:300],
                               (e.stderr or b"").decode(errors="replace")[-400:]))
    return p, time.monotonic() - t0


def expect_exit2(prog, args, needles, env=None, forbidden=()):
    p, took = run(prog, args, env)
    err = p.stderr.decode(errors="replace")
    what = "%s %s%s" % (prog, " ".join(map(str, args))[:300], (" env %r" % env) if env else "")
    check_eq(p.returncode, 2, "exit status of %s (stderr %r)" % (what, err[-400:]))
    lines = err.splitlines()
    check_eq(len(lines), 1, "stderr lines of %s: %r" % (what, err[-600:]))
    line = lines[0]
    check(line.startswith(prog + ": "), "%s: the line names the program: %r" % (what, line))
    for n in needles:
        check(n in line, "%s: the line names %r: %r" % (what, n, line))
    for n in forbidden:
        check(n not in line, "%s: the line must not show %r: %r" % (what, n, line))
    h.log("  exit 2 in %.2fs: %s" % (took, line))
    return line


# A listener on 127.0.0.1 that counts every connection and says nothing.
Tripwire = h.SilentListener


def holder():
    """A socket listening on a fresh 127.0.0.1 port: that address is in use."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def dead_dsn():
    return "host=127.0.0.1 port=%d dbname=x user=x connect_timeout=2" % h.free_port()


def writer_args(dsn, **flags):
    f = {"pg-dsn": dsn,
         "ingest": "tcp://127.0.0.1:%d" % h.free_port(),
         "publish": "tcp://127.0.0.1:%d" % h.free_port(),
         "http": "127.0.0.1:%d" % h.free_port(),
         "control": "tcp://127.0.0.1:%d" % h.free_port()}
    f.update({k.replace("_", "-"): v for k, v in flags.items()})
    args = []
    for k, v in f.items():
        if v is not None:
            args += ["--" + k, v]
    return args


def edge_args(dsn, **flags):
    f = {"pg-dsn": dsn,
         "writers": "tcp://127.0.0.1:%d" % h.free_port(),
         "listen": "127.0.0.1:%d" % h.free_port(),
         "control": "tcp://127.0.0.1:%d" % h.free_port()}
    f.update({k.replace("_", "-"): v for k, v in flags.items()})
    args = []
    for k, v in f.items():
        if v is not None:
            args += ["--" + k, v]
    return args


# ---------------------------------------------------------------- writer

@t.case
def writer_malformed_dsn_exits_2_at_once():
    for dsn, needle in [("garbage", 'missing "="'), ("hots=127.0.0.1 dbname=x", 'invalid connection option "hots"'),
                        ("host=127.0.0.1 port=99999 password=s3cret", "port"),
                        ("host=127.0.0.1 port=abc", "port"),
                        ("postgresql://127.0.0.1:5432/db?nosuch=1", "nosuch"),
                        ("host='unterminated", "")]:
        expect_exit2("broker-writer", writer_args(dsn), ["--pg-dsn: ", needle], forbidden=["s3cret"])
    # the variable is named when the value came from it
    args = writer_args("x")
    i = args.index("--pg-dsn")
    del args[i:i + 2]
    expect_exit2("broker-writer", args, ["STUDIO_PG_DSN: "], env={"STUDIO_PG_DSN": "garbage"})


@t.case
def migrate_malformed_dsn_exits_2_unreachable_exits_1():
    expect_exit2("broker-writer", ["migrate", "--pg-dsn", "garbage"], ["--pg-dsn: ", 'missing "="'])
    expect_exit2("broker-writer", ["migrate", "--pg-dsn", "host=127.0.0.1 port=0"], ["--pg-dsn: ", "port"])
    # a well-formed DSN of a server that is not there is an outage, not configuration: waited
    # for (--migrate-wait), then 1
    p, took = run("broker-writer", ["migrate", "--migrate-wait", "1s", "--pg-dsn", dead_dsn()])
    err = p.stderr.decode(errors="replace")
    check_eq(p.returncode, 1, "migrate against nothing exits 1 (%r)" % err[-300:])
    check("(retrying)" in err and "--migrate-wait" in err and took >= 1.0,
          "it waited --migrate-wait 1s, retrying, and said so (%.1f s): %r" % (took, err[-400:]))


@t.case
def migrate_waits_for_a_database_that_starts():
    """Issue 26 item 5: an init container started beside a database still starting does not crash-loop."""
    pg = h.PgServer("late")   # made, not started
    try:
        p = subprocess.Popen([h.program("broker-writer"), "migrate", "--pg-dsn", pg.dsn + " connect_timeout=2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        first = p.stderr.readline().decode(errors="replace")
        check("(retrying)" in first, "migrate's first line says it waits for the database: %r" % first)
        pg.start()
        out, err = p.communicate(timeout=90)
        err = first + err.decode(errors="replace")
        check_eq(p.returncode, 0, "migrate once the database started (%r)" % err[-400:])
        check("created schema version" in err, "it created the schema: %r" % err[-300:])
    finally:
        pg.close()


@t.case
def migrate_refused_credentials_fail_at_once():
    """What waiting cannot fix (here: no such role) fails at once, not after --migrate-wait."""
    dsn = re.sub(r"user=\S+", "user=no_such_role_x", os.environ["STUDIO_TEST_PG_DSN"])
    p, took = run("broker-writer", ["migrate", "--migrate-wait", "1h", "--pg-dsn", dsn])
    err = p.stderr.decode(errors="replace")
    check_eq(p.returncode, 1, "migrate with a role that does not exist (%r)" % err[-300:])
    check("(retrying)" not in err and "no_such_role_x" in err, "failed at once, naming the role: %r" % err[-300:])


# Options that PQconninfoParse accepts and libpq 15 refuses only when it
# connects (connectOptions2): retried as an outage they would never succeed.
CONNECT_TIME_BAD = [
    ("sslmode=bogus", "sslmode"),
    ("target_session_attrs=bogus", "target_session_attrs"),
    ("gssencmode=bogus", "gssencmode"),
    ("channel_binding=bogus", "channel_binding"),
    ("ssl_min_protocol_version=TLSv9", "ssl_min_protocol_version"),
    ("ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2", "ssl_max_protocol_version"),
]


def connect_time_bad_dsns(port):
    base = "host=127.0.0.1 port=%d dbname=x user=x" % port
    out = [("%s %s" % (base, opt), needle) for opt, needle in CONNECT_TIME_BAD]
    out.append(("host=127.0.0.1 port=%d,%d dbname=x" % (port, port), "port"))  # more ports than hosts
    out.append(("host=127.0.0.1,127.0.0.1 hostaddr=127.0.0.1 port=%d dbname=x" % port, "hostaddr"))
    return out


@t.case
def connect_time_options_exit_2_without_a_retry():
    """Each program, the daemon and migrate alike, refuses at start what
    libpq would refuse at every connect, with one line and no connection."""
    wire = Tripwire()
    try:
        for dsn, needle in connect_time_bad_dsns(wire.port):
            expect_exit2("broker-writer", writer_args(dsn), ["--pg-dsn: ", needle], forbidden=["retrying"])
            expect_exit2("broker-writer", ["migrate", "--pg-dsn", dsn], ["--pg-dsn: ", needle])
            expect_exit2("edge-gateway", edge_args(dsn), ["--pg-dsn: ", needle])
        check_eq(wire.count(), 0, "connections made to the DSN's address by programs that must not connect")
    finally:
        wire.close()


@t.case
def writer_lock_key_range():
    allowed = "must be 1..9223372036854775806 and not 7450000000/7450000001"
    for v in ["9223372036854775807", "9223372036854775808", "7450000001", "7450000000", "0", "-5", "abc", "1e3",
              ""]:
        line = expect_exit2("broker-writer", writer_args(dead_dsn(), lock_key=v), ["--lock-key", allowed])
        if v == "9223372036854775807":
            check_eq(line, "broker-writer: --lock-key 9223372036854775807: " + allowed, "the exact line")
    expect_exit2("broker-writer", writer_args(dead_dsn()), ["STUDIO_LOCK_KEY 7450000001: " + allowed],
                 env={"STUDIO_LOCK_KEY": "7450000001"})


@t.case
def writer_retention_range():
    for v in ["36501d", "876025h", "9999999999999999d", "7 days", "-1s", "5", "1.5h", "7D"]:
        expect_exit2("broker-writer", writer_args(dead_dsn(), retention=v),
                     ["--retention", "must be 0 (keep everything) or a duration up to 36500d"])


@t.case
def writer_bad_urls_and_addresses():
    cases = [
        (dict(ingest="foo://x"), ["--ingest foo://x:", "scheme"]),
        (dict(ingest="tcp://0.0.0.0"), ["--ingest tcp://0.0.0.0:", "port"]),
        (dict(publish="tcp://127.0.0.1:99999"), ["--publish tcp://127.0.0.1:99999:", "port"]),
        (dict(publish="garbage"), ["--publish garbage:", "nng URL"]),
        (dict(control="tcp://127.0.0.1:1/path"), ["--control tcp://127.0.0.1:1/path:"]),
        (dict(http="localhost:9450"), ["--http localhost:9450:", "IPv4:PORT"]),
        (dict(http="0.0.0.0"), ["--http 0.0.0.0:", "PORT"]),
        (dict(flush_interval_ms="5"), ["--flush-interval-ms 5: must be an integer in 10..60000"]),
    ]
    for flags, needles in cases:
        expect_exit2("broker-writer", writer_args(dead_dsn(), **flags), needles)


@t.case
def writer_bad_ingest_keys_exits_2():
    """--ingest-keys is read with the edge's rules before the database (issue 24)."""
    d = tempfile.mkdtemp(prefix="studio-cfg-")
    bad_jwks = os.path.join(d, "bad.json")
    with open(bad_jwks, "w") as f:
        f.write('{"keys":[{"kty":"oct","kid":"k","alg":"HS256","k":"c2hvcnQ"}]}')
    cases = [
        (dict(ingest_keys="/nonexistent/jwks.json"), ["--ingest-keys /nonexistent/jwks.json: cannot read"]),
        (dict(ingest_keys=bad_jwks), ["--ingest-keys %s: key 0 (kid \"k\"): " % bad_jwks, "shorter than 32 bytes"]),
    ]
    for flags, needles in cases:
        expect_exit2("broker-writer", writer_args(dead_dsn(), **flags), needles)


@t.case
def writer_listen_in_use_exits_2_before_the_database():
    tw = Tripwire()
    dsn = "host=127.0.0.1 port=%d dbname=x user=x connect_timeout=2" % tw.port
    try:
        for flag in ["ingest", "publish", "control", "http"]:
            s, port = holder()
            try:
                v = ("127.0.0.1:%d" if flag == "http" else "tcp://127.0.0.1:%d") % port
                expect_exit2("broker-writer", writer_args(dsn, **{flag: v}),
                             ["--%s %s: cannot listen: " % (flag, v), "in use"])
            finally:
                s.close()
        # two flags naming one port
        same = "tcp://127.0.0.1:%d" % h.free_port()
        expect_exit2("broker-writer", writer_args(dsn, ingest=same, publish=same),
                     ["--publish %s: cannot listen: " % same])
        check_eq(tw.count(), 0, "connections the writer made to its database before exiting 2")
    finally:
        tw.close()


@t.case
def writer_listen_in_use_with_a_real_database_creates_nothing():
    with h.Env(migrate=False) as env:
        s, port = holder()
        try:
            expect_exit2("broker-writer", writer_args(env.dsn, ingest="tcp://127.0.0.1:%d" % port),
                         ["--ingest", "cannot listen"])
        finally:
            s.close()
        check_eq(h.psql_one(env.dsn, "SELECT to_regclass('broker_event') IS NULL"), "t",
                 "no schema in the fresh database (the writer must not have migrated)")
        rows = h.psql(env.admin_dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'broker-writer' "
                      "AND datname = '%s'" % env.dbname)
        check_eq(rows[0][0], "0", "broker-writer sessions")


@t.case
def the_bounds_themselves_are_accepted():
    # migrate parses and checks every flag as the daemon does, then only migrates
    with h.Env(migrate=False) as env:
        for flags in [["--lock-key", "9223372036854775806", "--retention", "36500d"],
                      ["--lock-key", "1", "--retention", "0"], ["--lock-key", "7449999999", "--retention", "1ms"],
                      ["--lock-key", "7450000002", "--ingest", "tcp://0.0.0.0:0", "--http", "[::1]:0"]]:
            p, _ = run("broker-writer", ["migrate", "--pg-dsn", env.dsn] + flags)
            check_eq(p.returncode, 0, "migrate with %s (stderr %r)" % (" ".join(flags),
                                                                    p.stderr.decode(errors="replace")[-300:]))
        # the URI form of a DSN is accepted too (when the test server is reached over TCP without a password)
        user, addr, port = h.psql(env.dsn, "SELECT current_user, host(inet_server_addr()), inet_server_port()")[0]
        if addr is not None and "password" not in env.dsn:
            uri = "postgresql://%s@%s:%s/%s" % (user, "[%s]" % addr if ":" in addr else addr, port, env.dbname)
            p, _ = run("broker-writer", ["migrate", "--pg-dsn", uri])
            check_eq(p.returncode, 0, "migrate with %s (stderr %r)" % (uri, p.stderr.decode(errors="replace")[-300:]))


@t.case
def flag_wins_over_variable_and_help_lists_defaults():
    # a bad variable is not looked at when its flag is given: the error is about the next bad setting
    expect_exit2("broker-writer", writer_args(dead_dsn(), lock_key="5", retention="7 days"), ["--retention"],
                 env={"STUDIO_LOCK_KEY": "0"}, forbidden=["lock-key", "LOCK_KEY"])
    for prog, needles in [("broker-writer", ["(default: 7450001)", "(default: 7d)", "(default: tcp://0.0.0.0:7450)",
                                             "[STUDIO_LOCK_KEY]", "not 7450000000/7450000001", "36500d"]),
                          ("edge-gateway", ["(default: 0.0.0.0:8080)", "(default: 10000)", "[STUDIO_WRITERS]",
                                            "(allowed: an integer in 1..64)"]),
                          ("studioctl", ["(default: 10000)", "[STUDIO_WRITER]"])]:
        p, _ = run(prog, ["--help"], env={"STUDIO_LOCK_KEY": "0", "STUDIO_PG_DSN": "garbage"})
        out = p.stdout.decode()
        check_eq(p.returncode, 0, "%s --help exit status (a bad environment does not matter)" % prog)
        for n in needles:
            check(n in out, "%s --help shows %r:\n%s" % (prog, n, out))


# ---------------------------------------------------------------- edge

@t.case
def edge_bad_configuration_exits_2_at_once():
    d = tempfile.mkdtemp(prefix="studio-cfg-")
    bad_jwks, good_jwks = os.path.join(d, "bad.json"), os.path.join(d, "good.json")
    with open(bad_jwks, "w") as f:
        f.write('{"keys":[{"kty":"oct","kid":"k","alg":"HS256","k":"c2hvcnQ"}]}')
    with open(good_jwks, "w") as f:
        f.write('{"keys":[{"kty":"oct","kid":"k","alg":"HS256","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}]}')
    many = ",".join("tcp://127.0.0.1:%d" % (20000 + i) for i in range(65))
    cases = [
        (dict(pg_dsn="garbage"), ["--pg-dsn: ", 'missing "="']),
        (dict(pg_dsn="host=127.0.0.1 port=70000 password=s3cret"), ["--pg-dsn: ", "port"]),
        (dict(writers="tcp://127.0.0.1"), ["--writers tcp://127.0.0.1:", "port"]),
        (dict(writers="tcp://:7451"), ["--writers tcp://:7451:", "host"]),
        (dict(writers="tcp://127.0.0.1:7451,foo://x"), ["--writers", "URL 2 (foo://x)", "scheme"]),
        (dict(writers="tcp://127.0.0.1:0"), ["--writers", "port"]),
        (dict(writers=many), ["--writers", "more than 64"]),
        (dict(writers=","), ["--writers", "at least one"]),
        (dict(listen="localhost:8080"), ["--listen localhost:8080:", "IPv4:PORT"]),
        (dict(listen="8080"), ["--listen 8080:"]),
        (dict(control="tcp://127.0.0.1"), ["--control tcp://127.0.0.1:", "port"]),
        (dict(threads="0"), ["--threads 0: must be an integer in 1..64"]),
        (dict(heartbeat_s="0"), ["--heartbeat-s 0:"]),
        (dict(auth_keys="/nonexistent/jwks.json"), ["--auth-keys /nonexistent/jwks.json: cannot read"]),
        (dict(auth_keys=bad_jwks), ["--auth-keys %s: key 0 (kid \"k\"): " % bad_jwks, "shorter than 32 bytes"]),
        (dict(auth_keys=good_jwks, cors_origins="*"), ["--cors-origins *: ", "no *"]),
        (dict(auth_leeway_s="301"), ["--auth-leeway-s 301:"]),
        (dict(trusted_proxies="10.0.0.0/33"), ["--trusted-proxies 10.0.0.0/33: ", "ADDRESS/BITS"]),
        (dict(max_streams_per_ip="-1"), ["--max-streams-per-ip -1:"]),
        (dict(ipv6_prefix="129"), ["--ipv6-prefix 129:", "32..128"]),
        (dict(ipv6_prefix="16"), ["--ipv6-prefix 16:", "32..128"]),
    ]
    try:
        for flags, needles in cases:
            expect_exit2("edge-gateway", edge_args(dead_dsn(), **flags), needles, forbidden=["s3cret", "MDEy"])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    expect_exit2("edge-gateway", [a for a in edge_args(dead_dsn(), writers=None)], ["STUDIO_WRITERS udp://h:1:"],
                 env={"STUDIO_WRITERS": "udp://h:1"})


@t.case
def edge_listen_in_use_exits_2_before_the_network():
    db, wr = Tripwire(), Tripwire()
    dsn = "host=127.0.0.1 port=%d dbname=x user=x connect_timeout=2" % db.port
    writers = "tcp://127.0.0.1:%d" % wr.port
    try:
        for threads in ["1", "2"]:
            s, port = holder()
            try:
                v = "127.0.0.1:%d" % port
                expect_exit2("edge-gateway", edge_args(dsn, writers=writers, listen=v, threads=threads),
                             ["--listen %s: cannot listen: " % v, "in use"])
                v = "tcp://127.0.0.1:%d" % port
                expect_exit2("edge-gateway", edge_args(dsn, writers=writers, control=v, threads=threads),
                             ["--control %s: cannot listen: " % v, "in use"])
            finally:
                s.close()
        expect_exit2("edge-gateway", edge_args(dsn, writers=writers, listen="192.0.2.1:8080"),
                     ["--listen 192.0.2.1:8080: cannot listen: "])
        check_eq(db.count(), 0, "connections the edge made to its database before exiting 2")
        check_eq(wr.count(), 0, "connections the edge made to its writers before exiting 2")
    finally:
        db.close()
        wr.close()


@t.case
def hardening_refusals_exit_2_at_once():
    """Issue 25 items 4-6: what would open the edge or the control socket to
    others is bad configuration, refused before the network."""
    d = tempfile.mkdtemp(prefix="studio-cfg-")
    try:
        jwks = os.path.join(d, "jwks.json")
        with open(jwks, "w") as f:
            f.write('{"keys":[{"kty":"oct","kid":"k","alg":"HS256","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}]}')
        os.chmod(jwks, 0o664)
        open_port = h.free_port()
        for flags, needles in [
            (dict(cors_origins="null"), ["--cors-origins null: ", "origin null is refused"]),
            (dict(cors_origins="https://app.test,http://app.test"),
             ["--cors-origins https://app.test,http://app.test: ", "origin http://app.test: plain http://",
              "loopback"]),
            (dict(control="tcp://0.0.0.0:%d" % open_port),
             ["--control tcp://0.0.0.0:%d: " % open_port, "must listen on loopback", "tls+tcp://"]),
            (dict(control="tcp://[::]:%d" % open_port), ["--control tcp://[::]:%d: " % open_port, "loopback"]),
            (dict(auth_keys=jwks), ["--auth-keys %s: " % jwks, "writable by its group (mode 0664)"]),
            (dict(metrics_listen="localhost:9464"), ["--metrics-listen localhost:9464: "]),
        ]:
            expect_exit2("edge-gateway", edge_args(dead_dsn(), **flags), needles, forbidden=["MDEy"])
        for flags, needles in [
            (dict(control="tcp://0.0.0.0:%d" % open_port), ["--control tcp://0.0.0.0:%d: " % open_port, "loopback"]),
            (dict(ingest_keys=jwks), ["--ingest-keys %s: " % jwks, "writable by its group (mode 0664)"]),
        ]:
            expect_exit2("broker-writer", writer_args(dead_dsn(), **flags), needles, forbidden=["MDEy"])
        os.chmod(jwks, 0o646)
        expect_exit2("edge-gateway", edge_args(dead_dsn(), auth_keys=jwks), ["writable by others (mode 0646)"])
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    t.main()
