"""Producers and clients that behave like real ones under failures, and the
end-of-run verdict, for the chaos tests (test_chaos_*.py).

Producer: a thread sending keyed batches through nngreq, round robin over
its writers.  A request that gets no answer (nngreq timeout), `busy` or
`unavailable` is sent again, with the same keys, to the next writer: what a
producer does after a replica died or the database was away.  `invalid` or
a reply it cannot read is a failure.  Every acknowledged key is recorded with
its seq and the time of the acknowledgement.

ResumingClient: a thread holding an SSE stream; when the stream ends (cut
off, or a `reconnect` envelope) it reconnects with Last-Event-ID = the last
id it received, as the contract says clients do (after the envelope's
retry_ms, at most 2 s).  Sessions, reconnects, resyncs and every item are
recorded.

verify(): every acknowledged event stored exactly once with the seq of its
acknowledgement, nothing stored twice or unasked, and every client got every
committed event of its topics exactly once, in order, with no resync.
"""

import json
import threading
import time

import harness
from harness import TestFailure, check, check_eq, log


class Producer(threading.Thread):
    def __init__(self, name, writers, topics, batch=10, timeout_ms=3000, max_request_s=90):
        super().__init__(daemon=True)
        self.pname, self.writers, self.topics, self.batch = name, list(writers), topics, batch
        self.timeout_ms, self.max_request_s = timeout_ms, max_request_s
        self.stop_ev = threading.Event()
        self.acked = {}          # key -> seq
        self.ack_times = []      # monotonic time of each acknowledged request
        self.sent_keys = set()
        self.requests = 0
        self.retries = 0
        self.retry_reasons = {}
        self.error = None
        self.k = 0
        self.n = 0

    def writer_urls(self):
        return [w.ingest if isinstance(w, harness.Proc) else w for w in self.writers]

    def run(self):
        try:
            while not self.stop_ev.is_set():
                self.one_request()
        except Exception as e:  # reported by verify()
            self.error = "%s: %r" % (self.pname, e)

    def one_request(self):
        events = []
        for _ in range(self.batch):
            key = "%s-%d" % (self.pname, self.n)
            events.append({"topic": self.topics[self.n % len(self.topics)], "about": [self.pname],
                           "data": json.dumps({"p": self.pname, "n": self.n}, separators=(",", ":")),
                           "key": key})
            self.sent_keys.add(key)
            self.n += 1
        payload = harness.mp_pack(events)
        t0 = time.monotonic()
        while True:
            url = self.writer_urls()[self.k % len(self.writers)]
            self.k += 1
            self.requests += 1
            rc, reply, out, err = harness.nngreq(url, payload, timeout_ms=self.timeout_ms)
            if rc == 0 and isinstance(reply, dict) and reply.get("ok") is True:
                seqs = reply.get("seqs")
                if not isinstance(seqs, list) or len(seqs) != len(events):
                    raise TestFailure("%s: reply %r for %d events" % (url, reply, len(events)))
                for e, seq in zip(events, seqs):
                    self.acked[e["key"]] = int(seq)
                self.ack_times.append(time.monotonic())
                return
            if rc == 0 and isinstance(reply, dict) and reply.get("error") in ("busy", "unavailable"):
                reason = reply["error"]
            elif rc == 3:
                reason = "no answer"
            else:
                raise TestFailure("%s: request refused or unreadable: rc %d reply %r %s %s"
                                  % (url, rc, reply, out.strip()[:200], err.strip()[:200]))
            self.retries += 1
            self.retry_reasons[reason] = self.retry_reasons.get(reason, 0) + 1
            if time.monotonic() - t0 > self.max_request_s:
                raise TestFailure("%s: no writer acknowledged keys %s..%s within %ds (last: %s)"
                                  % (self.pname, events[0]["key"], events[-1]["key"], self.max_request_s, reason))
            if reason != "no answer":
                time.sleep(0.1)   # a real producer's back-off; the outcome does not depend on it

    def finish(self, timeout):
        """Stops after the request in progress is acknowledged (bounded)."""
        self.stop_ev.set()
        self.join(timeout)
        check(not self.is_alive(), "producer %s stopped within %ss" % (self.pname, timeout))


class ResumingClient(threading.Thread):
    def __init__(self, edge, topics, name, after=0, hop_s=None):
        """hop_s: also end each session from the client side after hop_s
        seconds and resume (exercises the resume check during the failure)."""
        super().__init__(daemon=True)
        self.hop_s = hop_s
        self.hops = 0
        self.edge, self.topics, self.cname = edge, topics, name
        self.last = after
        self.items = []
        self.sessions = 0
        self.reconnects = 0
        self.resyncs = []
        self.outcomes = {}
        self.errors = []
        self.stop_ev = threading.Event()
        self.cur = None
        self._lock = threading.Lock()

    def url(self):
        return "%s/v1/stream?%s" % (self.edge.url, "&".join("topic=%s" % t for t in self.topics))

    def last_id(self):
        with self._lock:
            return self.last

    def run(self):
        while not self.stop_ev.is_set():
            try:
                c = harness.SseClient(self.url(), headers={"Last-Event-ID": str(self.last)}, timeout=60)
            except OSError as e:
                self.errors.append("connect: %r" % e)
                self.stop_ev.wait(0.2)
                continue
            self.cur = c
            self.sessions += 1
            seen = 0
            retry = 500
            t_session = time.monotonic()
            while True:
                with c._cv:
                    evs = c.events[seen:]
                    seen = len(c.events)
                    closed = c.closed
                for e in evs:
                    kind = e.get("event")
                    if kind == "message" and "data" in e:
                        with self._lock:
                            self.items.append(e)
                            self.last = int(e["id"])
                    elif kind == "resync":
                        self.resyncs.append(e.get("data"))
                        with self._lock:
                            self.last = int(e["id"])
                    elif kind in ("reconnect", "complete", "failure"):
                        self.outcomes[kind] = self.outcomes.get(kind, 0) + 1
                        if kind == "reconnect":
                            try:
                                retry = int(json.loads(e["data"]).get("retry_ms", 500))
                            except (ValueError, TypeError):
                                pass
                        if kind == "failure":
                            self.errors.append("failure envelope %s" % e.get("data"))
                if closed or self.stop_ev.is_set():
                    break
                # Only a session that started streaming is ended by the client:
                # one still waiting for its answer (a resume check) gets it.
                if self.hop_s is not None and c.status is not None and \
                        time.monotonic() - t_session >= self.hop_s:
                    self.hops += 1
                    retry = 0
                    break
                with c._cv:
                    if len(c.events) == seen and not c.closed:
                        c._cv.wait(0.2)
            c.close()
            if self.stop_ev.is_set():
                break
            if c.status in (429, 503):
                # A refusal to retry (draining, not ready, the database away
                # for the resume check): after Retry-After, at most 2 s.
                kind = "refused %d" % c.status
                try:
                    retry = 1000 * int(c.headers.get("retry-after", "1"))
                except ValueError:
                    retry = 1000
            elif c.status not in (200, None):
                self.errors.append("status %s" % c.status)
                kind = "status %s" % c.status
            else:
                kind = "ended"
            self.outcomes[kind] = self.outcomes.get(kind, 0) + 1
            self.reconnects += 1
            self.stop_ev.wait(min(retry, 2000) / 1000.0)

    def finish(self):
        self.stop_ev.set()
        if self.cur is not None:
            self.cur.close()
        self.join(15)


def topic_head(dsn, topics):
    v = harness.psql_one(dsn, "SELECT coalesce(max(seq), 0) FROM broker_event WHERE topic IN (%s)"
                         % ",".join("'%s'" % t for t in topics))
    return int(v or 0)


def longest_ack_gap(producers, t_start, t_end):
    times = sorted(t for p in producers for t in p.ack_times)
    pts = [t_start] + [t for t in times if t_start <= t <= t_end] + [t_end]
    return max(b - a for a, b in zip(pts, pts[1:]))


def wait_clients_caught_up(env, clients, timeout):
    for c in clients:
        want = topic_head(env.dsn, c.topics)
        harness.wait_until(lambda: c.last_id() >= want, timeout,
                           "client %s at seq %d" % (c.cname, want),
                           detail=lambda: "client %s: last id %d, %d items, %d sessions, outcomes %s, "
                                          "resyncs %s, errors %s" % (c.cname, c.last_id(), len(c.items),
                                                                     c.sessions, c.outcomes, c.resyncs[:3],
                                                                     c.errors[:3]))


def verify(env, producers, clients, t_start, t_end, label):
    """The verdict of a chaos run; prints the figures first."""
    for p in producers:
        check(p.error is None, "producer failed: %s" % p.error)
    acked = {}
    for p in producers:
        acked.update(p.acked)
    sent = set().union(*(p.sent_keys for p in producers))
    rows = harness.psql(env.dsn, "SELECT key, seq FROM broker_event ORDER BY seq")
    stored = {}
    twice = []
    for key, seq in rows:
        if key in stored:
            twice.append(key)
        stored[key] = int(seq)
    log("FIGURE %s: events acknowledged %d, stored %d, requests %d, producer retries %d %s"
        % (label, len(acked), len(rows), sum(p.requests for p in producers),
           sum(p.retries for p in producers),
           {r: sum(p.retry_reasons.get(r, 0) for p in producers)
            for r in ("no answer", "busy", "unavailable")}))
    log("FIGURE %s: longest time without an acknowledgement %.2f s" % (label, longest_ack_gap(producers, t_start, t_end)))
    for c in clients:
        log("FIGURE %s: client %s on %s delivered %d, sessions %d, reconnects %d (%d by the client), "
            "outcomes %s, resyncs %d" % (label, c.cname, ",".join(c.topics), len(c.items), c.sessions,
                                         c.reconnects, c.hops, c.outcomes, len(c.resyncs)))
    check_eq(twice[:10], [], "no key stored twice")
    check(None not in stored, "every stored event has a key (%d without)" % sum(1 for k, _ in rows if k is None))
    unasked = sorted(set(stored) - sent)
    check_eq(unasked[:10], [], "every stored key was sent by a producer")
    lost = sorted(k for k in acked if k not in stored)
    check_eq(lost[:10], [], "every acknowledged event is stored (lost %d)" % len(lost))
    wrong = sorted((k, acked[k], stored[k]) for k in acked if stored[k] != acked[k])
    check_eq(wrong[:10], [], "every acknowledged event is stored under the seq of its acknowledgement")
    unacked = sorted(set(stored) - set(acked))
    check_eq(unacked[:10], [], "every stored event was acknowledged (every request was retried to the end)")
    for c in clients:
        check_eq(c.errors[:5], [], "client %s sessions without errors" % c.cname)
        check_eq(c.resyncs[:5], [], "client %s got no resync" % c.cname)
        harness.check_items_match_rows(c.items, harness.db_events(env.dsn, c.topics),
                                       "client %s (%s)" % (c.cname, ",".join(c.topics)))


def check_clean_exit(procs):
    """SIGTERM each; exit 0 is the verdict (a sanitizer build exits non-zero
    on a leak or memory error found at the end)."""
    for p in procs:
        rc = p.stop(60)
        check_eq(rc, 0, "%s exits 0 on SIGTERM after the run\n%s" % (p.name, p.logs(40)))
