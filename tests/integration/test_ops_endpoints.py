"""The operations endpoints answer the same way on both programs (common/st_ops.c).

/healthz 200 "ok"; /readyz 200 "ready" or a 503 problem document naming the
reason, with Retry-After; /metrics in Prometheus text format; another
method on them 405 with Allow: GET, HEAD, OPTIONS; an unknown path 404.
/metrics carries studio_ready (what /readyz answers, 1 or 0) and
studio_database_up on both.
The writer and the edge are checked side by side, once ready and once
draining (studioctl drain), so a difference between them fails here.
"""
import json

import harness as h

t = h.Tests()


def answer(url, method="GET"):
    status, headers, body = h.http_get(url, method=method)
    return status, headers, body


@t.case
def both_programs_answer_alike():
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=200).wait_ready()
        e = env.start_edge([w], flush_interval_ms=200).wait_ready()
        bases = {"writer": w.http_url, "edge": e.url}
        h.wait_until(lambda: h.http_get(e.url + "/readyz")[0] == 200, 15, "the edge ready")
        for name, base in bases.items():
            st, hd, body = answer(base + "/healthz")
            h.check_eq((st, body), (200, b"ok\n"), name + " /healthz")
            st, hd, body = answer(base + "/readyz")
            h.check_eq((st, body), (200, b"ready\n"), name + " /readyz when ready")
            st, hd, body = answer(base + "/metrics")
            h.check_eq((st, hd.get("content-type")), (200, "text/plain; version=0.0.4; charset=utf-8"),
                       name + " /metrics status and type")
            h.check(b"# TYPE " in body, name + " /metrics has TYPE lines: %r" % body[:80])
            for gauge in ("studio_ready", "studio_database_up"):
                h.check_eq(h.metric(base, gauge), 1.0, name + " " + gauge + " when ready")
            for path in ("/healthz", "/readyz", "/metrics"):
                st, hd, body = answer(base + path, method="POST")
                h.check_eq((st, hd.get("allow"), hd.get("content-type")),
                           (405, "GET, HEAD, OPTIONS", "application/problem+json"), name + " POST " + path)
            st, hd, body = answer(base + "/nope")
            h.check_eq((st, json.loads(body)["status"]), (404, 404), name + " /nope")
            st, hd, body = answer(base + "/readyz", method="HEAD")
            h.check_eq((st, body), (200, b""), name + " HEAD /readyz")

        for name, proc in (("writer", w), ("edge", e)):
            h.studioctl("drain", "--control", proc.control, check=True)
        for name, base in bases.items():
            st, hd, body = answer(base + "/readyz")
            doc = json.loads(body) if hd.get("content-type") == "application/problem+json" else None
            h.check_eq((st, hd.get("retry-after"), doc and doc.get("status"), doc and doc.get("detail")),
                       (503, "1", 503, "draining"), name + " /readyz while draining")
            h.check_eq(h.metric(base, "studio_ready"), 0.0, name + " studio_ready while draining")


if __name__ == "__main__":
    t.main()
