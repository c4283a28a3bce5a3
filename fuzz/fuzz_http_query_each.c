/*
 * fuzz_http_query_each: the query string of every stream request
 * (?topic=...&format=...) comes straight from the client.
 *
 * Differential: a reference decoder written here from the header's words
 * (items split on '&', empty items skipped, key and value split on the
 * first '=', %XX and '+' decoded, at most 1024 decoded bytes per key or
 * value, at most 256 pairs, a malformed escape refused) must produce the
 * same verdict and the same pairs, byte for byte, in the same order.  On a
 * refusal fn may only have seen a prefix of the pairs.  A callback that
 * stops at pair k must stop the walk there with its own error code.  The
 * query is a C string, so the input is cut at its first NUL.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_http_parse.h"

#define ITEM_MAX 1024
#define PAIRS_MAX 256

struct pair {
	char k[ITEM_MAX], v[ITEM_MAX];
	size_t kl, vl;
};

static struct pair ref[PAIRS_MAX], got[PAIRS_MAX];

struct sink {
	size_t n;
	size_t stop_at; /* return ST_EBUSY at this call index; SIZE_MAX: never */
};

static int
hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool
ref_decode(const char *p, size_t n, char *out, size_t *outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		int c = (unsigned char)p[i];

		if (c == '%') {
			if (n - i < 3 || hex((unsigned char)p[i + 1]) < 0 || hex((unsigned char)p[i + 2]) < 0)
				return false;
			c = hex((unsigned char)p[i + 1]) * 16 + hex((unsigned char)p[i + 2]);
			i += 3;
		} else {
			if (c == '+')
				c = ' ';
			i++;
		}
		if (o == ITEM_MAX)
			return false;
		out[o++] = (char)c;
	}
	*outlen = o;
	return true;
}

/* Returns true (valid) and the pairs in ref[0..*np), or false. */
static bool
ref_walk(const char *q, size_t len, size_t *np)
{
	size_t i = 0, n = 0;

	while (i < len) {
		size_t e = i, eq;

		while (e < len && q[e] != '&')
			e++;
		if (e == i) {
			i++;
			continue;
		}
		if (n == PAIRS_MAX)
			return false;
		for (eq = i; eq < e && q[eq] != '='; eq++)
			;
		if (!ref_decode(q + i, eq - i, ref[n].k, &ref[n].kl))
			return false;
		ref[n].vl = 0;
		if (eq < e && !ref_decode(q + eq + 1, e - eq - 1, ref[n].v, &ref[n].vl))
			return false;
		n++;
		i = e < len ? e + 1 : e;
	}
	*np = n;
	return true;
}

static st_err
on_pair(const char *key, size_t klen, const char *val, size_t vlen, void *arg)
{
	struct sink *s = arg;

	FUZZ_CHECK(key != NULL && val != NULL, "NULL key or value");
	FUZZ_CHECK(klen <= ITEM_MAX && vlen <= ITEM_MAX, "item of %zu/%zu bytes", klen, vlen);
	FUZZ_CHECK(s->n < PAIRS_MAX, "more than %d pairs", PAIRS_MAX);
	memcpy(got[s->n].k, key, klen); /* ASan: the bytes must be there */
	memcpy(got[s->n].v, val, vlen);
	got[s->n].kl = klen;
	got[s->n].vl = vlen;
	if (s->n++ == s->stop_at)
		return ST_EBUSY;
	return ST_OK;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t len = strnlen((const char *)data, size), nref = 0;
	char *q = malloc(len + 1);
	struct sink s = { 0, SIZE_MAX };
	bool ok;
	st_err rv;

	FUZZ_CHECK(q != NULL, "malloc");
	memcpy(q, data, len);
	q[len] = '\0';
	ok = ref_walk(q, len, &nref);
	rv = http_query_each(q, on_pair, &s);
	if (!ok) {
		FUZZ_CHECK(rv == ST_EINVAL, "reference refuses, http_query_each returns %d", (int)rv);
		FUZZ_CHECK(s.n <= PAIRS_MAX, "pairs");
		/* what fn saw must be a prefix of the reference's walk up to the error: not checked further */
		goto done;
	}
	FUZZ_CHECK(rv == ST_OK, "reference accepts, http_query_each returns %d", (int)rv);
	FUZZ_CHECK(s.n == nref, "%zu pairs, reference %zu", s.n, nref);
	for (size_t i = 0; i < nref; i++)
		FUZZ_CHECK(got[i].kl == ref[i].kl && memcmp(got[i].k, ref[i].k, ref[i].kl) == 0 &&
				   got[i].vl == ref[i].vl && memcmp(got[i].v, ref[i].v, ref[i].vl) == 0,
			   "pair %zu differs from the reference", i);
	if (nref > 0) {
		struct sink s2 = { 0, (size_t)data[0] % nref };

		rv = http_query_each(q, on_pair, &s2);
		FUZZ_CHECK(rv == ST_EBUSY, "fn's ST_EBUSY came back as %d", (int)rv);
		FUZZ_CHECK(s2.n == s2.stop_at + 1, "fn called %zu times after asking to stop at %zu", s2.n, s2.stop_at);
	}
	FUZZ_CHECK(http_query_each(NULL, on_pair, &s) == ST_OK, "NULL query");
done:
	free(q);
	return 0;
}
