#!/usr/bin/env python3
"""bench/run.py: the benchmark suite (started by scripts/bench.sh).

Runs every scenario against this system (broker-writer + edge-gateway) and
nchan (nginx + libnginx-mod-nchan) with the same load client (bench/loadgen)
and the same publisher (bench/pubgen), prints one table and writes
docs/performance.md.  Every scenario is bounded in time.

Measurements:
  server CPU   utime+stime of the server process(es) from /proc/PID/stat over
               the measured window (the edge alone; the writer shown apart;
               nginx: its single worker).
  memory       VmRSS of the server before the streams connect and after N are
               open: per stream = delta / N.  Kernel socket buffers are not in
               VmRSS; /proc/net/sockstat is reported beside it.
  latency      e2e: the publisher's CLOCK_MONOTONIC stamp in the data -> the
               client reading the frame.  edge: loadgen's own nng sub on the
               writer's publish socket stamps each message's arrival; the same
               event read from the edge gives edge-added time (see
               docs/performance.md, "Method").

Environment: STUDIO_TEST_PG_DSN (an admin DSN), STUDIO_BIN_DIR (build/bin of a
RelWithDebInfo build), BENCH_TOOLS (the bench build dir), BENCH_NGINX (nginx
binary, empty = skip nchan), BENCH_NCHAN_MODULE (path of ngx_nchan_module.so).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402  (read-only use: Env, start_writer, start_edge, psql)

TOOLS = os.environ.get("BENCH_TOOLS", os.path.join(ROOT, "build-bench"))
LOADGEN = os.path.join(TOOLS, "loadgen")
PUBGEN = os.path.join(TOOLS, "pubgen")
SWEEP = os.path.join(TOOLS, "sweep")
NGINX = os.environ.get("BENCH_NGINX", "")
NCHAN_MODULE = os.environ.get("BENCH_NCHAN_MODULE", "/usr/lib/nginx/modules/ngx_nchan_module.so")
TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("[bench %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- /proc

def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sockstat_tcp_pages():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                m = re.search(r"mem (\d+)", line)
                return int(m.group(1)) if m else 0
    return 0


def nofile_hard():
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def raise_nofile():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 200000)), hard))
    except (ValueError, OSError):
        pass


# ---------------------------------------------------------------- processes

class Tool:
    """A bench tool process with its output captured in tmp."""

    def __init__(self, name, args, tmp):
        self.name = name
        self.out = os.path.join(tmp, name + ".out")
        self.err = os.path.join(tmp, name + ".err")
        self.p = subprocess.Popen(args, stdout=open(self.out, "wb"), stderr=open(self.err, "wb"),
                                  stdin=subprocess.DEVNULL)

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)
            return None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.wait(10)

    def json(self):
        with open(self.out) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("{")]
        if not lines:
            with open(self.err) as f:
                raise RuntimeError("%s printed no report: %s" % (self.name, f.read()[-2000:]))
        return json.loads(lines[-1])


def wait_file(path, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                return f.read().split()
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


class Loadgen:
    def __init__(self, tmp, name, addr, path, streams, rate=4000, sub=None, until_close=False,
                 max_seconds=600, extra=()):
        self.ready = os.path.join(tmp, name + ".ready")
        self.report = os.path.join(tmp, name + ".report")
        args = [LOADGEN, "--connect", addr, "--path", path, "--streams", str(streams),
                "--rate", str(rate), "--ready-file", self.ready, "--out", self.report,
                "--max-seconds", str(max_seconds), "--src-addrs", str(max(1, streams // 20000 + 1))]
        if sub:
            args += ["--sub", sub]
        if until_close:
            args.append("--until-close")
        args += list(extra)
        self.tool = Tool(name, args, tmp)

    def wait_ready(self, timeout):
        connected, failed = wait_file(self.ready, timeout, "streams to connect")
        return int(connected), int(failed)

    def start_window(self):
        self.tool.p.send_signal(signal.SIGUSR1)

    def end_window(self, timeout=20):
        if os.path.exists(self.report):
            os.unlink(self.report)
        self.tool.p.send_signal(signal.SIGUSR2)
        wait_file(self.report, timeout, "loadgen report")
        time.sleep(0.1)
        with open(self.report) as f:
            return json.loads(f.read())

    def stop(self):
        self.tool.stop()


class Nginx:
    """A private nginx + nchan: 127.0.0.1 only, worker_processes 1, own prefix."""

    def __init__(self, tmp, port, workers=1, buffer_len=1000):
        self.dir = os.path.join(tmp, "nginx-%d" % port)
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.addr = "127.0.0.1:%d" % port
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""load_module %(mod)s;
worker_processes %(workers)s;
worker_rlimit_nofile %(nofile)d;
error_log %(dir)s/logs/error.log warn;
pid %(dir)s/nginx.pid;
events { worker_connections %(conns)d; use epoll; multi_accept on; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    client_body_temp_path %(dir)s/body;
    nchan_shared_memory_size 256m;
    server {
        listen %(addr)s backlog=65535;
        location = /sub {
            nchan_subscriber eventsource;
            nchan_channel_id $arg_id;
        }
        location = /pub {
            nchan_publisher;
            nchan_channel_id $arg_id;
            nchan_message_buffer_length %(buf)d;
            nchan_message_timeout 60s;
        }
    }
}
""" % {"mod": NCHAN_MODULE, "workers": workers, "dir": self.dir, "addr": self.addr, "buf": buffer_len,
       "nofile": min(nofile_hard(), 200000), "conns": min(nofile_hard(), 200000) - 100})
        self.p = subprocess.Popen([NGINX, "-p", self.dir, "-c", conf, "-g", "daemon off;"],
                                  stdout=open(os.path.join(self.dir, "stdout"), "wb"),
                                  stderr=open(os.path.join(self.dir, "stderr"), "wb"))
        deadline = time.monotonic() + 15
        self.worker = None
        while time.monotonic() < deadline and self.worker is None:
            time.sleep(0.1)
            if self.p.poll() is not None:
                raise RuntimeError("nginx exited: " + open(os.path.join(self.dir, "stderr")).read())
            kids = self.children()
            if len(kids) >= workers:
                self.worker = kids[0]
        if self.worker is None:
            raise RuntimeError("nginx worker did not start")
        time.sleep(0.3)

    def children(self):
        kids = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        st = f.read().rsplit(")", 1)[1].split()
                    if int(st[1]) == self.p.pid:
                        kids.append(int(d))
                except OSError:
                    pass
        return sorted(kids)

    def pids(self):
        return self.children()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGQUIT)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


def pubgen(tmp, name, *args):
    return Tool(name, [PUBGEN] + [str(a) for a in args], tmp)


# ---------------------------------------------------------------- studio

def edge_hist(url, name="studio_edge_delivery_seconds"):
    """The cumulative buckets of one histogram of GET url/metrics: [(le, count)]."""
    st, _, body = harness.http_get(url.rstrip("/") + "/metrics")
    if st != 200:
        return []
    out = []
    for line in body.decode(errors="replace").splitlines():
        m = re.match(r'^%s_bucket\{le="([^"]+)"\}\s+(\S+)' % name, line)
        if m:
            out.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
    return out


def hist_quantiles(h0, h1, qs=(0.5, 0.99)):
    """Quantiles (ms) of the observations between two scrapes, linear within a bucket
    (the +Inf bucket reports its lower bound)."""
    d = [(le, c1 - c0) for (le, c1), (_, c0) in zip(h1, h0)] if h0 else list(h1)
    total = d[-1][1] if d else 0
    res = {"count": total}
    for q in qs:
        want, lo, prev = q * total, 0.0, 0.0
        v = None
        for le, c in d:
            if c >= want and total > 0:
                if le == float("inf"):
                    v = lo
                else:
                    span = c - prev
                    v = lo + (le - lo) * ((want - prev) / span if span > 0 else 1.0)
                break
            lo, prev = le, c
        res["p%g" % (q * 100)] = None if v is None else v * 1e3
    return res


class Studio:
    """One database, writer(s) and an edge through harness.Env."""

    def __init__(self, writers=1, edge=True, flush_ms=10, **edge_flags):
        self.env = harness.Env()
        self.env.__enter__()
        self.writers = [self.env.start_writer(flush_interval_ms=flush_ms, retention="0")
                        for _ in range(writers)]
        for w in self.writers:
            w.wait_ready(30)
        self.edge = None
        if edge:
            self.edge = self.env.start_edge(self.writers, flush_interval_ms=flush_ms, **edge_flags)
            self.edge.wait_ready(30)
            self.addr = self.edge.listen

    def close(self):
        self.env.__exit__(None, None, None)


# ---------------------------------------------------------------- scenarios

def idle(args, tmp, n, system):
    raise_nofile()
    path_s = "/v1/stream?topic=idle"
    path_n = "/sub?id=idle"
    if system == "studio":
        s = Studio()
        pid, addr, path = s.edge.pid, s.addr, path_s
        closer = s.close
    else:
        ng = Nginx(tmp, harness.free_port())
        pid, addr, path = ng.worker, ng.addr, path_n
        closer = ng.stop
    try:
        time.sleep(0.5)
        rss0, sock0 = rss_kb(pid), sockstat_tcp_pages()
        lg = Loadgen(tmp, "idle-%s-%d" % (system, n), addr, path, n, rate=args.connect_rate,
                     max_seconds=240)
        t0 = time.monotonic()
        connected, failed = lg.wait_ready(200)
        up_s = time.monotonic() - t0
        time.sleep(2)
        rss1, sock1 = rss_kb(pid), sockstat_tcp_pages()
        lg.stop()
        return {"system": system, "streams": n, "connected": connected, "failed": failed,
                "rss0_kb": rss0, "rss1_kb": rss1,
                "per_stream_b": (rss1 - rss0) * 1024 / max(1, connected),
                "kernel_tcp_per_stream_b": (sock1 - sock0) * 4096 / max(1, connected) / 2,
                "connect_s": up_s}
    finally:
        closer()


def fanout(args, tmp, n, rate, system, flush_ms=1000, floor_threads=1, **edge_flags):
    raise_nofile()
    dur = args.window
    if system == "burst":
        # The same-shape floor: bench/sweep --sub takes the writer's messages
        # as the edge would and writes each one, as one burst, to every stream.
        s = Studio(flush_ms=flush_ms, edge=False)
        addr = "127.0.0.1:%d" % harness.free_port()
        fl = Tool("burst-%d-%d-t%d" % (n, rate, floor_threads),
                  [SWEEP, "--listen", addr, "--sub", s.writers[0].publish, "--threads", str(floor_threads),
                   "--report", os.path.join(tmp, "burst-%d.json" % n)], tmp)
        wait_file(fl.out, 10, "sweep to listen")
        srv_pids, path = [fl.p.pid], "/sse"
        writer_pid = s.writers[0].pid
        sub = s.writers[0].publish
        pub_args = ["--mode", "nng", "--url", s.writers[0].ingest, "--topic", "fan", "--rate", rate,
                    "--duration", dur + args.warmup + 3, "--batch", 1000, "--inflight", 64, "--pad", 64]

        def closer():
            fl.stop()
            s.close()
    elif system == "studio":
        s = Studio(flush_ms=flush_ms, **edge_flags)
        srv_pids, addr, path = [s.edge.pid], s.addr, "/v1/stream?topic=fan"
        writer_pid = s.writers[0].pid
        sub = s.writers[0].publish
        pub_args = ["--mode", "nng", "--url", s.writers[0].ingest, "--topic", "fan", "--rate", rate,
                    "--duration", dur + args.warmup + 3, "--batch", 1000, "--inflight", 64, "--pad", 64]
        closer = s.close
    elif system == "floor":
        # No server logic at all: bench/sweep writes each event to every
        # stream itself (the write floor, see sweep.c).
        addr = "127.0.0.1:%d" % harness.free_port()
        fl = Tool("sweep-%d-%d" % (n, rate), [SWEEP, "--listen", addr, "--rate", str(rate), "--pad", "64",
                                               "--report", os.path.join(tmp, "sweep-%d.json" % n)], tmp)
        wait_file(fl.out, 10, "sweep to listen")
        srv_pids, path, writer_pid, sub, pub_args = [fl.p.pid], "/sse", None, None, None
        closer = fl.stop
    else:
        ng = Nginx(tmp, harness.free_port(), buffer_len=max(100, int(rate * 5)))
        srv_pids, addr, path = [ng.worker], ng.addr, "/sub?id=fan"
        writer_pid = None
        sub = None
        pub_args = ["--mode", "http", "--url", ng.addr, "--path", "/pub?id=fan", "--rate", rate,
                    "--duration", dur + args.warmup + 3, "--pad", 64]
        closer = ng.stop
    name = "fan-%s-%d" % (system, n)
    try:
        lg = Loadgen(tmp, name, addr, path, n, rate=args.connect_rate, sub=sub,
                     max_seconds=dur + args.warmup + 200)
        connected, failed = lg.wait_ready(120)
        if system == "burst":
            fl.p.send_signal(signal.SIGHUP)  # dial the writer now, after loadgen's sub (sweep.c)
            time.sleep(0.5)
        pg = pubgen(tmp, name + "-pub", *pub_args) if pub_args else None
        time.sleep(args.warmup)
        c0 = sum(cpu_s(p) for p in srv_pids)
        w0 = cpu_s(writer_pid) if writer_pid else 0
        l0 = cpu_s(lg.tool.p.pid)
        h0 = edge_hist(s.edge.url) if system == "studio" else None
        if system in ("floor", "burst"):
            fl.p.send_signal(signal.SIGUSR1)
        lg.start_window()
        t0 = time.monotonic()
        time.sleep(dur)
        rep = lg.end_window()
        h1 = edge_hist(s.edge.url) if system == "studio" else None
        el = time.monotonic() - t0
        c1 = sum(cpu_s(p) for p in srv_pids)
        w1 = cpu_s(writer_pid) if writer_pid else 0
        l1 = cpu_s(lg.tool.p.pid)
        floor = None
        if system == "floor":
            fl.stop()
            with open(os.path.join(tmp, "sweep-%d.json" % n)) as f:
                floor = json.loads(f.read())
        if system == "burst":
            fl.stop()
            with open(os.path.join(tmp, "burst-%d.json" % n)) as f:
                floor = json.loads(f.read())
        if pg:
            pg.wait(dur + 30)
        lg.stop()
        items = rep["items"]
        res = {"system": system, "streams": n, "rate": rate, "flush_ms": flush_ms if writer_pid else None,
               "client_cpu_s": l1 - l0, "connected": connected, "failed": failed,
               "window_s": el, "items": items, "expected": int(n * rate * el),
               "server_cpu_s": c1 - c0, "writer_cpu_s": w1 - w0,
               "cpu_s_per_mframe": (c1 - c0) / items * 1e6 if items else None,
               "writer_cpu_s_per_mframe": (w1 - w0) / items * 1e6 if items and writer_pid else None,
               "e2e": rep["e2e_us"], "edge": rep.get("edge_us"),
               "edge_internal": hist_quantiles(h0, h1) if h1 else None,
               "unmatched": rep.get("unmatched"), "resyncs": rep["resyncs"],
               "streams_without_items": rep["streams_without_items"], "reordered": rep["reordered"],
               "pub": pg.json() if pg else None, "sweep": floor}
        if floor:
            # The floor's own view: sweep start -> write returned, per write (us -> ms).
            res["edge_internal"] = {"count": floor["write_us"]["count"], "p50": floor["write_us"]["p50"] / 1e3,
                                    "p99": floor["write_us"]["p99"] / 1e3}
        return res
    finally:
        closer()


def same_shape(args, tmp, row, flush_ms):
    """Beside a fan-out row's studio run (one thread): the edge with --threads 2
    and the same-shape floor (bench/sweep --sub) on one and two threads, the
    same writer, publisher and flush interval (docs/performance.md, "The
    same-shape floor")."""
    n, rate = row["n"], row["rate"]
    for key, system, kw in (("studio_t2", "studio", {"threads": 2}),
                            ("burst_t1", "burst", {"floor_threads": 1}),
                            ("burst_t2", "burst", {"floor_threads": 2})):
        log("fan-out %d x %d/s: %s" % (n, rate, key))
        for attempt in (1, 2):
            try:
                row[key] = fanout(args, tmp, n, rate, system, flush_ms=flush_ms, **kw)
                break
            except Exception as e:  # e.g. a port taken between free_port() and the bind: once more
                if attempt == 2:
                    raise
                log("%s failed, once more: %s" % (key, str(e)[-300:]))
        log(json.dumps(row[key]))


def same_shape_table(R):
    """Rows of the same-shape comparison: edge-added latency at the client
    (loadgen's sub stamps the message, the client reads the frame), the edge
    against bench/sweep --sub on the same thread count."""
    L = []
    for r in R.get("fanout", []):
        for threads, ek, fk in ((1, "studio", "burst_t1"), (2, "studio_t2", "burst_t2")):
            e, f = r.get(ek), r.get(fk)
            if not (e and f and e.get("edge") and f.get("edge")):
                continue
            ee, fe = e["edge"], f["edge"]
            met = "yes" if fe["p99"] and ee["p99"] <= 1.2 * fe["p99"] else "no"
            L.append("| fan-out %d x %d/s (flush %d ms), %d thread%s | edge-added latency at the client, p50 / p99 (ms), "
                     "against the same-shape floor | %.2f / %.2f | - | | %.2f / %.2f (same-shape floor) | %s | p99 <= 1.2x | %s |" % (
                         r["n"], r["rate"], e["flush_ms"], threads, "s" if threads > 1 else "",
                         ee["p50"] / 1e3, ee["p99"] / 1e3, fe["p50"] / 1e3, fe["p99"] / 1e3,
                         ratio(ee["p99"], fe["p99"]), met))
            L.append("| fan-out %d x %d/s (flush %d ms), %d thread%s | CPU-s per 1M frames; frames delivered / expected "
                     "| %s; %d / %d | - | | %s; %d / %d (same-shape floor) | %s | | |" % (
                         r["n"], r["rate"], e["flush_ms"], threads, "s" if threads > 1 else "",
                         fmt(e["cpu_s_per_mframe"], "%.2f"), e["items"], e["expected"],
                         fmt(f["cpu_s_per_mframe"], "%.2f"), f["items"], f["expected"],
                         ratio(e["cpu_s_per_mframe"], f["cpu_s_per_mframe"])))
    return L

def buckets_quantiles(lists, qs=(50, 99)):
    """Percentiles (us) of several loadgen histograms added up ([[upper bound us, count], ...] each)."""
    tot = {}
    for bl in lists:
        for v, c in bl:
            tot[v] = tot.get(v, 0) + c
    items = sorted(tot.items())
    n = sum(c for _, c in items)
    res = {"count": n}
    for q in qs:
        want, seen, val = max(1, int(n * q / 100.0 + 0.5)), 0, None
        for v, c in items:
            seen += c
            if seen >= want:
                val = v
                break
        res["p%g" % q] = val
    return res


def listen_overflows():
    """TcpExt ListenOverflows of this network namespace (accept queues that were full)."""
    with open("/proc/net/netstat") as f:
        lines = [ln.split() for ln in f if ln.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1])).get("ListenOverflows", 0)) if len(lines) >= 2 else None


def fifty(args, tmp):
    """51,000 streams on one machine as a deployment runs them: 3 edges behind the
    same 2 writers, each under this machine's 20,000 descriptors, the load spread
    over 4 loadgen processes; 2 events/s for the window; one edge drained (SIGTERM,
    as a rolling update) part-way through while its replacement is up (maxSurge 1).
    Streams go round-robin over the 3 edges; a drained stream comes back after its
    hint with Last-Event-ID to the edge with the fewest streams (least_conn, the
    Ingress of scripts/cluster.sh), so the replacement takes them."""
    raise_nofile()
    n, rate, nedges, nprocs = args.fifty_n, 2, 3, 4
    window, drain_at, grace = args.fifty_window, args.fifty_drain_at, args.fifty_grace
    hard = nofile_hard()
    if n // nedges + 1000 > hard or n // nprocs + 1000 > hard:
        return {"skipped": "RLIMIT_NOFILE hard limit %d: %d streams an edge or %d a client process do not fit"
                % (hard, n // nedges, n // nprocs)}
    load0 = os.getloadavg()
    s = Studio(writers=2, edge=False, flush_ms=1000)
    try:
        # edges[nedges] is the replacement: ready before the drain, no stream until then.
        edges = [s.env.start_edge(s.writers, flush_interval_ms=1000, drain_grace_s=grace)
                 for _ in range(nedges + 1)]
        for e in edges:
            e.wait_ready(30)
        time.sleep(0.5)
        rss0 = [rss_kb(e.pid) for e in edges]
        lo0 = listen_overflows()
        addrs = ",".join(e.listen for e in edges)
        t0 = time.monotonic_ns()
        lgs = []
        for k in range(nprocs):
            share = n // nprocs + (1 if k < n % nprocs else 0)
            lgs.append(Loadgen(tmp, "fifty-%d" % k, addrs, "/v1/stream?topic=fifty", share,
                               rate=args.fifty_connect_rate / nprocs, max_seconds=window + 300,
                               extra=["--initial", str(nedges), "--resume"]))
        ready = [lg.wait_ready(120) for lg in lgs]
        lo1 = listen_overflows()
        log("fifty: %d streams up in %.1f s" % (sum(c for c, _ in ready), (time.monotonic_ns() - t0) / 1e9))
        pg = pubgen(tmp, "fifty-pub", "--mode", "nng", "--url", s.writers[0].ingest, "--topic", "fifty",
                    "--rate", rate, "--duration", args.warmup + window, "--batch", 1000, "--inflight", 64,
                    "--pad", 64, "--n-base", 1)
        time.sleep(args.warmup)
        open0 = [harness.metric(e.url, "studio_streams_open") for e in edges]
        h0 = [edge_hist(e.url) for e in edges]
        c0 = [cpu_s(e.pid) for e in edges]
        w0 = [cpu_s(w.pid) for w in s.writers]
        rss_mark = [rss_kb(e.pid) for e in edges]
        l0 = [cpu_s(lg.tool.p.pid) for lg in lgs]
        c_last, rss_max = list(c0), list(rss_mark)
        h_end = [None] * len(edges)
        for lg in lgs:
            lg.start_window()
        tmark = time.monotonic()
        drained = edges[0]
        t_drain = t_exit = None
        while time.monotonic() < tmark + window:
            for i, e in enumerate(edges):
                if e.alive():
                    try:
                        c_last[i], r = cpu_s(e.pid), rss_kb(e.pid)
                        rss_max[i] = max(rss_max[i], r)
                    except OSError:
                        pass
            if t_drain is None and time.monotonic() >= tmark + drain_at:
                h_end[0] = edge_hist(drained.url)
                t_drain = time.monotonic_ns()
                drained.signal(signal.SIGTERM)
                log("fifty: drained edge 0 (SIGTERM)")
            if t_drain is not None and t_exit is None and not drained.alive():
                t_exit = time.monotonic_ns()
            time.sleep(0.5)
        pg.wait(60)
        # The last events: one flush interval, then their delivery.
        time.sleep(3)
        # 12,750 streams a process on a shared 2-core machine: a report may wait its turn.
        reps = [lg.end_window(120) for lg in lgs]
        el = time.monotonic() - tmark
        for i, e in enumerate(edges):
            if e.alive():
                h_end[i] = edge_hist(e.url)
                c_last[i] = cpu_s(e.pid)
        open1 = [harness.metric(e.url, "studio_streams_open") if e.alive() else 0 for e in edges]
        rss_end = [rss_kb(e.pid) if e.alive() else None for e in edges]
        w1 = [cpu_s(w.pid) for w in s.writers]
        l1 = [cpu_s(lg.tool.p.pid) for lg in lgs]
        for lg in lgs:
            lg.stop()
        pub = pg.json()
        lo2 = listen_overflows()
        # The edges' histograms added up (the drained one up to its drain).
        hsum = []
        for a, b in zip(h0, h_end):
            if not b:
                continue
            d = [(le, c1 - (a[k][1] if a else 0)) for k, (le, c1) in enumerate(b)]
            hsum = d if not hsum else [(le, c + d[k][1]) for k, (le, c) in enumerate(hsum)]
        roles = ["drained"] + ["serving"] * (nedges - 1) + ["replacement"]
        per_edge = [{"role": roles[i], "rss_idle_kb": rss0[i], "rss_mark_kb": rss_mark[i], "rss_max_kb": rss_max[i],
                     "rss_end_kb": rss_end[i], "cpu_s": c_last[i] - c0[i], "streams_at_mark": open0[i],
                     "streams_at_end": open1[i]} for i in range(len(edges))]
        last_pub = pub["ok"]  # --n-base 1: the numbers are 1..ok
        res = {"streams": n, "rate": rate, "edges": nedges, "client_procs": nprocs, "window_s": el,
               "drain_at_s": drain_at, "grace_s": grace, "connect_rate": args.fifty_connect_rate,
               "connected": sum(c for c, _ in ready), "failed": sum(f for _, f in ready),
               "connect_failures": {k: sum(r[k] for r in reps) for k in ("fail_connect", "fail_head", "fail_read")},
               "connect_errno": sorted({r["fail_errno"] for r in reps}),
               "reconnect_reasons": {k: sum(r.get("reconnect_" + k, 0) for r in reps)
                                     for k in ("draining", "slow", "other")},
               "listen_overflows_connect": lo1 - lo0 if lo0 is not None else None,
               "listen_overflows_window": lo2 - lo1 if lo0 is not None else None,
               "connect_s": (max(r["t_all_open_ns"] for r in reps) - t0) / 1e9
               if all(r["t_all_open_ns"] for r in reps) else None,
               "published": pub["ok"], "pub_busy": pub["busy"], "pub_errors": pub["errors"],
               "items": sum(r["items"] for r in reps),
               "expected": sum(r["items_expected_by_n"] for r in reps),
               # the items of the streams the expectation is about (those that had read one at the start)
               "items_by_n": sum(r.get("items_by_n", 0) for r in reps),
               "gaps": sum(r["gaps"] for r in reps), "lost": sum(r["lost"] for r in reps),
               "duplicates": sum(r["reordered"] for r in reps), "resyncs": sum(r["resyncs"] for r in reps),
               "last_n_min": min(r["last_n_min"] for r in reps), "last_n_max": max(r["last_n_max"] for r in reps),
               "all_at_last": all(r["last_n_min"] == last_pub for r in reps),
               "open_at_end": sum(r["open"] for r in reps),
               "e2e_us": buckets_quantiles([r["e2e_buckets"] for r in reps]),
               "edge_internal": hist_quantiles(None, hsum) if hsum else None,
               "per_edge": per_edge, "writer_cpu_s": [b - a for a, b in zip(w0, w1)],
               "client_cpu_s": sum(b - a for a, b in zip(l0, l1)),
               "drain": {"ends": sum(r["ends"] for r in reps), "reconnects": sum(r["reconnects"] for r in reps),
                         "retry_fail": sum(r["retry_fail"] for r in reps), "back": sum(r["back"] for r in reps),
                         "waiting": sum(r["waiting"] for r in reps),
                         "first_end_s": (min(r["t_first_end_ns"] for r in reps if r["t_first_end_ns"]) - t_drain) / 1e9
                         if t_drain and any(r["t_first_end_ns"] for r in reps) else None,
                         "all_heads_s": (max(r["t_last_head_ns"] for r in reps) - t_drain) / 1e9 if t_drain else None,
                         "all_back_s": (max(r["t_last_back_ns"] for r in reps) - t_drain) / 1e9 if t_drain else None,
                         "late_p99_ms_max": max(r["late_us"]["p99"] for r in reps) / 1e3,
                         "late_max_ms": max(r["late_us"]["max"] for r in reps) / 1e3,
                         "edge_exit_s": (t_exit - t_drain) / 1e9 if t_exit else None,
                         "per_target_open": [sum(r["per_target_open"][t] for r in reps) for t in range(len(edges))]},
               "loadavg_before": load0, "loadavg_after": os.getloadavg()}
        return res
    finally:
        s.close()


def copy_rows_file(tmp, rows, pad):
    path = os.path.join(tmp, "copy-%d.csv" % rows)
    p = "x" * pad
    with open(path, "w") as f:
        for i in range(rows):
            f.write('ingest,{},"{""n"":%d,""t"":%d,""p"":""%s""}"\n' % (i, time.monotonic_ns(), p))
    return path


def psql_time(dsn, sql):
    t0 = time.monotonic()
    subprocess.run([harness.PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql],
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def http_ingest(port, seconds, conns=64, batch=1000):
    """POST /v1/events over conns keep-alive connections for `seconds`: events/s committed.
    The client is Python threads with a body encoded once (per request only the
    send and the answer's parse), so on a 2-core machine it competes with the writer."""
    import http.client
    import threading
    body = json.dumps([{"topic": "ingest", "data": {"n": i, "p": "x" * 16}} for i in range(batch)],
                      separators=(",", ":")).encode()
    hdrs = {"Content-Type": "application/json"}
    tally = {"ok": 0, "busy": 0, "errors": 0}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < end:
            try:
                c.request("POST", "/v1/events", body=body, headers=hdrs)
                r = c.getresponse()
                r.read()
                k = "ok" if r.status == 200 else "busy" if r.status == 429 else "errors"
            except (OSError, http.client.HTTPException):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                k = "errors"
            with lock:
                tally[k] += batch if k == "ok" else 1

    t0 = time.monotonic()
    ths = [threading.Thread(target=run) for _ in range(conns)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    el = time.monotonic() - t0
    return {"http_committed": tally["ok"], "http_elapsed_s": el, "http_rate": tally["ok"] / el,
            "http_busy": tally["busy"], "http_errors": tally["errors"], "http_conns": conns, "http_batch": batch}


def ingest(args, tmp, writers):
    s = Studio(writers=writers, edge=False, flush_ms=args.ingest_flush_ms)
    try:
        tools = []
        for i, w in enumerate(s.writers):
            tools.append(pubgen(tmp, "ingest%d-%d" % (writers, i), "--mode", "nng", "--url", w.ingest,
                                "--topic", "ingest", "--rate", 0, "--duration", args.ingest_s,
                                "--batch", 2000, "--inflight", 96, "--pad", 16,
                                "--n-base", i * 100000000))
        for t in tools:
            t.wait(args.ingest_s + 60)
        reps = [t.json() for t in tools]
        ok = sum(r["ok"] for r in reps)
        el = max(r["elapsed_s"] for r in reps)
        rows = int(harness.psql_one(s.env.dsn, "SELECT count(*) FROM broker_event"))
        res = {"writers": writers, "committed": ok, "rows": rows, "elapsed_s": el, "rate": ok / el,
               "busy": sum(r["busy"] for r in reps), "errors": sum(r["errors"] for r in reps)}
        if writers == 1:
            n = min(max(ok, 100000), 1000000)
            f = copy_rows_file(tmp, n, 16)
            secs = psql_time(s.env.dsn, "\\copy broker_event (topic, about, data) FROM '%s' CSV" % f)
            res["copy_rows"], res["copy_s"], res["copy_rate"] = n, secs, n / secs
            os.unlink(f)
            # publishing over HTTP, on a writer of its own beside the nng one
            port = harness.free_port()
            hw = s.env.start_writer(flush_interval_ms=args.ingest_flush_ms, retention="0",
                                    ingest_http="127.0.0.1:%d" % port)
            hw.wait_ready(30)
            res.update(http_ingest(port, args.ingest_s))
            # single-event requests: each waits for its commit (a flush interval), so over 64
            # connections this is about 64 / the commit latency, whatever the writer's capacity
            one = http_ingest(port, args.ingest_s, batch=1)
            res.update({"http1_rate": one["http_rate"], "http1_busy": one["http_busy"], "flush_ms": args.ingest_flush_ms,
                        "http1_errors": one["http_errors"]})
        return res
    finally:
        s.close()


def replay(args, tmp):
    n = args.replay_n
    s = Studio(replay_cap=max(200000, n * 2), flush_ms=1000)
    try:
        pg = pubgen(tmp, "replay-fill", "--mode", "nng", "--url", s.writers[0].ingest, "--topic",
                    "replay", "--rate", 0, "--total", n, "--batch", 5000, "--inflight", 40, "--pad", 64)
        pg.wait(120)
        fill = pg.json()
        runs, copies = [], []
        # Best of 5: on a shared machine one run in three is slowed by a neighbour.
        for i in range(5):
            lg = Loadgen(tmp, "replay-%d" % i, s.addr, "/v1/stream?topic=replay&until=head", 1,
                         until_close=True, max_seconds=120)
            lg.tool.wait(130)
            with open(lg.report) as f:
                rep = json.loads(f.read())
            runs.append({"items": rep["items"], "s": rep["last_close_s"],
                         "rate": rep["items"] / rep["last_close_s"] if rep["last_close_s"] > 0 else 0,
                         "terminal": rep["terminal"], "resyncs": rep["resyncs"]})
            copies.append(psql_time(s.env.dsn, "COPY (SELECT seq, topic, about, data FROM broker_event "
                                    "WHERE topic = 'replay' AND seq > 0 ORDER BY seq) TO STDOUT"))
        best = max(runs, key=lambda r: r["rate"])
        csec = min(copies)
        return {"events": n, "filled": fill["ok"], "runs": runs, "rate": best["rate"],
                "items": best["items"], "copy_s": csec, "copy_rate": fill["ok"] / csec}
    finally:
        s.close()


def big_json(size):
    """A JSON string of random base64 (incompressible: stored out of line,
    uncompressed, in the TOAST relation), size bytes of JSON text at most."""
    import base64
    return json.dumps(base64.b64encode(os.urandom((size - 2) // 4 * 3)).decode())


def publish_big(writer, topic, n, size, batch=50):
    """n events of size bytes of incompressible JSON text on topic, batch per request."""
    seqs = []
    for b in range(0, n, batch):
        evs = [{"topic": topic, "data": big_json(size)} for _ in range(min(batch, n - b))]
        rep = harness.request(writer, evs, timeout_ms=120000)
        if not (isinstance(rep, dict) and rep.get("ok") is True):
            raise RuntimeError("publish of %d large events refused: %r" % (len(evs), rep))
        seqs += [int(x) for x in rep["seqs"]]
    return seqs


def replay_large(args, tmp):
    """A resume over large incompressible rows (MiB/s of data) beside COPY TO of the same rows."""
    n, size = args.replay_large_n, 256 * 1024
    s = Studio(replay_cap=max(200000, n * 2), flush_ms=100)
    try:
        seqs = publish_big(s.writers[0], "big", n, size)
        mib = float(harness.psql_one(s.env.dsn, "SELECT sum(octet_length(data::text)) / 1048576.0 "
                                                "FROM broker_event WHERE topic = 'big'"))
        runs, copies = [], []
        for i in range(5):
            t0 = time.monotonic()
            p = subprocess.run(["curl", "-sS", "-N", "--max-time", "300", "-o", "/dev/null",
                                "-w", "%{size_download}", "-H", "Last-Event-ID: %d" % (seqs[0] - 1),
                                "http://%s/v1/stream?topic=big&format=ndjson&until=head" % s.addr],
                               capture_output=True, text=True, timeout=320)
            secs = time.monotonic() - t0
            runs.append({"s": secs, "bytes": int(p.stdout or 0), "rc": p.returncode, "mib_s": mib / secs})
            copies.append(psql_time(s.env.dsn, "COPY (SELECT seq, topic, about, data FROM broker_event "
                                    "WHERE topic = 'big' AND seq > 0 ORDER BY seq) TO STDOUT"))
        best = max(runs, key=lambda r: r["mib_s"])
        csec = min(copies)
        return {"events": n, "size": size, "data_mib": mib, "runs": runs, "mib_s": best["mib_s"],
                "copy_s": csec, "copy_mib_s": mib / csec}
    finally:
        s.close()


class _Ndjson:
    """A live NDJSON stream read on a thread: arrival time per item id."""

    def __init__(self, addr, query):
        import http.client
        import threading
        host, port = addr.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=300)
        self.conn.request("GET", "/v1/stream?format=ndjson&" + query)
        self.resp = self.conn.getresponse()
        self.arrivals, self.types = [], []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for line in iter(self.resp.readline, b""):
                env = json.loads(line)
                self.types.append(env["type"])
                if env["type"] == "item":
                    self.arrivals.append((int(env["id"]), time.monotonic()))
        except Exception:
            pass

    def close(self):
        self.conn.close()


def gap_fill(args, tmp):
    """A gap of large incompressible rows filled from PostgreSQL: the edge
    dials one writer (stopped meanwhile), another commits the rows; from the
    first writer's release (its next tick reveals the head) to the last
    event on a live stream."""
    n, size = args.fill_n, 256 * 1024
    s = Studio(flush_ms=100)
    try:
        # A second edge with a long flush interval: it stays ready while its writer is stopped.
        edge = s.env.start_edge([s.writers[0]], flush_interval_ms=20000)
        edge.wait_ready(30)
        st = _Ndjson(edge.listen, "topic=big")
        harness.wait_until(lambda: "heartbeat" in st.types, 30, "the stream's position")
        hidden = s.env.start_writer(flush_interval_ms=100, retention="0")
        hidden.wait_ready(30)
        os.kill(s.writers[0].pid, signal.SIGSTOP)
        try:
            seqs = publish_big(hidden, "big", n, size)
        finally:
            t0 = time.monotonic()
            os.kill(s.writers[0].pid, signal.SIGCONT)
        harness.wait_until(lambda: len(st.arrivals) >= n, 300, "the filled events")
        arr = list(st.arrivals)
        st.close()
        fills = harness.metric(edge.url, "studio_gap_fills_total")
        return {"events": n, "size": size, "received": len(arr), "in_order": [i for i, _ in arr] == seqs,
                "release_to_last_s": arr[-1][1] - t0, "first_to_last_s": arr[-1][1] - arr[0][1],
                "fill_chunks": fills}
    finally:
        s.close()


# ---------------------------------------------------------------- how it scales (issue 27, item 4)

SUBGEN = os.path.join(TOOLS, "subgen")


def load_avg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def median_range(vals):
    """(median, min, max) of the non-None values, or (None, None, None)."""
    v = sorted(x for x in vals if x is not None)
    if not v:
        return None, None, None
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return m, v[0], v[-1]


class Subgen:
    """bench/subgen: N nng sub sockets on one publish URL (stand-ins for N edges)."""

    def __init__(self, tmp, name, url, subs):
        self.ready = os.path.join(tmp, name + ".ready")
        self.report = os.path.join(tmp, name + ".report")
        self.tool = Tool(name, [SUBGEN, "--url", url, "--subs", str(subs), "--ready-file", self.ready,
                                "--out", self.report], tmp)

    def wait_ready(self, timeout):
        wait_file(self.ready, timeout, "subgen's sockets")

    def start_window(self):
        self.tool.p.send_signal(signal.SIGUSR1)

    def end_window(self):
        if os.path.exists(self.report):
            os.unlink(self.report)
        self.tool.p.send_signal(signal.SIGUSR2)
        wait_file(self.report, 20, "subgen report")
        with open(self.report) as f:
            return json.loads(f.read())

    def stop(self):
        self.tool.stop()


def scale_fanout_one(args, tmp, subs, rate, rep):
    """One writer (flush 10 ms), pubgen at `rate` events/s, subgen with `subs`
    sockets on the writer's publish URL: the writer's CPU over the window and
    the subscribers' arrival times."""
    s = Studio(edge=False, flush_ms=10)
    try:
        w = s.writers[0]
        sg = Subgen(tmp, "subgen-%d-%d" % (subs, rep), w.publish, subs)
        sg.wait_ready(30)
        pg = pubgen(tmp, "scalepub-%d-%d" % (subs, rep), "--mode", "nng", "--url", w.ingest, "--topic", "fan",
                    "--rate", rate, "--duration", args.warmup + args.window + 2, "--batch", 1000,
                    "--inflight", 16, "--pad", 64)
        time.sleep(args.warmup)
        la = load_avg()
        c0, g0, t0 = cpu_s(w.pid), cpu_s(sg.tool.p.pid), time.monotonic()
        sg.start_window()
        time.sleep(args.window)
        rep_ = sg.end_window()
        c1, g1, el = cpu_s(w.pid), cpu_s(sg.tool.p.pid), time.monotonic() - t0
        pg.wait(args.window + 60)
        pub = pg.json()
        sg.stop()
        ev = rep_["events_min_per_sub"]
        return {"subs": subs, "rate": rate, "window_s": el, "load": la,
                "writer_cpu_s": c1 - c0, "writer_cpu_pct": (c1 - c0) / el * 100,
                "writer_cpu_s_per_mev": (c1 - c0) / ev * 1e6 if ev else None,
                "subgen_cpu_s": g1 - g0, "events_per_sub_min": ev, "events_per_sub_max": rep_["events_max_per_sub"],
                "expected_per_sub": int(rate * el), "msgs": rep_["msgs"], "unparsed": rep_["unparsed"],
                "e2e_last_us": rep_["e2e_last_us"], "e2e_first_us": rep_["e2e_first_us"], "lag_us": rep_["lag_us"],
                "pub_ok": pub["ok"], "pub_busy": pub["busy"], "pub_errors": pub["errors"]}
    finally:
        s.close()


def scale_fanout(args, tmp, out):
    """Fills out (kept by the caller, so a run that fails later keeps what was measured)."""
    for subs in (1, 8, 32):
        runs = []
        for rep in range(args.repeat):
            log("scale_fanout: %d subscribers, run %d" % (subs, rep + 1))
            r = scale_fanout_one(args, tmp, subs, args.fan_rate, rep)
            log(json.dumps({k: r[k] for k in ("writer_cpu_pct", "events_per_sub_min", "expected_per_sub", "load")}))
            runs.append(r)
        out.append({"subs": subs, "rate": args.fan_rate, "runs": runs})


def scale_ingest_one(args, tmp, writers, rep):
    """writers processes on one database, a full-speed pubgen each (as ingest())."""
    s = Studio(writers=writers, edge=False, flush_ms=args.ingest_flush_ms)
    try:
        tools = []
        la = load_avg()
        c0 = [cpu_s(w.pid) for w in s.writers]
        f0 = [harness.metric(w.http_url, "studio_writer_flush_seconds_sum") or 0.0 for w in s.writers]
        for i, w in enumerate(s.writers):
            tools.append(pubgen(tmp, "scaleing%d-%d-%d" % (writers, i, rep), "--mode", "nng", "--url", w.ingest,
                                "--topic", "ingest", "--rate", 0, "--duration", args.ingest_s,
                                "--batch", 2000, "--inflight", 96, "--pad", 16, "--n-base", i * 100000000))
        for t in tools:
            t.wait(args.ingest_s + 60)
        c1 = [cpu_s(w.pid) for w in s.writers]
        f1 = [harness.metric(w.http_url, "studio_writer_flush_seconds_sum") or 0.0 for w in s.writers]
        reps = [t.json() for t in tools]
        ok = sum(r["ok"] for r in reps)
        el = max(r["elapsed_s"] for r in reps)
        res = {"writers": writers, "committed": ok, "elapsed_s": el, "rate": ok / el, "load": la,
               "per_writer": [r["ok"] / r["elapsed_s"] if r["elapsed_s"] else 0 for r in reps],
               "writer_cpu_s": [b - a for a, b in zip(c0, c1)],
               # seconds a flush of some writer was out (sent -> result, the lock wait included)
               # per second: with one writer, the share of the time PostgreSQL had a flush to work on
               "flush_busy": sum(b - a for a, b in zip(f0, f1)) / el if el else None,
               "busy": sum(r["busy"] for r in reps), "errors": sum(r["errors"] for r in reps),
               "flushes": int(harness.psql_one(s.env.dsn, "SELECT count(*) FROM broker_flush"))}
        # the reference in the same database, same moment: as many rows by one \copy
        n = min(max(ok, 100000), 1000000)
        f = copy_rows_file(tmp, n, 16)
        secs = psql_time(s.env.dsn, "\\copy broker_event (topic, about, data) FROM '%s' CSV" % f)
        os.unlink(f)
        res.update({"copy_rows": n, "copy_s": secs, "copy_rate": n / secs})
        return res
    finally:
        s.close()


def scale_ingest(args, tmp, counts, out):
    """Fills out, as scale_fanout."""
    for w in counts:
        runs = []
        for rep in range(args.repeat):
            log("scale ingest: %d writer(s), run %d" % (w, rep + 1))
            r = scale_ingest_one(args, tmp, w, rep)
            log(json.dumps({k: r[k] for k in ("rate", "copy_rate", "per_writer", "flush_busy", "busy", "errors", "load")}))
            runs.append(r)
        out.append({"writers": w, "runs": runs})


def scale_table(R):
    """Median [min-max] of 3 runs, with the load averages they ran under."""
    L = []

    def mr(vals, spec="%.0f"):
        m, lo, hi = median_range(vals)
        return "-" if m is None else ("%s [%s-%s]" % (spec % m, spec % lo, spec % hi))

    def loads(runs):
        return " ".join("%.1f" % r["load"][0] for r in runs)

    if R.get("scale_fanout"):
        L.append("")
        L.append("How it scales: publish fan-out (1 writer, flush 10 ms, pubgen at %d events/s, bench/subgen "
                 "sockets as edges; median [min-max] of %d runs)" % (R["scale_fanout"][0]["rate"],
                                                                    len(R["scale_fanout"][0]["runs"])))
        L.append("")
        L.append("| subscribed edges | writer CPU % | writer CPU-s per 1M events | events per sub / expected | "
                 "send -> arrival, newest event of a message, p50 / p99 (ms) | fan-out lag p99 / max (ms) | load (1 min) |")
        L.append("| --- | --- | --- | --- | --- | --- | --- |")
        for row in R["scale_fanout"]:
            rs = row["runs"]
            L.append("| %d | %s | %s | %s / %s | %s / %s | %s / %s | %s |" % (
                row["subs"], mr([r["writer_cpu_pct"] for r in rs], "%.1f"),
                mr([r["writer_cpu_s_per_mev"] for r in rs], "%.2f"),
                mr([r["events_per_sub_min"] for r in rs]), mr([r["expected_per_sub"] for r in rs]),
                mr([r["e2e_last_us"]["p50"] / 1e3 for r in rs], "%.2f"),
                mr([r["e2e_last_us"]["p99"] / 1e3 for r in rs], "%.2f"),
                mr([r["lag_us"]["p99"] / 1e3 for r in rs], "%.2f"),
                mr([r["lag_us"]["max"] / 1e3 for r in rs], "%.2f"), loads(rs)))
    for key, title in (("scale_writers", "How it scales: writers on one database (full-speed pubgen per writer, "
                                         "flush interval %d ms; median [min-max] of %d runs)"),
                       ("scale_copy", "How it scales: one writer against COPY in the same run (flush interval "
                                      "%d ms; median [min-max] of %d runs)")):
        if not R.get(key):
            continue
        L.append("")
        L.append(title % (R.get("ingest_flush_ms", 0), len(R[key][0]["runs"])))
        L.append("")
        L.append("| writers | events/s committed (all) | per writer | COPY rows/s (same run) | ratio to COPY | "
                 "writer CPU-s per s | flush seconds per s (all writers) | busy / errors | load (1 min) |")
        L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in R[key]:
            rs = row["runs"]
            L.append("| %d | %s | %s | %s | %s | %s | %s | %d / %d | %s |" % (
                row["writers"], mr([r["rate"] for r in rs]),
                mr([sum(r["per_writer"]) / len(r["per_writer"]) for r in rs]),
                mr([r["copy_rate"] for r in rs]), mr([r["rate"] / r["copy_rate"] for r in rs], "%.2f"),
                mr([sum(r["writer_cpu_s"]) / r["elapsed_s"] for r in rs], "%.2f"),
                mr([r.get("flush_busy") for r in rs], "%.2f"),
                sum(r["busy"] for r in rs), sum(r["errors"] for r in rs), loads(rs)))
    return "\n".join(L)


# ---------------------------------------------------------------- report

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def machine():
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
        "host": "%s, %d CPUs (nproc), %s, %s RAM, kernel %s" % (cpu, os.cpu_count(), platform.machine(),
                                                              mem, platform.release()),
        "nginx": sh("dpkg-query -W -f='${Version}' nginx-light nginx-core 2>/dev/null | head -c 40") or "-",
        "nchan": sh("dpkg-query -W -f='${Version}' libnginx-mod-nchan 2>/dev/null") or "-",
        "postgresql": sh("%s -X -A -t -d '%s' -c 'show server_version'" % (
            harness.PSQL, os.environ.get("STUDIO_TEST_PG_DSN", ""))) or "-",
        "nng": sh("dpkg-query -W -f='${Version}' libnng1 2>/dev/null") or "-",
        "libevent": sh("dpkg-query -W -f='${Version}' libevent-2.1-7 2>/dev/null") or "-",
        "msgpack": sh("dpkg-query -W -f='${Version}' libmsgpackc2 2>/dev/null") or "-",
        "nofile_hard": nofile_hard(),
    }


def fmt(v, spec="%.0f", none="-"):
    return none if v is None else spec % v


def ratio(a, b):
    return "-" if not a or not b else "%.2f" % (a / b)


def table(R, quick):
    m = R["machine"]
    L = []
    L.append("Machine: %s" % m["host"])
    L.append("Versions: nginx %s, nchan %s, PostgreSQL %s, nng %s, libevent %s, msgpack-c %s" % (
        m["nginx"], m["nchan"], m["postgresql"], m["nng"], m["libevent"], m["msgpack"]))
    L.append("Date: %s%s" % (m["date"], " (--quick: shorter windows)" if quick else ""))
    L.append("")
    L.append("| scenario | metric | studio | nchan (1 worker) | ratio studio/peer | limit | ratio studio/limit | target | met |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in R.get("idle", []):
        s, n = r.get("studio"), r.get("nchan")
        sv = s["per_stream_b"] if s else None
        nv = n["per_stream_b"] if n else None
        label = "idle %d streams" % r["n"]
        if r.get("note"):
            label += " (%s)" % r["note"]
        L.append("| %s | RSS per open stream (bytes) | %s | %s | %s | - | - | <= 4096 B, <= nchan | %s |" % (
            label, fmt(sv), fmt(nv), ratio(sv, nv),
            "-" if sv is None else ("yes" if sv <= 4096 and (nv is None or sv <= nv) else "no")))
        if s and n:
            L.append("| %s | connected / failed | %d / %d | %d / %d | | | | | |" % (
                label, s["connected"], s["failed"], n["connected"], n["failed"]))
    for r in R.get("fanout", []):
        s, n = r.get("studio"), r.get("nchan")
        label = "fan-out %d x %d/s" % (r["n"], r["rate"])
        if s:
            label += " (flush %d ms%s)" % (s["flush_ms"], ", latency probe" if r.get("probe") else "")
        fl = r.get("floor")
        sv = s["cpu_s_per_mframe"] if s else None
        nv = n["cpu_s_per_mframe"] if n else None
        fv = fl["cpu_s_per_mframe"] if fl else None
        L.append("| %s | server CPU-s per 1M frames | %s | %s | %s | %s (write floor) | %s | <= 1/3 of nchan | %s |" % (
            label, fmt(sv, "%.2f"), fmt(nv, "%.2f"), ratio(sv, nv), fmt(fv, "%.2f"), ratio(sv, fv),
            "-" if not (sv and nv) else ("yes" if sv <= nv / 3 else "no")))
        if s:
            L.append("| %s | writer CPU-s per 1M frames (not in the above) | %s | - | | | | | |" % (
                label, fmt(s["writer_cpu_s_per_mframe"], "%.2f")))
        L.append("| %s | client (loadgen) CPU-s in the window | %s | %s | | | | | |" % (
            label, fmt(s["client_cpu_s"], "%.1f") if s else "-", fmt(n["client_cpu_s"], "%.1f") if n else "-"))
        L.append("| %s | frames delivered / expected | %s | %s | | | | | |" % (
            label, "%d / %d" % (s["items"], s["expected"]) if s else "-",
            "%d / %d" % (n["items"], n["expected"]) if n else "-"))
        L.append("| %s | e2e latency p50 / p99 (ms) | %s | %s | | | | | |" % (
            label, "%.2f / %.2f" % (s["e2e"]["p50"] / 1e3, s["e2e"]["p99"] / 1e3) if s else "-",
            "%.2f / %.2f" % (n["e2e"]["p50"] / 1e3, n["e2e"]["p99"] / 1e3) if n else "-"))
        ei = s.get("edge_internal") if s else None
        if ei and ei.get("p99") is not None:
            p99 = ei["p99"]
            fe = fl.get("edge_internal") if fl else None
            L.append("| %s | edge-added latency, in the edge: nng message -> bytes to the kernel, p50 / p99 (ms) | %.2f / %.2f | - | | %s (write floor) | %s | p99 < 5 ms (10,000 streams) | %s |" % (
                label, ei["p50"], p99, "%.2f / %.2f" % (fe["p50"], fe["p99"]) if fe else "-",
                ratio(p99, fe["p99"]) if fe else "-", ("yes" if p99 < 5 else "no") if r["n"] >= 10000 else "-"))
        if s and s.get("edge"):
            L.append("| %s | edge-added latency, at the client: tail arrival -> frame read, p50 / p99 (ms) | %.2f / %.2f | - | | | | | |" % (
                label, s["edge"]["p50"] / 1e3, s["edge"]["p99"] / 1e3))
    for r in R.get("ingest", []):
        lim = R.get("copy_rate")
        tgt = ">= 100,000/s and >= 60% of COPY" if r["writers"] == 1 else "-"
        met = "-"
        if r["writers"] == 1:
            met = "yes" if r["rate"] >= 100000 and lim and r["rate"] >= 0.6 * lim else "no"
        L.append("| ingest, %d writer%s | events/s committed | %s | - | - | %s (COPY) | %s | %s | %s |" % (
            r["writers"], "s" if r["writers"] > 1 else "", fmt(r["rate"]), fmt(lim), ratio(r["rate"], lim),
            tgt, met))
        if "http_rate" in r:
            L.append("| ingest over HTTP, 1 writer, %d keep-alive connections, batches of %d | events/s committed | %s | - | - | %s (nng ingest) | %s | >= 60%% of nng | %s |" % (
                r["http_conns"], r["http_batch"], fmt(r["http_rate"]), fmt(r["rate"]), ratio(r["http_rate"], r["rate"]),
                "yes" if r["http_rate"] >= 0.6 * r["rate"] else "no"))
        if "http1_rate" in r:
            L.append("| ingest over HTTP, 1 writer, %d keep-alive connections, one event a request | requests/s "
                     "answered (each after its commit, flush interval %d ms) | %s | - | - | - | - | figure only | - |"
                     % (r["http_conns"], r.get("flush_ms", 0), fmt(r["http1_rate"])))
    L += same_shape_table(R)
    rp = R.get("replay")
    if rp:
        met = "yes" if rp["rate"] >= 200000 and rp["rate"] >= 0.6 * rp["copy_rate"] else "no"
        L.append("| replay %d events, 1 stream | rows/s | %s | - | - | %s (COPY TO STDOUT) | %s | >= 200,000/s and >= 60%% of COPY | %s |" % (
            rp["events"], fmt(rp["rate"]), fmt(rp["copy_rate"]), ratio(rp["rate"], rp["copy_rate"]), met))
    rl = R.get("replay_large")
    if rl:
        L.append("| replay %d x %d KiB incompressible events, 1 stream | MiB/s of data | %s | - | - | %s (COPY TO STDOUT) | %s | - | - |" % (
            rl["events"], rl["size"] // 1024, fmt(rl["mib_s"], "%.1f"), fmt(rl["copy_mib_s"], "%.1f"),
            ratio(rl["mib_s"], rl["copy_mib_s"])))
    gf = R.get("gap_fill")
    if gf:
        L.append("| gap fill of %d x %d KiB incompressible events | s, writer's release -> last event (first filled -> last) | %s (%s) | - | - | | | - | - |" % (
            gf["events"], gf["size"] // 1024, fmt(gf["release_to_last_s"], "%.2f"),
            fmt(gf["first_to_last_s"], "%.2f")))
    sc = scale_table(R)
    if sc:
        L.append(sc)
    ff = R.get("fifty")
    if ff and "skipped" in ff:
        L.append("| 51,000 streams, 3 edges | - | skipped: %s | | | | | | |" % ff["skipped"])
    elif ff:
        label = "%d streams x %d/s, %d edges + 1 replacement, %d client processes" % (
            ff["streams"], ff["rate"], ff["edges"], ff["client_procs"])
        dr = ff["drain"]
        L.append("| %s | frames delivered / expected, streams open at the start (lost, duplicated, resyncs) | %d / %d (%d, %d, %d) | - | | | | "
                 "every frame | %s |" % (label, ff.get("items_by_n", ff["items"]), ff["expected"], ff["lost"], ff["duplicates"],
                                        ff["resyncs"],
                                        "yes" if ff.get("items_by_n", ff["items"]) == ff["expected"] and ff["lost"] == 0 and
                                        ff["duplicates"] == 0 and ff["all_at_last"] else "no"))
        L.append("| %s | every stream at the last event published | %s (last n %d..%d of %d) | - | | | | | |" % (
            label, "yes" if ff["all_at_last"] else "no", ff["last_n_min"], ff["last_n_max"], ff["published"]))
        L.append("| %s | time for all to connect (s, %d connections/s asked; attempts connected / failed and retried "
                 "by then) | %s (%d / %d) | - | | | | | |" % (
                     label, ff["connect_rate"], fmt(ff["connect_s"], "%.1f"), ff["connected"], ff["failed"]))
        L.append("| %s | failed attempts: refused / closed before the head / reset; accept-queue overflows "
                 "(TcpExt ListenOverflows) while connecting / in the window | %d / %d / %d; %s / %s | - | | | | | |" % (
                     label, ff["connect_failures"]["fail_connect"], ff["connect_failures"]["fail_head"],
                     ff["connect_failures"]["fail_read"], fmt(ff["listen_overflows_connect"]),
                     fmt(ff["listen_overflows_window"])))
        rr = ff.get("reconnect_reasons", {})
        L.append("| %s | `reconnect` envelopes read: draining / slow_consumer or blocked / other | %s / %s / %s | - | | | | | |" % (
            label, fmt(rr.get("draining")), fmt(rr.get("slow")), fmt(rr.get("other"))))
        L.append("| %s | drain (grace %d s): first end / all reconnected streams back, first frame (s after SIGTERM) | "
                 "%s / %s (%d ended, %d back; %d still waiting) | - | | | | | |" % (
                     label, ff["grace_s"], fmt(dr["first_end_s"], "%.2f"), fmt(dr["all_back_s"], "%.2f"), dr["ends"],
                     dr["back"], dr["waiting"]))
        L.append("| %s | back after the hint: p99 / max of (first frame - hint due) (ms) | %.1f / %.1f | - | | | | | |" % (
            label, dr["late_p99_ms_max"], dr["late_max_ms"]))
        e2e, ei = ff["e2e_us"], ff["edge_internal"]
        L.append("| %s | e2e latency p50 / p99 (ms; flush interval 1,000 ms) | %s / %s | - | | | | | |" % (
            label, fmt(e2e["p50"] / 1e3 if e2e["p50"] is not None else None, "%.1f"),
            fmt(e2e["p99"] / 1e3 if e2e["p99"] is not None else None, "%.1f")))
        if ei:
            L.append("| %s | edge-added latency, in the edges, p50 / p99 (ms) | %s / %s | - | | | | | |" % (
                label, fmt(ei["p50"], "%.2f"), fmt(ei["p99"], "%.2f")))
        for i, pe in enumerate(ff["per_edge"]):
            L.append("| %s | edge %d (%s): streams at the start / end, RSS idle / with streams / max (MiB), CPU-s in the window "
                     "| %s / %s, %.1f / %.1f / %.1f, %.1f | - | | | | | |" % (
                         label, i, pe["role"], fmt(pe["streams_at_mark"]), fmt(pe["streams_at_end"]),
                         pe["rss_idle_kb"] / 1024, pe["rss_mark_kb"] / 1024, pe["rss_max_kb"] / 1024, pe["cpu_s"]))
        L.append("| %s | writers' CPU-s / clients' CPU-s in the window; load average before / after | %s / %.1f; %.2f / %.2f | - | | | | | |" % (
            label, " + ".join("%.1f" % w for w in ff["writer_cpu_s"]), ff["client_cpu_s"],
            ff["loadavg_before"][0], ff["loadavg_after"][0]))
    return "\n".join(L)


BEGIN = "<!-- bench:results:begin (written by scripts/bench.sh; edit outside these markers) -->"
END = "<!-- bench:results:end -->"


def write_results(path, t, R):
    """Replaces the results section of docs/performance.md (kept text around it)."""
    block = "%s\n\n%s\n\nSuite time: %.0f s.\n\n<details><summary>raw results (JSON)</summary>\n\n```json\n%s\n```\n\n</details>\n\n%s" % (
        BEGIN, t, R["elapsed_s"], json.dumps(R, indent=1), END)
    old = open(path).read() if os.path.exists(path) else "# Performance\n\n"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n## Results\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(new)


DEFAULT_ONLY = "idle,fanout,ingest,replay,fifty"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=DEFAULT_ONLY)
    # The results section of docs/performance.md is the whole suite's: a run
    # of some scenarios (--only) would replace it with theirs alone, so it
    # writes there only when asked (--out PATH).
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.out is None and args.only == DEFAULT_ONLY:
        args.out = os.path.join(ROOT, "docs", "performance.md")
    args.window = 6 if args.quick else 15
    args.warmup = 2 if args.quick else 3
    args.ingest_s = 5 if args.quick else 12
    args.ingest_flush_ms = 1000
    args.replay_n = 100000
    args.replay_large_n = 200 if args.quick else 400
    args.fill_n = 100
    args.connect_rate = 5000
    args.repeat = 3  # the scale_* scenarios: median and range of 3 runs
    args.fan_rate = 20000
    args.fifty_n = 51000
    # The drain's hints are spread over its 25 s grace: the window holds it all.
    args.fifty_window = 40 if args.quick else 60
    args.fifty_drain_at = 5 if args.quick else 15
    args.fifty_grace = 25  # the edge default and the manifests
    args.fifty_connect_rate = 5000
    only = set(args.only.split(","))
    systems = ["studio"] + (["nchan"] if NGINX else [])
    tmp = tempfile.mkdtemp(prefix="studio-bench-")
    R = {"machine": machine()}
    t_start = time.monotonic()
    try:
        if "idle" in only:
            R["idle"] = []
            hard = nofile_hard()
            for n in ([10000] if args.quick else [10000, 50000]):
                row = {"n": n}
                if n + 200 > hard:
                    # The server and the client each hold n descriptors.
                    m = (hard - 500) // 1000 * 1000
                    row["note"] = "%d wanted; RLIMIT_NOFILE hard limit %d here, ran %d" % (n, hard, m)
                    row["n"] = n = m
                for sysname in systems:
                    log("idle %d streams: %s" % (n, sysname))
                    row[sysname] = idle(args, tmp, n, sysname)
                    log(json.dumps(row[sysname]))
                R["idle"].append(row)
        if "fanout" in only:
            R["fanout"] = []
            for n, rate in [(1000, 200), (10000, 20)]:
                row = {"n": n, "rate": rate}
                for sysname in systems + ["floor"]:
                    log("fan-out %d x %d/s: %s" % (n, rate, sysname))
                    row[sysname] = fanout(args, tmp, n, rate, sysname)
                    log(json.dumps(row[sysname]))
                same_shape(args, tmp, row, 1000)
                R["fanout"].append(row)
            # Latency probe: a load the edge is not saturated by, with the
            # shortest flush interval, so edge-added latency is the time to
            # sweep the streams, not a queue growing.
            row = {"n": 10000, "rate": 2, "probe": True}
            log("latency probe 10000 x 2/s, flush 10 ms: studio")
            row["studio"] = fanout(args, tmp, 10000, 2, "studio", flush_ms=10)
            log(json.dumps(row["studio"]))
            log("latency probe 10000 x 2/s: write floor")
            row["floor"] = fanout(args, tmp, 10000, 2, "floor")
            log(json.dumps(row["floor"]))
            same_shape(args, tmp, row, 10)
            R["fanout"].append(row)
        if "ingest" in only:
            R["ingest"] = []
            for w in (1, 2):
                log("ingest, %d writer(s)" % w)
                r = ingest(args, tmp, w)
                log(json.dumps(r))
                if "copy_rate" in r:
                    R["copy_rate"] = r["copy_rate"]
                R["ingest"].append(r)
        if "scale_fanout" in only:
            R["scale_fanout"] = []
            scale_fanout(args, tmp, R["scale_fanout"])
        if "scale_writers" in only:
            R["ingest_flush_ms"] = args.ingest_flush_ms
            R["scale_writers"] = []
            scale_ingest(args, tmp, (1, 2, 4), R["scale_writers"])
        if "scale_copy" in only:
            R["ingest_flush_ms"] = args.ingest_flush_ms
            R["scale_copy"] = []
            scale_ingest(args, tmp, (1,), R["scale_copy"])
        if "replay" in only:
            log("replay")
            R["replay"] = replay(args, tmp)
            log(json.dumps(R["replay"]))
            log("replay of large rows")
            R["replay_large"] = replay_large(args, tmp)
            log(json.dumps(R["replay_large"]))
            log("gap fill of large rows")
            R["gap_fill"] = gap_fill(args, tmp)
            log(json.dumps(R["gap_fill"]))
        if "fifty" in only:
            log("fifty: %d streams over 3 edges, one drained" % args.fifty_n)
            R["fifty"] = fifty(args, tmp)
            log(json.dumps(R["fifty"]))
    finally:
        R["elapsed_s"] = time.monotonic() - t_start
        t = table(R, args.quick)
        print(t)
        if args.out:
            write_results(args.out, t, R)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(R, f, indent=1)
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("kept " + tmp)


if __name__ == "__main__":
    main()
