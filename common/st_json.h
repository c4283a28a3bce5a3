/*
 * st_json: the JSON the project needs, bounded before it allocates.
 *
 *  - st_json_compact: validates an event's data exactly as strictly as
 *    PostgreSQL's json input (RFC 8259, UTF-8 only, no NUL byte anywhere,
 *    \u escapes well formed, surrogates paired), and writes its compact form
 *    (whitespace outside strings removed, everything else byte for byte) so
 *    that an envelope embedding it is one line.  A text PostgreSQL would
 *    refuse must be refused here, because one bad value would fail a whole
 *    batch insert.
 *  - st_json_escape: appends a JSON string literal.
 *  - st_json_parse: a small DOM for control requests and studioctl input.
 */
#ifndef ST_JSON_H
#define ST_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"

#define ST_JSON_MAX_DEPTH 64

/*
 * Validates in[0..len) as one JSON text (any value at top level, optional
 * surrounding whitespace) and writes the compact form to out, which must
 * hold at least len bytes.  *out_len gets its length.  On error returns
 * ST_EINVAL and, when err is not NULL, a static reason ("bad escape at byte
 * N" is not needed: a short static text such as "invalid UTF-8").  Nesting
 * deeper than ST_JSON_MAX_DEPTH is refused.  No allocation.  out may equal in
 * (in-place compaction).
 */
st_err st_json_compact(const char *in, size_t len, char *out, size_t *out_len, const char **err);

/* True when s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF) and has no NUL byte. */
bool st_utf8_valid(const char *s, size_t len);

/*
 * Appends "s" as a JSON string literal: escapes '"', '\\', and every byte
 * < 0x20 (\n \r \t \b \f by name, the rest as \u00XX); a byte that starts
 * no well-formed UTF-8 sequence becomes \ufffd, so the result is valid JSON
 * whatever s holds (a client's bytes, a library's message); valid UTF-8 is
 * copied as it is.  The one JSON string writer of the project.
 */
void st_json_escape(st_buf *b, const char *s, size_t len);
/* Bytes st_json_escape appends for s, quotes included (to size a buffer exactly). */
size_t st_json_escaped_len(const char *s, size_t len);
/*
 * Appends an RFC 9457 problem object {"type","title","status","detail"}:
 * type NULL is "about:blank"; title or detail NULL is left out.  The one
 * renderer for HTTP problem answers (st_http) and failure envelopes (edge).
 */
void st_json_problem(st_buf *b, const char *type, const char *title, int status, const char *detail);

/* ---- a bounded DOM ---------------------------------------------------- */

typedef struct st_json st_json;

enum st_json_type {
	ST_JSON_NULL,
	ST_JSON_FALSE,
	ST_JSON_TRUE,
	ST_JSON_NUMBER,
	ST_JSON_STRING,
	ST_JSON_ARRAY,
	ST_JSON_OBJECT
};

/*
 * Parses one JSON text.  At most max_nodes values (ST_EINVAL beyond), depth
 * ST_JSON_MAX_DEPTH.  The document keeps a copy of the input, so in may be
 * freed afterwards.  Nodes are ints: 0 is the root, -1 means "none".
 */
st_err st_json_parse(const char *in, size_t len, size_t max_nodes, st_json **out);
/*
 * The same, but the value of every object member named opaque_key (NULL:
 * none) is one node only: its type, its raw text (st_json_raw), no children
 * (count 0) and, for a string, no decoded text; it is validated like the
 * rest but costs one node whatever it holds.  For envelopes carrying a
 * payload the reader passes on as text (an HTTP event's `data`).
 */
st_err st_json_parse_opaque(const char *in, size_t len, size_t max_nodes, const char *opaque_key, st_json **out);
/* Upper bound of the bytes a parse of len bytes into at most max_nodes nodes holds. */
size_t st_json_parse_cost(size_t len, size_t max_nodes);
void st_json_free(st_json *j); /* NULL-safe */

enum st_json_type st_json_type(const st_json *j, int node);
/* Member of an object by key (first match); -1 if absent or node is not an object. */
int st_json_get(const st_json *j, int obj, const char *key);
/* Element count of an array or object (members), 0 for scalars. */
size_t st_json_count(const st_json *j, int node);
/* i-th element of an array, or i-th member VALUE of an object; -1 out of range. */
int st_json_at(const st_json *j, int node, size_t i);
/* i-th member KEY of an object, decoded, NUL-terminated, owned by j; NULL out of range. */
const char *st_json_key_at(const st_json *j, int obj, size_t i);
/* The exact source text of a value (into j's copy). */
void st_json_raw(const st_json *j, int node, const char **p, size_t *len);
/* A string value, unescaped, NUL-terminated, owned by j (valid until st_json_free); NULL if not a string.
 * *len may be NULL.  Strings containing \u0000 are refused by st_json_parse. */
const char *st_json_str(const st_json *j, int node, size_t *len);
/* A non-negative integer number; ST_EINVAL if not one, ST_ERANGE if too large. */
st_err st_json_u64(const st_json *j, int node, uint64_t *out);

#endif
