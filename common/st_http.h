/*
 * st_http: a small HTTP/1.1 server on libevent bufferevents, built for long
 * streams (edge-gateway) and small ops endpoints (both programs).
 *
 * Why not evhttp: evhttp cannot see a client close before the reply starts,
 * never bounds its output buffer, and costs more memory per connection.
 * Here a connection is one struct plus one bufferevent (a stream keeps only
 * a read event and, while bytes wait, an evbuffer), the request head is
 * parsed from a bounded buffer that is freed once the head is parsed, and
 * the output side reports its backlog so callers keep it small.  The
 * parsing itself is st_http_parse (pure functions, no I/O); this module is
 * the server around it.
 *
 * Limits (refusals answer with a problem document and close):
 *   - request head (request line + headers) at most max_header_bytes: 431;
 *   - the whole head must arrive within header_timeout_ms of the accept (or
 *     of the previous response on a kept-alive connection): closed;
 *   - request bodies are not accepted (Content-Length > 0 or chunked): 413,
 *     unless the server reads them (max_body_bytes): then a POST may carry
 *     one Content-Length body, which the handler reads (or refuses unread)
 *     with http_req_read_body; a chunked POST is 411;
 *   - a body being read must arrive within body_grace_ms plus 1 s per
 *     64 KiB of its length (a client trickling it is cut): 408 and close;
 *   - more than max_conns open connections (of this server, or of every
 *     server sharing one http_conn_limit): the new one is closed at once.
 *
 * Responses use "Connection: close" when the request said so or was
 * HTTP/1.0; plain responses keep the connection alive otherwise.  Streams
 * are close-delimited (no chunked framing, no Content-Length,
 * "Connection: close"), which every SSE client accepts and which costs no
 * per-write framing bytes.
 *
 * CORS: when the request has an Origin that matches cors_origins (a comma
 * list, or "*"), responses carry Access-Control-Allow-Origin (and Vary:
 * Origin); OPTIONS preflights are answered by the server itself with 204
 * and the allowed methods/headers (GET, HEAD, OPTIONS; Last-Event-ID,
 * Accept, Cache-Control, Authorization).  HEAD requests get the headers of the GET without
 * a body: the handler calls the same functions and the server drops the
 * body bytes (and, for streams, ends the response after the headers).
 *
 * Threads: everything here runs on the loop thread of the server's base.
 * A program with several loops makes one server per loop
 * (http_server_new_shared); servers share nothing but the connection
 * limit (an atomic).
 */
#ifndef ST_HTTP_H
#define ST_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_clock.h"
#include "st_err.h"
#include "st_http_parse.h"

struct event_base;
typedef struct http_server http_server;
typedef struct http_req http_req;
typedef struct http_stream http_stream;

/*
 * A bound on open connections that several servers share (one per loop
 * thread of a program): a connection takes a slot with a compare-and-swap
 * at accept, so the servers together never exceed max, and gives it back
 * when it is freed; max 0 means 100000, as max_conns 0 does for one server.
 * Thread-safe; must outlive every server given it.
 */
typedef struct http_conn_limit http_conn_limit;
http_conn_limit *http_conn_limit_new(uint32_t max);
void http_conn_limit_free(http_conn_limit *l); /* NULL-safe */
uint32_t http_conn_limit_open(const http_conn_limit *l);

typedef struct http_server_config {
	size_t max_header_bytes;    /* 0 = 8192 */
	uint32_t header_timeout_ms; /* 0 = 10000 */
	uint32_t max_conns;         /* 0 = 100000; a shared server's limit replaces it */
	const char *cors_origins;   /* NULL/"" = no CORS headers; copied */
	const char *cors_path;  /* NULL/"" = CORS on every path; else only this path gets it (preflights too); copied */
	size_t max_body_bytes;  /* 0 = request bodies refused; else the most http_req_read_body reads */
	uint32_t body_grace_ms; /* 0 = 10000: a body's deadline is this plus 1 s per 64 KiB */
} http_server_config;

/*
 * Called once per parsed request.  The handler must eventually answer with
 * exactly one of http_reply, http_reply_problem or http_stream_start (it may
 * do so later, from another callback, e.g. after a database answer).  If
 * the client goes away before an answer, on_gone (see http_req_set_gone_cb)
 * is called and the request is then invalid.
 */
typedef void (*http_handler_fn)(http_req *req, void *arg);

/* Listens on "ADDR:PORT" (ADDR may be "0.0.0.0", "127.0.0.1", "[::1]").
 * ST_EINVAL for a bad address, ST_ESYS when bind/listen fails (logged). */
st_err http_server_new(struct event_base *base, const char *listen, const http_server_config *cfg, http_handler_fn fn,
		       void *arg, http_server **out);
/*
 * The same, with SO_REUSEPORT on the listener: several servers, each on its
 * own loop thread, may listen on one address and the kernel spreads new
 * connections among them.  Every server sharing the address must be made
 * with this call (a port of 0 binds a fresh port: give the others the port
 * http_server_port reports).  limit (borrowed, may be NULL: cfg->max_conns
 * for this server alone) bounds the connections of every server given it
 * together: the address is one service, so its bound is one too.  A
 * separate entry point rather than fields of http_server_config, so
 * existing positional initializers stay complete.
 */
st_err http_server_new_shared(struct event_base *base, const char *listen, const http_server_config *cfg,
			      http_conn_limit *limit, http_handler_fn fn, void *arg, http_server **out);
/*
 * CORS with credentials (cookies, Authorization): every answer that echoes
 * an allowed Origin also says Access-Control-Allow-Credentials: true.  The
 * origin is always echoed, never "*"; a caller that turns this on must not
 * allow every origin (cors_origins "*"), or any site could read with its
 * visitors' cookies.  Loop thread, before requests arrive.
 */
void http_server_set_cors_credentials(http_server *s, bool on);
/*
 * Checks a cors_origins list before it is used (configuration, exit 2):
 * each item is "*", https://HOST[:PORT], or http://HOST[:PORT] with HOST
 * localhost, 127.0.0.1 or [::1].  "null" is refused (sandboxed iframes,
 * data: and file: pages send it, so any site can), and so is plain http://
 * elsewhere (anyone on the path can pose as it).  False with a one-line
 * reason in why.  Pure; any thread.
 */
bool http_cors_origins_check(const char *list, char *why, size_t cap);
/* Closes the listener and every connection at once (streams get on_close). NULL-safe. */
void http_server_free(http_server *s);
/* Connections open now under this server's limit: with a shared limit, those
 * of every server given it (the whole address), else this server's own. */
uint32_t http_server_conns_open(const http_server *s);
/*
 * Delivery latency: bytes written with http_stream_write_refs whose refs
 * carry an origin (http_ref.origin_ns, CLOCK_MONOTONIC ns, see
 * st_clock_mono_ns) stamp a stream whose output was empty, and when those
 * bytes have been handed to the kernel the time since the origin is
 * observed in seconds into h.  The edge gives each frame the arrival time
 * of the nng message it came in, so the histogram is "message arrived ->
 * bytes left" for streams that keep up (a stream with a backlog in the
 * socket is not stamped: its lag is the client's, counted by flow control
 * and ADR-0197 instead).  h is borrowed and must outlive the server; NULL
 * stops measuring.
 */
struct st_histogram;
void http_server_set_delivery_histogram(http_server *s, struct st_histogram *h);
/* The port actually bound (useful with port 0 in tests). */
int http_server_port(const http_server *s);
/*
 * Parses a listen address as http_server_new does: "IPv4:PORT" or
 * "[IPv6]:PORT", numeric, port 0..65535 (no name resolution).  ST_EINVAL
 * otherwise.  Any thread; for configuration checks before anything listens.
 */
struct sockaddr_storage;
st_err http_listen_parse(const char *listen, struct sockaddr_storage *ss, int *sslen);

/* ---- the request (valid until answered or gone) ---- */
const char *http_req_method(const http_req *r); /* "GET", "HEAD", ... */
const char *http_req_path(const http_req *r);   /* path only, undecoded, e.g. "/v1/stream" */
const char *http_req_query(const http_req *r);  /* after '?', undecoded, "" when none */
/* The peer's address: 16 bytes, IPv4 as ::ffff:a.b.c.d (RFC 4291 2.5.5.2); zeros for other families. */
void http_req_peer_ip(const http_req *r, uint8_t out[16]);
/* True when the request's Origin is one cors_origins allows (on the server's cors_path). */
bool http_req_cors_allowed(const http_req *r);
/* First header with that name (case-insensitive), value trimmed; NULL when absent. */
const char *http_req_header(const http_req *r, const char *name);
/* Every header with that name in order (st_http_parse_field_next): *cursor from 0; NULL past the last. */
const char *http_req_header_next(const http_req *r, const char *name, size_t *cursor);
/*
 * Called (once) if the client closes before the request is answered; after
 * it returns, r is freed.  Watching costs the connection its keep-alive:
 * bytes the client pipelined behind this request are dropped (so reading
 * goes on and the close is seen however much was pipelined) and the
 * connection closes after the answer.
 */
void http_req_set_gone_cb(http_req *r, void (*gone)(void *arg), void *arg);

/*
 * Like http_req_set_gone_cb, but the connection stays kept alive: the input
 * is not dropped, so a client gone behind more than max_header_bytes of
 * pipelined input is noticed only when the answer is written.  For handlers
 * that answer after a wait (a commit) on connections that carry request
 * after request.
 */
void http_req_set_close_cb(http_req *r, void (*gone)(void *arg), void *arg);

/*
 * Request bodies (servers with max_body_bytes): the declared length
 * (Content-Length of a POST; 0 for none).  A handler either answers without
 * reading it (the connection then closes after the answer, so a 413 or 401
 * is said before the body is read) or calls http_req_read_body once: fn
 * gets the whole body (len == the declared length, at most max_body_bytes:
 * asserted), malloc'd and owned by fn from then on, and r is again waiting
 * for its answer.  fn may run before http_req_read_body returns.  When the
 * body does not arrive in time (408, answered by the server) or the client
 * goes away, fn is never called: the gone callback is (http_req_set_gone_cb
 * or http_req_set_close_cb), and r is freed.
 */
typedef void (*http_body_fn)(http_req *r, char *body, size_t len, void *arg);
uint64_t http_req_body_length(const http_req *r);
void http_req_read_body(http_req *r, http_body_fn fn, void *arg);

/* http_query_each (the query string, percent-decoded, pair by pair) is
 * declared in st_http_parse.h, included above: it is part of the parser. */

/* ---- complete responses ---- */
/*
 * Sends status, headers and body; frees r.  extra_headers is NULL or
 * complete header lines each ending in "\r\n" ("Retry-After: 5\r\n").
 * Every response carries Cache-Control: no-store.
 */
void http_reply(http_req *r, int status, const char *content_type, const void *body, size_t len,
		const char *extra_headers);
/* An RFC 9457 application/problem+json document {"type","title","status","detail"}; type is
 * "about:blank" unless given.  Frees r. */
void http_reply_problem(http_req *r, int status, const char *type, const char *title, const char *detail,
			const char *extra_headers);

/* ---- streaming responses ---- */
typedef struct http_stream_cbs {
	/* Output backlog fell to or below the low watermark: write more if you have it. */
	void (*on_writable)(void *arg);
	/* The connection is gone (peer closed, error, server freed, or the end
	 * finished draining).  The stream is already freed when this returns;
	 * never touch it again.  abrupt is false only when http_stream_end
	 * came first and everything queued was handed to the kernel. */
	void (*on_close)(void *arg, bool abrupt);
} http_stream_cbs;

/*
 * Starts a close-delimited streaming response: writes the status line and
 * headers (Content-Type, Cache-Control: no-store, X-Accel-Buffering: no,
 * Connection: close, CORS, extra_headers) and turns r into the returned
 * stream; r is invalid afterwards.  Never NULL.  For a HEAD request the
 * stream ends right after the headers (on_close follows, abrupt = false).
 */
http_stream *http_stream_start(http_req *r, int status, const char *content_type, const char *extra_headers,
			       const http_stream_cbs *cbs, void *arg);

/* Copies bytes to the output. */
void http_stream_write(http_stream *s, const void *data, size_t len);
/* Zero-copy: data must stay valid until cleanup(data, len, arg) runs
 * (after the bytes were sent or the connection freed). */
void http_stream_write_ref(http_stream *s, const void *data, size_t len,
			   void (*cleanup)(const void *data, size_t len, void *arg), void *arg);
/* One zero-copy buffer for http_stream_write_refs. */
typedef struct http_ref {
	const void *data;
	size_t len;
	void (*cleanup)(const void *data, size_t len, void *arg);
	void *arg;
	uint64_t origin_ns; /* when what these bytes carry arrived (delivery latency, see above); 0: not timed */
} http_ref;
/*
 * refs[0..n) in order, as n http_stream_write_ref calls would queue them,
 * but when the stream has no backlog they go to the socket at once in one
 * writev: every buffer the kernel takes whole is released (its cleanup
 * called) before this returns and never touches the output buffer; the
 * rest is queued as by http_stream_write_ref (a buffer taken in part is
 * queued from where the kernel stopped, and its cleanup gets that pointer).
 * The fan-out path: no allocation, no copy, one syscall per stream.
 */
void http_stream_write_refs(http_stream *s, const http_ref *refs, size_t n);
/*
 * Writes what the output holds to the socket now (one non-blocking write)
 * and returns the backlog left.  Callers use it when the backlog passed the
 * low watermark in the middle of a burst, before they leave frames queued.
 */
size_t http_stream_flush(http_stream *s);
/* Bytes handed to the stream and not yet taken by the kernel. */
size_t http_stream_backlog(const http_stream *s);
/*
 * A keep-alive visit: true when the stream needs a byte to stay alive (it
 * was handed none since the last visit) or has bytes waiting (a blocked
 * check is due); false for a stream that is writing.  Starts the next
 * visit's count.  Visits twice per interval keep no stream silent longer.
 */
bool http_stream_visit_silent(http_stream *s);
/* The low watermark (bytes) under which on_writable fires; callers keep the
 * backlog near it so frames wait in their own bounded queue instead. */
size_t http_stream_low_watermark(const http_stream *s);
/*
 * Milliseconds (on the given clock reading, st_clock ms) that the output has
 * been non-empty without the kernel taking a byte; 0 when the backlog is
 * empty or bytes moved since.  now_ms and the server's own timestamps are
 * CLOCK_MONOTONIC ms (st_clock_system()).
 */
uint64_t http_stream_blocked_ms(const http_stream *s, uint64_t now_ms);
/*
 * Milliseconds (as http_stream_blocked_ms) that the client has given no
 * sign of reading while bytes wait: the blocked time, or less when the
 * kernel got an acknowledgement or a window update from the peer since
 * (TCP_INFO's last_ack_recv; other sockets: the blocked time).  The kernel
 * wakes a writer only once a good part of its send buffer is free, not at
 * each read of the client: a client reading 6 MB/s every 10 ms looked
 * blocked for 52-59 ms at a time to the first measure (measured, send
 * buffer autotuned to ~4 MiB); flow control asks whether the client reads.
 * A system call, made only when bytes wait and none moved.
 */
uint64_t http_stream_quiet_ms(const http_stream *s, uint64_t now_ms);
/* The same on clock, read only when bytes wait: a caller asking for every
 * frame of every stream must not pay a clock read to learn that an empty
 * output is not blocked (it was 14 % of the edge's CPU, issue 27). */
uint64_t http_stream_blocked_now(const http_stream *s, const st_clock *clock);
/* Finishes: sends what is queued, then closes, then on_close.  The output may
 * take as long as it keeps moving; a socket that takes nothing for 30 s (or
 * a peer that does not close within 5 s of the last byte) is cut. */
void http_stream_end(http_stream *s);
/* Closes now, dropping the backlog; on_close(abrupt=true) is called before this returns? NO: it is
 * called from the loop shortly after (deferred), never under the caller's feet. */
void http_stream_abort(http_stream *s);
/* The peer's address as text, for logs ("127.0.0.1:53422"), made on demand in a
 * per-thread buffer: valid until the next call on this thread. */
const char *http_stream_peer(const http_stream *s);

#endif
