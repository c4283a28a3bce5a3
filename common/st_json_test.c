/*
 * Unit tests for st_json.
 *
 * The acceptance corpus below was run through a real PostgreSQL 15
 * (SELECT convert_from(decode(hex, 'hex'), 'UTF8')::json, which is what a
 * text parameter cast to json does; a NUL byte or invalid UTF-8 is refused
 * before json_in even sees it).  Column pg is what that server said; column
 * ours is st_json_compact's verdict.  They differ only where we are
 * deliberately stricter: PostgreSQL 15's json input does not check surrogate
 * pairing (only jsonb and de-escaping do), we refuse unpaired surrogates so
 * that every stored text is also valid for jsonb and for strict clients.
 * The rule the test enforces: whatever PostgreSQL refuses, we refuse.
 */
#include "st_json.h"
#include "st_test.h"
#include "st_util.h"

#include <stdlib.h>
#include <string.h>

struct verdict {
	const char *in;
	size_t len;
	bool pg;
	bool ours;
};

static const struct verdict corpus[] = {
	{ "0", 1, true, true },
	{ "-0", 2, true, true },
	{ "1", 1, true, true },
	{ "-1", 2, true, true },
	{ "01", 2, false, false },
	{ "-01", 3, false, false },
	{ "00", 2, false, false },
	{ "1.5", 3, true, true },
	{ "1.", 2, false, false },
	{ ".5", 2, false, false },
	{ "-.5", 3, false, false },
	{ "+1", 2, false, false },
	{ "1e5", 3, true, true },
	{ "1E+5", 4, true, true },
	{ "1e-5", 4, true, true },
	{ "1e", 2, false, false },
	{ "1e+", 3, false, false },
	{ "1.5e3", 5, true, true },
	{ "0.0", 3, true, true },
	{ "-", 1, false, false },
	{ "1x", 2, false, false },
	{ "1 2", 3, false, false },
	{ "0x10", 4, false, false },
	{ "NaN", 3, false, false },
	{ "Infinity", 8, false, false },
	{ "-Infinity", 9, false, false },
	{ "1.0e", 4, false, false },
	{ "12345678901234567890123456789", 29, true, true },
	{ "true", 4, true, true },
	{ "false", 5, true, true },
	{ "null", 4, true, true },
	{ "True", 4, false, false },
	{ "nul", 3, false, false },
	{ "truex", 5, false, false },
	{ "nullnull", 8, false, false },
	{ "tru", 3, false, false },
	{ "\"\"", 2, true, true },
	{ "\"a\"", 3, true, true },
	{ "\"\\\"", 3, false, false },
	{ "\"\\\\\"", 4, true, true },
	{ "\"\\/\"", 4, true, true },
	{ "\"\\b\\f\\n\\r\\t\"", 12, true, true },
	{ "\"\\x\"", 4, false, false },
	{ "\"\\a\"", 4, false, false },
	{ "\"\\u0041\"", 8, true, true },
	{ "\"\\u00e9\"", 8, true, true },
	{ "\"\\u00E9\"", 8, true, true },
	{ "\"\\u004\"", 7, false, false },
	{ "\"\\u00G1\"", 8, false, false },
	{ "\"\\u0000\"", 8, true, true },
	{ "\"a\\u0000b\"", 10, true, true },
	{ "\"\\ud83d\\ude00\"", 14, true, true },
	{ "\"\\uD83D\\uDE00\"", 14, true, true },
	{ "\"\\ud83d\"", 8, true, false },
	{ "\"\\ud83dx\"", 9, true, false },
	{ "\"\\ude00\"", 8, true, false },
	{ "\"\\ud83d\\u0041\"", 14, true, false },
	{ "\"\\ud83d\\ud83d\"", 14, true, false },
	{ "\"\\ud83d\\n\"", 10, true, false },
	{ "\"\\uDBFF\\uDFFF\"", 14, true, true },
	{ "\"\\uFFFF\"", 8, true, true },
	{ "\"\\uFFFE\"", 8, true, true },
	{ "\"a\x0a"
	  "b\"",
	  5, false, false },
	{ "\"a\x09"
	  "b\"",
	  5, false, false },
	{ "\"a\x01"
	  "b\"",
	  5, false, false },
	{ "\"a\x1f"
	  "b\"",
	  5, false, false },
	{ "\"a\x7f"
	  "b\"",
	  5, true, true },
	{ "\"\xc3"
	  "\xa9"
	  "\"",
	  4, true, true },
	{ "\"\xe2"
	  "\x82"
	  "\xac"
	  "\"",
	  5, true, true },
	{ "\"\xf0"
	  "\x9f"
	  "\x98"
	  "\x80"
	  "\"",
	  6, true, true },
	{ "\"\xc0"
	  "\xaf"
	  "\"",
	  4, false, false },
	{ "\"\xc1"
	  "\xbf"
	  "\"",
	  4, false, false },
	{ "\"\xe0"
	  "\x80"
	  "\xaf"
	  "\"",
	  5, false, false },
	{ "\"\xed"
	  "\xa0"
	  "\x80"
	  "\"",
	  5, false, false },
	{ "\"\xf4"
	  "\x90"
	  "\x80"
	  "\x80"
	  "\"",
	  6, false, false },
	{ "\"\xf5"
	  "\x80"
	  "\x80"
	  "\x80"
	  "\"",
	  6, false, false },
	{ "\"\xff"
	  "\"",
	  3, false, false },
	{ "\"\xc3"
	  "\"",
	  3, false, false },
	{ "\"\x80"
	  "\"",
	  3, false, false },
	{ "\"\xef"
	  "\xbf"
	  "\xbf"
	  "\"",
	  5, true, true },
	{ "\"a", 2, false, false },
	{ "\"", 1, false, false },
	{ "\"\\", 2, false, false },
	{ "\"\\u12", 5, false, false },
	{ "[]", 2, true, true },
	{ "{}", 2, true, true },
	{ "[1,2]", 5, true, true },
	{ "[1,]", 4, false, false },
	{ "[,1]", 4, false, false },
	{ "[1 2]", 5, false, false },
	{ "[", 1, false, false },
	{ "]", 1, false, false },
	{ "[[]]", 4, true, true },
	{ "{\"a\":1}", 7, true, true },
	{ "{\"a\":1,}", 8, false, false },
	{ "{\"a\"}", 5, false, false },
	{ "{\"a\":}", 6, false, false },
	{ "{a:1}", 5, false, false },
	{ "{'a':1}", 7, false, false },
	{ "{\"a\":1 \"b\":2}", 13, false, false },
	{ "{\"a\":1,\"a\":2}", 13, true, true },
	{ "{1:1}", 5, false, false },
	{ "{\"a\" : 1 , \"b\" : [ true , null ] }", 34, true, true },
	{ "[}", 2, false, false },
	{ "{]", 2, false, false },
	{ "[1]]", 4, false, false },
	{ "{\"a\":{\"b\":{}}}", 14, true, true },
	{ " 1 ", 3, true, true },
	{ "\x09"
	  "\x0a"
	  "\x0d"
	  " 1\x0d"
	  "\x0a"
	  "",
	  7, true, true },
	{ "", 0, false, false },
	{ " ", 1, false, false },
	{ "\x0c"
	  "1",
	  2, false, false },
	{ "1\x0c"
	  "",
	  2, false, false },
	{ "\xc2"
	  "\xa0"
	  "1",
	  3, false, false },
	{ "1\x00"
	  "",
	  2, false, false },
	{ "\x00"
	  "",
	  1, false, false },
	{ "[1]x", 4, false, false },
	{ "[1],", 4, false, false },
	{ "/*c*/1", 6, false, false },
	{ "1//c", 4, false, false },
	{ "\xef"
	  "\xbb"
	  "\xbf"
	  "1",
	  4, false, false },
	{ "\"\xe2"
	  "\x80"
	  "\xa8"
	  "\"",
	  5, true, true },
	{ "[-]", 3, false, false },
	{ "[1e1.5]", 7, false, false },
	{ "-1.5E-07", 8, true, true },
	{ "[0e0]", 5, true, true },
	{ "2.", 2, false, false },
};

static void
t_corpus(void)
{
	char out[64];

	for (size_t i = 0; i < ST_ARRAY_LEN(corpus); i++) {
		const struct verdict *v = &corpus[i];
		size_t n = 0;
		const char *err = NULL;
		st_err rv;

		ST_CHECK(v->len < sizeof(out));
		rv = st_json_compact(v->in, v->len, out, &n, &err);
		if ((rv == ST_OK) != v->ours)
			fprintf(stderr, "corpus %zu: %.*s: got %s (%s)\n", i, (int)v->len, v->in,
				rv == ST_OK ? "ok" : "refused", err ? err : "");
		ST_CHECK((rv == ST_OK) == v->ours);
		/* never accept what PostgreSQL refuses */
		ST_CHECK(v->pg || rv != ST_OK);
		if (rv != ST_OK)
			ST_CHECK(err != NULL);
	}
}

static void
t_compact(void)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "{\"a\": 1}", "{\"a\":1}" },
		{ " [ 1 , 2 ,\n3 ]\r\n", "[1,2,3]" },
		{ "{ \"a b\" : \" x  y \" , \"c\":[ ] }", "{\"a b\":\" x  y \",\"c\":[]}" },
		{ "\"\\u00e9 \\n\"", "\"\\u00e9 \\n\"" },
		{ "\t-1.5E+07 ", "-1.5E+07" },
		{ "{\"k\":\"\xc3\xa9 \\\" \"}", "{\"k\":\"\xc3\xa9 \\\" \"}" },
		{ "[true, false, null, {}]", "[true,false,null,{}]" },
	};
	char out[128], inplace[128];
	size_t n;

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		size_t len = strlen(cases[i].in);
		ST_CHECK(st_json_compact(cases[i].in, len, out, &n, NULL) == ST_OK);
		ST_CHECK_MEM(out, n, cases[i].out);
		memcpy(inplace, cases[i].in, len);
		ST_CHECK(st_json_compact(inplace, len, inplace, &n, NULL) == ST_OK);
		ST_CHECK_MEM(inplace, n, cases[i].out);
	}
}

static char *
nest(size_t depth, size_t *len)
{
	char *s = st_xmalloc(2 * depth + 1);

	memset(s, '[', depth);
	memset(s + depth, ']', depth);
	*len = 2 * depth;
	return s;
}

static void
t_depth(void)
{
	size_t len, n;
	char *s = nest(ST_JSON_MAX_DEPTH, &len), *out = st_xmalloc(1000);
	st_json *j = NULL;
	const char *err = NULL;

	ST_CHECK(st_json_compact(s, len, out, &n, NULL) == ST_OK);
	ST_CHECK(st_json_parse(s, len, 1000, &j) == ST_OK && j != NULL);
	st_json_free(j);
	j = NULL;
	free(s);
	s = nest(ST_JSON_MAX_DEPTH + 1, &len);
	ST_CHECK(st_json_compact(s, len, out, &n, &err) == ST_EINVAL);
	ST_CHECK(st_json_parse(s, len, 1000, &j) == ST_EINVAL && j == NULL);
	free(s);
	/* objects count too */
	st_buf b;
	st_buf_init(&b);
	for (int i = 0; i < ST_JSON_MAX_DEPTH + 1; i++)
		st_buf_puts(&b, "{\"a\":");
	st_buf_puts(&b, "1");
	for (int i = 0; i < ST_JSON_MAX_DEPTH + 1; i++)
		st_buf_puts(&b, "}");
	ST_CHECK(st_json_compact(b.p, b.len, b.p, &n, NULL) == ST_EINVAL);
	st_buf_fini(&b);
	free(out);
}

static void
t_utf8(void)
{
	ST_CHECK(st_utf8_valid("", 0));
	ST_CHECK(st_utf8_valid("abc", 3));
	ST_CHECK(st_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 13));
	ST_CHECK(!st_utf8_valid("a\0b", 3));
	ST_CHECK(!st_utf8_valid("\xc0\x80", 2));         /* overlong NUL */
	ST_CHECK(!st_utf8_valid("\xe0\x9f\xbf", 3));     /* overlong */
	ST_CHECK(!st_utf8_valid("\xed\xb0\x80", 3));     /* encoded surrogate */
	ST_CHECK(!st_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	ST_CHECK(!st_utf8_valid("\xe2\x82", 2));         /* truncated */
	ST_CHECK(!st_utf8_valid("\xbf", 1));
	ST_CHECK(!st_utf8_valid("\xfe", 1));
}

static void
t_escape(void)
{
	static const struct {
		const char *in;
		size_t len;
		const char *out;
	} cases[] = {
		{ "", 0, "\"\"" },
		{ "abc", 3, "\"abc\"" },
		{ "a\"b\\c", 5, "\"a\\\"b\\\\c\"" },
		{ "\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"" },
		{ "\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"" },
		{ "/\xc3\xa9", 3, "\"/\xc3\xa9\"" },
		{ "\x1b[0m", 4, "\"\\u001b[0m\"" },
		/* not UTF-8: each offending byte becomes U+FFFD, the rest is kept */
		{ "a\xff"
		  "b",
		  3, "\"a\\ufffdb\"" },
		{ "\xe2\x82", 2, "\"\\ufffd\\ufffd\"" },            /* truncated */
		{ "\xc0\x80", 2, "\"\\ufffd\\ufffd\"" },            /* overlong NUL */
		{ "\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"" }, /* encoded surrogate */
		{ "\xf0\x9f\x98\x80\xbf", 5, "\"\xf0\x9f\x98\x80\\ufffd\"" },
		{ "\0", 1, "\"\\u0000\"" },
	};
	st_buf b;

	st_buf_init(&b);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_buf_reset(&b);
		st_json_escape(&b, cases[i].in, cases[i].len);
		ST_CHECK_MEM(b.p, b.len, cases[i].out);
		ST_CHECK_EQ_U64(st_json_escaped_len(cases[i].in, cases[i].len), b.len);
		/* every escape result is valid JSON */
		ST_CHECK(st_json_compact(b.p, b.len, b.p, &b.len, NULL) == ST_OK);
	}
	st_buf_fini(&b);
}

/* The problem object: type defaults to about:blank, an absent title or detail is left out. */
static void
t_problem(void)
{
	st_buf b;

	st_buf_init(&b);
	st_json_problem(&b, NULL, "Bad Request", 400, "topic: \"x\"\n");
	ST_CHECK_MEM(
		b.p, b.len,
		"{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\"detail\":\"topic: \\\"x\\\"\\n\"}");
	st_buf_reset(&b);
	st_json_problem(&b, "https://example.test/p", NULL, 503, NULL);
	ST_CHECK_MEM(b.p, b.len, "{\"type\":\"https://example.test/p\",\"status\":503}");
	st_buf_fini(&b);
}

static void
t_dom(void)
{
	const char *text =
		" {\"cmd\" : \"stats\", \"n\": 42, \"big\": 18446744073709551616, \"neg\": -1,"
		" \"f\": 1.5, \"arr\": [1, \"two\", [3], {\"x\": null}], \"esc\": \"a\\n\\u00e9\\ud83d\\ude00\\/\","
		" \"t\": true, \"e\": {}, \"cmd\": \"dup\"} ";
	st_json *j = NULL;
	uint64_t v = 0;
	size_t len = 0;
	const char *p;

	ST_CHECK(st_json_parse(text, strlen(text), 100, &j) == ST_OK);
	if (j == NULL)
		return;
	ST_CHECK(st_json_type(j, 0) == ST_JSON_OBJECT);
	ST_CHECK_EQ_U64(st_json_count(j, 0), 10);
	ST_CHECK_STR(st_json_str(j, st_json_get(j, 0, "cmd"), NULL), "stats"); /* first match */
	ST_CHECK_STR(st_json_key_at(j, 0, 9), "cmd");
	ST_CHECK_STR(st_json_str(j, st_json_at(j, 0, 9), NULL), "dup");
	ST_CHECK(st_json_key_at(j, 0, 10) == NULL);
	ST_CHECK(st_json_u64(j, st_json_get(j, 0, "n"), &v) == ST_OK && v == 42);
	ST_CHECK(st_json_u64(j, st_json_get(j, 0, "big"), &v) == ST_ERANGE);
	ST_CHECK(st_json_u64(j, st_json_get(j, 0, "neg"), &v) == ST_EINVAL);
	ST_CHECK(st_json_u64(j, st_json_get(j, 0, "f"), &v) == ST_EINVAL);
	ST_CHECK(st_json_u64(j, st_json_get(j, 0, "cmd"), &v) == ST_EINVAL);
	ST_CHECK(st_json_get(j, 0, "missing") == -1);

	int arr = st_json_get(j, 0, "arr");
	ST_CHECK(st_json_type(j, arr) == ST_JSON_ARRAY);
	ST_CHECK_EQ_U64(st_json_count(j, arr), 4);
	ST_CHECK(st_json_type(j, st_json_at(j, arr, 0)) == ST_JSON_NUMBER);
	ST_CHECK_STR(st_json_str(j, st_json_at(j, arr, 1), &len), "two");
	ST_CHECK_EQ_U64(len, 3);
	ST_CHECK(st_json_type(j, st_json_at(j, arr, 2)) == ST_JSON_ARRAY);
	int obj = st_json_at(j, arr, 3);
	ST_CHECK(st_json_type(j, st_json_get(j, obj, "x")) == ST_JSON_NULL);
	ST_CHECK(st_json_get(j, arr, "x") == -1); /* not an object */
	ST_CHECK(st_json_at(j, arr, 4) == -1);
	st_json_raw(j, arr, &p, &len);
	ST_CHECK_MEM(p, len, "[1, \"two\", [3], {\"x\": null}]");
	st_json_raw(j, 0, &p, &len);
	ST_CHECK(len == strlen(text) - 2 && p[0] == '{');

	ST_CHECK_STR(st_json_str(j, st_json_get(j, 0, "esc"), &len), "a\n\xc3\xa9\xf0\x9f\x98\x80/");
	ST_CHECK_EQ_U64(len, 9);
	ST_CHECK(st_json_type(j, st_json_get(j, 0, "t")) == ST_JSON_TRUE);
	ST_CHECK_EQ_U64(st_json_count(j, st_json_get(j, 0, "e")), 0);
	ST_CHECK(st_json_str(j, st_json_get(j, 0, "n"), NULL) == NULL);
	ST_CHECK_EQ_U64(st_json_count(j, st_json_get(j, 0, "n")), 0);
	st_json_free(j);
	st_json_free(NULL);
}

static void
t_dom_refused(void)
{
	st_json *j = (st_json *)1;
	char heap[] = "[\"x\", 2]";

	ST_CHECK(st_json_parse("[1,]", 4, 10, &j) == ST_EINVAL && j == NULL);
	ST_CHECK(st_json_parse("\"a\\u0000b\"", 10, 10, &j) == ST_EINVAL);
	ST_CHECK(st_json_parse("{\"a\\u0000\":1}", 13, 10, &j) == ST_EINVAL);
	ST_CHECK(st_json_parse("", 0, 10, &j) == ST_EINVAL);
	/* node bound: [1,2,3] is 4 values */
	ST_CHECK(st_json_parse("[1,2,3]", 7, 3, &j) == ST_EINVAL);
	ST_CHECK(st_json_parse("[1,2,3]", 7, 4, &j) == ST_OK);
	st_json_free(j);
	ST_CHECK(st_json_parse("1", 1, 0, &j) == ST_EINVAL);

	/* the document keeps its own copy */
	ST_CHECK(st_json_parse(heap, strlen(heap), 10, &j) == ST_OK);
	memset(heap, 'z', sizeof(heap) - 1);
	ST_CHECK_STR(st_json_str(j, st_json_at(j, 0, 0), NULL), "x");
	st_json_free(j);

	/* a large array against the node bound, no quadratic work */
	st_buf b;
	st_buf_init(&b);
	st_buf_putc(&b, '[');
	for (int i = 0; i < 100000; i++)
		st_buf_puts(&b, i ? ",1" : "1");
	st_buf_putc(&b, ']');
	ST_CHECK(st_json_parse(b.p, b.len, 100000, &j) == ST_EINVAL);
	ST_CHECK(st_json_parse(b.p, b.len, 100001, &j) == ST_OK);
	ST_CHECK_EQ_U64(st_json_count(j, 0), 100000);
	ST_CHECK(st_json_at(j, 0, 99999) > 0);
	st_json_free(j);
	st_buf_fini(&b);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/*
 * A random valid JSON text: written to pretty (with random whitespace) and
 * to compact (what st_json_compact must produce from it).
 */
static void
gen_ws(st_buf *pretty)
{
	static const char ws[] = " \t\n\r";

	while (rnd() % 3 == 0)
		st_buf_putc(pretty, ws[rnd() % 4]);
}

static void
gen_both(st_buf *pretty, st_buf *compact, const char *s)
{
	st_buf_puts(pretty, s);
	st_buf_puts(compact, s);
}

static void
gen_value(st_buf *pretty, st_buf *compact, int depth)
{
	static const char *const scalars[] = { "0",    "-0",     "12",   "-3.25", "1e9",
					       "2E-3", "0.5e+1", "true", "false", "null" };
	static const char *const pieces[] = { "a",
					      " ",
					      "\\n",
					      "\\\"",
					      "\\\\",
					      "\\/",
					      "\\u00e9",
					      "\\uD83D\\uDE00",
					      "\xc3\xa9",
					      "\xe2\x82\xac",
					      "\xf0\x9f\x98\x80",
					      "\\u0000",
					      "\x7f" };
	uint32_t kind = depth >= 6 ? rnd() % 2 : rnd() % 4;

	gen_ws(pretty);
	if (kind == 0)
		gen_both(pretty, compact, scalars[rnd() % ST_ARRAY_LEN(scalars)]);
	else if (kind == 1) {
		gen_both(pretty, compact, "\"");
		for (uint32_t i = 0, n = rnd() % 5; i < n; i++)
			gen_both(pretty, compact, pieces[rnd() % ST_ARRAY_LEN(pieces)]);
		gen_both(pretty, compact, "\"");
	} else {
		bool obj = kind == 3;
		gen_both(pretty, compact, obj ? "{" : "[");
		for (uint32_t i = 0, n = rnd() % 4; i < n; i++) {
			if (i) {
				gen_ws(pretty);
				gen_both(pretty, compact, ",");
			}
			if (obj) {
				gen_ws(pretty);
				gen_both(pretty, compact, rnd() % 2 ? "\"k\"" : "\"\\u00e9 x\"");
				gen_ws(pretty);
				gen_both(pretty, compact, ":");
			}
			gen_value(pretty, compact, depth + 1);
		}
		gen_ws(pretty);
		gen_both(pretty, compact, obj ? "}" : "]");
	}
	gen_ws(pretty);
}

/*
 * 1 MiB of random bytes, random JSON texts and mutated JSON texts: no crash,
 * a stable verdict; every generated text is accepted and compacts to its
 * expected form; whatever is accepted compacts to a fixed point, and the DOM
 * never accepts what the validator refused.
 */
static void
t_fuzz(void)
{
	size_t total = 0;
	char *out = st_xmalloc(1 << 16), *out2 = st_xmalloc(1 << 16);
	int accepted = 0, mutated_refused = 0;
	st_buf pretty, compact;

	st_buf_init(&pretty);
	st_buf_init(&compact);
	while (total < 1024 * 1024) {
		int mode = (int)(rnd() % 3);
		st_buf_reset(&pretty);
		st_buf_reset(&compact);
		if (mode == 0) {
			size_t len = rnd() % 256;
			for (size_t i = 0; i < len; i++)
				st_buf_putc(&pretty, (char)rnd());
		} else
			gen_value(&pretty, &compact, 0);
		if (pretty.len >= (1 << 16))
			continue;
		if (mode == 2 && pretty.len > 0) /* one random byte changed */
			pretty.p[rnd() % pretty.len] = (char)rnd();
		total += pretty.len;

		size_t n1 = 0, n2 = 0;
		st_err a = st_json_compact(pretty.p, pretty.len, out, &n1, NULL);
		st_err b = st_json_compact(pretty.p, pretty.len, out2, &n2, NULL);
		ST_CHECK(a == b);
		if (mode == 1) {
			ST_CHECK(a == ST_OK);
			ST_CHECK_MEM(out, n1, compact.p);
		}
		if (a == ST_OK) {
			accepted++;
			ST_CHECK(n1 == n2 && memcmp(out, out2, n1) == 0 && n1 <= pretty.len);
			ST_CHECK(st_json_compact(out, n1, out2, &n2, NULL) == ST_OK && n2 == n1);
			ST_CHECK(memcmp(out, out2, n1) == 0);
		} else if (mode == 2)
			mutated_refused++;
		st_json *j = NULL;
		st_err d = st_json_parse(pretty.p, pretty.len, 100000, &j);
		ST_CHECK(d != ST_OK || a == ST_OK);
		st_json_free(j);
	}
	ST_CHECK(accepted > 100 && mutated_refused > 100);
	st_buf_fini(&pretty);
	st_buf_fini(&compact);
	free(out);
	free(out2);
}

/* Opaque members: one node each, raw text intact, nested values and \\u0000 never decoded. */
static void
t_dom_opaque(void)
{
	const char *text = "[{\"data\": {\"a\": [1, {\"b\": \"x\\\"]}\"}], \"n\": null}, \"topic\": \"t\"},"
			   " {\"data\": \"\\u0000z\"}, {\"data\": -1.5e3}, {\"data\": [[], {}]}]";
	st_json *j = NULL;
	const char *p;
	size_t len;
	int d;

	ST_CHECK(st_json_parse_opaque(text, strlen(text), 100, "data", &j) == ST_OK);
	if (j == NULL)
		return;
	ST_CHECK_EQ_U64(st_json_count(j, 0), 4);
	d = st_json_get(j, st_json_at(j, 0, 0), "data");
	ST_CHECK(st_json_type(j, d) == ST_JSON_OBJECT && st_json_count(j, d) == 0);
	st_json_raw(j, d, &p, &len);
	ST_CHECK_MEM(p, len, "{\"a\": [1, {\"b\": \"x\\\"]}\"}], \"n\": null}");
	ST_CHECK_STR(st_json_str(j, st_json_get(j, st_json_at(j, 0, 0), "topic"), NULL), "t");
	st_json_raw(j, st_json_get(j, st_json_at(j, 0, 1), "data"), &p, &len);
	ST_CHECK_MEM(p, len, "\"\\u0000z\"");
	st_json_raw(j, st_json_get(j, st_json_at(j, 0, 2), "data"), &p, &len);
	ST_CHECK_MEM(p, len, "-1.5e3");
	st_json_raw(j, st_json_get(j, st_json_at(j, 0, 3), "data"), &p, &len);
	ST_CHECK_MEM(p, len, "[[], {}]");
	/* 4 objects + array + 5 members: the data never counts more than one */
	st_json_free(j);
	ST_CHECK(st_json_parse_opaque(text, strlen(text), 10, "data", &j) == ST_OK);
	st_json_free(j);
	ST_CHECK(st_json_parse_opaque(text, strlen(text), 9, "data", &j) == ST_EINVAL && j == NULL);
	ST_CHECK(st_json_parse(text, strlen(text), 100, &j) == ST_EINVAL); /* \\u0000 when decoded */
}

int
main(void)
{
	ST_RUN(t_corpus);
	ST_RUN(t_compact);
	ST_RUN(t_depth);
	ST_RUN(t_utf8);
	ST_RUN(t_problem);
	ST_RUN(t_escape);
	ST_RUN(t_dom);
	ST_RUN(t_dom_refused);
	ST_RUN(t_dom_opaque);
	ST_RUN(t_fuzz);
	return st_test_done();
}
