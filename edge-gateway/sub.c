/*
 * sub: one sub0 socket, every writer dialed, messages read on the loop.
 *
 * DESIGN.  Receiving uses NNG_OPT_RECVFD, a descriptor nng keeps readable
 * (level-triggered) while a whole message is queued; it is never read, only
 * watched, and each callback drains with nng_recvmsg(NNG_FLAG_NONBLOCK) until
 * NNG_EAGAIN or SUB_BATCH messages, then re-activates itself so one busy
 * socket cannot starve the rest of the loop.
 *
 * Dialers live in a fixed table of slots, SUB_MAX_ADDRS per URL.  A slot's
 * dialer id and pipe count are atomics because nng's pipe notifications
 * (run on nng threads, holding the socket lock, so they only look the
 * pipe's dialer up and count) update them; everything else in a slot is
 * owned by the loop thread.  A dialer is created, its id published in the
 * slot, and only then started, so no notification can precede the id.
 *
 * Names are resolved off the loop by st_resolve (a short-lived thread per
 * lookup, its answer posted back to the loop) for each DNS URL at start,
 * then on a one-shot timer per URL armed when its lookup is done, so a URL
 * never has more than one lookup out; the loop dials the new addresses and
 * closes the dialers of vanished ones.  A failed lookup changes nothing: a
 * DNS hiccup must not disconnect a working writer.  The timer's delay is
 * reresolve's rule: SUB_RESOLVE_MS while the name is whole (every address
 * dialed has a pipe, and as many as before), SUB_RERESOLVE_MIN_MS doubling
 * up to it while it is short.  A pipe's
 * loss or arrival (REM_POST, ADD_POST, on an nng thread) reaches the loop
 * through an st_mailbox, the one way threads meet: the notification posts
 * the URL (at most one post per URL is queued, an atomic flag says so) and
 * the loop looks at the URL's pipes: whole again, or a loss that re-arms
 * the URL's timer at SUB_RERESOLVE_MIN_MS (never later than it was due), so
 * a writer replaced on a new address is dialed within about that once the
 * name lists it, not at the next 10 s round (a rollout used to leave an
 * edge with no writer for seconds).  Nothing waits for a lookup: sub_free discards those still
 * running (their threads end by themselves), so a slow DNS server cannot
 * hold the edge's shutdown (it used to join a resolver thread stuck in
 * getaddrinfo until the 5 s exit watchdog fired).
 */
#include "sub.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_mailbox.h"
#include "st_resolve.h"
#include "st_tls.h"
#include "st_util.h"
#include "reresolve.h"
#include "wire.h"

typedef struct slot {
	_Atomic uint32_t dialer_id; /* 0: free */
	atomic_int pipes;
	nng_dialer d;           /* loop thread */
	char addr[SUB_URL_MAX]; /* loop thread; "" when free */
} slot;

typedef struct url {
	sub *owner;             /* the sub it is part of (lookup callbacks) */
	st_resolve_req *lookup; /* the lookup out, or NULL; the resolver's */
	struct event *ev_timer; /* owned (DNS URLs): the next lookup; one-shot */
	reresolve backoff;      /* loop thread */
	uint64_t due_ms;        /* when ev_timer fires (st_clock_system), if pending; loop thread */
	atomic_bool posted;     /* a pipe change is posted and not yet seen by the loop */
	char text[SUB_URL_MAX];
	char scheme[8]; /* "tcp" or "tls+tcp": what resolved addresses are dialed with */
	bool dns;
	char host[SUB_URL_MAX];
	char port[16];
} url;

/* One resolution's addresses, as dialed. */
typedef struct resolved {
	size_t url;
	size_t n;
	char addr[SUB_MAX_ADDRS][SUB_URL_MAX];
} resolved;

struct sub {
	struct event_base *base;
	nng_socket sock;
	bool sock_open;
	struct event *ev;
	sub_fn fn;
	void *arg;
	url *urls;
	size_t n;
	slot *slots;         /* n * SUB_MAX_ADDRS */
	st_resolver *res;    /* owned; NULL: no DNS URL */
	st_mailbox *pipe_mb; /* owned: pipe changes of DNS URLs, nng threads -> loop */
	bool closing;        /* sub_free has begun: changes still delivered are ignored */
	bool paused;
	int recv_fd; /* NNG_OPT_RECVFD: readable while a message is queued; never read */

	atomic_ullong received;
	atomic_ullong errors;
	/*
	 * on_recv is taking messages out of nng and handing them to the
	 * callback: one in hand is as good as one waiting (sub_msg_waiting),
	 * or a reader that polls between the take and the callback's own
	 * record of it would see neither.
	 */
	atomic_bool in_hand;
};

static bool
ip_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* Splits tcp://HOST:PORT or tls+tcp://HOST:PORT; a URL of another scheme, or with an IP literal, is dialed as is. */
static st_err
url_parse(const char *text, url *u)
{
	const char *rest, *colon, *host_end;
	size_t hl;

	if (strlen(text) >= SUB_URL_MAX || text[0] == 0)
		return ST_EINVAL;
	memset(u, 0, sizeof(*u));
	strcpy(u->text, text);
	if (strncmp(text, "tcp://", 6) == 0) {
		strcpy(u->scheme, "tcp");
		rest = text + 6;
	} else if (strncmp(text, "tls+tcp://", 10) == 0) {
		strcpy(u->scheme, "tls+tcp");
		rest = text + 10;
	} else {
		return strstr(text, "://") ? ST_OK : ST_EINVAL;
	}
	if (rest[0] == '[') {
		host_end = strchr(rest, ']');
		if (host_end == NULL || host_end[1] != ':')
			return ST_EINVAL;
		rest++;
		colon = host_end + 1;
	} else {
		colon = strrchr(rest, ':');
		if (colon == NULL)
			return ST_EINVAL;
		host_end = colon;
	}
	hl = (size_t)(host_end - rest);
	if (hl == 0 || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(u->port))
		return ST_EINVAL;
	memcpy(u->host, rest, hl);
	u->host[hl] = 0;
	strcpy(u->port, colon + 1);
	u->dns = !ip_literal(u->host);
	return ST_OK;
}

/* nng thread.  Touches only atomics and the mailbox (urls, n and pipe_mb are set before any dial). */
static void
pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	sub *s = arg;
	int id = nng_dialer_id(nng_pipe_dialer(p));

	if (id <= 0)
		return;
	for (size_t i = 0; i < s->n * SUB_MAX_ADDRS; i++) {
		slot *sl = &s->slots[i];
		url *u = &s->urls[i / SUB_MAX_ADDRS];

		if (atomic_load(&sl->dialer_id) != (uint32_t)id)
			continue;
		if (ev == NNG_PIPE_EV_ADD_POST)
			atomic_fetch_add(&sl->pipes, 1);
		else if (ev == NNG_PIPE_EV_REM_POST && atomic_load(&sl->pipes) > 0)
			atomic_fetch_sub(&sl->pipes, 1);
		/* One post per URL queued at most: the loop clears the flag before it looks. */
		if (u->dns && !atomic_exchange(&u->posted, true))
			st_mailbox_post(s->pipe_mb, u);
		return;
	}
}

/* Addresses dialed for URL u, and those of them with a pipe up.  Loop thread. */
static void
url_count(const sub *s, const url *u, unsigned *dialed, unsigned *up)
{
	size_t ui = (size_t)(u - s->urls);

	*dialed = *up = 0;
	for (size_t k = 0; k < SUB_MAX_ADDRS; k++) {
		slot *sl = &s->slots[ui * SUB_MAX_ADDRS + k];

		if (atomic_load(&sl->dialer_id) == 0)
			continue;
		(*dialed)++;
		*up += atomic_load(&sl->pipes) > 0;
	}
}

static void
arm(url *u, unsigned ms)
{
	struct timeval tv = st_timeval_ms(ms);

	u->due_ms = st_clock_now(st_clock_system()) + ms;
	if (event_add(u->ev_timer, &tv) != 0)
		st_error("sub: %s: cannot arm the resolution timer", u->host);
}

/* After a lookup (done, failed or not started): when the next one goes.  Loop thread. */
static void
arm_next(sub *s, url *u)
{
	unsigned dialed, up;

	url_count(s, u, &dialed, &up);
	arm(u, reresolve_next_ms(&u->backoff, dialed, up, SUB_RERESOLVE_MIN_MS, SUB_RESOLVE_MS));
}

/* false when the address cannot be dialed at all (bad URL, unknown scheme). */
static bool
dial(sub *s, size_t ui, const char *addr)
{
	slot *base = &s->slots[ui * SUB_MAX_ADDRS];
	slot *sl = NULL;
	int rv;

	for (size_t k = 0; k < SUB_MAX_ADDRS && sl == NULL; k++)
		if (atomic_load(&base[k].dialer_id) == 0)
			sl = &base[k];
	if (sl == NULL) {
		st_warn("sub: %s: more than %u addresses, %s not dialed", s->urls[ui].text, SUB_MAX_ADDRS, addr);
		return true;
	}
	/* A resolved address keeps the name the certificate must carry (tls+tcp). */
	if ((rv = st_tls_dialer_create(&sl->d, s->sock, addr, s->urls[ui].host[0] ? s->urls[ui].host : NULL)) != 0) {
		st_warn("sub: %s: %s", addr, nng_strerror(rv));
		return false;
	}
	atomic_store(&sl->pipes, 0);
	atomic_store(&sl->dialer_id, (uint32_t)nng_dialer_id(sl->d));
	if ((rv = nng_dialer_start(sl->d, NNG_FLAG_NONBLOCK)) != 0) {
		st_warn("sub: %s: %s", addr, nng_strerror(rv));
		atomic_store(&sl->dialer_id, 0);
		nng_dialer_close(sl->d);
		return false;
	}
	snprintf(sl->addr, sizeof(sl->addr), "%s", addr);
	st_info("sub: dialing %s", addr);
	return true;
}

static void
undial(slot *sl)
{
	st_info("sub: closing %s (no longer resolved)", sl->addr);
	atomic_store(&sl->dialer_id, 0);
	atomic_store(&sl->pipes, 0);
	nng_dialer_close(sl->d);
	sl->addr[0] = 0;
}

/* The loop: dial what is new, close what vanished. */
static void
apply_resolved(sub *s, const resolved *r)
{
	slot *base = &s->slots[r->url * SUB_MAX_ADDRS];

	for (size_t k = 0; k < SUB_MAX_ADDRS; k++) {
		bool keep = false;
		if (atomic_load(&base[k].dialer_id) == 0)
			continue;
		for (size_t i = 0; i < r->n && !keep; i++)
			keep = strcmp(base[k].addr, r->addr[i]) == 0;
		if (!keep)
			undial(&base[k]);
	}
	for (size_t i = 0; i < r->n; i++) {
		bool have = false;
		for (size_t k = 0; k < SUB_MAX_ADDRS && !have; k++)
			have = atomic_load(&base[k].dialer_id) != 0 && strcmp(base[k].addr, r->addr[i]) == 0;
		if (!have)
			(void)dial(s, r->url, r->addr[i]);
	}
}

static int
addr_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* st_resolve's answer for one URL's host (addrs[0]: numeric addresses, comma-separated).  Loop thread. */
static void
on_lookup(void *arg, const char *const *addrs, size_t n, const char *err)
{
	url *u = arg;
	sub *s = u->owner;
	resolved *r;
	const char *p;

	u->lookup = NULL;
	if (err != NULL || n != 1) {
		st_warn("sub: resolving %s: %s", u->host, err ? err : "no answer");
		arm_next(s, u);
		return;
	}
	r = st_xcalloc(1, sizeof(*r));
	r->url = (size_t)(u - s->urls);
	for (p = addrs[0]; *p != 0 && r->n < SUB_MAX_ADDRS;) {
		size_t l = strcspn(p, ",");

		if (l > 0 && memchr(p, ':', l) != NULL) /* IPv6 */
			snprintf(r->addr[r->n++], SUB_URL_MAX, "%s://[%.*s]:%s", u->scheme, (int)l, p, u->port);
		else if (l > 0)
			snprintf(r->addr[r->n++], SUB_URL_MAX, "%s://%.*s:%s", u->scheme, (int)l, p, u->port);
		p += l + (p[l] == ',');
	}
	/* Sorted and unique, so a new answer in another order changes nothing. */
	qsort(r->addr, r->n, SUB_URL_MAX, addr_cmp);
	size_t w = 0;
	for (size_t i = 0; i < r->n; i++)
		if (w == 0 || strcmp(r->addr[w - 1], r->addr[i]) != 0)
			memmove(r->addr[w++], r->addr[i], SUB_URL_MAX);
	r->n = w;
	if (r->n > 0)
		apply_resolved(s, r);
	free(r);
	arm_next(s, u);
}

/* Starts a lookup for URL u unless one is out (its answer arms the timer).  Loop thread. */
static void
resolve_url(sub *s, url *u)
{
	const char *name = u->host;
	st_err err;

	if (u->lookup != NULL)
		return;
	if ((err = st_resolver_lookup(s->res, &name, 1, on_lookup, u, &u->lookup)) != ST_OK) {
		u->lookup = NULL;
		st_warn("sub: resolving %s: %s; trying again later", u->host, st_err_str(err));
		arm_next(s, u);
	}
}

static void
resolve_cb(evutil_socket_t fd, short what, void *arg)
{
	url *u = arg;

	(void)fd;
	(void)what;
	resolve_url(u->owner, u);
}

/*
 * The mailbox: a pipe of URL item came or went.  Unless a lookup is out
 * (its answer arms the timer by the same rule), reresolve says whether to
 * look again soon; a lookup due sooner is not put off, so pipes that come
 * and go faster than SUB_RERESOLVE_MIN_MS cannot starve the lookups.  item
 * is the sub's, not owned.  Loop thread.
 */
static void
on_pipe_change(void *item, void *arg)
{
	url *u = item;
	sub *s = arg;
	uint64_t now;
	unsigned ms, dialed, up;

	if (s->closing)
		return;
	atomic_store(&u->posted, false);
	if (u->lookup != NULL)
		return;
	url_count(s, u, &dialed, &up);
	if ((ms = reresolve_pipe_ms(&u->backoff, dialed, up, SUB_RERESOLVE_MIN_MS, SUB_RESOLVE_MS)) == 0)
		return;
	now = st_clock_now(st_clock_system());
	if (event_pending(u->ev_timer, EV_TIMEOUT, NULL) && u->due_ms <= now + ms)
		return;
	st_info("sub: a pipe to %s went away; resolving it again in %u ms", u->host, ms);
	arm(u, ms);
}

static void
on_recv(evutil_socket_t fd, short what, void *arg)
{
	sub *s = arg;
	unsigned n;

	(void)fd;
	(void)what;
	atomic_store(&s->in_hand, true); /* before the take: see sub_msg_waiting */
	for (n = 0; n < SUB_BATCH; n++) {
		nng_msg *m;
		int rv = nng_recvmsg(s->sock, &m, NNG_FLAG_NONBLOCK);
		if (rv == NNG_EAGAIN)
			goto out;
		if (rv != 0) {
			atomic_fetch_add(&s->errors, 1);
			if (rv != NNG_ECLOSED)
				st_warn("sub: receive: %s", nng_strerror(rv));
			goto out;
		}
		atomic_fetch_add(&s->received, 1);
		s->fn(s->arg, nng_msg_body(m), nng_msg_len(m));
		nng_msg_free(m);
		if (s->paused)
			goto out; /* the callback asked for flow control */
	}
	/*
	 * More may be queued.  The descriptor is level-triggered, so the next
	 * loop turn reports it again, after the sockets had their writes; an
	 * event_active here would run us again before them.
	 */
out:
	atomic_store(&s->in_hand, false); /* after the callback recorded what it read */
}

st_err
sub_new(struct event_base *base, const char *const *urls, size_t n, sub_fn fn, void *arg, sub **out)
{
	sub *s;
	int rv, fd;
	bool any_dns = false;
	st_err err = ST_ESYS;

	if (n == 0 || n > SUB_MAX_URLS)
		return ST_EINVAL;
	s = st_xcalloc(1, sizeof(*s));
	s->base = base;
	s->fn = fn;
	s->arg = arg;
	s->n = n;
	s->urls = st_xcalloc(n, sizeof(url));
	s->slots = st_xcalloc(n * SUB_MAX_ADDRS, sizeof(slot));
	for (size_t i = 0; i < n; i++) {
		if (url_parse(urls[i], &s->urls[i]) != ST_OK) {
			st_error("sub: bad writer URL: %s", urls[i]);
			err = ST_EINVAL;
			goto fail;
		}
		s->urls[i].owner = s;
		any_dns |= s->urls[i].dns;
	}
	if ((rv = nng_sub0_open(&s->sock)) != 0)
		goto nng_fail;
	s->sock_open = true;
	if ((rv = nng_socket_set(s->sock, NNG_OPT_SUB_SUBSCRIBE, "", 0)) != 0 ||
	    (rv = nng_socket_set_int(s->sock, NNG_OPT_RECVBUF, SUB_RECVBUF)) != 0 ||
	    (rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_PUB)) != 0 ||
	    (rv = nng_socket_set_ms(s->sock, NNG_OPT_RECONNMINT, 100)) != 0 ||
	    (rv = nng_socket_set_ms(s->sock, NNG_OPT_RECONNMAXT, 5000)) != 0 ||
	    (rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, s)) != 0 ||
	    (rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_cb, s)) != 0 ||
	    (rv = nng_socket_get_int(s->sock, NNG_OPT_RECVFD, &fd)) != 0)
		goto nng_fail;
	s->recv_fd = fd;
	s->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_recv, s);
	if (s->ev == NULL || event_add(s->ev, NULL) != 0 ||
	    (s->pipe_mb = st_mailbox_new(base, on_pipe_change, s)) == NULL) {
		st_error("sub: libevent failed");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		if (!s->urls[i].dns && !dial(s, i, s->urls[i].text)) {
			err = ST_EINVAL;
			goto fail;
		}
	}
	if (any_dns) {
		if (st_resolver_new(base, &s->res) != ST_OK)
			goto resolve_fail;
		st_resolver_set_max_addrs(s->res, SUB_MAX_ADDRS);
		for (size_t i = 0; i < n; i++)
			if (s->urls[i].dns &&
			    (s->urls[i].ev_timer = event_new(base, -1, 0, resolve_cb, &s->urls[i])) == NULL)
				goto resolve_fail;
		for (size_t i = 0; i < n; i++)
			if (s->urls[i].dns)
				resolve_url(s, &s->urls[i]);
	}
	*out = s;
	return ST_OK;
resolve_fail:
	st_error("sub: cannot set up name resolution");
	goto fail;
nng_fail:
	st_error("sub: nng: %s", nng_strerror(rv));
fail:
	sub_free(s);
	return err;
}

void
sub_free(sub *s)
{
	if (s == NULL)
		return;
	s->closing = true;
	/* Lookups still out are discarded, not waited for: their threads end by themselves. */
	st_resolver_free(s->res);
	for (size_t i = 0; i < s->n; i++)
		if (s->urls[i].ev_timer != NULL)
			event_free(s->urls[i].ev_timer);
	if (s->ev != NULL)
		event_free(s->ev);
	if (s->sock_open)
		nng_close(s->sock); /* closes every dialer; no pipe notification runs after it */
	/* After nng_close: the notifications post here until then.  What is
	 * still queued goes to on_pipe_change, which ignores it. */
	st_mailbox_free(s->pipe_mb);
	free(s->slots);
	free(s->urls);
	free(s);
}

size_t
sub_url_pipes(const sub *s, size_t i)
{
	size_t n = 0;

	if (i >= s->n)
		return 0;
	for (size_t k = 0; k < SUB_MAX_ADDRS; k++) {
		slot *sl = &s->slots[i * SUB_MAX_ADDRS + k];
		if (atomic_load(&sl->dialer_id) != 0)
			n += (size_t)atomic_load(&sl->pipes);
	}
	return n;
}

void
sub_pause(sub *s, bool paused)
{
	if (s->paused == paused || s->ev == NULL)
		return;
	s->paused = paused;
	if (paused)
		event_del(s->ev);
	else
		event_add(s->ev, NULL);
}

bool
sub_paused(const sub *s)
{
	return s->paused;
}

bool
sub_msg_waiting(const sub *s)
{
	struct pollfd p = { .fd = s->recv_fd, .events = POLLIN };

	if (s->ev == NULL)
		return false;
	/* The descriptor first: a message taken after the poll is in hand by the time we look at the flag. */
	if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0)
		return true;
	return atomic_load(&((sub *)s)->in_hand);
}

size_t
sub_pipes(const sub *s)
{
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++)
		n += sub_url_pipes(s, i);
	return n;
}

unsigned long long
sub_received(const sub *s)
{
	return atomic_load(&((sub *)s)->received);
}
