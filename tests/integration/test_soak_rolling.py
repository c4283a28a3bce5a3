# ctest-labels: measure
# ctest-timeout: 600
"""Soak: ten minutes of operation, compressed: rolling restarts of the
edges, two writers, 1,000 clients of which 50 read slowly, a PostgreSQL
restart in the middle.

What is compressed, and how.  Ten minutes with an edge restarted every 20 s
is 30 restarts across 3 edges, and 25 s of drain grace against 20 s between
restarts.  The soak keeps the counts and the order of events and shrinks the
clock about tenfold: 30 restarts, one after the other (edge 1, 2, 3, 1,
...), each started once the previous edge is back (/readyz 200) and the
producers had RESTART_EVERY_EVENTS more events acknowledged (about 1 s of
traffic), so one every ~2 s, about 60 s in all (the whole test takes about
75-85 s on 2 cores); drain grace 1 s instead of 25 (whole seconds: the
flag's unit); clients honour reconnect hints up to 2 s.  PostgreSQL (a server of the test's own,
harness.PgServer) is stopped (pg_ctl -m fast) just before the 16th edge
drains, so that its clients resume elsewhere while the database is away,
and started again once a resume was refused for a retry.  The
restarts follow counts of acknowledgements, not sleeps, so the traffic
between two restarts is the same on a slow machine.

The parts: two broker-writers (one lock key, 200 ms flush), three
edge-gateways on three fixed ports (a restarted edge comes back on its port),
two producers (chaos.Producer: keyed batches round robin over both writers,
resent on no answer / busy / unavailable), 1,000 clients (chaos.LbClient,
driven by one selector thread, chaos.Fleet) behind a load balancer that
takes an edge out of its rotation before it is stopped and back once it is
ready: every time a stream ends (drain `reconnect`, a refusal, a cut) the
client connects to a random edge of the rotation with Last-Event-ID, as a
browser's EventSource behind a balancer does.  950 read at full speed (SSE,
and 50 each NDJSON and json-seq, which get 503/429 + Retry-After where SSE
gets 200 + `reconnect`) on one or two of ten topics; 50 read SSE on all ten
at 2 KiB/s with a 4 KiB receive buffer until the producers stop, then at full
speed.

The verdict (the item: "every client holding every committed event once, in
order, studio_ids_refused_total and studio_seam_gaps_total at 0, and the
edge's RSS within its written bound"):
- chaos.verify: every acknowledged event stored once under the seq of its
  acknowledgement, nothing stored twice or unasked;
- chaos.verify_fleet: each of the 950 holds every committed event of its
  topics exactly once, in order, data byte for byte, with no resync; each
  slow client holds committed events only, in order, no duplicate, and every
  event it lacks lies under an explicit resync (ADR-0197: allowed to slow
  readers only), never a silent gap; no client saw a repeated id or an
  unexpected status;
- studio_ids_refused_total and studio_seam_gaps_total are 0 on every edge
  instance (each of the 33 read by chaos.EdgeWatch every 0.2 s, and a
  draining one every 20 ms until no stream is left, then its counters are
  final, or until it stops answering);
- every instance's peak VmRSS is within docs/edge.md "Memory bound" with the
  soak's numbers (W = 2 writers, P = 4, S = R = the instance's peak of
  studio_streams_open);
- no client got a `failure` envelope: every end of a stream here (a drain,
  PostgreSQL going away) is one to retry, a `reconnect`
  (chaos.check_no_failure_envelopes);
- every program exits 0 on SIGTERM at the end (each restarted edge did too,
  within the grace + 20 s).
Everything is printed as FIGURE lines first.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import chaos  # noqa: E402

t = harness.Tests()

N_CLIENTS = int(os.environ.get("SOAK_CLIENTS", "1000"))
N_SLOW = int(os.environ.get("SOAK_SLOW", "50"))
N_EDGES = 3
RESTARTS = int(os.environ.get("SOAK_RESTARTS", "30"))
PG_RESTART_BEFORE = RESTARTS // 2
RESTART_EVERY_EVENTS = int(os.environ.get("SOAK_RESTART_EVERY_EVENTS", "40"))
TOPICS = ["soak.%d" % i for i in range(10)]
SLOW_RATE = 2048           # bytes per second
SLOW_RCVBUF = 4096
DRAIN_GRACE_S = 1
FLUSH_MS = 200
WRITERS = 2
THREADS = int(os.environ.get("STUDIO_THREADS") or 1)   # the edge's --threads fallback
DB_CONNS = 4 if THREADS == 1 else 2 + 2 * THREADS      # docs/edge.md "Memory bound": P


def make_clients():
    clients = [chaos.LbClient("slow%d" % i, TOPICS, read_rate=SLOW_RATE, rcvbuf=SLOW_RCVBUF)
               for i in range(N_SLOW)]
    n_fast = N_CLIENTS - N_SLOW
    for i in range(n_fast):
        fmt = "ndjson" if i % 19 == 0 else "json-seq" if i % 19 == 1 else "sse"
        topics = [TOPICS[i % len(TOPICS)]]
        if i % 5 == 0:
            topics.append(TOPICS[(i + 3) % len(TOPICS)])
        clients.append(chaos.LbClient("c%d" % i, topics, fmt=fmt))
    return clients


acks = chaos.acks


@t.case
def rolling_restarts_two_writers_thousand_clients():
    # Addresses that are closed and bound again come from below the ephemeral
    # range: the fleet's thousands of connections could take one meanwhile.
    pg = harness.PgServer("soak-pg", port=harness.stable_port()).start()
    producers, fleet, watch = [], None, None
    try:
        with harness.Env(admin_dsn=pg.dsn) as env:
            w1 = env.start_writer(flush_interval_ms=FLUSH_MS, lock_key=4242)
            w2 = env.start_writer(flush_interval_ms=FLUSH_MS, lock_key=4242)
            w1.wait_ready()
            w2.wait_ready()
            edge_flags = dict(flush_interval_ms=FLUSH_MS, drain_grace_s=DRAIN_GRACE_S, control=None)
            edges = [env.start_edge([w1, w2], name="edge%d.0" % k, listen="127.0.0.1:%d" % harness.stable_port(),
                                    **edge_flags) for k in range(N_EDGES)]
            for e in edges:
                e.wait_ready()
            ports = [int(e.listen.rsplit(":", 1)[1]) for e in edges]
            idle_kb = max(e.rss_kb() for e in edges)
            log("FIGURE soak: idle edge RSS %.1f MiB" % (idle_kb / 1024.0))
            watch = chaos.EdgeWatch()
            for e in edges:
                watch.watch(e)
            watch.start()

            clients = make_clients()
            fleet = chaos.Fleet(clients, ports)
            fleet.start()

            def streams_open():
                return [int(harness.metric(e.url, "studio_streams_open") or 0) for e in edges]
            harness.wait_until(lambda: sum(streams_open()) >= N_CLIENTS, 90,
                               "%d streams open on the edges" % N_CLIENTS, interval=0.2,
                               detail=lambda: "streams open per edge %s; fleet sessions %d, loop error %s"
                               % (streams_open(), fleet.sessions_started, fleet.error))
            log("FIGURE soak: %d streams open on %d edges %s; edges' RSS %s KiB"
                % (N_CLIENTS, N_EDGES, streams_open(), [e.rss_kb() for e in edges]))

            producers = [chaos.Producer("p%d" % i, [w1, w2][i:] + [w1, w2][:i], TOPICS, batch=5)
                         for i in range(2)]
            t_start = time.monotonic()
            for p in producers:
                p.start()

            def progress(n, what):
                chaos.wait_acked(producers, n, what, logs=(w1, w2, pg))

            progress(RESTART_EVERY_EVENTS, "before the first restart")
            drains = []
            generation = [0] * N_EDGES
            pg_down = None

            def db_refusals():
                # An SSE resume the database cannot check: 200 + reconnect
                # `unavailable`; NDJSON / json-seq: 503.  Either counts.
                return sum(c.reasons.get("unavailable", 0) + c.outcomes.get("refused 503", 0) for c in clients)
            for i in range(RESTARTS):
                k = i % N_EDGES
                old = edges[k]
                pg_restart = i == PG_RESTART_BEFORE
                if pg_restart:
                    # PostgreSQL goes down just before this edge drains, so that
                    # its clients resume elsewhere while the database is away.
                    acked_before, refusals_before = acks(producers), db_refusals()
                    t_down = time.monotonic()
                    pg.stop("fast")
                # The balancer's health check sees the drain: out of the rotation first.
                fleet.set_rotation([p for j, p in enumerate(ports) if j != k])
                t0 = time.monotonic()
                old.signal(signal.SIGTERM)
                # Its counters' last values: read once no stream is left (then
                # nothing can move them), unless it exits first.
                harness.wait_until(lambda: not old.alive() or watch.sample(old, draining=True) == 0,
                                   DRAIN_GRACE_S + 20, "%s drained (restart %d)" % (old.name, i + 1),
                                   interval=0.02, detail=lambda: old.logs(20))
                # docs/edge.md "Drain": exit as soon as no stream is left, at the
                # latest grace + 1 s; 20 s more is room for a loaded machine.
                rc = old.wait_exit_or_stacks(DRAIN_GRACE_S + 20, "restart %d" % (i + 1))
                drains.append(time.monotonic() - t0)
                check_eq(rc, 0, "%s exits 0 after its drain (restart %d)\n%s" % (old.name, i + 1, old.logs(30)))
                if pg_restart:
                    harness.wait_until(lambda: db_refusals() > refusals_before, 30,
                                       "a resume refused for a retry while PostgreSQL is down", interval=0.1,
                                       detail=lambda: "refusals %d" % db_refusals())
                    pg.start()
                    pg_down = time.monotonic() - t_down
                    log("FIGURE soak: PostgreSQL stopped for %.2f s during edge restart %d (%d events acknowledged "
                        "before; %d resumes refused for a retry meanwhile)"
                        % (pg_down, i + 1, acked_before, db_refusals() - refusals_before))
                generation[k] += 1
                new = env.start_edge([w1, w2], name="edge%d.%d" % (k, generation[k]), listen=old.listen,
                                     **edge_flags)
                watch.watch(new)
                new.wait_ready(60)
                edges[k] = new
                fleet.set_rotation(ports)
                progress(RESTART_EVERY_EVENTS, "after edge restart %d" % (i + 1))
            for p in producers:
                p.finish(120)
            t_end = time.monotonic()
            log("FIGURE soak: %d edge restarts in %.1f s (one every %.2f s), drain to exit %.2f s mean, "
                "%.2f s longest; PostgreSQL down %.2f s" % (
                    RESTARTS, t_end - t_start, (t_end - t_start) / max(1, RESTARTS),
                    sum(drains) / max(1, len(drains)), max(drains or [0]), pg_down or 0))

            # The end: the slow readers read at full speed; everyone catches up.
            fleet.fast()
            t_catch = time.monotonic()
            harness.wait_until(lambda: not chaos.fleet_behind(env.dsn, clients), 120,
                               "every client at the newest event of its topics", interval=0.5,
                               detail=lambda: "behind: %s" % ["%s last %d, %d sessions, outcomes %s, errors %s"
                                                              % (c.cname, c.last, c.sessions, c.outcomes,
                                                                 c.errors[:2])
                                                              for c in chaos.fleet_behind(env.dsn, clients)[:5]])
            log("FIGURE soak: every client caught up %.1f s after the producers stopped"
                % (time.monotonic() - t_catch))
            fleet.finish()
            watch.finish()
            for e in edges:
                watch.sample(e)

            # Figures first, then the verdicts.
            chaos.verify(env, producers, [], t_start, t_end, "soak")
            chaos.verify_fleet(env.dsn, clients, "soak")
            refused = {n: s["counters"]["studio_ids_refused_total"] for n, s in watch.stats.items()}
            gaps = {n: s["counters"]["studio_seam_gaps_total"] for n, s in watch.stats.items()}
            unread = [n for n, s in watch.stats.items() if s["metric_samples"] == 0]
            log("FIGURE soak: studio_ids_refused_total %d, studio_seam_gaps_total %d (summed over %d edge "
                "instances; each drained one read every 20 ms until it stopped answering, %d of the %d with no "
                "stream left)" % (sum(refused.values()), sum(gaps.values()), len(watch.stats),
                                         sum(1 for s in watch.stats.values() if s["final"]), RESTARTS))
            over = []
            for n, s in sorted(watch.stats.items(), key=lambda kv: [int(x) for x in kv[0][4:].split(".")]):
                bound = chaos.edge_memory_bound_mib(WRITERS, s["streams"], s["streams"], DB_CONNS)
                log("FIGURE soak: %s peak RSS %.1f MiB with at most %d streams open (%.1f KiB a stream above "
                    "idle); written bound (W=%d, P=%d, S=R=%d) %.0f MiB; %d samples"
                    % (n, s["rss_kb"] / 1024.0, s["streams"], (s["rss_kb"] - idle_kb) / max(1, s["streams"]),
                       WRITERS, DB_CONNS, s["streams"], bound, s["samples"]))
                if s["rss_kb"] / 1024.0 > bound:
                    over.append((n, s["rss_kb"], bound))
            peak = max(watch.stats.values(), key=lambda s: s["rss_kb"])
            log("FIGURE soak: largest edge RSS %.1f MiB (%d streams at most on that instance)"
                % (peak["rss_kb"] / 1024.0, peak["streams"]))
            seam_logs = [p.name for p in env.procs if p.name.startswith("edge") and "seam gap" in p.logs(100000)]
            check_eq(unread, [], "every edge instance's /metrics was read at least once")
            check_eq({n: v for n, v in refused.items() if v}, {}, "studio_ids_refused_total is 0 on every edge")
            check_eq({n: v for n, v in gaps.items() if v}, {}, "studio_seam_gaps_total is 0 on every edge")
            check_eq(seam_logs, [], "no edge logged a seam gap")
            check_eq(over, [], "every edge's peak RSS (KiB) within the written bound (MiB)")
            chaos.check_no_failure_envelopes(clients)
            chaos.check_clean_exit(edges + [w1, w2])
    except BaseException:
        log(pg.logs(60))
        raise
    finally:
        for p in producers:
            p.stop_ev.set()
        if fleet is not None:
            fleet.stop_ev.set()
        if watch is not None:
            watch.stop_ev.set()
        pg.close()


t.main()
