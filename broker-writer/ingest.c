/*
 * ingest: a raw rep0 socket, INGEST_RECEIVERS receive aios and n_works work
 * slots.
 *
 * Over 800 lines because the connection rules (pipe notification, the
 * deadline sweep: section "pipes") share the socket, the clock and the
 * receivers' request marks with the request path; their state lives in
 * conntab.c and prepipe.c, only the nng glue is here.  Split that glue into
 * its own module before this file grows further.
 *
 * Why raw: a cooked rep0 context hands over the body only; the REQ request
 * id stays in rep0's private backtrace.  Without it a resend over a new
 * connection looks like a new request, and two requests with identical
 * bytes on one connection look like one.  In raw mode the header (our pipe
 * id, any device hops, then the request id) comes with every message and
 * goes back, unchanged, on its reply; that is all cooked rep0 does with it.
 *
 * Receivers (state machine RECV -> [SEND] -> RECV): a receiver takes a
 * message, decides (ingest.h steps 1-5) and either hands it to a work slot
 * and receives again at once, or answers it itself (invalid, busy,
 * unavailable, a stored reply) with its own aio and receives after that
 * send.  Work slots (FREE -> WAIT -> SEND -> FREE): WAIT while the loop owns
 * the request, SEND while the reply goes into nng; the budget charge is
 * released and the slot freed when that send completes.
 *
 * The mutex `mu` guards the reqcache, the free slots and every slot's
 * reply route (hdr): a resend re-routes a pending reply under it, and the
 * reply takes its route under it.  The budget is one atomic counter: a
 * charge is a compare-and-swap loop that never goes past INGEST_BUDGET.
 *
 * Pipes: nng_pipe_notify keeps the connection table (conntab.h) under
 * its own mutex `pmu`: ADD_PRE admits a connection, or closes it before the
 * socket reads anything from it (caps), or closes the silent one it
 * displaces; REM_POST removes it (a pipe closed in ADD_PRE still gets
 * REM_POST: not in the table, ignored).  A receiver marks a connection
 * when a request from it arrives (msg's pipe); a sleep aio sweeps every
 * SWEEP_MS and closes connections that completed no request within the
 * idle deadline, then lets prepipe (prepipe.h) shut down the connections
 * that are not pipes yet (SP header, TLS handshake) 10 s after it first
 * saw them.  nng_pipe_close is called outside pmu; the callbacks never
 * touch the socket (nng 1.5 runs them without its locks held).
 *
 * Teardown stops every aio first (nng_aio_stop: the outstanding operation
 * is cancelled, the callback waited for, and any later nng_recv_aio /
 * nng_sleep_aio on it does nothing), then closes the socket, then frees the
 * mailbox with `closing` set, so items it still holds are ignored: their
 * slots are freed from the slots array.  Not the other way round: a
 * receiver whose callback had read `closing` false just before could post
 * its next receive after nng_close had cancelled the socket's queue, and
 * nng 1.5.2 queues it anyway, so that aio kept a cancel function into the
 * freed socket and nng_aio_stop then panicked (ingest_test caught it, ~1 run
 * in 200 on a busy machine).
 */
#include "ingest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "conntab.h"
#include "prepipe.h"
#include "reqcache.h"
#include "st_auth_store.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_log.h"
#include "st_mailbox.h"
#include "st_tls.h"
#include "st_util.h"

/* our pipe id + the REQ backtrace (its last word is the request id) */
#define HDR_MAX (4u + INGEST_BACKTRACE_MAX)
/* how often the deadlines are checked: a silent connection goes 10 to 11 s after it arrived */
#define SWEEP_MS 1000

enum work_state { W_FREE, W_WAIT, W_SEND };
enum rcv_state { R_RECV, R_SEND };

typedef struct ingest_work ingest_work;

struct ingest_work {
	ingest_origin origin; /* first: the loop's handle on this slot */
	ingest *in;
	nng_aio *aio;
	enum work_state st;
	nng_msg *msg; /* the request message (WAIT), keeps req's strings alive */
	proto_request *req;
	size_t charge; /* bytes charged to the budget */
	reqcache_key key;
	unsigned char hdr[HDR_MAX]; /* under in->mu: where the reply goes (the latest copy's route) */
	size_t hdr_len;
	ingest_work *next_free;
};

typedef struct rcv {
	ingest *in;
	nng_aio *aio;
	enum rcv_state st;
} rcv;

struct ingest {
	nng_socket sock;
	bool open;
	st_mailbox *mb;
	rcv rcvs[INGEST_RECEIVERS];
	/*
	 * Receivers waiting in nng for a message, and when that count last
	 * left 0: while it is 0 a whole request can wait in nng with no byte
	 * arriving, so the idle deadline does not count (conntab_expired).
	 */
	atomic_uint rcv_waiting;
	_Atomic uint64_t behind_at;
	ingest_work *works;
	size_t n_works;
	st_counter *invalid;
	ingest_request_fn fn;
	void *arg;
	const st_clock *clock;
	atomic_bool closing;
	pthread_mutex_t mu; /* cache, free list, works' hdr */
	reqcache *cache;
	ingest_work *free_works;
	atomic_size_t budget; /* bytes charged */
	pthread_mutex_t pmu;  /* conns and the connection metrics below */
	conntab *conns;       /* owned */
	nng_aio *sweep;       /* owned: the idle-deadline sweep (a sleep loop) */
	prepipe *pre;         /* owned: connections not yet pipes; NULL on ipc:// and port 0 */
	uint64_t idle_ms;
	bool warned_global, warned_addr;
	st_counter *refused_global, *refused_addr, *closed_idle, *displaced, *closed_handshake; /* may be NULL */
	st_gauge *open_conns;                                                                   /* may be NULL */
	_Atomic(const char *) refuse;          /* set by the loop: answer "unavailable" with this detail */
	st_counter *refused, *refused_unavail; /* refusals answered by the receivers */
	st_auth_store *auth;                   /* NULL: no producer credentials checked; borrowed */
	st_counter *unauthorized, *forbidden;
};

static void work_ok(ingest_origin *o, const uint64_t *seqs, size_t n);
static void work_err(ingest_origin *o, const char *code, const char *detail);

/* ---------------------------------------------------------------- budget */

static bool
charge(ingest *in, size_t n)
{
	size_t cur = atomic_load(&in->budget);

	do {
		if (n > INGEST_BUDGET || cur > INGEST_BUDGET - n)
			return false;
	} while (!atomic_compare_exchange_weak(&in->budget, &cur, cur + n));
	return true;
}

static void
release(ingest *in, size_t n)
{
	atomic_fetch_sub(&in->budget, n);
}

size_t
ingest_inflight_bytes(const ingest *in)
{
	return atomic_load(&((ingest *)in)->budget);
}

bool
ingest_budget_charge(ingest *in, size_t n)
{
	return charge(in, n);
}

void
ingest_budget_release(ingest *in, size_t n)
{
	release(in, n);
}

const char *
ingest_refusal(const ingest *in)
{
	return atomic_load(&((ingest *)in)->refuse);
}

/* ---------------------------------------------------------------- replies */

/* A reply message to the route hdr[0..hdr_len); NULL when out of memory (logged). */
static nng_msg *
reply_msg(const unsigned char *hdr, size_t hdr_len, const void *body, size_t len)
{
	nng_msg *m = NULL;
	int rv;

	if ((rv = nng_msg_alloc(&m, len)) != 0 || (rv = nng_msg_header_append(m, hdr, hdr_len)) != 0) {
		if (m != NULL)
			nng_msg_free(m);
		st_warn("ingest: reply dropped: %s", nng_strerror(rv));
		return NULL;
	}
	if (len)
		memcpy(nng_msg_body(m), body, len);
	return m;
}

static nng_msg *
reply_err_msg(const unsigned char *hdr, size_t hdr_len, const char *code, const char *detail)
{
	st_buf b;
	nng_msg *m;

	st_buf_init(&b);
	proto_reply_err_encode(&b, code, detail);
	m = reply_msg(hdr, hdr_len, b.p, b.len);
	st_buf_fini(&b);
	return m;
}

/* ---------------------------------------------------------------- receiving */

static void
count(st_counter *c)
{
	if (c != NULL)
		st_counter_inc(c);
}

static uint32_t
be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static ingest_work *
take_free(ingest *in)
{
	ingest_work *w = in->free_works;

	if (w != NULL) {
		in->free_works = w->next_free;
		w->next_free = NULL;
	}
	return w;
}

static void
put_free(ingest *in, ingest_work *w)
{
	w->st = W_FREE;
	w->next_free = in->free_works;
	in->free_works = w;
}

/*
 * Under in->mu: what the cache says about k.  A resend of a pending request
 * re-routes its reply here (*reply stays NULL: nothing to send now); a
 * resend of an answered one gets the stored reply on this route.
 */
static reqcache_state
resend_locked(ingest *in, const reqcache_key *k, const unsigned char *hdr, size_t hdr_len, uint64_t now,
	      nng_msg **reply)
{
	void *owner = NULL;
	const void *stored = NULL;
	size_t stored_len = 0;
	reqcache_state st = reqcache_find(in->cache, k, now, &owner, &stored, &stored_len);

	*reply = NULL;
	if (st == REQCACHE_PENDING) {
		ingest_work *o = owner;
		memcpy(o->hdr, hdr, hdr_len);
		o->hdr_len = hdr_len;
	} else if (st == REQCACHE_ANSWERED) {
		*reply = reply_msg(hdr, hdr_len, stored, stored_len);
	}
	return st;
}

/*
 * --ingest-keys: the request map's token, verified on this receiver's nng
 * thread against the store's current keys (reference counted, so a reload
 * never frees keys under a check).  Read without decoding the events, so an
 * unauthenticated request is refused before any memory is reserved for it.
 * NULL and *grant (owned by the caller) when it passes; else the reply.
 */
static nng_msg *
auth_check(ingest *in, nng_msg *m, const unsigned char *hdr, size_t hdr_len, st_auth_grant **grant)
{
	proto_str tok;
	const char *why = "no token";
	char detail[160];
	enum st_auth_result r = ST_AUTH_MISSING;

	*grant = NULL;
	if (proto_request_token_peek(nng_msg_body(m), nng_msg_len(m), &tok))
		r = st_auth_store_verify(in->auth, tok.p, tok.len, grant, &why);
	if (r == ST_AUTH_OK)
		return NULL;
	count(in->unauthorized);
	if (r == ST_AUTH_MISSING)
		snprintf(detail, sizeof(detail), "%s",
			 "a producer token is required: {\"token\": JWT, \"events\": [...]}");
	else
		snprintf(detail, sizeof(detail), "token %s: %s", st_auth_result_name(r), why);
	return reply_err_msg(hdr, hdr_len, "unauthorized", detail);
}

size_t
ingest_grant_uncovered(const st_auth_grant *g, const proto_request *req)
{
	size_t n = proto_request_count(req);

	for (size_t i = 0; i < n; i++) {
		const proto_event *ev = proto_request_event(req, i);

		if (!st_auth_grant_covers(g, ev->topic.p, ev->topic.len))
			return i;
	}
	return n;
}

void
ingest_forbidden_detail(const proto_request *req, size_t i, char *detail, size_t cap)
{
	const proto_event *ev = proto_request_event(req, i);

	snprintf(detail, cap, "event %zu: topic \"%.*s\" is not in the token's publish claim", i, (int)ev->topic.len,
		 ev->topic.p);
}

/*
 * Decides about the request m (owned; consumed).  Returns the reply the
 * receiver must send itself, or NULL: nothing to send (a pending resend, or
 * the request went to the loop).
 */
static nng_msg *
receive(ingest *in, nng_msg *m)
{
	size_t hdr_len = nng_msg_header_len(m), len = nng_msg_len(m), need;
	unsigned char hdr[HDR_MAX];
	reqcache_key k;
	nng_msg *reply = NULL;
	ingest_work *w = NULL;
	const char *why;
	char detail[256];
	uint64_t now;
	bool maybe;
	reqcache_state st;
	st_auth_grant *grant = NULL;
	size_t bad = 0;

	if (hdr_len < 8 || hdr_len > HDR_MAX || hdr_len % 4 != 0) {
		nng_msg_free(m); /* raw rep0 never gives this; nothing to answer to */
		return NULL;
	}
	memcpy(hdr, nng_msg_header(m), hdr_len);
	/* a whole request arrived: the connection is past its idle deadline for good */
	pthread_mutex_lock(&in->pmu);
	conntab_seen(in->conns, (uint32_t)nng_pipe_id(nng_msg_get_pipe(m)));
	pthread_mutex_unlock(&in->pmu);
	if (len > PROTO_MAX_REQUEST) {
		/* never accepted, so never pending: no lookup; not decoded either */
		nng_msg_free(m);
		count(in->invalid);
		snprintf(detail, sizeof(detail), "request too large (%zu bytes, max %u)", len, PROTO_MAX_REQUEST);
		return reply_err_msg(hdr, hdr_len, "invalid", detail);
	}
	k.id = be32(hdr + hdr_len - 4);
	k.len = (uint32_t)len;
	k.hash = 0;

	/*
	 * A resend must be recognised before any refusal: answering a resend
	 * of a pending request "busy" or "unavailable" would make its producer
	 * retry a request that is about to be stored.  The body is hashed only
	 * when its id and length are known already.
	 */
	now = st_clock_now(in->clock);
	pthread_mutex_lock(&in->mu);
	maybe = reqcache_maybe(in->cache, k.id, len, now);
	pthread_mutex_unlock(&in->mu);
	if (maybe) {
		k.hash = st_hash_bytes(nng_msg_body(m), len);
		pthread_mutex_lock(&in->mu);
		st = resend_locked(in, &k, hdr, hdr_len, now, &reply);
		pthread_mutex_unlock(&in->mu);
		if (st != REQCACHE_NEW) {
			nng_msg_free(m);
			return reply;
		}
	}

	if ((why = atomic_load(&in->refuse)) != NULL) {
		nng_msg_free(m);
		count(in->refused_unavail);
		return reply_err_msg(hdr, hdr_len, "unavailable", why);
	}
	if (in->auth != NULL && (reply = auth_check(in, m, hdr, hdr_len, &grant)) != NULL) {
		nng_msg_free(m);
		return reply;
	}
	/* the budget, before anything is decoded */
	need = proto_request_bytes_max(len) + INGEST_MSG_OVERHEAD;
	if (!charge(in, need)) {
		st_auth_grant_free(grant);
		nng_msg_free(m);
		count(in->refused);
		return reply_err_msg(hdr, hdr_len, "busy", "the writer's in-flight memory is full; retry later");
	}
	if (!maybe)
		k.hash = st_hash_bytes(nng_msg_body(m), len);
	pthread_mutex_lock(&in->mu);
	/* another receiver may have taken the same request meanwhile */
	st = resend_locked(in, &k, hdr, hdr_len, now, &reply);
	if (st == REQCACHE_NEW && (w = take_free(in)) != NULL) {
		w->key = k;
		memcpy(w->hdr, hdr, hdr_len);
		w->hdr_len = hdr_len;
		reqcache_add(in->cache, &k, w);
	}
	pthread_mutex_unlock(&in->mu);
	if (st != REQCACHE_NEW || w == NULL) {
		st_auth_grant_free(grant);
		release(in, need);
		nng_msg_free(m);
		if (st != REQCACHE_NEW)
			return reply;
		count(in->refused);
		return reply_err_msg(hdr, hdr_len, "busy", "every request slot waits for a commit; retry later");
	}
	w->charge = need;

	detail[0] = '\0';
	if (proto_request_decode(nng_msg_body(m), len, &w->req, detail, sizeof(detail)) != ST_OK ||
	    (grant != NULL && (bad = ingest_grant_uncovered(grant, w->req)) < proto_request_count(w->req))) {
		const char *code = "invalid";

		if (w->req != NULL) {
			/* decoded, but the token does not cover every topic: nothing of it is stored */
			ingest_forbidden_detail(w->req, bad, detail, sizeof(detail));
			code = "forbidden";
			count(in->forbidden);
			proto_request_free(w->req);
		} else {
			count(in->invalid);
		}
		st_auth_grant_free(grant);
		w->req = NULL;
		nng_msg_free(m);
		pthread_mutex_lock(&in->mu);
		reqcache_answer(in->cache, &w->key, w, NULL, 0, now);
		reply = reply_err_msg(w->hdr, w->hdr_len, code, detail[0] ? detail : "malformed request");
		put_free(in, w);
		pthread_mutex_unlock(&in->mu);
		release(in, need);
		return reply;
	}
	st_auth_grant_free(grant);
	/* what the decoded request really holds; never more than reserved */
	{
		size_t held = proto_request_bytes(w->req) + INGEST_MSG_OVERHEAD;
		if (held < need) {
			release(in, need - held);
			w->charge = held;
		}
	}
	w->msg = m;
	w->st = W_WAIT;
	st_mailbox_post(in->mb, &w->origin);
	return NULL;
}

/* Posts r's receive, counting it as a free receiver. */
static void
rcv_post(ingest *in, rcv *r)
{
	r->st = R_RECV;
	if (atomic_fetch_add(&in->rcv_waiting, 1) == 0)
		atomic_store(&in->behind_at, st_clock_now(in->clock));
	nng_recv_aio(in->sock, r->aio);
}

static void
rcv_cb(void *arg)
{
	rcv *r = arg;
	ingest *in = r->in;
	int rv = nng_aio_result(r->aio);
	nng_msg *m;

	if (r->st == R_RECV)
		atomic_fetch_sub(&in->rcv_waiting, 1);
	if (r->st == R_SEND) {
		if (rv != 0 && (m = nng_aio_get_msg(r->aio)) != NULL) {
			nng_aio_set_msg(r->aio, NULL);
			nng_msg_free(m); /* a failed send leaves the message ours */
		}
	} else if (rv == 0) {
		m = nng_aio_get_msg(r->aio);
		nng_aio_set_msg(r->aio, NULL);
		if ((m = receive(in, m)) != NULL) {
			r->st = R_SEND;
			nng_aio_set_msg(r->aio, m);
			nng_send_aio(in->sock, r->aio);
			return;
		}
	}
	if (rv == NNG_ECLOSED || atomic_load(&in->closing))
		return;
	rcv_post(in, r);
}

/* ---------------------------------------------------------------- work slots */

static void
work_cb(void *arg)
{
	ingest_work *w = arg;
	ingest *in = w->in;
	nng_msg *m;

	if (w->st != W_SEND)
		return; /* no aio is outstanding otherwise */
	if (nng_aio_result(w->aio) != 0 && (m = nng_aio_get_msg(w->aio)) != NULL) {
		nng_aio_set_msg(w->aio, NULL);
		nng_msg_free(m);
	}
	release(in, w->charge);
	w->charge = 0;
	pthread_mutex_lock(&in->mu);
	put_free(in, w);
	pthread_mutex_unlock(&in->mu);
}

/* Loop thread: answers w with body b (ok: kept for late resends). */
static void
work_send(ingest_work *w, const st_buf *b, bool ok)
{
	ingest *in = w->in;
	nng_msg *m;

	ST_ASSERT(w->st == W_WAIT);
	pthread_mutex_lock(&in->mu);
	/* the route is read and the entry answered together: a resend after
	 * this point finds the stored reply, one before it re-routed this one */
	reqcache_answer(in->cache, &w->key, w, ok ? b->p : NULL, b->len, st_clock_now(in->clock));
	m = reply_msg(w->hdr, w->hdr_len, b->p, b->len);
	pthread_mutex_unlock(&in->mu);
	proto_request_free(w->req);
	w->req = NULL;
	nng_msg_free(w->msg);
	w->msg = NULL;
	w->st = W_SEND;
	if (m == NULL) {
		/* no memory for a reply: the producer resends; with ok, the cache answers it */
		nng_aio_set_msg(w->aio, NULL);
		work_cb(w);
		return;
	}
	nng_aio_set_msg(w->aio, m);
	nng_send_aio(in->sock, w->aio);
}

static void
mailbox_cb(void *item, void *arg)
{
	ingest *in = arg;
	ingest_work *w = item;

	if (atomic_load(&in->closing))
		return;
	in->fn(&w->origin, w->req, in->arg);
}

/* ---------------------------------------------------------------- pipes */

/* The per-address key of p's peer (conntab.h); len 0 when it is not TCP/TLS over IP. */
static conntab_addr
pipe_addr(nng_pipe p)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	conntab_addr a = { .len = 0 };
	nng_sockaddr sa;

	memset(&a, 0, sizeof(a));
	if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
		return a;
	/* the whole peer as prepipe matches sockets: IPv6 form, then the port (both in network order) */
	if (sa.s_family == NNG_AF_INET) {
		memcpy(a.peer, mapped, 12);
		memcpy(a.peer + 12, &sa.s_in.sa_addr, 4);
		memcpy(a.peer + 16, &sa.s_in.sa_port, 2);
	} else if (sa.s_family == NNG_AF_INET6) {
		memcpy(a.peer, sa.s_in6.sa_addr, 16);
		memcpy(a.peer + 16, &sa.s_in6.sa_port, 2);
	}
	if (sa.s_family == NNG_AF_INET) {
		memcpy(a.b, &sa.s_in.sa_addr, 4);
		a.len = 4;
	} else if (sa.s_family == NNG_AF_INET6 && memcmp(sa.s_in6.sa_addr, mapped, 12) == 0) {
		memcpy(a.b, sa.s_in6.sa_addr + 12, 4);
		a.len = 4;
	} else if (sa.s_family == NNG_AF_INET6) {
		memcpy(a.b, sa.s_in6.sa_addr, 8); /* its /64 */
		a.len = 8;
	}
	return a;
}

/* Under pmu. */
static void
conns_gauge_locked(ingest *in)
{
	if (in->open_conns != NULL)
		st_gauge_set(in->open_conns, (int64_t)conntab_count(in->conns));
}

static void
pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	ingest *in = arg;
	uint32_t id = (uint32_t)nng_pipe_id(p), displaced = 0;
	conntab_addr a;
	conntab_verdict v;
	bool warn = false;

	if (ev == NNG_PIPE_EV_REM_POST) {
		pthread_mutex_lock(&in->pmu);
		conntab_remove(in->conns, id);
		conns_gauge_locked(in);
		pthread_mutex_unlock(&in->pmu);
		return;
	}
	a = pipe_addr(p);
	pthread_mutex_lock(&in->pmu);
	v = conntab_admit(in->conns, id, &a, st_clock_now(in->clock), &displaced);
	if (v == CONNTAB_REFUSE_GLOBAL) {
		count(in->refused_global);
		warn = !in->warned_global;
		in->warned_global = true;
	} else if (v == CONNTAB_REFUSE_ADDR) {
		count(in->refused_addr);
		warn = !in->warned_addr;
		in->warned_addr = true;
	} else if (displaced != 0) {
		count(in->displaced);
	}
	conns_gauge_locked(in);
	pthread_mutex_unlock(&in->pmu);
	if (v != CONNTAB_ADMIT) {
		if (warn && v == CONNTAB_REFUSE_GLOBAL)
			st_warn("ingest: more than %u producer connections, each past its first request; "
				"closing the new ones (logged once)",
				INGEST_MAX_PIPES);
		else if (warn)
			st_warn("ingest: more than %u producer connections from one address, each past its first "
				"request; closing the new ones (logged once)",
				INGEST_MAX_PIPES_PER_ADDR);
		nng_pipe_close(p); /* before the socket reads anything from it */
		return;
	}
	if (displaced != 0) {
		nng_pipe q;
		q.id = displaced;
		nng_pipe_close(q); /* a stale id (already gone) gives NNG_ENOENT: nothing to do */
	}
}

/* prepipe's question, on the sweep's thread: is peer one of our pipes? */
static bool
is_pipe(const prepipe_peer *peer, uint64_t data_at, void *arg)
{
	ingest *in = arg;
	unsigned char key[18];
	bool yes;

	memcpy(key, peer->addr, 16);
	key[16] = (unsigned char)(peer->port >> 8);
	key[17] = (unsigned char)(peer->port & 0xff);
	pthread_mutex_lock(&in->pmu);
	yes = conntab_peer(in->conns, key, data_at);
	pthread_mutex_unlock(&in->pmu);
	return yes;
}

/* nng thread, every SWEEP_MS: closes the connections past their idle deadline. */
static void
sweep_cb(void *arg)
{
	ingest *in = arg;
	uint32_t ids[64];
	size_t n;

	if (nng_aio_result(in->sweep) != 0 || atomic_load(&in->closing))
		return;
	/* first: connections that are not pipes yet, and pipes receiving a first request (deadline restarted) */
	if (in->pre != NULL && (n = prepipe_sweep(in->pre, st_clock_now(in->clock), is_pipe, in)) > 0) {
		pthread_mutex_lock(&in->pmu);
		if (in->closed_handshake != NULL)
			st_counter_add(in->closed_handshake, n);
		pthread_mutex_unlock(&in->pmu);
	}
	do {
		uint64_t now = st_clock_now(in->clock);
		uint64_t behind = atomic_load(&in->rcv_waiting) == 0 ? now : atomic_load(&in->behind_at);

		pthread_mutex_lock(&in->pmu);
		n = conntab_expired(in->conns, now, behind, ids, ST_ARRAY_LEN(ids));
		if (in->closed_idle != NULL)
			st_counter_add(in->closed_idle, n);
		conns_gauge_locked(in);
		pthread_mutex_unlock(&in->pmu);
		for (size_t i = 0; i < n; i++) {
			nng_pipe q;
			q.id = ids[i];
			nng_pipe_close(q);
		}
	} while (n == ST_ARRAY_LEN(ids));
	nng_sleep_aio(SWEEP_MS, in->sweep);
}

/* ---------------------------------------------------------------- life */

/* The port of a tcp:// or tls+tcp:// URL ("scheme://host:port", host maybe "[v6]"); 0 when none. */
static uint16_t
url_port(const char *url)
{
	const char *c = strrchr(url, ':');
	uint64_t v = 0;

	if (strncmp(url, "tcp", 3) != 0 && strncmp(url, "tls+tcp", 7) != 0)
		return 0;
	if (c == NULL || strchr(url, '/') == NULL || c < strchr(url, '/') ||
	    st_parse_u64(c + 1, strlen(c + 1), &v) != ST_OK || v > 65535)
		return 0;
	return (uint16_t)v;
}

st_err
ingest_new(struct event_base *base, const char *url, size_t n_works, st_counter *invalid, const ingest_auth *auth,
	   ingest_request_fn fn, void *arg, ingest **out)
{
	ingest *in = st_xcalloc(1, sizeof(*in));
	st_err err = ST_ESYS;
	int rv;

	ST_ASSERT(n_works >= 1);
	in->invalid = invalid;
	if (auth != NULL) {
		/* set before the socket listens: no request is ever received unchecked */
		in->auth = auth->store;
		in->unauthorized = auth->unauthorized;
		in->forbidden = auth->forbidden;
	}
	in->fn = fn;
	in->arg = arg;
	in->clock = st_clock_system();
	atomic_init(&in->closing, false);
	atomic_init(&in->budget, 0);
	pthread_mutex_init(&in->pmu, NULL);
	in->idle_ms = INGEST_IDLE_MS;
	in->conns = conntab_new(INGEST_MAX_PIPES, INGEST_MAX_PIPES_PER_ADDR, in->idle_ms, INGEST_DISPLACE_MS);
	atomic_init(&in->refuse, NULL);
	pthread_mutex_init(&in->mu, NULL);
	in->cache = reqcache_new(INGEST_CACHE_ENTRIES, INGEST_CACHE_BYTES, INGEST_CACHE_TTL_MS);
	if ((in->mb = st_mailbox_new(base, mailbox_cb, in)) == NULL)
		goto fail;
	if ((rv = nng_rep0_open_raw(&in->sock)) != 0) {
		st_error("ingest: cannot open rep0: %s", nng_strerror(rv));
		goto fail;
	}
	in->open = true;
	/*
	 * RECVBUF 0: a message waits in its pipe (which reads nothing more
	 * meanwhile) until a receiver takes it, so nng holds at most one
	 * message per connection.
	 */
	if ((rv = nng_socket_set_size(in->sock, NNG_OPT_RECVMAXSZ, INGEST_RECV_LIMIT)) != 0 ||
	    (rv = nng_socket_set_int(in->sock, NNG_OPT_RECVBUF, 0)) != 0 ||
	    (rv = nng_pipe_notify(in->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, in)) != 0 ||
	    (rv = nng_pipe_notify(in->sock, NNG_PIPE_EV_REM_POST, pipe_cb, in)) != 0) {
		st_error("ingest: socket options: %s", nng_strerror(rv));
		goto fail;
	}
	for (size_t i = 0; i < INGEST_RECEIVERS; i++) {
		in->rcvs[i].in = in;
		if ((rv = nng_aio_alloc(&in->rcvs[i].aio, rcv_cb, &in->rcvs[i])) != 0) {
			st_error("ingest: cannot allocate an aio: %s", nng_strerror(rv));
			goto fail;
		}
	}
	if ((rv = nng_aio_alloc(&in->sweep, sweep_cb, in)) != 0) {
		st_error("ingest: cannot allocate an aio: %s", nng_strerror(rv));
		goto fail;
	}
	in->works = st_xcalloc(n_works, sizeof(*in->works));
	in->n_works = n_works;
	for (size_t i = n_works; i-- > 0;) {
		ingest_work *w = &in->works[i];
		w->origin.ok = work_ok;
		w->origin.err = work_err;
		w->in = in;
		if ((rv = nng_aio_alloc(&w->aio, work_cb, w)) != 0) {
			st_error("ingest: cannot allocate an aio: %s", nng_strerror(rv));
			goto fail;
		}
		put_free(in, w);
	}
	if ((rv = st_tls_listen(in->sock, url, ST_TLS_INGEST)) != 0) {
		st_error("ingest: cannot listen on %s: %s", url, nng_strerror(rv));
		err = rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? ST_EINVAL : ST_ESYS;
		goto fail;
	}
	for (size_t i = 0; i < INGEST_RECEIVERS; i++)
		rcv_post(in, &in->rcvs[i]);
	{
		uint16_t port = url_port(url);
		if (port != 0)
			in->pre = prepipe_new(port, in->idle_ms);
		else if (strncmp(url, "tcp", 3) == 0 || strncmp(url, "tls", 3) == 0)
			st_warn("ingest: %s: no fixed port, so connections that never finish their SP (or TLS) "
				"handshake are left to nng's own deadline",
				url);
	}
	nng_sleep_aio(SWEEP_MS, in->sweep);
	*out = in;
	return ST_OK;
fail:
	ingest_free(in);
	return err;
}

void
ingest_free(ingest *in)
{
	if (in == NULL)
		return;
	atomic_store(&in->closing, true);
	/* stopped before the close: none can be re-armed on a closing socket */
	if (in->sweep != NULL) {
		nng_aio_stop(in->sweep);
		nng_aio_free(in->sweep);
	}
	for (size_t i = 0; i < INGEST_RECEIVERS; i++)
		if (in->rcvs[i].aio != NULL)
			nng_aio_stop(in->rcvs[i].aio);
	for (size_t i = 0; i < in->n_works; i++)
		if (in->works[i].aio != NULL)
			nng_aio_stop(in->works[i].aio);
	if (in->open)
		nng_close(in->sock);
	st_mailbox_free(in->mb);
	for (size_t i = 0; i < INGEST_RECEIVERS; i++) {
		if (in->rcvs[i].aio == NULL)
			continue;
		nng_msg_free(nng_aio_get_msg(in->rcvs[i].aio));
		nng_aio_free(in->rcvs[i].aio);
	}
	for (size_t i = 0; i < in->n_works; i++) {
		ingest_work *w = &in->works[i];
		proto_request_free(w->req);
		nng_msg_free(w->msg);
		if (w->aio != NULL) {
			nng_msg_free(nng_aio_get_msg(w->aio));
			nng_aio_free(w->aio);
		}
	}
	free(in->works);
	reqcache_free(in->cache);
	conntab_free(in->conns);
	prepipe_free(in->pre);
	pthread_mutex_destroy(&in->pmu);
	pthread_mutex_destroy(&in->mu);
	free(in);
}

void
ingest_set_refusal(ingest *in, const char *detail)
{
	atomic_store(&in->refuse, detail);
}

void
ingest_set_counters(ingest *in, st_counter *busy, st_counter *unavailable)
{
	in->refused = busy;
	in->refused_unavail = unavailable;
}

void
ingest_set_conn_metrics(ingest *in, st_counter *refused_global, st_counter *refused_addr, st_counter *closed_idle,
			st_counter *displaced, st_counter *closed_handshake, st_gauge *open_conns)
{
	pthread_mutex_lock(&in->pmu);
	in->closed_handshake = closed_handshake;
	in->refused_global = refused_global;
	in->refused_addr = refused_addr;
	in->closed_idle = closed_idle;
	in->displaced = displaced;
	in->open_conns = open_conns;
	conns_gauge_locked(in);
	pthread_mutex_unlock(&in->pmu);
}

static void
work_ok(ingest_origin *o, const uint64_t *seqs, size_t n)
{
	ingest_work *w = (ingest_work *)o;
	st_buf b;

	st_buf_init(&b);
	proto_reply_ok_encode(&b, seqs, n);
	work_send(w, &b, true);
	st_buf_fini(&b);
}

static void
work_err(ingest_origin *o, const char *code, const char *detail)
{
	ingest_work *w = (ingest_work *)o;
	st_buf b;

	st_buf_init(&b);
	proto_reply_err_encode(&b, code, detail);
	work_send(w, &b, false);
	st_buf_fini(&b);
}
