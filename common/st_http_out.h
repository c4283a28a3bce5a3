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

#endif
