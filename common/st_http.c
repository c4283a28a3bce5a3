/*
 * st_http: HTTP/1.1 on evconnlistener + one bufferevent per connection.
 *
 * DESIGN.  A connection is one struct http_stream (the name is the public
 * stream type: every connection may become a stream) plus its bufferevent.
 * It is a small state machine:
 *
 *   HEAD ----(head parsed)----> HANDLER --(http_reply, keep-alive)--> HEAD
 *     |                           |  \--(http_stream_start)--> STREAM
 *     |                           \--(reply with close)-----> DRAIN
 *     \--(refused: 400/413/431/505)--> DRAIN        STREAM --(end)--> DRAIN
 *
 * With max_body_bytes, HANDLER --(http_req_read_body)--> BODY --(complete:
 * body_fn)--> HANDLER: the body is copied out of the input into one block
 * of its declared length as it arrives (so the input's head-sized watermark
 * is lifted meanwhile); its deadline is a per-connection timer (it varies
 * with the length, so it cannot share a FIFO); missing it is a 408 and the
 * request is gone (its gone callback), as is a client that closes meanwhile.
 *
 * DRAIN flushes the output, shuts the write side down and waits (at most
 * 5 s after entering DRAIN) for the peer's EOF before the socket is closed,
 * so that a response is never destroyed by an RST for unread input.
 *
 * The request head is searched for directly in the bufferevent's input
 * evbuffer, whose read high watermark is max_header_bytes: a peer can never
 * make us hold more than that, and a full buffer without the blank line is
 * a 431.  Once found, the head (only) is copied into one exactly-sized
 * http_req block, parsed in place (st_http_parse_head, into the
 * st_http_head inside that block) and freed when the request is answered;
 * pipelined bytes stay in the evbuffer.  An idle stream therefore holds only
 * this struct and the bufferevent (measured by st_http_test).
 *
 * Timers are not per connection.  The header timeout and the 5 s DRAIN cap
 * are constants per server, so connections waiting for either sit in a FIFO
 * ordered by deadline and one event per FIFO fires for its front.
 *
 * Never free under our own feet (STYLE 13): conn_close() only marks the
 * connection, disables its bufferevent and puts it on the reap list; one
 * deferred event (event_active) destroys it later from the loop: it frees
 * the bufferevent, then calls on_close or the request's gone callback.
 * (libevent 2.1 finalizes the bufferevent from the loop, so write_ref
 * cleanups run soon after on_close, or in event_base_free: a cleanup must
 * not need the stream's user state, only what its own arg holds.)  So a user may call abort/end/reply from
 * inside any of our callbacks, and our callbacks never touch freed memory.
 * The same deferred event parses requests that were pipelined behind a
 * request answered later, so an answer never re-enters the handler.
 *
 * Contract details the header leaves open: a request whose client goes
 * away before the answer is freed after its gone callback, or silently when
 * none was set; either way the handler must not answer it afterwards.
 * Client EOF counts as gone (and, on a stream, as an abrupt close), even a
 * half-close.  Writes after http_stream_end, after abort, or on a HEAD
 * stream are dropped (write_ref cleanups still run, from the loop).
 * http_server_free must not be called from inside one of this server's
 * callbacks (asserted).
 *
 * Not done on purpose: SO_SNDBUF is left to the kernel (shrinking it hurts
 * throughput; backlog accounting happens in our evbuffer anyway).  SIGPIPE
 * must be ignored by the program (signal(SIGPIPE, SIG_IGN) in main):
 * bufferevents write with writev/send without MSG_NOSIGNAL.  A missing Host
 * header is accepted.  Sockets get TCP_NODELAY because stream frames are
 * small and latency matters more than segment count.
 *
 * SIZE.  Over 800 lines on purpose: it is one server - connections, plain
 * responses and the zero-copy stream output path - and every part works on
 * the one connection struct and its four lists.  The head and query parsers
 * are st_http_parse.c: pure functions, tested and fuzzed without a socket.
 */
#include "st_http.h"

#include "st_buf.h"
#include "st_http_parse.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_json.h"
#include "st_log.h"
#include "st_metrics.h"
#include "st_util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#define HTTP_HEAD_MIN 128
#define HTTP_HEAD_MAX (1024 * 1024)
/* on_writable fires when the backlog is at or below this. */
#define HTTP_STREAM_LOWAT (16 * 1024)
/* Stop parsing pipelined requests while this much reply output is unread. */
#define HTTP_PLAIN_OUT_MAX (64 * 1024)
#define HTTP_DRAIN_CAP_MS 5000
/* An ending stream's output may stand still this long before it is cut. */
#define HTTP_STREAM_STALL_MS 30000
/* Buffers per writev of http_stream_write_refs (callers batch fewer). */
#define HTTP_WRITEV_MAX 256

enum conn_state { ST_HEAD, ST_HANDLER, ST_BODY, ST_STREAM, ST_DRAIN };

/* A body must arrive at this rate after the server's body grace time (bytes/s). */
#define HTTP_BODY_MIN_RATE (64u * 1024)

/* Every connection has one link per kind of list (st_dlist.h). */
enum { L_ALL, L_Q, L_KICK, L_OUT, L_NKINDS };

struct http_stream {
	http_server *srv;
	struct bufferevent *bev;
	st_dlink lk[L_NKINDS]; /* L_ALL: srv->all; L_Q: headwait, endwait or reap; L_KICK: kick; L_OUT: outq */
	http_req *req;         /* ST_HANDLER: the unanswered request */
	uint64_t deadline_ms;  /* for the FIFO this is on */
	uint64_t progress_ms;  /* streams: output became non-empty or shrank */
	uint64_t origin_ns;    /* streams: origin of the oldest unwritten bytes, 0 = none (http_ref.origin_ns) */
	void (*on_writable)(void *arg);
	void (*on_close)(void *arg, bool abrupt);
	void *arg;
	uint32_t scanned; /* bytes of input already searched for the end of head */
	uint8_t state;
	bool closing : 1, in_parse : 1, wait_drain : 1, is_stream : 1, head_only : 1, end_called : 1, aborted : 1,
		shut : 1, peer_eof : 1, out_cb : 1;
	/* Streams: direct is set while the bufferevent's EV_WRITE is off
	 * (output empty after our own write); lk[L_OUT] is linked while on the
	 * server's outq, to be written at the end of this loop turn. */
	bool direct : 1;
	/* The handler watches for the client going away (http_req_set_gone_cb):
	 * input after the request is dropped, so reading goes on and EOF is seen. */
	bool watch_gone : 1;
	char peer[56];
	uint8_t peer_ip[16];   /* the peer's address, IPv4 as ::ffff:a.b.c.d (http_req_peer_ip) */
	struct event *body_ev; /* ST_BODY: the body's deadline; made on the first body read */
};

struct http_req {
	http_stream *c;
	void (*gone)(void *arg);
	void *gone_arg;
	const char *cors;   /* the Origin header when it matches cors_origins (on cors_path), else NULL */
	bool head, options; /* the method is HEAD / OPTIONS */
	bool keep_alive;    /* from the head; cleared when the handler watches for the client going away */
	bool body_read;     /* http_req_read_body took the declared body (else it is unread: close after the answer) */
	char *body;         /* ST_BODY: parsed.content_length bytes being filled; handed to body_fn */
	size_t body_got;
	http_body_fn body_fn;
	void *body_arg;
	st_http_head parsed; /* points into buf */
	char buf[];          /* the head, NUL-split in place by st_http_parse_head */
};

struct http_server {
	struct event_base *base;
	struct evconnlistener *lis;
	http_handler_fn fn;
	void *arg;
	char *cors;
	char *cors_path;       /* NULL: CORS on every path; else only on this one */
	bool cors_credentials; /* Access-Control-Allow-Credentials: true with every CORS answer */
	size_t max_head;
	size_t max_body; /* 0: request bodies refused by the parser */
	uint32_t head_timeout_ms;
	uint32_t body_grace_ms;
	http_conn_limit *limit; /* cfg's (borrowed) or own_limit */
	http_conn_limit *own_limit;
	uint32_t nconns;
	int port;
	int cb_depth; /* > 0 while a user callback of this server runs */
	bool freeing;
	st_dlink all, headwait, endwait, reap, kick; /* sentinels of the lists above */
	st_dlink outq;                               /* streams with bytes to write this loop turn (lk[L_OUT]) */
	struct event *defer_ev, *head_ev, *end_ev, *retry_ev;
	struct evbuffer *trash; /* write_refs to dropped streams, released from defer_ev */
	st_histogram *delivery; /* borrowed, NULL = not measured */
};

/* ---------------------------------------------------------------- lists */

/* The connection whose link of kind k is n; NULL for NULL. */
static http_stream *
conn_of(st_dlink *n, int k)
{
	return n ? ST_CONTAINER_OF(n - k, http_stream, lk) : NULL;
}

static http_stream *
list_first(const st_dlink *l, int k)
{
	return conn_of(st_dlist_first(l), k);
}

static uint64_t
now_ms(void)
{
	return st_clock_now(st_clock_system());
}

static void
timer_arm(struct event *ev, uint64_t deadline)
{
	uint64_t now = now_ms();
	uint64_t d = deadline > now ? deadline - now : 0;
	struct timeval tv = st_timeval_ms(d);

	evtimer_add(ev, &tv);
}

static void
q_leave(http_stream *c)
{
	st_dlink_unlink(&c->lk[L_Q]);
}

/* FIFO push; the deadline grows with the push order because the delay is constant per FIFO. */
static void
fifo_push(http_stream *c, st_dlink *l, struct event *ev, uint32_t delay_ms)
{
	q_leave(c);
	c->deadline_ms = now_ms() + delay_ms;
	if (st_dlist_empty(l))
		timer_arm(ev, c->deadline_ms);
	st_dlist_push_back(l, &c->lk[L_Q]);
}

/* ------------------------------------------------------- close and reap */

static void
defer_kick(http_server *s)
{
	event_active(s->defer_ev, EV_TIMEOUT, 0);
}

static void
out_leave(http_stream *c)
{
	st_dlink_unlink(&c->lk[L_OUT]);
}

/*
 * The stream output path.  A bufferevent writes only from its EV_WRITE
 * callback, so every burst would cost an epoll_ctl to arm the event, a
 * wake-up and another epoll_ctl to disarm it once the output is empty
 * (the profile of 10,000 streams showed those beside writev as the top
 * cost).  Streams therefore keep EV_WRITE off while their output is
 * empty and write themselves: bytes queued in a loop turn are written with
 * one writev at the end of the turn (defer_cb), or earlier by
 * http_stream_flush.  Only when the kernel refuses bytes is EV_WRITE armed,
 * and the bufferevent takes over until the output is empty again
 * (write_cb).  A write error also hands over to the bufferevent, which
 * meets the same error and reports it through event_cb.
 */
static void
out_observe(http_stream *c)
{
	if (c->origin_ns != 0 && c->srv->delivery) {
		uint64_t now = st_clock_mono_ns();

		st_histogram_observe(c->srv->delivery, now > c->origin_ns ? (double)(now - c->origin_ns) / 1e9 : 0.0);
	}
	c->origin_ns = 0;
}

/*
 * A bufferevent keeps its output frozen at the start so that only its own
 * write callback drains it (evbuffer_write on it fails at once); it thaws
 * the buffer around its own writes, and so do we.
 */
static void
out_write_fd(http_stream *c, struct evbuffer *out)
{
	evbuffer_unfreeze(out, 1);
	(void)evbuffer_write(out, bufferevent_getfd(c->bev));
	evbuffer_freeze(out, 1);
}

/* The kernel refused bytes: the bufferevent waits for room and calls
 * write_cb (on_writable) once under the low watermark. */
static void
out_block(http_stream *c)
{
	if (!c->direct || c->closing || c->state != ST_STREAM)
		return;
	out_leave(c);
	c->direct = false;
	bufferevent_enable(c->bev, EV_WRITE);
}

static size_t
total_len(const http_ref *refs, size_t n)
{
	size_t t = 0;

	for (size_t i = 0; i < n; i++)
		t += refs[i].len;
	return t;
}

/*
 * notify: called from defer_cb, not under the user's own write: a writer
 * that stopped at the low watermark without flushing hears on_writable
 * once its bytes are out, as it would from the bufferevent.
 */
static void
out_write(http_stream *c, bool notify)
{
	struct evbuffer *out;
	size_t before;

	if (c->closing || c->state != ST_STREAM || !c->direct)
		return;
	out = bufferevent_get_output(c->bev);
	if ((before = evbuffer_get_length(out)) == 0)
		return;
	out_write_fd(c, out);
	if (evbuffer_get_length(out) > 0) {
		out_block(c);
		return;
	}
	out_observe(c);
	if (notify && before > HTTP_STREAM_LOWAT && c->on_writable) {
		c->srv->cb_depth++;
		c->on_writable(c->arg);
		c->srv->cb_depth--;
	}
}

/* Bytes were queued: write them at the end of this loop turn. */
static void
out_mark(http_stream *c, uint64_t origin_ns)
{
	if (!c->direct || st_dlink_linked(&c->lk[L_OUT]))
		return;
	if (c->origin_ns == 0)
		c->origin_ns = origin_ns;
	st_dlist_push_back(&c->srv->outq, &c->lk[L_OUT]);
	defer_kick(c->srv);
}

static void
conn_close(http_stream *c)
{
	http_server *s = c->srv;

	if (c->closing)
		return;
	c->closing = true;
	q_leave(c);
	st_dlink_unlink(&c->lk[L_KICK]);
	out_leave(c);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
	st_dlist_push_back(&s->reap, &c->lk[L_Q]);
	defer_kick(s);
}

static void req_free(http_req *r);
static void out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* The only place a connection is freed; never called under a callback of c. */
static void limit_put(http_conn_limit *l);

static void
conn_destroy(http_stream *c, bool force_abrupt)
{
	http_server *s = c->srv;
	http_req *r = c->req;
	/* An end whose bytes did not all leave (the 5 s cap) was cut off: abrupt. */
	bool unsent = c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0;

	q_leave(c);
	st_dlink_unlink(&c->lk[L_KICK]);
	out_leave(c);
	st_dlink_unlink(&c->lk[L_ALL]);
	s->nconns--;
	limit_put(s->limit);
	/* libevent 2.1 finalizes a freed bufferevent from the loop: the socket
	 * closes and write_ref cleanups run shortly after (or in
	 * event_base_free), possibly after on_close below.  Nothing of ours may
	 * be reachable from it by then. */
	if (c->out_cb)
		evbuffer_remove_cb(bufferevent_get_output(c->bev), out_cb, c);
	bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
	bufferevent_free(c->bev);
	c->bev = NULL;
	if (c->body_ev)
		event_free(c->body_ev);
	c->body_ev = NULL;
	s->cb_depth++;
	if (r) {
		c->req = NULL;
		if (r->gone)
			r->gone(r->gone_arg);
		req_free(r);
	} else if (c->is_stream && c->on_close) {
		c->on_close(c->arg, force_abrupt || c->aborted || !c->end_called || unsent);
	}
	s->cb_depth--;
	free(c);
}

static void conn_parse(http_stream *c);

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;
	http_stream *c;

	(void)fd;
	(void)what;
	while ((c = list_first(&s->outq, L_OUT)) != NULL) {
		out_leave(c);
		out_write(c, true);
	}
	while (!st_dlist_empty(&s->kick) || !st_dlist_empty(&s->reap)) {
		while ((c = list_first(&s->kick, L_KICK)) != NULL) {
			st_dlink_unlink(&c->lk[L_KICK]);
			if (!c->closing && c->state == ST_HEAD)
				conn_parse(c);
		}
		while ((c = list_first(&s->reap, L_Q)) != NULL)
			conn_destroy(c, false);
	}
	/* Releasing dropped references here, not in write_ref, keeps cleanup
	 * callbacks from running under the caller. */
	evbuffer_drain(s->trash, evbuffer_get_length(s->trash));
}

static void
conn_kick(http_stream *c)
{
	if (c->closing || st_dlink_linked(&c->lk[L_KICK]))
		return;
	st_dlist_push_back(&c->srv->kick, &c->lk[L_KICK]);
	defer_kick(c->srv);
}

/*
 * Closes what is due.  With stream_grace, an ending stream whose output is
 * still moving (the kernel took bytes within HTTP_STREAM_STALL_MS) waits
 * another round instead: a slow reader gets its terminal envelope; only a
 * socket that takes nothing for that long is cut (ADR-0197's blocked write).
 */
static void
fifo_expire(st_dlink *l, struct event *ev, bool stream_grace)
{
	uint64_t now = now_ms();
	http_stream *c;

	while ((c = list_first(l, L_Q)) != NULL && c->deadline_ms <= now) {
		if (stream_grace && c->is_stream && c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0 &&
		    now - c->progress_ms < HTTP_STREAM_STALL_MS) {
			fifo_push(c, l, ev, HTTP_DRAIN_CAP_MS);
			continue;
		}
		conn_close(c);
	}
	if ((c = list_first(l, L_Q)) != NULL)
		timer_arm(ev, c->deadline_ms);
}

static void
head_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;

	(void)fd;
	(void)what;
	fifo_expire(&s->headwait, s->head_ev, false);
}

static void
end_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;

	(void)fd;
	(void)what;
	fifo_expire(&s->endwait, s->end_ev, true);
}

/* ------------------------------------------------------------- writing */

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

enum head_kind { HEAD_PLAIN, HEAD_STREAM };

/*
 * The status line and headers.  has_len: write Content-Length (plain
 * replies with a body-capable status).  cors is the request's matched
 * Origin or NULL.  internal: server-made header lines (preflight).
 */
static void
conn_put_head(http_stream *c, int status, const char *ctype, enum head_kind kind, size_t clen, bool keep,
	      const char *cors, const char *internal, const char *extra)
{
	st_buf b;

	st_buf_init(&b);
	st_buf_printf(&b, "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
	if (ctype && *ctype)
		st_buf_printf(&b, "Content-Type: %s\r\n", ctype);
	if (kind == HEAD_PLAIN && status_has_body(status))
		st_buf_printf(&b, "Content-Length: %zu\r\n", clen);
	st_buf_puts(&b, "Cache-Control: no-store\r\n");
	if (kind == HEAD_STREAM)
		st_buf_puts(&b, "X-Accel-Buffering: no\r\n");
	st_buf_puts(&b, keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
	/* Retry-After and Studio-Until are not CORS-safelisted response headers:
	 * without the expose line a cross-origin script could not read how long
	 * to wait, or the bound its until=head resolved to. */
	if (cors)
		st_buf_printf(&b,
			      "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n"
			      "Access-Control-Expose-Headers: Retry-After, Studio-Until\r\n",
			      cors);
	/* Only ever beside an echoed origin: never with a wildcard (Fetch standard, CORS protocol). */
	if (cors && c->srv->cors_credentials)
		st_buf_puts(&b, "Access-Control-Allow-Credentials: true\r\n");
	if (internal)
		st_buf_puts(&b, internal);
	if (extra)
		st_buf_puts(&b, extra);
	st_buf_puts(&b, "\r\n");
	evbuffer_add(bufferevent_get_output(c->bev), b.p, b.len);
	st_buf_fini(&b);
}

static void
conn_shut(http_stream *c)
{
	if (!c->shut) {
		c->shut = true;
		shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	}
	if (c->peer_eof)
		conn_close(c);
}

/* Flush, shut the write side, wait for the peer's EOF; at most 5 s in all,
 * longer for a stream whose output is still moving (see fifo_expire). */
static void
conn_drain(http_stream *c)
{
	http_server *s = c->srv;

	if (c->closing)
		return;
	c->state = ST_DRAIN;
	fifo_push(c, &s->endwait, s->end_ev, HTTP_DRAIN_CAP_MS);
	/* Unread input (a refused body, pipelined requests) is dropped, which
	 * also resumes reading if the high watermark had suspended it. */
	evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
	/* The write callback must now fire only when the output is empty. */
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (c->direct) {
		/* The bufferevent writes what is left (see out_write). */
		c->direct = false;
		out_leave(c);
		bufferevent_enable(c->bev, EV_WRITE);
	}
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_shut(c);
}

/* ---------------------------------------------------------------- JSON */

/* A problem document (RFC 9457); an absent title is the status's reason phrase. */
static void
problem_render(st_buf *b, int status, const char *type, const char *title, const char *detail)
{
	st_json_problem(b, type, title ? title : reason_phrase(status), status, detail);
}

/* A refusal found by the server itself: problem document, then close. */
static void
conn_fail(http_stream *c, int status, const char *detail)
{
	st_buf b;

	st_buf_init(&b);
	problem_render(&b, status, NULL, NULL, detail);
	/* RFC 9110: a 405 names the methods that are allowed. */
	conn_put_head(c, status, "application/problem+json", HEAD_PLAIN, b.len, false, NULL,
		      status == 405 ? "Allow: GET, HEAD, OPTIONS\r\n" : NULL, NULL);
	evbuffer_add(bufferevent_get_output(c->bev), b.p, b.len);
	st_buf_fini(&b);
	conn_drain(c);
}

/* ------------------------------------------------------------- requests */

static bool
cors_match(const http_server *s, const char *origin)
{
	const char *p = s->cors, *o;
	size_t n;

	if (!p || !origin || !*origin)
		return false;
	while (st_list_next(&p, &o, &n))
		if ((n == 1 && *o == '*') || (strlen(origin) == n && strncasecmp(origin, o, n) == 0))
			return true;
	return false;
}

/* True when host[0..n) is a loopback name an http:// origin may use. */
static bool
origin_host_loopback(const char *host, size_t n)
{
	static const char *const names[] = { "localhost", "127.0.0.1", "[::1]" };

	for (size_t i = 0; i < ST_ARRAY_LEN(names); i++)
		if (n == strlen(names[i]) && strncasecmp(host, names[i], n) == 0)
			return true;
	return false;
}

bool
http_cors_origins_check(const char *list, char *why, size_t cap)
{
	const char *p = list, *o;
	size_t n;

	while (st_list_next(&p, &o, &n)) {
		const char *host, *end = o + n, *colon;
		bool port_ok;

		if (n == 1 && *o == '*')
			continue;
		if (n == 4 && strncasecmp(o, "null", 4) == 0) {
			snprintf(why, cap,
				 "origin null is refused: sandboxed iframes, data: and file: pages all send it, "
				 "so any site could read");
			return false;
		}
		if (n > 8 && strncasecmp(o, "https://", 8) == 0)
			continue;
		if (n <= 7 || strncasecmp(o, "http://", 7) != 0) {
			snprintf(why, cap, "origin %.*s: must be https://HOST[:PORT] (or http:// on loopback)",
				 (int)ST_MIN(n, 200), o);
			return false;
		}
		/* http://HOST[:PORT], HOST a name, an IPv4 address or [IPv6]. */
		host = o + 7;
		if (*host == '[') {
			const char *rb = memchr(host, ']', (size_t)(end - host));

			colon = rb ? rb + 1 : end;
		} else {
			colon = memchr(host, ':', (size_t)(end - host));
			colon = colon ? colon : end;
		}
		port_ok = colon == end || (*colon == ':' && colon + 1 < end);
		for (const char *q = colon + 1; port_ok && q < end; q++)
			port_ok = *q >= '0' && *q <= '9';
		if (!port_ok || !origin_host_loopback(host, (size_t)(colon - host))) {
			snprintf(
				why, cap,
				"origin %.*s: plain http:// is refused except on loopback (localhost, 127.0.0.1, [::1]): "
				"anyone on the network can pose as it; use https://",
				(int)ST_MIN(n, 200), o);
			return false;
		}
	}
	return true;
}

bool
http_req_cors_allowed(const http_req *r)
{
	return r->cors != NULL;
}

static void
req_free(http_req *r)
{
	free(r->body);
	free(r);
}

const char *
http_req_header(const http_req *r, const char *name)
{
	return st_http_parse_field_get(&r->parsed, name);
}

const char *
http_req_header_next(const http_req *r, const char *name, size_t *cursor)
{
	return st_http_parse_field_next(&r->parsed, name, cursor);
}

static void conn_after_reply(http_stream *c, bool keep);

static void
conn_preflight(http_stream *c, http_req *r)
{
	bool keep = r->keep_alive;

	if (r->cors)
		conn_put_head(c, 204, NULL, HEAD_PLAIN, 0, keep, r->cors,
			      "Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\n"
			      "Access-Control-Allow-Headers: Last-Event-ID, Accept, Cache-Control, Authorization\r\n"
			      "Access-Control-Max-Age: 600\r\n",
			      NULL);
	else
		conn_put_head(c, 204, NULL, HEAD_PLAIN, 0, keep, NULL, "Allow: GET, HEAD, OPTIONS\r\n", NULL);
	req_free(r);
	conn_after_reply(c, keep);
}

/*
 * Parses and dispatches every complete head in the input, one at a time:
 * it stops as soon as a request is left unanswered (HANDLER), the
 * connection leaves HEAD, or too much reply output is unread.
 */
static void
conn_parse(http_stream *c)
{
	http_server *s = c->srv;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	struct evbuffer *out = bufferevent_get_output(c->bev);

	c->in_parse = true;
	while (!c->closing && c->state == ST_HEAD) {
		size_t n = evbuffer_get_length(in), lim, hl, skip = 0;
		unsigned char *p;
		http_req *r;
		const char *origin;

		if (n == 0)
			break;
		if (evbuffer_get_length(out) > HTTP_PLAIN_OUT_MAX) {
			c->wait_drain = true;
			break;
		}
		lim = ST_MIN(n, s->max_head);
		p = evbuffer_pullup(in, (ev_ssize_t)lim);
		if (!p) {
			conn_close(c);
			break;
		}
		/* Empty lines before a request line are ignored (RFC 9112 2.2). */
		if (c->scanned == 0 && (skip = st_http_parse_empty_lines(p, lim)) > 0) {
			evbuffer_drain(in, skip);
			continue;
		}
		hl = st_http_parse_head_end(p, c->scanned >= 2 ? c->scanned - 2 : 0, lim);
		if (hl == 0) {
			c->scanned = (uint32_t)lim;
			if (lim >= s->max_head)
				conn_fail(c, 431, "the request head is too large");
			break;
		}
		c->scanned = 0;
		q_leave(c); /* the head arrived in time */
		r = st_xmalloc(sizeof(*r) + hl + 1);
		memset(r, 0, sizeof(*r));
		r->c = c;
		evbuffer_remove(in, r->buf, hl);
		r->buf[hl] = '\0';
		if ((s->max_body ? st_http_parse_head_bodies(&r->parsed, r->buf, hl)
				 : st_http_parse_head(&r->parsed, r->buf, hl)) != ST_OK) {
			int status = r->parsed.status;
			const char *detail = r->parsed.detail; /* static text */

			req_free(r);
			conn_fail(c, status, detail);
			break;
		}
		r->keep_alive = r->parsed.keep_alive;
		r->head = strcmp(r->parsed.method, "HEAD") == 0;
		r->options = strcmp(r->parsed.method, "OPTIONS") == 0;
		origin = st_http_parse_field_get(&r->parsed, "Origin");
		/* Another path (/metrics, /healthz) answers no origin: a page elsewhere has no business reading it. */
		if (s->cors_path == NULL || strcmp(r->parsed.path, s->cors_path) == 0)
			r->cors = cors_match(s, origin) ? origin : NULL;
		if (r->options) {
			conn_preflight(c, r);
			continue;
		}
		c->req = r;
		c->state = ST_HANDLER;
		c->head_only = r->head;
		s->cb_depth++;
		s->fn(r, s->arg);
		s->cb_depth--;
	}
	c->in_parse = false;
	if (!c->closing && (c->state == ST_STREAM || c->state == ST_DRAIN))
		evbuffer_drain(in, evbuffer_get_length(in));
}

/* After a complete plain response. */
static void
conn_after_reply(http_stream *c, bool keep)
{
	http_server *s = c->srv;

	if (c->closing)
		return;
	if (!keep) {
		conn_drain(c);
		return;
	}
	c->state = ST_HEAD;
	c->head_only = false;
	fifo_push(c, &s->headwait, s->head_ev, s->head_timeout_ms);
	/* Pipelined bytes wait in the input; parse them from the loop, never
	 * under the caller that answered late. */
	if (!c->in_parse && evbuffer_get_length(bufferevent_get_input(c->bev)) > 0)
		conn_kick(c);
}

/* ------------------------------------------------------------ bodies */

/*
 * Moves the body's bytes from the input into the request's block; when it
 * is complete, hands it to body_fn (the connection is back in HANDLER, and
 * pipelined bytes after the body stay in the input for later).
 */
static void
body_take(http_stream *c)
{
	http_req *r = c->req;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t want = (size_t)r->parsed.content_length - r->body_got;
	size_t n = ST_MIN(want, evbuffer_get_length(in));
	http_body_fn fn;
	char *body;

	if (n > 0) {
		evbuffer_remove(in, r->body + r->body_got, n);
		r->body_got += n;
	}
	if (r->body_got < (size_t)r->parsed.content_length)
		return;
	event_del(c->body_ev);
	bufferevent_setwatermark(c->bev, EV_READ, 0, c->srv->max_head);
	c->state = ST_HANDLER;
	fn = r->body_fn;
	body = r->body;
	r->body = NULL;
	r->body_fn = NULL;
	c->srv->cb_depth++;
	fn(r, body, r->body_got, r->body_arg);
	c->srv->cb_depth--;
}

/* The body did not arrive in time: 408, and the request is gone (its gone callback). */
static void
body_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_stream *c = arg;
	http_req *r = c->req;

	(void)fd;
	(void)what;
	if (c->closing || c->state != ST_BODY || r == NULL)
		return;
	c->req = NULL;
	conn_fail(c, 408, "the request body did not arrive in time");
	c->srv->cb_depth++;
	if (r->gone)
		r->gone(r->gone_arg);
	c->srv->cb_depth--;
	req_free(r);
}

uint64_t
http_req_body_length(const http_req *r)
{
	return r->parsed.content_length;
}

void
http_req_read_body(http_req *r, http_body_fn fn, void *arg)
{
	http_stream *c = r->c;
	http_server *s = c->srv;
	size_t len = (size_t)r->parsed.content_length;
	uint64_t ms = s->body_grace_ms + (uint64_t)len * 1000 / HTTP_BODY_MIN_RATE;

	ST_ASSERT(c->req == r && c->state == ST_HANDLER && !r->body_read && len > 0 && len <= s->max_body);
	r->body_read = true;
	r->body = st_xmalloc(len);
	r->body_got = 0;
	r->body_fn = fn;
	r->body_arg = arg;
	c->state = ST_BODY;
	if (!c->body_ev)
		c->body_ev = evtimer_new(s->base, body_timer_cb, c);
	ST_ASSERT(c->body_ev != NULL);
	{
		struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
		evtimer_add(c->body_ev, &tv);
	}
	/* no head-sized cap while the body streams in: it is copied out as it arrives */
	bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
	bufferevent_enable(c->bev, EV_READ);
	body_take(c);
}

void
http_req_set_close_cb(http_req *r, void (*gone)(void *arg), void *arg)
{
	r->gone = gone;
	r->gone_arg = arg;
}

/* ------------------------------------------------- bufferevent callbacks */

static void
read_cb(struct bufferevent *bev, void *arg)
{
	http_stream *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	switch (c->state) {
	case ST_HEAD: conn_parse(c); break;
	case ST_BODY: body_take(c); break;
	case ST_HANDLER:
		/*
		 * Pipelined bytes wait, bounded by the read high watermark - which
		 * also stops reading, so a client that filled it and then went away
		 * would not be noticed while the answer waits.  A handler that
		 * watches for the client going away gets its input dropped instead
		 * (and its connection closed after the answer).
		 */
		if (c->watch_gone)
			evbuffer_drain(in, evbuffer_get_length(in));
		break;
	default:
		/* Streams and draining connections read only to see EOF early. */
		evbuffer_drain(in, evbuffer_get_length(in));
		break;
	}
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	http_stream *c = arg;
	http_server *s = c->srv;

	if (c->closing)
		return;
	switch (c->state) {
	case ST_DRAIN:
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			conn_shut(c);
		break;
	case ST_STREAM:
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 && !c->end_called) {
			/* Caught up: back to writing ourselves (see out_write). */
			bufferevent_disable(bev, EV_WRITE);
			c->direct = true;
			out_observe(c);
		}
		if (c->on_writable) {
			s->cb_depth++;
			c->on_writable(c->arg);
			s->cb_depth--;
		}
		break;
	case ST_HEAD:
		if (c->wait_drain) {
			c->wait_drain = false;
			conn_parse(c);
		}
		break;
	default: break;
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	http_stream *c = arg;

	if (c->closing || !(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	c->peer_eof = true;
	if ((what & BEV_EVENT_ERROR) || !(what & BEV_EVENT_READING)) {
		conn_close(c);
		return;
	}
	switch (c->state) {
	case ST_DRAIN:
		/* Let the rest of the output go (the peer may only have half-closed). */
		if (c->shut || evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			conn_close(c);
		break;
	case ST_HEAD:
		if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
			conn_drain(c);
		else
			conn_close(c);
		break;
	default:
		conn_close(c); /* HANDLER: gone; STREAM: abrupt */
		break;
	}
}

static void
out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	http_stream *c = arg;

	(void)buf;
	if (info->n_deleted > 0 || (info->orig_size == 0 && info->n_added > 0))
		c->progress_ms = now_ms();
}

/* --------------------------------------------------------------- server */

struct http_conn_limit {
	_Atomic uint32_t open;
	uint32_t max;
};

http_conn_limit *
http_conn_limit_new(uint32_t max)
{
	http_conn_limit *l = st_xcalloc(1, sizeof(*l));

	atomic_init(&l->open, 0);
	l->max = max;
	return l;
}

void
http_conn_limit_free(http_conn_limit *l)
{
	free(l);
}

uint32_t
http_conn_limit_open(const http_conn_limit *l)
{
	return atomic_load(&((http_conn_limit *)l)->open);
}

/* A slot, or false at the bound: check and take in one step, whichever loop asks. */
static bool
limit_take(http_conn_limit *l)
{
	uint32_t v = atomic_load_explicit(&l->open, memory_order_relaxed);

	do {
		if (v >= l->max)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&l->open, &v, v + 1, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

static void
limit_put(http_conn_limit *l)
{
	atomic_fetch_sub_explicit(&l->open, 1, memory_order_relaxed);
}

static void
accept_cb(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	http_server *s = arg;
	http_stream *c;
	struct bufferevent *bev;
	char host[INET6_ADDRSTRLEN] = "?";
	int one = 1;

	(void)lis;
	(void)salen;
	if (!limit_take(s->limit)) {
		evutil_closesocket(fd);
		return;
	}
	bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		limit_put(s->limit);
		evutil_closesocket(fd);
		return;
	}
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c = st_xcalloc(1, sizeof(*c));
	c->srv = s;
	c->bev = bev;
	c->state = ST_HEAD;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;

		evutil_inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "%s:%u", host, (unsigned)ntohs(in->sin_port));
		c->peer_ip[10] = c->peer_ip[11] = 0xff;
		memcpy(c->peer_ip + 12, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

		evutil_inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
		memcpy(c->peer_ip, &in6->sin6_addr, 16);
	} else {
		snprintf(c->peer, sizeof(c->peer), "?");
	}
	st_dlist_push_back(&s->all, &c->lk[L_ALL]);
	s->nconns++;
	bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(bev, EV_READ, 0, s->max_head);
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	fifo_push(c, &s->headwait, s->head_ev, s->head_timeout_ms);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(s->lis);
}

/* accept() failed (EMFILE...): pause, or the listener would spin. */
static void
accept_error_cb(struct evconnlistener *lis, void *arg)
{
	http_server *s = arg;
	struct timeval tv = { 0, 100 * 1000 };

	st_warn("http :%d: accept: %s", s->port, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
	evconnlistener_disable(lis);
	evtimer_add(s->retry_ev, &tv);
}

/* "ADDR:PORT" with an explicit numeric port. */
static bool
listen_addr_ok(const char *listen)
{
	const char *colon = strrchr(listen, ':');
	const char *p;

	if (!colon || colon == listen || colon[1] == '\0')
		return false;
	for (p = colon + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	if (listen[0] == '[')
		return colon[-1] == ']';
	return memchr(listen, ':', (size_t)(colon - listen)) == NULL;
}

/* evutil_parse_sockaddr_port refuses port 0, so the port is parsed here. */
st_err
http_listen_parse(const char *listen, struct sockaddr_storage *ss, int *sslen)
{
	const char *colon;
	char host[128];
	uint64_t port;
	size_t hl;

	if (listen == NULL || !listen_addr_ok(listen))
		return ST_EINVAL;
	colon = strrchr(listen, ':');
	hl = (size_t)(colon - listen);
	if (hl >= sizeof(host) || st_parse_u64(colon + 1, strlen(colon + 1), &port) != ST_OK || port > 65535)
		return ST_EINVAL;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	if (evutil_parse_sockaddr_port(host, (struct sockaddr *)ss, sslen) != 0)
		return ST_EINVAL;
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		return ST_EINVAL;
	return ST_OK;
}

/* reuse_port: SO_REUSEPORT, so several servers (one per loop thread) share the address. */
static st_err
server_create(struct event_base *base, const char *listen, const http_server_config *cfg, bool reuse_port,
	      http_conn_limit *limit, http_handler_fn fn, void *arg, http_server **out)
{
	struct sockaddr_storage ss;
	int sslen = (int)sizeof(ss);
	http_server *s;
	st_err rv = ST_EINVAL;

	*out = NULL;
	if (!base || !listen || !fn || http_listen_parse(listen, &ss, &sslen) != ST_OK)
		return ST_EINVAL;
	s = st_xcalloc(1, sizeof(*s));
	s->base = base;
	st_dlist_init(&s->all);
	st_dlist_init(&s->headwait);
	st_dlist_init(&s->endwait);
	st_dlist_init(&s->reap);
	st_dlist_init(&s->kick);
	st_dlist_init(&s->outq);
	s->fn = fn;
	s->arg = arg;
	s->max_head = cfg && cfg->max_header_bytes ? cfg->max_header_bytes : 8192;
	s->max_head = ST_MAX(ST_MIN(s->max_head, (size_t)HTTP_HEAD_MAX), (size_t)HTTP_HEAD_MIN);
	s->head_timeout_ms = cfg && cfg->header_timeout_ms ? cfg->header_timeout_ms : 10000;
	s->max_body = cfg ? cfg->max_body_bytes : 0;
	s->body_grace_ms = cfg && cfg->body_grace_ms ? cfg->body_grace_ms : 10000;
	if (limit) {
		s->limit = limit;
	} else {
		s->own_limit = http_conn_limit_new(cfg && cfg->max_conns ? cfg->max_conns : 100000);
		s->limit = s->own_limit;
	}
	if (cfg && cfg->cors_origins && *cfg->cors_origins)
		s->cors = st_xstrdup(cfg->cors_origins);
	if (cfg && cfg->cors_path && *cfg->cors_path)
		s->cors_path = st_xstrdup(cfg->cors_path);
	s->defer_ev = event_new(base, -1, 0, defer_cb, s);
	s->head_ev = evtimer_new(base, head_timer_cb, s);
	s->end_ev = evtimer_new(base, end_timer_cb, s);
	s->retry_ev = evtimer_new(base, retry_cb, s);
	s->trash = evbuffer_new();
	if (!s->defer_ev || !s->head_ev || !s->end_ev || !s->retry_ev || !s->trash) {
		rv = ST_ENOMEM;
		goto fail;
	}
	s->lis = evconnlistener_new_bind(base, accept_cb, s,
					 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC |
						 (reuse_port ? LEV_OPT_REUSEABLE_PORT : 0),
					 1024, (struct sockaddr *)&ss, sslen);
	if (!s->lis) {
		st_error("http: listen %s: %s", listen, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		rv = ST_ESYS;
		goto fail;
	}
	evconnlistener_set_error_cb(s->lis, accept_error_cb);
	{
		struct sockaddr_storage b;
		socklen_t blen = sizeof(b);

		if (getsockname(evconnlistener_get_fd(s->lis), (struct sockaddr *)&b, &blen) == 0)
			s->port = b.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&b)->sin6_port)
							  : ntohs(((struct sockaddr_in *)&b)->sin_port);
	}
	*out = s;
	return ST_OK;
fail:
	http_server_free(s);
	return rv;
}

st_err
http_server_new(struct event_base *base, const char *listen, const http_server_config *cfg, http_handler_fn fn,
		void *arg, http_server **out)
{
	return server_create(base, listen, cfg, false, NULL, fn, arg, out);
}

st_err
http_server_new_shared(struct event_base *base, const char *listen, const http_server_config *cfg,
		       http_conn_limit *limit, http_handler_fn fn, void *arg, http_server **out)
{
	return server_create(base, listen, cfg, true, limit, fn, arg, out);
}

void
http_server_set_cors_credentials(http_server *s, bool on)
{
	s->cors_credentials = on;
}

uint32_t
http_server_conns_open(const http_server *s)
{
	return http_conn_limit_open(s->limit);
}

void
http_server_free(http_server *s)
{
	http_stream *c;

	if (!s)
		return;
	/* Freeing from inside one of this server's callbacks would free the
	 * connection whose callback is running. */
	ST_ASSERT(s->cb_depth == 0);
	s->freeing = true;
	if (s->lis)
		evconnlistener_free(s->lis);
	while ((c = list_first(&s->all, L_ALL)) != NULL)
		conn_destroy(c, true);
	if (s->trash)
		evbuffer_free(s->trash);
	if (s->defer_ev)
		event_free(s->defer_ev);
	if (s->head_ev)
		event_free(s->head_ev);
	if (s->end_ev)
		event_free(s->end_ev);
	if (s->retry_ev)
		event_free(s->retry_ev);
	free(s->cors);
	free(s->cors_path);
	http_conn_limit_free(s->own_limit);
	free(s);
}

void
http_server_set_delivery_histogram(http_server *s, st_histogram *h)
{
	s->delivery = h;
}

int
http_server_port(const http_server *s)
{
	return s->port;
}

/* -------------------------------------------------------------- request */

const char *
http_req_method(const http_req *r)
{
	return r->parsed.method;
}

const char *
http_req_path(const http_req *r)
{
	return r->parsed.path;
}

const char *
http_req_query(const http_req *r)
{
	return r->parsed.query;
}

void
http_req_set_gone_cb(http_req *r, void (*gone)(void *arg), void *arg)
{
	r->gone = gone;
	r->gone_arg = arg;
	r->keep_alive = false;
	r->c->watch_gone = true;
	/* What is already buffered would keep the read side stopped. */
	evbuffer_drain(bufferevent_get_input(r->c->bev), evbuffer_get_length(bufferevent_get_input(r->c->bev)));
	bufferevent_enable(r->c->bev, EV_READ);
}

/* ------------------------------------------------------------ responses */

void
http_reply(http_req *r, int status, const char *content_type, const void *body, size_t len, const char *extra_headers)
{
	http_stream *c = r->c;
	/* a declared body never read is still on the wire: the connection cannot carry another request */
	bool keep = r->keep_alive && (r->parsed.content_length == 0 || r->body_read);

	ST_ASSERT(c->req == r && c->state == ST_HANDLER && status >= 100 && status <= 599);
	c->req = NULL;
	if (!c->closing) {
		conn_put_head(c, status, content_type, HEAD_PLAIN, len, keep, r->cors, NULL, extra_headers);
		if (!r->head && status_has_body(status) && len > 0)
			evbuffer_add(bufferevent_get_output(c->bev), body, len);
	}
	req_free(r);
	conn_after_reply(c, keep);
}

void
http_reply_problem(http_req *r, int status, const char *type, const char *title, const char *detail,
		   const char *extra_headers)
{
	st_buf b;

	st_buf_init(&b);
	problem_render(&b, status, type, title, detail);
	http_reply(r, status, "application/problem+json", b.p, b.len, extra_headers);
	st_buf_fini(&b);
}

/* -------------------------------------------------------------- streams */

http_stream *
http_stream_start(http_req *r, int status, const char *content_type, const char *extra_headers,
		  const http_stream_cbs *cbs, void *arg)
{
	http_stream *c = r->c;

	ST_ASSERT(c->req == r && status >= 200 && status <= 599);
	c->req = NULL;
	c->state = ST_STREAM;
	c->is_stream = true;
	c->head_only = r->head;
	c->on_writable = cbs ? cbs->on_writable : NULL;
	c->on_close = cbs ? cbs->on_close : NULL;
	c->arg = arg;
	if (!c->closing) {
		struct evbuffer *out = bufferevent_get_output(c->bev);

		c->progress_ms = now_ms();
		if (evbuffer_add_cb(out, out_cb, c))
			c->out_cb = true;
		bufferevent_setwatermark(c->bev, EV_WRITE, HTTP_STREAM_LOWAT, 0);
		/* Bytes pipelined behind the request are dropped; this also
		 * resumes reading if they filled the input, so EOF is seen. */
		evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
		conn_put_head(c, status, content_type, HEAD_STREAM, 0, false, r->cors, NULL, extra_headers);
		/* From here the stream writes itself (see out_write). */
		bufferevent_disable(c->bev, EV_WRITE);
		c->direct = true;
		out_mark(c, 0);
	}
	req_free(r);
	if (c->head_only)
		http_stream_end(c);
	return c;
}

/* Bytes are dropped once the stream is closing or ended, and always for HEAD. */
static bool
stream_drops(const http_stream *s)
{
	return s->closing || s->end_called || s->head_only || s->state != ST_STREAM;
}

void
http_stream_write(http_stream *s, const void *data, size_t len)
{
	if (stream_drops(s) || len == 0)
		return;
	evbuffer_add(bufferevent_get_output(s->bev), data, len);
	out_mark(s, 0);
}

/* http_stream_write_ref, the bytes stamped with origin_ns when they start the output (0: not timed). */
static void
stream_write_ref_at(http_stream *s, const void *data, size_t len,
		    void (*cleanup)(const void *data, size_t len, void *arg), void *arg, uint64_t origin_ns)
{
	struct evbuffer *to = stream_drops(s) ? s->srv->trash : bufferevent_get_output(s->bev);

	if (evbuffer_add_reference(to, data, len, cleanup, arg) != 0) {
		/* libevent did not take the reference (out of memory). */
		if (cleanup)
			cleanup(data, len, arg);
		http_stream_abort(s);
		return;
	}
	if (to == s->srv->trash)
		defer_kick(s->srv);
	else
		out_mark(s, origin_ns);
}

void
http_stream_write_ref(http_stream *s, const void *data, size_t len,
		      void (*cleanup)(const void *data, size_t len, void *arg), void *arg)
{
	stream_write_ref_at(s, data, len, cleanup, arg, 0);
}

void
http_stream_write_refs(http_stream *s, const http_ref *refs, size_t n)
{
	struct iovec iov[HTTP_WRITEV_MAX];
	size_t i = 0, off = 0, k = n < HTTP_WRITEV_MAX ? n : HTTP_WRITEV_MAX;
	bool refused = false;
	uint64_t origin_ns = 0; /* the first one given: the oldest arrival these bytes carry */

	if (n == 0)
		return;
	for (size_t j = 0; j < n && origin_ns == 0; j++)
		origin_ns = refs[j].origin_ns;
	if (!stream_drops(s) && s->direct && !st_dlink_linked(&s->lk[L_OUT]) &&
	    evbuffer_get_length(bufferevent_get_output(s->bev)) == 0) {
		for (size_t j = 0; j < k; j++) {
			iov[j].iov_base = (void *)refs[j].data;
			iov[j].iov_len = refs[j].len;
		}
		ssize_t w = writev(bufferevent_getfd(s->bev), iov, (int)k);

		if (w < 0) {
			refused = errno != EINTR;
		} else {
			size_t left = (size_t)w;

			/* Fewer than n taken whole with all k written is the iovec
			 * cap, not a full socket: the end of the turn writes the rest. */
			refused = (size_t)w < total_len(refs, k);

			while (i < n && i < k && left >= refs[i].len) {
				left -= refs[i].len;
				if (refs[i].cleanup)
					refs[i].cleanup(refs[i].data, refs[i].len, refs[i].arg);
				i++;
			}
			off = left;
		}
		if (i == n) {
			/* All of it reached the kernel now. */
			if (origin_ns != 0) {
				s->origin_ns = origin_ns;
				out_observe(s);
			}
			return;
		}
	}
	for (; i < n; i++, off = 0)
		stream_write_ref_at(s, (const char *)refs[i].data + off, refs[i].len - off, refs[i].cleanup,
				    refs[i].arg, origin_ns);
	/* The kernel refused bytes (or an error: the bufferevent meets it too
	 * and reports it): wait for room instead of trying again this turn. */
	if (refused)
		out_block(s);
}

size_t
http_stream_flush(http_stream *s)
{
	struct evbuffer *out;

	if (stream_drops(s) || s->bev == NULL)
		return http_stream_backlog(s);
	out = bufferevent_get_output(s->bev);
	/*
	 * One non-blocking write now instead of at the end of the turn or the
	 * next EV_WRITE: a burst (a 10,000-event flush fans out as ten messages
	 * in one callback) reaches the kernel as it is queued, and frames wait
	 * in the stream's own queue only when the kernel really refuses them.
	 * An error is left for the bufferevent to see on its next write.
	 */
	if (s->direct)
		out_write(s, false);
	else if (evbuffer_get_length(out) > 0)
		out_write_fd(s, out);
	return evbuffer_get_length(out);
}

size_t
http_stream_backlog(const http_stream *s)
{
	return s->bev ? evbuffer_get_length(bufferevent_get_output(s->bev)) : 0;
}

size_t
http_stream_low_watermark(const http_stream *s)
{
	(void)s;
	return HTTP_STREAM_LOWAT;
}

uint64_t
http_stream_blocked_ms(const http_stream *s, uint64_t now)
{
	if (http_stream_backlog(s) == 0 || now <= s->progress_ms)
		return 0;
	return now - s->progress_ms;
}

void
http_stream_end(http_stream *s)
{
	if (s->closing || s->end_called)
		return;
	s->end_called = true;
	conn_drain(s);
}

void
http_stream_abort(http_stream *s)
{
	if (s->closing)
		return;
	s->aborted = true;
	conn_close(s);
}

void
http_req_peer_ip(const http_req *r, uint8_t out[16])
{
	memcpy(out, r->c->peer_ip, 16);
}

const char *
http_stream_peer(const http_stream *s)
{
	return s->peer;
}

/* For st_http_test's memory report. */
size_t http_stream_struct_size_(void);
size_t
http_stream_struct_size_(void)
{
	return sizeof(struct http_stream);
}
