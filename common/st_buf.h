/*
 * st_buf: a growable byte buffer for building replies, envelopes and SQL
 * parameters.  Embedded by value (st_buf_init/st_buf_fini); the fields are
 * public for reading (p, len) - do not write them directly.
 *
 * Two growth modes over one implementation: st_buf_try_reserve and
 * st_buf_try_append return ST_ENOMEM and leave b as it was (what a library
 * uses: it must never abort its host); every other append aborts on
 * allocation failure (st_oom; the daemons' policy, see st_util.h), so
 * callers bound what they append when the size comes from input.
 */
#ifndef ST_BUF_H
#define ST_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"

typedef struct st_buf {
	char *p; /* NUL-terminated after every append (p[len] == 0) once non-empty */
	size_t len;
	size_t cap;
} st_buf;

void st_buf_init(st_buf *b);
void st_buf_fini(st_buf *b);  /* frees; b is empty and reusable */
void st_buf_reset(st_buf *b); /* len = 0, keeps the memory */
/* Room for extra more bytes (and the NUL): ST_OK, or ST_ENOMEM with b unchanged. */
st_err st_buf_try_reserve(st_buf *b, size_t extra);
/* Appends data[0..len): ST_OK, or ST_ENOMEM with b unchanged. */
st_err st_buf_try_append(st_buf *b, const void *data, size_t len);
void st_buf_reserve(st_buf *b, size_t extra);
void st_buf_append(st_buf *b, const void *data, size_t len);
void st_buf_puts(st_buf *b, const char *s);
void st_buf_putc(st_buf *b, char c);
void st_buf_printf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void st_buf_put_u64(st_buf *b, uint64_t v);
/* Hands the bytes to the caller (free() them); b becomes empty. */
char *st_buf_steal(st_buf *b, size_t *len);

#endif
