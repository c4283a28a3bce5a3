#!/usr/bin/env python3
# ctest-labels: nosan deploy
# ctest-timeout: 420
"""Rolling restarts of every tier of scripts/cluster.sh lose nothing.

The cluster (2 writers, 3 edges, nginx; the edges find the writers through
the headless-Service name) serves STUDIO_CLUSTER_CLIENTS SSE clients
(default 3,000) through nginx, each on one of 10 topics from Last-Event-ID 0,
while producers publish to both writers at a steady rate: two with
idempotency keys (resent to the other writer on `unavailable`, `busy` or no
answer) and one without (resent only on a refusal, which stores nothing).
First the name is shown to follow the writers: one removed from the hosts
file is dropped by every edge, added back it is dialed again (the edges
resolve every 10 s). Then the edges are restarted one at a time (out of
nginx's rotation, SIGTERM, exit, start, /readyz), then the writers. Then
what a Deployment does with new pod IPs: two edges at once on new addresses
(`restart edge1 edge2 --new-address`), then writer1 and right after it
writer2 on new addresses, with no pause between them (no minReadySeconds):
every edge must dial each writer's new address within PICKUP_S of its
restart (the edges look the name up again from 250 ms after losing a
writer's connection; at the regular 10 s only, most runs miss it).
Clients that get `reconnect` or lose their connection reconnect through nginx
with their last id after retry_ms.

Pass: every acknowledged event stored exactly once under the seq of its
acknowledgement, nothing stored that was not acknowledged; every client ends
with exactly the committed events of its topic, in order; no resync; the
producers saw only retryable refusals, and an unkeyed request was never
left without an answer; every edge and writer logged its clean exit. Printed: clients, events, reconnects, the spread of the drain's
retry hints, the time for all clients to be back after each edge restart,
producer retries, and during the writers' moves per edge: the seconds to
dial each new address, the longest time with no writer connection
(studio_edge_writer_pipes 0) and the longest time /readyz was not 200.
"""
import errno
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import chaos  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
NET = "127.0.77"
TOPICS = ["ct%d" % i for i in range(10)]
GRACE_S = 5
PICKUP_S = 5.0
t = h.Tests()


class Probe(threading.Thread):
    """Samples each edge's writer connections, /readyz and log, 50 ms apart between rounds.

    Records per edge the longest stretch with no writer pipe and with /readyz
    not 200, and the first time each "sub: dialing URL" line was seen."""

    def __init__(self, d, edges):
        super().__init__(daemon=True)
        self.d, self.edges = d, edges
        self.addr = {e: open(os.path.join(d, e + ".addr")).read().strip() for e in edges}
        self.stop_ev = threading.Event()
        self.no_writer = {e: 0.0 for e in edges}
        self.not_ready = {e: 0.0 for e in edges}
        self.dialed = {e: {} for e in edges}   # url -> monotonic time first seen
        self.samples, self.error = 0, None
        self.lock = threading.Lock()

    def pipes(self, e):
        try:
            st, _, body = h.http_get("http://%s:8080/metrics" % self.addr[e], timeout=1)
        except OSError:
            return None
        for ln in body.decode(errors="replace").splitlines():
            if ln.startswith("studio_edge_writer_pipes "):
                return int(float(ln.split()[1]))
        return None

    def ready(self, e):
        try:
            return h.http_get("http://%s:8080/readyz" % self.addr[e], timeout=1)[0] == 200
        except OSError:
            return False

    def run(self):
        try:
            since_nw = {e: None for e in self.edges}
            since_nr = {e: None for e in self.edges}
            offs = {e: 0 for e in self.edges}
            while not self.stop_ev.is_set():
                for e in self.edges:
                    now = time.monotonic()
                    p, r = self.pipes(e), self.ready(e)
                    for since, bad, worst in ((since_nw, p == 0, self.no_writer), (since_nr, not r, self.not_ready)):
                        if bad and since[e] is None:
                            since[e] = now
                        if since[e] is not None:
                            worst[e] = max(worst[e], now - since[e])
                            if not bad:
                                since[e] = None
                    with open(os.path.join(self.d, e + ".log"), "rb") as f:
                        f.seek(offs[e])
                        chunk = f.read()
                    cut = chunk.rfind(b"\n") + 1
                    offs[e] += cut
                    for ln in chunk[:cut].decode(errors="replace").splitlines():
                        i = ln.find("sub: dialing ")
                        if i >= 0:
                            with self.lock:
                                self.dialed[e].setdefault(ln[i + 13:].strip(), now)
                self.samples += 1
                self.stop_ev.wait(0.05)
        except Exception:
            import traceback
            self.error = traceback.format_exc()

    def dialed_at(self, e, url):
        with self.lock:
            return self.dialed[e].get(url)


class Client:
    __slots__ = ("i", "topic", "sock", "buf", "last", "ids", "state", "at", "retry_ms", "sessions",
                 "reconnects", "resyncs", "errors", "ev", "headers_done", "status")

    def __init__(self, i, topic):
        self.i, self.topic = i, topic
        self.sock, self.buf, self.last, self.ids = None, b"", 0, []
        self.state, self.at, self.retry_ms = "wait", 0.0, 0
        self.sessions = self.reconnects = 0
        self.resyncs, self.errors, self.ev = [], [], {}
        self.headers_done, self.status = False, 0


class Crowd(threading.Thread):
    """Many SSE clients on one selector thread, reconnecting with their last id."""

    def __init__(self, host, port, n, rate=600):
        super().__init__(daemon=True)
        self.host, self.port, self.rate = host, port, rate
        self.clients = [Client(i, TOPICS[i % len(TOPICS)]) for i in range(n)]
        self.sel = selectors.DefaultSelector()
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.retry_hints = []      # retry_ms of every `reconnect draining`
        self.reasons = {}
        self.error = None
        start = time.monotonic()
        for c in self.clients:
            c.at = start + c.i / rate

    def connected(self):
        """Clients whose current session was answered 200."""
        return sum(1 for c in self.clients if c.state == "stream")

    def run(self):
        try:
            self.loop()
        except Exception as e:  # reported by the test
            import traceback
            self.error = traceback.format_exc()

    def loop(self):
        while not self.stop_ev.is_set():
            now = time.monotonic()
            for c in self.clients:
                if c.state == "wait" and c.at <= now:
                    self.open(c)
            for key, _ in self.sel.select(0.05):
                self.readable(key.data)

    def open(self, c):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((self.host, self.port))
        except BlockingIOError:
            pass
        req = ("GET /v1/stream?topic=%s HTTP/1.0\r\nHost: studio\r\nAccept: text/event-stream\r\n"
               "Last-Event-ID: %d\r\n\r\n" % (c.topic, c.last)).encode()
        c.sock, c.buf, c.headers_done, c.state, c.ev = s, b"", False, "connect", {}
        c.sessions += 1
        self.sel.register(s, selectors.EVENT_WRITE, c)
        c.buf = req

    def close(self, c, delay_ms):
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.sock, c.buf, c.state = None, b"", "wait"
        c.at = time.monotonic() + delay_ms / 1000.0
        c.reconnects += 1

    def readable(self, c):
        if c.state == "connect":
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return self.close(c, 500)
            try:
                c.sock.sendall(c.buf)
            except OSError:
                return self.close(c, 500)
            c.buf, c.state = b"", "sent"
            self.sel.modify(c.sock, selectors.EVENT_READ, c)
            return
        try:
            data = c.sock.recv(65536)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return
            data = b""
        if not data:
            return self.close(c, c.retry_ms or 1000)
        c.buf += data
        if not c.headers_done:
            end = c.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, c.buf = c.buf[:end].decode("latin-1"), c.buf[end + 4:]
            c.status = int(head.split(" ", 2)[1])
            c.headers_done = True
            if c.status != 200:
                # 502/503 from nginx while an upstream goes: retry.
                c.errors.append("status %d" % c.status) if c.status not in (502, 503, 504) else None
                return self.close(c, 1000)
            c.retry_ms = 0
            c.state = "stream"
        while True:
            nl = c.buf.find(b"\n")
            if nl < 0:
                break
            line, c.buf = c.buf[:nl].rstrip(b"\r"), c.buf[nl + 1:]
            if line:
                k, _, v = line.partition(b":")
                v = v[1:] if v.startswith(b" ") else v
                c.ev[k] = v
                continue
            ev, c.ev = c.ev, {}
            if b"data" not in ev:
                if b"retry" in ev:
                    c.retry_ms = int(ev[b"retry"])
                continue
            env = json.loads(ev[b"data"])
            typ = env.get("type")
            if typ == "item":
                n = int(env["id"])
                if env.get("topic") != c.topic:
                    c.errors.append("item %d of topic %r" % (n, env.get("topic")))
                c.ids.append(n)
                c.last = n
            elif typ == "resync":
                c.resyncs.append(env)
                if "id" in env:
                    c.last = int(env["id"])
            elif typ == "reconnect":
                c.retry_ms = int(env.get("retry_ms", 1000))
                with self.lock:
                    r = env.get("reason", "?")
                    self.reasons[r] = self.reasons.get(r, 0) + 1
                    if r == "draining":
                        self.retry_hints.append(c.retry_ms)
            elif typ in ("complete", "failure"):
                c.errors.append("terminal %s" % env)


class UnkeyedProducer(threading.Thread):
    """Publishes without keys; resends only what was refused (stored nothing)."""

    def __init__(self, writers, topics):
        super().__init__(daemon=True)
        self.writers, self.topics = writers, topics
        self.stop_ev = threading.Event()
        self.acked, self.unknown, self.retries, self.n, self.error = {}, 0, 0, 0, None
        self.not_sent, self.unknown_why = 0, []

    def run(self):
        k = 0
        try:
            while not self.stop_ev.is_set():
                events = []
                for _ in range(5):
                    events.append({"topic": self.topics[self.n % len(self.topics)], "about": ["u"],
                                   "data": json.dumps({"u": self.n}, separators=(",", ":"))})
                    self.n += 1
                payload = h.mp_pack(events)
                while True:
                    url = self.writers[k % len(self.writers)]
                    k += 1
                    rc, reply, out, err = h.nngreq(url, payload, timeout_ms=10000)
                    if rc == 0 and isinstance(reply, dict) and reply.get("ok") is True:
                        for e, seq in zip(events, reply["seqs"]):
                            self.acked[json.loads(e["data"])["u"]] = int(seq)
                        break
                    if rc == 0 and isinstance(reply, dict) and reply.get("error") in ("busy", "unavailable"):
                        self.retries += 1
                        time.sleep(0.1)
                        continue
                    if rc == 5:
                        # the dial was refused (a writer restarting): nothing was sent, so it is resent
                        self.not_sent += 1
                        time.sleep(0.05)
                        continue
                    if rc == 3:
                        self.unknown += len(events)   # no answer: stored or not, it cannot know
                        self.unknown_why.append("%s: %s" % (url, err.strip()[-200:]))
                        break
                    raise h.TestFailure("unkeyed request refused: rc %d reply %r %s" % (rc, reply, err[-200:]))
        except Exception as e:
            self.error = repr(e)


def cluster(cmd, *args, timeout=120):
    p = subprocess.run(["bash", CLUSTER, cmd] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    h.check(p.returncode == 0, "cluster.sh %s %s: exit %d %s" % (cmd, " ".join(args), p.returncode,
                                                                 p.stdout.decode()[-2000:]))
    return p.stdout.decode()


def log_lines(d, name):
    with open(os.path.join(d, name + ".log"), errors="replace") as f:
        return f.read().splitlines()


@t.case
def rolling_restarts_lose_nothing():
    nclients = int(os.environ.get("STUDIO_CLUSTER_CLIENTS", "3000"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536, nclients * 4 + 1000)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        pass
    with h.Env(migrate=False) as env:
        d = os.path.join(env.tmp, "cluster")
        port = h.free_port()
        logf = open(os.path.join(env.tmp, "cluster.out"), "wb")
        cl = subprocess.Popen(["bash", CLUSTER, "--no-build", "--dir", d, "--net", NET, "--port", str(port),
                               "--drain-grace-s", str(GRACE_S)], stdout=logf, stderr=subprocess.STDOUT,
                              env=dict(os.environ, STUDIO_PG_DSN=env.dsn, STUDIO_BIN_DIR=h.BIN_DIR),
                              start_new_session=True)
        crowd, producers, unkeyed = None, [], None
        try:
            def cluster_log():
                with open(os.path.join(env.tmp, "cluster.out"), errors="replace") as f:
                    return f.read()[-3000:]
            h.wait_until(lambda: os.path.exists(os.path.join(d, "ready")) or cl.poll() is not None, 120,
                         "cluster.sh up", detail=cluster_log)
            h.check(cl.poll() is None, "cluster.sh exited: %s" % cluster_log())
            edges = ["edge1", "edge2", "edge3"]
            w2 = "tcp://%s.12:7451" % NET

            # The headless name: a writer gone from it is dropped, back again it is dialed.
            cluster("hosts", "--dir", d, "writer1")
            h.wait_until(lambda: all(any("closing %s (no longer resolved)" % w2 in ln
                                         for ln in log_lines(d, e)) for e in edges), 30,
                         "every edge dropped writer2 once the name no longer resolves to it")
            before = {e: sum("dialing %s" % w2 in ln for ln in log_lines(d, e)) for e in edges}
            cluster("hosts", "--dir", d, "writer1", "writer2")
            h.wait_until(lambda: all(sum("dialing %s" % w2 in ln for ln in log_lines(d, e)) > before[e]
                                     for e in edges), 30,
                         "every edge dialed writer2 again once the name resolves to it")

            ingest = ["tcp://%s.11:7450" % NET, "tcp://%s.12:7450" % NET]
            crowd = Crowd("%s.1" % NET, port, nclients)
            crowd.start()
            h.wait_until(lambda: crowd.connected() == nclients or crowd.error, 60,
                         "%d clients streaming" % nclients, interval=0.5,
                         detail=lambda: "connected %d, error %s" % (crowd.connected(), crowd.error))
            producers = [chaos.Producer("k%d" % i, ingest[i:] + ingest[:i], TOPICS, batch=5, timeout_ms=10000)
                         for i in range(2)]
            unkeyed = UnkeyedProducer(ingest, TOPICS)
            for p in producers + [unkeyed]:
                p.start()
            t_start = time.monotonic()
            h.wait_until(lambda: all(p.acked for p in producers) and unkeyed.acked, 30, "first acknowledgements")

            back = {}
            for m in edges + ["writer1", "writer2"]:
                t0 = time.monotonic()
                cluster("restart", m, "--dir", d)
                if m.startswith("edge"):
                    h.wait_until(lambda: crowd.connected() == nclients, 60, "all clients back after %s" % m,
                                 interval=0.1, detail=lambda: "connected %d" % crowd.connected())
                    back[m] = time.monotonic() - t0
                h.wait_until(lambda: all(len(p.ack_times) > 0 and p.ack_times[-1] > time.monotonic() - 5
                                         for p in producers), 30, "producers acknowledged after %s" % m)
            t_end = time.monotonic()

            # As a Deployment with new pod IPs: two edges at once, then the writers back to back.
            t0 = time.monotonic()
            cluster("restart", "edge1", "edge2", "--new-address", "--dir", d)
            h.wait_until(lambda: crowd.connected() == nclients, 60, "all clients back after edge1+edge2",
                         interval=0.1, detail=lambda: "connected %d" % crowd.connected())
            back["edge1+edge2 (new addresses)"] = time.monotonic() - t0
            probe = Probe(d, edges)
            probe.start()
            h.wait_until(lambda: probe.samples >= 2, 30, "the probe sampling the edges")
            moved = {}
            for m in ["writer1", "writer2"]:
                cluster("restart", m, "--new-address", "--dir", d)
                moved[m] = (open(os.path.join(d, m + ".addr")).read().strip(), time.monotonic())
                now_ingest = ["tcp://%s:7450" % open(os.path.join(d, w + ".addr")).read().strip()
                              for w in ("writer1", "writer2")]
                for i, p in enumerate(producers):
                    p.writers = now_ingest[i:] + now_ingest[:i]
                unkeyed.writers = now_ingest
            want = {m: "tcp://%s:7451" % a for m, (a, _) in moved.items()}
            h.wait_until(lambda: all(probe.dialed_at(e, u) for e in edges for u in want.values()), 30,
                         "every edge dialed both writers' new addresses",
                         detail=lambda: {e: sorted(probe.dialed[e]) for e in edges})
            h.wait_until(lambda: all(probe.pipes(e) == 2 for e in edges), 30, "every edge connected to both writers",
                         detail=lambda: {e: probe.pipes(e) for e in edges})
            h.wait_until(lambda: all(len(p.ack_times) > 0 and p.ack_times[-1] > time.monotonic() - 5
                                     for p in producers), 30, "producers acknowledged after the writers moved")
            probe.stop_ev.set()
            probe.join(10)
            h.check(probe.error is None, "probe failed: %s" % probe.error)
            pickup = {e: {m: round(max(0.0, probe.dialed_at(e, want[m]) - moved[m][1]), 2) for m in want}
                      for e in edges}
            for p in producers:
                p.finish(60)
            unkeyed.stop_ev.set()
            unkeyed.join(60)
            heads = {tp: int(h.psql_one(env.dsn, "SELECT coalesce(max(seq),0) FROM broker_event WHERE topic='%s'" % tp))
                     for tp in TOPICS}
            h.wait_until(lambda: all(c.last >= heads[c.topic] for c in crowd.clients), 90,
                         "every client at its topic's head", interval=0.5,
                         detail=lambda: "behind: %d" % sum(1 for c in crowd.clients if c.last < heads[c.topic]))
            crowd.stop_ev.set()
            crowd.join(10)
            h.check(crowd.error is None, "client thread failed: %s" % crowd.error)

            # Producers: exactly once, under the acknowledged seq.
            rows = h.psql(env.dsn, "SELECT seq, topic, key, data::text FROM broker_event ORDER BY seq")
            keyed = {}
            unk = {}
            twice = []
            for seq, topic, key, data in rows:
                if key is not None:
                    twice += [key] if key in keyed else []
                    keyed[key] = int(seq)
                else:
                    u = json.loads(data)["u"]
                    twice += ["u%d" % u] if u in unk else []
                    unk[u] = int(seq)
            acked = {}
            for p in producers:
                h.check(p.error is None, "producer failed: %s" % p.error)
                acked.update(p.acked)
            h.check(unkeyed.error is None, "unkeyed producer failed: %s" % unkeyed.error)
            retries = sum(p.retries for p in producers) + unkeyed.retries
            reasons = {r: sum(p.retry_reasons.get(r, 0) for p in producers)
                       for r in ("busy", "unavailable", "no answer", "dial refused")}
            drained = sorted(crowd.retry_hints)
            hist = {}
            for ms in drained:
                hist[ms * 5 // (GRACE_S * 1000)] = hist.get(ms * 5 // (GRACE_S * 1000), 0) + 1
            h.log("FIGURE cluster: clients %d, events stored %d (keyed %d acknowledged, unkeyed %d acknowledged)"
                  % (nclients, len(rows), len(acked), len(unkeyed.acked)))
            h.log("FIGURE cluster: client sessions %d, reconnects %d, reconnect reasons %s, resyncs %d"
                  % (sum(c.sessions for c in crowd.clients), sum(c.reconnects for c in crowd.clients),
                     crowd.reasons, sum(len(c.resyncs) for c in crowd.clients)))
            h.log("FIGURE cluster: drain retry hints over the %d s grace, per fifth: %s (min %s ms, max %s ms)"
                  % (GRACE_S, [hist.get(i, 0) for i in range(5)], drained[:1], drained[-1:]))
            h.log("FIGURE cluster: seconds until every client streamed again after each edge restart: %s"
                  % {k: round(v, 2) for k, v in back.items()})
            h.log("FIGURE cluster: producer retries %d %s (unkeyed: %d refusals resent, %d refused dials resent, "
                  "%d unanswered)" % (retries, reasons, unkeyed.retries, unkeyed.not_sent, unkeyed.unknown))
            h.log("FIGURE cluster: rolling restart of 3 edges and 2 writers took %.1f s" % (t_end - t_start))
            h.log("FIGURE cluster: writers moved to new addresses back to back: seconds from each restart's "
                  "end to each edge dialing the new address %s" % pickup)
            h.log("FIGURE cluster: longest time with no writer connection per edge %s s, /readyz not 200 %s s "
                  "(%d samples)" % ({e: round(v, 2) for e, v in probe.no_writer.items()},
                                    {e: round(v, 2) for e, v in probe.not_ready.items()}, probe.samples))
            late = {e: {m: v for m, v in pk.items() if v > PICKUP_S} for e, pk in pickup.items()}
            h.check_eq({e: v for e, v in late.items() if v}, {},
                       "edges that dialed a writer's new address more than %.0f s after its restart" % PICKUP_S)
            h.check_eq(twice[:10], [], "events stored twice")
            h.check_eq(sorted(k for k in acked if keyed.get(k) != acked[k])[:10], [],
                       "keyed events not stored under their acknowledged seq")
            h.check_eq(sorted(set(keyed) - set(acked))[:10], [], "keyed events stored but never acknowledged")
            h.check_eq(unkeyed.unknown, 0, "unkeyed events without an answer (a writer exited before replying): %s"
                       % unkeyed.unknown_why[:3])
            h.check_eq(sorted(u for u in unkeyed.acked if unk.get(u) != unkeyed.acked[u])[:10], [],
                       "unkeyed events not stored under their acknowledged seq")
            h.check_eq(sorted(set(unk) - set(unkeyed.acked))[:10], [], "unkeyed events stored but not acknowledged")
            h.check(len(drained) > 0, "no client was sent `reconnect draining` during the edge restarts")
            by_topic = {}
            for seq, topic, _, _ in rows:
                by_topic.setdefault(topic, []).append(int(seq))
            bad = [c for c in crowd.clients if c.ids != by_topic.get(c.topic, []) or c.resyncs or c.errors]
            for c in bad[:5]:
                want = by_topic.get(c.topic, [])
                extra = sorted(set(c.ids) - set(want))[:5]
                missing = sorted(set(want) - set(c.ids))[:5]
                h.log("client %d (%s): %d items, want %d; missing %s, unexpected %s, duplicates %d, "
                      "resyncs %s, errors %s" % (c.i, c.topic, len(c.ids), len(want), missing, extra,
                                                 len(c.ids) - len(set(c.ids)), c.resyncs[:2], c.errors[:2]))
            h.check_eq(len(bad), 0, "clients without exactly every event of their topic in order, "
                                    "or with a resync or an error")
        finally:
            if crowd is not None:
                crowd.stop_ev.set()
            for p in producers:
                p.stop_ev.set()
            if unkeyed is not None:
                unkeyed.stop_ev.set()
            if cl.poll() is None:
                cl.send_signal(signal.SIGTERM)   # cluster.sh stops what it started
                try:
                    cl.wait(90)
                except subprocess.TimeoutExpired:
                    cl.kill()
            logf.close()
        # Every member exited 0 on SIGTERM (the cluster's own stop included).
        for m in ["edge1", "edge2", "edge3", "writer1", "writer2"]:
            lines = log_lines(d, m)
            h.check(any("exiting" in ln for ln in lines[-5:]),
                    "%s did not log a clean exit:\n%s" % (m, "\n".join(lines[-10:])))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("test_cluster needs root (mount namespaces, nginx): skipped")
        sys.exit(h.SKIP)
    t.main()
