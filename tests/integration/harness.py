"""harness: the integration-test toolkit (stdlib only, /usr/bin/python3).

Size: over 800 lines on purpose: the one toolkit every integration test
imports (processes, PostgreSQL, HTTP, nng requests, checks that say why).

Every integration test is one script, run by ctest (tests/CMakeLists.txt) with
STUDIO_BIN_DIR (build/bin), STUDIO_TOOLS_DIR (build/tests) and
STUDIO_TEST_PG_DSN (an admin DSN of a throwaway PostgreSQL) in its environment.
Real PostgreSQL, real processes, no mocks.

Stable API (G2's tests rely on it; add, never change):

  Tests()                      a tiny runner:  t = Tests();  @t.case def name(): ...;
                               t.main()  -> runs the cases in order (or those named on the
                               command line; an unknown name fails), prints every FAIL line
                               again at the end, then "N passed, M failed (file)", exits 0/1
                               (77 when the DSN is unset).
  check(cond, msg)             raise TestFailure(msg) unless cond.
  check_eq(a, b, msg)          same, with both values in the message.
  wait_until(pred, timeout, what, interval=0.05, detail=None) -> pred()'s truthy value or
                               TestFailure naming what, pred's last value and detail()
                               (a callable: the facts to print, e.g. a process's logs()).

  Env(admin_dsn=None)          context manager: a fresh database (CREATE DATABASE
                               with a unique name, migrated unless migrate=False) on
                               admin_dsn (default STUDIO_TEST_PG_DSN), a temp dir for logs,
                               every process started through it stopped at the end,
                               database dropped (WITH FORCE).  When a case failed while it
                               was active (or an exception left it), every process's log
                               tail is printed and the temp dir is kept (path printed).
                               env.dsn, env.admin_dsn, env.tmp, env.dbname
                               env.start_writer(**flags) / env.start_edge(writers, **flags)
  start_writer(dsn, env=None, extra_env=None, **flags) -> Proc   (module level too)
  start_edge(dsn, writers=[...], env=None, extra_env=None, **flags) -> Proc
      flags: python names, '_' -> '-', e.g. flush_interval_ms=200 -> --flush-interval-ms 200;
      True -> bare flag; None -> omitted.  Defaults: every listen address on
      127.0.0.1 with a free port.  writers: Proc objects (their publish URL) or URLs.
  Proc: .name .pid .args .stdout_path .stderr_path .returncode
        writer: .ingest .publish .control (nng URLs), .http ("127.0.0.1:P"), .http_url
        edge:   .listen ("127.0.0.1:P"), .url ("http://127.0.0.1:P"), .control
        .wait_ready(timeout=30)  writer: GET /healthz 200; edge: GET /readyz 200
        .alive()  .stop(timeout=30) -> returncode (SIGTERM, wait)  .kill() (SIGKILL, wait)
        .wait_exit(timeout) -> returncode   .logs() -> str (stdout+stderr tails)
        .rss_kb() -> int (VmRSS from /proc/PID/status)
        .stacks() -> str (every thread's backtrace: gdb if installed, else /proc)
        .wait_exit_or_stacks(timeout, what) -> returncode, or TestFailure with the
                               stacks and logs of a process that did not exit
  program(name, where=BIN_DIR) -> path   (TestFailure when not built)
  migrate(dsn)                 runs `broker-writer migrate --pg-dsn DSN` (raises on failure).
  psql(dsn, sql) -> [tuple of str|None]   rows; NULL -> None; values never split wrongly
                               (fields \\x01, records \\x02, NULL \\x03 on the wire).
  psql_one(dsn, sql) -> str|None           first column of the first row.
  publish(writer, topic, data=None, about=(), key=None) -> int seq
                               via studioctl; data is a JSON text (str) or a python
                               value (json.dumps'd); key -> studioctl --key.
  publish_file(writer, events, check=True) -> CompletedProcess
                               studioctl publish --file; events: dicts
                               {"topic","about","data","key"} or ready NDJSON lines (str).
  studioctl(*args, check=False, timeout=60) -> CompletedProcess
  nngreq(url, payload: bytes, timeout_ms=5000) -> (rc, reply_obj_or_None, stdout, stderr)
                               raw request through tests/tools/nngreq (see nngreq.c).
  request(url, obj) -> reply dict   msgpack-encodes obj (see mp_pack) and sends it.
  mp_pack(obj) -> bytes        None, bool, int, str, bytes (bin), list, dict, Bin, Raw.
  mp_array_header(n, width=None) mp_map_header(n, width=None) mp_str_header(n, width=None)
                               hand-crafted headers: width 16 or 32 forces the form,
                               e.g. mp_array_header(4_000_000_000) is array32.
  Raw(b)                       bytes inserted verbatim into an mp_pack'd value.
  http_get(url, headers=None, timeout=10) -> (status, headers dict lower-cased, body bytes)
  free_port() -> int           a 127.0.0.1 port nobody listens on (never handed out twice).
  stable_port() -> int         the same, below the ephemeral range: for an address that is
                               closed and bound again (no outgoing connection takes it meanwhile).
  SseClient(url, headers=None) a minimal SSE reader in a thread: .events (list of dicts
                               {"id","event","data","retry"}), .items(), .wait_items(n, timeout),
                               .closed, .error, .close().
  compact_json(text) -> str    text with whitespace outside strings removed (what the
                               writer stores).
  rss_kb(pid) -> int
  process_stacks(pid) -> str    every thread's stack of a live process (Proc.stacks).
  envelope_data_text(envelope) -> str|None   the raw text of an envelope's "data".
  db_events(dsn, topics=None) -> [(seq:int, topic, about_json, data_text|None)] by seq.
  check_items_match_rows(items, rows, what)  SSE items (SseClient.items()) are exactly
                               rows (db_events) in order: id == seq, topic, and data
                               byte for byte (no data for a change signal).
  metric(url, name, labels=None) -> float|None   one sample from GET /metrics.
  PgServer(name, port=None)    a PostgreSQL of the test's own that it may restart: .start(),
                               .stop(mode="fast"), .restart(mode="fast") -> seconds, .dsn,
                               .logs(tail), .close() (also at exit).  Root: runs as postgres.
  PsqlSession(dsn)             one long-lived psql session: .execute(sql) (bounded wait,
                               raises on ERROR), .close(); e.g. to hold a lock across steps.
  TcpRelay(host, port)         a relay in front of a real server: .port, .pause_down() holds
                               back the server's bytes to clients, .resume_down(), .close().
  dsn_params(dsn) -> (host, port)    dsn_with(dsn, **params) -> key=value DSN with params set.

chaos.py (beside this file) adds Producer (keyed batches over nngreq, resent to
the next writer on no answer / busy / unavailable), ResumingClient (SSE, resumes
with Last-Event-ID) and verify() (the end-of-run verdict of the chaos tests).
"""

import atexit
import glob
import http.client
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

# The programs refuse a key file writable by its group or others (issue 25),
# so the JWKS files tests write must not depend on the runner's umask (002
# on some systems would make them 0664): files are made as under 022.
os.umask(0o022)

BIN_DIR = os.environ.get("STUDIO_BIN_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin")
TOOLS_DIR = os.environ.get("STUDIO_TOOLS_DIR") or os.path.join(BIN_DIR, "..", "tests")
PSQL = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
SKIP = 77


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def check_eq(a, b, msg):
    if a != b:
        raise TestFailure("%s: got %r, expected %r" % (msg, a, b))


def wait_until(pred, timeout, what, interval=0.05, detail=None):
    """Polls pred() until truthy; bounded: raises TestFailure naming `what`,
    pred's last value and detail() (a callable giving the facts to print:
    the values the test compares, a process's log tail...)."""
    deadline = time.monotonic() + timeout
    n = 0
    while True:
        v = pred()
        n += 1
        if v:
            return v
        if time.monotonic() >= deadline:
            msg = "timed out after %.1fs (%d polls) waiting for %s; last value %s" % (
                timeout, n, what, _short(repr(v)))
            if detail is not None:
                try:
                    msg += "\n" + str(detail())
                except Exception as e:  # the detail must not hide the timeout
                    msg += "\n(detail failed: %r)" % e
            raise TestFailure(msg)
        time.sleep(interval)


def _short(text, n=300):
    return text if len(text) <= n else text[:n] + "...(%d chars)" % len(text)


def log(*a):
    print(*a, flush=True)


# Failed cases so far in this process (Env prints its processes' logs when a
# case failed while it was active, even when the runner caught the failure).
_failed_cases = 0


# ---------------------------------------------------------------- runner

class Tests:
    """Runs named cases in order; one failing case does not stop the others."""

    def __init__(self, needs_pg=True):
        self.cases = []
        self.needs_pg = needs_pg

    def case(self, fn):
        self.cases.append(fn)
        return fn

    def main(self):
        if self.needs_pg and not os.environ.get("STUDIO_TEST_PG_DSN"):
            log("STUDIO_TEST_PG_DSN is not set: skipping")
            sys.exit(SKIP)
        global _failed_cases
        only = set(sys.argv[1:])
        unknown = only - {fn.__name__ for fn in self.cases}
        if unknown:
            log("FAIL no such case: %s (cases: %s)" % (" ".join(sorted(unknown)),
                                                        " ".join(fn.__name__ for fn in self.cases)))
            sys.exit(1)
        passed = failed = 0
        failures = []
        for fn in self.cases:
            if only and fn.__name__ not in only:
                continue
            log("=== %s" % fn.__name__)
            t0 = time.monotonic()
            try:
                fn()
            except Exception as e:  # any exception is a failed case
                failed += 1
                _failed_cases += 1
                what = "%s: %s" % (type(e).__name__, e) if not isinstance(e, TestFailure) else str(e)
                line = "FAIL %s (%.1fs): %s" % (fn.__name__, time.monotonic() - t0, what)
                log(line)
                if not isinstance(e, TestFailure):
                    traceback.print_exc(file=sys.stdout)
                    sys.stdout.flush()
                failures.append(line)
            else:
                passed += 1
                log("ok   %s (%.1fs)" % (fn.__name__, time.monotonic() - t0))
        # The verdict again, last: whatever keeps only the head or the tail
        # of the output (ctest truncates long output) still shows it.
        for line in failures:
            log(_short(line, 4000))
        log("%d passed, %d failed (%s)" % (passed, failed, os.path.basename(sys.argv[0])))
        sys.exit(1 if failed or passed == 0 else 0)


# ---------------------------------------------------------------- ports

_ports_given = set()
_ports_lock = threading.Lock()


def free_port():
    """A free 127.0.0.1 TCP port, never the same twice in this process."""
    with _ports_lock:
        for _ in range(200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            if port not in _ports_given:
                _ports_given.add(port)
                return port
    raise TestFailure("no free port found")


def stable_port():
    """A free 127.0.0.1 port below the kernel's ephemeral range, for an
    address a test stops and binds again (an edge restarted on its port, a
    PostgreSQL restarted): while it is closed, no outgoing connection can
    take it as its local port, which free_port()'s ports (from that range)
    allow."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    with _ports_lock:
        for _ in range(500):
            port = random.randint(max(1024, lo - 16384), lo - 1)
            if port in _ports_given:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            finally:
                s.close()
            _ports_given.add(port)
            return port
    raise TestFailure("no free port found below the ephemeral range (%d)" % lo)


# ---------------------------------------------------------------- PostgreSQL

def dsn_with_db(dsn, dbname):
    """The same DSN naming another database (URI or key=value form)."""
    if dsn.startswith(("postgres://", "postgresql://")):
        u = urllib.parse.urlsplit(dsn)
        return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + dbname, u.query, u.fragment))
    rest = re.sub(r"(^|\s)dbname\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", " ", dsn).strip()
    return (rest + " dbname=" + dbname).strip()


def psql(dsn, sql, timeout=60):
    """Runs sql; returns rows as tuples of str (None for NULL).  Raises on error."""
    env = dict(os.environ, PGCONNECT_TIMEOUT="10", PGOPTIONS="-c client_min_messages=warning",
               PGCLIENTENCODING="UTF8")
    p = subprocess.run(
        [PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-F", "\x01", "-R", "\x02",
         "-P", "null=\x03", "-d", dsn, "-c", sql],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env=env, timeout=timeout)
    if p.returncode != 0:
        raise TestFailure("psql failed (%d) for %r: %s" % (p.returncode, sql[:200],
                                                          p.stderr.decode(errors="replace").strip()))
    out = p.stdout.decode("utf-8")
    if out.endswith("\n"):
        out = out[:-1]
    if out == "":
        return []
    rows = []
    for rec in out.split("\x02"):
        rows.append(tuple(None if f == "\x03" else f for f in rec.split("\x01")))
    return rows


def psql_one(dsn, sql):
    rows = psql(dsn, sql)
    return rows[0][0] if rows else None


def program(name, where=None):
    """The path of a built program; a clear failure when it was not built."""
    path = os.path.join(where or BIN_DIR, name)
    if not os.access(path, os.X_OK):
        raise TestFailure("%s is not built (%s missing)" % (name, path))
    return path


def migrate(dsn, timeout=60):
    p = subprocess.run([program("broker-writer"), "migrate", "--pg-dsn", dsn],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    if p.returncode != 0:
        raise TestFailure("broker-writer migrate exited %d: %s" % (p.returncode,
                                                                  p.stdout.decode(errors="replace")))
    return p


# ---------------------------------------------------------------- processes

_active_envs = []


def nng_teardown_cycle(stderr):
    """True when stderr's LeakSanitizer report is nothing but nng's own
    objects holding each other: no direct leak at all (so no block of ours
    is lost: what we leak is a root nothing points to, a direct leak), at
    least one indirect leak, and every leaked block allocated by libnng
    itself (its first frame above the allocator is in libnng.so)."""
    if "ERROR: LeakSanitizer" not in stderr or "Direct leak of" in stderr:
        return False
    if "ERROR: AddressSanitizer" in stderr or "runtime error:" in stderr:
        return False
    blocks = stderr.split("Indirect leak of ")[1:]
    if not blocks:
        return False
    for b in blocks:
        frames = [ln.strip() for ln in b.splitlines() if ln.strip().startswith("#")]
        if len(frames) < 2 or "libnng.so" not in frames[1]:
            return False
    return True


def _flag_args(flags):
    args = []
    for k, v in flags.items():
        if v is None or v is False:
            continue
        args.append("--" + k.replace("_", "-"))
        if v is not True:
            args.append(str(v))
    return args


def _http_status(url, timeout=2):
    try:
        st, _, _ = http_get(url, timeout=timeout)
        return st
    except (OSError, http.client.HTTPException):
        return None


class Proc:
    """A spawned program with its output in files under the test's temp dir."""

    def __init__(self, name, args, logdir, extra_env=None):
        self.name = name
        self.args = args
        self.stdout_path = os.path.join(logdir, name + ".stdout")
        self.stderr_path = os.path.join(logdir, name + ".stderr")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        if extra_env:
            env.update({k: str(v) for k, v in extra_env.items()})
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.p = subprocess.Popen(args, stdout=self._out, stderr=self._err,
                                  stdin=subprocess.DEVNULL, env=env)
        self.pid = self.p.pid
        self.ready_path = None

    @property
    def returncode(self):
        return self.p.poll()

    def alive(self):
        return self.p.poll() is None

    def wait_ready(self, timeout=30):
        url = self.ready_url

        def ready():
            if not self.alive():
                raise TestFailure("%s exited with %s before it was ready\n%s"
                                  % (self.name, self.p.returncode, self.logs()))
            return _http_status(url) == 200
        try:
            wait_until(ready, timeout, "%s ready (%s)" % (self.name, url), interval=0.1)
        except TestFailure as e:
            if "exited" in str(e):
                raise
            raise TestFailure("%s\n%s" % (e, self.logs()))
        return self

    def wait_exit(self, timeout=30):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TestFailure("%s did not exit within %ss\n%s" % (self.name, timeout, self.logs()))

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def stop(self, timeout=30):
        """SIGTERM, then wait (bounded); returns the exit status.

        One sanitizer finding is not ours and is forgiven (logged as a
        FIGURE): nng 1.5.2 leaves a cycle of its own listener and pipe
        objects when a connection is accepted while the socket closes
        (its teardown races, fixed upstream after 1.5.2).  LeakSanitizer
        exits 1 for it.  See nng_teardown_cycle for the exact rule."""
        self.signal(signal.SIGTERM)
        return self.wait_stopped(timeout)

    def wait_stopped(self, timeout=30):
        """The exit status of a process told to stop (see stop)."""
        rc = self.wait_exit(timeout)
        if rc == 1 and nng_teardown_cycle(self._stderr_text()):
            log("FIGURE %s: LeakSanitizer found only a cycle of nng's own objects at exit "
                "(nng 1.5.2 teardown race); counted as exit 0" % self.name)
            return 0
        return rc

    def _stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        self.signal(signal.SIGKILL)
        return self.p.wait(10)

    def rss_kb(self):
        return rss_kb(self.pid)

    def stacks(self, timeout=60):
        """Every thread's stack, for a failure message (a process that does
        not exit): gdb's backtrace when gdb is installed, else the kernel's
        view per thread (/proc/PID/task/*: wchan, syscall, stack)."""
        return process_stacks(self.pid, timeout)

    def wait_exit_or_stacks(self, timeout, what):
        """wait_exit(timeout); when the process is still there, its stacks
        and logs go into the TestFailure (then it is left to the cleanup)."""
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TestFailure("%s: %s (pid %d) did not exit within %ss; its threads:\n%s\n%s"
                              % (what, self.name, self.pid, timeout, self.stacks(), self.logs()))

    def logs(self, tail=60):
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            if not self._out.closed:
                self._out.flush()
            try:
                with open(path, "rb") as f:
                    lines = f.read().decode(errors="replace").splitlines()
            except OSError:
                lines = []
            parts.append("--- %s (last %d of %d lines)\n%s"
                         % (path, min(tail, len(lines)), len(lines), "\n".join(lines[-tail:])))
        return "\n".join(parts)

    def close_files(self):
        self._out.close()
        self._err.close()


def _current_env(env):
    if env is not None:
        return env
    return _active_envs[-1] if _active_envs else None


def _logdir(env):
    if env is not None:
        return env.tmp
    return tempfile.mkdtemp(prefix="studio-it-")


_proc_counter = itertools.count(1)


def start_writer(dsn, env=None, extra_env=None, name=None, **flags):
    """Spawns broker-writer; every address on 127.0.0.1 with a free port unless given."""
    env = _current_env(env)
    f = {"pg_dsn": dsn,
         "ingest": "tcp://127.0.0.1:%d" % free_port(),
         "publish": "tcp://127.0.0.1:%d" % free_port(),
         "http": "127.0.0.1:%d" % free_port(),
         "control": "tcp://127.0.0.1:%d" % free_port(),
         "flush_interval_ms": 200}
    f.update(flags)
    name = name or "writer%d" % next(_proc_counter)
    p = Proc(name, [program("broker-writer")] + _flag_args(f), _logdir(env), extra_env)
    p.ingest, p.publish, p.http, p.control = f["ingest"], f["publish"], f["http"], f["control"]
    p.http_url = "http://" + p.http
    p.ready_url = p.http_url + "/healthz"
    p.flags = f
    if env is not None:
        env.procs.append(p)
    return p


def start_edge(dsn, writers, env=None, extra_env=None, name=None, **flags):
    """Spawns edge-gateway subscribed to writers (Procs or pub URLs)."""
    env = _current_env(env)
    urls = [w.publish if isinstance(w, Proc) else w for w in writers]
    f = {"pg_dsn": dsn,
         "writers": ",".join(urls),
         "listen": "127.0.0.1:%d" % free_port(),
         "control": "tcp://127.0.0.1:%d" % free_port()}
    f.update(flags)
    name = name or "edge%d" % next(_proc_counter)
    p = Proc(name, [program("edge-gateway")] + _flag_args(f), _logdir(env), extra_env)
    p.listen, p.control = f["listen"], f["control"]
    p.url = "http://" + p.listen
    p.ready_url = p.url + "/readyz"
    p.flags = f
    if env is not None:
        env.procs.append(p)
    return p


class Env:
    """A fresh database per test plus cleanup of everything started through it."""

    _n = itertools.count(1)

    def __init__(self, migrate=True, keep=False, admin_dsn=None):
        self.admin_dsn = admin_dsn or os.environ.get("STUDIO_TEST_PG_DSN")
        if not self.admin_dsn:
            log("STUDIO_TEST_PG_DSN is not set: skipping")
            sys.exit(SKIP)
        self.dbname = "it_%d_%d_%d" % (os.getpid(), int(time.time() * 1000) % 10**9, next(Env._n))
        self.dsn = dsn_with_db(self.admin_dsn, self.dbname)
        self.do_migrate = migrate
        self.keep = keep
        self.procs = []
        self.tmp = None

    def __enter__(self):
        self.failed_at_enter = _failed_cases
        self.tmp = tempfile.mkdtemp(prefix="studio-%s-" % self.dbname)
        psql(self.admin_dsn, "CREATE DATABASE %s" % self.dbname)
        _active_envs.append(self)
        try:
            if self.do_migrate:
                migrate(self.dsn)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def start_writer(self, **flags):
        return start_writer(self.dsn, env=self, **flags)

    def start_edge(self, writers, **flags):
        return start_edge(self.dsn, writers, env=self, **flags)

    def psql(self, sql):
        return psql(self.dsn, sql)

    def __exit__(self, et, ev, tb):
        if self in _active_envs:
            _active_envs.remove(self)
        for p in self.procs:
            if p.alive():
                p.signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.p.wait(15)
            except subprocess.TimeoutExpired:
                p.p.kill()
                p.p.wait(10)
        ok_exit = et is None or (issubclass(et, SystemExit) and getattr(ev, "code", 1) in (0, None))
        failed = not ok_exit or _failed_cases > self.failed_at_enter
        if failed:
            # Every process's log tail, and where the whole logs stay.
            for p in self.procs:
                log("=== logs of %s (exit %s): %s" % (p.name, p.returncode, " ".join(p.args)))
                log(p.logs())
            log("=== whole logs kept in %s" % self.tmp)
        for p in self.procs:
            p.close_files()
        try:
            psql(self.admin_dsn, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.dbname)
        except TestFailure as e:
            log("warning: %s" % e)
        if not self.keep and not failed:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


class SilentListener:
    """A TCP listener on 127.0.0.1 that accepts, counts every connection and
    never says a byte: a tripwire for programs that must not connect, or a
    dead server that accepts TCP and never answers."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.rounds = 0
        self.conns = []
        self._stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
                self.accepted += 1
                self.conns.append(c)
            except OSError:
                pass
            self.rounds += 1

    def count(self):
        """Connections so far, including any still in the backlog: two more
        accept rounds drain what the kernel queued before this call."""
        r = self.rounds
        wait_until(lambda: self.rounds >= r + 2, 10, "the tripwire's accept loop")
        return self.accepted

    def close(self):
        self._stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


class PgServer:
    """A PostgreSQL server of the test's own, which it may stop and restart
    (the shared STUDIO_TEST_PG_DSN server must never be restarted: other
    tests use it).  initdb in a temp dir, its own free port on 127.0.0.1,
    unix socket in a private dir, trust auth, fsync off; as root every server
    command runs as the `postgres` user (PostgreSQL refuses root), like
    scripts/lib.sh.  .dsn (admin DSN), start(), stop(mode="fast"),
    restart(mode="fast") -> seconds it took, running(), logs(tail), close().
    standby_of=PRIMARY (a started PgServer): a hot standby of it instead of
    a fresh cluster (pg_basebackup -R, streaming; read-only, in_hot_standby).
    conf: more lines for postgresql.conf (e.g. ssl = on and its files).
    """

    def __init__(self, name="pg", port=None, standby_of=None, conf=""):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda x: int(x.split("/")[4]) if x.split("/")[4].isdigit() else 0)
        if not bins:
            raise TestFailure("initdb not found (/usr/lib/postgresql/*/bin)")
        self.bindir = os.path.dirname(bins[-1])
        self.root = os.geteuid() == 0
        self.base = tempfile.mkdtemp(prefix="studio-%s-" % name)
        os.chmod(self.base, 0o755)
        self.data = os.path.join(self.base, "data")
        self.sock = os.path.join(self.base, "sock")
        self.logfile = os.path.join(self.base, "server.log")
        self.port = port or free_port()
        self.dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres" % self.port
        for d in (self.data, self.sock):
            os.mkdir(d, 0o700)
        if self.root:
            import pwd
            pw = pwd.getpwnam("postgres")
            for d in (self.base, self.data, self.sock):
                os.chown(d, pw.pw_uid, pw.pw_gid)
        if standby_of is not None:
            self._run("pg_basebackup", "-D", self.data, "-R", "-X", "stream", "-c", "fast", "-h", "127.0.0.1",
                      "-p", str(standby_of.port), "-U", "postgres", timeout=120)
        else:
            self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--locale=C.UTF-8", timeout=120)
        conf = ("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"
                "max_connections = 100\nfsync = off\nsynchronous_commit = off\n"
                "full_page_writes = off\n" % (self.port, self.sock)) + conf
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(conf)
        self.started = False
        atexit.register(self.close)

    def _run(self, prog, *args, timeout=60):
        cmd = [os.path.join(self.bindir, prog)] + list(args)
        if self.root:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        if p.returncode != 0:
            raise TestFailure("%s %s exited %d: %s\n%s" % (prog, " ".join(args[:3]), p.returncode,
                                                           p.stdout.decode(errors="replace")[-2000:],
                                                           self.logs(30)))
        return p

    def start(self):
        self._run("pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60", "start", timeout=90)
        self.started = True
        return self

    def stop(self, mode="fast"):
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", timeout=90)
        self.started = False

    def restart(self, mode="fast"):
        """pg_ctl restart -m mode; returns the seconds until it accepts connections again."""
        t0 = time.monotonic()
        self._run("pg_ctl", "-D", self.data, "-l", self.logfile, "-m", mode, "-w", "-t", "60",
                  "restart", timeout=90)
        self.started = True
        return time.monotonic() - t0

    def running(self):
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def logs(self, tail=40):
        try:
            with open(self.logfile, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "--- %s: none" % self.logfile
        return "--- %s (last %d of %d lines)\n%s" % (self.logfile, min(tail, len(lines)), len(lines),
                                                     "\n".join(lines[-tail:]))

    def close(self, keep_logs=False):
        """Stops the server (immediate) and removes its files."""
        if self.running():
            try:
                self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "-t", "30", "stop",
                          timeout=60)
            except (TestFailure, subprocess.TimeoutExpired) as e:
                log("warning: stopping the test's PostgreSQL: %s" % e)
        self.started = False
        if not keep_logs:
            shutil.rmtree(self.base, ignore_errors=True)


class PsqlSession:
    """One long-lived psql session (to hold a lock or a transaction open
    across other steps).  execute(sql) runs it and waits (bounded) until psql
    has answered; a failing statement raises with psql's error text."""

    _n = itertools.count(1)

    def __init__(self, dsn):
        env = dict(os.environ, PGCONNECT_TIMEOUT="10", PGOPTIONS="-c client_min_messages=warning")
        self.p = subprocess.Popen([PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0", "-d", dsn],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env)
        self._lines = []
        self._cv = threading.Condition()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for raw in self.p.stdout:
            with self._cv:
                self._lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._lines.append(None)
            self._cv.notify_all()

    def execute(self, sql, timeout=30):
        # psql runs a statement only at its ';': without one it would wait in
        # psql's query buffer and the echoed mark would come back at once,
        # so the caller would go on as if the statement had run.
        if not sql.rstrip().endswith(";"):
            sql = sql.rstrip() + ";"
        mark = "__psql_session_done_%d" % next(PsqlSession._n)
        with self._cv:
            start = len(self._lines)
        self.p.stdin.write(("%s\n\\echo %s\n" % (sql, mark)).encode())
        self.p.stdin.flush()
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                out = self._lines[start:]
                if mark in out:
                    out = out[:out.index(mark)]
                    break
                if None in out or time.monotonic() >= deadline:
                    raise TestFailure("psql session: %r %s; output %r" % (
                        sql[:200], "ended" if None in out else "no answer after %ss" % timeout, out[-10:]))
                self._cv.wait(0.1)
        errs = [ln for ln in out if ln.startswith(("ERROR", "psql:", "FATAL"))]
        if errs:
            raise TestFailure("psql session: %r failed: %s" % (sql[:200], " | ".join(errs)))
        return out

    def close(self):
        try:
            self.p.stdin.write(b"\\q\n")
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)


class TcpRelay:
    """A TCP relay on 127.0.0.1 in front of a real server (a network fault
    injector, not a mock: the bytes are the server's own).  pause_down()
    holds back every byte the server sends to clients (already connected or
    not) until resume_down(); the server has answered, the clients just do
    not see it yet.  .port, .close()."""

    def __init__(self, host, port):
        self.target = (host, port)
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self._down = threading.Event()
        self._down.set()
        self._closed = False
        self._socks = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=10)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            with self._lock:
                self._socks += [c, u]
            threading.Thread(target=self._pump, args=(c, u, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, self._down), daemon=True).start()

    def _pump(self, src, dst, gate):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if gate is not None:
                    gate.wait()
                dst.sendall(b)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pause_down(self):
        self._down.clear()

    def resume_down(self):
        self._down.set()

    def close(self):
        self._closed = True
        self._down.set()
        try:
            self.ls.close()
        except OSError:
            pass
        with self._lock:
            for x in self._socks:
                try:
                    x.close()
                except OSError:
                    pass


def dsn_params(dsn):
    """host and port of a key=value or URI DSN (defaults 127.0.0.1, 5432)."""
    if dsn.startswith(("postgres://", "postgresql://")):
        u = urllib.parse.urlsplit(dsn)
        return u.hostname or "127.0.0.1", u.port or 5432
    kv = dict(re.findall(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn))
    return kv.get("host", "127.0.0.1"), int(kv.get("port", "5432"))


def dsn_with(dsn, **params):
    """The key=value DSN with params replaced or added."""
    for k, v in params.items():
        dsn = re.sub(r"(^|\s)%s\s*=\s*('(?:[^'\\]|\\.)*'|\S+)" % k, " ", dsn).strip()
        dsn = (dsn + " %s=%s" % (k, v)).strip()
    return dsn


# ---------------------------------------------------------------- studioctl / nngreq

def studioctl(*args, check=False, timeout=60, input=None):
    p = subprocess.run([program("studioctl")] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL if input is None else None,
                       input=input, timeout=timeout)
    if check and p.returncode != 0:
        raise TestFailure("studioctl %s exited %d: %s %s" % (
            " ".join(map(str, args))[:200], p.returncode, p.stdout.decode(errors="replace")[-500:],
            p.stderr.decode(errors="replace")[-500:]))
    return p


def _ingest_url(writer):
    return writer.ingest if isinstance(writer, Proc) else writer


def _data_text(data):
    return data if isinstance(data, str) else json.dumps(data)


def publish(writer, topic, data=None, about=(), key=None):
    """Publishes one event; returns its seq."""
    url = _ingest_url(writer)
    args = ["publish", "--writer", url, "--topic", topic]
    for a in about:
        args += ["--about", a]
    if data is not None:
        args += ["--data", _data_text(data)]
    if key is not None:
        args += ["--key", key]
    p = studioctl(*args, check=True)
    out = p.stdout.decode().strip().split()
    check(len(out) >= 1 and out[-1].isdigit(), "studioctl publish printed %r" % p.stdout)
    return int(out[-1])


def publish_file(writer, events, check=True, timeout=300, path=None):
    """studioctl publish --file with one event a line; events are dicts or lines."""
    if path is None:
        env = _current_env(None)
        d = env.tmp if env else tempfile.mkdtemp(prefix="studio-it-")
        path = os.path.join(d, "events-%d.ndjson" % next(_proc_counter))
    with open(path, "w", encoding="utf-8") as f:
        for ev in events:
            f.write((ev if isinstance(ev, str) else json.dumps(ev)) + "\n")
    return studioctl("publish", "--writer", _ingest_url(writer), "--file", path,
                     check=check, timeout=timeout)


def nngreq(url, payload, timeout_ms=5000, resend_ms=None):
    """Sends raw bytes on req0; returns (rc, reply or None, stdout, stderr).
    resend_ms: let REQ resend every resend_ms until answered (default never)."""
    extra = ["--resend-ms", str(resend_ms)] if resend_ms else []
    p = subprocess.run([program("nngreq", TOOLS_DIR), "--timeout-ms", str(timeout_ms)] + extra + [url],
                       input=payload, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout_ms / 1000.0 + 30)
    reply = None
    if p.returncode == 0:
        reply = json.loads(p.stdout.decode())
    return p.returncode, reply, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def request(url, obj, timeout_ms=5000):
    """msgpack-encodes obj (bytes are sent as they are) and returns the decoded reply."""
    payload = obj if isinstance(obj, (bytes, bytearray)) else mp_pack(obj)
    rc, reply, out, err = nngreq(_ingest_url(url), bytes(payload), timeout_ms)
    if rc != 0:
        raise TestFailure("nngreq exited %d: %s %s" % (rc, out.strip(), err.strip()))
    return reply


# ---------------------------------------------------------------- msgpack

class Raw(bytes):
    """Bytes put verbatim into a packed value (hand-crafted headers, garbage)."""


class Bin(bytes):
    """A msgpack bin (plain bytes are bin too; this just reads better)."""


def _hdr(n, width, fix_limit, fix_base, b8, b16, b32):
    if width is None:
        if fix_limit and n < fix_limit:
            return bytes([fix_base | n])
        if b8 is not None and n < 256:
            return bytes([b8, n])
        width = 16 if n < 65536 else 32
    if width == 8:
        return bytes([b8, n & 0xFF])
    if width == 16:
        return bytes([b16]) + struct.pack(">H", n & 0xFFFF)
    return bytes([b32]) + struct.pack(">I", n & 0xFFFFFFFF)


def mp_array_header(n, width=None):
    return Raw(_hdr(n, width, 16, 0x90, None, 0xDC, 0xDD))


def mp_map_header(n, width=None):
    return Raw(_hdr(n, width, 16, 0x80, None, 0xDE, 0xDF))


def mp_str_header(n, width=None):
    return Raw(_hdr(n, width, 32, 0xA0, 0xD9, 0xDA, 0xDB))


def mp_bin_header(n, width=None):
    return Raw(_hdr(n, width or (8 if n < 256 else None), 0, 0, 0xC4, 0xC5, 0xC6))


def mp_pack(o):
    if isinstance(o, Raw):
        return bytes(o)
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack(">b", o)
        if o >= 0:
            for fmt, tag in ((">B", 0xCC), (">H", 0xCD), (">I", 0xCE), (">Q", 0xCF)):
                if o < 1 << (8 * struct.calcsize(fmt)):
                    return bytes([tag]) + struct.pack(fmt, o)
        else:
            for fmt, tag in ((">b", 0xD0), (">h", 0xD1), (">i", 0xD2), (">q", 0xD3)):
                if o >= -(1 << (8 * struct.calcsize(fmt) - 1)):
                    return bytes([tag]) + struct.pack(fmt, o)
        raise ValueError("int out of range")
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        b = o.encode()
        return bytes(mp_str_header(len(b))) + b
    if isinstance(o, (bytes, bytearray)):
        return bytes(mp_bin_header(len(o))) + bytes(o)
    if isinstance(o, (list, tuple)):
        return bytes(mp_array_header(len(o))) + b"".join(mp_pack(x) for x in o)
    if isinstance(o, dict):
        return bytes(mp_map_header(len(o))) + b"".join(mp_pack(k) + mp_pack(v) for k, v in o.items())
    raise TypeError("cannot pack %r" % type(o))


# ---------------------------------------------------------------- HTTP / SSE

def _split(url):
    u = urllib.parse.urlsplit(url)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    return u.hostname, u.port or 80, path


def http_get(url, headers=None, timeout=10, method="GET"):
    """One plain request; returns (status, {lower-case header: value}, body bytes)."""
    host, port, path = _split(url)
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


class SseClient:
    """A minimal SSE reader on its own thread (G2's sse_client.py is the rich one).

    events: dicts {"id", "event", "data", "retry"} in arrival order ("event"
    defaults to "message"; comment lines are recorded as {"comment": text}).
    """

    def __init__(self, url, headers=None, timeout=120):
        self.url = url
        self.status = None
        self.headers = {}
        self.events = []
        self.closed = False
        self.error = None
        self._cv = threading.Condition()
        host, port, path = _split(url)
        self._sock = socket.create_connection((host, port), timeout=10)
        self._sock.settimeout(timeout)
        h = {"Host": "%s:%d" % (host, port), "Accept": "text/event-stream"}
        h.update(headers or {})
        req = "GET %s HTTP/1.1\r\n%s\r\n" % (path, "".join("%s: %s\r\n" % kv for kv in h.items()))
        self._sock.sendall(req.encode())
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _lines(self, f):
        chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        if not chunked:
            for line in f:
                yield line
            return
        buf = b""
        while True:
            size_line = f.readline()
            if not size_line:
                return
            n = int(size_line.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                return
            buf += f.read(n)
            f.readline()
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line + b"\n"

    def _run(self):
        try:
            f = self._sock.makefile("rb")
            status = f.readline().split()
            self.status = int(status[1]) if len(status) > 1 else None
            while True:
                line = f.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                k, _, v = line.decode().partition(":")
                self.headers[k.strip().lower()] = v.strip()
            cur = {}
            for raw in self._lines(f):
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if cur:
                        cur.setdefault("event", "message")
                        with self._cv:
                            self.events.append(cur)
                            self._cv.notify_all()
                        cur = {}
                    continue
                if line.startswith(":"):
                    with self._cv:
                        self.events.append({"comment": line[1:].strip()})
                        self._cv.notify_all()
                    continue
                k, _, v = line.partition(":")
                if v.startswith(" "):
                    v = v[1:]
                if k == "data":
                    cur["data"] = cur["data"] + "\n" + v if "data" in cur else v
                elif k in ("id", "event", "retry"):
                    cur[k] = v
        except Exception as e:  # recorded, checked by the test
            self.error = e
        finally:
            with self._cv:
                self.closed = True
                self._cv.notify_all()

    def items(self):
        with self._cv:
            return [e for e in self.events if e.get("event") == "message" and "data" in e]

    def wait_items(self, n, timeout):
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                got = sum(1 for e in self.events if e.get("event") == "message" and "data" in e)
                if got >= n:
                    return
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    other = [e for e in self.events if e.get("event") != "message"
                             and "comment" not in e][-3:]
                    last = [e.get("id") for e in self.events if e.get("event") == "message"][-3:]
                    raise TestFailure("SSE %s: %d of %d items after %.1fs (closed=%s error=%r, status %s, "
                                      "last item ids %s, last non-item events %s)"
                                      % (self.url, got, n, timeout, self.closed, self.error, self.status,
                                         last, _short(repr(other))))
                self._cv.wait(min(left, 0.5))

    def wait_event(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TestFailure("SSE %s: no %s after %.1fs (closed=%s error=%r, status %s, %d events, "
                                      "last %s)" % (self.url, what, timeout, self.closed, self.error,
                                                    self.status, len(self.events),
                                                    _short(repr(self.events[-3:]))))
                self._cv.wait(min(left, 0.5))

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._t.join(10)


# ---------------------------------------------------------------- misc

def compact_json(text):
    """Removes whitespace outside strings (the writer's stored form)."""
    out = []
    in_str = esc = False
    for ch in text:
        if in_str:
            out.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif ch not in " \t\r\n":
            out.append(ch)
    return "".join(out)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise TestFailure("no VmRSS for pid %d" % pid)


def process_stacks(pid, timeout=60):
    """Every thread's stack of a live process, as text (see Proc.stacks)."""
    gdb = shutil.which("gdb")
    if gdb:
        try:
            p = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                                "-ex", "thread apply all bt"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
            return "\n".join(ln for ln in p.stdout.decode(errors="replace").splitlines()
                             if ln.startswith(("Thread ", "#")))
        except (OSError, subprocess.TimeoutExpired) as e:
            return "gdb failed: %r" % e
    out = []
    for task in sorted(glob.glob("/proc/%d/task/*" % pid)):
        parts = [task.rsplit("/", 1)[1]]
        for f in ("comm", "wchan", "syscall", "stack"):
            try:
                with open(os.path.join(task, f)) as fh:
                    parts.append("%s: %s" % (f, fh.read().strip()))
            except OSError as e:
                parts.append("%s: (%s)" % (f, e.strerror))
        out.append("\n  ".join(parts))
    return "\n".join(out)


def envelope_data_text(envelope):
    """The raw text of the "data" member of an envelope, or None (no parsing of it)."""
    i = envelope.find('"data":')
    if i < 0:
        return None
    i += len('"data":')
    depth = 0
    in_str = esc = False
    for j in range(i, len(envelope)):
        ch = envelope[j]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if depth == 0:
                    return envelope[i:j + 1]
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                return envelope[i:j]
            depth -= 1
            if depth == 0:
                return envelope[i:j + 1]
        elif ch == "," and depth == 0:
            return envelope[i:j]
    return envelope[i:]


def db_events(dsn, topics=None):
    """Stored events in seq order: (seq, topic, about as JSON text, data text or None)."""
    where = ""
    if topics:
        where = "WHERE topic IN (%s)" % ",".join("'%s'" % t.replace("'", "''") for t in topics)
    rows = psql(dsn, "SELECT seq, topic, array_to_json(about)::text, data::text FROM broker_event "
                     "%s ORDER BY seq" % where)
    return [(int(r[0]), r[1], r[2], r[3]) for r in rows]


def check_items_match_rows(items, rows, what):
    """Every row once, in seq order, with its id, topic and data byte for byte."""
    ids = [it.get("id") for it in items]
    want = [str(r[0]) for r in rows]
    if ids != want:
        seen, stored = set(ids), set(want)
        missing = [x for x in want if x not in seen]
        extra = [x for x in ids if x not in stored]
        dups = sorted({x for x in ids if ids.count(x) > 1}, key=lambda x: int(x) if x and x.isdigit() else -1) \
            if len(ids) != len(seen) else []
        i = next((k for k, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        raise TestFailure("%s: %d items for %d rows; missing %d %s, not stored %d %s, repeated %s; "
                          "first difference at index %d: got %s, want %s"
                          % (what, len(ids), len(want), len(missing), missing[:10], len(extra), extra[:10],
                             dups[:10], i, ids[max(0, i - 2):i + 3], want[max(0, i - 2):i + 3]))
    for it, (seq, topic, about, data) in zip(items, rows):
        env = json.loads(it["data"])
        if env.get("type") != "item" or env.get("id") != str(seq) or env.get("topic") != topic:
            raise TestFailure("%s: envelope %r does not match row %d/%s" % (what, it["data"][:200], seq, topic))
        if about is not None and env.get("about", []) != json.loads(about):
            raise TestFailure("%s: seq %d about %r, stored %s" % (what, seq, env.get("about"), about))
        got = envelope_data_text(it["data"])
        if data is None:
            if "data" in env:
                raise TestFailure("%s: change signal %d carries data %r" % (what, seq, got))
        elif got != data:
            raise TestFailure("%s: seq %d data %r, stored %r" % (what, seq, (got or "")[:200], data[:200]))


def metric(url, name, labels=None):
    """The value of one sample of GET url/metrics (None when absent)."""
    st, _, body = http_get(url.rstrip("/") + "/metrics")
    if st != 200:
        return None
    want = None
    if labels:
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in body.decode(errors="replace").splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = ",".join(sorted(x.strip() for x in (m.group(3) or "").split(",") if x.strip()))
        if want is None or got == want:
            return float(m.group(4))
    return None
