#!/usr/bin/env python3
# ctest-labels: nosan
# ctest-timeout: 300
"""edge-gateway under valgrind memcheck (issue: "no timer, event or buffer
outlives its stream (ASan and valgrind clean)").

The edge runs under valgrind with every stream ending a different way: a live
SSE stream and a json-seq stream ended by drain, a resume with until=head
(complete), a refused resume (400), a client that reads nothing and is
closed, and a client that goes away mid-stream.  valgrind's exit status is
the verdict: any memory error or definitely/indirectly lost block fails.
Label nosan: valgrind cannot run sanitizer builds, so the ASan run skips
this file by label (scripts/test.sh); the plain build always runs it.
"""
import os
import shutil
import signal
import socket
import subprocess
import time

import harness
from harness import check, check_eq, log

t = harness.Tests()


@t.case
def edge_is_valgrind_clean():
    valgrind = shutil.which("valgrind")
    check(valgrind is not None, "valgrind is installed (scripts/lib.sh installs it)")
    with harness.Env() as env:
        w = env.start_writer(flush_interval_ms=200)
        w.wait_ready()
        port = harness.free_port()
        log_path = os.path.join(env.tmp, "valgrind.log")
        args = [valgrind, "--error-exitcode=9", "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect", "--log-file=" + log_path,
                harness.program("edge-gateway"), "--pg-dsn", env.dsn, "--writers", w.publish,
                "--listen", "127.0.0.1:%d" % port, "--flush-interval-ms", "200",
                "--heartbeat-s", "1", "--drain-grace-s", "3"]
        edge = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = "http://127.0.0.1:%d" % port
            harness.wait_until(lambda: _status(base + "/readyz") == 200, 120, "edge under valgrind ready")
            live = harness.SseClient(base + "/v1/stream?topic=vg.a&topic=vg.b")
            seq = subprocess.Popen(["curl", "-sN", base + "/v1/stream?topic=vg.a&format=json-seq"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            gone = socket.create_connection(("127.0.0.1", port))
            gone.sendall(b"GET /v1/stream?topic=vg.a HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled = socket.socket()
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.connect(("127.0.0.1", port))
            stalled.sendall(b"GET /v1/stream?topic=vg.b HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(1.0)
            events = []
            for i in range(3000):
                e = {"topic": "vg.a" if i % 2 else "vg.b", "about": ["r%d" % (i % 5)]}
                if i % 3 == 0:
                    e["data"] = {"i": i, "pad": "x" * 200}
                events.append(e)
            harness.publish_file(w, events)
            gone.close()  # mid-stream: abrupt_close
            # Signals coalesce, so count nothing: wait for a last data event.
            last = harness.publish(w, "vg.a", {"end": True})
            harness.wait_until(lambda: any(str(last) == e.get("id") for e in live.items()), 120,
                               "the live stream got the last event")
            st, _, body = harness.http_get(base + "/v1/stream?topic=vg.a&until=head&format=ndjson",
                                           headers={"Last-Event-ID": "10"}, timeout=60)
            check_eq(st, 200, "resume with until=head")
            check(body.rstrip().endswith(b'{"type":"complete"}'), "the bounded stream ends in complete")
            st, _, _ = harness.http_get(base + "/v1/stream?topic=vg.a", headers={"Last-Event-ID": "99999999"})
            check_eq(st, 400, "an id beyond the head is refused")
            live.close()
            edge.send_signal(signal.SIGTERM)
            rc = edge.wait(120)
            stalled.close()
            seq.kill()
            seq.wait()
        finally:
            if edge.poll() is None:
                edge.kill()
                edge.wait()
        with open(log_path) as f:
            report = f.read()
        summary = [ln for ln in report.splitlines() if "ERROR SUMMARY" in ln or "definitely lost" in ln
                   or "indirectly lost" in ln]
        log("FIGURE valgrind: " + " | ".join(s.split("== ", 1)[-1] for s in summary))
        check_eq(rc, 0, "edge under valgrind: no memory error, no leak, exit 0 (see %s)" % log_path)


def _status(url):
    try:
        return harness.http_get(url, timeout=5)[0]
    except OSError:
        return None


t.main()
