"""Flow control for bursts of large frames (issue 21, items 5 and 6;
docs/edge.md "Flow control", docs/architecture.md "Flow control").

5. A fast reader of large frames is not overflowed.  The behind check ran
   only once 64 frames were queued, so 60 events of 200 KB each (one
   published message each; 5 of them fill the 1 MiB queue of ADR-0197) to a
   client reading 6 MB/s gave `resync overflow`, where 12,000 events of
   1 KB paused the intake and lost nothing.  Lag is now judged in bytes as
   well as frames: the client gets every event, no resync, for a burst
   inside what the pause budget promises (FAST_N below: 36 x 200 KB, which
   overflows when lag is judged in frames only).

6. /readyz does not flap while the edge pauses its own intake.  The
   writers-fresh rule (a tick or batch within 3 flush intervals) looked at
   the last message read, and a pause reads nothing: at --flush-interval-ms
   20 a pause over 60 ms made /readyz answer 503 and refused new streams
   as not_ready.  A pause of the edge's own is not a stale writer: /readyz,
   polled all through bursts that make the edge pause, answers 200 every
   time (no 503 for the writer-tick rule), and the pause counter shows the
   bursts did pause the intake.  (A
   second, idle writer keeps ticking: the bursting one is silent while it
   inserts 12 MB, which is a real silence, not the edge's.)

Runs with --threads 1 and (it_threads_flow_bursts) --threads 2.
"""

import base64
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
THREADS = int(os.environ.get("STUDIO_THREADS", "1") or 1)
N_LARGE = 60
LARGE = 200 * 1000          # bytes of data per event (the report: 60 x 200 KB)
RATE = 6 * 1000 * 1000      # the reader's pace, bytes per second (the report: 6 MB/s)
FLUSH_MS = int(os.environ.get("FB_FLUSH_MS", "20"))   # the report's --flush-interval-ms
READY_RATE = int(os.environ.get("FB_READY_RATE", str(RATE)))
# The fast reader of the first case, and what the design promises it (docs/edge.md "Flow control"): a
# live stream whose client keeps reading at RATE gets a burst of B bytes whole while
#     B <= 1 MiB (its queue) + the connection's kernel buffers + RATE x 500 ms (FLOW_BURST_MS),
# since the budget grants no more pause than that in one go.  The report's 60 x 200 KB (12 MB) at
# 6 MB/s needs 7+ MB of kernel buffers, which the kernel gives or not from run to run (the client's
# receive buffer autotuned anywhere from 128 KB to 4.6 MB here: 2 of 5 runs whole, 3 overflowed with
# the budget spent).  So the client's receive buffer is fixed at 64 KiB and the burst is 36 x 200 KB
# (7.2 MB): 1 MiB + the edge's send buffer (up to tcp_wmem's 4 MiB) + 3 MB, 0.35 s of pause of the 0.5 s,
# while without the pause (lag judged in frames only, the report's bug) 2 MB have nowhere to go.
# It reads every 10 ms: a client that reads every 50 ms sits at FLOW_STALL_MS between its reads.
FAST_N = int(os.environ.get("FB_FAST_N", "36"))
FAST_RCVBUF = int(os.environ.get("FB_FAST_RCVBUF", "65536"))
FAST_SLICE_S = 0.01
READY_SLICE_S = float(os.environ.get("FB_READY_SLICE_S", str(FAST_SLICE_S)))   # never "stalled"
READY_ROUNDS = int(os.environ.get("FB_READY_ROUNDS", "5"))
READY_READERS = int(os.environ.get("FB_READY_READERS", "3"))
READY_N = int(os.environ.get("FB_READY_N", str(N_LARGE)))
READY_EXTRA_ROUNDS = 4      # slower readers, only while the bursts have not paused the intake enough
READY_MIN_RATE = 500 * 1000
READY_RCVBUF = int(os.environ.get("FB_READY_RCVBUF", "65536"))   # kernel buffers do not absorb the burst: longer pauses


def large_events(topic, n, start=0):
    # about 200 KB of JSON text each: {"i":N,"p":"<base64 of random bytes>"}.  Random, so PostgreSQL
    # does not spend the machine's 2 cores compressing 12 MB per burst (which starved the writers' ticks).
    pad = base64.b64encode(os.urandom((LARGE - 20) * 3 // 4)).decode()
    return [{"topic": topic, "about": ["a"], "data": '{"i":%d,"p":"%s"}' % (start + i, pad)} for i in range(n)]


def metrics(port):
    m = sc.get_metrics(port)
    return {"paused": sc.metric(m, "studio_edge_intake_paused_ms_total") or 0,
            "overflow": sc.metric(m, "studio_sse_dropped_total", reason="overflow") or 0}


def burst_to_paced_reader(writer, port, topic, start, rate=RATE, rcvbuf=None, slice_s=0.05, n=N_LARGE, readers=1):
    """Publishes n x 200 KB in one request while `readers` clients read topic at rate (B/s) each; returns
    (the first client, seqs, seconds until every client had the last one or one got a resync)."""
    cs = [sc.StreamClient(port, "/v1/stream?topic=%s" % topic, read_rate=rate, rcvbuf=rcvbuf, read_slice_s=slice_s,
                          name="paced%d" % i) for i in range(readers)]
    c = cs[0]
    if not sc.run_clients(cs, 30, until=lambda: all(x.status is not None for x in cs)):
        raise harness.TestFailure("a paced client got no headers: %s %s" % (c.outcome, c.error))
    check_eq([x.status for x in cs], [200] * readers, "the paced clients' status")
    out = {}

    def pub():
        try:
            out["seqs"] = sc.publish_batch(writer, large_events(topic, n, start))
        except Exception as e:  # reported below
            out["error"] = repr(e)
    p = threading.Thread(target=pub, daemon=True)
    t0 = time.monotonic()
    p.start()
    # 12 MB at 6 MB/s is 2 s; wait generously (the machine is busy)
    sc.run_clients(cs, 120, until=lambda: all((not p.is_alive() and "seqs" in out and
                                               (x.last_id or 0) >= out["seqs"][-1]) or x.done
                                              or x.of_type("resync") for x in cs))
    took = time.monotonic() - t0
    p.join(60)
    for x in cs[1:]:
        x.close()
    check("error" not in out, "publisher: %s" % out.get("error"))
    return c, out.get("seqs", []), took


@t.case
def large_frames_to_a_fast_reader_do_not_overflow():
    with harness.Env() as env:
        writer = env.start_writer(flush_interval_ms=50)
        writer.wait_ready()
        edge = env.start_edge([writer], flush_interval_ms=50, threads=THREADS)
        edge.wait_ready()
        port = sc.edge_port(edge)
        m0 = metrics(port)
        c, seqs, took = burst_to_paced_reader(writer, port, "fb.large", 0, rcvbuf=FAST_RCVBUF,
                                              slice_s=FAST_SLICE_S, n=FAST_N)
        m1 = metrics(port)
        resyncs = [f["env"] for f in c.of_type("resync")]
        got = c.ids()
        c.close()
        log("FIGURE large_burst threads=%d events=%d x %d B reader=%d B/s took_s=%.2f items=%d resyncs=%s "
            "intake_paused_ms=%d dropped_overflow=%d"
            % (THREADS, FAST_N, LARGE, RATE, took, len(got), resyncs, m1["paused"] - m0["paused"],
               m1["overflow"] - m0["overflow"]))
        check_eq(resyncs, [], "the 6 MB/s reader of %d x 200 KB got no resync" % FAST_N)
        check_eq(c.outcome, "client_closed", "the stream was still open (%s)" % c.error)
        check_eq(got, seqs, "the reader got every event, in order")
        check_eq(m1["overflow"] - m0["overflow"], 0, "frames dropped for overflow")
        check_eq(edge.stop(), 0, "edge exit status")


class ReadyPoller(threading.Thread):
    """GET /readyz back to back; counts answers by status."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.halt = threading.Event()
        self.status = {}
        self.first_bad = None

    def run(self):
        while not self.halt.is_set():
            r = sc.fetch(self.port, "/readyz", timeout=5)
            key = r.status if r.status is not None else (r.outcome or "none")
            if key != 200:
                body = r.body_json()
                key = "%s %s" % (key, body.get("detail") if isinstance(body, dict) else bytes(r.raw)[:80])
            self.status[key] = self.status.get(key, 0) + 1
            if key != 200 and self.first_bad is None:
                self.first_bad = (key, bytes(r.raw)[:200])
            time.sleep(0.01)


def favour(*procs):
    """As root, renices every thread of procs to -20.  The rule under test is about the edge's own
    pauses; a writer or edge that the scheduler starves for more than 60 ms on a busy 2-core machine
    (the CI's, with other work beside it) is a real silence and a correct 503 (seen: 1 and 5 such polls
    under a load of other builds at nice 0; at -10, 1 and 3 polls in a run beside five other sessions'
    builds and tests, load 10 to 13), which would hide what this test judges.  Niceness only changes
    who runs first when the CPUs are contended (at -20 a thread weighs 87 times a nice-0 one); the
    timing rules are the programs' own."""
    if os.geteuid() != 0:
        log("not root: the programs keep their niceness (a starved writer may show as a 503)")
        return
    for p in procs:
        for tid in os.listdir("/proc/%d/task" % p.pid):
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), -20)
            except OSError as e:  # a thread that ended meanwhile
                log("renice %s/%s: %s" % (p.pid, tid, e))


def postgres_pids(dsn):
    """The PostgreSQL server's processes (postmaster and its children), when this user can see them."""
    try:
        pid = int(open(os.path.join(harness.psql_one(dsn, "SHOW data_directory"), "postmaster.pid")).readline())
    except (OSError, ValueError, harness.TestFailure) as e:
        log("the server's processes are not known here (%s): PostgreSQL keeps its niceness" % e)
        return []
    kids = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and int(open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return [pid] + kids


def favour_postgres(dsn, nice):
    """As root, renices the server's processes (new backends inherit the postmaster's): an idle writer's
    tick is a query (its head), so a backend starved behind the favoured programs is a writer silence
    too.  Returns what to restore: [(pid, old niceness)]."""
    if os.geteuid() != 0:
        return []
    old = []
    for pid in postgres_pids(dsn):
        try:
            old.append((pid, os.getpriority(os.PRIO_PROCESS, pid)))
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except OSError:  # a backend that ended meanwhile
            pass
    return old


def readyz_during_bursts(flush_ms, rounds):
    with harness.Env() as env:
        # The bursts go to one writer; a second one only ticks, every 10 ms
        # (twice per edge interval, so a tick late on this busy 2-core
        # machine is not yet a real 60 ms silence).  A writer inserting 12 MB
        # sends no tick while it does (its own, real, silence), so the idle
        # one's ticks are what keeps the rule met, and only the edge's
        # pause can hold them back.
        writer = env.start_writer(flush_interval_ms=flush_ms)
        idle = env.start_writer(flush_interval_ms=10)
        writer.wait_ready()
        idle.wait_ready()
        edge = env.start_edge([writer, idle], flush_interval_ms=flush_ms, threads=THREADS)
        edge.wait_ready()
        favour(writer, idle, edge)
        pg_old = favour_postgres(env.dsn, -20)
        port = sc.edge_port(edge)
        m0 = metrics(port)
        poll = ReadyPoller(port)
        poll.start()
        harness.wait_until(lambda: sum(poll.status.values()) >= 5, 30, "/readyz polled")
        done = []
        rate = READY_RATE
        try:
            # `rounds` bursts, then more (each read at half the pace of the last) until the bursts
            # paused the intake past 3 flush intervals: under a sanitizer the edge can be slower
            # than a 6 MB/s reader, so that pace never makes it pause (CI, TSan: 0 ms in 5 rounds).
            for k in range(rounds + READY_EXTRA_ROUNDS):
                if k >= rounds:
                    if metrics(port)["paused"] - m0["paused"] >= 3 * flush_ms:
                        break
                    rate = max(rate // 2, READY_MIN_RATE)
                c, seqs, took = burst_to_paced_reader(writer, port, "fb.ready%d" % k, k * N_LARGE,
                                                      rate=rate, rcvbuf=READY_RCVBUF,
                                                      slice_s=READY_SLICE_S, n=READY_N, readers=READY_READERS)
                done.append((len(c.ids()), len(seqs), round(took, 2), rate))
                c.close()
        finally:
            poll.halt.set()
            poll.join(30)
            for pid, nice in pg_old:
                try:
                    os.setpriority(os.PRIO_PROCESS, pid, nice)
                except OSError:
                    pass
        m1 = metrics(port)
        paused = m1["paused"] - m0["paused"]
        polls = sum(poll.status.values())
        log("FIGURE readyz_during_pauses threads=%d flush_ms=%d rounds(items,events,s,B/s)=%s intake_paused_ms=%d "
            "readyz=%s first_bad=%r" % (THREADS, flush_ms, done, paused, poll.status, poll.first_bad))
        check(paused >= 3 * flush_ms, "precondition: the bursts paused the intake longer than 3 flush intervals "
              "(%d ms, want >= %d)" % (paused, 3 * flush_ms))
        check(polls >= 20, "precondition: /readyz polled during the bursts (%d times)" % polls)
        # The item is the writers-fresh rule.  Other 503s (seen once under ASan: "no database
        # connection", the pool's, for 2 polls) are printed above and not judged here.
        check_eq({k: v for k, v in poll.status.items() if k != 200 and "writer" in str(k)}, {},
                 "--flush-interval-ms %d: /readyz 503 for the writer-tick rule while the edge paused its own "
                 "intake (of %d polls)" % (flush_ms, polls))
        check_eq({k: v for k, v in poll.status.items() if k != 200 and not str(k).startswith("503")}, {},
                 "/readyz answers neither 200 nor 503 (of %d polls)" % polls)
        check_eq(edge.stop(), 0, "edge exit status")


@t.case
def readyz_stays_200_while_the_edge_pauses_its_intake():
    # The report's 20 ms.  Measured before the fix: 1..18 writer-rule 503s in each of 6 runs (load
    # average 8..10 on 2 cores); after it, none in 6 runs.
    readyz_during_bursts(FLUSH_MS, READY_ROUNDS)


t.main()
