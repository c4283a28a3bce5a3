/* st_pgarray_test: the exact bytes of binary text[] parameters, reading them back, parsing int[] result texts. */
#include "st_pgarray.h"

#include <stdlib.h>

#include "st_test.h"
#include "st_util.h"

static void
t_two_elements_and_null(void)
{
	st_buf b;
	st_pgarray_writer w;
	static const unsigned char want[] = {
		0, 0, 0, 1,                                                /* ndim */
		0, 0, 0, 1,                                                /* has null */
		0, 0, 0, 25,                                               /* text */
		0, 0, 0, 3,                                                /* dim */
		0, 0, 0, 1,                                                /* lower bound */
		0, 0, 0, 2,  'a', 'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, /* empty string is not NULL */
	};

	st_buf_init(&b);
	st_pgarray_begin(&w, &b, 3);
	st_pgarray_add(&w, "ab", 2);
	st_pgarray_add_null(&w);
	st_pgarray_add(&w, "", 0);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK_EQ_U64(b.len, sizeof(want));
	ST_CHECK(b.len == sizeof(want) && memcmp(b.p, want, sizeof(want)) == 0);
	st_buf_fini(&b);
}

static void
t_no_null_flag_clear(void)
{
	st_buf b;
	st_pgarray_writer w;

	st_buf_init(&b);
	st_pgarray_begin(&w, &b, 1);
	st_pgarray_add(&w, "x", 1);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK_EQ_U64(b.len, 20 + 4 + 1);
	ST_CHECK(b.p[7] == 0);
	ST_CHECK(b.p[23] == 1 && b.p[24] == 'x');
	st_buf_fini(&b);
}

static void
t_empty_and_count_mismatch(void)
{
	st_buf b;
	st_pgarray_writer w;
	static const unsigned char want[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25 };

	st_buf_init(&b);
	st_pgarray_begin(&w, &b, 0);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK(b.len == sizeof(want) && memcmp(b.p, want, sizeof(want)) == 0);
	st_buf_reset(&b);
	st_pgarray_begin(&w, &b, 2);
	st_pgarray_add(&w, "x", 1);
	ST_CHECK(st_pgarray_end(&w) == ST_EINVAL);
	st_buf_fini(&b);
}

static void
t_appends_after_existing_bytes(void)
{
	st_buf b;
	st_pgarray_writer w;

	st_buf_init(&b);
	st_buf_append(&b, "zz", 2);
	st_pgarray_begin(&w, &b, 1);
	st_pgarray_add_null(&w);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK(b.p[2 + 7] == 1); /* the flag patched at the array's own offset */
	ST_CHECK(b.p[0] == 'z' && b.p[1] == 'z');
	st_buf_fini(&b);
}

static void
t_parse_u64s(void)
{
	uint64_t *v;
	size_t n;
	static const char *const bad[] = { "",
					   "{",
					   "}",
					   "{,}",
					   "{1,}",
					   "{,1}",
					   "{-1}",
					   "{1 ,2}",
					   "{NULL}",
					   "{{1}}",
					   "{18446744073709551616}",
					   "1,2",
					   "{1,2}x" };

	ST_CHECK(st_pgarray_parse_u64s("{}", 10, &v, &n) == ST_OK && n == 0 && v != NULL);
	free(v);
	ST_CHECK(st_pgarray_parse_u64s("{7}", 10, &v, &n) == ST_OK && n == 1 && v[0] == 7);
	free(v);
	ST_CHECK(st_pgarray_parse_u64s("{1,22,18446744073709551615}", 3, &v, &n) == ST_OK && n == 3 && v[0] == 1 &&
		 v[1] == 22 && v[2] == UINT64_MAX);
	free(v);
	ST_CHECK(st_pgarray_parse_u64s("{1,2,3}", 2, &v, &n) == ST_EINVAL && v == NULL); /* above max */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ST_CHECK(st_pgarray_parse_u64s(bad[i], 100, &v, &n) == ST_EINVAL);
		ST_CHECK(v == NULL);
	}
}

/* Reading back: malformed and hostile inputs are refused before anything is used. */
static void
t_text_parse_malformed(void)
{
	st_pgarray_elem out[4];
	uint32_t n;
	static const char empty[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25 };
	ST_CHECK(st_pgarray_binary_parse(empty, 12, out, 4, &n) == ST_OK && n == 0);
	ST_CHECK(st_pgarray_binary_parse(empty, 11, out, 4, &n) == ST_EPROTO);
	static const char one[] = { 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 'h', 'i' };
	ST_CHECK(st_pgarray_binary_parse(one, sizeof(one), out, 4, &n) == ST_OK && n == 1 && out[0].len == 2 &&
		 memcmp(out[0].p, "hi", 2) == 0);
	ST_CHECK(st_pgarray_binary_parse(one, sizeof(one) - 1, out, 4, &n) == ST_EPROTO); /* truncated */
	ST_CHECK(st_pgarray_binary_parse(one, sizeof(one), out, 0, &n) == ST_EPROTO);     /* over max */
	char bad[sizeof(one) + 1];
	memcpy(bad, one, sizeof(one));
	bad[sizeof(one)] = 'x';
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(bad), out, 4, &n) == ST_EPROTO); /* trailing */
	memcpy(bad, one, sizeof(one));
	bad[11] = 23; /* int4[] */
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(one), out, 4, &n) == ST_EPROTO);
	memcpy(bad, one, sizeof(one));
	bad[3] = 2; /* two dimensions */
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(one), out, 4, &n) == ST_EPROTO);
	memcpy(bad, one, sizeof(one));
	bad[20] = bad[21] = bad[22] = bad[23] = (char)0xff; /* NULL element */
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(one), out, 4, &n) == ST_EPROTO);
	memcpy(bad, one, sizeof(one));
	bad[12] = 0x7f; /* 2 billion elements in 26 bytes */
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(one), out, 4, &n) == ST_EPROTO);
	memcpy(bad, one, sizeof(one));
	bad[20] = 0x7f; /* an element longer than the buffer */
	ST_CHECK(st_pgarray_binary_parse(bad, sizeof(one), out, 4, &n) == ST_EPROTO);
}

/* What the writer side writes, the reader side reads back, NULL-free lists of any content. */
static void
t_text_round_trip(void)
{
	static const char *const el[] = { "", "a\"b", "c,d", "{x}", "NULL", "\xc3\xbc\xe2\x82\xac", " sp " };
	st_pgarray_elem out[8];
	st_pgarray_writer w;
	uint32_t n = 99;
	st_buf b;

	st_buf_init(&b);
	st_pgarray_begin(&w, &b, 0);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK(st_pgarray_binary_parse(b.p, b.len, out, 8, &n) == ST_OK);
	ST_CHECK_EQ_U64(n, 0);
	st_buf_reset(&b);
	st_pgarray_begin(&w, &b, (uint32_t)ST_ARRAY_LEN(el));
	for (size_t i = 0; i < ST_ARRAY_LEN(el); i++)
		st_pgarray_add(&w, el[i], strlen(el[i]));
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK(st_pgarray_binary_parse(b.p, b.len, out, 8, &n) == ST_OK);
	ST_CHECK_EQ_U64(n, ST_ARRAY_LEN(el));
	for (size_t i = 0; i < n; i++)
		ST_CHECK_MEM(out[i].p, out[i].len, el[i]);
	/* a NULL element is written, but never accepted back (about lists have none) */
	st_buf_reset(&b);
	st_pgarray_begin(&w, &b, 1);
	st_pgarray_add_null(&w);
	ST_CHECK(st_pgarray_end(&w) == ST_OK);
	ST_CHECK(st_pgarray_binary_parse(b.p, b.len, out, 8, &n) == ST_EPROTO);
	st_buf_fini(&b);
}

/* The about lists' literal (moved from the writer's batch): quoted, escaped, {} when empty. */
static void
t_literal(void)
{
	static const st_pgarray_elem ab[4] = { { "NULL", 4 }, { "a\\\"", 3 }, { "{x, y}", 6 }, { "\"", 1 } };
	st_buf s;

	st_buf_init(&s);
	st_pgarray_literal_begin(&s);
	st_pgarray_literal_end(&s);
	ST_CHECK_MEM(s.p, s.len, "{}");
	st_buf_reset(&s);
	st_pgarray_literal_begin(&s);
	for (uint32_t i = 0; i < 4; i++)
		st_pgarray_literal_add(&s, i, ab[i].p, ab[i].len);
	st_pgarray_literal_end(&s);
	ST_CHECK_MEM(s.p, s.len, "{\"NULL\",\"a\\\\\\\"\",\"{x, y}\",\"\\\"\"}");
	st_buf_fini(&s);
}

int
main(void)
{
	ST_RUN(t_literal);
	ST_RUN(t_two_elements_and_null);
	ST_RUN(t_no_null_flag_clear);
	ST_RUN(t_empty_and_count_mismatch);
	ST_RUN(t_appends_after_existing_bytes);
	ST_RUN(t_text_parse_malformed);
	ST_RUN(t_text_round_trip);
	ST_RUN(t_parse_u64s);
	return st_test_done();
}
