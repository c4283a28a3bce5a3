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

For many clients (the soak, test_soak_rolling.py): LbClient (one client
behind a load balancer: any edge, Last-Event-ID, SSE / NDJSON / json-seq,
optionally a slow reader) and Fleet (drives a thousand of them from one
selector thread, the balancer's rotation set by the test), verify_fleet()
(the verdict: every committed event once, in order, no resync; for slow
readers ADR-0197's explicit resyncs and never a silent gap), EdgeWatch
(samples each edge process's RSS and /metrics until it exits) and
edge_memory_bound_mib() (docs/edge.md "Memory bound" as arithmetic).
"""

import heapq
import json
import random
import selectors
import threading
import time
import traceback

import harness
import sse_client
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
            elif rc == 5:
                reason = "dial refused"   # nothing was sent (a writer restarting)
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
            for r in ("no answer", "dial refused", "busy", "unavailable")}))
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


# ------------------------------------------------- many clients, one thread
# (the soak: test_soak_rolling.py).  A thread per client does not scale to a
# thousand; these drive every stream from one selector loop with
# sse_client.StreamClient's state machine.

RESYNC_REASONS = ("overflow", "replay_cap", "cursor_expired", "gap")
RECONNECT_REASONS = ("slow_consumer", "blocked", "draining", "token_expired", "not_ready", "overloaded",
                     "unavailable")


class _Session(sse_client.StreamClient):
    """One HTTP stream of an LbClient: frames go to the client (kept as
    (id, envelope text) there) instead of piling up in .frames."""

    owner = None

    def _frames(self, frames):
        for f in frames:
            if self.terminal is not None:
                self.frames_after_terminal += 1
                self.owner.error("%s frame after the terminal envelope" % f["type"])
                continue
            if f["type"] in sse_client.TERMINAL:
                self.terminal = f
            self.owner.on_frame(self, f)


class LbClient:
    """One client behind a load balancer: a browser's EventSource (or an
    NDJSON / json-seq reader) that, whenever its stream ends, connects again
    to whichever edge the balancer gives it, with Last-Event-ID = the last id
    it got (items and resyncs; 0 at the start, so the first session replays
    from the beginning).  When it reconnects: a `reconnect` envelope: after
    its retry_ms (at most retry_cap_s: the soak's compressed clock); a
    503/429 refusal (NDJSON, json-seq): after Retry-After (same cap); a cut
    stream or a refused connection: after 50-300 ms.

    read_rate (bytes/s) makes it a slow reader (with a small receive buffer).
    Records: items [(id, envelope text)], resyncs [(id, reason, items before
    it)], sessions, outcomes (how sessions ended), reasons (of reconnects),
    ports (sessions per edge port), errors (anything the contract forbids:
    an id that repeats or regresses, a complete envelope, an unexpected
    status, a frame that is not JSON, SSE id != envelope id), failures (the
    `failure` envelopes: a terminal error, where a drain or a database
    restart calls for `reconnect`)."""

    def __init__(self, name, topics, fmt="sse", read_rate=None, rcvbuf=None, retry_cap_s=2.0):
        self.cname, self.topics, self.fmt = name, list(topics), fmt
        self.slow = read_rate is not None
        self.read_rate, self.rcvbuf = read_rate, rcvbuf
        self.retry_cap_s = retry_cap_s
        self.last = 0
        self.items = []
        self.resyncs = []
        self.sessions = 0
        self.outcomes = {}
        self.reasons = {}
        self.ports = {}
        self.errors = []
        self.failures = []
        self.cur = None

    def target(self):
        q = "&".join("topic=%s" % t for t in self.topics)
        if self.fmt != "sse":
            q += "&format=" + self.fmt
        return "/v1/stream?" + q

    def error(self, what):
        if len(self.errors) < 20:
            self.errors.append("session %d: %s" % (self.sessions, what))

    def on_frame(self, s, f):
        t = f["type"]
        env = f["env"]
        if t in ("item", "resync"):
            try:
                i = int(env["id"])
            except (KeyError, TypeError, ValueError):
                self.error("%s without a decimal id: %r" % (t, f.get("data")))
                return
            if self.fmt == "sse" and f["sse_id"] != env["id"]:
                self.error("SSE id %r on envelope id %r" % (f["sse_id"], env["id"]))
            if i <= self.last:
                self.error("%s id %d after %d (repeated or regressing)" % (t, i, self.last))
            if t == "item":
                self.items.append((i, f["data"]))
            else:
                self.resyncs.append((i, env.get("reason"), len(self.items)))
                if env.get("reason") not in RESYNC_REASONS:
                    self.error("resync reason %r" % env.get("reason"))
            self.last = max(self.last, i)
        elif t == "reconnect":
            r = env.get("reason")
            self.reasons[r] = self.reasons.get(r, 0) + 1
            if r not in RECONNECT_REASONS:
                self.error("reconnect reason %r" % r)
        elif t == "failure":
            if len(self.failures) < 20:
                self.failures.append("session %d: %s" % (self.sessions, (f.get("data") or "")[:300]))
        elif t == "complete":
            self.error("complete envelope %s" % (f.get("data") or "")[:300])
        elif t == "_bad_json":
            self.error("frame is not JSON: %r" % (f.get("data") or "")[:200])

    def ended(self, s, rnd):
        """The session is over: records how; returns the delay before the next one."""
        out = s.outcome
        if s.status in (429, 503) and self.fmt != "sse":
            kind = "refused %d" % s.status
        elif s.status not in (200, None):
            kind = "status %d" % s.status
            self.error("status %d: %r" % (s.status, bytes(s.raw[:200])))
        else:
            kind = out
        self.outcomes[kind] = self.outcomes.get(kind, 0) + 1
        self.cur = None
        if out == "reconnect" and s.terminal and isinstance(s.terminal["env"], dict):
            r = s.terminal["env"].get("retry_ms")
            # 0 is a hint too ("at once"): a drain spreads hints over
            # [0, grace] (docs/edge.md "Drain", test_drain_streams.py).
            if not isinstance(r, int) or isinstance(r, bool) or r < 0:
                self.error("reconnect retry_ms %r" % r)
                r = 500
            return min(r / 1000.0, self.retry_cap_s)
        if kind.startswith("refused"):
            ra = s.header("retry-after")
            if ra is None or not ra.isdigit():
                self.error("%s without a numeric Retry-After (%r)" % (kind, ra))
                ra = "1"
            return min(float(ra), self.retry_cap_s)
        return rnd.uniform(0.05, 0.3)


class Fleet(threading.Thread):
    """Drives LbClients in one thread (a selector loop).  The load balancer:
    every (re)connection goes to a random port of .rotation (what its health
    checks consider up; the test takes an edge out before it stops it and puts
    it back once /readyz answers 200); a port that refuses the connection
    costs a quick retry, as behind a real balancer.  fast() makes the slow
    readers read at full speed from then on (the end of a run)."""

    def __init__(self, clients, rotation, seed=1, connect_spread_s=1.0):
        super().__init__(daemon=True)
        self.clients = list(clients)
        self.rotation = list(rotation)
        self.rnd = random.Random(seed)
        self.spread = connect_spread_s
        self.stop_ev = threading.Event()
        self.fast_ev = threading.Event()
        self.error = None
        self.loops = 0
        self.sessions_started = 0
        self._n = 0

    def set_rotation(self, ports):
        self.rotation = list(ports)     # one assignment: the loop reads it as a whole

    def fast(self):
        self.fast_ev.set()

    def finish(self, timeout=30):
        self.stop_ev.set()
        self.join(timeout)
        check(not self.is_alive(), "client fleet stopped within %ss" % timeout)
        check(self.error is None, "client fleet loop failed: %s" % self.error)

    def run(self):
        try:
            self._loop()
        except Exception:  # reported by finish()
            self.error = traceback.format_exc()

    def _push(self, t, kind, obj):
        self._n += 1
        heapq.heappush(self._timers, (t, self._n, kind, obj))

    def _connect(self, c, now):
        ports = self.rotation
        if not ports:
            self._push(now + 0.1, "connect", c)
            return
        port = self.rnd.choice(ports)
        rate = None if self.fast_ev.is_set() else c.read_rate
        s = _Session(port, c.target(), headers=[("Last-Event-ID", str(c.last))], read_rate=rate,
                     rcvbuf=c.rcvbuf, name=c.cname)
        s.owner = c
        c.cur = s
        c.sessions += 1
        c.ports[port] = c.ports.get(port, 0) + 1
        self.sessions_started += 1
        s.start()
        self._after(s, now)

    def _after(self, s, now):
        if s.done:
            if self._reg.pop(s, 0):
                try:
                    self._sel.unregister(s.sock)
                except (KeyError, ValueError):
                    pass
            delay = s.owner.ended(s, self.rnd)
            if not self.stop_ev.is_set():
                self._push(now + delay, "connect", s.owner)
            return
        mask, wake = s.interest(now)
        old = self._reg.get(s, 0)
        if mask != old:
            if old and mask:
                self._sel.modify(s.sock, mask, s)
            elif old:
                self._sel.unregister(s.sock)
            else:
                self._sel.register(s.sock, mask, s)
            if mask:
                self._reg[s] = mask
            else:
                self._reg.pop(s, None)
        if wake is not None:
            self._push(wake, "wake", s)

    def _loop(self):
        self._sel = selectors.DefaultSelector()
        self._reg = {}
        self._timers = []
        t0 = time.monotonic()
        for i, c in enumerate(self.clients):
            self._push(t0 + self.spread * i / max(1, len(self.clients)), "connect", c)
        fast_done = False
        try:
            while not self.stop_ev.is_set():
                self.loops += 1
                now = time.monotonic()
                if self.fast_ev.is_set() and not fast_done:
                    fast_done = True
                    for c in self.clients:
                        s = c.cur
                        if s is not None and not s.done and s.read_rate:
                            s.read_rate = None
                            self._push(now, "wake", s)
                while self._timers and self._timers[0][0] <= now:
                    _, _, kind, obj = heapq.heappop(self._timers)
                    if kind == "connect":
                        self._connect(obj, now)
                    elif not obj.done:
                        self._after(obj, now)
                timeout = 0.05
                if self._timers:
                    timeout = max(0.0, min(timeout, self._timers[0][0] - time.monotonic()))
                for key, mask in self._sel.select(timeout):
                    s = key.data
                    if s not in self._reg:
                        continue
                    now = time.monotonic()
                    s.on_event(mask, now)
                    self._after(s, now)
        finally:
            for c in self.clients:
                if c.cur is not None and not c.cur.done:
                    if self._reg.pop(c.cur, 0):
                        try:
                            self._sel.unregister(c.cur.sock)
                        except (KeyError, ValueError):
                            pass
                    c.cur.close()
            self._sel.close()


def topic_heads(dsn):
    """{topic: newest seq}."""
    return {t: int(s) for t, s in harness.psql(dsn, "SELECT topic, max(seq) FROM broker_event GROUP BY topic")}


def fleet_behind(dsn, clients):
    """The clients whose last id is below the newest event of their topics."""
    heads = topic_heads(dsn)
    return [c for c in clients if c.last < max(heads.get(t, 0) for t in c.topics)]


def _count(xs):
    out = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def _items_as_dicts(items):
    return [{"id": str(i), "data": text} for i, text in items]


def verify_fleet(dsn, clients, label):
    """The verdict on LbClients; prints the figures first.  A client that is
    not slow must hold every committed event of its topics exactly once, in
    order, data byte for byte, with no resync.  A slow one (ADR-0197) may
    get resyncs: every id it got is a committed event of its topics, in
    order, no duplicate, data byte for byte, and every committed event it
    lacks lies under a resync (after the id it had before the resync, up to
    the resync's id): never a silent gap.  No client saw anything the
    contract forbids (LbClient.errors)."""
    rows_by = {}
    for c in clients:
        key = tuple(sorted(c.topics))
        if key not in rows_by:
            rows_by[key] = harness.db_events(dsn, list(key))
    fast = [c for c in clients if not c.slow]
    slow = [c for c in clients if c.slow]

    def total(cs, f):
        out = {}
        for c in cs:
            for k, v in f(c).items():
                out[k] = out.get(k, 0) + v
        return out
    for what, cs in (("clients reading at full speed", fast), ("slow clients", slow)):
        if not cs:
            continue
        log("FIGURE %s: %s %d, items delivered %d, sessions %d (%d open at the end), session ends %s, "
            "reconnect reasons %s, failure envelopes %d, resyncs %d %s, sessions per edge port %s"
            % (label, what, len(cs), sum(len(c.items) for c in cs), sum(c.sessions for c in cs),
               sum(1 for c in cs if c.cur is not None),
               total(cs, lambda c: c.outcomes), total(cs, lambda c: c.reasons),
               sum(len(c.failures) for c in cs), sum(len(c.resyncs) for c in cs),
               total(cs, lambda c: _count(r for _, r, _ in c.resyncs)),
               total(cs, lambda c: c.ports)))
    bad = []
    for c in clients:
        if c.errors:
            bad.append("%s: %s" % (c.cname, c.errors[:3]))
    check_eq(bad[:10], [], "%d clients saw what the contract forbids" % len(bad))
    bad = []
    for c in fast:
        rows = rows_by[tuple(sorted(c.topics))]
        if c.resyncs:
            bad.append("%s (%s) got resyncs %s" % (c.cname, c.fmt, c.resyncs[:3]))
            continue
        try:
            harness.check_items_match_rows(_items_as_dicts(c.items), rows,
                                           "client %s (%s on %s, %d sessions)"
                                           % (c.cname, c.fmt, ",".join(c.topics), c.sessions))
        except TestFailure as e:
            bad.append(str(e))
    check_eq(bad[:5], [], "%d of %d clients reading at full speed do not hold every committed event "
                          "of their topics exactly once, in order, without a resync" % (len(bad), len(fast)))
    bad = []
    for c in slow:
        rows = rows_by[tuple(sorted(c.topics))]
        by_seq = {r[0]: r for r in rows}
        got = [i for i, _ in c.items]
        not_committed = [i for i in got if i not in by_seq]
        disorder = [(a, b) for a, b in zip(got, got[1:]) if b <= a]
        if disorder:
            bad.append("%s: ids not strictly increasing (repeated or out of order) at %s"
                       % (c.cname, disorder[:5]))
            continue
        if not_committed:
            bad.append("%s: ids %s are not committed events of %s" % (c.cname, not_committed[:5], c.topics))
            continue
        try:
            harness.check_items_match_rows(_items_as_dicts(c.items), [by_seq[i] for i in got],
                                           "slow client %s" % c.cname)
        except TestFailure as e:
            bad.append(str(e))
            continue
        # Ranges a resync answers for: (the last id before it, its id].
        # (ids strictly increase in stream order, so the larger of the last
        # item and the last resync before it is what came just before it).
        covered = []
        prev_resync = 0
        for rid, _, n_before in c.resyncs:
            covered.append((max(got[n_before - 1] if n_before else 0, prev_resync), rid))
            prev_resync = rid
        have = set(got)
        silent = [r[0] for r in rows if r[0] not in have and not any(lo < r[0] <= hi for lo, hi in covered)]
        if silent:
            bad.append("%s: %d committed events missing with no resync covering them, first %s "
                       "(resyncs %s)" % (c.cname, len(silent), silent[:5], c.resyncs[:5]))
    check_eq(bad[:5], [], "%d of %d slow clients: a silent gap or an id that is not a committed event "
                          "in order" % (len(bad), len(slow)))


def check_no_failure_envelopes(clients):
    """No LbClient got a `failure`: in a run of restarts every end of a
    stream (a drain, the database going away) is one to retry, which the
    contract says with `reconnect` (draining, not_ready, unavailable); a
    `failure` is a terminal error, counted as one by the edge."""
    bad = ["%s: %s" % (c.cname, c.failures[:2]) for c in clients if c.failures]
    check_eq(bad[:10], [], "%d clients got a failure envelope, an error, where the end was one to retry "
                           "(reconnect)" % len(bad))


class EdgeWatch(threading.Thread):
    """Samples every edge process it is given (watch(proc)) every interval
    while it lives: VmRSS and GET /metrics.  Per process: peak RSS, peak
    studio_streams_open, and the last value read of each counter in
    COUNTERS (a restarted edge's counters start again at 0, so each
    instance is read until its end: the test samples a draining edge itself,
    sample(p, draining=True), until no stream is left)."""

    COUNTERS = ("studio_ids_refused_total", "studio_seam_gaps_total")

    def __init__(self, interval=0.2):
        super().__init__(daemon=True)
        self.interval = interval
        self.procs = []
        self.stats = {}
        self.stop_ev = threading.Event()
        self._lock = threading.Lock()

    def watch(self, proc):
        with self._lock:
            self.procs.append(proc)
            self.stats[proc.name] = {"rss_kb": 0, "streams": 0, "samples": 0, "metric_samples": 0, "final": False,
                                     "counters": {k: 0.0 for k in self.COUNTERS}, "port": proc.listen}

    def sample(self, p, draining=False):
        """One sample of p; returns its studio_streams_open (None when
        /metrics did not answer).  draining: p is draining, so a sample with
        no stream open has its counters' final values (nothing is written
        any more); it is marked "final"."""
        with self._lock:
            st = self.stats[p.name]
            try:
                rss = p.rss_kb()
            except (OSError, TestFailure):
                return None
            st["rss_kb"] = max(st["rss_kb"], rss)
            st["samples"] += 1
        try:
            status, _, body = harness.http_get(p.url + "/metrics", timeout=2)
        except (OSError, harness.http.client.HTTPException):
            return None
        if status != 200:
            return None
        m = sse_client.parse_metrics(body.decode(errors="replace"))
        n = int(sse_client.metric(m, "studio_streams_open") or 0)
        with self._lock:
            st["metric_samples"] += 1
            st["streams"] = max(st["streams"], n)
            for k in self.COUNTERS:
                v = sse_client.metric(m, k)
                if v is not None:
                    st["counters"][k] = max(st["counters"][k], v)
            if draining and n == 0:
                st["final"] = True
        return n

    def run(self):
        while not self.stop_ev.is_set():
            with self._lock:
                live = [p for p in self.procs if p.alive()]
            for p in live:
                self.sample(p)
            self.stop_ev.wait(self.interval)

    def finish(self):
        self.stop_ev.set()
        self.join(10)


def edge_memory_bound_mib(writers, streams, resuming, db_conns=4):
    """docs/edge.md "Memory bound", the arithmetic, in MiB:
    M <= 20 + 128 + W x 0.5 + 4 x 32 + 1 + P x 1.3
         + S x (1.8 KiB + 16 KiB + 4 x 1 MiB) + R x 4 x 2.3 MiB."""
    return (20 + 128 + writers * 0.5 + 4 * 32 + 1 + db_conns * 1.3
            + streams * (1.8 / 1024 + 16 / 1024 + 4 * 1.0) + resuming * 4 * 2.3)


def acks(producers):
    """Events acknowledged so far by all producers."""
    return sum(len(p.acked) for p in producers)


def wait_acked(producers, n, what, logs=(), interval=0.05):
    """Waits (bounded, 90 s) until n more events are acknowledged; a producer
    error, or the time running out, fails with the counts, the retries and
    the log tails of the processes in `logs` (objects with .logs(lines))."""
    target = acks(producers) + n
    harness.wait_until(lambda: acks(producers) >= target or any(p.error for p in producers), 90,
                       "%d more acknowledged events (%s)" % (n, what), interval=interval,
                       detail=lambda: "acked %d; producer errors %s; retries %s\n%s" % (
                           acks(producers), [p.error for p in producers],
                           [p.retry_reasons for p in producers], "\n".join(x.logs(20) for x in logs)))
    check(not any(p.error for p in producers), "producers: %s" % [p.error for p in producers])
