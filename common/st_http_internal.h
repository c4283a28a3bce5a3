/*
 * st_http_internal: the layouts the modules of the HTTP server share, and
 * the calls they make into one another.  Not for users: they include
 * st_http.h, where http_server, http_req and http_stream stay opaque.
 *
 * The server is five modules around one connection struct:
 *   st_http.c         connections: the state machine, reaping, deadlines,
 *                     request heads and bodies, stream start and end;
 *   st_http_out.c     the stream output path: direct writes, the outq,
 *                     backlog, watermarks, delivery latency;
 *   st_http_reply.c   status lines, header blocks, plain replies, problems;
 *   st_http_cors.c    the Origin rules: matching, checking a list, headers;
 *   st_http_server.c  listening, accepting, the connection bound, the
 *                     accept retry, the server's life.
 * All of it runs on the loop thread of the server's base.
 */
#ifndef ST_HTTP_INTERNAL_H
#define ST_HTTP_INTERNAL_H

#include "st_http.h"

#include "st_clock.h"
#include "st_dlist.h"
#include "st_metrics.h"
#include "st_slab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>

struct bufferevent;
struct evbuffer;
struct evconnlistener;
struct sockaddr;

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
/* Connections a limit admits when it is given 0 (st_http.h: max_conns). */
#define HTTP_CONNS_DEFAULT 100000u
/* listen()'s backlog: the kernel caps it at net.core.somaxconn (4096 on
 * Debian 12).  It was 1024: 51,000 clients connecting at 5,000/s over 3
 * edges overflowed the accept queues 12,000-33,000 times (bench.sh --only
 * fifty), each a client's 1 s SYN retry; a bigger queue costs nothing
 * until it is used. */
#define HTTP_LISTEN_BACKLOG 65535

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
	uint16_t peer_port;
	/* The state (enum conn_state) is a bit-field beside the flags, and the
	 * peer is kept as address and port (its text is made on demand): every
	 * byte here is a byte of every idle stream, taken from the server's
	 * slab in 8-byte steps (docs/performance.md "Idle stream"). */
	unsigned state : 3;
	bool closing : 1, in_parse : 1, wait_drain : 1, is_stream : 1, head_only : 1, end_called : 1, aborted : 1,
		shut : 1, peer_eof : 1;
	/* Streams: direct is set while the bufferevent's EV_WRITE is off
	 * (output empty after our own write); lk[L_OUT] is linked while on the
	 * server's outq, to be written at the end of this loop turn. */
	bool direct : 1;
	/* The handler watches for the client going away (http_req_set_gone_cb):
	 * input after the request is dropped, so reading goes on and EOF is seen. */
	bool watch_gone : 1;
	bool wrote : 1;      /* streams: bytes handed since the last http_stream_visit_silent */
	bool peer_inet : 1;  /* peer_ip/peer_port hold an IPv4 or IPv6 peer (else its text is "?") */
	uint8_t peer_ip[16]; /* the peer's address, IPv4 as ::ffff:a.b.c.d (http_req_peer_ip) */
	/*
	 * Streams hold no bufferevent (640 B of it and 2 x 144 B of evbuffers
	 * were more than half of an idle stream): http_stream_start frees it and
	 * the stream keeps its socket, one read event (embedded: EOF and errors),
	 * a write event made the first time the kernel refuses bytes, and an
	 * output evbuffer made when bytes have to wait and freed once they left
	 * (docs/performance.md "Idle stream").  bev == NULL marks this mode.
	 */
	evutil_socket_t fd;   /* streams: the socket, closed by http_conn_destroy */
	struct evbuffer *out; /* streams: the backlog, NULL when empty */
	struct event *wev;    /* streams: EV_WRITE while blocked; NULL until the first block */
	struct event rev;     /* streams: EV_READ|EV_PERSIST, only to see EOF and errors */
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
	struct event *body_ev; /* ST_BODY: the body's deadline; made by http_req_read_body */
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
	st_slab *conns; /* owned: every http_stream of this server (one loop's) */
	int port;
	int cb_depth; /* > 0 while a user callback of this server runs */
	bool freeing;
	st_dlink all, headwait, endwait, reap, kick; /* sentinels of the lists above */
	st_dlink outq;                               /* streams with bytes to write this loop turn (lk[L_OUT]) */
	struct event *defer_ev, *head_ev, *end_ev, *retry_ev;
	struct evbuffer *trash; /* write_refs to dropped streams, released from defer_ev */
	st_histogram *delivery; /* borrowed, NULL = not measured */
};

/* The connection whose link of kind k is n; NULL for NULL. */
static inline http_stream *
http_conn_of(st_dlink *n, int k)
{
	return n ? ST_CONTAINER_OF(n - k, http_stream, lk) : NULL;
}

static inline http_stream *
http_conn_first(const st_dlink *l, int k)
{
	return http_conn_of(st_dlist_first(l), k);
}

/* The server's clock: CLOCK_MONOTONIC ms (st_clock_system()). */
static inline uint64_t
http_now_ms(void)
{
	return st_clock_now(st_clock_system());
}

/* Runs the server's deferred work (outq, kick, reap, trash) later in this loop turn. */
static inline void
http_server_defer_kick(http_server *s)
{
	event_active(s->defer_ev, EV_TIMEOUT, 0);
}

/* ---- st_http.c: connections ---- */
/* A new connection on bev (owned by the connection from here), its peer sa. */
void http_conn_accept(http_server *s, struct bufferevent *bev, const struct sockaddr *sa);
/* Marks c closing and queues it for the reaper (never frees under a callback). */
void http_conn_close(http_stream *c);
/* The only place a connection is freed; never called under a callback of c. */
void http_conn_destroy(http_stream *c, bool force_abrupt);
/* Frees a request (and a body being read); the connection no longer points at it. */
void http_req_free(http_req *r);
/* After a complete plain response: back to HEAD (keep) or DRAIN. */
void http_conn_after_reply(http_stream *c, bool keep);
/* The server's deferred event and its two FIFO timers (arg: the server). */
void http_conn_defer_cb(evutil_socket_t fd, short what, void *arg);
void http_conn_head_timer_cb(evutil_socket_t fd, short what, void *arg);
void http_conn_end_timer_cb(evutil_socket_t fd, short what, void *arg);

/* A stream's socket callbacks once it has no bufferevent (arg: the stream). */
void http_conn_stream_read_cb(evutil_socket_t fd, short what, void *arg);
void http_conn_stream_write_cb(evutil_socket_t fd, short what, void *arg);
/* Shuts the write side (after the last byte), closes when the peer's EOF came too. */
void http_conn_shut(http_stream *c);

/* The connection's socket, whichever mode it is in. */
static inline evutil_socket_t
http_conn_fd(const http_stream *c)
{
	return c->bev ? bufferevent_getfd(c->bev) : c->fd;
}

/* ---- st_http_server.c ---- */
/* Gives back the slot a connection took at accept. */
void http_conn_limit_put(http_conn_limit *l);

#endif
