# ctest-labels: nosan
"""Slow DNS never stalls an event loop: the writer and the edge resolve the
database's host name off their loops and connect by address.

The resolver hook tests/tools/slowdns.so (LD_PRELOAD, so plain builds only:
label nosan) makes getaddrinfo of *.slow.test wait SLOW_MS and answer
127.0.0.1.  Both programs get host=db.slow.test in their DSN; their database
sessions are terminated again and again, so every round reconnects through a
slow resolution.  /healthz of both, polled all along, must keep answering
quickly, and a producer's request of each round must be answered.

The same hook answers *.dual.test with ::1 first and 127.0.0.1 second, as a
dual-stack name does; the test server listens on IPv4 only, so the first
address refuses and both daemons must connect through the second
(dual_stack_name_first_address_refuses)."""
import os
import re
import signal
import threading
import time

import harness as h

t = h.Tests()

SLOW_MS = 3000
ROUNDS = 3
BOUND_S = SLOW_MS / 2000.0  # half of SLOW_MS: a loop that resolved itself would stall for all of it


class Prober(threading.Thread):
    """GET url every 50 ms; from the first 200 on (the program listens), keeps the longest latency and
    every failure."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.worst, self.polls, self.bad = url, 0.0, 0, []
        self.halt, self.armed = threading.Event(), threading.Event()

    def run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                status = h.http_get(self.url, timeout=10)[0]
            except Exception as e:  # a refused or timed-out probe is a finding, not a crash
                status = repr(e)
            dt = time.monotonic() - t0
            if status == 200:
                self.armed.set()
            if not self.armed.is_set():
                time.sleep(0.05)
                continue
            self.worst = max(self.worst, dt)
            self.polls += 1
            if status != 200:
                self.bad.append(status)
            time.sleep(0.05)


def slow_dsn(dsn):
    out, n = re.subn(r"host=[^ ]+", "host=db.slow.test", dsn)
    h.check(n == 1, "cannot put a host name into the DSN %r" % dsn)
    return out


def count(proc, text):
    with open(proc.stderr_path, errors="replace") as f:
        return f.read().count(text)


@t.case
def reconnects_through_slow_dns_keep_loops_running():
    so = os.path.join(h.TOOLS_DIR, "slowdns.so")
    h.check(os.path.exists(so), "the resolver hook %s is not built (plain builds only)" % so)
    with h.Env() as env:
        dsn = slow_dsn(env.dsn)
        xe = {"LD_PRELOAD": so, "STUDIO_SLOWDNS_MS": SLOW_MS}
        w = env.start_writer(pg_dsn=dsn, extra_env=xe, flush_interval_ms=200)
        e = env.start_edge([w], pg_dsn=dsn, extra_env=xe, flush_interval_ms=200)
        # probed from the start: the edge's first connect resolves slowly too
        probes = [Prober(w.http_url + "/healthz"), Prober(e.url + "/healthz")]
        for p in probes:
            p.start()
        try:
            w.wait_ready(60)
            e.wait_ready(60)
            for rnd in range(ROUNDS):
                w_up = count(w, "flush: connected to the database")
                e_up = count(e, "pgpool: connection 0: connected to the database")
                t0 = time.monotonic()
                n = int(h.psql_one(env.dsn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                            "WHERE datname = current_database() "
                                            "AND application_name IN ('broker-writer', 'edge-gateway')"))
                h.check(n >= 2, "round %d: sessions terminated: %d" % (rnd, n))
                r = h.request(w, {"topic": "dns", "data": str(rnd)}, timeout_ms=60000)
                h.check(r.get("ok") is True, "round %d: reply to a producer: %r" % (rnd, r))
                h.wait_until(lambda: count(w, "flush: connected to the database") > w_up, 30,
                             "round %d: the writer reconnected" % rnd)
                h.wait_until(lambda: count(e, "pgpool: connection 0: connected to the database") > e_up, 30,
                             "round %d: the edge's pool reconnected" % rnd)
                took = time.monotonic() - t0
                h.check(took >= SLOW_MS / 1000.0 * 0.9,
                        "round %d: the reconnect took %.2f s, so it did not go through the slow resolver"
                        % (rnd, took))
            h.wait_until(lambda: h.http_get(e.url + "/readyz")[0] == 200, 30, "the edge ready again")
        except h.TestFailure as err:
            raise h.TestFailure("longest /healthz so far: writer %.2f s, edge %.2f s; %s"
                                % (probes[0].worst, probes[1].worst, err))
        finally:
            for p in probes:
                p.halt.set()
            for p in probes:
                p.join(30)
        h.log("FIGURE slow_dns resolve_ms=%d rounds=%d writer_healthz_max_ms=%.0f edge_healthz_max_ms=%.0f polls=%d,%d"
              % (SLOW_MS, ROUNDS, probes[0].worst * 1000, probes[1].worst * 1000, probes[0].polls, probes[1].polls))
        for name, p in zip(("writer", "edge"), probes):
            h.check(not p.bad, "%s /healthz answers other than 200: %r" % (name, p.bad[:5]))
            h.check(p.worst < BOUND_S, "%s /healthz took %.2f s at worst while the database name resolved in %.1f s"
                    % (name, p.worst, SLOW_MS / 1000.0))
        rows = h.db_events(env.dsn, ["dns"])
        h.check_eq(len(rows), ROUNDS, "events stored")
        h.check_eq(w.stop(), 0, "writer exit status")
        h.check_eq(e.stop(), 0, "edge exit status")


@t.case
def dual_stack_name_first_address_refuses():
    so = os.path.join(h.TOOLS_DIR, "slowdns.so")
    h.check(os.path.exists(so), "the resolver hook %s is not built (plain builds only)" % so)
    with h.Env() as env:
        out, n = re.subn(r"host=[^ ]+", "host=db.dual.test", env.dsn)
        h.check(n == 1, "cannot put a host name into the DSN %r" % env.dsn)
        xe = {"LD_PRELOAD": so}
        w = env.start_writer(pg_dsn=out, extra_env=xe, flush_interval_ms=200).wait_ready(60)
        e = env.start_edge([w], pg_dsn=out, extra_env=xe, flush_interval_ms=200)

        def ready(url):
            try:
                return h.http_get(url, timeout=5)[0] == 200
            except OSError:
                return False
        h.wait_until(lambda: ready(w.http_url + "/readyz"), 60, "writer /readyz 200 through ::1 then 127.0.0.1",
                     detail=w.logs)
        h.wait_until(lambda: ready(e.url + "/readyz"), 60, "edge /readyz 200 through ::1 then 127.0.0.1",
                     detail=e.logs)
        r = h.request(w, {"topic": "dual", "data": "1"}, timeout_ms=60000)
        h.check(r.get("ok") is True, "a producer's request through the dual-stack name: %r" % (r,))
        h.check_eq(w.stop(), 0, "writer exit status")
        h.check_eq(e.stop(), 0, "edge exit status")


@t.case
def sigterm_does_not_wait_for_a_slow_writer_lookup():
    """Issue 21, item 7: the edge resolves writer names too (sub.c); its shutdown joined the resolver
    thread, so a SIGTERM during a slow lookup waited for getaddrinfo until the 5 s exit watchdog.
    A writer name that resolves in 30 s, SIGTERM once the edge serves: the exit is prompt and clean."""
    so = os.path.join(h.TOOLS_DIR, "slowdns.so")
    h.check(os.path.exists(so), "the resolver hook %s is not built (plain builds only)" % so)
    watchdog_s, bound_s = 5.0, 2.5
    with h.Env() as env:
        xe = {"LD_PRELOAD": so, "STUDIO_SLOWDNS_MS": 30000}
        e = env.start_edge(["tcp://writer.slow.test:%d" % h.free_port()], extra_env=xe, drain_grace_s=1)
        # the lookup starts before the loop runs, so once /healthz answers it is out (for 30 s)
        def serving():
            try:
                return h.http_get(e.url + "/healthz", timeout=2)[0] == 200
            except OSError:
                return False
        h.wait_until(serving, 30, "the edge serving")
        t0 = time.monotonic()
        e.signal(signal.SIGTERM)
        code = e.wait_exit(60)
        took = time.monotonic() - t0
        h.log("FIGURE slow_dns sigterm_exit_s=%.2f code=%s (writer lookup 30 s, exit watchdog %.0f s)"
              % (took, code, watchdog_s))
        h.check_eq(code, 0, "edge exit status")
        h.check(took < bound_s, "the edge took %.2f s to exit after SIGTERM, waiting on a writer name's lookup "
                "(want well under the %.0f s watchdog: < %.1f s)" % (took, watchdog_s, bound_s))


t.main()
