/*
 * fuzz_http_head: the request head parser (common/st_http_parse.c), called
 * directly on the input as the server's conn_parse calls it on its input
 * buffer: skip empty lines, find the end of the head within the server's
 * default 8 KiB (none there: a 431, stop), copy the head into a block of
 * exactly its size plus the NUL (so ASan sees any read past it), parse,
 * and go on with the pipelined bytes after it while the request keeps the
 * connection alive.  No socket, no loop: tens of thousands of inputs a
 * second instead of the few thousand a loopback server per input allowed.
 *
 * Checks, restated here from st_http_parse.h rather than taken from it:
 *   - the end of the head is found at the same place when the scan is
 *     resumed from a split point (as the server resumes from what it had
 *     already searched, minus 2);
 *   - accepted: the method is 1..32 token characters and not CONNECT; the
 *     path starts with '/' (or is "*" for OPTIONS) and has no space,
 *     control byte, '?' or '#', the query no space, control byte or '#';
 *     method, path and query lie inside the head (or are the constant "/"
 *     and ""); at most 100 fields, each name a non-empty token, each value
 *     trimmed and free of control bytes (tab aside), both inside the head;
 *     st_http_parse_field_get finds the first field of that name (for the
 *     first 8 fields' names and a few common ones); no Transfer-Encoding,
 *     and every Content-Length is 0;
 *   - round trip: the accepted head written out again in canonical form
 *     (origin-form target, CRLF, "name: value", HTTP/1.1 when kept alive,
 *     else HTTP/1.0) parses to the same method, path, query, keep-alive and
 *     fields;
 *   - refused: ST_EPROTO with a status of 400, 405, 413, 431 or 505 and a
 *     non-empty one-line detail.
 * The query of every accepted head also goes through http_query_each.
 */
#include <string.h>
#include <strings.h>

#include "fuzz_check.h"
#include "st_buf.h"
#include "st_http_parse.h"
#include "st_util.h"

#define MAX_INPUT (32u * 1024)
/* http_server_config.max_header_bytes 0 = 8192: the server's default limit. */
#define HEAD_LIMIT 8192u

static bool
tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool
ctl(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

static st_err
on_pair(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(void)arg;
	return ST_OK;
}

/* st_http_parse_field_get(name) is the value of the first field of that name, or NULL. */
static void
check_get(const st_http_head *h, const char *name)
{
	const char *first = NULL;

	for (unsigned k = 0; k < h->nfields && !first; k++)
		if (strcasecmp(h->buf + h->fields[k].name, name) == 0)
			first = h->buf + h->fields[k].value;
	FUZZ_CHECK(st_http_parse_field_get(h, name) == first, "field_get(%s) is not the first of that name", name);
}

/* An accepted head against the header's words. */
static void
check_accepted(const st_http_head *h, const char *buf, size_t hl)
{
	static const char *const names[] = { "Host",   "Last-Event-ID",  "Origin", "Connection",
					     "Accept", "Content-Length", "X-Fuzz" };
	const char *m = h->method, *p = h->path, *q = h->query;
	size_t ml, pl;

	FUZZ_CHECK(h->buf == buf, "h->buf is not the parsed buffer");
	FUZZ_CHECK(m && p && q, "NULL method/path/query");
	ml = strlen(m);
	pl = strlen(p);
	FUZZ_CHECK(fuzz_within(m, ml + 1, buf, hl + 1), "method outside the head");
	FUZZ_CHECK(ml >= 1 && ml <= 32, "method of %zu bytes", ml);
	for (size_t i = 0; i < ml; i++)
		FUZZ_CHECK(tchar((unsigned char)m[i]), "method byte 0x%02x", (unsigned char)m[i]);
	FUZZ_CHECK(strcmp(m, "CONNECT") != 0, "CONNECT accepted");
	FUZZ_CHECK(fuzz_within(p, pl + 1, buf, hl + 1) || strcmp(p, "/") == 0, "path outside the head");
	if (strcmp(p, "*") == 0)
		FUZZ_CHECK(strcmp(m, "OPTIONS") == 0, "target '*' accepted for %s", m);
	else
		FUZZ_CHECK(p[0] == '/', "path does not start with '/'");
	for (size_t i = 0; i < pl; i++) {
		unsigned char c = (unsigned char)p[i];

		FUZZ_CHECK(c > 0x20 && c < 0x7f && c != '?' && c != '#', "path byte 0x%02x", c);
	}
	FUZZ_CHECK(fuzz_within(q, strlen(q) + 1, buf, hl + 1) || q[0] == '\0', "query outside the head");
	for (const char *c = q; *c; c++)
		FUZZ_CHECK((unsigned char)*c > 0x20 && (unsigned char)*c < 0x7f && *c != '#', "query byte 0x%02x",
			   (unsigned char)*c);
	FUZZ_CHECK(h->nfields <= 100, "%u fields", (unsigned)h->nfields);
	for (unsigned i = 0; i < h->nfields; i++) {
		const char *n, *v;
		size_t nl, vl;

		FUZZ_CHECK(h->fields[i].name < hl && h->fields[i].value < hl, "field %u outside the head", i);
		n = buf + h->fields[i].name;
		v = buf + h->fields[i].value;
		nl = strnlen(n, hl - h->fields[i].name);
		vl = strnlen(v, hl - h->fields[i].value);
		FUZZ_CHECK(nl >= 1 && n[nl] == '\0' && v[vl] == '\0', "field %u not NUL-terminated in the head", i);
		for (size_t j = 0; j < nl; j++)
			FUZZ_CHECK(tchar((unsigned char)n[j]), "field name byte 0x%02x", (unsigned char)n[j]);
		FUZZ_CHECK(vl == 0 || (v[0] != ' ' && v[0] != '\t' && v[vl - 1] != ' ' && v[vl - 1] != '\t'),
			   "field %s not trimmed", n);
		for (size_t j = 0; j < vl; j++)
			FUZZ_CHECK(!ctl((unsigned char)v[j]), "field %s: control byte 0x%02x", n, (unsigned char)v[j]);
		/* The first few names only: every name would cost O(fields^2) per input. */
		if (i < 8)
			check_get(h, n);
		FUZZ_CHECK(strcasecmp(n, "Transfer-Encoding") != 0, "Transfer-Encoding accepted");
		if (strcasecmp(n, "Content-Length") == 0) {
			FUZZ_CHECK(vl >= 1 && vl <= 20 && strspn(v, "0") == vl, "Content-Length \"%s\" accepted", v);
		}
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(names); i++)
		check_get(h, names[i]);
	(void)http_query_each(q, on_pair, NULL);
}

/* Writes h out in canonical form, parses that, and compares. */
static void
check_round_trip(const st_http_head *h)
{
	st_buf b;
	st_http_head h2;
	char *buf2;
	size_t n;
	st_err rv;

	st_buf_init(&b);
	st_buf_printf(&b, "%s %s%s%s HTTP/1.%c\r\n", h->method, h->path, h->query[0] ? "?" : "", h->query,
		      h->keep_alive ? '1' : '0');
	for (unsigned i = 0; i < h->nfields; i++)
		st_buf_printf(&b, "%s: %s\r\n", h->buf + h->fields[i].name, h->buf + h->fields[i].value);
	st_buf_puts(&b, "\r\n");
	n = st_http_parse_head_end((const unsigned char *)b.p, 0, b.len);
	FUZZ_CHECK(n == b.len, "canonical head ends at %zu of %zu", n, b.len);
	buf2 = st_xmalloc(n + 1);
	memcpy(buf2, b.p, n + 1);
	rv = st_http_parse_head(&h2, buf2, n);
	FUZZ_CHECK(rv == ST_OK, "canonical head refused: %d %s\n%s", h2.status, h2.detail ? h2.detail : "", b.p);
	FUZZ_CHECK(strcmp(h2.method, h->method) == 0 && strcmp(h2.path, h->path) == 0 &&
			   strcmp(h2.query, h->query) == 0,
		   "canonical head parses to another request line");
	FUZZ_CHECK(h2.keep_alive == h->keep_alive, "canonical head: keep_alive %d, was %d", h2.keep_alive,
		   h->keep_alive);
	FUZZ_CHECK(h2.nfields == h->nfields, "canonical head: %u fields, was %u", (unsigned)h2.nfields,
		   (unsigned)h->nfields);
	for (unsigned i = 0; i < h->nfields; i++)
		FUZZ_CHECK(strcmp(h2.buf + h2.fields[i].name, h->buf + h->fields[i].name) == 0 &&
				   strcmp(h2.buf + h2.fields[i].value, h->buf + h->fields[i].value) == 0,
			   "canonical head: field %u differs", i);
	free(buf2);
	st_buf_fini(&b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	if (size > MAX_INPUT)
		size = MAX_INPUT;
	while (off < size) {
		const unsigned char *p = data + off;
		size_t lim = ST_MIN(size - off, (size_t)HEAD_LIMIT), skip, hl, split, first;
		st_http_head h;
		char *buf;
		st_err rv;

		skip = st_http_parse_empty_lines(p, lim);
		FUZZ_CHECK(skip <= lim, "empty_lines %zu of %zu", skip, lim);
		if (skip > 0) {
			off += skip;
			continue;
		}
		hl = st_http_parse_head_end(p, 0, lim);
		FUZZ_CHECK(hl <= lim && (hl == 0 || hl >= 2), "head_end %zu of %zu", hl, lim);
		/* Resumed as the server resumes: first [0, split), then from split - 2. */
		split = 1 + (size_t)data[0] % lim;
		first = st_http_parse_head_end(p, 0, split);
		if (first == 0)
			first = st_http_parse_head_end(p, split >= 2 ? split - 2 : 0, lim);
		FUZZ_CHECK(first == hl, "head_end resumed at %zu: %zu, in one pass: %zu", split, first, hl);
		if (hl == 0)
			break; /* incomplete: the server waits, or answers 431 at the limit */
		buf = st_xmalloc(hl + 1);
		memcpy(buf, p, hl);
		buf[hl] = '\0';
		rv = st_http_parse_head(&h, buf, hl);
		if (rv != ST_OK) {
			FUZZ_CHECK(rv == ST_EPROTO, "st_http_parse_head returned %d", (int)rv);
			FUZZ_CHECK(h.status == 400 || h.status == 405 || h.status == 413 || h.status == 431 ||
					   h.status == 505,
				   "refusal status %d", h.status);
			FUZZ_CHECK(h.detail && h.detail[0] && !strchr(h.detail, '\n'), "refusal detail");
			free(buf);
			break; /* the server answers and closes */
		}
		check_accepted(&h, buf, hl);
		check_round_trip(&h);
		free(buf);
		if (!h.keep_alive)
			break; /* the server answers and closes */
		off += hl;
	}
	return 0;
}
