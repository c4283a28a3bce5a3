"""Last-Event-ID resume on the edge-gateway (docs/api.md "Resume",
ADR-WEB-ADV-001, architecture.md "Resume").

Real writer(s), edges and PostgreSQL.  Every check compares what a client
received with the rows of broker_event: every event exactly once, in order,
across the replay/live seam and across moves between two edges.
"""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
rc = 1


def evs(topic, n, pad=0, start=0):
    return [{"topic": topic, "about": ["r%d" % (i % 3)],
             "data": '{"i":%d,"p":"%s"}' % (start + i, "x" * pad)} for i in range(n)]


class Publisher(threading.Thread):
    """Publishes batches on topics until stopped; records every seq."""

    def __init__(self, writer, topics, batch=100, pause=0.1, total=None):
        super().__init__(daemon=True)
        self.writer, self.topics, self.batch, self.pause, self.total = writer, topics, batch, pause, total
        self.stop_ev = threading.Event()
        self.seqs = []
        self.error = None

    def run(self):
        k = 0
        try:
            while not self.stop_ev.is_set() and (self.total is None or len(self.seqs) < self.total):
                batch = [{"topic": self.topics[(k + i) % len(self.topics)], "about": ["a"],
                          "data": '{"k":%d}' % (k + i)} for i in range(self.batch)]
                k += self.batch
                self.seqs += sc.publish_batch(self.writer, batch)
                time.sleep(self.pause)
        except Exception as e:   # reported by the test
            self.error = e

    def finish(self):
        self.stop_ev.set()
        self.join(120)
        check(self.error is None, "publisher failed: %r" % self.error)
        return self.seqs


def path(topics, **q):
    return "/v1/stream?" + "&".join(["topic=%s" % x for x in topics] + ["%s=%s" % kv for kv in q.items()])


with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=200)
    writer.wait_ready()
    edge = env.start_edge([writer], replay_cap=100000, heartbeat_s=2)
    edge2 = env.start_edge([writer], replay_cap=100000, heartbeat_s=2)
    edge.wait_ready()
    edge2.wait_ready()
    port, port2 = sc.edge_port(edge), sc.edge_port(edge2)

    @t.case
    def replay_50000_with_live_traffic_across_the_seam():
        seqs = sc.publish_many(writer, evs("r.big", 50000, pad=40), batch=10000)
        L = seqs[0] - 1
        pub = Publisher(writer, ["r.big", "r.other"], batch=200, pause=0.05)
        c = sc.StreamClient(port, path(["r.big"]), headers={"Last-Event-ID": str(L)})
        pub.start()
        t0 = time.monotonic()
        sc.run_clients([c], 60, until=lambda: c.n_items >= 50000)
        t_replay = time.monotonic() - t0
        pub.finish()
        target = sc.table_rows(env.dsn, ["r.big"], after=L)[-1][0]
        sc.run_clients([c], 30, until=lambda: (c.last_id or 0) >= target)
        c.close()
        rows = sc.table_rows(env.dsn, ["r.big"], after=L)
        got = c.ids()
        log("FIGURE replay of 50,000 events + %d live on the topic: %d items, first 50,000 in %.1f s"
            % (len(rows) - 50000, len(got), t_replay))
        check_eq(sc.check_envelopes(c), [], "stream well formed")
        check_eq(c.of_type("resync"), [], "no resync")
        # the client stopped once it held the last live seq of its topic
        want = [r[0] for r in rows if r[0] <= got[-1]]
        check_eq(len(got), len(want), "item count equals the rows")
        check(got == want, "every event exactly once, in order (first difference at %s)"
              % next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None))
        check_eq(sc.item_errors(c.frames, rows[:len(got)]), [], "items equal the rows")
        check(got[-1] == max(r[0] for r in rows), "the stream reached the newest event of its topic")

    @t.case
    def clients_move_between_two_edges():
        topics_of = [["m.a"], ["m.b"], ["m.a", "m.b"], ["m.c"]]
        start = sc.db_head(env.dsn)
        pub = Publisher(writer, ["m.a", "m.b", "m.c", "m.d"], batch=100, pause=0.05)
        results = [None] * len(topics_of)
        moves = [0] * len(topics_of)
        done = threading.Event()

        def client(i):
            rnd = random.Random(i)
            got = []
            last = start
            errs = []
            k = 0
            while True:
                final = done.is_set()
                q = {"until": "head"} if final else {}
                c = sc.StreamClient((port, port2)[k % 2], path(topics_of[i], **q),
                                    headers={"Last-Event-ID": str(last)})
                sc.run_clients([c], 30 if final else rnd.uniform(0.2, 0.8))
                c.close()
                k += 1
                if c.status != 200:
                    errs.append("status %r" % c.status)
                    break
                errs += sc.check_envelopes(c)
                if c.of_type("resync"):
                    errs.append("resync %r" % c.of_type("resync")[0]["env"])
                ids = c.ids()
                got += ids
                if ids:
                    last = ids[-1]
                if final:
                    if c.outcome != "complete":
                        errs.append("final session outcome %r" % c.outcome)
                    break
            moves[i] = k
            results[i] = (got, errs)

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(topics_of))]
        pub.start()
        for th in threads:
            th.start()
        time.sleep(8)
        pub.finish()
        done.set()
        for th in threads:
            th.join(90)
        log("FIGURE %d events published while clients moved; sessions per client %s"
            % (len(pub.seqs), moves))
        for i, tp in enumerate(topics_of):
            check(results[i] is not None, "client %d finished" % i)
            got, errs = results[i]
            check_eq(errs[:5], [], "client %d sessions well formed" % i)
            want = [r[0] for r in sc.table_rows(env.dsn, tp, after=start)]
            check(got == want, "client %d on %s: union of sessions equals the rows (%d got, %d rows, "
                  "duplicates %d)" % (i, tp, len(got), len(want), len(got) - len(set(got))))

    edge_cap = env.start_edge([writer], replay_cap=100)
    edge_cap.wait_ready()
    pcap = sc.edge_port(edge_cap)

    @t.case
    def replay_cap_boundary_and_resync():
        a = sc.publish_batch(writer, evs("rc.a", 101))
        d = sc.db_head(env.dsn)
        c = sc.fetch(pcap, path(["rc.a"], until="head"), headers={"Last-Event-ID": str(a[0])})
        check_eq((c.outcome, len(c.items()), c.of_type("resync")), ("complete", 100, []),
                 "exactly --replay-cap events are replayed")
        c = sc.StreamClient(pcap, path(["rc.a"]), headers={"Last-Event-ID": str(a[0] - 1)})
        sc.run_clients([c], 1.5)
        more = sc.publish_batch(writer, evs("rc.a", 3))
        sc.run_clients([c], 5, until=lambda: c.n_items >= 3)
        c.close()
        check_eq(sc.check_envelopes(c), [], "well formed")
        check_eq([f["env"] for f in c.of_type("resync")], [{"type": "resync", "id": str(d), "reason": "replay_cap"}],
                 "cap + 1 events: exactly one resync replay_cap at the database head")
        check_eq(c.frames[0]["type"], "resync", "the resync comes first (never a silent jump)")
        check_eq(c.ids(), more, "then live, nothing replayed")

    @t.case
    def future_and_malformed_ids_are_400():
        d = sc.db_head(env.dsn)
        for v in (str(d + 1), str(d + 10**6), "x", "1.5", "", "3 4", "0x10", "18446744073709551616"):
            c = sc.fetch(port, path(["rc.a"], until="head"), headers={"Last-Event-ID": v})
            if v == "":
                # an empty Last-Event-ID is "no id" for EventSource; either a plain
                # stream or a 400 would be arguable: only require no 5xx and no hang
                check(c.status in (200, 400), "empty Last-Event-ID: %r" % c.status)
                continue
            check_eq(sc.check_problem(c, 400), [], "Last-Event-ID %r" % v)
        c = sc.fetch(port, path(["rc.a"], until="head"), headers={"Last-Event-ID": str(d)})
        check_eq((c.status, c.outcome), (200, "complete"), "Last-Event-ID = newest seq is fine")

    @t.case
    def hold_buffer_overflow_resyncs_once():
        big = sc.publish_many(writer, evs("h.a", 8000, pad=1500), batch=1000)
        L = big[0] - 1
        m0 = sc.get_metrics(port)
        c = sc.StreamClient(port, path(["h.a"]), headers={"Last-Event-ID": str(L)},
                            rcvbuf=16384, read_rate=300000)
        sc.run_until_open([c], also=lambda: len(c.items()) > 0)
        check(c.status == 200 and 0 < len(c.items()) < 8000, "replay in progress (%d items)" % len(c.items()))
        live = sc.publish_batch(writer, evs("h.a", 3000, start=10**6))
        sc.run_clients([c], 3.0)
        c.read_rate = None
        sc.run_clients([c], 30, until=lambda: (c.last_id or 0) >= live[-1])
        after = sc.publish_batch(writer, evs("h.a", 5, start=2 * 10**6))
        sc.run_clients([c], 10, until=lambda: (c.last_id or 0) >= after[-1])
        c.close()
        m1 = sc.get_metrics(port)
        rs = c.of_type("resync")
        log("FIGURE hold overflow: %d items, resyncs %s" % (len(c.items()), [f["env"] for f in rs]))
        check_eq(sc.check_envelopes(c), [], "well formed")
        check_eq(len(rs), 1, "exactly one resync")
        check_eq(rs[0]["env"].get("reason"), "overflow", "resync reason")
        dropped = (sc.metric(m1, "studio_sse_dropped_total", reason="replay") or 0) - \
            (sc.metric(m0, "studio_sse_dropped_total", reason="replay") or 0)
        log("FIGURE studio_sse_dropped_total{reason=replay} grew by %d" % dropped)
        check(dropped > 0, "held frames dropped are counted reason=replay")
        ids = c.ids()
        check_eq(ids[:8000], big, "the replay itself is complete and in order")
        check(ids[-5:] == after, "the stream continues live after the resync")

    edge_nodb = env.start_edge([writer], pg_dsn="host=127.0.0.1 port=%d dbname=x user=x connect_timeout=2"
                               % harness.free_port())

    @t.case
    def database_unreachable_is_refused_before_the_first_byte():
        # An edge whose DSN points to a port nobody listens on: a real
        # connection failure, with no need to stop the shared cluster.
        harness.wait_until(lambda: harness.http_get(edge_nodb.url + "/readyz")[0] == 503, 10,
                           "/readyz 503 without PostgreSQL")
        # NDJSON reads the status; an EventSource would give up on it, so SSE hears reconnect.
        c = sc.fetch(sc.edge_port(edge_nodb), path(["rc.a"], format="ndjson"), headers={"Last-Event-ID": "1"},
                     timeout=20)
        check_eq(sc.check_refusal(c, "ndjson", "not_ready", 503), [], "NDJSON resume with no database -> 503")
        c = sc.fetch(sc.edge_port(edge_nodb), path(["rc.a"]), headers={"Last-Event-ID": "1"}, timeout=20)
        check_eq(sc.check_refusal(c, "sse", "not_ready", 503), [], "SSE resume with no database -> reconnect")

    @t.case
    def expired_cursor_gives_resync_cursor_expired():
        # Last case: a second writer replica with a 2 s retention trims the table.
        old = sc.publish_batch(writer, evs("x.a", 5))
        w2 = env.start_writer(flush_interval_ms=200, retention="2s")
        w2.wait_ready()
        sc.publish_batch(writer, evs("x.a", 2))
        L = old[1]

        def horizon():
            v = harness.psql_one(env.dsn, "SELECT horizon FROM broker_meta")
            return int(v or 0) > L
        harness.wait_until(horizon, 30, "retention horizon above %d" % L, interval=0.2)
        hz = int(harness.psql_one(env.dsn, "SELECT horizon FROM broker_meta"))
        d = sc.db_head(env.dsn)
        c = sc.StreamClient(port, path(["x.a"]), headers={"Last-Event-ID": str(L)})
        sc.run_clients([c], 2.0)
        more = sc.publish_batch(writer, evs("x.a", 2))
        sc.run_clients([c], 5, until=lambda: c.n_items >= 2)
        c.close()
        log("FIGURE horizon %d, cursor %d, head %d" % (hz, L, d))
        check_eq(sc.check_envelopes(c), [], "well formed")
        check_eq(c.frames[0]["env"], {"type": "resync", "id": str(d), "reason": "cursor_expired"},
                 "an expired cursor gives one resync cursor_expired at the head")
        check_eq(c.ids(), more, "then live")
        check_eq(len(c.of_type("resync")), 1, "exactly one resync")

    try:
        t.main()
    except SystemExit as e:
        rc = e.code
sys.exit(rc)
