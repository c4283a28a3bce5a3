/*
 * st_pgarray: the binary form of a text[], written and read, and the text
 * form of an int8[] result read.
 *
 * The header is written by st_pgarray_begin with the has-null flag cleared and
 * patched in place by the first st_pgarray_add_null, so the caller streams the
 * elements once without knowing in advance whether one of them is NULL.
 * The bytes follow array_recv() in src/backend/utils/adt/arrayfuncs.c:
 * ndim, flags, element OID, then (dim, lbound) per dimension, then
 * (int32 length | -1, bytes) per element.
 *
 * The text parser counts the commas first, so it allocates once and never
 * more than max + 1 values, whatever the server sent.
 */
#include "st_pgarray.h"

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
st_pgarray_begin(st_pgarray_writer *w, st_buf *out, uint32_t n)
{
	ST_ASSERT(n <= INT32_MAX);
	w->out = out;
	w->start = out->len;
	w->n = n;
	w->added = 0;
	put_i32(out, n == 0 ? 0 : 1);
	put_i32(out, 0);
	put_i32(out, (int32_t)ST_PG_TEXT_OID);
	if (n > 0) {
		put_i32(out, (int32_t)n);
		put_i32(out, 1);
	}
}

void
st_pgarray_add(st_pgarray_writer *w, const void *p, size_t len)
{
	ST_ASSERT(len <= INT32_MAX);
	ST_ASSERT(w->added < w->n);
	put_i32(w->out, (int32_t)len);
	if (len > 0)
		st_buf_append(w->out, p, len);
	w->added++;
}

void
st_pgarray_add_null(st_pgarray_writer *w)
{
	ST_ASSERT(w->added < w->n);
	/* flags live right after ndim; only bit 0 (has nulls) is defined */
	w->out->p[w->start + 7] = 1;
	put_i32(w->out, -1);
	w->added++;
}

st_err
st_pgarray_end(st_pgarray_writer *w)
{
	return w->added == w->n ? ST_OK : ST_EINVAL;
}

st_err
st_pgarray_parse_u64s(const char *s, size_t max, uint64_t **out, size_t *n)
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

static uint32_t
get_u32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

st_err
st_pgarray_binary_parse(const char *buf, size_t len, st_pgarray_elem *out, uint32_t max, uint32_t *n)
{
	uint32_t ndim, flags, oid, count;
	size_t off;

	*n = 0;
	if (len < 12)
		return ST_EPROTO;
	ndim = get_u32(buf);
	flags = get_u32(buf + 4);
	oid = get_u32(buf + 8);
	if (oid != ST_PG_TEXT_OID || flags > 1)
		return ST_EPROTO;
	if (ndim == 0)
		return len == 12 ? ST_OK : ST_EPROTO;
	if (ndim != 1 || len < 20)
		return ST_EPROTO;
	count = get_u32(buf + 12);
	/* buf + 16 is the lower bound: any value is fine for a list. */
	if (count > max || count > (len - 20) / 4)
		return ST_EPROTO;
	off = 20;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t el;

		if (len - off < 4)
			return ST_EPROTO;
		el = get_u32(buf + off);
		off += 4;
		if (el == UINT32_MAX || el > len - off) /* -1 is a NULL element */
			return ST_EPROTO;
		out[i].p = buf + off;
		out[i].len = el;
		off += el;
	}
	if (off != len)
		return ST_EPROTO;
	*n = count;
	return ST_OK;
}

void
st_pgarray_literal_begin(st_buf *out)
{
	st_buf_putc(out, '{');
}

void
st_pgarray_literal_add(st_buf *out, uint32_t i, const char *p, size_t len)
{
	size_t run = 0;

	if (i > 0)
		st_buf_putc(out, ',');
	st_buf_putc(out, '"');
	for (size_t k = 0; k < len; k++) {
		if (p[k] != '"' && p[k] != '\\')
			continue;
		st_buf_append(out, p + run, k - run);
		st_buf_putc(out, '\\');
		run = k;
	}
	st_buf_append(out, p + run, len - run);
	st_buf_putc(out, '"');
}

void
st_pgarray_literal_end(st_buf *out)
{
	st_buf_putc(out, '}');
}
