# ctest-timeout: 900
"""libstudio-producer against the real system (docs/clients.md).

tests/tools/producer_drive (a producer on the library: requests without
keys, the library makes them; many in flight, paced) publishes while the
test breaks things; every case then checks, in PostgreSQL, that every
event the producer was told is stored is there exactly once, with the seq
it was told, and nothing else:

- writer_restart_every_event_once: the only writer is SIGKILLed mid-stream
  and started again on the same address; requests in flight are retried
  (same keys) until it answers.
- pg_restart_every_event_once: PostgreSQL (a server of the test's own) is
  restarted (fast) mid-stream; flushes fail, are retried, replies follow.
- unavailable_goes_to_the_next_writer: with two URLs, the first writer
  draining (answers unavailable), every request ends stored by the second.
- busy_is_retried: while the test holds the writer's flush lock, 8 MiB
  requests fill its pending batch (128 MiB) and it answers busy; the
  library backs off and retries until every request is stored.
- bad_event_refused_locally: an event with a bad topic is refused by the
  library with exactly the words the writer answers to the same event.
- timeout_then_republish_stores_once: a writer whose flush is slower than
  the call's deadline; the call ends STUDIO_TIMEOUT (unknown) with the key
  base it used; the same call again with that base gets the seq stored
  first, and the row is there once.
- pending_then_unavailable_is_timeout: a first try accepted by a slow
  writer and left unanswered, the next one answered `unavailable` by a
  draining writer: the call says TIMEOUT (the event is stored later), not
  "unavailable, nothing stored"; republishing with the base stores nothing.
- free_after_commit_never_says_closed: the producer freed while a request
  sits accepted in the writer's pending batch: its callback says TIMEOUT,
  never CLOSED; the event is stored; republishing with the base stores
  nothing more.
- tls_identity_is_the_producers: producer A with a certificate, then B in
  the same process with the CA only: A publishes, B (no certificate of its
  own) is not let in, A still publishes.
- installed_with_pkg_config: `cmake --install` into a temporary prefix, the
  example built with `cc ... $(pkg-config --cflags --libs studio-producer)`
  (the shared library) and against the archive with `--static`, as a user
  would, both run against the writer.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
WRITER_LOCK_KEY = 7450001   # the writer's default --lock-key (its flush lock)
DRIVE = harness.program("producer_drive", harness.TOOLS_DIR)
BUILD_DIR = os.path.dirname(os.path.abspath(harness.BIN_DIR))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Drive:
    """producer_drive in the background; its stdout parsed as it comes."""

    def __init__(self, urls, topic, count, batch=1, inflight=16, data_bytes=100, rate=0, timeout_ms=60000):
        self.seqs = {}       # (req, index) -> seq
        self.fails = []
        self.done = None
        self.p = subprocess.Popen([DRIVE, ",".join(urls), topic, str(count), str(batch), str(inflight),
                                   str(data_bytes), str(rate), str(timeout_ms)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            f = line.decode(errors="replace").split(" ", 3)
            with self.lock:
                if f[0] == "seq":
                    self.seqs[(int(f[1]), int(f[2]))] = int(f[3])
                elif f[0] == "fail":
                    self.fails.append(line.decode(errors="replace").strip())
                elif f[0] == "done":
                    self.done = (int(f[1]), int(f[2]))

    def stored(self):
        with self.lock:
            return len(self.seqs)

    def wait(self, timeout):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise harness.TestFailure("producer_drive did not finish within %ds (%d events stored so far)"
                                      % (timeout, self.stored()))
        self.reader.join(10)
        err = self.p.stderr.read().decode(errors="replace")
        return rc, err


def check_exactly_once(env, d, topic, requests, batch):
    rows = harness.psql(env.dsn, "SELECT seq, key, data->>'r', data->>'i' FROM broker_event "
                                 "WHERE topic = '%s' ORDER BY seq" % topic)
    want = requests * batch
    keys = set(r[1] for r in rows)
    ids = set((int(r[2]), int(r[3])) for r in rows)
    check_eq(len(d.fails), 0, "requests the producer was told failed (%s)" % d.fails[:3])
    check_eq(len(d.seqs), want, "events the producer was told are stored")
    check_eq(len(rows), want, "rows stored")
    check_eq(len(keys), want, "distinct keys (every event has one, made by the library)")
    check_eq(len(ids), want, "distinct (request, index): no event stored twice")
    check(all(k and k.startswith("sp2-") for k in keys), "every key is a generated one: %s" % sorted(keys)[:2])
    told = sorted(d.seqs.values())
    check_eq(told, [int(r[0]) for r in rows], "the seqs the producer was told are exactly the rows' seqs")
    by_id = {(int(r[2]), int(r[3])): int(r[0]) for r in rows}
    wrong = [k for k, s in d.seqs.items() if by_id.get(k) != s]
    check_eq(wrong[:5], [], "events whose told seq is not their row's")


@t.case
def writer_restart_every_event_once():
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        d = Drive([w.ingest], "pl.restart", 600, batch=2, inflight=16, rate=100, timeout_ms=60000)
        harness.wait_until(lambda: d.stored() >= 300, 60, "300 events stored before the kill")
        before = d.stored()
        w.kill()
        w2 = env.start_writer(**{k: v for k, v in w.flags.items() if k != "pg_dsn"})
        w2.wait_ready()
        rc, err = d.wait(180)
        log("FIGURE writer SIGKILL: %d events stored before the kill, %d in all; producer exit %d"
            % (before, d.stored(), rc))
        check_eq(rc, 0, "producer_drive exit status (stderr %r)" % err[-300:])
        check_exactly_once(env, d, "pl.restart", 600, 2)
        w2.stop()


@t.case
def pg_restart_every_event_once():
    pg = harness.PgServer("prod-pg").start()
    try:
        with harness.Env(admin_dsn=pg.dsn) as env:
            w = env.start_writer(flush_interval_ms=100).wait_ready()
            d = Drive([w.ingest], "pl.pg", 600, batch=2, inflight=16, rate=100, timeout_ms=60000)
            harness.wait_until(lambda: d.stored() >= 300, 60, "300 events stored before the restart")
            took = pg.restart("fast")
            rc, err = d.wait(180)
            log("FIGURE PostgreSQL fast restart took %.2f s; %d events stored; producer exit %d"
                % (took, d.stored(), rc))
            check_eq(rc, 0, "producer_drive exit status (stderr %r)" % err[-300:])
            check_exactly_once(env, d, "pl.pg", 600, 2)
    finally:
        pg.close()


@t.case
def unavailable_goes_to_the_next_writer():
    with harness.Env() as env:
        w1 = env.start_writer(flush_interval_ms=100).wait_ready()
        w2 = env.start_writer(flush_interval_ms=100).wait_ready()
        p = harness.studioctl("drain", "--control", w1.control, timeout=30)
        check_eq(p.returncode, 0, "studioctl drain of the first writer (%r)" % p.stderr[-200:])
        d = Drive([w1.ingest, w2.ingest], "pl.next", 50, batch=2, inflight=4, timeout_ms=30000)
        rc, err = d.wait(120)
        m1 = sc.parse_metrics(harness.http_get(w1.http_url + "/metrics")[2].decode())
        refused = sc.metric(m1, "studio_writer_rejected_total", error="unavailable") or 0
        log("FIGURE unavailable: the draining first writer refused %d requests; 100 events stored by the second"
            % refused)
        check_eq(rc, 0, "producer_drive exit status (stderr %r, fails %s)" % (err[-300:], d.fails[:3]))
        check(refused >= 1, "the first URL (draining) was tried and answered unavailable (got %d)" % refused)
        check_exactly_once(env, d, "pl.next", 50, 2)


@t.case
def busy_is_retried():
    if sanitizer_flags() == ["-fsanitize=thread"]:
        # 128 MiB through a Debug TSan producer's checks is slow, and the
        # case exercises nothing threaded that the plain and ASan builds
        # (which run it) miss.
        log("busy_is_retried: not run on the ThreadSanitizer build (cost)")
        return
    with harness.Env() as env:
        # The test holds the writer's flush lock (advisory locks are per
        # database: this test's own), so no flush can commit however soon
        # the writer starts one: 16 requests of 8 MiB (~16 MiB each as
        # decoded) overflow the 128 MiB pending batch and the writer answers
        # busy.  Once it has, the lock is released and every retry must land.
        lock = harness.PsqlSession(env.dsn)
        try:
            lock.execute("SELECT pg_advisory_lock(%d)" % WRITER_LOCK_KEY)
            w = env.start_writer(flush_interval_ms=200).wait_ready()
            d = Drive([w.ingest], "pl.busy", 16, batch=40, inflight=16, data_bytes=200 * 1024, timeout_ms=300000)

            def busy_count():
                m = sc.parse_metrics(harness.http_get(w.http_url + "/metrics")[2].decode())
                return sc.metric(m, "studio_writer_rejected_total", error="busy") or 0
            harness.wait_until(lambda: busy_count() > 0 or d.done is not None, 240,
                               "the writer answers busy while its flush waits for the lock",
                               detail=lambda: "producer done %r, fails %s" % (d.done, d.fails[:3]))
            lock.execute("SELECT pg_advisory_unlock(%d)" % WRITER_LOCK_KEY)
        finally:
            lock.close()
        rc, err = d.wait(300)
        busy = busy_count()
        log("FIGURE busy: the writer answered busy %d times; every one of 16 x 40 events stored" % busy)
        check_eq(rc, 0, "producer_drive exit status (stderr %r, fails %s)" % (err[-300:], d.fails[:3]))
        check(busy > 0, "the writer answered busy at least once (got %d): the case tested the retry" % busy)
        check_exactly_once(env, d, "pl.busy", 16, 40)


def once(urls, topic, base, timeout_ms, try_ms, backoff_ms):
    """producer_drive --once: (status, seq, base, detail)."""
    p = subprocess.run([DRIVE, ",".join(urls), "--once", topic, base, str(timeout_ms), str(try_ms), str(backoff_ms)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out = p.stdout.decode(errors="replace")
    check_eq(p.returncode, 0, "producer_drive --once exit (stderr %r)" % p.stderr.decode(errors="replace")[-300:])
    m = re.search(r"^result (\S+) (\d+) (\S*)\ndetail (.*)$", out, re.M)
    check(m is not None, "producer_drive --once output: %r" % out)
    log("once %s base %s -> %s seq %s (%s)" % (topic, base, m.group(1), m.group(2), m.group(4)))
    return m.group(1), int(m.group(2)), m.group(3), m.group(4)


def rows_of(env, topic):
    return harness.psql(env.dsn, "SELECT seq, key FROM broker_event WHERE topic = '%s' ORDER BY seq" % topic)


def wait_stored(env, topic, n, what):
    harness.wait_until(lambda: len(rows_of(env, topic)) >= n, 60, what)


@t.case
def timeout_then_republish_stores_once():
    with harness.Env() as env:
        # The flush (every 5 s) comes long after the first call's 1 s deadline.
        w = env.start_writer(flush_interval_ms=5000).wait_ready()
        st, _, base, detail = once([w.ingest], "pl.retry", "-", 1000, 60000, 100)
        check_eq(st, "timeout", "the first call, whose try the writer holds until its flush (%s)" % detail)
        check(base.startswith("sp2-") and base in detail, "the key base is handed back and named: %r %r"
              % (base, detail))
        # The docs' advice: the same call again with the same base.
        st2, seq, base2, detail2 = once([w.ingest], "pl.retry", base, 30000, 30000, 100)
        check_eq(st2, "ok", "the republish (%s)" % detail2)
        check_eq(base2, base, "the caller's base is left as it was")
        rows = rows_of(env, "pl.retry")
        check_eq(len(rows), 1, "rows stored for one event published twice: %s" % rows)
        check_eq(int(rows[0][0]), seq, "the republish got the seq stored first")
        check_eq(rows[0][1], base + "-0", "the event's key is BASE-0")


@t.case
def pending_then_unavailable_is_timeout():
    with harness.Env() as env:
        # Flushes every 60 s (the most allowed): not within the test, whose `drain` of it commits the held try.
        slow = env.start_writer(flush_interval_ms=60000).wait_ready()
        draining = env.start_writer(flush_interval_ms=100).wait_ready()
        after = env.start_writer(flush_interval_ms=100).wait_ready()
        p = harness.studioctl("drain", "--control", draining.control, timeout=30)
        check_eq(p.returncode, 0, "studioctl drain of the second writer (%r)" % p.stderr[-200:])
        # try 1: the slow writer accepts and holds it (no reply within 1 s); try 2: the draining
        # writer answers unavailable; the back-off (at least 2.5 s: half of 5 s, then jitter) runs
        # past the 3.5 s deadline, so that answer is the last one heard.  (The
        # library of 0.x answered "unavailable" here, and the event was stored at the flush.)
        st, _, base, detail = once([slow.ingest, draining.ingest], "pl.pending", "-", 3500, 1000, 5000)
        m = sc.parse_metrics(harness.http_get(draining.http_url + "/metrics")[2].decode())
        refused = sc.metric(m, "studio_writer_rejected_total", error="unavailable") or 0
        check(refused >= 1, "the draining writer answered unavailable (%d)" % refused)
        check("unavailable: draining" in detail, "the last answer heard was the draining writer's: %r" % detail)
        check_eq(st, "timeout", "an accepted try left unanswered, then unavailable (%s)" % detail)
        p = harness.studioctl("drain", "--control", slow.control, timeout=30)
        check_eq(p.returncode, 0, "studioctl drain of the slow writer (%r)" % p.stderr[-200:])
        wait_stored(env, "pl.pending", 1, "the held try committed by the slow writer's flush (its drain)")
        # The republish goes to a third writer: the key's row in the table answers it.
        st2, seq, _, detail2 = once([after.ingest], "pl.pending", base, 30000, 30000, 100)
        check_eq(st2, "ok", "the republish with the base (%s)" % detail2)
        rows = rows_of(env, "pl.pending")
        check_eq(len(rows), 1, "rows: the event once (%s)" % rows)
        check_eq(int(rows[0][0]), seq, "the republish got the stored seq")


@t.case
def free_after_commit_never_says_closed():
    with harness.Env() as env:
        # Flushes every 60 s (the most allowed): not within the test, whose `drain` of it commits the event.
        w = env.start_writer(flush_interval_ms=60000).wait_ready()
        after = env.start_writer(flush_interval_ms=100).wait_ready()
        p = subprocess.Popen([DRIVE, w.ingest, "--free-pending", "pl.free"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.readline().decode(errors="replace").split()
        check(len(first) == 2 and first[0] == "sent", "producer_drive --free-pending: %r" % first)
        base = first[1]
        harness.wait_until(lambda: (harness.metric(w.http_url, "studio_writer_pending_events") or 0) >= 1, 60,
                           "the event accepted into the writer's pending batch")
        out, err = p.communicate(b"free\n", timeout=60)
        out = out.decode(errors="replace")
        log("free-pending: %s" % out.strip().replace("\n", " | "))
        check_eq(p.returncode, 0, "producer_drive exit (stderr %r)" % err.decode(errors="replace")[-300:])
        check("callback closed" not in out, "free of an accepted request does not say closed: %r" % out)
        check("callback timeout" in out, "it says timeout (unknown): %r" % out)
        p = harness.studioctl("drain", "--control", w.control, timeout=30)
        check_eq(p.returncode, 0, "studioctl drain of the writer (%r)" % p.stderr[-200:])
        wait_stored(env, "pl.free", 1, "the accepted event committed by the flush (the writer's drain)")
        st, seq, _, detail = once([after.ingest], "pl.free", base, 30000, 30000, 100)
        check_eq(st, "ok", "the republish with the base (%s)" % detail)
        rows = rows_of(env, "pl.free")
        check_eq(len(rows), 1, "rows: the event once (%s)" % rows)
        check_eq(int(rows[0][0]), seq, "the republish got the stored seq")


@t.case
def tls_identity_is_the_producers():
    from test_tls import Pki
    with harness.Env() as env:
        pki = Pki(env.tmp)
        crt, key = pki.server
        port = harness.free_port()
        w = env.start_writer(ingest="tls+tcp://127.0.0.1:%d" % port, tls_cert=crt, tls_key=key,
                             tls_ca=pki.ca).wait_ready()
        p = subprocess.run([DRIVE, "tls+tcp://localhost:%d" % port, "--tls-two", "pl.tls", pki.ca, pki.client[0],
                            pki.client[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        out = p.stdout.decode(errors="replace")
        log("tls-two: %s" % out.strip().replace("\n", " | "))
        check_eq(p.returncode, 0, "producer_drive --tls-two (stderr %r)" % p.stderr.decode(errors="replace")[-300:])
        check_eq(out.split("\n")[:3], ["a ok", "b unavailable", "a2 ok"],
                 "A (certificate) stored; B (CA only: no certificate of its own) never gets a connection, nothing sent")
        check_eq(len(rows_of(env, "pl.tls")), 2, "rows stored: A's two events")
        w.stop()


@t.case
def bad_event_refused_locally():
    with harness.Env() as env:
        w = env.start_writer().wait_ready()
        for topic in ["a b", "t" * 201, ""]:
            p = subprocess.run([DRIVE, w.ingest, "--bad", topic], stdout=subprocess.PIPE, timeout=30)
            line = p.stdout.decode().strip()
            mine = line.split(" ", 2)
            rep = harness.request(w, [{"topic": topic}])
            check_eq(mine[1], "invalid", "the library's status for topic %r" % topic[:20])
            check_eq(rep.get("error"), "invalid", "the writer's answer for topic %r" % topic[:20])
            check_eq(mine[2], rep.get("detail"), "the library's words are the writer's for topic %r" % topic[:20])
        check_eq(int(harness.psql_one(env.dsn, "SELECT count(*) FROM broker_event")), 0, "rows stored")


def sanitizer_flags():
    """The flags the library was built with, for a program linked to it."""
    try:
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        return []
    m = re.search(r"^STUDIO_SANITIZER:STRING=(.*)$", cache, re.M)
    if m and m.group(1) == "address":
        return ["-fsanitize=address,undefined"]
    if m and m.group(1) == "thread":
        return ["-fsanitize=thread"]
    return []


def pkg_config(env_pc, pkg, *args):
    p = subprocess.run(["pkg-config"] + list(args) + [pkg], env=env_pc, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    check_eq(p.returncode, 0, "pkg-config %s (%s)" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p.stdout.decode().split()


def build_example(exe, flags):
    cc = subprocess.run(["cc", "-o", exe, os.path.join(ROOT, "clients", "c", "example.c")] + sanitizer_flags() + flags,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    log("cc %s" % " ".join(flags))
    check_eq(cc.returncode, 0, "cc example.c %s (%s)" % (" ".join(flags), cc.stdout.decode(errors="replace")[-600:]))


def run_example(env, w, exe, topic, extra_env):
    run = subprocess.run([exe, w.ingest, topic, "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=120, env=dict(os.environ, **extra_env))
    out = run.stdout.decode(errors="replace")
    check_eq(run.returncode, 0, "%s: the example's exit status (stderr %r)" % (topic, run.stderr.decode()[-300:]))
    check_eq(len(re.findall(r"^batch event \d+: seq \d+$", out, re.M)), 5, "batch seqs printed:\n%s" % out)
    check_eq(len(re.findall(r"^async event \d+: seq \d+$", out, re.M)), 5, "async seqs printed:\n%s" % out)
    check_eq(int(harness.psql_one(env.dsn, "SELECT count(DISTINCT key) FROM broker_event WHERE topic = '%s'"
                                  % topic)), 10, "%s: rows with distinct keys" % topic)


def nm_globals(path):
    p = subprocess.run(["nm", "-g", "--defined-only", path], stdout=subprocess.PIPE, timeout=60)
    return [ln.split()[2] for ln in p.stdout.decode().splitlines() if len(ln.split()) == 3]


@t.case
def installed_with_pkg_config():
    prefix = tempfile.mkdtemp(prefix="studio-prefix-")
    try:
        p = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", prefix], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        check_eq(p.returncode, 0, "cmake --install (%s)" % p.stdout.decode(errors="replace")[-400:])
        pc_dir = [dp for dp, _, fs in os.walk(prefix) if "studio-producer.pc" in fs]
        check_eq(len(pc_dir), 1, "one studio-producer.pc under the prefix")
        libdir = os.path.dirname(pc_dir[0])
        env_pc = dict(os.environ, PKG_CONFIG_PATH=pc_dir[0])
        others = [n for n in nm_globals(os.path.join(libdir, "libstudio-producer.a")) if not n.startswith("studio_")]
        check_eq(others[:10], [], "global names of the installed archive other than studio_*")
        # The shared library, as `cc ... $(pkg-config --cflags --libs studio-producer)` links it.
        shared = os.path.join(prefix, "example-shared")
        build_example(shared, pkg_config(env_pc, "studio-producer", "--cflags", "--libs"))
        ldd = subprocess.run(["ldd", shared], stdout=subprocess.PIPE, timeout=30).stdout.decode()
        check("libstudio-producer.so.1" in ldd, "the shared example loads the .so.1:\n%s" % ldd)
        # The archive: exactly what `pkg-config --static --libs studio-producer-static` prints.
        static = os.path.join(prefix, "example-static")
        flags = pkg_config(env_pc, "studio-producer-static", "--cflags", "--libs", "--static")
        check(os.path.join(libdir, "libstudio-producer.a") in [os.path.normpath(f) for f in flags],
              "the archive is on the static link line: %s" % flags)
        build_example(static, flags)
        ldd = subprocess.run(["ldd", static], stdout=subprocess.PIPE, timeout=30).stdout.decode()
        check("studio-producer" not in ldd, "the static example does not load the shared library:\n%s" % ldd)
        # A user's own st_log/proto_* next to the archive: no clash (they are local in it).
        clash = os.path.join(prefix, "clash.c")
        with open(clash, "w") as f:
            f.write('#include <studio_producer.h>\nvoid st_log(void);\nvoid st_log(void) {}\n'
                    'int proto_request_encode;\nint main(void) { st_log(); return studio_version()[0] == 0; }\n')
        cc = subprocess.run(["cc", "-o", clash + ".bin", clash] + sanitizer_flags() + flags, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=120)
        check_eq(cc.returncode, 0, "a program defining st_log and proto_request_encode links with the archive (%s)"
                 % cc.stdout.decode(errors="replace")[-600:])
        # The C example of docs/clients.md compiles as written, warnings as errors.
        with open(os.path.join(ROOT, "docs", "clients.md")) as f:
            doc = f.read()
        blocks = re.findall(r"```c\n(.*?)```", doc[doc.index("## C producer library"):], re.S)
        check_eq(len(blocks), 1, "C examples in the producer section of docs/clients.md")
        doc_c = os.path.join(prefix, "doc_example.c")
        with open(doc_c, "w") as f:
            f.write(blocks[0])
        cc = subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-o", doc_c + ".bin", doc_c] + sanitizer_flags()
                            + pkg_config(env_pc, "studio-producer", "--cflags", "--libs"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        check_eq(cc.returncode, 0, "the docs' example compiles (%s)" % cc.stdout.decode(errors="replace")[-600:])
        # Fully static, with the libraries docs/clients.md names (not with a sanitizer: it needs its .so).
        if not sanitizer_flags():
            full = os.path.join(prefix, "example-full-static")
            extra = ["-static"] + flags + ["-lmbedtls", "-lmbedx509", "-lmbedcrypto", "-latomic"]
            cc = subprocess.run(["cc", "-o", full, os.path.join(ROOT, "clients", "c", "example.c")] + extra,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            check_eq(cc.returncode, 0, "cc -static example.c %s (%s)" % (" ".join(extra),
                                                                         cc.stdout.decode(errors="replace")[-600:]))
        with harness.Env() as env:
            w = env.start_writer().wait_ready()
            run_example(env, w, shared, "pl.shared", {"LD_LIBRARY_PATH": libdir})
            run_example(env, w, static, "pl.static", {})
            if not sanitizer_flags():
                run_example(env, w, full, "pl.full", {})
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    t.main()
