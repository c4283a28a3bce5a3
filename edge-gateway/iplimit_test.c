/* iplimit_test: CIDR parsing, the client behind trusted proxies, per-address counting (table-driven). */
#include "iplimit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"

static void
addr(const char *s, uint8_t out[16])
{
	struct in_addr a4;

	memset(out, 0, 16);
	if (inet_pton(AF_INET, s, &a4) == 1) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &a4, 4);
		return;
	}
	ST_ASSERT(inet_pton(AF_INET6, s, out) == 1);
}

static void
t_parse_table(void)
{
	static const struct {
		const char *list;
		bool ok;
	} cases[] = {
		{ "", true },
		{ "10.0.0.0/8", true },
		{ "10.0.0.0/8, 192.168.1.1 ,fd00::/8", true },
		{ "127.0.0.1", true },
		{ "::1/128", true },
		{ "10.0.0.0/33", false },
		{ "fd00::/129", false },
		{ "10.0.0.0/", false },
		{ "10.0.0.0/x", false },
		{ "example.com", false },
		{ "10.0.0.0/8/8", false },
		{ "1.2.3.4/0032", false },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		iplimit *l = NULL;
		char why[128] = "";
		st_err rv = iplimit_new(2, cases[i].list, 64, &l, why, sizeof(why));

		if ((rv == ST_OK) != cases[i].ok)
			fprintf(stderr, "case \"%s\": rv %d (%s)\n", cases[i].list, (int)rv, why);
		ST_CHECK((rv == ST_OK) == cases[i].ok);
		ST_CHECK(rv == ST_OK || why[0] != '\0');
		iplimit_free(l);
	}
}

static void
t_trusted_table(void)
{
	static const struct {
		const char *a;
		bool trusted;
	} cases[] = {
		{ "10.1.2.3", true },   { "11.0.0.1", false },       { "192.168.1.1", true }, { "192.168.1.2", false },
		{ "172.16.0.1", true }, { "172.31.255.255", true },  { "172.32.0.0", false }, { "fd12::1", true },
		{ "fe80::1", false },   { "::ffff:10.0.0.1", true }, { "::1", false },
	};
	iplimit *l = NULL;
	char why[128];

	ST_ASSERT(iplimit_new(1, "10.0.0.0/8, 192.168.1.1, 172.16.0.0/12, fd00::/8", 64, &l, why, sizeof(why)) ==
		  ST_OK);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		uint8_t a[16];

		addr(cases[i].a, a);
		if (iplimit_trusted(l, a) != cases[i].trusted)
			fprintf(stderr, "case %s: want trusted=%d\n", cases[i].a, (int)cases[i].trusted);
		ST_CHECK(iplimit_trusted(l, a) == cases[i].trusted);
	}
	iplimit_free(l);
}

static void
t_client_table(void)
{
	/* Up to 3 lines of each header, in order; NULL ends the lines. */
	static const struct {
		const char *peer, *xff[3], *fwd[3], *want;
	} cases[] = {
		{ "203.0.113.9", { NULL }, { NULL }, "203.0.113.9" },
		/* An untrusted peer's headers are ignored. */
		{ "203.0.113.9", { "198.51.100.1" }, { NULL }, "203.0.113.9" },
		{ "203.0.113.9", { NULL }, { "for=198.51.100.1" }, "203.0.113.9" },
		{ "10.0.0.2", { NULL }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { "198.51.100.1" }, { NULL }, "198.51.100.1" },
		/* The client wrote "1.1.1.1" itself; our proxy appended what it saw. */
		{ "10.0.0.2", { "1.1.1.1, 198.51.100.1" }, { NULL }, "198.51.100.1" },
		/* The same through two lines (HAProxy option forwardfor adds its own line). */
		{ "10.0.0.2", { "1.1.1.1", "198.51.100.1" }, { NULL }, "198.51.100.1" },
		{ "10.0.0.2", { "1.1.1.1, 2.2.2.2", "198.51.100.1", "10.0.0.7" }, { NULL }, "198.51.100.1" },
		{ "10.0.0.2", { "1.1.1.1", "" }, { NULL }, "1.1.1.1" },
		/* Two hops of ours: skip the trusted one. */
		{ "10.0.0.2", { "1.1.1.1, 198.51.100.1, 10.0.0.7" }, { NULL }, "198.51.100.1" },
		{ "10.0.0.2", { "10.0.0.8,10.0.0.7" }, { NULL }, "10.0.0.8" },
		{ "10.0.0.2", { " 2001:db8::5 " }, { NULL }, "2001:db8::5" },
		{ "10.0.0.2", { "" }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { " , ," }, { NULL }, "10.0.0.2" },
		/* Ports and brackets. */
		{ "10.0.0.2", { "1.1.1.1:443" }, { NULL }, "1.1.1.1" },
		{ "10.0.0.2", { "[2001:db8::1]:4711" }, { NULL }, "2001:db8::1" },
		{ "10.0.0.2", { "[2001:db8::1]" }, { NULL }, "2001:db8::1" },
		{ "10.0.0.2", { "1.1.1.1:_obf" }, { NULL }, "1.1.1.1" },
		{ "10.0.0.2", { "1.1.1.1:65536" }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { "[1.1.1.1]" }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { "[2001:db8::1]x" }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { "[2001:db8::1" }, { NULL }, "10.0.0.2" },
		/* Garbage stops the walk at the last good hop. */
		{ "10.0.0.2", { "198.51.100.1, junk" }, { NULL }, "10.0.0.2" },
		{ "10.0.0.2", { "junk, 10.0.0.9" }, { NULL }, "10.0.0.9" },
		{ "10.0.0.2", { "198.51.100.1", "unknown" }, { NULL }, "10.0.0.2" },
		/* Forwarded (RFC 7239 examples and variants). */
		{ "10.0.0.2", { NULL }, { "for=192.0.2.43" }, "192.0.2.43" },
		{ "10.0.0.2", { NULL }, { "For=\"[2001:db8:cafe::17]:4711\"" }, "2001:db8:cafe::17" },
		{ "10.0.0.2", { NULL }, { "for=192.0.2.60;proto=http;by=203.0.113.43" }, "192.0.2.60" },
		{ "10.0.0.2", { NULL }, { "proto=https; for=\"192.0.2.60:8080\" ;by=x" }, "192.0.2.60" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1, for=198.51.100.17" }, "198.51.100.17" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1", "for=198.51.100.17" }, "198.51.100.17" },
		{ "10.0.0.2", { NULL }, { "for=198.51.100.17, for=10.0.0.5" }, "198.51.100.17" },
		{ "10.0.0.2", { NULL }, { "for=\"1.1.\\1.1\"" }, "1.1.1.1" },
		/* Unquoted port and brackets (not RFC 7239, but what for=$remote_addr writes). */
		{ "10.0.0.2", { NULL }, { "for=[2001:db8::7]:80" }, "2001:db8::7" },
		{ "10.0.0.2", { NULL }, { "for=2001:db8::7" }, "2001:db8::7" },
		{ "10.0.0.2", { NULL }, { "for=1.2.3.4:80" }, "1.2.3.4" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1,, ,for=198.51.100.17" }, "198.51.100.17" },
		/* Unknown and obfuscated identifiers: the hop is not known, the walk stops before it. */
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1, for=unknown" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1, for=_hidden" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=_hidden, for=198.51.100.17" }, "198.51.100.17" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1, proto=http" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=1.1.1.1;for=2.2.2.2" }, "10.0.0.2" },
		/* Syntax errors end the line with a hop that is not an address. */
		{ "10.0.0.2", { NULL }, { "for=198.51.100.17, for=\"1.1.1.1" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=198.51.100.17, for" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=198.51.100.17, for=" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=198.51.100.17 x" }, "10.0.0.2" },
		{ "10.0.0.2", { NULL }, { "for=\"2001:db8::1\"x" }, "10.0.0.2" },
		{ "10.0.0.2",
		  { NULL },
		  { "for=\"0123456789012345678901234567890123456789012345678901234567890123456789\"" },
		  "10.0.0.2" },
		/* Both headers: agreeing, they count; disagreeing, the proxy's own address. */
		{ "10.0.0.2", { "198.51.100.1" }, { "for=198.51.100.1" }, "198.51.100.1" },
		{ "10.0.0.2", { "198.51.100.1" }, { "for=192.0.2.99" }, "10.0.0.2" },
		{ "10.0.0.2", { "192.0.2.99", "198.51.100.1" }, { "for=192.0.2.99" }, "10.0.0.2" },
		{ "10.0.0.2", { "" }, { "for=192.0.2.99" }, "192.0.2.99" },
	};
	iplimit *l = NULL;
	char why[128], buf[64];

	ST_ASSERT(iplimit_new(1, "10.0.0.0/8", 64, &l, why, sizeof(why)) == ST_OK);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		uint8_t peer[16], want[16], got[16];
		size_t nx = 0, nf = 0;

		while (nx < 3 && cases[i].xff[nx])
			nx++;
		while (nf < 3 && cases[i].fwd[nf])
			nf++;
		addr(cases[i].peer, peer);
		addr(cases[i].want, want);
		iplimit_client(l, peer, cases[i].xff, nx, cases[i].fwd, nf, got);
		if (memcmp(got, want, 16) != 0)
			fprintf(stderr, "case %zu (%s, xff \"%s\" fwd \"%s\"): got %s, want %s\n", i, cases[i].peer,
				cases[i].xff[0] ? cases[i].xff[0] : "(none)",
				cases[i].fwd[0] ? cases[i].fwd[0] : "(none)", iplimit_addr_str(got, buf, sizeof(buf)),
				cases[i].want);
		ST_CHECK(memcmp(got, want, 16) == 0);
	}
	iplimit_free(l);
}

/* Thousands of entries: one pass into the fixed ring, the walk sees the last IPLIMIT_HOPS. */
static void
t_long_lists(void)
{
	enum { N = 4000 };
	static char line[N * 32];
	size_t off = 0;
	iplimit *l = NULL;
	iplimit_hops h = { .n = 0 };
	uint8_t peer[16], got[16], want[16];
	const char *lines[1] = { line };
	char why[128], buf[64];

	for (int i = 0; i < N; i++)
		off += (size_t)snprintf(line + off, sizeof(line) - off, "%s10.%d.%d.1", i ? "," : "", i / 250, i % 250);
	iplimit_xff_parse(line, &h);
	ST_CHECK(h.n == N);
	ST_ASSERT(iplimit_new(1, "10.0.0.0/8", 64, &l, why, sizeof(why)) == ST_OK);
	addr("10.0.0.2", peer);
	/* Every hop trusted: the walk stops at the oldest kept, N - IPLIMIT_HOPS. */
	iplimit_client(l, peer, lines, 1, NULL, 0, got);
	snprintf(buf, sizeof(buf), "10.%d.%d.1", (N - IPLIMIT_HOPS) / 250, (N - IPLIMIT_HOPS) % 250);
	addr(buf, want);
	if (memcmp(got, want, 16) != 0)
		fprintf(stderr, "long list: got %s, want %s\n", iplimit_addr_str(got, why, sizeof(why)), buf);
	ST_CHECK(memcmp(got, want, 16) == 0);
	/* The same as Forwarded elements. */
	off = 0;
	for (int i = 0; i < N; i++)
		off += (size_t)snprintf(line + off, sizeof(line) - off, "%sfor=\"10.%d.%d.1:80\"", i ? "," : "",
					i / 250, i % 250);
	memset(&h, 0, sizeof(h));
	iplimit_forwarded_parse(line, &h);
	ST_CHECK(h.n == N);
	iplimit_client(l, peer, NULL, 0, lines, 1, got);
	ST_CHECK(memcmp(got, want, 16) == 0);
	iplimit_free(l);
}

/* IPv6 clients count per --ipv6-prefix; IPv4 per address. */
static void
t_ipv6_prefix(void)
{
	static const struct {
		unsigned bits;
		const char *a, *b;
		bool shared;
	} cases[] = {
		{ 64, "2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true },
		{ 64, "2001:db8:1:2::1", "2001:db8:1:3::1", false },
		{ 48, "2001:db8:1:2::1", "2001:db8:1:3::1", true },
		{ 128, "2001:db8:1:2::1", "2001:db8:1:2::2", false },
		{ 56, "2001:db8:1:ff::1", "2001:db8:1:1ff::1", false },
		{ 64, "192.0.2.1", "192.0.2.2", false },
	};
	static const unsigned bad[] = { 0, 31, 129, 1000 };
	char why[128];

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		iplimit *l = NULL;
		uint8_t a[16], b[16];
		bool second;

		ST_ASSERT(iplimit_new(1, NULL, cases[i].bits, &l, why, sizeof(why)) == ST_OK);
		addr(cases[i].a, a);
		addr(cases[i].b, b);
		ST_CHECK(iplimit_acquire(l, a));
		second = iplimit_acquire(l, b);
		if (second == cases[i].shared)
			fprintf(stderr, "/%u %s and %s: shared=%d, want %d\n", cases[i].bits, cases[i].a, cases[i].b,
				(int)!second, (int)cases[i].shared);
		ST_CHECK(second != cases[i].shared);
		ST_CHECK(iplimit_addresses(l) == (cases[i].shared ? 1u : 2u));
		if (second)
			iplimit_release(l, b);
		iplimit_release(l, a);
		ST_CHECK(iplimit_addresses(l) == 0);
		iplimit_free(l);
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
		iplimit *l = NULL;

		why[0] = '\0';
		ST_CHECK(iplimit_new(1, NULL, bad[i], &l, why, sizeof(why)) == ST_EINVAL);
		ST_CHECK(l == NULL && strstr(why, "32..128") != NULL);
	}
}

static void
t_counting(void)
{
	iplimit *l = NULL, *off = NULL;
	uint8_t a[16], b[16];
	char why[128], buf[64];

	ST_ASSERT(iplimit_new(2, NULL, 64, &l, why, sizeof(why)) == ST_OK);
	addr("192.0.2.1", a);
	addr("2001:db8::1", b);
	ST_CHECK(iplimit_acquire(l, a));
	ST_CHECK(iplimit_acquire(l, a));
	ST_CHECK(!iplimit_acquire(l, a));
	ST_CHECK(iplimit_acquire(l, b));
	ST_CHECK_EQ_U64(iplimit_addresses(l), 2);
	iplimit_release(l, a);
	ST_CHECK(iplimit_acquire(l, a));
	iplimit_release(l, a);
	iplimit_release(l, a);
	iplimit_release(l, b);
	ST_CHECK_EQ_U64(iplimit_addresses(l), 0);
	ST_CHECK_STR(iplimit_addr_str(a, buf, sizeof(buf)), "192.0.2.1");
	ST_CHECK_STR(iplimit_addr_str(b, buf, sizeof(buf)), "2001:db8::1");
	iplimit_free(l);
	/* 0: no limit, nothing counted. */
	ST_ASSERT(iplimit_new(0, NULL, 64, &off, why, sizeof(why)) == ST_OK);
	for (int i = 0; i < 100; i++)
		ST_CHECK(iplimit_acquire(off, a));
	ST_CHECK_EQ_U64(iplimit_addresses(off), 0);
	iplimit_free(off);
}

/* Several loops share one table: concurrent takes never exceed the bound. */
static iplimit *shared;
static int granted[4];

static void *
taker(void *arg)
{
	int i = (int)(intptr_t)arg;
	uint8_t a[16];

	addr("198.51.100.7", a);
	for (int k = 0; k < 1000; k++) {
		if (iplimit_acquire(shared, a)) {
			granted[i]++;
			iplimit_release(shared, a);
		}
	}
	return NULL;
}

static void
t_threads(void)
{
	pthread_t th[4];
	char why[128];
	uint8_t a[16];
	int held = 0;

	ST_ASSERT(iplimit_new(3, NULL, 64, &shared, why, sizeof(why)) == ST_OK);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, taker, (void *)(intptr_t)i);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	ST_CHECK_EQ_U64(iplimit_addresses(shared), 0);
	addr("198.51.100.7", a);
	while (iplimit_acquire(shared, a))
		held++;
	ST_CHECK_EQ_U64(held, 3);
	iplimit_free(shared);
}

int
main(void)
{
	ST_RUN(t_parse_table);
	ST_RUN(t_trusted_table);
	ST_RUN(t_client_table);
	ST_RUN(t_long_lists);
	ST_RUN(t_ipv6_prefix);
	ST_RUN(t_counting);
	ST_RUN(t_threads);
	return st_test_done();
}
