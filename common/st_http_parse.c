/*
 * st_http_parse: the request head and query parsers, apart from the server
 * (as picohttpparser is apart from h2o's lib/http1.c).
 *
 * DESIGN.  The server holds a complete head in one buffer before it parses
 * (it searched its input with st_http_parse_head_end, bounded by
 * max_header_bytes), so the head parser never waits for more bytes and
 * never copies: it walks the buffer once, writes NULs to split the request
 * line, names and values in place, and records header lines as 32-bit
 * offsets in the caller's st_http_head (100 of them: 800 bytes instead of
 * 1600 for pointers, in every request block).  Each scan is bounded by the
 * end of the line it is in, and each line by the buffer's end.
 *
 * The query decoder decodes into two stack buffers of
 * ST_HTTP_QUERY_ITEM_MAX + 1 bytes and walks the query twice: once to
 * validate everything, once to call fn.
 *
 * Refusal statuses are the server's policy written down here, because only
 * the parser sees the reason: GET, HEAD and OPTIONS are served, bodies are
 * not, CONNECT is never.  A POST without a body parses fine and reaches the
 * handler, which answers it.
 */
#include "st_http_parse.h"

#include <string.h>
#include <strings.h>

#include "st_util.h"

/* ----------------------------------------------------------------- head */

static bool
is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Is token tok in the comma list? (Connection: keep-alive, Close) */
static bool
list_has_token(const char *v, const char *tok)
{
	size_t n = strlen(tok), m;
	const char *item;

	while (v && st_list_next(&v, &item, &m))
		if (m == n && strncasecmp(item, tok, n) == 0)
			return true;
	return false;
}

size_t
st_http_parse_empty_lines(const unsigned char *p, size_t n)
{
	size_t skip = 0;

	while (skip < n && (p[skip] == '\r' || p[skip] == '\n'))
		skip++;
	return skip;
}

size_t
st_http_parse_head_end(const unsigned char *p, size_t from, size_t n)
{
	size_t i = from;

	while (i < n) {
		const unsigned char *nl = memchr(p + i, '\n', n - i);

		if (!nl)
			return 0;
		i = (size_t)(nl - p);
		if (i >= 1 && p[i - 1] == '\n')
			return i + 1;
		if (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n')
			return i + 1;
		i++;
	}
	return 0;
}

/* Records a refusal in h; returns ST_EPROTO for the caller to return. */
static st_err
refuse(st_http_head *h, int status, const char *detail)
{
	h->status = status;
	h->detail = detail;
	return ST_EPROTO;
}

/*
 * The request target (RFC 9112 3.2), already checked for spaces, controls
 * and '#'; sets h->path and h->query (both point into t, or at constants).
 *   origin-form    /path?query                 as is;
 *   absolute-form  http://authority/path?query served as its path and query
 *                  (a server MUST accept it, 3.2.2; the authority is not
 *                  checked against our own: we are no proxy, and the Host
 *                  header is not used either); an empty path is "/";
 *   asterisk-form  *                           OPTIONS only (the server-wide
 *                  OPTIONS, answered like a preflight);
 *   authority-form host:port                   CONNECT only, which is not
 *                  served: 405.
 * Anything else is 400.
 */
static st_err
target_parse(st_http_head *h, char *t)
{
	char *q;

	if (*t == '*' && t[1] == '\0') {
		if (strcmp(h->method, "OPTIONS") != 0)
			return refuse(h, 400, "the request target '*' is only for OPTIONS");
		h->path = t;
		h->query = "";
		return ST_OK;
	}
	if (strcmp(h->method, "CONNECT") == 0)
		return refuse(h, 405, "this server serves GET, HEAD and OPTIONS");
	if (*t != '/') {
		size_t sl = strncasecmp(t, "http://", 7) == 0 ? 7 : strncasecmp(t, "https://", 8) == 0 ? 8 : 0;
		char *a = t + sl, *ae = a + strcspn(a, "/?");

		/* RFC 9110 4.2.1: an http(s) URI has a non-empty host; 4.2.4: userinfo is an error. */
		if (sl == 0 || ae == a || *a == ':' || memchr(a, '@', (size_t)(ae - a)) != NULL)
			return refuse(
				h, 400,
				"the request target must be a path ('/...'), an absolute http URI, or '*' for OPTIONS");
		if (*ae == '/') {
			t = ae;
		} else {
			/* An empty path is "/" (RFC 9112 3.2.2); the query keeps its place. */
			h->path = "/";
			h->query = *ae == '?' ? ae + 1 : "";
			return ST_OK;
		}
	}
	h->path = t;
	q = strchr(t, '?');
	if (q) {
		*q = '\0';
		h->query = q + 1;
	} else {
		h->query = "";
	}
	return ST_OK;
}

/*
 * Bodies.  Without `bodies`: none, any Content-Length > 0 or any
 * Transfer-Encoding is refused.  Only GET, HEAD and OPTIONS are served
 * then, so a request with a body that uses another method gets the more
 * useful 405 (the connection closes either way, the body unread).  With
 * `bodies` (st_http_parse_head_bodies): POST may carry a body framed by one
 * Content-Length (h->content_length); a Transfer-Encoding is 411 (chunked
 * bodies are not read: every client of a POST API sends a length), a
 * second Content-Length 400 (a smuggling vector).
 */
static st_err
body_check(st_http_head *h, bool bodies)
{
	bool served =
		strcmp(h->method, "GET") == 0 || strcmp(h->method, "HEAD") == 0 || strcmp(h->method, "OPTIONS") == 0;
	bool post = bodies && strcmp(h->method, "POST") == 0;
	const char *why = served ? "request bodies are not accepted" : "this server serves GET, HEAD and OPTIONS";
	bool seen_len = false;

	for (uint16_t i = 0; i < h->nfields; i++) {
		const char *name = h->buf + h->fields[i].name, *val = h->buf + h->fields[i].value;
		uint64_t n;

		if (strcasecmp(name, "Transfer-Encoding") == 0)
			return post ? refuse(h, 411, "a request body needs a Content-Length (no Transfer-Encoding)")
				    : refuse(h, served ? 413 : 405, why);
		if (strcasecmp(name, "Content-Length") == 0) {
			if (st_parse_u64(val, strlen(val), &n) != ST_OK)
				return refuse(h, 400, "malformed Content-Length");
			if (seen_len && bodies)
				return refuse(h, 400, "more than one Content-Length");
			seen_len = true;
			if (n > 0 && !post)
				return refuse(h, served ? 413 : 405, why);
			h->content_length = n;
		}
	}
	return ST_OK;
}

static st_err head_parse(st_http_head *h, char *buf, size_t len, bool bodies);

st_err
st_http_parse_head(st_http_head *h, char *buf, size_t len)
{
	return head_parse(h, buf, len, false);
}

st_err
st_http_parse_head_bodies(st_http_head *h, char *buf, size_t len)
{
	return head_parse(h, buf, len, true);
}

static st_err
head_parse(st_http_head *h, char *buf, size_t len, bool bodies)
{
	char *p = buf, *end = buf + len, *nl, *sp1, *sp2, *q;
	bool http10;
	const char *v;
	st_err rv;

	ST_ASSERT(buf[len] == '\0');
	memset(h, 0, offsetof(st_http_head, fields));
	h->status = 0;
	h->detail = NULL;
	h->buf = buf;

	/* request line */
	nl = memchr(p, '\n', (size_t)(end - p));
	ST_ASSERT(nl != NULL);
	*nl = '\0';
	if (nl > p && nl[-1] == '\r')
		nl[-1] = '\0';
	sp1 = strchr(p, ' ');
	if (!sp1 || sp1 == p || sp1 - p > ST_HTTP_HEAD_METHOD_MAX)
		goto bad_line;
	*sp1 = '\0';
	for (q = p; q < sp1; q++)
		if (!is_tchar((unsigned char)*q))
			goto bad_line;
	sp2 = strchr(sp1 + 1, ' ');
	if (!sp2 || sp2 == sp1 + 1)
		goto bad_line;
	*sp2 = '\0';
	for (q = sp1 + 1; q < sp2; q++)
		if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f || *q == '#')
			goto bad_line;
	v = sp2 + 1;
	if (strcmp(v, "HTTP/1.1") == 0)
		http10 = false;
	else if (strcmp(v, "HTTP/1.0") == 0)
		http10 = true;
	else if (strncmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
		 v[7] <= '9' && v[8] == '\0')
		return refuse(h, 505, "only HTTP/1.0 and HTTP/1.1 are served");
	else
		goto bad_line;
	h->method = p;
	if ((rv = target_parse(h, sp1 + 1)) != ST_OK)
		return rv;

	/* header lines, up to the blank line */
	for (p = nl + 1; p < end; p = nl + 1) {
		char *colon, *vs, *ve;

		nl = memchr(p, '\n', (size_t)(end - p));
		ST_ASSERT(nl != NULL);
		ve = nl;
		if (ve > p && ve[-1] == '\r')
			ve--;
		if (ve == p)
			break; /* the blank line */
		if (*p == ' ' || *p == '\t')
			return refuse(h, 400, "obsolete line folding is not accepted");
		for (colon = p; colon < ve && is_tchar((unsigned char)*colon); colon++)
			;
		if (colon == p || colon == ve || *colon != ':')
			return refuse(h, 400, "malformed header line");
		for (vs = colon + 1; vs < ve && (*vs == ' ' || *vs == '\t'); vs++)
			;
		while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (q = vs; q < ve; q++) {
			unsigned char ch = (unsigned char)*q;

			if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
				return refuse(h, 400, "control character in a header value");
		}
		if (h->nfields == ST_HTTP_HEAD_FIELDS_MAX)
			return refuse(h, 431, "too many header fields");
		*colon = '\0';
		*ve = '\0';
		h->fields[h->nfields].name = (uint32_t)(p - buf);
		h->fields[h->nfields].value = (uint32_t)(vs - buf);
		h->nfields++;
	}
	if ((rv = body_check(h, bodies)) != ST_OK)
		return rv;
	h->keep_alive = !http10 && !list_has_token(st_http_parse_field_get(h, "Connection"), "close");
	return ST_OK;
bad_line:
	return refuse(h, 400, "malformed request line");
}

const char *
st_http_parse_field_get(const st_http_head *h, const char *name)
{
	for (uint16_t i = 0; i < h->nfields; i++)
		if (strcasecmp(h->buf + h->fields[i].name, name) == 0)
			return h->buf + h->fields[i].value;
	return NULL;
}

const char *
st_http_parse_field_next(const st_http_head *h, const char *name, size_t *cursor)
{
	for (size_t i = *cursor; i < h->nfields; i++) {
		if (strcasecmp(h->buf + h->fields[i].name, name) == 0) {
			*cursor = i + 1;
			return h->buf + h->fields[i].value;
		}
	}
	*cursor = h->nfields;
	return NULL;
}

/* ---------------------------------------------------------------- query */

/* Decodes [p, e) into out (ST_HTTP_QUERY_ITEM_MAX + 1 bytes); ST_EINVAL on a bad escape or overflow. */
static st_err
query_decode(const char *p, const char *e, char *out, size_t *outlen)
{
	size_t n = 0;

	while (p < e) {
		int ch = (unsigned char)*p;

		if (ch == '%') {
			int hi, lo;

			if (e - p < 3 || (hi = st_hex_digit((unsigned char)p[1])) < 0 ||
			    (lo = st_hex_digit((unsigned char)p[2])) < 0)
				return ST_EINVAL;
			ch = hi * 16 + lo;
			p += 3;
		} else {
			if (ch == '+')
				ch = ' ';
			p++;
		}
		if (n == ST_HTTP_QUERY_ITEM_MAX)
			return ST_EINVAL;
		out[n++] = (char)ch;
	}
	out[n] = '\0';
	*outlen = n;
	return ST_OK;
}

/* One pass over the query; fn NULL only validates. */
static st_err
query_walk(const char *q, http_query_fn fn, void *arg)
{
	char key[ST_HTTP_QUERY_ITEM_MAX + 1], val[ST_HTTP_QUERY_ITEM_MAX + 1];
	unsigned pairs = 0;
	st_err rv;

	while (*q) {
		const char *e = strchr(q, '&'), *eq;
		size_t kl, vl;

		if (!e)
			e = q + strlen(q);
		if (e == q) {
			q++;
			continue; /* empty item: "a=1&&b=2" */
		}
		if (++pairs > ST_HTTP_QUERY_PAIRS_MAX)
			return ST_EINVAL;
		eq = memchr(q, '=', (size_t)(e - q));
		if ((rv = query_decode(q, eq ? eq : e, key, &kl)) != ST_OK)
			return rv;
		if (eq) {
			if ((rv = query_decode(eq + 1, e, val, &vl)) != ST_OK)
				return rv;
		} else {
			val[0] = '\0';
			vl = 0;
		}
		if (fn && (rv = fn(key, kl, val, vl, arg)) != ST_OK)
			return rv;
		q = *e ? e + 1 : e;
	}
	return ST_OK;
}

/* The whole query is validated before fn is first called, so a malformed
 * query never leaves a caller with half of its pairs applied. */
st_err
http_query_each(const char *query, http_query_fn fn, void *arg)
{
	st_err rv;

	if (!query)
		return ST_OK;
	if ((rv = query_walk(query, NULL, NULL)) != ST_OK)
		return rv;
	return query_walk(query, fn, arg);
}
