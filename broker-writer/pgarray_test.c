/* pgarray_test: the exact bytes of binary text[] parameters; parsing int[] result texts. */
#include "pgarray.h"

#include <stdlib.h>

#include "st_test.h"

static void
t_two_elements_and_null(void)
{
	st_buf b;
	pgarray_writer w;
	static const unsigned char want[] = {
		0, 0, 0, 1,  /* ndim */
		0, 0, 0, 1,  /* has null */
		0, 0, 0, 25, /* text */
		0, 0, 0, 3,  /* dim */
		0, 0, 0, 1,  /* lower bound */
		0, 0, 0, 2, 'a', 'b',
		0xff, 0xff, 0xff, 0xff,
		0, 0, 0, 0,  /* empty string is not NULL */
	};

	st_buf_init(&b);
	pgarray_begin(&w, &b, 3);
	pgarray_add(&w, "ab", 2);
	pgarray_add_null(&w);
	pgarray_add(&w, "", 0);
	ST_CHECK(pgarray_end(&w) == ST_OK);
	ST_CHECK_EQ_U64(b.len, sizeof(want));
	ST_CHECK(b.len == sizeof(want) && memcmp(b.p, want, sizeof(want)) == 0);
	st_buf_fini(&b);
}

static void
t_no_null_flag_clear(void)
{
	st_buf b;
	pgarray_writer w;

	st_buf_init(&b);
	pgarray_begin(&w, &b, 1);
	pgarray_add(&w, "x", 1);
	ST_CHECK(pgarray_end(&w) == ST_OK);
	ST_CHECK_EQ_U64(b.len, 20 + 4 + 1);
	ST_CHECK(b.p[7] == 0);
	ST_CHECK(b.p[23] == 1 && b.p[24] == 'x');
	st_buf_fini(&b);
}

static void
t_empty_and_count_mismatch(void)
{
	st_buf b;
	pgarray_writer w;
	static const unsigned char want[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25 };

	st_buf_init(&b);
	pgarray_begin(&w, &b, 0);
	ST_CHECK(pgarray_end(&w) == ST_OK);
	ST_CHECK(b.len == sizeof(want) && memcmp(b.p, want, sizeof(want)) == 0);
	st_buf_reset(&b);
	pgarray_begin(&w, &b, 2);
	pgarray_add(&w, "x", 1);
	ST_CHECK(pgarray_end(&w) == ST_EINVAL);
	st_buf_fini(&b);
}

static void
t_appends_after_existing_bytes(void)
{
	st_buf b;
	pgarray_writer w;

	st_buf_init(&b);
	st_buf_append(&b, "zz", 2);
	pgarray_begin(&w, &b, 1);
	pgarray_add_null(&w);
	ST_CHECK(pgarray_end(&w) == ST_OK);
	ST_CHECK(b.p[2 + 7] == 1); /* the flag patched at the array's own offset */
	ST_CHECK(b.p[0] == 'z' && b.p[1] == 'z');
	st_buf_fini(&b);
}

static void
t_parse_u64s(void)
{
	uint64_t *v;
	size_t n;
	static const char *const bad[] = { "", "{", "}", "{,}", "{1,}", "{,1}", "{-1}", "{1 ,2}", "{NULL}",
		                           "{{1}}", "{18446744073709551616}", "1,2", "{1,2}x" };

	ST_CHECK(pgarray_parse_u64s("{}", 10, &v, &n) == ST_OK && n == 0 && v != NULL);
	free(v);
	ST_CHECK(pgarray_parse_u64s("{7}", 10, &v, &n) == ST_OK && n == 1 && v[0] == 7);
	free(v);
	ST_CHECK(pgarray_parse_u64s("{1,22,18446744073709551615}", 3, &v, &n) == ST_OK && n == 3 && v[0] == 1 &&
	         v[1] == 22 && v[2] == UINT64_MAX);
	free(v);
	ST_CHECK(pgarray_parse_u64s("{1,2,3}", 2, &v, &n) == ST_EINVAL && v == NULL); /* above max */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ST_CHECK(pgarray_parse_u64s(bad[i], 100, &v, &n) == ST_EINVAL);
		ST_CHECK(v == NULL);
	}
}

int
main(void)
{
	ST_RUN(t_two_elements_and_null);
	ST_RUN(t_no_null_flag_clear);
	ST_RUN(t_empty_and_count_mismatch);
	ST_RUN(t_appends_after_existing_bytes);
	ST_RUN(t_parse_u64s);
	return st_test_done();
}
