/*
 * st_http: HTTP/1.1 on evconnlistener + one bufferevent per connection;
 * this module is the connection: its state machine, reaping, deadlines,
 * request heads and bodies, and the start and end of streams.  The rest of
 * the server is st_http_out.c (the stream output path), st_http_reply.c
 * (status lines, headers, plain replies), st_http_cors.c (Origin rules)
 * and st_http_server.c (listener, accept, the connection bound); they
 * share the structs of st_http_internal.h.
 *
 * DESIGN.  A connection is one struct http_stream (the name is the public
 * stream type: every connection may become a stream) plus its bufferevent
 * while it reads and answers requests; a stream gives the bufferevent up
 * (st_http_out.c http_out_adopt) for a read event embedded in the struct
 * and, only while bytes wait, a write event and an evbuffer of its own.
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
 * this struct and its epoll registration (measured by st_http_test;
 * docs/performance.md "Idle stream").
 *
 * Timers are not per connection.  The header timeout and the 5 s DRAIN cap
 * are constants per server, so connections waiting for either sit in a FIFO
 * ordered by deadline and one event per FIFO fires for its front.
 *
 * Never free under our own feet (STYLE 13): http_conn_close() only marks the
 * connection, disables its bufferevent (a stream: its events) and puts it
 * on the reap list; one deferred event (event_active) destroys it later
 * from the loop: it frees the bufferevent (a stream: its output, running
 * the write_ref cleanups, and closes the socket), then calls on_close or
 * the request's gone callback.  (libevent 2.1 finalizes a bufferevent from
 * the loop, so cleanups of bytes queued before a stream started may run
 * soon after on_close, or in event_base_free: a cleanup must not need the
 * stream's user state, only what its own arg holds.)  So a user may call abort/end/reply from
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
 * The head and query parsers are st_http_parse.c: pure functions, tested
 * and fuzzed without a socket.
 *
 * SIZE.  Over 800 lines (about 880): the state machine, the request side
 * and the two I/O modes of a connection (its bufferevent while it reads
 * and answers requests, bare events once it is a stream) all turn on the
 * same transitions; what moves out next is the body reading (body_take,
 * body_timer_cb, http_req_read_body: about 100 lines) into st_http_body.c.
 */
#include "st_http_internal.h"

#include "st_http_cors.h"
#include "st_http_out.h"
#include "st_http_reply.h"
#include "st_http_server.h"

#include "st_buf.h"
#include "st_http_parse.h"
#include "st_util.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

/* ---------------------------------------------------------------- lists */

static void
timer_arm(struct event *ev, uint64_t deadline)
{
	uint64_t now = http_now_ms();
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
	c->deadline_ms = http_now_ms() + delay_ms;
	if (st_dlist_empty(l))
		timer_arm(ev, c->deadline_ms);
	st_dlist_push_back(l, &c->lk[L_Q]);
}

/* ------------------------------------------------------- close and reap */

void
http_conn_close(http_stream *c)
{
	http_server *s = c->srv;

	if (c->closing)
		return;
	c->closing = true;
	q_leave(c);
	st_dlink_unlink(&c->lk[L_KICK]);
	http_out_leave(c);
	if (c->bev) {
		bufferevent_disable(c->bev, EV_READ | EV_WRITE);
		bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
	} else {
		event_del(&c->rev);
		if (c->wev)
			event_del(c->wev);
	}
	st_dlist_push_back(&s->reap, &c->lk[L_Q]);
	http_server_defer_kick(s);
}

void
http_conn_destroy(http_stream *c, bool force_abrupt)
{
	http_server *s = c->srv;
	http_req *r = c->req;
	/* An end whose bytes did not all leave (the 5 s cap) was cut off: abrupt. */
	bool unsent = http_out_len(c) > 0;

	q_leave(c);
	st_dlink_unlink(&c->lk[L_KICK]);
	http_out_leave(c);
	st_dlink_unlink(&c->lk[L_ALL]);
	s->nconns--;
	http_conn_limit_put(s->limit);
	if (c->bev) {
		/* libevent 2.1 finalizes a freed bufferevent from the loop: the
		 * socket closes and write_ref cleanups run shortly after (or in
		 * event_base_free), possibly after on_close below.  Nothing of ours
		 * may be reachable from it by then. */
		bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
		bufferevent_free(c->bev);
		c->bev = NULL;
	} else {
		/* A stream: its write_ref cleanups run here, before on_close. */
		event_del(&c->rev);
		if (c->wev)
			event_free(c->wev);
		c->wev = NULL;
		if (c->out)
			evbuffer_free(c->out);
		c->out = NULL;
		evutil_closesocket(c->fd);
	}
	s->cb_depth++;
	if (r) {
		c->req = NULL;
		if (r->gone)
			r->gone(r->gone_arg);
		http_req_free(r);
	} else if (c->is_stream && c->on_close) {
		c->on_close(c->arg, force_abrupt || c->aborted || !c->end_called || unsent);
	}
	s->cb_depth--;
	st_slab_put(s->conns, c);
}

static void conn_parse(http_stream *c);

void
http_conn_defer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;
	http_stream *c;

	(void)fd;
	(void)what;
	while ((c = http_conn_first(&s->outq, L_OUT)) != NULL) {
		http_out_leave(c);
		http_out_write(c, true);
	}
	while (!st_dlist_empty(&s->kick) || !st_dlist_empty(&s->reap)) {
		while ((c = http_conn_first(&s->kick, L_KICK)) != NULL) {
			st_dlink_unlink(&c->lk[L_KICK]);
			if (!c->closing && c->state == ST_HEAD)
				conn_parse(c);
		}
		while ((c = http_conn_first(&s->reap, L_Q)) != NULL)
			http_conn_destroy(c, false);
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
	http_server_defer_kick(c->srv);
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
	uint64_t now = http_now_ms();
	http_stream *c;

	while ((c = http_conn_first(l, L_Q)) != NULL && c->deadline_ms <= now) {
		if (stream_grace && c->is_stream && http_out_len(c) > 0 &&
		    now - c->progress_ms < HTTP_STREAM_STALL_MS) {
			fifo_push(c, l, ev, HTTP_DRAIN_CAP_MS);
			continue;
		}
		http_conn_close(c);
	}
	if ((c = http_conn_first(l, L_Q)) != NULL)
		timer_arm(ev, c->deadline_ms);
}

void
http_conn_head_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;

	(void)fd;
	(void)what;
	fifo_expire(&s->headwait, s->head_ev, false);
}

void
http_conn_end_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	http_server *s = arg;

	(void)fd;
	(void)what;
	fifo_expire(&s->endwait, s->end_ev, true);
}

void
http_conn_shut(http_stream *c)
{
	if (!c->shut) {
		c->shut = true;
		shutdown(http_conn_fd(c), SHUT_WR);
	}
	if (c->peer_eof)
		http_conn_close(c);
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
	if (!c->bev) {
		/* A stream: its write event writes what is left. */
		if (c->direct) {
			c->direct = false;
			http_out_leave(c);
			if (http_out_len(c) > 0)
				http_out_arm(c);
		}
	} else {
		/* Unread input (a refused body, pipelined requests) is dropped, which
		 * also resumes reading if the high watermark had suspended it. */
		evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
		/* The write callback must now fire only when the output is empty. */
		bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	}
	if (http_out_len(c) == 0)
		http_conn_shut(c);
}

/* A refusal found by the server itself: problem document, then close. */
static void
conn_fail(http_stream *c, int status, const char *detail)
{
	st_buf b;

	st_buf_init(&b);
	http_reply_problem_render(&b, status, NULL, NULL, detail);
	/* RFC 9110: a 405 names the methods that are allowed. */
	http_reply_head_put(c, status, "application/problem+json", HTTP_HEAD_PLAIN, b.len, false, NULL,
			    status == 405 ? "Allow: GET, HEAD, OPTIONS\r\n" : NULL, NULL);
	evbuffer_add(bufferevent_get_output(c->bev), b.p, b.len);
	st_buf_fini(&b);
	conn_drain(c);
}

/* ------------------------------------------------------------- requests */

bool
http_req_cors_allowed(const http_req *r)
{
	return r->cors != NULL;
}

void
http_req_free(http_req *r)
{
	if (r->body_ev)
		event_free(r->body_ev); /* may be the running callback's own event: libevent allows it */
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

static void
conn_preflight(http_stream *c, http_req *r)
{
	bool keep = r->keep_alive;

	if (r->cors)
		http_reply_head_put(
			c, 204, NULL, HTTP_HEAD_PLAIN, 0, keep, r->cors,
			"Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\n"
			"Access-Control-Allow-Headers: Last-Event-ID, Accept, Cache-Control, Authorization\r\n"
			"Access-Control-Max-Age: 600\r\n",
			NULL);
	else
		http_reply_head_put(c, 204, NULL, HTTP_HEAD_PLAIN, 0, keep, NULL, "Allow: GET, HEAD, OPTIONS\r\n",
				    NULL);
	http_req_free(r);
	http_conn_after_reply(c, keep);
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
			http_conn_close(c);
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

			http_req_free(r);
			conn_fail(c, status, detail);
			break;
		}
		r->keep_alive = r->parsed.keep_alive;
		r->head = strcmp(r->parsed.method, "HEAD") == 0;
		r->options = strcmp(r->parsed.method, "OPTIONS") == 0;
		origin = st_http_parse_field_get(&r->parsed, "Origin");
		/* Another path (/metrics, /healthz) answers no origin: a page elsewhere has no business reading it. */
		if (s->cors_path == NULL || strcmp(r->parsed.path, s->cors_path) == 0)
			r->cors = http_cors_match(s->cors, origin) ? origin : NULL;
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
	/* A stream's bufferevent (and in with it) is gone: it reads no more input. */
	if (!c->closing && c->bev && c->state == ST_DRAIN)
		evbuffer_drain(in, evbuffer_get_length(in));
}

/* After a complete plain response. */
void
http_conn_after_reply(http_stream *c, bool keep)
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
	event_del(r->body_ev);
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
	http_req_free(r);
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
	if (!r->body_ev)
		r->body_ev = evtimer_new(s->base, body_timer_cb, c);
	ST_ASSERT(r->body_ev != NULL);
	{
		struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
		evtimer_add(r->body_ev, &tv);
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

	if (c->closing)
		return;
	switch (c->state) {
	case ST_DRAIN:
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			http_conn_shut(c);
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
		http_conn_close(c);
		return;
	}
	switch (c->state) {
	case ST_DRAIN:
		/* Let the rest of the output go (the peer may only have half-closed). */
		if (c->shut || evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			http_conn_close(c);
		break;
	case ST_HEAD:
		if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
			conn_drain(c);
		else
			http_conn_close(c);
		break;
	default:
		http_conn_close(c); /* HANDLER: gone; STREAM: abrupt */
		break;
	}
}

/* ------------------------------------------------ stream socket callbacks */

/* A stream reads only to see EOF and errors early; what a client sends is dropped. */
void
http_conn_stream_read_cb(evutil_socket_t fd, short what, void *arg)
{
	http_stream *c = arg;
	char sink[4096];
	ssize_t n;

	(void)what;
	if (c->closing)
		return;
	n = recv(fd, sink, sizeof(sink), 0);
	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
		return;
	c->peer_eof = true;
	if (n == 0 && c->state == ST_DRAIN && !c->shut && http_out_len(c) > 0) {
		/* The peer may only have half-closed: let the rest of the output go. */
		event_del(&c->rev);
		return;
	}
	http_conn_close(c); /* STREAM: abrupt; an error; or DRAIN done */
}

/* The kernel has room again for a blocked stream (what write_cb is for a bufferevent). */
void
http_conn_stream_write_cb(evutil_socket_t fd, short what, void *arg)
{
	http_stream *c = arg;
	size_t left;

	(void)what;
	if (c->closing)
		return;
	if (c->out && evbuffer_get_length(c->out) > 0 && evbuffer_write(c->out, fd) < 0 && errno != EAGAIN &&
	    errno != EWOULDBLOCK && errno != EINTR) {
		c->peer_eof = true;
		http_conn_close(c);
		return;
	}
	left = http_out_len(c);
	if (left == 0) {
		event_del(c->wev);
		http_out_release(c);
	}
	switch (c->state) {
	case ST_DRAIN:
		if (left == 0)
			http_conn_shut(c);
		break;
	case ST_STREAM:
		if (left == 0 && !c->end_called) {
			/* Caught up: back to writing directly (st_http_out.c). */
			c->direct = true;
			http_out_observe(c);
		}
		if (left <= HTTP_STREAM_LOWAT && c->on_writable) {
			c->srv->cb_depth++;
			c->on_writable(c->arg);
			c->srv->cb_depth--;
		}
		break;
	default: break;
	}
}

/* ------------------------------------------------------------- accept */

void
http_conn_accept(http_server *s, struct bufferevent *bev, const struct sockaddr *sa)
{
	http_stream *c;

	c = st_slab_get(s->conns); /* zeroed, away from the request's buffers (st_slab.h) */
	c->srv = s;
	c->bev = bev;
	c->state = ST_HEAD;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		c->peer_inet = true;
		c->peer_port = ntohs(in->sin_port);
		c->peer_ip[10] = c->peer_ip[11] = 0xff;
		memcpy(c->peer_ip + 12, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		c->peer_inet = true;
		c->peer_port = ntohs(in6->sin6_port);
		memcpy(c->peer_ip, &in6->sin6_addr, 16);
	}
	st_dlist_push_back(&s->all, &c->lk[L_ALL]);
	s->nconns++;
	bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(bev, EV_READ, 0, s->max_head);
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	fifo_push(c, &s->headwait, s->head_ev, s->head_timeout_ms);
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
		c->progress_ms = http_now_ms();
		http_reply_head_put(c, status, content_type, HTTP_HEAD_STREAM, 0, false, r->cors, NULL, extra_headers);
		/* Bytes pipelined behind the request go with the bufferevent; from
		 * here the stream writes itself (st_http_out.c). */
		http_out_adopt(c);
		c->direct = true;
		http_out_mark(c, 0);
	}
	http_req_free(r);
	if (c->head_only)
		http_stream_end(c);
	return c;
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
	http_conn_close(s);
}

void
http_req_peer_ip(const http_req *r, uint8_t out[16])
{
	memcpy(out, r->c->peer_ip, 16);
}

const char *
http_stream_peer(const http_stream *s)
{
	/* Made on demand: 56 bytes of text in every connection for a log line
	 * now and then was a tenth of an idle stream. */
	static _Thread_local char text[INET6_ADDRSTRLEN + 8];
	char host[INET6_ADDRSTRLEN];
	static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (!s->peer_inet)
		snprintf(text, sizeof(text), "?");
	else if (memcmp(s->peer_ip, v4, sizeof(v4)) == 0)
		snprintf(text, sizeof(text), "%s:%u", evutil_inet_ntop(AF_INET, s->peer_ip + 12, host, sizeof(host)),
			 (unsigned)s->peer_port);
	else
		snprintf(text, sizeof(text), "[%s]:%u", evutil_inet_ntop(AF_INET6, s->peer_ip, host, sizeof(host)),
			 (unsigned)s->peer_port);
	return text;
}

/* For st_http_test's memory report. */
size_t http_stream_struct_size_(void);
size_t
http_stream_struct_size_(void)
{
	return sizeof(struct http_stream);
}