/*
 * libstudio-producer (studio_producer.h).
 *
 * DESIGN
 * A producer owns one nng req0 socket per writer URL (each with its own
 * dialer, dialing in the background) and a set of requests in flight.  A
 * request is checked and encoded once, on the caller's thread, by the
 * writer's own code (proto/wire.c: encode, then decode as the writer will,
 * so the rules and the words of a refusal are the writer's); events without
 * a key get one first, so every retry carries the same keys.  Then one
 * state machine per request runs on nng's aio callbacks:
 *
 *     SEND --sent--> RECV --ok--> done (STUDIO_OK)
 *       |              |--invalid--> done (STUDIO_INVALID)
 *       |              |--busy--> WAIT (back-off) --> SEND, same URL
 *       |              |--unavailable--> WAIT (back-off) --> SEND, next URL
 *       |              '--no reply in try_timeout, bad reply--> SEND, next URL
 *       '--no connection in try_timeout--> SEND, next URL
 *
 * Every step first checks the deadline; past it the request ends with what
 * the last answer was (busy, unavailable, or nothing: timeout).  A try that
 * timed out closes its context, so a late reply to it is dropped by nng and
 * the next try is a new request on the wire (same bytes, same keys: the
 * writer stores each keyed event once however many tries reach it).
 *
 * Ownership: a request (struct op) is owned by its state machine from
 * start to its callback; it is on the producer's list (under mu) so that
 * studio_producer_free can cancel it.  nng forbids nng_aio_free inside a
 * callback, so a finished op's aio goes to nng_aio_reap.
 *
 * Memory: a request holds its encoded bytes (at most 16 MiB, the writer's
 * limit) and n seqs; at most max_inflight requests exist, so a producer
 * holds at most max_inflight x (16 MiB + 80 KiB) plus nng's buffers.
 */
#include "studio_producer.h"

#include <errno.h>
#include <stdarg.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "producer_int.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_tls.h"
#include "st_util.h"
#include "wire.h"

#define DEFAULT_TRY_TIMEOUT_MS 10000u
#define DEFAULT_BACKOFF_BASE_MS 100u
#define DEFAULT_BACKOFF_CAP_MS 5000u
#define DEFAULT_MAX_INFLIGHT 64u
#define MAX_URLS 64
/* A reply holds at most 10,000 seqs (~90 KB); anything larger is not ours. */
#define MAX_REPLY (1024u * 1024)
#define DETAIL_MAX 512

enum op_state { OP_SEND, OP_RECV, OP_WAIT };

/* What the last try heard, for the status at the deadline. */
enum op_heard { HEARD_NOTHING, HEARD_BUSY, HEARD_UNAVAILABLE };

typedef struct op op;

struct studio_producer {
	nng_socket *socks;         /* n_urls, owned */
	char **urls;               /* n_urls, owned copies (for messages) */
	size_t n_urls;
	studio_producer_options o; /* defaults filled in; TLS strings not kept */
	uint8_t id[16];            /* this producer's key prefix */
	atomic_uint_fast64_t key_n;
	atomic_uint_fast64_t rng;  /* splitmix64 state, when no random64 is given */
	atomic_size_t url_good;    /* where the last request succeeded: the next one starts there */
	pthread_mutex_t mu;
	pthread_cond_t cv;         /* a slot freed, or the last op ended */
	size_t inflight;           /* under mu */
	bool closing;              /* under mu */
	op *ops;                   /* under mu: every op in flight (op.next) */
};

struct op {
	studio_producer *p;
	op *next, **pprev;         /* on p->ops */
	nng_aio *aio;              /* owned (reaped at the end) */
	nng_ctx ctx;
	bool ctx_open;
	size_t url_i;
	enum op_state st;
	enum op_heard heard;
	uint32_t attempt;          /* retries so far, for the back-off */
	uint64_t deadline;         /* on p's clock */
	st_buf req;                /* the encoded request, owned */
	size_t n;
	uint64_t *seqs;            /* n, owned */
	studio_publish_fn cb;
	void *arg;
	char detail[DETAIL_MAX];
};

/* ---- small parts -------------------------------------------------------- */

const char *
studio_status_str(studio_status st)
{
	static const char *const names[] = { "ok", "invalid", "busy", "unavailable", "timeout", "closed", "usage" };

	return (unsigned)st < ST_ARRAY_LEN(names) ? names[st] : "unknown";
}

static void
say(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
say(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (buf == NULL || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

/* The default clock: the project's monotonic one (the option's signature takes the test's arg). */
static uint64_t
mono_ms(void *arg)
{
	(void)arg;
	return st_clock_now(st_clock_system());
}

/* Waits on p->cv, p->mu held, for at most ms (a condition variable waits until a wall-clock time). */
static void
producer_wait_ms(studio_producer *p, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	(void)pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

static uint64_t
now_ms(const studio_producer *p)
{
	return p->o.clock_ms(p->o.test_arg);
}

static uint64_t
splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t
rand64(studio_producer *p)
{
	if (p->o.random64 != NULL)
		return p->o.random64(p->o.test_arg);
	return splitmix64(atomic_fetch_add(&p->rng, 0x9e3779b97f4a7c15ull));
}

void
producer_key_format(const uint8_t id[16], uint64_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	char *o = out;

	memcpy(o, "sp1-", 4);
	o += 4;
	for (int i = 0; i < 16; i++) {
		*o++ = hex[id[i] >> 4];
		*o++ = hex[id[i] & 15];
	}
	*o++ = '-';
	for (int s = 60; s >= 0; s -= 4)
		*o++ = hex[(n >> s) & 15];
	*o = '\0';
}

/* ---- checking and encoding (the writer's code) ------------------------ */

static size_t
len_or_strlen(const char *s, size_t len)
{
	return s == NULL ? 0 : len != 0 ? len : strlen(s);
}

/*
 * Encodes ev[0..n) as one batch request into out, with keys[i] (when not
 * NULL, PRODUCER_KEY_LEN + 1 bytes each) as the key of every event without
 * one, then decodes it as the writer will.
 */
static studio_status
encode_checked(const studio_event *ev, size_t n, const char *keys, st_buf *out, char *detail, size_t cap)
{
	proto_event *pe = NULL;
	proto_str *pool = NULL;
	size_t n_about = 0, used = 0;
	proto_request *r = NULL;
	char why[DETAIL_MAX];
	studio_status st = STUDIO_OK;

	if (ev == NULL || n == 0 || n > PROTO_MAX_BATCH) {
		say(detail, cap, "a request holds 1..%u events (got %zu%s)", PROTO_MAX_BATCH, n,
		    ev == NULL ? ", events NULL" : "");
		return STUDIO_USAGE;
	}
	for (size_t i = 0; i < n; i++) {
		if (ev[i].n_about > 0 && ev[i].about == NULL) {
			say(detail, cap, "event %zu: n_about %zu with about NULL", i, ev[i].n_about);
			return STUDIO_USAGE;
		}
		/* the writer's bound and words (proto/wire.c), before anything is sized by the count */
		if (ev[i].n_about > PROTO_MAX_ABOUT) {
			say(detail, cap, "event %zu: about: too many entries (%zu, max %u)", i, ev[i].n_about,
			    PROTO_MAX_ABOUT);
			return STUDIO_INVALID;
		}
		n_about += ev[i].n_about;
	}
	pe = st_xcalloc(n, sizeof(*pe));
	pool = st_xcalloc(n_about ? n_about : 1, sizeof(*pool));
	for (size_t i = 0; i < n; i++) {
		const studio_event *e = &ev[i];

		pe[i].topic = (proto_str){ e->topic ? e->topic : "", len_or_strlen(e->topic, e->topic_len) };
		pe[i].about = pool + used;
		pe[i].n_about = (uint32_t)e->n_about;
		for (size_t k = 0; k < e->n_about; k++) {
			const char *a = e->about[k] ? e->about[k] : "";

			pool[used++] = (proto_str){ a, e->about_lens ? e->about_lens[k] : strlen(a) };
		}
		if (e->data != NULL) {
			pe[i].data = (proto_str){ e->data, len_or_strlen(e->data, e->data_len) };
			pe[i].has_data = true;
		}
		if (e->key != NULL) {
			pe[i].key = (proto_str){ e->key, len_or_strlen(e->key, e->key_len) };
			pe[i].has_key = true;
		} else if (keys != NULL) {
			pe[i].key = (proto_str){ keys + i * (PRODUCER_KEY_LEN + 1), PRODUCER_KEY_LEN };
			pe[i].has_key = true;
		}
	}
	st_buf_reset(out);
	proto_request_encode(out, pe, n, true);
	/* The writer's decoder, bounds and words: what it would refuse is refused here. */
	if (out->len > PROTO_MAX_REQUEST) {
		say(detail, cap, "request of %zu bytes is larger than %u", out->len, PROTO_MAX_REQUEST);
		st = STUDIO_INVALID;
	} else if (proto_request_decode(out->p, out->len, &r, why, sizeof(why)) != ST_OK) {
		say(detail, cap, "%s", why);
		st = STUDIO_INVALID;
	}
	proto_request_free(r);
	free(pe);
	free(pool);
	return st;
}

studio_status
studio_events_check(const studio_event *ev, size_t n, char *detail, size_t detail_len)
{
	st_buf b;
	studio_status st;

	st_buf_init(&b);
	st = encode_checked(ev, n, NULL, &b, detail, detail_len);
	st_buf_fini(&b);
	return st;
}

/* ---- the request's state machine --------------------------------------- */

static void op_cb(void *arg);

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
	*o->pprev = o->next;
	if (o->next != NULL)
		o->next->pprev = o->pprev;
	p->inflight--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	nng_aio_reap(o->aio); /* not nng_aio_free: we may be inside its callback */
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
}

static studio_status
op_status_at_deadline(op *o)
{
	return o->heard == HEARD_BUSY ? STUDIO_BUSY : o->heard == HEARD_UNAVAILABLE ? STUDIO_UNAVAILABLE : STUDIO_TIMEOUT;
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

/* The time left before the deadline, at most the try timeout; 0: past it. */
static nng_duration
op_left(op *o)
{
	uint64_t now = now_ms(o->p);

	if (now >= o->deadline)
		return 0;
	return (nng_duration)ST_MIN(o->deadline - now, (uint64_t)o->p->o.try_timeout_ms);
}

static void
op_send(op *o)
{
	nng_duration left;
	nng_msg *m = NULL;
	int rv;

	if (op_closing(o)) {
		op_finish(o, STUDIO_CLOSED);
		return;
	}
	if ((left = op_left(o)) == 0) {
		op_finish(o, op_status_at_deadline(o));
		return;
	}
	if (!o->ctx_open) {
		if ((rv = nng_ctx_open(&o->ctx, o->p->socks[o->url_i])) != 0) {
			say(o->detail, sizeof(o->detail), "%s: %s", o->p->urls[o->url_i], nng_strerror(rv));
			op_finish(o, rv == NNG_ECLOSED ? STUDIO_CLOSED : STUDIO_USAGE);
			return;
		}
		o->ctx_open = true;
	}
	if ((rv = nng_msg_alloc(&m, 0)) != 0 || (rv = nng_msg_append(m, o->req.p, o->req.len)) != 0) {
		nng_msg_free(m);
		say(o->detail, sizeof(o->detail), "cannot build the message: %s", nng_strerror(rv));
		op_finish(o, STUDIO_TIMEOUT);
		return;
	}
	o->st = OP_SEND;
	nng_aio_set_msg(o->aio, m);
	nng_aio_set_timeout(o->aio, left);
	nng_ctx_send(o->ctx, o->aio);
}

/* Wait, then try again: on the same URL (busy) or the next one. */
static void
op_retry(op *o, bool next_url, bool wait)
{
	nng_duration left;
	uint32_t ms;

	if (next_url) {
		op_ctx_close(o); /* a late reply to this try is dropped */
		o->url_i = (o->url_i + 1) % o->p->n_urls;
	}
	if (!wait) {
		op_send(o);
		return;
	}
	if ((left = op_left(o)) == 0) {
		op_finish(o, op_status_at_deadline(o));
		return;
	}
	if (op_closing(o)) {
		op_finish(o, STUDIO_CLOSED);
		return;
	}
	ms = st_backoff_jitter_ms(++o->attempt, o->p->o.backoff_base_ms, o->p->o.backoff_cap_ms, rand64(o->p));
	o->st = OP_WAIT;
	nng_sleep_aio((nng_duration)ST_MIN((uint64_t)ms, (uint64_t)(o->deadline - now_ms(o->p))), o->aio);
}

static void
op_on_reply(op *o, nng_msg *m)
{
	proto_reply rep;
	const char *url = o->p->urls[o->url_i];

	memset(&rep, 0, sizeof(rep));
	if (proto_reply_decode(nng_msg_body(m), nng_msg_len(m), &rep) != ST_OK) {
		nng_msg_free(m);
		say(o->detail, sizeof(o->detail), "%s sent a reply that is not an ingest reply", url);
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
		say(o->detail, sizeof(o->detail), "%s answered %zu seqs for %zu events", url, rep.n_seqs, o->n);
		proto_reply_fini(&rep);
		op_retry(o, true, true);
		return;
	}
	say(o->detail, sizeof(o->detail), "%s: %s", rep.error, rep.detail);
	if (strcmp(rep.error, "invalid") == 0) {
		proto_reply_fini(&rep);
		op_finish(o, STUDIO_INVALID);
		return;
	}
	if (strcmp(rep.error, "busy") == 0) {
		proto_reply_fini(&rep);
		o->heard = HEARD_BUSY; /* nothing stored: the same writer, after the back-off */
		op_retry(o, false, true);
		return;
	}
	/* unavailable (or a code this library does not know): the next writer */
	o->heard = HEARD_UNAVAILABLE;
	proto_reply_fini(&rep);
	op_retry(o, true, true);
}

static void
op_cb(void *arg)
{
	op *o = arg;
	int rv = nng_aio_result(o->aio);
	const char *url = o->p->urls[o->url_i];

	switch (o->st) {
	case OP_SEND:
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(o->aio)); /* still ours */
			nng_aio_set_msg(o->aio, NULL);
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish(o, STUDIO_CLOSED);
				return;
			}
			say(o->detail, sizeof(o->detail), "%s: no connection (%s)", url, nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, rv != NNG_ETIMEDOUT);
			return;
		}
		o->st = OP_RECV;
		nng_aio_set_timeout(o->aio, ST_MAX(op_left(o), 1));
		nng_ctx_recv(o->ctx, o->aio);
		return;
	case OP_RECV:
		if (rv != 0) {
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish(o, STUDIO_CLOSED);
				return;
			}
			say(o->detail, sizeof(o->detail), "no reply from %s within %u ms (%s)", url,
			    o->p->o.try_timeout_ms, nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, false);
			return;
		}
		op_on_reply(o, nng_aio_get_msg(o->aio));
		return;
	case OP_WAIT:
		if (rv != 0 && rv != NNG_ETIMEDOUT) { /* the sleep ended early: cancelled by studio_producer_free */
			op_finish(o, STUDIO_CLOSED);
			return;
		}
		op_send(o);
		return;
	}
}

/* ---- the API --------------------------------------------------------------- */

studio_status
studio_publish_async(studio_producer *p, const studio_event *ev, size_t n, uint32_t timeout_ms,
                     studio_publish_fn cb, void *arg, char *detail, size_t detail_len)
{
	char *keys = NULL;
	op *o = NULL;
	uint64_t deadline;
	studio_status st;
	int rv;

	if (p == NULL || cb == NULL || timeout_ms == 0) {
		say(detail, detail_len, "producer, callback and a timeout > 0 are required");
		return STUDIO_USAGE;
	}
	deadline = now_ms(p) + timeout_ms;
	o = st_xcalloc(1, sizeof(*o));
	st_buf_init(&o->req);
	if (!p->o.no_keys && ev != NULL && n > 0 && n <= PROTO_MAX_BATCH) {
		/* Made once, here: every try of this request carries the same keys. */
		keys = st_xmalloc(n * (PRODUCER_KEY_LEN + 1));
		for (size_t i = 0; i < n; i++)
			if (ev[i].key == NULL)
				producer_key_format(p->id, atomic_fetch_add(&p->key_n, 1),
				                    keys + i * (PRODUCER_KEY_LEN + 1));
	}
	st = encode_checked(ev, n, keys, &o->req, detail, detail_len);
	free(keys);
	if (st != STUDIO_OK)
		goto fail;
	if ((rv = nng_aio_alloc(&o->aio, op_cb, o)) != 0) {
		say(detail, detail_len, "nng_aio_alloc: %s", nng_strerror(rv));
		st = STUDIO_USAGE;
		goto fail;
	}
	o->p = p;
	o->n = n;
	o->seqs = st_xcalloc(n, sizeof(*o->seqs));
	o->cb = cb;
	o->arg = arg;
	o->deadline = deadline;
	o->url_i = atomic_load(&p->url_good) % p->n_urls;
	say(o->detail, sizeof(o->detail), "no writer answered within %u ms", timeout_ms);
	/* A slot (back-pressure on the caller), then on the list. */
	pthread_mutex_lock(&p->mu);
	while (!p->closing && p->inflight >= p->o.max_inflight) {
		uint64_t now = now_ms(p);

		if (now >= deadline)
			break;
		producer_wait_ms(p, deadline - now);
	}
	if (p->closing || p->inflight >= p->o.max_inflight) {
		st = p->closing ? STUDIO_CLOSED : STUDIO_TIMEOUT;
		pthread_mutex_unlock(&p->mu);
		say(detail, detail_len, "%s", st == STUDIO_CLOSED ? "the producer is closing" : "no free slot in time");
		goto fail;
	}
	p->inflight++;
	o->next = p->ops;
	if (o->next != NULL)
		o->next->pprev = &o->next;
	o->pprev = &p->ops;
	p->ops = o;
	pthread_mutex_unlock(&p->mu);
	op_send(o);
	return STUDIO_OK;
fail:
	if (o->aio != NULL)
		nng_aio_free(o->aio);
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
	return st;
}

/* The synchronous call waits on one of these. */
typedef struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	studio_status st;
	uint64_t *seqs_out;
	char *detail;
	size_t detail_len;
} waiter;

static void
waiter_cb(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	if (st == STUDIO_OK && w->seqs_out != NULL)
		memcpy(w->seqs_out, seqs, n * sizeof(*seqs));
	if (st != STUDIO_OK)
		say(w->detail, w->detail_len, "%s", detail);
	w->st = st;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

studio_status
studio_publish(studio_producer *p, const studio_event *ev, size_t n, uint64_t *seqs_out, uint32_t timeout_ms,
               char *detail, size_t detail_len)
{
	waiter w = { .seqs_out = seqs_out, .detail = detail, .detail_len = detail_len };
	studio_status st;

	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	st = studio_publish_async(p, ev, n, timeout_ms, waiter_cb, &w, detail, detail_len);
	if (st == STUDIO_OK) {
		pthread_mutex_lock(&w.mu);
		while (!w.done)
			pthread_cond_wait(&w.cv, &w.mu);
		st = w.st;
		pthread_mutex_unlock(&w.mu);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return st;
}

static studio_status
options_fill(studio_producer_options *o, const studio_producer_options *given, char *err, size_t cap)
{
	if (given != NULL)
		*o = *given;
	else
		memset(o, 0, sizeof(*o));
	if (o->try_timeout_ms == 0)
		o->try_timeout_ms = DEFAULT_TRY_TIMEOUT_MS;
	if (o->backoff_base_ms == 0)
		o->backoff_base_ms = DEFAULT_BACKOFF_BASE_MS;
	if (o->backoff_cap_ms == 0)
		o->backoff_cap_ms = DEFAULT_BACKOFF_CAP_MS;
	if (o->max_inflight == 0)
		o->max_inflight = DEFAULT_MAX_INFLIGHT;
	if (o->clock_ms == NULL)
		o->clock_ms = mono_ms;
	if (o->backoff_cap_ms < o->backoff_base_ms) {
		say(err, cap, "backoff_cap_ms %u is below backoff_base_ms %u", o->backoff_cap_ms, o->backoff_base_ms);
		return STUDIO_USAGE;
	}
	return STUDIO_OK;
}

studio_status
studio_producer_new(const char *urls, const studio_producer_options *opt, studio_producer **out, char *err,
                    size_t err_len)
{
	studio_producer *p = NULL;
	const char *cur = urls, *item;
	size_t len, n = 0;
	char why[400];
	studio_status st = STUDIO_USAGE;
	int rv;

	*out = NULL;
	if (urls == NULL) {
		say(err, err_len, "no writer URL");
		return STUDIO_USAGE;
	}
	p = st_xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if ((st = options_fill(&p->o, opt, err, err_len)) != STUDIO_OK)
		goto fail;
	st = STUDIO_USAGE;
	p->o.tls_ca = p->o.tls_cert = p->o.tls_key = NULL; /* loaded below, not kept */
	if (opt != NULL && (opt->tls_ca || opt->tls_cert || opt->tls_key) &&
	    st_tls_load(opt->tls_cert, opt->tls_key, opt->tls_ca, why, sizeof(why)) != ST_OK) {
		say(err, err_len, "%s", why);
		goto fail;
	}
	p->socks = st_xcalloc(MAX_URLS, sizeof(*p->socks));
	p->urls = st_xcalloc(MAX_URLS, sizeof(*p->urls));
	while (st_list_next(&cur, &item, &len)) {
		nng_socket s = NNG_SOCKET_INITIALIZER;
		char *url;

		if (n == MAX_URLS) {
			say(err, err_len, "more than %d writer URLs", MAX_URLS);
			goto fail;
		}
		url = st_xstrndup(item, len);
		p->urls[n] = url;
		rv = nng_req0_open(&s);
		p->socks[n++] = s; /* freed with p even when it failed (closing id 0 is a no-op) */
		if (rv != 0) {
			say(err, err_len, "cannot open a req0 socket: %s", nng_strerror(rv));
			goto fail;
		}
		nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, MAX_REPLY);
		nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
		nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 2000);
		/* Our own tries resend (with a new context); nng's timer would only add copies. */
		nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
		if (st_tls_url(url) && st_tls_url_usable(url, false) != NULL) {
			say(err, err_len, "%s: %s", url, st_tls_url_usable(url, false));
			goto fail;
		}
		/* In the background: a writer that is not up yet is dialed again and again. */
		if ((rv = st_tls_dial(s, url, NNG_FLAG_NONBLOCK)) != 0) {
			say(err, err_len, "bad writer URL \"%s\": %s", url, nng_strerror(rv));
			goto fail;
		}
	}
	if (n == 0) {
		say(err, err_len, "no writer URL in \"%s\"", urls);
		goto fail;
	}
	p->n_urls = n;
	if (p->o.random64 != NULL) {
		uint64_t a = p->o.random64(p->o.test_arg), b = p->o.random64(p->o.test_arg);

		memcpy(p->id, &a, 8);
		memcpy(p->id + 8, &b, 8);
	} else if (getrandom(p->id, sizeof(p->id), 0) != (ssize_t)sizeof(p->id)) {
		say(err, err_len, "getrandom: %s", strerror(errno));
		goto fail;
	}
	{
		uint64_t seed;

		memcpy(&seed, p->id, sizeof(seed));
		atomic_store(&p->rng, seed);
	}
	*out = p;
	return STUDIO_OK;
fail:
	p->n_urls = n;
	studio_producer_free(p);
	return st;
}

void
studio_producer_free(studio_producer *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->closing = true;
	pthread_mutex_unlock(&p->mu);
	/* Closed sockets end every send and receive with NNG_ECLOSED. */
	for (size_t i = 0; i < p->n_urls; i++)
		nng_close(p->socks[i]);
	/* Sleeping ops are not on a socket: cancel them, again until none is left
	 * (one may start its sleep right after a round). */
	pthread_mutex_lock(&p->mu);
	while (p->inflight > 0) {
		for (op *o = p->ops; o != NULL; o = o->next)
			nng_aio_cancel(o->aio);
		producer_wait_ms(p, 50);
	}
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < p->n_urls; i++)
		free(p->urls[i]);
	free(p->urls);
	free(p->socks);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
