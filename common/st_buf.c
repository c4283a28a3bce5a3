/* st_buf: growable byte buffer; doubles its capacity, always NUL-terminated; fallible or aborting growth. */
#include "st_buf.h"
#include "st_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
st_buf_init(st_buf *b)
{
	b->p = NULL;
	b->len = 0;
	b->cap = 0;
}

void
st_buf_fini(st_buf *b)
{
	free(b->p);
	st_buf_init(b);
}

void
st_buf_reset(st_buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

st_err
st_buf_try_reserve(st_buf *b, size_t extra)
{
	size_t need, cap = b->cap ? b->cap : 64;
	char *p;

	if (extra > SIZE_MAX - 1 - b->len)
		return ST_ENOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return ST_OK;
	while (cap < need)
		cap = cap <= SIZE_MAX / 2 ? cap * 2 : need;
	if ((p = st_try_realloc(b->p, cap)) == NULL)
		return ST_ENOMEM;
	b->p = p;
	b->cap = cap;
	return ST_OK;
}

st_err
st_buf_try_append(st_buf *b, const void *data, size_t len)
{
	if (st_buf_try_reserve(b, len) != ST_OK)
		return ST_ENOMEM;
	if (len)
		memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return ST_OK;
}

void
st_buf_reserve(st_buf *b, size_t extra)
{
	if (st_buf_try_reserve(b, extra) != ST_OK)
		st_oom("st_buf", extra);
}

void
st_buf_append(st_buf *b, const void *data, size_t len)
{
	if (st_buf_try_append(b, data, len) != ST_OK)
		st_oom("st_buf", len);
}

void
st_buf_puts(st_buf *b, const char *s)
{
	st_buf_append(b, s, strlen(s));
}

void
st_buf_putc(st_buf *b, char c)
{
	st_buf_append(b, &c, 1);
}

void
st_buf_printf(st_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0)
		return;
	st_buf_reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void
st_buf_put_u64(st_buf *b, uint64_t v)
{
	char tmp[21];
	size_t n = st_fmt_u64(tmp, v);

	st_buf_append(b, tmp, n);
}

char *
st_buf_steal(st_buf *b, size_t *len)
{
	char *p = b->p;

	if (len)
		*len = b->len;
	if (p == NULL)
		p = st_xstrdup("");
	st_buf_init(b);
	return p;
}
