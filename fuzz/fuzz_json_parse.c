/*
 * fuzz_json_parse: the DOM that reads control requests (from the network
 * on the control socket) and studioctl input.
 *
 * Every accessor is walked over the whole document: each node's type is in
 * range, st_json_at/st_json_key_at answer inside [0, count) and -1/NULL
 * just past it, st_json_get finds a key no later than where it is, every
 * raw text is itself a valid JSON text, strings are UTF-8 without NUL and
 * as long as they say, st_json_u64 agrees with a digits-only reference on
 * the raw text.  The node bound is exact: a document of N nodes parses with
 * max_nodes = N and is refused with N - 1.  Separately the input, when it
 * is escaped with st_json_escape and must parse back as a string of the
 * length st_json_escaped_len said; when it is valid UTF-8 the same string
 * must come out.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_buf.h"
#include "st_json.h"

/* The header's words: a non-negative integer (digits only: no sign,
 * fraction or exponent) -> its value, or ST_ERANGE above UINT64_MAX;
 * anything else ST_EINVAL.  Written without st_parse_u64, whose own
 * verdicts are fuzzed separately. */
static st_err
ref_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return ST_EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return ST_ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return ST_OK;
}

static size_t
walk(const st_json *j, int node, int depth)
{
	enum st_json_type t = st_json_type(j, node);
	size_t count = st_json_count(j, node), nodes = 1;
	const char *raw;
	size_t rawlen = 0, clen;
	char *tmp;

	FUZZ_CHECK(depth <= ST_JSON_MAX_DEPTH + 1, "depth %d", depth);
	FUZZ_CHECK(t >= ST_JSON_NULL && t <= ST_JSON_OBJECT, "node %d: type %d", node, (int)t);
	st_json_raw(j, node, &raw, &rawlen);
	FUZZ_CHECK(raw != NULL && rawlen > 0, "node %d: empty raw text", node);
	tmp = malloc(rawlen);
	FUZZ_CHECK(tmp != NULL, "malloc");
	FUZZ_CHECK(st_json_compact(raw, rawlen, tmp, &clen, NULL) == ST_OK, "node %d: raw text is not JSON", node);
	free(tmp);

	switch (t) {
	case ST_JSON_ARRAY:
	case ST_JSON_OBJECT:
		for (size_t i = 0; i < count; i++) {
			int c = st_json_at(j, node, i);

			FUZZ_CHECK(c > 0, "node %d: child %zu is %d", node, i, c);
			if (t == ST_JSON_OBJECT) {
				const char *k = st_json_key_at(j, node, i);
				int g;

				FUZZ_CHECK(k != NULL, "node %d: key %zu NULL", node, i);
				g = st_json_get(j, node, k);
				FUZZ_CHECK(g > 0, "node %d: key %zu not found by st_json_get", node, i);
				/* first match: at or before member i */
				{
					bool seen = false;

					for (size_t m = 0; m <= i && !seen; m++)
						seen = st_json_at(j, node, m) == g;
					FUZZ_CHECK(seen, "node %d: st_json_get returned a later member", node);
				}
			}
			nodes += walk(j, c, depth + 1);
		}
		FUZZ_CHECK(st_json_at(j, node, count) == -1, "node %d: st_json_at past the end", node);
		if (t == ST_JSON_OBJECT)
			FUZZ_CHECK(st_json_key_at(j, node, count) == NULL, "node %d: st_json_key_at past the end",
				   node);
		else
			FUZZ_CHECK(st_json_get(j, node, "") == -1, "node %d: st_json_get on an array", node);
		break;
	case ST_JSON_STRING: {
		size_t len = (size_t)-1;
		const char *s = st_json_str(j, node, &len);

		FUZZ_CHECK(count == 0, "string with count %zu", count);
		FUZZ_CHECK(s != NULL, "node %d: string without a value", node);
		FUZZ_CHECK(strlen(s) == len, "node %d: string len %zu but strlen %zu", node, len, strlen(s));
		FUZZ_CHECK(st_utf8_valid(s, len), "node %d: string not UTF-8", node);
		break;
	}
	case ST_JSON_NUMBER: {
		uint64_t a = 0, b = 0;
		st_err ra = st_json_u64(j, node, &a), rb = ref_u64(raw, rawlen, &b);

		FUZZ_CHECK(count == 0, "number with count %zu", count);
		FUZZ_CHECK(ra == rb && (ra != ST_OK || a == b), "node %d: st_json_u64 %d/%llu vs reference %d/%llu",
			   node, (int)ra, (unsigned long long)a, (int)rb, (unsigned long long)b);
		break;
	}
	default:
		FUZZ_CHECK(count == 0, "scalar with count %zu", count);
		FUZZ_CHECK(st_json_str(j, node, NULL) == NULL, "node %d: st_json_str on a non-string", node);
		break;
	}
	return nodes;
}

static void
escape_round_trip(const char *s, size_t n)
{
	st_buf b;
	st_json *j = NULL;
	const char *back;
	size_t blen = 0;

	st_buf_init(&b);
	st_json_escape(&b, s, n);
	FUZZ_CHECK(st_json_escaped_len(s, n) == b.len, "st_json_escaped_len differs from what st_json_escape wrote");
	/* Valid JSON whatever s holds (the DOM below refuses \u0000, so NULs are checked here only). */
	FUZZ_CHECK(st_json_compact(b.p, b.len, NULL, NULL, NULL) == ST_OK && b.len >= 2 && b.p[0] == '"',
		   "st_json_escape output is not a JSON string");
	if (!st_utf8_valid(s, n)) {
		st_buf_fini(&b);
		return;
	}
	FUZZ_CHECK(st_json_parse(b.p, b.len, 1, &j) == ST_OK, "st_json_escape output does not parse");
	FUZZ_CHECK(st_json_type(j, 0) == ST_JSON_STRING, "st_json_escape output is not a string");
	back = st_json_str(j, 0, &blen);
	FUZZ_CHECK(back != NULL && blen == n && memcmp(back, s, n) == 0, "escape/parse round trip differs");
	st_json_free(j);
	st_buf_fini(&b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	st_json *j = NULL, *j2 = NULL;
	size_t nodes;

	escape_round_trip(in, size);
	if (st_json_parse(in, size, size + 1, &j) != ST_OK)
		return 0;
	FUZZ_CHECK(j != NULL, "ST_OK without a document");
	nodes = walk(j, 0, 0);
	FUZZ_CHECK(st_json_at(j, 0, (size_t)-1) == -1, "st_json_at(SIZE_MAX)");
	st_json_free(j);

	j = NULL;
	FUZZ_CHECK(st_json_parse(in, size, nodes, &j) == ST_OK, "refused with max_nodes = its %zu nodes", nodes);
	st_json_free(j);
	if (nodes > 1) {
		FUZZ_CHECK(st_json_parse(in, size, nodes - 1, &j2) == ST_EINVAL, "accepted with max_nodes = %zu < %zu",
			   nodes - 1, nodes);
		st_json_free(j2);
	}
	return 0;
}
