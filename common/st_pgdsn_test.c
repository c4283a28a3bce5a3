/* Unit tests for st_pgdsn: which hosts need resolving, and the parameters built from addresses. */
#include "st_pgdsn.h"
#include "st_test.h"

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

/* Numeric addresses and socket directories need no resolution; the DSN goes through as it is. */
static void
t_no_names(void)
{
	const char *dsns[] = { "host=127.0.0.1 port=5432 dbname=x", "host=::1 dbname=x", "host=/run/postgresql dbname=x",
		               "postgresql://127.0.0.1:5433/x", "host=db.example hostaddr=10.0.0.1 dbname=x" };

	for (size_t i = 0; i < sizeof(dsns) / sizeof(dsns[0]); i++) {
		st_pgdsn *d = parse(dsns[i]);
		const char *const *names, *const *keys, *const *vals;

		ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 0);
		ST_CHECK(st_pgdsn_params(d, NULL, NULL, NULL, &keys, &vals) == ST_OK);
		ST_CHECK(val_of(keys, vals, "dbname") != NULL);
		st_pgdsn_free(d);
	}
}

/* One name, two addresses: two entries, the name kept for TLS, the port kept. */
static void
t_one_name(void)
{
	st_pgdsn *d = parse("host=db.slow.test port=6000 dbname=app sslmode=verify-full");
	const char *const *names, *const *keys, *const *vals;
	const char *addrs[] = { "10.0.0.1,fd00::2" };
	const char *xk[] = { "application_name", "sslmode", NULL }, *xv[] = { "w", "require", NULL };

	ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 1);
	ST_CHECK_STR(names[0], "db.slow.test");
	ST_CHECK(st_pgdsn_params(d, addrs, xk, xv, &keys, &vals) == ST_OK);
	ST_CHECK_STR(val_of(keys, vals, "host"), "db.slow.test,db.slow.test");
	ST_CHECK_STR(val_of(keys, vals, "hostaddr"), "10.0.0.1,fd00::2");
	ST_CHECK_STR(val_of(keys, vals, "port"), "6000,6000");
	ST_CHECK_STR(val_of(keys, vals, "dbname"), "app");
	ST_CHECK_STR(val_of(keys, vals, "application_name"), "w");
	ST_CHECK_STR(val_of(keys, vals, "sslmode"), "require"); /* extras override */
	/* a later round with other addresses rebuilds the lists */
	addrs[0] = "10.0.0.9";
	ST_CHECK(st_pgdsn_params(d, addrs, NULL, NULL, &keys, &vals) == ST_OK);
	ST_CHECK_STR(val_of(keys, vals, "hostaddr"), "10.0.0.9");
	ST_CHECK_STR(val_of(keys, vals, "host"), "db.slow.test");
	ST_CHECK_STR(val_of(keys, vals, "sslmode"), "verify-full");
	st_pgdsn_free(d);
}

/* Multi-host URI: per-host ports follow their host; a numeric host keeps an empty hostaddr; a name
 * that did not resolve is left out; none left is an error. */
static void
t_multi_host(void)
{
	st_pgdsn *d = parse("postgresql://a.test:1,127.0.0.1:2,b.test:3,a.test:4/app");
	const char *const *names, *const *keys, *const *vals;
	const char *addrs[] = { "10.0.0.1", "" };

	ST_CHECK_EQ_U64(st_pgdsn_names(d, &names), 2);
	ST_CHECK_STR(names[0], "a.test");
	ST_CHECK_STR(names[1], "b.test");
	ST_CHECK(st_pgdsn_params(d, addrs, NULL, NULL, &keys, &vals) == ST_OK);
	ST_CHECK_STR(val_of(keys, vals, "host"), "a.test,127.0.0.1,a.test");
	ST_CHECK_STR(val_of(keys, vals, "hostaddr"), "10.0.0.1,,10.0.0.1");
	ST_CHECK_STR(val_of(keys, vals, "port"), "1,2,4");
	st_pgdsn_free(d);

	d = parse("host=a.test,b.test");
	addrs[0] = "";
	ST_CHECK(st_pgdsn_params(d, addrs, NULL, NULL, &keys, &vals) == ST_EINVAL);
	st_pgdsn_free(d);
}

static void
t_bad(void)
{
	char err[256] = "";
	st_pgdsn *d = NULL;

	ST_CHECK(st_pgdsn_parse("host=a,b,c port=1,2", &d, err, sizeof(err)) == ST_EINVAL);
	ST_CHECK(strstr(err, "2 ports for 3 hosts") != NULL);
	ST_CHECK(st_pgdsn_parse("host", &d, err, sizeof(err)) == ST_EINVAL);
	ST_CHECK(strncmp(err, "bad DSN", 7) == 0 && strchr(err, '\n') == NULL);
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
	ST_RUN(t_bad);
	return st_test_done();
}
