/*
 * pgarray: PostgreSQL's binary wire format for a one-dimensional text[]
 * parameter (array_recv), so that a whole batch travels as four parameters
 * with nothing to escape.
 *
 * Layout (all integers big-endian int32): ndim (1, or 0 for an empty array),
 * has-null flag, element type OID (25 = text), then for ndim 1 the length of
 * the dimension and its lower bound (1), then each element as its byte
 * length followed by its bytes, -1 and no bytes for NULL.  The parameter's
 * type OID is PGARRAY_TEXT_OID (1009, text[]) and its format is 1 (binary).
 *
 * Usage: pgarray_begin(&w, &buf, n); n times pgarray_add or pgarray_add_null;
 * pgarray_end(&w) checks the count.  The writer appends to a caller-owned
 * st_buf; it holds no memory of its own.  Any thread (no shared state).
 *
 * pgarray_parse_u64s reads the other direction: the TEXT output of an
 * int[] / bigint[] result without NULLs ("{}", "{1,22,333}"), as
 * broker_append2 returns its duplicate ordinals and seqs.
 */
#ifndef BW_PGARRAY_H
#define BW_PGARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"

#define PGARRAY_TEXT_OID 1009u /* text[] */
#define PGARRAY_ELEM_TEXT_OID 25u

typedef struct pgarray_writer {
	st_buf *out;
	size_t start;    /* offset of the header in out */
	uint32_t n;      /* declared element count */
	uint32_t added;  /* elements appended so far */
} pgarray_writer;

/* Starts an array of exactly n elements at the end of out.  n must fit an int32. */
void pgarray_begin(pgarray_writer *w, st_buf *out, uint32_t n);
/* Appends one element of len bytes (len must fit an int32; callers bound it). */
void pgarray_add(pgarray_writer *w, const void *p, size_t len);
/* Appends a NULL element and sets the has-null flag. */
void pgarray_add_null(pgarray_writer *w);
/* ST_OK when exactly n elements were added; ST_EINVAL otherwise (a bug in the caller). */
st_err pgarray_end(pgarray_writer *w);

/*
 * Parses the NUL-terminated text s of a one-dimensional array of
 * non-negative integers.  ST_OK: *out (malloc'd, free it; never NULL) holds
 * *n values.  ST_EINVAL: not such an array (signs, NULL, blanks, nested,
 * a value above UINT64_MAX), or more than max elements; *out is NULL.
 */
st_err pgarray_parse_u64s(const char *s, size_t max, uint64_t **out, size_t *n);

#endif
