/*
 * st_pgarray: PostgreSQL's binary wire format for a one-dimensional text[]
 * (array_recv / array_send), both ways, and the text form of an int8[]
 * result: the one codec of arrays for the writer (a whole batch travels as
 * four parameters with nothing to escape) and the edge (topic lists sent,
 * about lists read back).
 *
 * Layout (all integers big-endian int32): ndim (1, or 0 for an empty array),
 * has-null flag, element type OID (25 = text), then for ndim 1 the length of
 * the dimension and its lower bound (1), then each element as its byte
 * length followed by its bytes, -1 and no bytes for NULL.  The parameter's
 * type OID is ST_PG_TEXT_ARRAY_OID (1009, text[]) and its format is 1 (binary).
 *
 * Usage: st_pgarray_begin(&w, &buf, n); n times st_pgarray_add or
 * st_pgarray_add_null; st_pgarray_end(&w) checks the count.  The writer appends to a caller-owned
 * st_buf; it holds no memory of its own.  Any thread (no shared state).
 *
 * st_pgarray_binary_parse reads the binary form back (the edge's about
 * column); st_pgarray_parse_u64s reads: the TEXT output of an
 * int[] / bigint[] result without NULLs ("{}", "{1,22,333}"), as
 * broker_append4 returns its duplicate ordinals and seqs.
 */
#ifndef ST_PGARRAY_H
#define ST_PGARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"

/* Type OIDs the programs pass with binary parameters (pg_type.dat). */
#define ST_PG_INT8_OID 20u
#define ST_PG_TEXT_OID 25u
#define ST_PG_TEXT_ARRAY_OID 1009u

typedef struct st_pgarray_writer {
	st_buf *out;
	size_t start;   /* offset of the header in out */
	uint32_t n;     /* declared element count */
	uint32_t added; /* elements appended so far */
} st_pgarray_writer;

/* Starts an array of exactly n elements at the end of out.  n must fit an int32. */
void st_pgarray_begin(st_pgarray_writer *w, st_buf *out, uint32_t n);
/* Appends one element of len bytes (len must fit an int32; callers bound it). */
void st_pgarray_add(st_pgarray_writer *w, const void *p, size_t len);
/* Appends a NULL element and sets the has-null flag. */
void st_pgarray_add_null(st_pgarray_writer *w);
/* ST_OK when exactly n elements were added; ST_EINVAL otherwise (a bug in the caller). */
st_err st_pgarray_end(st_pgarray_writer *w);

/*
 * Parses the NUL-terminated text s of a one-dimensional array of
 * non-negative integers.  ST_OK: *out (malloc'd, free it; never NULL) holds
 * *n values.  ST_EINVAL: not such an array (signs, NULL, blanks, nested,
 * a value above UINT64_MAX), or more than max elements; *out is NULL.
 */
st_err st_pgarray_parse_u64s(const char *s, size_t max, uint64_t **out, size_t *n);

/* One element read back: points into the parsed buffer, not NUL-terminated. */
typedef struct st_pgarray_elem {
	const char *p;
	size_t len;
} st_pgarray_elem;

/*
 * Parses the binary form of a one-dimensional text[] (ndim 0 with exactly
 * 12 bytes, or ndim 1; element OID 25; flags 0 or 1; no NULL element;
 * nothing left over), every length checked against the bytes left before
 * it is used.  out[0..*n) point into buf; at most max entries (out has
 * room for max).  ST_EPROTO for anything else.
 */
st_err st_pgarray_binary_parse(const char *buf, size_t len, st_pgarray_elem *out, uint32_t max, uint32_t *n);

/*
 * The text form (an array literal) of a one-dimensional text[], for a text
 * parameter that holds one (the writer's about lists): {} or {"a","b\"c"},
 * every element quoted, so that NULL, braces, commas and blanks stay plain
 * text, and '"' and '\' escaped with '\'.  Elements must be valid UTF-8
 * without NUL (the callers' protocols check that).  Usage:
 * st_pgarray_literal_begin(out); st_pgarray_literal_add(out, i, p, len) for
 * i = 0, 1, ...; st_pgarray_literal_end(out).
 */
void st_pgarray_literal_begin(st_buf *out);
void st_pgarray_literal_add(st_buf *out, uint32_t i, const char *p, size_t len);
void st_pgarray_literal_end(st_buf *out);

#endif
