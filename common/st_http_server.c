/*
 * st_http_server: listening and accepting - the address parse, the
 * listener (SO_REUSEPORT for servers on several loops), the connection
 * bound shared by those servers (an atomic slot count), the pause after a
 * failed accept (EMFILE), and the server's own life: its lists, its three
 * events and its trash buffer.  An accepted socket becomes a connection in
 * st_http.c (http_conn_accept); the server frees what is left of them.
 */
#include "st_http_server.h"

#include "st_log.h"
#include "st_util.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

struct http_conn_limit {
	_Atomic uint32_t open;
	uint32_t max;
};

http_conn_limit *
http_conn_limit_new(uint32_t max)
{
	http_conn_limit *l = st_xcalloc(1, sizeof(*l));

	atomic_init(&l->open, 0);
	l->max = max ? max : HTTP_CONNS_DEFAULT;
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

void
http_conn_limit_put(http_conn_limit *l)
{
	atomic_fetch_sub_explicit(&l->open, 1, memory_order_relaxed);
}

static void
accept_cb(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	http_server *s = arg;
	struct bufferevent *bev;
	int one = 1;

	(void)lis;
	(void)salen;
	if (!limit_take(s->limit)) {
		evutil_closesocket(fd);
		return;
	}
	bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		http_conn_limit_put(s->limit);
		evutil_closesocket(fd);
		return;
	}
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	http_conn_accept(s, bev, sa);
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
	s->conns = st_slab_new(sizeof(http_stream));
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
		s->own_limit = http_conn_limit_new(cfg ? cfg->max_conns : 0);
		s->limit = s->own_limit;
	}
	if (cfg && cfg->cors_origins && *cfg->cors_origins)
		s->cors = st_xstrdup(cfg->cors_origins);
	if (cfg && cfg->cors_path && *cfg->cors_path)
		s->cors_path = st_xstrdup(cfg->cors_path);
	s->defer_ev = event_new(base, -1, 0, http_conn_defer_cb, s);
	s->head_ev = evtimer_new(base, http_conn_head_timer_cb, s);
	s->end_ev = evtimer_new(base, http_conn_end_timer_cb, s);
	s->retry_ev = evtimer_new(base, retry_cb, s);
	s->trash = evbuffer_new();
	if (!s->defer_ev || !s->head_ev || !s->end_ev || !s->retry_ev || !s->trash) {
		rv = ST_ENOMEM;
		goto fail;
	}
	s->lis = evconnlistener_new_bind(base, accept_cb, s,
					 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC |
						 (reuse_port ? LEV_OPT_REUSEABLE_PORT : 0),
					 HTTP_LISTEN_BACKLOG, (struct sockaddr *)&ss, sslen);
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
	while ((c = http_conn_first(&s->all, L_ALL)) != NULL)
		http_conn_destroy(c, true);
	st_slab_free(s->conns);
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
