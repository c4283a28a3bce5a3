/*
 * st_http_out: the stream output path of the HTTP server (internal; users
 * call the http_stream_write* functions of st_http.h).  The connection
 * module (st_http.c) calls these at the turns of a stream's life.
 * Loop thread only.
 */
#ifndef ST_HTTP_OUT_H
#define ST_HTTP_OUT_H

#include "st_http_internal.h"

struct evbuffer_cb_info;

/* Takes c off the server's outq (no-op when it is not on it). */
void http_out_leave(http_stream *c);
/* Bytes were queued with origin origin_ns (0: not timed): write them at the end of this loop turn. */
void http_out_mark(http_stream *c, uint64_t origin_ns);
/* Writes c's queued output now (one write); notify: call on_writable once
 * it is out if it was over the low watermark (from the deferred event). */
void http_out_write(http_stream *c, bool notify);
/* The output emptied: observe the delivery latency of its oldest bytes. */
void http_out_observe(http_stream *c);
/* The evbuffer callback that stamps a stream's progress_ms (arg: the stream). */
void http_out_progress_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* The output buffer: the bufferevent's, or a stream's own (NULL when it holds nothing). */
struct evbuffer *http_out_buf(const http_stream *c);
/* Bytes queued and not yet taken by the kernel. */
size_t http_out_len(const http_stream *c);
/* Turns a connection whose response just became a stream into a stream
 * without a bufferevent: what its output holds moves to the stream's own,
 * the bufferevent is freed, the socket gets the read event.  Loop thread,
 * may run under the bufferevent's own callback. */
void http_out_adopt(http_stream *c);
/* A stream whose output emptied gives its evbuffer back. */
void http_out_release(http_stream *c);
/* A stream without a bufferevent waits for room: its write event is armed. */
void http_out_arm(http_stream *c);

#endif
