/*
 * st_http_parse: the HTTP/1.x request head and query string parsers of
 * st_http, as pure functions: bytes in, fields out, no I/O, no libevent,
 * no allocation (the query decoder's buffers are on its stack, bounded).
 * st_http.c (the server) finds a head in its input, copies it into its
 * request block and calls st_http_parse_head on it; the fuzz targets and
 * st_http_parse_test call the same functions directly.
 *
 * What is accepted (RFC 9112): a request line "METHOD SP target SP
 * HTTP/1.0|HTTP/1.1", then header lines "name: value" up to the empty
 * line; LF or CRLF line ends.  Refusals carry the HTTP status the server
 * answers with and a static detail:
 *   400  malformed request line, target, header line, control byte in a
 *        value, obsolete line folding, malformed Content-Length;
 *   405  CONNECT, or a body (Content-Length > 0, Transfer-Encoding) with a
 *        method other than GET, HEAD, OPTIONS (the server serves only those);
 *   413  a body with GET, HEAD or OPTIONS;
 *   411  (st_http_parse_head_bodies only) a POST with Transfer-Encoding;
 *   431  more than ST_HTTP_HEAD_FIELDS_MAX header lines;
 *   505  HTTP/x.y other than 1.0 and 1.1.
 * The bound on the head's size is the caller's (st_http's
 * max_header_bytes): these functions read only the bytes they are given.
 *
 * Threads: every function here is reentrant and may be called from any
 * thread; none blocks.
 */
#ifndef ST_HTTP_PARSE_H
#define ST_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_err.h"

/* A method has 1..32 token characters. */
#define ST_HTTP_HEAD_METHOD_MAX 32
/* Header lines per head; one more is a 431. */
#define ST_HTTP_HEAD_FIELDS_MAX 100
/* http_query_each: decoded bytes per key or value, and pairs per query. */
#define ST_HTTP_QUERY_ITEM_MAX 1024
#define ST_HTTP_QUERY_PAIRS_MAX 256

/* One header line: offsets into the parsed buffer of its NUL-terminated name and trimmed value. */
typedef struct st_http_field {
	uint32_t name, value;
} st_http_field;

/*
 * A parsed head, in storage the caller provides (the server embeds it in
 * its request block, so a request is one allocation).  The layout is
 * public so it can be embedded; read the fields, never write them.  Every
 * pointer points into the buffer given to st_http_parse_head (or at a
 * static string), so the head is valid exactly as long as that buffer.
 */
typedef struct st_http_head {
	const char *buf;         /* the parsed buffer (field offsets are into it) */
	const char *method;      /* 1..32 token characters, e.g. "GET" */
	const char *path;        /* starts with '/' (or is "*" for OPTIONS), undecoded */
	const char *query;       /* after '?', undecoded; "" when none */
	bool keep_alive;         /* HTTP/1.1 without "Connection: close" */
	uint64_t content_length; /* st_http_parse_head_bodies: a POST's declared body length; else 0 */
	uint16_t nfields;
	st_http_field fields[ST_HTTP_HEAD_FIELDS_MAX];
	/* On ST_EPROTO: the status to refuse with (400, 405, 413, 431, 505) and
	 * a static one-line reason for the problem document. */
	int status;
	const char *detail;
} st_http_head;

/*
 * How many bytes at the start of p[0..n) are empty lines (CR and LF bytes)
 * to skip before a request line (RFC 9112 2.2: a server SHOULD ignore at
 * least one empty line before it).  0..n.
 */
size_t st_http_parse_empty_lines(const unsigned char *p, size_t n);

/*
 * Where the head in p[0..n) ends: the index just past its empty line (LF
 * LF or LF CR LF), or 0 when p[0..n) holds no complete head yet.  Searching
 * starts at from (0..n), so a caller whose input grows need not rescan: it
 * passes the previous n minus 2 (the end may straddle the old end).  p must
 * not start with an empty line (st_http_parse_empty_lines skips those).
 */
size_t st_http_parse_head_end(const unsigned char *p, size_t from, size_t n);

/*
 * Parses the head buf[0..len) in place into h: len is what
 * st_http_parse_head_end returned for buf (so the head ends with its empty
 * line and contains no other), and buf[len] must be '\0'.  The request
 * line, names and values are split with NULs written into buf.  ST_OK: h
 * holds the request; ST_EPROTO: h->status and h->detail say why it is
 * refused, the other fields of h are unspecified.  Any other buffer (one
 * without a complete head) is a programmer's error (asserted).  buf stays
 * the caller's; h points into it.
 */
st_err st_http_parse_head(st_http_head *h, char *buf, size_t len);
/*
 * The same for a server that reads request bodies: a POST may declare one
 * with a single Content-Length (any size: the bound is the server's), put
 * in h->content_length; a POST with Transfer-Encoding is 411, two
 * Content-Length fields 400; other methods are refused as above.
 */
st_err st_http_parse_head_bodies(st_http_head *h, char *buf, size_t len);

/*
 * The value of the first header field with that name (ASCII
 * case-insensitive), trimmed of spaces and tabs, or NULL when absent.
 * Points into the buffer h was parsed from.
 */
const char *st_http_parse_field_get(const st_http_head *h, const char *name);
/*
 * Every field with that name, in the order of the head (RFC 9110 5.3: the
 * lines of a list field are one list, in order): *cursor starts at 0;
 * each call returns the next value (trimmed) and moves *cursor past it,
 * NULL past the last.  At most ST_HTTP_HEAD_FIELDS_MAX values.
 */
const char *st_http_parse_field_next(const st_http_head *h, const char *name, size_t *cursor);

/*
 * Iterates the query string: fn gets each key and value percent-decoded
 * ('+' as space) into bounded buffers (each at most 1024 bytes decoded,
 * at most 256 pairs).  A malformed escape, an over-long item or too many
 * pairs returns ST_EINVAL, and fn is never called: the whole query is
 * checked first, so a caller never has half of its pairs applied.  fn returns ST_OK to
 * go on, anything else to stop (returned as is).  The key and value
 * pointers are valid only during the call of fn.  A NULL query has no
 * pairs.  (The server's public query API, declared here beside the parser
 * that implements it; st_http.h includes this header.)
 */
typedef st_err (*http_query_fn)(const char *key, size_t klen, const char *val, size_t vlen, void *arg);
st_err http_query_each(const char *query, http_query_fn fn, void *arg);

#endif
