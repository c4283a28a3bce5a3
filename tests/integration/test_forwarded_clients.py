"""Who the client is behind a trusted proxy (issue 25 item 1, docs/security.md).

A real edge with --max-streams-per-ip 2 and 127.0.0.2 as its trusted
proxy (every 127/8 address is loopback), a real writer and PostgreSQL.
Requests come over sockets bound to 127.0.0.2, written as a proxy writes
them:

- the client sends a forged X-Forwarded-For line and the proxy appends its
  own line (HAProxy option forwardfor): the client is the address in the
  proxy's line, so its third stream is refused, however it varies the forged
  line, and the victim it names keeps its own two slots;
- the same with Forwarded: for= (quoted, with a port);
- IPv6 clients: two in one /64 share the limit, one in another /64 does not;
- the edge exits 0 (a sanitizer build fails here on a leak).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, check_eq  # noqa: E402
import sse_client as sc  # noqa: E402

t = harness.Tests()
PROXY = "127.0.0.2"

with harness.Env() as env:
    writer = env.start_writer(flush_interval_ms=100)
    writer.wait_ready()
    edge = env.start_edge([writer], max_streams_per_ip=2, trusted_proxies=PROXY + "/32")
    edge.wait_ready()
    port = sc.edge_port(edge)
    held = []

    def open_raw(headers, src=PROXY):
        """A stream over a socket bound to src with these extra header lines; returns its status."""
        s, status, _ = sc.open_raw_stream(port, "/v1/stream?topic=orders/1&format=ndjson", headers, src)
        if status == 200:
            held.append(s)
        else:
            s.close()
        return status

    def expect(statuses, headers_list, what):
        got = [open_raw(h) for h in headers_list]
        check_eq(got, statuses, what)

    def release_all():
        """Closes every held stream and waits until the edge gave every slot back."""
        while held:
            held.pop().close()
        harness.wait_until(lambda: sc.metric(sc.get_metrics(port), "studio_streams_open") == 0, 10,
                           "every stream closed on the edge")

    @t.case
    def forged_first_xff_line_is_not_the_client():
        try:
            # The client (198.51.100.7 as the proxy saw it) forges a new first line each time.
            reqs = [[("X-Forwarded-For", "203.0.113.%d" % i), ("X-Forwarded-For", "198.51.100.7")]
                    for i in range(1, 4)]
            expect([200, 200, 429], reqs, "three streams of 198.51.100.7 behind forged first lines")
            # The victims it named keep their own slots.
            expect([200, 200], [[("X-Forwarded-For", "203.0.113.1")]] * 2, "the named victim's own streams")
            # One line, client's forgery then the proxy's entry: the same rule.
            expect([429], [[("X-Forwarded-For", "203.0.113.9, 198.51.100.7")]], "one line with the forgery first")
        finally:
            release_all()

    @t.case
    def forwarded_header():
        try:
            reqs = [[("Forwarded", 'for="203.0.113.%d"' % i), ("Forwarded", 'for="198.51.100.8:4711";proto=http')]
                    for i in range(1, 4)]
            expect([200, 200, 429], reqs, "three streams of 198.51.100.8 behind forged Forwarded lines")
            expect([200], [[("Forwarded", "for=203.0.113.1")]], "the named victim's own stream")
            # Headers that disagree count as the proxy's own (one shared slot pair).
            both = [("X-Forwarded-For", "198.51.100.9"), ("Forwarded", "for=203.0.113.2")]
            expect([200, 200, 429], [both] * 3, "disagreeing headers share the proxy's slots")
            expect([200], [[("X-Forwarded-For", "198.51.100.9")]], "198.51.100.9 alone still has its own")
        finally:
            release_all()

    @t.case
    def ipv6_clients_count_per_64():
        try:
            same = ["2001:db8:1:2::1", "[2001:db8:1:2:ffff::9]:5000", "2001:db8:1:2::abcd"]
            got = [open_raw([("X-Forwarded-For", a)]) for a in same]
            check_eq(got, [200, 200, 429], "three clients in 2001:db8:1:2::/64")
            got = [open_raw([("Forwarded", 'for="[2001:db8:1:3::1]:4711"')]) for _ in range(2)]
            check_eq(got, [200, 200], "a client in another /64")
        finally:
            release_all()

    @t.case
    def edge_exits_cleanly():
        rc = edge.stop()
        check_eq(rc, 0, "exit status (logs: %s)" % (edge.logs(40) if rc else ""))
        check("Sanitizer" not in edge.logs(400), "a sanitizer report")

    t.main()
