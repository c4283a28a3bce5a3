/*
 * st_buf: a growable byte buffer for building replies, envelopes and SQL
 * parameters.  Embedded by value (st_buf_init/st_buf_fini); the fields are
 * public for reading (p, len) - do not write them directly.
 *
 * Growth aborts on allocation failure (st_xrealloc), so callers must bound
 * what they append when the size comes from input.
 */
#ifndef ST_BUF_H
#define ST_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_buf {
	char *p;     /* NUL-terminated after every append (p[len] == 0) once non-empty */
	size_t len;
	size_t cap;
} st_buf;

void st_buf_init(st_buf *b);
void st_buf_fini(st_buf *b);                 /* frees; b is empty and reusable */
void st_buf_reset(st_buf *b);                /* len = 0, keeps the memory */
void st_buf_reserve(st_buf *b, size_t extra);
void st_buf_append(st_buf *b, const void *data, size_t len);
void st_buf_puts(st_buf *b, const char *s);
void st_buf_putc(st_buf *b, char c);
void st_buf_printf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void st_buf_put_u64(st_buf *b, uint64_t v);
/* Hands the bytes to the caller (free() them); b becomes empty. */
char *st_buf_steal(st_buf *b, size_t *len);

#endif
