/*
 * op: one request's state machine (op.h).
 *
 * DESIGN
 * A request arrives encoded (request.c: checked by the writer's code, keys
 * given); from then on one state machine per request runs on nng's aio
 * callbacks, never on the caller's thread (the first step is a zero sleep
 * on the request's timer):
 *
 *     SEND --sent--> RECV --ok--> done (STUDIO_OK)
 *       |              |--invalid--> done (STUDIO_INVALID)
 *       |              |--busy--> WAIT (back-off) --> SEND, same URL
 *       |              |--unavailable--> WAIT (back-off) --> SEND, next URL
 *       |              '--no reply in try_timeout, bad reply--> SEND, next URL
 *       '--no connection in try_timeout--> SEND, next URL
 *
 * Every step first checks the deadline.  Past it the request ends
 * STUDIO_TIMEOUT when any try went out and was never answered (o->unanswered:
 * that try may sit in a writer's pending batch and be committed later, so
 * "nothing stored" would be a lie even if every later try heard busy), else
 * with the last answer (busy, unavailable), or STUDIO_UNAVAILABLE when no
 * try ever left (no connection: a failed nng send hands the message back).
 * A try that timed out closes its context, so a late reply to it is
 * dropped by nng and the next try is a new request on the wire (same
 * bytes, same keys: the writer stores each keyed event once however many
 * tries reach it).  studio_producer_free ends what is left by the same
 * rule: STUDIO_TIMEOUT (unknown) once a try went out, STUDIO_CLOSED only
 * when nothing did.
 *
 * Ownership: a request (struct op) is owned by its state machine from
 * start to its callback; it is on the producer's list (p->ops, under
 * p->mu) so that studio_producer_free can cancel it (op_cancel_all), and
 * it holds one of p's max_inflight slots, taken in op_start and given
 * back in op_finish.  nng forbids nng_aio_free inside a callback, so a
 * finished op's aios go to nng_aio_reap.
 *
 * Memory: a request holds its encoded bytes (at most 16 MiB, the writer's
 * limit) and n seqs; at most max_inflight requests exist, so a producer
 * holds at most max_inflight x (16 MiB + 80 KiB) plus nng's buffers.  This
 * file allocates with st_try_* only and decodes replies with the fallible
 * proto_reply_try_decode: a reply that cannot be decoded for memory ends
 * the request STUDIO_NOMEM with a detail saying it may be stored (and the
 * key base to publish again with).  producer_test fails each of these
 * allocations in turn (st_alloc_fail_arm) under ASan.
 */
#include "op.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "producer_int.h"
#include "request.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_util.h"
#include "wire.h"

enum op_state { OP_START, OP_SEND, OP_RECV, OP_WAIT };

/* What the last try heard, for the status at the deadline. */
enum op_heard { HEARD_NOTHING, HEARD_BUSY, HEARD_UNAVAILABLE };

typedef struct op op;

struct op {
	studio_producer *p;
	st_dlink link;  /* on p->ops */
	nng_aio *aio;   /* sends and receives; owned (reaped at the end) */
	nng_aio *timer; /* the start and back-off sleeps, owned (reaped): never the send/recv aio,
	                   as nng 1.5 leaves a slept aio finishing a later timeout with result 0 */
	nng_ctx ctx;
	bool ctx_open;
	bool unanswered; /* a try went out and was never answered: it may be stored */
	size_t url_i;
	enum op_state st;
	enum op_heard heard;
	uint32_t attempt;                        /* retries so far, for the back-off */
	uint64_t deadline;                       /* on p's clock */
	uint64_t try_start;                      /* when this try was sent, on p's clock */
	st_buf req;                              /* the encoded request (the bare batch), owned */
	unsigned char head[PROTO_WRAP_HEAD_MAX]; /* the request map's head with this try's token */
	size_t head_len;                         /* 0: no token configured */
	bool auth_retried;                       /* an unauthorized answer was retried with the function's next token */
	size_t n;
	uint64_t *seqs; /* n, owned */
	studio_publish_fn cb;
	void *arg;
	char key_base[STUDIO_KEY_BASE_MAX]; /* "" with keys off */
	char detail[DETAIL_MAX];
};

static uint64_t
splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The back-off's random part: the test's source, else splitmix64 over p->rng (seeded from p's id). */
static uint64_t
rand64(studio_producer *p)
{
	if (p->o.random64 != NULL)
		return p->o.random64(p->o.test_arg);
	return splitmix64(atomic_fetch_add(&p->rng, 0x9e3779b97f4a7c15ull));
}

/* ---- the request's state machine --------------------------------------- */

static void op_cb(void *arg);
static void op_timer_cb(void *arg);

static void
op_ctx_close(op *o)
{
	if (o->ctx_open) {
		nng_ctx_close(o->ctx);
		o->ctx_open = false;
	}
}

/*
 * The end: the callback, then off the list and the slot back (so that
 * studio_producer_free returns only after every callback returned), then
 * the op is gone.  Nothing of p is touched after the unlock.
 */
static void
op_finish(op *o, studio_status st)
{
	studio_producer *p = o->p;

	op_ctx_close(o);
	if (st == STUDIO_OK)
		atomic_store(&p->url_good, o->url_i);
	o->cb(o->arg, st, st == STUDIO_OK ? o->seqs : NULL, st == STUDIO_OK ? o->n : 0, o->detail);
	pthread_mutex_lock(&p->mu);
	st_dlink_unlink(&o->link);
	p->inflight--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	nng_aio_reap(o->aio); /* not nng_aio_free: we may be inside its callback */
	nng_aio_reap(o->timer);
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
}

/*
 * Ends a request whose outcome is unknown: a try of it may be stored.  The
 * detail says why and with which key base to publish again.
 */
static void
op_finish_maybe_stored(op *o, studio_status st)
{
	size_t len = strlen(o->detail);

	if (len < sizeof(o->detail) && o->key_base[0] != '\0')
		snprintf(o->detail + len, sizeof(o->detail) - len, "; it may be stored: publish again with key base %s",
			 o->key_base);
	else if (len < sizeof(o->detail))
		snprintf(o->detail + len, sizeof(o->detail) - len,
			 "; it may be stored: publishing again is safe only for events with keys of their own");
	op_finish(o, st);
}

static void
op_finish_unknown(op *o, const char *why)
{
	if (why != NULL)
		detail_say(o->detail, sizeof(o->detail), "%s", why);
	op_finish_maybe_stored(o, STUDIO_TIMEOUT);
}

/* The deadline passed: unknown once a try went unanswered, else the last answer. */
static void
op_finish_deadline(op *o)
{
	size_t len = strlen(o->detail);

	if (o->unanswered) {
		op_finish_unknown(o, NULL);
		return;
	}
	/* every try that left was answered busy or unavailable, or none left (no connection): nothing stored */
	if (o->heard == HEARD_NOTHING && len < sizeof(o->detail))
		snprintf(o->detail + len, sizeof(o->detail) - len, "; nothing was sent");
	op_finish(o, o->heard == HEARD_BUSY ? STUDIO_BUSY : STUDIO_UNAVAILABLE);
}

/* The producer is being freed: closed only when no try of it may have reached a writer. */
static void
op_finish_closing(op *o)
{
	if (o->unanswered) {
		op_finish_unknown(o, "the producer was freed before a writer answered");
		return;
	}
	detail_say(o->detail, sizeof(o->detail), "the producer was freed; nothing of the request was sent");
	op_finish(o, STUDIO_CLOSED);
}

static bool
op_closing(op *o)
{
	bool c;

	pthread_mutex_lock(&o->p->mu);
	c = o->p->closing;
	pthread_mutex_unlock(&o->p->mu);
	return c;
}

/* The time left before the deadline, at most the try timeout (both below INT32_MAX); 0: past it. */
static nng_duration
op_left(op *o)
{
	uint64_t now = producer_now_ms(o->p);

	if (now >= o->deadline)
		return 0;
	return (nng_duration)ST_MIN(o->deadline - now, (uint64_t)o->p->o.try_timeout_ms);
}

/*
 * The request map's head for this try ({"token": T, "events": ...}), into
 * o->head: the token function is asked at every try, so a rotated token
 * is sent on the next one; none configured: no head (the bare batch).
 * Nonzero (detail said) when the function gave no usable token.
 */
static int
token_head(op *o)
{
	const studio_options *opt = &o->p->o;
	char tok[PROTO_MAX_TOKEN + 1];
	proto_str t = { NULL, 0 };

	o->head_len = 0;
	if (opt->token_fn != NULL) {
		int n = opt->token_fn(opt->token_arg, tok, sizeof(tok));

		if (n <= 0 || (size_t)n > PROTO_MAX_TOKEN) {
			detail_say(o->detail, sizeof(o->detail),
				   "the token function gave no token (returned %d; 1..%u bytes)", n, PROTO_MAX_TOKEN);
			return -1;
		}
		t = (proto_str){ tok, (size_t)n };
	} else if (opt->token != NULL) {
		t = (proto_str){ opt->token, strlen(opt->token) };
	} else {
		return 0;
	}
	o->head_len = proto_request_wrap_head(o->head, sizeof(o->head), t);
	return 0;
}

static void
op_send(op *o)
{
	nng_duration left;
	nng_msg *m = NULL;
	int rv;

	if (op_closing(o)) {
		op_finish_closing(o);
		return;
	}
	if ((left = op_left(o)) == 0) {
		op_finish_deadline(o);
		return;
	}
	if (!o->ctx_open) {
		if ((rv = nng_ctx_open(&o->ctx, o->p->socks[o->url_i])) != 0) {
			if (rv == NNG_ECLOSED) {
				op_finish_closing(o);
				return;
			}
			detail_say(o->detail, sizeof(o->detail), "%s: %s", o->p->urls[o->url_i], nng_strerror(rv));
			if (o->unanswered)
				op_finish_unknown(o, NULL);
			else
				op_finish(o, rv == NNG_ENOMEM ? STUDIO_NOMEM : STUDIO_USAGE);
			return;
		}
		o->ctx_open = true;
	}
	if ((rv = token_head(o)) != 0) {
		/* no token to send: nothing of this try went out */
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_USAGE);
		return;
	}
	if ((rv = nng_msg_alloc(&m, 0)) != 0 || (o->head_len && (rv = nng_msg_append(m, o->head, o->head_len)) != 0) ||
	    (rv = nng_msg_append(m, o->req.p, o->req.len)) != 0) {
		nng_msg_free(m);
		detail_say(o->detail, sizeof(o->detail), "cannot build the message: %s", nng_strerror(rv));
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_NOMEM);
		return;
	}
	o->st = OP_SEND;
	o->try_start = producer_now_ms(o->p);
	nng_aio_set_msg(o->aio, m);
	nng_aio_set_timeout(o->aio, left);
	nng_ctx_send(o->ctx, o->aio);
}

/* Wait, then try again: on the same URL (busy) or the next one. */
static void
op_retry(op *o, bool next_url, bool wait)
{
	uint64_t now;
	uint32_t ms;

	if (next_url) {
		op_ctx_close(o); /* a late reply to this try is dropped */
		o->url_i = (o->url_i + 1) % o->p->n_urls;
	}
	if (!wait) {
		op_send(o);
		return;
	}
	if (op_left(o) == 0) {
		op_finish_deadline(o);
		return;
	}
	if (op_closing(o)) {
		op_finish_closing(o);
		return;
	}
	ms = st_backoff_jitter_ms(++o->attempt, o->p->o.backoff_base_ms, o->p->o.backoff_cap_ms, rand64(o->p));
	now = producer_now_ms(o->p);
	o->st = OP_WAIT;
	nng_sleep_aio((nng_duration)ST_MIN((uint64_t)ms, o->deadline > now ? o->deadline - now : 0), o->timer);
}

static void
op_on_reply(op *o, nng_msg *m)
{
	proto_reply rep;
	const char *url = o->p->urls[o->url_i];
	st_err rv;

	memset(&rep, 0, sizeof(rep));
	rv = proto_reply_try_decode(nng_msg_body(m), nng_msg_len(m), &rep);
	if (rv == ST_ENOMEM) {
		/* An answer we cannot read: it may say stored.  Retrying would need memory too. */
		nng_msg_free(m);
		detail_say(o->detail, sizeof(o->detail), "out of memory reading the reply of %s", url);
		op_finish_maybe_stored(o, STUDIO_NOMEM);
		return;
	}
	if (rv != ST_OK) {
		nng_msg_free(m);
		detail_say(o->detail, sizeof(o->detail), "%s sent a reply that is not an ingest reply", url);
		o->unanswered = true; /* not an answer we can read: the try may be stored */
		op_retry(o, true, true);
		return;
	}
	nng_msg_free(m);
	if (rep.ok && rep.n_seqs == o->n) {
		memcpy(o->seqs, rep.seqs, o->n * sizeof(*o->seqs));
		proto_reply_fini(&rep);
		op_finish(o, STUDIO_OK);
		return;
	}
	if (rep.ok) {
		detail_say(o->detail, sizeof(o->detail), "%s answered %zu seqs for %zu events", url, rep.n_seqs, o->n);
		proto_reply_fini(&rep);
		o->unanswered = true;
		op_retry(o, true, true);
		return;
	}
	detail_say(o->detail, sizeof(o->detail), "%s: %s (from %s)", rep.error, rep.detail, url);
	if (strcmp(rep.error, "unauthorized") == 0 && o->p->o.token_fn != NULL && !o->auth_retried) {
		/* nothing stored; the token may have expired in flight: ask the function again, once, at once */
		proto_reply_fini(&rep);
		o->auth_retried = true;
		op_retry(o, false, false);
		return;
	}
	if (strcmp(rep.error, "invalid") == 0 || strcmp(rep.error, "unauthorized") == 0 ||
	    strcmp(rep.error, "forbidden") == 0) {
		proto_reply_fini(&rep);
		/* all or nothing: this try stored nothing, but an earlier unanswered one may have */
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_INVALID);
		return;
	}
	if (strcmp(rep.error, "busy") == 0) {
		proto_reply_fini(&rep);
		o->heard = HEARD_BUSY; /* nothing of this try stored: the same writer, after the back-off */
		op_retry(o, false, true);
		return;
	}
	/* unavailable (or a code this library does not know): the next writer */
	o->heard = HEARD_UNAVAILABLE;
	proto_reply_fini(&rep);
	op_retry(o, true, true);
}

/*
 * Frees a message nng left on the op's aio.  Every branch that takes a
 * message off the aio clears the pointer, so what is still there is one
 * nng handed back and nobody else holds.
 */
static void
op_aio_msg_drop(op *o)
{
	nng_msg *m = nng_aio_get_msg(o->aio);

	if (m != NULL) {
		nng_aio_set_msg(o->aio, NULL);
		nng_msg_free(m);
	}
}

static void
op_cb(void *arg)
{
	op *o = arg;
	int rv = nng_aio_result(o->aio);
	const char *url = o->p->urls[o->url_i];

	switch (o->st) {
	case OP_START:
	case OP_WAIT: return; /* not this aio's states: the timer's (op_timer_cb) */
	case OP_SEND:
		if (rv != 0) {
			/* the message is still ours: it never left */
			op_aio_msg_drop(o);
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish_closing(o);
				return;
			}
			detail_say(o->detail, sizeof(o->detail), "%s: no connection (%s)", url, nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, rv != NNG_ETIMEDOUT);
			return;
		}
		/* nng owns the request now (nng_ctx_send's rule): no pointer to it stays on the aio. */
		nng_aio_set_msg(o->aio, NULL);
		/* From here the try may reach a writer: until its answer, its outcome is unknown. */
		o->st = OP_RECV;
		nng_aio_set_timeout(o->aio, ST_MAX(op_left(o), 1));
		nng_ctx_recv(o->ctx, o->aio);
		return;
	case OP_RECV:
		if (rv != 0) {
			/* A failed receive may hand the try's request back on the aio (req0
			 * resets its context): ours to free, before the next try sets its own. */
			op_aio_msg_drop(o);
			o->unanswered = true;
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish_closing(o);
				return;
			}
			/* the wait as it was (the try timeout, or what was left of the call's) */
			detail_say(o->detail, sizeof(o->detail), "no reply from %s within %llu ms (%s)", url,
				   (unsigned long long)(producer_now_ms(o->p) - o->try_start), nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, false);
			return;
		}
		if (nng_aio_get_msg(o->aio) == NULL) { /* never expected; a reply we cannot read */
			o->unanswered = true;
			detail_say(o->detail, sizeof(o->detail), "no reply from %s", url);
			op_retry(o, true, false);
			return;
		}
		{
			nng_msg *m = nng_aio_get_msg(o->aio);

			nng_aio_set_msg(o->aio, NULL); /* the reply is ours: op_on_reply frees it */
			op_on_reply(o, m);
		}
		return;
	}
}

/* The timer: the zero sleep that moves the start off the caller's thread, and the back-off. */
static void
op_timer_cb(void *arg)
{
	op *o = arg;
	int rv = nng_aio_result(o->timer);

	if (rv != 0 && rv != NNG_ETIMEDOUT) { /* the sleep ended early: cancelled by studio_producer_free */
		op_finish_closing(o);
		return;
	}
	op_send(o);
}

/* ---- the start -------------------------------------------------------------- */

/* An op that never started: nothing of it is on an nng thread, so its aios are freed, not reaped. */
static void
op_free_unstarted(op *o)
{
	if (o->aio != NULL)
		nng_aio_free(o->aio);
	if (o->timer != NULL)
		nng_aio_free(o->timer);
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
}

studio_status
op_start(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint32_t timeout_ms, unsigned flags,
	 studio_publish_fn cb, void *arg, char *detail, size_t detail_len)
{
	const char *base = NULL;
	op *o = NULL;
	uint64_t deadline;
	studio_status st;
	int rv;

	deadline = producer_now_ms(p) + timeout_ms;
	if ((o = st_try_calloc(1, sizeof(*o))) == NULL) {
		detail_say(detail, detail_len, "out of memory");
		return STUDIO_NOMEM;
	}
	st_buf_init(&o->req);
	if (!p->o.no_keys) {
		if (key_base != NULL && key_base[0] != '\0') {
			if (!request_key_base_valid(key_base)) {
				detail_say(detail, detail_len,
					   "key base \"%.40s\": 1..%d bytes of printable ASCII without space", key_base,
					   STUDIO_KEY_BASE_MAX - 1);
				op_free_unstarted(o);
				return STUDIO_USAGE;
			}
			snprintf(o->key_base, sizeof(o->key_base), "%s", key_base);
		} else {
			/* Made once, here, and handed back: every try of this request, and the
			 * caller's next call with the same base, carries the same keys. */
			request_key_base_format(p->id, atomic_fetch_add(&p->base_n, 1), o->key_base);
			if (key_base != NULL)
				memcpy(key_base, o->key_base, strlen(o->key_base) + 1);
		}
		base = o->key_base;
	}
	st = request_encode(ev, n, base, &o->req, detail, detail_len);
	if (st != STUDIO_OK)
		goto fail;
	if ((rv = nng_aio_alloc(&o->aio, op_cb, o)) != 0 || (rv = nng_aio_alloc(&o->timer, op_timer_cb, o)) != 0) {
		detail_say(detail, detail_len, "nng_aio_alloc: %s", nng_strerror(rv));
		st = STUDIO_NOMEM;
		goto fail;
	}
	if ((o->seqs = st_try_calloc(n, sizeof(*o->seqs))) == NULL) {
		detail_say(detail, detail_len, "out of memory for %zu seqs", n);
		st = STUDIO_NOMEM;
		goto fail;
	}
	o->p = p;
	o->n = n;
	o->cb = cb;
	o->arg = arg;
	o->deadline = deadline;
	o->url_i = atomic_load(&p->url_good) % p->n_urls;
	detail_say(o->detail, sizeof(o->detail), "no writer answered within %u ms", timeout_ms);
	/* A slot (back-pressure on the caller, unless STUDIO_NONBLOCK), then on the list. */
	pthread_mutex_lock(&p->mu);
	p->slot_waiters++;
	while (!(flags & STUDIO_NONBLOCK) && !p->closing && p->inflight >= p->o.max_inflight) {
		uint64_t now = producer_now_ms(p);

		if (now >= deadline)
			break;
		producer_wait_ms(p, deadline - now);
	}
	p->slot_waiters--;
	if (p->closing || p->inflight >= p->o.max_inflight) {
		st = p->closing ? STUDIO_CLOSED : STUDIO_FULL;
		pthread_mutex_unlock(&p->mu);
		if (st == STUDIO_CLOSED)
			detail_say(detail, detail_len, "the producer is being freed; nothing was sent");
		else
			detail_say(detail, detail_len, "%u requests in flight (max_inflight)%s; nothing was sent",
				   p->o.max_inflight, (flags & STUDIO_NONBLOCK) ? "" : " for the whole timeout");
		goto fail;
	}
	p->inflight++;
	st_dlist_push_front(&p->ops, &o->link);
	pthread_mutex_unlock(&p->mu);
	/* The first step on an nng thread: the callback never runs on the caller's. */
	o->st = OP_START;
	nng_sleep_aio(0, o->timer);
	return STUDIO_OK;
fail:
	op_free_unstarted(o);
	return st;
}

void
op_cancel_all(studio_producer *p)
{
	for (st_dlink *l = st_dlist_first(&p->ops); l != NULL; l = st_dlist_after(&p->ops, l)) {
		op *o = ST_CONTAINER_OF(l, op, link);

		nng_aio_cancel(o->aio);
		nng_aio_cancel(o->timer);
	}
}
