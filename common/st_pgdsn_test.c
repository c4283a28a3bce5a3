/* Unit tests for st_pgdsn: which hosts need resolving, and the parameters built from addresses. */
#include "st_pgdsn.h"
#include "st_test.h"
#include "st_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
val_of(const char *const *keys, const char *const *vals, const char *key)
{
	const char *v = NULL;

	for (size_t i = 0; keys[i] != NULL; i++)
		if (strcmp(keys[i], key) == 0)
			v = vals[i]; /* the last one is what libpq uses */
	return v;
}

static st_pgdsn *
parse(const char *dsn)
{
	char err[256] = "";
	st_pgdsn *d = NULL;

	ST_CHECK(st_pgdsn_parse(dsn, &d, err, sizeof(err)) == ST_OK);
	return d;
}

/* Attempt i's host, hostaddr and port (NULL: not given), and the option key's value. */
static void
check_attempt(st_pgdsn *d, size_t i, const char *host, const char *addr, const char *port)
{
	const char *const *keys, *const *vals;

	st_pgdsn_params(d, i, NULL, NULL, &keys, &vals);
	if (host == NULL)
		ST_CHECK(val_of(keys, vals, "host") == NULL);
	else
		ST_CHECK_STR(val_of(keys, vals, "host"), host);
	if (addr == NULL)
		ST_CHECK(val_of(keys, vals, "hostaddr") == NULL);
	else
		ST_CHECK_STR(val_of(keys, vals, "hostaddr"), addr);
	if (port == NULL)
		ST_CHECK(val_of(keys, vals, "port") == NULL);
	else
		ST_CHECK_STR(val_of(keys, vals, "port"), port);
}

/* Numeric addresses and socket directories need no resolution: one attempt each, as written. */
static void
t_no_names(void)
{
	static const struct {
		const char *dsn, *host, *addr, *port;
	} cases[] = {
		{ "host=127.0.0.1 port=5432 dbname=x", "127.0.0.1", NULL, "5432" },
		{ "host=::1 dbname=x", "::1", NULL, NULL },
		{ "host=/run/postgresql dbname=x", "/run/postgresql", NULL, NULL },
		{ "postgresql://127.0.0.1:5433/x", "127.0.0.1", NULL, "5433" },
		{ "host=db.example hostaddr=10.0.0.1 dbname=x", "db.example", "10.0.0.1", NULL },
		{ "hostaddr=10.0.0.1 port=7 dbname=x", NULL, "10.0.0.1", "7" },
		{ "dbname=x", NULL, NULL, NULL },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_pgdsn *d = parse(cases[i].dsn);
		const char *const *names, *const *keys, *const *vals;

		ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 0);
		ST_CHECK_EQ_U64(st_pgdsn_round(d, NULL), 1);
		check_attempt(d, 0, cases[i].host, cases[i].addr, cases[i].port);
		st_pgdsn_params(d, 0, NULL, NULL, &keys, &vals);
		ST_CHECK_STR(val_of(keys, vals, "dbname"), "x");
		st_pgdsn_free(d);
	}
}

/* One name, two addresses: two attempts, the name kept for TLS, the port kept, extras override. */
static void
t_one_name(void)
{
	st_pgdsn *d = parse("host=db.slow.test port=6000 dbname=app sslmode=verify-full");
	const char *const *names, *const *keys, *const *vals;
	const char *addrs[] = { "10.0.0.1,fd00::2" };
	const char *xk[] = { "application_name", "sslmode", NULL }, *xv[] = { "w", "require", NULL };

	ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 1);
	ST_CHECK_STR(names[0], "db.slow.test");
	ST_CHECK_EQ_U64(st_pgdsn_round(d, addrs), 2);
	check_attempt(d, 0, "db.slow.test", "10.0.0.1", "6000");
	check_attempt(d, 1, "db.slow.test", "fd00::2", "6000");
	ST_CHECK_STR(st_pgdsn_label(d, 1), "db.slow.test (fd00::2) port 6000");
	st_pgdsn_params(d, 0, xk, xv, &keys, &vals);
	ST_CHECK_STR(val_of(keys, vals, "dbname"), "app");
	ST_CHECK_STR(val_of(keys, vals, "application_name"), "w");
	ST_CHECK_STR(val_of(keys, vals, "sslmode"), "require");
	/* a later round with other addresses rebuilds the attempts */
	addrs[0] = "10.0.0.9";
	ST_CHECK_EQ_U64(st_pgdsn_round(d, addrs), 1);
	check_attempt(d, 0, "db.slow.test", "10.0.0.9", "6000");
	st_pgdsn_params(d, 0, NULL, NULL, &keys, &vals);
	ST_CHECK_STR(val_of(keys, vals, "sslmode"), "verify-full");
	st_pgdsn_free(d);
}

/* Multi-host URI: per-host ports follow their host; a numeric host has no hostaddr; a name
 * that did not resolve is left out; none left is a round of 0. */
static void
t_multi_host(void)
{
	st_pgdsn *d = parse("postgresql://a.test:1,127.0.0.1:2,b.test:3,a.test:4/app");
	const char *const *names;
	const char *addrs[] = { "10.0.0.1", "" };

	ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 2);
	ST_CHECK_STR(names[0], "a.test");
	ST_CHECK_STR(names[1], "b.test");
	ST_CHECK_EQ_U64(st_pgdsn_round(d, addrs), 3);
	check_attempt(d, 0, "a.test", "10.0.0.1", "1");
	check_attempt(d, 1, "127.0.0.1", NULL, "2");
	check_attempt(d, 2, "a.test", "10.0.0.1", "4");
	st_pgdsn_free(d);

	d = parse("host=a.test,b.test");
	addrs[0] = "";
	ST_CHECK_EQ_U64(st_pgdsn_round(d, addrs), 0);
	st_pgdsn_free(d);

	/* the report's shape: the same address twice, the first port closed */
	d = parse("host=127.0.0.1,127.0.0.1 port=5433,5432 connect_timeout=3");
	ST_CHECK_EQ_U64(st_pgdsn_round(d, NULL), 2);
	check_attempt(d, 0, "127.0.0.1", NULL, "5433");
	check_attempt(d, 1, "127.0.0.1", NULL, "5432");
	ST_CHECK_EQ_U64(st_pgdsn_attempt_ms(d, 10000), 3000);
	st_pgdsn_free(d);
}

/* prefer-standby: every address asked for a standby first, then for any server. */
static void
t_prefer_standby(void)
{
	st_pgdsn *d = parse("host=127.0.0.1,127.0.0.2 target_session_attrs=prefer-standby");
	const char *const *keys, *const *vals;

	ST_CHECK_EQ_U64(st_pgdsn_round(d, NULL), 4);
	for (size_t i = 0; i < 4; i++) {
		st_pgdsn_params(d, i, NULL, NULL, &keys, &vals);
		ST_CHECK_STR(val_of(keys, vals, "target_session_attrs"), i < 2 ? "standby" : "any");
		ST_CHECK_STR(val_of(keys, vals, "host"), i % 2 == 0 ? "127.0.0.1" : "127.0.0.2");
	}
	st_pgdsn_free(d);
}

static void
t_attempt_deadline(void)
{
	static const struct {
		const char *dsn;
		uint64_t ms;
	} cases[] = {
		{ "host=h", 10000 },
		{ "host=h connect_timeout=0", 10000 },
		{ "host=h connect_timeout=1", 2000 },
		{ "host=h connect_timeout=7", 7000 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_pgdsn *d = parse(cases[i].dsn);
		ST_CHECK_EQ_U64(st_pgdsn_attempt_ms(d, 10000), cases[i].ms);
		st_pgdsn_free(d);
	}
}

/* What libpq would refuse only when it connects is refused by the parse, naming the option. */
static void
t_bad(void)
{
	static const struct {
		const char *dsn, *needle;
	} cases[] = {
		{ "host=a,b,c port=1,2", "2 ports for 3 hosts" },
		{ "host=a port=1,2", "2 ports for 1 hosts" },
		{ "port=1,2", "2 ports for 1 hosts" },
		{ "host=a,b hostaddr=10.0.0.1", "1 hostaddr values for 2 hosts" },
		{ "host", "not a libpq connection string" },
		{ "host=a sslmode=bogus", "sslmode \"bogus\" is not one of" },
		{ "host=a gssencmode=bogus", "gssencmode" },
		{ "host=a channel_binding=bogus", "channel_binding" },
		{ "host=a target_session_attrs=bogus", "target_session_attrs" },
		{ "host=a ssl_min_protocol_version=TLSv9", "ssl_min_protocol_version" },
		{ "host=a ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2", "below" },
		{ "host=a port=99999", "port" },
		{ "host=a port=abc", "port" },
		{ "host=a connect_timeout=soon", "connect_timeout" },
		{ "host=a password=s3cret port=0", "port" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char err[256] = "";
		st_pgdsn *d = NULL;

		ST_CHECK(st_pgdsn_parse(cases[i].dsn, &d, err, sizeof(err)) == ST_EINVAL);
		if (strstr(err, cases[i].needle) == NULL)
			printf("  case %zu %s: error %s lacks %s\n", i, cases[i].dsn, err, cases[i].needle);
		ST_CHECK(strstr(err, cases[i].needle) != NULL);
		ST_CHECK(strchr(err, '\n') == NULL && strstr(err, "s3cret") == NULL);
	}
	/* every value libpq 15 accepts passes */
	for (const char *const *ok = (const char *const[]){ "sslmode=verify-full", "target_session_attrs=read-write",
							    "gssencmode=disable", "channel_binding=require",
							    "ssl_min_protocol_version=TLSv1.2", NULL };
	     *ok != NULL; ok++) {
		char dsn[128];
		snprintf(dsn, sizeof(dsn), "host=a %s", *ok);
		st_pgdsn_free(parse(dsn));
	}
}

int
main(void)
{
	unsetenv("PGHOST");
	unsetenv("PGPORT");
	unsetenv("PGHOSTADDR");
	ST_RUN(t_no_names);
	ST_RUN(t_one_name);
	ST_RUN(t_multi_host);
	ST_RUN(t_prefer_standby);
	ST_RUN(t_attempt_deadline);
	ST_RUN(t_bad);
	return st_test_done();
}
