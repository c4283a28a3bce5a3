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
		st_err rv = iplimit_new(2, cases[i].list, &l, why, sizeof(why));

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

	ST_ASSERT(iplimit_new(1, "10.0.0.0/8, 192.168.1.1, 172.16.0.0/12, fd00::/8", &l, why, sizeof(why)) == ST_OK);
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
	static const struct {
		const char *peer, *xff, *want;
	} cases[] = {
		{ "203.0.113.9", NULL, "203.0.113.9" },
		/* An untrusted peer's header is ignored. */
		{ "203.0.113.9", "198.51.100.1", "203.0.113.9" },
		{ "10.0.0.2", NULL, "10.0.0.2" },
		{ "10.0.0.2", "198.51.100.1", "198.51.100.1" },
		/* The client wrote "1.1.1.1" itself; our proxy appended what it saw. */
		{ "10.0.0.2", "1.1.1.1, 198.51.100.1", "198.51.100.1" },
		/* Two hops of ours: skip the trusted one. */
		{ "10.0.0.2", "1.1.1.1, 198.51.100.1, 10.0.0.7", "198.51.100.1" },
		{ "10.0.0.2", "10.0.0.8,10.0.0.7", "10.0.0.8" },
		{ "10.0.0.2", " 2001:db8::5 ", "2001:db8::5" },
		{ "10.0.0.2", "", "10.0.0.2" },
		{ "10.0.0.2", " , ,", "10.0.0.2" },
		/* Garbage stops the walk at the last good hop. */
		{ "10.0.0.2", "198.51.100.1, junk", "10.0.0.2" },
		{ "10.0.0.2", "junk, 10.0.0.9", "10.0.0.9" },
		{ "10.0.0.2", "1.1.1.1:443", "10.0.0.2" },
	};
	iplimit *l = NULL;
	char why[128], buf[64];

	ST_ASSERT(iplimit_new(1, "10.0.0.0/8", &l, why, sizeof(why)) == ST_OK);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		uint8_t peer[16], want[16], got[16];

		addr(cases[i].peer, peer);
		addr(cases[i].want, want);
		iplimit_client(l, peer, cases[i].xff, got);
		if (memcmp(got, want, 16) != 0)
			fprintf(stderr, "case %zu (%s, \"%s\"): got %s, want %s\n", i, cases[i].peer,
				cases[i].xff ? cases[i].xff : "(none)", iplimit_addr_str(got, buf, sizeof(buf)),
				cases[i].want);
		ST_CHECK(memcmp(got, want, 16) == 0);
	}
	iplimit_free(l);
}

static void
t_counting(void)
{
	iplimit *l = NULL, *off = NULL;
	uint8_t a[16], b[16];
	char why[128], buf[64];

	ST_ASSERT(iplimit_new(2, NULL, &l, why, sizeof(why)) == ST_OK);
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
	ST_ASSERT(iplimit_new(0, NULL, &off, why, sizeof(why)) == ST_OK);
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

	ST_ASSERT(iplimit_new(3, NULL, &shared, why, sizeof(why)) == ST_OK);
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
	ST_RUN(t_counting);
	ST_RUN(t_threads);
	return st_test_done();
}
