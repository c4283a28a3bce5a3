/*
 * pgarray: writes the binary form of a text[] parameter.
 *
 * The header is written by pgarray_begin with the has-null flag cleared and
 * patched in place by the first pgarray_add_null, so the caller streams the
 * elements once without knowing in advance whether one of them is NULL.
 * The bytes follow array_recv() in src/backend/utils/adt/arrayfuncs.c:
 * ndim, flags, element OID, then (dim, lbound) per dimension, then
 * (int32 length | -1, bytes) per element.
 *
 * The text parser counts the commas first, so it allocates once and never
 * more than max + 1 values, whatever the server sent.
 */
#include "pgarray.h"

#include <stdlib.h>
#include <string.h>

#include "st_util.h"

static void
put_i32(st_buf *b, int32_t v)
{
	uint32_t u = (uint32_t)v;
	unsigned char c[4] = { (unsigned char)(u >> 24), (unsigned char)(u >> 16), (unsigned char)(u >> 8),
		               (unsigned char)u };

	st_buf_append(b, c, sizeof(c));
}

void
pgarray_begin(pgarray_writer *w, st_buf *out, uint32_t n)
{
	ST_ASSERT(n <= INT32_MAX);
	w->out = out;
	w->start = out->len;
	w->n = n;
	w->added = 0;
	put_i32(out, n == 0 ? 0 : 1);
	put_i32(out, 0);
	put_i32(out, (int32_t)PGARRAY_ELEM_TEXT_OID);
	if (n > 0) {
		put_i32(out, (int32_t)n);
		put_i32(out, 1);
	}
}

void
pgarray_add(pgarray_writer *w, const void *p, size_t len)
{
	ST_ASSERT(len <= INT32_MAX);
	ST_ASSERT(w->added < w->n);
	put_i32(w->out, (int32_t)len);
	if (len > 0)
		st_buf_append(w->out, p, len);
	w->added++;
}

void
pgarray_add_null(pgarray_writer *w)
{
	ST_ASSERT(w->added < w->n);
	/* flags live right after ndim; only bit 0 (has nulls) is defined */
	w->out->p[w->start + 7] = 1;
	put_i32(w->out, -1);
	w->added++;
}

st_err
pgarray_end(pgarray_writer *w)
{
	return w->added == w->n ? ST_OK : ST_EINVAL;
}

st_err
pgarray_parse_u64s(const char *s, size_t max, uint64_t **out, size_t *n)
{
	size_t len = strlen(s), count = 1, k = 0;
	uint64_t *v;

	*out = NULL;
	*n = 0;
	if (len < 2 || s[0] != '{' || s[len - 1] != '}')
		return ST_EINVAL;
	if (len == 2) {
		*out = st_xmalloc(sizeof(**out));
		return ST_OK;
	}
	for (size_t i = 1; i + 1 < len; i++)
		count += s[i] == ',';
	if (count > max)
		return ST_EINVAL;
	v = st_xmalloc(count * sizeof(*v));
	for (size_t i = 1; i < len;) {
		size_t j = i;
		while (s[j] >= '0' && s[j] <= '9')
			j++;
		if (j == i || (s[j] != ',' && j != len - 1) || st_parse_u64(s + i, j - i, &v[k]) != ST_OK) {
			free(v);
			return ST_EINVAL;
		}
		k++;
		i = j + 1;
	}
	ST_ASSERT(k == count);
	*out = v;
	*n = count;
	return ST_OK;
}
