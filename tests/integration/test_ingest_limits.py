"""ingest: the exact request size limits (docs/writer.md "Ingest, buffer
bounds, refusals").  A request of exactly 16 MiB (the contract's maximum) gets
its normal answer; one byte more is `invalid`; so is anything up to the
ceiling (17 MiB); above the ceiling nng cannot answer a request it has not
read, so the writer closes the connection (and stays up).  And the caps on
producer connections (256, 64 from one address) that bound what nng buffers."""
import subprocess

import harness as h

t = h.Tests()

MIB = 1024 * 1024
MAX_REQUEST = 16 * MIB
CEILING = 17 * MIB


def batch_of_size(total, topic="big"):
    """A valid batch whose msgpack encoding is exactly `total` bytes: events of
    JSON string data (at most 256 KiB each), the last one trimmed to fit."""
    chunk = 200 * 1024
    n = total // chunk + 1
    evs = [{"topic": topic, "data": '"' + "x" * chunk + '"'} for _ in range(n)]
    size = len(h.mp_pack(evs))
    # shrink the last event's data until the total fits, then fine-tune
    while size > total:
        last = evs[-1]["data"]
        cut = min(size - total, len(last) - 3)
        if cut <= 0:
            evs.pop()
        else:
            evs[-1]["data"] = '"' + "x" * (len(last) - 2 - cut) + '"'
        size = len(h.mp_pack(evs))
    while size < total:  # str header widths can make a cut overshoot by a byte or two
        evs[-1]["data"] = evs[-1]["data"][:-1] + "x" + '"'
        size = len(h.mp_pack(evs))
    payload = h.mp_pack(evs)
    h.check_eq(len(payload), total, "test payload size")
    return payload, len(evs)


def count(env, topic):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = '%s'" % topic))


@t.case
def exactly_16_mib_is_accepted():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        payload, n = batch_of_size(MAX_REQUEST)
        rc, rep, out, err = h.nngreq(w.ingest, payload, timeout_ms=60000)
        h.check_eq(rc, 0, "a reply to a request of exactly 16 MiB (%s %s)" % (out.strip()[:200], err.strip()))
        h.check(rep.get("ok") is True and len(rep.get("seqs", [])) == n,
                "a request of exactly 16 MiB (%d events) is stored: %r" % (n, str(rep)[:300]))
        h.check_eq(count(env, "big"), n, "rows stored")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def one_byte_over_is_invalid_up_to_the_ceiling():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        for size in (MAX_REQUEST + 1, CEILING):
            payload, _ = batch_of_size(size, topic="over")
            rc, rep, out, err = h.nngreq(w.ingest, payload, timeout_ms=30000)
            h.check_eq(rc, 0, "a reply to a request of %d bytes (%s %s)" % (size, out.strip()[:200], err.strip()))
            h.check(rep.get("ok") is False and rep.get("error") == "invalid"
                    and "too large" in rep.get("detail", ""),
                    "a request of %d bytes is invalid (too large): %r" % (size, rep))
            h.log("  %d bytes -> %s" % (size, rep.get("detail")))
        rep = h.request(w, {"topic": "over", "data": "1"})
        h.check(rep.get("ok") is True, "a small request afterwards: %r" % (rep,))
        h.check_eq(count(env, "over"), 1, "rows stored: only the small request")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def above_the_ceiling_the_connection_is_closed():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        payload, _ = batch_of_size(CEILING + 1, topic="huge")
        rc, rep, out, err = h.nngreq(w.ingest, payload, timeout_ms=3000)
        h.check(rc == 3 and rep is None, "no reply above the ceiling, the connection is closed: rc %d %s %s"
                % (rc, out.strip()[:200], err.strip()))
        h.check(w.alive(), "the writer stays up\n" + w.logs())
        rep = h.request(w, {"topic": "huge", "data": "1"})
        h.check(rep.get("ok") is True, "a small request afterwards: %r" % (rep,))
        h.check_eq(count(env, "huge"), 1, "rows stored: only the small request")
        h.check_eq(w.stop(), 0, "writer exit status")


def flood(w, topic, *flags):
    p = subprocess.run([h.program("ingestflood", h.TOOLS_DIR), "--producers", "300", "--timeout-ms", "4000"]
                       + list(flags) + [w.ingest], input=h.mp_pack({"topic": topic}), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    out = p.stdout.decode().strip()
    h.check(out, "ingestflood printed its counts (rc %d: %s)" % (p.returncode, p.stderr.decode()[-300:]))
    return out, h.json.loads(out)


def rows_between(env, topic, answered):
    # A request can be read from a connection that a newcomer then displaces
    # (it was taken for silent: its request not yet out of nng's buffers):
    # stored, its answer lost with the connection (a real producer resends
    # and gets the stored answer).  So at least the answered ones, at most all.
    n = count(env, topic)
    h.log("rows stored for %s: %d (answered %d)" % (topic, n, answered))
    h.check(answered <= n <= 300, "rows stored: %d, between the %d answered and the 300 sent" % (n, answered))


@t.case
def connections_past_the_cap_are_closed():
    # 300 producers, each its own req0 socket, one small request each, all
    # kept connected, from five addresses (60 each: under the per-address
    # cap): 256 get in and are answered; the 44 others are closed as they
    # connect (a newcomer displaces a connection that has sent nothing yet,
    # so the 256 that hold a connection once all have sent are the ones
    # answered) and keep redialling until their deadline.
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        out, res = flood(w, "cap", "--sources", "5")
        h.log("FIGURE 300 producers from 5 addresses against a cap of 256 connections: %s" % out)
        h.check_eq((res["ok"], res["no_reply"]), (256, 44), "answered and unanswered producers (%s)" % out)
        rows_between(env, "cap", 256)
        h.check("more than 256 producer connections" in w.logs(), "the cap is logged\n" + w.logs())
        h.check(h.metric(w.http_url, "studio_writer_ingest_conns_refused_total", {"reason": "global_cap"}) > 0,
                "refusals at the global cap counted")
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def connections_past_the_per_address_cap_are_closed():
    # the same 300 producers from one address: 64 (the per-address cap) get in
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        out, res = flood(w, "cap1")
        h.log("FIGURE 300 producers from one address against a cap of 64 connections: %s" % out)
        h.check_eq((res["ok"], res["no_reply"]), (64, 236), "answered and unanswered producers (%s)" % out)
        rows_between(env, "cap1", 64)
        h.check("connections from one address" in w.logs(), "the cap is logged\n" + w.logs())
        h.check(h.metric(w.http_url, "studio_writer_ingest_conns_refused_total", {"reason": "address_cap"}) > 0,
                "refusals at the per-address cap counted")
        h.check_eq(w.stop(), 0, "writer exit status")


if __name__ == "__main__":
    t.main()
