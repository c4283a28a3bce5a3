# ctest-labels: measure
# ctest-timeout: 600
"""broker-writer memory is bounded by arithmetic (docs/writer.md "Memory
bound"): 200 producers (real nng req0 sockets, tests/tools/ingestflood) send a
16 MiB request each at the same moment; every one is answered (ok or busy) and
the writer's peak RSS (VmHWM) stays below the documented worst case.  And a
stalled subscriber on the publish socket gets at most PUBLISH_SENDBUF queued
messages (plus what the kernel buffers), not everything published."""
import os
import socket
import struct
import subprocess
import time

import harness as h
from test_ingest_limits import batch_of_size

t = h.Tests()

KIB = 1024
MIB = 1024 * KIB

# The constants of the arithmetic (broker-writer/ingest.h, publish.h, batch.h,
# main.c), as docs/writer.md "Memory bound" writes them.
P = 256                        # INGEST_MAX_PIPES
CEILING = 17 * MIB             # INGEST_CEILING
NNG_MSG = 4 + 64 + 256         # REQ header, nng headroom, message struct
R = 8                          # INGEST_RECEIVERS
BUDGET = 256 * MIB             # INGEST_BUDGET
REPLY_MAX = 90013 + 64 + 256   # an ok reply of 10,000 seqs, as an nng message
PIPE_REPLIES = 65              # raw rep0's per-connection reply queue (64) + the one being written
CACHE = 16 * MIB + 131072 * 8  # INGEST_CACHE_BYTES + its bucket array
BATCHES = 2 * 200000 * 144     # cur, then fl + done + iso (<= 30,000 events each): 96 B an event, 1.5x while growing
FLUSH = 256 * MIB              # the flush statement: parameters and libpq's copy
PUB_MSG = 48 + 200 + 64 * (5 + 200) + 262144 + 512 + 320   # PUBLISH_MSG_MAX + nng message
PUB = (256 + 64 + 1) * PUB_MSG  # PUBLISH_SENDBUF + PUBLISH_MAX_SUBSCRIBERS + the one being encoded
BASE = 64 * MIB                # code, libraries, stacks, connections, work slots

TERMS = [
    ("nng receive buffers P x (ceiling + msg)", P * (CEILING + NNG_MSG)),
    ("receivers R x (ceiling + msg)", R * (CEILING + NNG_MSG)),
    ("in-flight budget", BUDGET),
    ("replies queued in nng P x 65 x reply", P * PIPE_REPLIES * REPLY_MAX),
    ("answered cache", CACHE),
    ("batch bookkeeping", BATCHES),
    ("flush statement", FLUSH),
    ("publish queues", PUB),
    ("process baseline", BASE),
]
BOUND = sum(v for _, v in TERMS)


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise h.TestFailure("no %s in /proc/%d/status" % (field, pid))


def inflight_bytes(w):
    p = h.studioctl("stats", "--control", w.control, check=True)
    return h.json.loads(p.stdout.decode())["ingest_inflight_bytes"]


def conn_metrics(w):
    """The writer's own account of the ingest connections it ended: {kind:reason: count}, the closed
    (idle, displaced, handshake) and the refused (global_cap, address_cap) ones."""
    series = [("closed", r) for r in ("idle", "displaced", "handshake")] + \
        [("refused", r) for r in ("global_cap", "address_cap")]
    got = {}
    for kind, r in series:
        v = h.metric(w.http_url, "studio_writer_ingest_conns_%s_total" % kind, {"reason": r})
        got["%s:%s" % (kind, r)] = None if v is None else int(v)  # None: the series is missing
    return got


@t.case
def two_hundred_producers_of_16_mib_at_once():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        h.request(w, {"topic": "warm"})
        idle_kb = status_kb(w.pid, "VmRSS")
        payload, n_events = batch_of_size(16 * MIB, topic="flood")
        t0 = time.monotonic()
        # from 4 loopback addresses (50 each): the per-address cap (64) is not what is measured
        p = subprocess.run([h.program("ingestflood", h.TOOLS_DIR), "--producers", "200", "--timeout-ms", "120000",
                            "--sources", "4", w.ingest], input=payload, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        took = time.monotonic() - t0
        out = p.stdout.decode().strip()
        h.check(p.returncode in (0, 1) and out, "ingestflood ran: rc %d %s %s" % (p.returncode, out,
                                                                                p.stderr.decode()[-500:]))
        res = h.json.loads(out)
        hwm_kb = status_kb(w.pid, "VmHWM")
        conns = conn_metrics(w)
        h.log("FIGURE 200 producers x 16 MiB at once: %s in %.1f s" % (out, took))
        h.log("FIGURE ingest connections closed or refused by the writer: %s" % conns)
        h.log("FIGURE writer RSS idle %.0f MiB, peak (VmHWM) %.0f MiB, bound %.0f MiB (%.0f%% of it)"
              % (idle_kb / 1024, hwm_kb / 1024, BOUND / MIB, 100.0 * hwm_kb * 1024 / BOUND))
        for name, v in TERMS:
            h.log("  bound term %-42s %8.1f MiB" % (name, v / MIB))
        h.check(w.alive(), "the writer survived\n" + w.logs())
        h.check_eq(res["no_reply"], 0, "producers without an answer (writer's connection counters %s; %s)"
                   % (conns, p.stderr.decode()[-2000:]))
        h.check_eq(res["ok"] + res["busy"], 200, "answers that are ok or busy (%s)" % out)
        h.check(res["ok"] >= 1, "at least one 16 MiB request was accepted (%s)" % out)
        h.check(hwm_kb * 1024 < BOUND, "peak RSS %d KiB is below the arithmetic bound %d KiB"
                % (hwm_kb, BOUND // 1024))
        stored = int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = 'flood'"))
        h.check_eq(stored, res["ok"] * n_events, "rows stored for the accepted requests")
        # every charge is released once its reply left: nothing leaks from the budget
        h.wait_until(lambda: inflight_bytes(w) == 0, 30, "the in-flight budget back to 0 (now %s)"
                     % inflight_bytes(w))
        h.check_eq(w.stop(), 0, "writer exit status")


def sp_stalled_subscriber(url):
    """A subscriber that connects, speaks the SP handshake as sub0, then reads
    nothing: a stalled edge.  Its receive buffer is kept small."""
    host, port = url[len("tcp://"):].rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * KIB)
    s.connect((host, int(port)))
    s.sendall(b"\x00SP\x00" + struct.pack(">HH", 0x21, 0))  # sub0
    hdr = b""
    while len(hdr) < 8:
        chunk = s.recv(8 - len(hdr))
        h.check(chunk, "the writer closed the subscriber during the handshake")
        hdr += chunk
    h.check_eq(hdr[:4], b"\x00SP\x00", "SP handshake from the writer")
    return s


def read_messages(s, quiet_s=2.0, limit_s=90.0):
    """Reads SP frames (8-byte length, body) until no large one came for
    quiet_s (ticks keep coming) or limit_s passed; returns their lengths."""
    s.settimeout(0.2)
    buf = b""
    lens = []
    start = last_big = time.monotonic()
    while time.monotonic() - last_big < quiet_s and time.monotonic() - start < limit_s:
        try:
            chunk = s.recv(1 << 20)
        except socket.timeout:
            continue
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 8:
            n = struct.unpack(">Q", buf[:8])[0]
            if len(buf) < 8 + n:
                break
            lens.append(n)
            if n > 200 * KIB:
                last_big = time.monotonic()
            buf = buf[8 + n:]
    return lens


@t.case
def a_stalled_subscriber_queue_is_bounded():
    sendbuf = 256  # PUBLISH_SENDBUF
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        wmem_max = int(f.read().split()[2])
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=50).wait_ready()
        sub = sp_stalled_subscriber(w.publish)
        before_kb = status_kb(w.pid, "VmRSS")
        data = '"' + "d" * (250 * KIB) + '"'
        total = 0
        for _ in range(38):  # 608 events of 250 KiB: one published message each
            rep = h.request(w, [{"topic": "stall", "data": data}] * 16, timeout_ms=30000)
            h.check(rep.get("ok") is True, "publish batch accepted: %r" % (str(rep)[:200],))
            total += 16
        after_kb = status_kb(w.pid, "VmRSS")
        lens = read_messages(sub)
        sub.close()
        big = sum(1 for n in lens if n > 200 * KIB)
        allowance = sendbuf + 2 + wmem_max // (250 * KIB) + 1
        h.log("FIGURE stalled subscriber: %d large messages published, %d delivered after the stall "
              "(bound %d: queue %d + in flight + kernel send buffer %d KiB); writer RSS %.0f -> %.0f MiB"
              % (total, big, allowance, sendbuf, wmem_max // KIB, before_kb / 1024, after_kb / 1024))
        h.check(big <= allowance, "messages queued for a stalled subscriber: %d > %d" % (big, allowance))
        h.check(big < total, "some messages were dropped for the stalled subscriber (%d of %d delivered)"
                % (big, total))
        h.check_eq(w.stop(), 0, "writer exit status")


if __name__ == "__main__":
    t.main()
