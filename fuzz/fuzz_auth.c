/*
 * fuzz_auth: what a subscriber or an operator hands the edge's access
 * control - the key file (a JWKS document) and the token's carriers
 * (Authorization, Cookie, access_token) down to the token's header and
 * claims.
 *
 * The first byte picks the part:
 *   - even: the rest is a key file.  st_auth_keys_parse must accept or refuse
 *     with a reason, never crash or leak, and an accepted set has 1..64 keys.
 *   - odd: the rest is "authorization \0 cookie \0 query".  The token that
 *     st_auth_token_extract returns must lie inside the argument it names; it
 *     is then verified against a fixed HS256 key set, which must never be
 *     ST_AUTH_OK (the fuzzer cannot forge HMAC-SHA256), and a token over
 *     ST_AUTH_TOKEN_MAX must be refused.
 */
#include <string.h>

#include "st_auth.h"
#include "fuzz_check.h"

static const char jwks[] = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k\",\"alg\":\"HS256\","
			   "\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}";

static bool
inside(const char *p, size_t len, const char *s)
{
	return s != NULL && p >= s && p + len <= s + strlen(s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static st_auth_keys *fixed;
	char why[256], *buf, *parts[3] = { NULL, NULL, NULL };
	st_auth_keys *ks = NULL;

	if (fixed == NULL)
		FUZZ_CHECK(st_auth_keys_parse(jwks, strlen(jwks), &fixed, why, sizeof(why)) == ST_OK, "fixed keys: %s",
			   why);
	if (size == 0)
		return 0;
	if ((data[0] & 1) == 0) {
		st_err rv = st_auth_keys_parse((const char *)data + 1, size - 1, &ks, why, sizeof(why));

		FUZZ_CHECK(rv == ST_OK || rv == ST_EINVAL, "keys: %d", (int)rv);
		FUZZ_CHECK((rv == ST_OK) == (ks != NULL), "keys: result and set disagree");
		FUZZ_CHECK(rv != ST_OK || (st_auth_keys_count(ks) >= 1 && st_auth_keys_count(ks) <= ST_AUTH_KEYS_MAX),
			   "count");
		FUZZ_CHECK(rv == ST_OK || why[0] != '\0', "refused without a reason");
		st_auth_keys_unref(ks);
		return 0;
	}
	buf = malloc(size);
	FUZZ_CHECK(buf != NULL, "malloc");
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	{
		char *p = buf, *end = buf + size - 1;

		for (int i = 0; i < 3 && p <= end; i++) {
			parts[i] = p;
			p += strlen(p) + 1;
		}
	}
	{
		const char *tok = NULL;
		size_t len = 0;
		bool allow = (data[0] & 2) != 0;
		enum st_auth_source src = st_auth_token_extract(parts[0], parts[1], (data[0] & 4) ? "sid" : NULL,
								parts[2], allow, &tok, &len);
		st_auth_policy pol = { .leeway_s = 30, .audience = (data[0] & 8) ? "a" : NULL };
		st_auth_grant *g = NULL;

		switch (src) {
		case ST_AUTH_SRC_NONE: FUZZ_CHECK(tok == NULL && len == 0, "none with a token"); break;
		case ST_AUTH_SRC_HEADER: FUZZ_CHECK(inside(tok, len, parts[0]), "header token outside"); break;
		case ST_AUTH_SRC_COOKIE: FUZZ_CHECK(inside(tok, len, parts[1]), "cookie token outside"); break;
		case ST_AUTH_SRC_QUERY: FUZZ_CHECK(allow && inside(tok, len, parts[2]), "query token"); break;
		}
		if (src != ST_AUTH_SRC_NONE) {
			enum st_auth_result r = st_auth_verify(fixed, tok, len, 1900000000000ull, &pol, &g, NULL);

			FUZZ_CHECK(r == ST_AUTH_INVALID || r == ST_AUTH_EXPIRED, "a forged token passed: %d", (int)r);
			FUZZ_CHECK(g == NULL, "grant on refusal");
		}
	}
	free(buf);
	return 0;
}
