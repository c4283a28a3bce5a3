/*
 * options_test: studio_options_* by name: every number checked against its
 * range when set (nothing above INT32_MAX reaches nng), the token's bound,
 * unknown names, NULL arguments.
 */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"
#include "studio_producer.h"

/* Options by name: ranges checked, so nothing above INT32_MAX becomes a negative nng duration. */
static void
t_options(void)
{
	studio_options *o = studio_options_new();
	static const struct {
		const char *name, *value;
		studio_status want;
	} cases[] = {
		{ "try_timeout_ms", "2147483647", STUDIO_OK },
		{ "try_timeout_ms", "2147483648", STUDIO_USAGE },
		{ "try_timeout_ms", "4294967295", STUDIO_USAGE },
		{ "try_timeout_ms", "99999999999999999999999", STUDIO_USAGE },
		{ "try_timeout_ms", "0", STUDIO_USAGE },
		{ "try_timeout_ms", "-1", STUDIO_USAGE },
		{ "try_timeout_ms", "10s", STUDIO_USAGE },
		{ "try_timeout_ms", "", STUDIO_USAGE },
		{ "backoff_base_ms", "100", STUDIO_OK },
		{ "backoff_cap_ms", "3000000000", STUDIO_USAGE },
		{ "max_inflight", "65536", STUDIO_OK },
		{ "max_inflight", "65537", STUDIO_USAGE },
		{ "keys", "off", STUDIO_OK },
		{ "keys", "no", STUDIO_USAGE },
		{ "tls_ca", "/nonexistent", STUDIO_OK },
		{ "token", "aaa.bbb.ccc", STUDIO_OK },
		{ "token", "", STUDIO_OK },
		{ "no_such_option", "1", STUDIO_USAGE },
	};
	char err[256];
	char *long_tok = malloc(8194);

	ST_CHECK(o != NULL);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		studio_status st;

		err[0] = '\0';
		st = studio_options_set(o, cases[i].name, cases[i].value, err, sizeof(err));
		fprintf(stderr, "  %s=%s -> %s \"%s\"\n", cases[i].name, cases[i].value, studio_status_str(st), err);
		ST_CHECK(st == cases[i].want);
	}
	ST_CHECK(studio_options_set(o, NULL, "1", err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK(studio_options_set(NULL, "keys", "on", err, sizeof(err)) == STUDIO_USAGE);
	/* a token is at most 8192 bytes (the writer's bound) */
	ST_CHECK(long_tok != NULL);
	memset(long_tok, 'a', 8193);
	long_tok[8193] = '\0';
	ST_CHECK(studio_options_set(o, "token", long_tok, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK_STR(err, "option token: longer than 8192 bytes");
	long_tok[8192] = '\0';
	ST_CHECK(studio_options_set(o, "token", long_tok, err, sizeof(err)) == STUDIO_OK);
	free(long_tok);
	ST_CHECK(studio_options_set_token_fn(NULL, NULL, NULL) == STUDIO_USAGE);
	ST_CHECK(studio_options_set_token_fn(o, NULL, NULL) == STUDIO_OK);
	studio_options_free(o);
	studio_options_free(NULL);
}

int
main(void)
{
	ST_RUN(t_options);
	return st_test_done();
}
