"""e2e: 10,000 events published through `studioctl publish --file` while three
SSE clients listen: each gets every event once, in seq order, id == seq, data
byte for byte as stored; the writer stores the compact form of data."""
import json
import time

import harness as h

t = h.Tests()
N = 10000


def event_line(i):
    # Whitespace outside strings (which the writer removes), inside strings
    # (which it keeps), escapes and non-ASCII text (kept as they are).
    data = ('{ "i" : %d ,\t"s" : "a  b \\" c" , "u" : "\\u00e9 \u00e9" ,\t "arr" : [ 1 , 2.5 , true , null ] ,'
            ' "pad" : "%s" }' % (i, "x" * (i % 50)))
    line = '{"topic":"fan","about":["n%d"],"data": %s}' % (i % 7, data)
    return line, data


@t.case
def ten_thousand_events_three_clients():
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=200).wait_ready()
        e = env.start_edge([w]).wait_ready()
        clients = [h.SseClient(e.url + "/v1/stream?topic=fan") for _ in range(3)]
        h.wait_until(lambda: all(c.status is not None for c in clients), 10, "three SSE response heads")
        for c in clients:
            h.check_eq(c.status, 200, "stream status")
            h.check(c.headers.get("content-type", "").startswith("text/event-stream"),
                    "SSE content type: %r" % c.headers.get("content-type"))
        # The streams are registered once a first event reaches all three.
        first = h.publish(w, "fan", data='{"i": -1}')
        for c in clients:
            c.wait_items(1, 30)
        lines, datas = zip(*(event_line(i) for i in range(N)))
        t0 = time.monotonic()
        p = h.publish_file(w, lines, check=True, timeout=300)
        t_pub = time.monotonic() - t0
        rows = h.db_events(env.dsn, ["fan"])
        h.check_eq(len(rows), N + 1, "rows stored")
        h.check_eq(rows[0][0], first, "the first event's seq as printed by studioctl")
        for (seq, topic, about, data), i in zip(rows[1:], range(N)):
            want = h.compact_json(datas[i])
            if data != want:
                raise h.TestFailure("seq %d stored %r, expected the compact form %r" % (seq, data, want))
            if json.loads(about) != ["n%d" % (i % 7)]:
                raise h.TestFailure("seq %d about %s" % (seq, about))
        for k, c in enumerate(clients):
            c.wait_items(N + 1, 120)
        t_all = time.monotonic() - t0
        for k, c in enumerate(clients):
            h.check_items_match_rows(c.items(), rows, "client %d" % k)
            others = [ev for ev in c.events if ev.get("event") not in ("message",) and "comment" not in ev]
            h.check(not others, "client %d got non-item events: %r" % (k, others[:3]))
        h.log("figures: %d events published in %.2fs (%.0f/s), delivered to 3 clients in %.2fs; "
              "studioctl said %r" % (N, t_pub, N / t_pub, t_all, p.stdout.decode()[-80:]))
        delivered = h.metric(e.url, "studio_frames_delivered_total")
        h.check(delivered is not None and delivered >= 3 * (N + 1),
                "studio_frames_delivered_total %s >= %d" % (delivered, 3 * (N + 1)))
        for c in clients:
            c.close()
        h.check_eq(e.stop(), 0, "edge exit status on SIGTERM")
        h.check_eq(w.stop(), 0, "writer exit status on SIGTERM")


if __name__ == "__main__":
    t.main()
