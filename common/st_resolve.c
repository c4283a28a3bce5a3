/*
 * st_resolve: one detached thread per lookup, answers through a mailbox.
 *
 * Ownership.  A request is created on the loop and handed whole to its
 * thread by pthread_create; the thread writes only the answer fields, then
 * hands it back by posting it to the mailbox (the mailbox's mutex orders
 * the writes before the loop reads them).  The loop writes only
 * `cancelled`, which the thread never reads, and frees the request when
 * the mailbox delivers it.
 *
 * Freeing while threads run.  The resolver's shared part (hub: mutex,
 * closed flag, mailbox, reference count) outlives both sides: every thread
 * holds a reference, and posts only while the hub is open, under its
 * mutex.  st_resolver_free closes the hub, frees the mailbox (whatever was
 * posted before is discarded), and drops the loop's reference; the last
 * thread to finish frees the hub.  So no one ever waits for a slow DNS
 * answer, not even at exit.
 */
#include "st_resolve.h"

#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "st_mailbox.h"
#include "st_util.h"

#define ADDR_TEXT 64 /* INET6_ADDRSTRLEN plus a comma, rounded up */

typedef struct hub {
	pthread_mutex_t mu;
	bool closed;       /* loop: resolver freed, no more posts */
	unsigned refs;     /* the loop's one + one per running thread */
	unsigned inflight; /* running threads */
	st_mailbox *mb;
} hub;

struct st_resolver {
	hub *h;
	size_t max_addrs; /* distinct addresses kept per name */
};

struct st_resolve_req {
	hub *h;
	st_resolve_fn fn;
	void *arg;
	bool cancelled; /* loop only */
	size_t n;
	size_t max_addrs;                  /* set before the thread starts */
	char *names[ST_RESOLVE_MAX_NAMES]; /* thread reads, loop frees */
	char *addrs[ST_RESOLVE_MAX_NAMES]; /* thread writes */
	char err[160];                     /* thread writes */
};

static void
req_free(st_resolve_req *q)
{
	for (size_t i = 0; i < q->n; i++) {
		free(q->names[i]);
		free(q->addrs[i]);
	}
	free(q);
}

static void
hub_unref(hub *h)
{
	bool last;

	pthread_mutex_lock(&h->mu);
	last = --h->refs == 0;
	pthread_mutex_unlock(&h->mu);
	if (last) {
		pthread_mutex_destroy(&h->mu);
		free(h);
	}
}

/* Loop thread, from the mailbox. */
static void
on_answer(void *item, void *arg)
{
	st_resolve_req *q = item;
	hub *h = arg;
	const char *addrs[ST_RESOLVE_MAX_NAMES];
	bool any = false;

	if (!h->closed && !q->cancelled) {
		for (size_t i = 0; i < q->n; i++) {
			addrs[i] = q->addrs[i] != NULL ? q->addrs[i] : "";
			any = any || addrs[i][0] != '\0';
		}
		q->fn(q->arg, addrs, q->n, any ? NULL : q->err);
	}
	req_free(q);
}

/* Resolves one name into a comma-separated list of distinct numeric addresses. */
static char *
resolve_one(const char *name, size_t max, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char *out;
	size_t len = 0, n = 0;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(name, NULL, &hints, &res)) != 0) {
		if (err[0] == '\0')
			snprintf(err, errlen, "cannot resolve %s: %s", name, gai_strerror(rc));
		return NULL;
	}
	out = st_xcalloc(max, ADDR_TEXT);
	for (struct addrinfo *ai = res; ai != NULL && n < max; ai = ai->ai_next) {
		char text[ADDR_TEXT];

		if (getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		/* the same address may come once per protocol or twice from /etc/hosts */
		bool seen = false;
		for (const char *p = out; *p != '\0' && !seen;) {
			size_t l = strcspn(p, ",");
			seen = l == strlen(text) && memcmp(p, text, l) == 0;
			p += l + (p[l] == ',');
		}
		if (seen)
			continue;
		len += (size_t)snprintf(out + len, max * ADDR_TEXT - len, "%s%s", n ? "," : "", text);
		n++;
	}
	freeaddrinfo(res);
	if (n == 0) {
		if (err[0] == '\0')
			snprintf(err, errlen, "cannot resolve %s: no usable address", name);
		free(out);
		return NULL;
	}
	return out;
}

static void *
lookup_thread(void *arg)
{
	st_resolve_req *q = arg;
	hub *h = q->h;

	for (size_t i = 0; i < q->n; i++)
		q->addrs[i] = resolve_one(q->names[i], q->max_addrs, q->err, sizeof(q->err));
	pthread_mutex_lock(&h->mu);
	h->inflight--;
	if (!h->closed) {
		st_mailbox_post(h->mb, q);
		q = NULL;
	}
	pthread_mutex_unlock(&h->mu);
	if (q != NULL)
		req_free(q);
	hub_unref(h);
	return NULL;
}

st_err
st_resolver_new(struct event_base *base, st_resolver **out)
{
	st_resolver *r = st_xcalloc(1, sizeof(*r));
	hub *h = st_xcalloc(1, sizeof(*h));

	pthread_mutex_init(&h->mu, NULL);
	h->refs = 1;
	if ((h->mb = st_mailbox_new(base, on_answer, h)) == NULL) {
		pthread_mutex_destroy(&h->mu);
		free(h);
		free(r);
		return ST_ESYS;
	}
	r->h = h;
	r->max_addrs = ST_RESOLVE_MAX_ADDRS;
	*out = r;
	return ST_OK;
}

void
st_resolver_set_max_addrs(st_resolver *r, size_t n)
{
	r->max_addrs = ST_MAX(1u, ST_MIN(n, ST_RESOLVE_ADDRS_CAP));
}

void
st_resolver_free(st_resolver *r)
{
	hub *h;

	if (r == NULL)
		return;
	h = r->h;
	pthread_mutex_lock(&h->mu);
	h->closed = true;
	pthread_mutex_unlock(&h->mu);
	/* answers posted before closing are discarded by on_answer (closed) */
	st_mailbox_free(h->mb);
	h->mb = NULL;
	hub_unref(h);
	free(r);
}

st_err
st_resolver_lookup(st_resolver *r, const char *const *names, size_t n, st_resolve_fn fn, void *arg,
		   st_resolve_req **out)
{
	hub *h = r->h;
	st_resolve_req *q;
	pthread_attr_t attr;
	pthread_t tid;
	int rc;

	if (n == 0 || n > ST_RESOLVE_MAX_NAMES)
		return ST_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (names[i] == NULL || names[i][0] == '\0')
			return ST_EINVAL;
	pthread_mutex_lock(&h->mu);
	if (h->inflight >= ST_RESOLVE_MAX_INFLIGHT) {
		pthread_mutex_unlock(&h->mu);
		return ST_EBUSY;
	}
	h->inflight++;
	h->refs++;
	pthread_mutex_unlock(&h->mu);

	q = st_xcalloc(1, sizeof(*q));
	q->h = h;
	q->fn = fn;
	q->arg = arg;
	q->n = n;
	q->max_addrs = r->max_addrs;
	for (size_t i = 0; i < n; i++)
		q->names[i] = st_xstrdup(names[i]);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&tid, &attr, lookup_thread, q);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		req_free(q);
		pthread_mutex_lock(&h->mu);
		h->inflight--;
		pthread_mutex_unlock(&h->mu);
		hub_unref(h);
		return ST_ESYS;
	}
	*out = q;
	return ST_OK;
}

void
st_resolve_cancel(st_resolve_req *q)
{
	if (q != NULL)
		q->cancelled = true;
}
