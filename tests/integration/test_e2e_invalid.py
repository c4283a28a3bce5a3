"""e2e: every kind of bad ingest request is refused as `invalid`, stores nothing,
and leaves the writer up; the bounds themselves are accepted (docs/api.md)."""
import harness as h
from harness import mp_pack, mp_array_header, mp_map_header, mp_str_header, Raw

t = h.Tests()

EV = {"topic": "bad", "data": "1"}

BAD = [
    ("not msgpack", b"\xc1\x00"),
    ("empty request", b""),
    ("truncated map", mp_pack(EV)[:-2]),
    ("trailing bytes", mp_pack(EV) + b"\x00"),
    ("two values", mp_pack(EV) + mp_pack(EV)),
    ("scalar int", mp_pack(42)),
    ("scalar str", mp_pack("topic")),
    ("nil", mp_pack(None)),
    ("empty array", mp_pack([])),
    ("10,001 events", mp_pack([{"topic": "bad"}] * 10001)),
    ("array of non-maps", mp_pack([1, 2])),
    ("unknown key", mp_pack({"topic": "bad", "colour": "red"})),
    ("missing topic", mp_pack({"data": "1"})),
    ("empty map", mp_pack({})),
    ("topic empty", mp_pack({"topic": ""})),
    ("topic 201 bytes", mp_pack({"topic": "a" * 201})),
    ("topic space", mp_pack({"topic": "a b"})),
    ("topic non-ascii", mp_pack({"topic": "caf\u00e9"})),
    ("topic NUL", mp_pack({"topic": "a\x00b"})),
    ("topic not str", mp_pack({"topic": 7})),
    ("topic bin", mp_pack({"topic": b"bad"})),
    ("about not array", mp_pack({"topic": "bad", "about": "x"})),
    ("about 65 entries", mp_pack({"topic": "bad", "about": ["a%d" % i for i in range(65)]})),
    ("about entry empty", mp_pack({"topic": "bad", "about": ["a", ""]})),
    ("about entry 201 bytes", mp_pack({"topic": "bad", "about": ["b" * 201]})),
    ("about entry not str", mp_pack({"topic": "bad", "about": ["a", 5]})),
    ("data not str (int)", mp_pack({"topic": "bad", "data": 5})),
    ("data not str (map)", mp_pack({"topic": "bad", "data": {"a": 1}})),
    ("data invalid JSON", mp_pack({"topic": "bad", "data": "{"})),
    ("data two JSON values", mp_pack({"topic": "bad", "data": "1 2"})),
    ("data trailing comma", mp_pack({"topic": "bad", "data": "[1,]"})),
    ("data empty", mp_pack({"topic": "bad", "data": ""})),
    ("data over 256 KiB", mp_pack({"topic": "bad", "data": '"' + "a" * (256 * 1024 - 1) + '"'})),
    ("key empty", mp_pack({"topic": "bad", "key": ""})),
    ("key 201 bytes", mp_pack({"topic": "bad", "key": "k" * 201})),
    ("key not str", mp_pack({"topic": "bad", "key": 12})),
    ("only the last event bad", mp_pack([{"topic": "bad", "data": "1"}, {"topic": "bad"},
                                         {"topic": "bad", "data": "{"}])),
    ("batch: one bad among many", mp_pack([{"topic": "bad"}] * 500 + [{"topic": ""}] + [{"topic": "bad"}] * 500)),
    # Hostile headers: counts far beyond the bytes that follow.
    ("array32 of 4e9", mp_pack(mp_array_header(4_000_000_000, 32)) + mp_pack(EV)),
    ("array32 of 2^32-1", mp_pack(mp_array_header(0xFFFFFFFF, 32))),
    ("map32 of 4e9", mp_pack(mp_map_header(4_000_000_000, 32)) + mp_pack("topic") + mp_pack("bad")),
    ("str32 of 4 GB topic", mp_pack(mp_map_header(1)) + mp_pack("topic")
     + bytes(mp_str_header(0xFFFFFFFF, 32)) + b"bad"),
    ("str32 of 4 GB key name", mp_pack(mp_map_header(1)) + bytes(mp_str_header(0xFFFFFFF0, 32)) + b"topic"),
    ("array32 about of 4e9", mp_pack(mp_map_header(2)) + mp_pack("topic") + mp_pack("bad")
     + mp_pack("about") + bytes(mp_array_header(4_000_000_000, 32))),
    ("bin32 of 4 GB data", mp_pack(mp_map_header(2)) + mp_pack("topic") + mp_pack("bad")
     + mp_pack("data") + b"\xc6\xff\xff\xff\xff" + b"x"),
    ("deep nesting", b"\x91" * 100000),
]


def count(env):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"))


@t.case
def bad_requests_are_refused_and_store_nothing():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        good = h.request(w, EV)
        h.check(good.get("ok") is True, "a valid event is accepted: %r" % (good,))
        before = count(env)
        failures = []
        for name, payload in BAD:
            rc, rep, out, err = h.nngreq(w.ingest, payload, timeout_ms=10000)
            if rc != 0:
                failures.append("%s: no reply (nngreq rc %d: %s %s)" % (name, rc, out.strip(), err.strip()))
                if not w.alive():
                    break
                continue
            if not (isinstance(rep, dict) and rep.get("ok") is False and rep.get("error") == "invalid"
                    and isinstance(rep.get("detail"), str)):
                failures.append("%s: reply %r" % (name, rep))
            h.log("  %-28s -> %s" % (name, (rep or {}).get("detail")))
        h.check(w.alive(), "the writer died on a bad request\n" + w.logs())
        st, _, _ = h.http_get(w.http_url + "/healthz")
        h.check_eq(st, 200, "/healthz after the bad requests")
        # Anything wrongly accepted would be committed by now (a flush is 200 ms).
        h.wait_until(lambda: h.request(w, EV).get("ok"), 10, "a valid event after the bad ones")
        h.check_eq(count(env), before + 1, "rows stored: only the one valid event after the bad ones")
        h.check(not failures, "%d bad requests mishandled:\n  %s" % (len(failures), "\n  ".join(failures)))
        rej = h.metric(w.http_url, "studio_writer_rejected_total", {"error": "invalid"})
        h.log("  studio_writer_rejected_total{error=invalid} = %s" % rej)
        h.check(rej is not None and rej >= len(BAD), "rejected counter %s < %d" % (rej, len(BAD)))
        h.check_eq(w.stop(), 0, "writer exit status on SIGTERM")


@t.case
def the_bounds_themselves_are_accepted():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        edge_cases = [
            {"topic": "a" * 200},
            {"topic": "A-Za-z0-9._:/-"},
            {"topic": "bnd", "about": ["a%d" % i for i in range(64)]},
            {"topic": "bnd", "about": ["b" * 200]},
            {"topic": "bnd", "about": []},
            {"topic": "bnd", "data": None},
            {"topic": "bnd", "data": '"' + "a" * (256 * 1024 - 2) + '"'},
            {"topic": "bnd", "key": "k" * 200},
        ]
        for ev in edge_cases:
            rep = h.request(w, ev)
            h.check(rep.get("ok") is True and len(rep.get("seqs", [])) == 1,
                    "bound %r refused: %r" % ({k: (v[:20] if isinstance(v, str) else v) for k, v in ev.items()}, rep))
        batch = [{"topic": "bnd", "data": "%d" % i} for i in range(10000)]
        rep = h.request(w, batch, timeout_ms=30000)
        h.check(rep.get("ok") is True, "a batch of 10,000 refused: %r" % (rep,))
        seqs = rep["seqs"]
        h.check_eq(len(seqs), 10000, "seqs in the reply of a 10,000 batch")
        h.check(all(b > a for a, b in zip(seqs, seqs[1:])), "batch seqs ascend in request order")
        rows = h.psql(env.dsn, "SELECT seq, data::text FROM broker_event WHERE seq >= %d AND seq <= %d ORDER BY seq"
                      % (seqs[0], seqs[-1]))
        h.check_eq([(int(s), d) for s, d in rows], [(s, "%d" % i) for i, s in enumerate(seqs)],
                   "the batch stored in request order")
        signal = h.psql(env.dsn, "SELECT data IS NULL FROM broker_event WHERE topic='bnd' AND about='{}' "
                                 "AND key IS NULL ORDER BY seq LIMIT 2")
        h.check(("t",) in signal, "a nil data is stored as a change signal (NULL)")
        h.check_eq(w.stop(), 0, "writer exit status on SIGTERM")


if __name__ == "__main__":
    t.main()
