/*
 * st_http_parse_test: the head and query parsers alone, from tables: no
 * socket, no loop (st_http_test drives the same parsers through the server
 * over loopback).  Every head is copied into a block of exactly its length
 * plus the NUL, so an ASan build catches a read past the end.
 */
#include "st_http_parse.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"

/* The head in s, copied as the server copies it (exact size + NUL) and
 * parsed into h with the result in *rv; returns the copy for the caller to
 * free, or NULL (and a failed check) when s is not exactly one head after
 * empty lines. */
static char *
head_parse(const char *s, st_http_head *h, st_err *rv)
{
	size_t n = strlen(s), skip = st_http_parse_empty_lines((const unsigned char *)s, n), hl;
	char *buf;

	hl = st_http_parse_head_end((const unsigned char *)s + skip, 0, n - skip);
	if (hl != n - skip) {
		fprintf(stderr, "  head \"%s\": head_end %zu, want %zu\n", s, hl, n - skip);
		ST_CHECK(hl == n - skip);
		return NULL;
	}
	buf = st_xmalloc(hl + 1);
	memcpy(buf, s + skip, hl);
	buf[hl] = '\0';
	*rv = st_http_parse_head(h, buf, hl);
	return buf;
}

static void
t_accepted(void)
{
	static const struct {
		const char *in;
		const char *method, *path, *query;
		bool keep_alive;
		unsigned nfields;
	} tab[] = {
		{ "GET / HTTP/1.1\r\n\r\n", "GET", "/", "", true, 0 },
		{ "GET /v1/stream?topic=a&format=sse HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/v1/stream",
		  "topic=a&format=sse", true, 1 },
		{ "HEAD /a?b HTTP/1.0\r\n\r\n", "HEAD", "/a", "b", false, 0 },
		{ "GET /?? HTTP/1.1\r\n\r\n", "GET", "/", "?", true, 0 },
		/* LF-only line ends; empty lines before the request line are skipped */
		{ "\r\n\nGET /lf HTTP/1.1\nA: b\n\n", "GET", "/lf", "", true, 1 },
		/* Connection is a token list, case-insensitive */
		{ "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n", "GET", "/", "", false, 1 },
		{ "GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", "GET", "/", "", true, 1 },
		{ "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "GET", "/", "", false, 1 },
		/* absolute-form: served as its path and query; an empty path is "/" */
		{ "GET http://127.0.0.1:8080/hdr?a=1 HTTP/1.1\r\n\r\n", "GET", "/hdr", "a=1", true, 0 },
		{ "GET HTTPS://[::1]:8443/hdr HTTP/1.1\r\n\r\n", "GET", "/hdr", "", true, 0 },
		{ "GET http://x.example?z=1 HTTP/1.1\r\n\r\n", "GET", "/", "z=1", true, 0 },
		{ "GET http://x.example HTTP/1.1\r\n\r\n", "GET", "/", "", true, 0 },
		/* asterisk-form, OPTIONS only */
		{ "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "OPTIONS", "*", "", true, 1 },
		/* a method is any token of up to 32 characters; bodies of 0 bytes are no body */
		{ "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "POST", "/", "", true, 1 },
		{ "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345 / HTTP/1.1\r\n\r\n", "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", "/", "",
		  true, 0 },
		{ "M!#$%&'*+-.^_`|~ / HTTP/1.1\r\n\r\n", "M!#$%&'*+-.^_`|~", "/", "", true, 0 },
		/* values may hold tabs and bytes >= 0x80; empty values are fine */
		{ "GET / HTTP/1.1\r\nX: a\tb \xc3\xa9\r\nY:\r\n\r\n", "GET", "/", "", true, 2 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		st_http_head h;
		st_err rv;
		char *buf = head_parse(tab[i].in, &h, &rv);

		if (!buf)
			continue;
		if (rv != ST_OK)
			fprintf(stderr, "  head %zu: %s (%d %s)\n", i, st_err_str(rv), h.status, h.detail);
		ST_CHECK(rv == ST_OK);
		if (rv == ST_OK) {
			ST_CHECK_STR(h.method, tab[i].method);
			ST_CHECK_STR(h.path, tab[i].path);
			ST_CHECK_STR(h.query, tab[i].query);
			ST_CHECK_EQ_U64(h.keep_alive, tab[i].keep_alive);
			ST_CHECK_EQ_U64(h.nfields, tab[i].nfields);
			ST_CHECK(h.buf == buf);
		}
		free(buf);
	}
}

/* st_http_parse_head_bodies: a POST's Content-Length, and what stays refused. */
static void
t_bodies(void)
{
	static const struct {
		const char *in;
		int status;      /* 0: accepted */
		uint64_t length; /* accepted: content_length */
	} tab[] = {
		{ "POST /v1/events HTTP/1.1\r\nContent-Length: 17\r\n\r\n", 0, 17 },
		{ "POST /v1/events HTTP/1.1\r\nContent-Length: 17825792\r\n\r\n", 0, 17825792 },
		{ "POST /v1/events HTTP/1.1\r\n\r\n", 0, 0 },
		{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, 0 },
		{ "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400, 0 },
		{ "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, 0 },
		{ "GET / HTTP/1.1\r\nContent-Length: 1\r\n\r\n", 413, 0 },
		{ "PUT / HTTP/1.1\r\nContent-Length: 1\r\n\r\n", 405, 0 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		size_t n = strlen(tab[i].in);
		char *buf = st_xmalloc(n + 1);
		st_http_head h;
		st_err rv;

		memcpy(buf, tab[i].in, n + 1);
		rv = st_http_parse_head_bodies(&h, buf, n);
		if (tab[i].status == 0) {
			ST_CHECK(rv == ST_OK);
			ST_CHECK_EQ_U64(h.content_length, tab[i].length);
		} else {
			ST_CHECK(rv == ST_EPROTO);
			ST_CHECK_EQ_U64((uint64_t)h.status, (uint64_t)tab[i].status);
		}
		free(buf);
		/* without bodies a POST with a body stays a 405 */
		memcpy(buf = st_xmalloc(n + 1), tab[i].in, n + 1);
		rv = st_http_parse_head(&h, buf, n);
		if (tab[i].length > 0)
			ST_CHECK(rv == ST_EPROTO && h.status == 405);
		free(buf);
	}
}

static void
t_refused(void)
{
	static const struct {
		const char *in;
		int status;
		const char *detail;
	} tab[] = {
		{ "GET\r\n\r\n", 400, "malformed request line" },
		{ "GET /  HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ " GET / HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET / HTTP/1.1 x\r\n\r\n", 400, "malformed request line" },
		{ "GET / FOO/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET / HTTP/1.10\r\n\r\n", 400, "malformed request line" },
		{ "G@T / HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456 / HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET /a#b HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET /a\x7f HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET /a\tb HTTP/1.1\r\n\r\n", 400, "malformed request line" },
		{ "GET / HTTP/2.0\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1 are served" },
		{ "GET / HTTP/0.9\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1 are served" },
		{ "GET * HTTP/1.1\r\n\r\n", 400, "the request target '*' is only for OPTIONS" },
		{ "CONNECT x.example:443 HTTP/1.1\r\n\r\n", 405, "this server serves GET, HEAD and OPTIONS" },
		{ "CONNECT /x HTTP/1.1\r\n\r\n", 405, "this server serves GET, HEAD and OPTIONS" },
#define TARGET_DETAIL "the request target must be a path ('/...'), an absolute http URI, or '*' for OPTIONS"
		{ "GET x:443 HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET hello HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET ftp://x/hello HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET http:///hello HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET http://?a HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET http://:80/hello HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
		{ "GET http://u:p@x/hello HTTP/1.1\r\n\r\n", 400, TARGET_DETAIL },
#undef TARGET_DETAIL
		{ "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400, "obsolete line folding is not accepted" },
		{ "GET / HTTP/1.1\r\n\tX: a\r\n\r\n", 400, "obsolete line folding is not accepted" },
		{ "GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400, "malformed header line" },
		{ "GET / HTTP/1.1\r\n: empty name\r\n\r\n", 400, "malformed header line" },
		{ "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "malformed header line" },
		{ "GET / HTTP/1.1\r\nX : x\r\n\r\n", 400, "malformed header line" },
		{ "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, "control character in a header value" },
		{ "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400, "control character in a header value" },
		{ "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "malformed Content-Length" },
		{ "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "malformed Content-Length" },
		{ "GET /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 413, "request bodies are not accepted" },
		{ "OPTIONS / HTTP/1.1\r\ncontent-length: 1\r\n\r\n", 413, "request bodies are not accepted" },
		{ "HEAD / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413, "request bodies are not accepted" },
		{ "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 405, "this server serves GET, HEAD and OPTIONS" },
		{ "PUT / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 405,
		  "this server serves GET, HEAD and OPTIONS" },
		/* the first offending field decides */
		{ "GET / HTTP/1.1\r\nTransfer-Encoding: x\r\nContent-Length: abc\r\n\r\n", 413,
		  "request bodies are not accepted" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		st_http_head h;
		st_err rv;
		char *buf = head_parse(tab[i].in, &h, &rv);

		if (!buf)
			continue;
		if (rv != ST_EPROTO || h.status != tab[i].status)
			fprintf(stderr, "  head %zu \"%.40s\": %s, status %d, want %d\n", i, tab[i].in, st_err_str(rv),
				rv == ST_EPROTO ? h.status : 0, tab[i].status);
		ST_CHECK(rv == ST_EPROTO);
		if (rv == ST_EPROTO) {
			ST_CHECK_EQ_U64(h.status, tab[i].status);
			ST_CHECK_STR(h.detail, tab[i].detail);
		}
		free(buf);
	}
}

/* 100 header lines are accepted, 101 are a 431. */
static void
t_field_limit(void)
{
	for (int n = ST_HTTP_HEAD_FIELDS_MAX; n <= ST_HTTP_HEAD_FIELDS_MAX + 1; n++) {
		st_buf b;
		st_http_head h;
		char *buf;
		st_err rv;

		st_buf_init(&b);
		st_buf_puts(&b, "GET / HTTP/1.1\r\n");
		for (int i = 0; i < n; i++)
			st_buf_printf(&b, "H%d: v%d\r\n", i, i);
		st_buf_puts(&b, "\r\n");
		buf = head_parse(b.p, &h, &rv);
		if (buf) {
			if (n == ST_HTTP_HEAD_FIELDS_MAX) {
				ST_CHECK(rv == ST_OK);
				ST_CHECK_EQ_U64(h.nfields, n);
				ST_CHECK_STR(st_http_parse_field_get(&h, "h99"), "v99");
			} else {
				ST_CHECK(rv == ST_EPROTO);
				ST_CHECK_EQ_U64(h.status, 431);
				ST_CHECK_STR(h.detail, "too many header fields");
			}
		}
		free(buf);
		st_buf_fini(&b);
	}
}

static void
t_fields(void)
{
	static const struct {
		const char *name, *want; /* want NULL: absent */
	} tab[] = {
		{ "Host", "a.example" },                             /* trimmed of spaces and tabs on both sides */
		{ "HOST", "a.example" },                             /* case-insensitive, the first one wins */
		{ "X-Empty", "" },         { "X-Inner", "a  b\tc" }, /* inner whitespace stays */
		{ "Last-Event-ID", "42" }, { "X-Absent", NULL },     { "Hos", NULL }, /* whole names only */
	};
	char *buf;
	st_http_head h;
	st_err rv;

	buf = head_parse("GET / HTTP/1.1\r\nHost: \t a.example \t\r\nX-Empty:   \r\nhost: second\r\n"
			 "X-Inner:a  b\tc\r\nlast-event-id: 42\r\n\r\n",
			 &h, &rv);
	if (!buf)
		return;
	ST_CHECK(rv == ST_OK);
	ST_CHECK_EQ_U64(h.nfields, 5);
	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		const char *v = st_http_parse_field_get(&h, tab[i].name);

		if (!tab[i].want) {
			if (v)
				fprintf(stderr, "  %s: \"%s\", want absent\n", tab[i].name, v);
			ST_CHECK(v == NULL);
		} else {
			ST_CHECK_STR(v, tab[i].want);
		}
	}
	/* Every line of a name, in order (a list field's lines are one list). */
	{
		size_t cur = 0;

		ST_CHECK_STR(st_http_parse_field_next(&h, "HOST", &cur), "a.example");
		ST_CHECK_STR(st_http_parse_field_next(&h, "host", &cur), "second");
		ST_CHECK(st_http_parse_field_next(&h, "host", &cur) == NULL);
		ST_CHECK(st_http_parse_field_next(&h, "host", &cur) == NULL);
		cur = 0;
		ST_CHECK(st_http_parse_field_next(&h, "X-Absent", &cur) == NULL);
	}
	free(buf);
}

static void
t_head_end(void)
{
	static const struct {
		const char *in;
		size_t from, want;
	} tab[] = {
		{ "GET / HTTP/1.1\r\n\r\n", 0, 18 },
		{ "GET / HTTP/1.1\n\n", 0, 16 },
		{ "GET / HTTP/1.1\n\r\n", 0, 17 },
		{ "GET / HTTP/1.1\r\n\r\nGET /next", 0, 18 }, /* pipelined bytes are not the head's */
		{ "GET / HTTP/1.1\r\nA: b\r\n\r\n", 0, 24 },
		{ "GET / HTTP/1.1\r\n\r", 0, 0 },
		{ "GET / HTTP/1.1\r\nA: b\r\n", 0, 0 },
		{ "GET / HTTP/1.1\r\r\n", 0, 0 }, /* CR CR LF is no empty line */
		{ "GET / HTTP/1.1", 0, 0 },
		{ "", 0, 0 },
		/* resuming: the caller passes the previous length minus 2 */
		{ "GET /\r\n\r\n", 5, 9 },
		{ "GET /\r\n\r\n", 6, 9 },
		{ "GET /\n\n", 4, 7 },
		{ "GET /\r\n\r\n", 9, 0 }, /* from == n: nothing to search */
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		size_t n = strlen(tab[i].in), got;
		unsigned char *p = st_xmalloc(n + 1); /* exact size: ASan sees any overread */

		memcpy(p, tab[i].in, n);
		got = st_http_parse_head_end(p, tab[i].from, n);
		if (got != tab[i].want)
			fprintf(stderr, "  head_end %zu from %zu: %zu, want %zu\n", i, tab[i].from, got, tab[i].want);
		ST_CHECK_EQ_U64(got, tab[i].want);
		free(p);
	}
}

static void
t_empty_lines(void)
{
	static const struct {
		const char *in;
		size_t want;
	} tab[] = {
		{ "", 0 }, { "GET", 0 }, { "\r\nGET", 2 }, { "\n\n\r\r\nG", 5 }, { "\r\n\r\n", 4 }, { " \r\nGET", 0 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++)
		ST_CHECK_EQ_U64(st_http_parse_empty_lines((const unsigned char *)tab[i].in, strlen(tab[i].in)),
				tab[i].want);
}

typedef struct qrec {
	st_buf out;
	int calls;
} qrec;

static st_err
q_collect(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	qrec *q = arg;

	q->calls++;
	st_buf_append(&q->out, k, kl);
	st_buf_putc(&q->out, '=');
	st_buf_append(&q->out, v, vl);
	st_buf_putc(&q->out, ';');
	return strcmp(k, "stop") == 0 ? ST_EBUSY : ST_OK;
}

static void
t_query(void)
{
	static const struct {
		const char *q;
		st_err rv;
		const char *want;
	} tab[] = {
		{ "", ST_OK, "" },
		{ "a=1", ST_OK, "a=1;" },
		{ "topic=a&topic=b%2Fc&format=sse", ST_OK, "topic=a;topic=b/c;format=sse;" },
		{ "x=a+b%20c&&y", ST_OK, "x=a b c;y=;" },
		{ "%41%62=%7e%7E", ST_OK, "Ab=~~;" },
		{ "k==v", ST_OK, "k==v;" },
		{ "a=%", ST_EINVAL, "" },
		{ "a=%4", ST_EINVAL, "" },
		{ "a=%zz", ST_EINVAL, "" },
		{ "ok=1&bad=%g0", ST_EINVAL, "" }, /* validated before fn runs */
		{ "a=1&stop=1&b=2", ST_EBUSY, "a=1;stop=1;" },
	};
	qrec q;
	st_buf big;

	st_buf_init(&q.out);
	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++) {
		st_err rv;

		st_buf_reset(&q.out);
		rv = http_query_each(tab[i].q, q_collect, &q);
		if (rv != tab[i].rv)
			fprintf(stderr, "  query \"%s\": %d\n", tab[i].q, rv);
		ST_CHECK(rv == tab[i].rv);
		ST_CHECK_MEM(q.out.p ? q.out.p : "", q.out.len, tab[i].want);
	}
	/* 1024 decoded bytes fit, 1025 do not (even when written as escapes) */
	st_buf_init(&big);
	st_buf_puts(&big, "k=");
	for (int i = 0; i < 1024; i++)
		st_buf_puts(&big, "%41");
	q.calls = 0;
	ST_CHECK(http_query_each(big.p, q_collect, &q) == ST_OK && q.calls == 1);
	st_buf_puts(&big, "A");
	q.calls = 0;
	ST_CHECK(http_query_each(big.p, q_collect, &q) == ST_EINVAL && q.calls == 0);
	/* 256 pairs fit, 257 do not */
	st_buf_reset(&big);
	for (int i = 0; i < 256; i++)
		st_buf_puts(&big, "a=1&");
	q.calls = 0;
	ST_CHECK(http_query_each(big.p, q_collect, &q) == ST_OK && q.calls == 256);
	st_buf_puts(&big, "b");
	q.calls = 0;
	ST_CHECK(http_query_each(big.p, q_collect, &q) == ST_EINVAL && q.calls == 0);
	st_buf_fini(&big);
	st_buf_fini(&q.out);
}

int
main(void)
{
	ST_RUN(t_accepted);
	ST_RUN(t_refused);
	ST_RUN(t_bodies);
	ST_RUN(t_field_limit);
	ST_RUN(t_fields);
	ST_RUN(t_head_end);
	ST_RUN(t_empty_lines);
	ST_RUN(t_query);
	return st_test_done();
}
