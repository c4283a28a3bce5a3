/*
 * st_http_reply: status lines, header blocks and problem documents of the
 * HTTP server (internal; users call http_reply and http_reply_problem of
 * st_http.h).  Loop thread only.
 */
#ifndef ST_HTTP_REPLY_H
#define ST_HTTP_REPLY_H

#include "st_buf.h"
#include "st_http_internal.h"

enum http_head_kind { HTTP_HEAD_PLAIN, HTTP_HEAD_STREAM };

/*
 * Appends the status line and headers to c's output.  clen: the
 * Content-Length of a plain reply with a body-capable status.  cors is the
 * request's matched Origin or NULL.  internal: server-made header lines
 * (a preflight's, a 405's Allow); extra: the handler's; both NULL or
 * complete lines ending in "\r\n".
 */
void http_reply_head_put(http_stream *c, int status, const char *ctype, enum http_head_kind kind, size_t clen,
			 bool keep, const char *cors, const char *internal, const char *extra);
/* A problem document (RFC 9457) into b; an absent title is the status's reason phrase. */
void http_reply_problem_render(st_buf *b, int status, const char *type, const char *title, const char *detail);

#endif
