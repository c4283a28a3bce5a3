"""Slow readers together cannot pause the edge's intake for ever (issue 11,
item 10; docs/edge.md "Flow control").

Each stream may hold the intake 1 s in every 60 s while its socket takes
bytes; SLOW clients reading a trickle each (staggered, and reconnecting when
the edge ends their stream, as an EventSource would) used to take turns and
keep it paused: every other client's latency grew with it and nng's receive
queue overflowed into gap fills.  Now one budget bounds the pauses of all
streams together (flow.h: FLOW_BURST_MS, then 1/FLOW_SHARE of the time).

Under a steady publish rate, next to one normal client:
  - studio_edge_intake_paused_ms_total stays within the budget's arithmetic
    (500 ms + elapsed / 10, plus a decision interval per pause);
  - studio_gap_fills_total stays near 0 (nng's queue never overflowed);
  - the normal client gets every event in order, no resync; its latency is
    printed (FIGURE), not asserted.
On the old code this fails: the pause counter does not exist there, and the
FIGURE line shows what the per-stream rule alone allowed (measured: the
normal client's latency p50 ~1.2 s, p99 ~3.2 s, and a gap fill, against
~20 ms / ~140 ms and none with the budget).  Runs with --threads 1 and
(it_threads_flow_budget) --threads 2.
"""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
SLOW = int(os.environ.get("FLOW_SLOW", "60"))
RUN_S = float(os.environ.get("FLOW_RUN_S", "20"))
BATCH = int(os.environ.get("FLOW_BATCH", "40"))      # events per ingest request
PAD = int(os.environ.get("FLOW_PAD", "300"))          # bytes of padding per event
READ_BYTES = int(os.environ.get("FLOW_READ_BYTES", "512"))
READ_EVERY = float(os.environ.get("FLOW_READ_EVERY", "0.04"))
RENEW_S = float(os.environ.get("FLOW_RENEW_S", "6"))   # a slow client opens a fresh stream this often
TOPIC = "flow.t"
BURST_MS, SHARE = 500, 10        # flow.h
GAP_FILLS_MAX = 2


class SlowReaders(threading.Thread):
    """n raw-socket SSE clients, each reading READ_BYTES every READ_EVERY s
    (small receive buffers: the socket takes bytes at that pace).  Client i
    opens a fresh stream every RENEW_S s, at offset i x RENEW_S / n, so a new
    slow stream (with a fresh per-stream allowance) arrives every RENEW_S / n
    s; a client whose stream ends reconnects at once."""

    def __init__(self, port, n):
        super().__init__(daemon=True)
        self.port, self.n = port, n
        self.stop = threading.Event()
        self.connects = 0
        self.bytes = 0
        self.error = None

    def _connect(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.connect(("127.0.0.1", self.port))
        s.sendall(("GET /v1/stream?topic=%s HTTP/1.1\r\nHost: x\r\n\r\n" % TOPIC).encode())
        s.setblocking(False)
        self.connects += 1
        return s

    def run(self):
        try:
            t0 = time.monotonic()
            socks = [None] * self.n
            due = [t0 + i * RENEW_S / self.n for i in range(self.n)]
            renew = list(due)
            while not self.stop.is_set():
                now = time.monotonic()
                i = min(range(self.n), key=lambda k: due[k])
                if due[i] > now:
                    time.sleep(min(due[i] - now, 0.01))
                    continue
                due[i] += READ_EVERY
                if socks[i] is not None and now >= renew[i]:
                    socks[i].close()
                    socks[i] = None
                if socks[i] is None:
                    socks[i] = self._connect()
                    renew[i] = now + RENEW_S
                    continue
                try:
                    b = socks[i].recv(READ_BYTES)
                except BlockingIOError:
                    continue
                except OSError:
                    b = b""
                if not b:
                    socks[i].close()
                    socks[i] = None
                else:
                    self.bytes += len(b)
            for s in socks:
                if s is not None:
                    s.close()
        except Exception as e:  # reported by the test
            self.error = repr(e)


def publisher(writer, stop, seqs, errors):
    k = 0
    try:
        while not stop.is_set():
            now_ms = int(time.time() * 1000)
            evs = [{"topic": TOPIC, "about": ["r%d" % (i % 7)],
                    "data": '{"k":%d,"ts":%d,"p":"%s"}' % (k + i, now_ms, "z" * PAD)} for i in range(BATCH)]
            k += BATCH
            seqs += sc.publish_batch(writer, evs)
    except Exception as e:
        errors.append(repr(e))


def run_case(threads):
    with harness.Env() as env:
        writer = env.start_writer(flush_interval_ms=10)
        writer.wait_ready()
        t_edge = time.monotonic()   # the pause counter runs from the edge's start
        edge = env.start_edge([writer], heartbeat_s=2, flush_interval_ms=10)
        edge.wait_ready()
        port = sc.edge_port(edge)
        m0 = sc.get_metrics(port)
        fills0 = sc.metric(m0, "studio_gap_fills_total") or 0

        lat = []
        normal_items = []

        def on_frame(c, f):
            if f["type"] == "item":
                normal_items.append(int(f["env"]["id"]))
                try:
                    ts = json.loads(harness.envelope_data_text(f["data"]))["ts"]
                    lat.append(time.time() * 1000 - ts)
                except Exception:
                    pass

        normal = sc.StreamClient(port, "/v1/stream?topic=%s" % TOPIC, on_frame=on_frame, name="normal")
        slow = SlowReaders(port, SLOW)
        stop = threading.Event()
        seqs, errors = [], []
        pub = threading.Thread(target=publisher, args=(writer, stop, seqs, errors), daemon=True)
        t0 = time.monotonic()
        slow.start()
        pub.start()
        sc.run_clients([normal], RUN_S)
        stop.set()
        pub.join(60)
        elapsed_ms = (time.monotonic() - t0) * 1000
        # the tail of the publishing reaches the normal client
        if seqs:
            sc.run_clients([normal], 15, until=lambda: normal_items and normal_items[-1] >= seqs[-1])
        slow.stop.set()
        slow.join(10)
        m1 = sc.get_metrics(port)
        edge_ms = (time.monotonic() - t_edge) * 1000
        normal.close()
        fills = (sc.metric(m1, "studio_gap_fills_total") or 0) - fills0
        paused = sc.metric(m1, "studio_edge_intake_paused_ms_total")
        lat.sort()
        pct = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))] if lat else -1
        log("FIGURE flow threads=%d slow=%d run_ms=%.0f edge_ms=%.0f events=%d slow_connects=%d slow_bytes=%d "
            "intake_paused_ms=%s gap_fills=%d normal_items=%d latency_ms p50=%.0f p99=%.0f max=%.0f"
            % (threads, SLOW, elapsed_ms, edge_ms, len(seqs), slow.connects, slow.bytes, paused, fills,
               len(normal_items), pct(0.5), pct(0.99), lat[-1] if lat else -1))
        check(not errors, "publisher: %r" % errors)
        check(slow.error is None, "slow readers: %s" % slow.error)
        check(paused is not None, "studio_edge_intake_paused_ms_total is exported")
        # flow.h: at most FLOW_BURST_MS + T / FLOW_SHARE, plus the overshoot of the last pause past an
        # empty bucket (one decision interval, EDGE_FLOW_MS when the loop is not busy: 100 ms allowed).
        budget = BURST_MS + edge_ms / SHARE + 100
        check(paused <= budget, "the intake was paused %.0f ms in the edge's %.0f ms: more than the budget "
              "%.0f ms (500 ms + 1/10 of the time)" % (paused, edge_ms, budget))
        check(fills <= GAP_FILLS_MAX, "gap fills %d > %d: nng's receive queue overflowed while the intake "
              "was paused" % (fills, GAP_FILLS_MAX))
        check(normal.outcome is None or normal.outcome == "client_closed",
              "the normal client's stream ended: %r %r" % (normal.outcome, normal.error))
        resyncs = [f for f in normal.frames if f["type"] == "resync"]
        check_eq(resyncs, [], "the normal client got no resync")
        want = [s for s in seqs]
        check_eq(normal_items, want[:len(normal_items)], "the normal client's items are the events in order")
        check_eq(len(normal_items), len(want), "the normal client got every event")


@t.case
def slow_readers_share_one_pause_budget():
    run_case(int(os.environ.get("STUDIO_THREADS", "1") or 1))   # the edge's --threads fallback


t.main()
