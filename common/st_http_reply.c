/*
 * st_http_reply: what the server writes before and as a plain answer - the
 * status line with its reason phrase, the header block every response
 * carries (Cache-Control: no-store, Connection, CORS), Content-Length,
 * RFC 9457 problem documents - and http_reply / http_reply_problem, which
 * hand the connection back to st_http.c when the answer is queued.
 */
#include "st_http_reply.h"

#include "st_http_cors.h"
#include "st_json.h"
#include "st_util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
static const char *
reason_phrase(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 412: return "Precondition Failed";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 416: return "Range Not Satisfiable";
	case 422: return "Unprocessable Content";
	case 426: return "Upgrade Required";
	case 428: return "Precondition Required";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

static bool
status_has_body(int status)
{
	return status >= 200 && status != 204 && status != 304;
}

void
http_reply_head_put(http_stream *c, int status, const char *ctype, enum http_head_kind kind, size_t clen, bool keep,
		    const char *cors, const char *internal, const char *extra)
{
	st_buf b;

	st_buf_init(&b);
	st_buf_printf(&b, "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
	if (ctype && *ctype)
		st_buf_printf(&b, "Content-Type: %s\r\n", ctype);
	if (kind == HTTP_HEAD_PLAIN && status_has_body(status))
		st_buf_printf(&b, "Content-Length: %zu\r\n", clen);
	st_buf_puts(&b, "Cache-Control: no-store\r\n");
	if (kind == HTTP_HEAD_STREAM)
		st_buf_puts(&b, "X-Accel-Buffering: no\r\n");
	st_buf_puts(&b, keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
	if (cors)
		http_cors_head_put(&b, cors, c->srv->cors_credentials);
	if (internal)
		st_buf_puts(&b, internal);
	if (extra)
		st_buf_puts(&b, extra);
	st_buf_puts(&b, "\r\n");
	evbuffer_add(bufferevent_get_output(c->bev), b.p, b.len);
	st_buf_fini(&b);
}

void
http_reply_problem_render(st_buf *b, int status, const char *type, const char *title, const char *detail)
{
	st_json_problem(b, type, title ? title : reason_phrase(status), status, detail);
}

void
http_reply(http_req *r, int status, const char *content_type, const void *body, size_t len, const char *extra_headers)
{
	http_stream *c = r->c;
	/* a declared body never read is still on the wire: the connection cannot carry another request */
	bool keep = r->keep_alive && (r->parsed.content_length == 0 || r->body_read);

	ST_ASSERT(c->req == r && c->state == ST_HANDLER && status >= 100 && status <= 599);
	c->req = NULL;
	if (!c->closing) {
		http_reply_head_put(c, status, content_type, HTTP_HEAD_PLAIN, len, keep, r->cors, NULL, extra_headers);
		if (!r->head && status_has_body(status) && len > 0)
			evbuffer_add(bufferevent_get_output(c->bev), body, len);
	}
	http_req_free(r);
	http_conn_after_reply(c, keep);
}

void
http_reply_problem(http_req *r, int status, const char *type, const char *title, const char *detail,
		   const char *extra_headers)
{
	st_buf b;

	st_buf_init(&b);
	http_reply_problem_render(&b, status, type, title, detail);
	http_reply(r, status, "application/problem+json", b.p, b.len, extra_headers);
	st_buf_fini(&b);
}
