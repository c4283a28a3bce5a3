/*
 * libstudio-producer (studio_producer.h): the producer, its life and its
 * calls.
 *
 * DESIGN
 * A producer owns one nng req0 socket per writer URL (dial.c: each with
 * its own dialer, dialing in the background, and its own TLS
 * configuration) and a set of requests in flight.  A call checks and
 * encodes its events once, on the caller's thread, by the writer's own
 * code (request.c), then one state machine per request sends it, waits
 * for the answer and retries on nng's threads (op.c, DESIGN there).  This
 * file holds what is the producer's: making and freeing it, the calls
 * that wait (studio_publish, studio_producer_flush) and the count of
 * calls inside.
 *
 * The modules of the library, and their arrows (one way):
 *     producer.c -> op.c -> request.c (proto/wire.c)
 *     producer.c -> dial.c, options.c;   every module -> detail.c
 * op.c reads the producer's fields through producer_int.h (the layout)
 * and calls nothing here.
 *
 * Ownership: every API call that may block on p counts itself in p->users
 * (under mu), and free waits for that count to drop to zero before p is
 * gone, so a thread waiting for a slot, a reply or a flush wakes to a live
 * producer (and returns CLOSED).  Free closes the sockets (every send and
 * receive ends NNG_ECLOSED), cancels the sleeping requests (op_cancel_all)
 * and waits until every callback has returned.
 *
 * Memory: out of memory is STUDIO_NOMEM, never an abort of the host
 * program: the library allocates with st_try_* only, and calls only the
 * fallible forms of the shared encoder and decoder (proto_request_try_encode,
 * proto_request_try_decode, proto_reply_try_decode; st_buf_try_*).
 */
#include "studio_producer.h"

#include <errno.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "detail.h"
#include "dial.h"
#include "op.h"
#include "options.h"
#include "producer_int.h"
#include "st_util.h"

#define LIB_VERSION "1.0.0"
#define MAX_URLS 64

/* ---- small parts -------------------------------------------------------- */

const char *
studio_version(void)
{
	return LIB_VERSION;
}

const char *
studio_status_str(studio_status st)
{
	static const char *const names[] = { "ok",     "invalid", "busy", "unavailable", "timeout",
					     "closed", "usage",   "full", "nomem" };

	return (unsigned)st < ST_ARRAY_LEN(names) ? names[st] : "unknown";
}

size_t
producer_slot_waiters(studio_producer *p)
{
	size_t n;

	pthread_mutex_lock(&p->mu);
	n = p->slot_waiters;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* ---- the API --------------------------------------------------------------- */

/* Counts a call that may wait on p; false (CLOSED) once free has begun. */
static bool
producer_enter(studio_producer *p)
{
	bool ok;

	pthread_mutex_lock(&p->mu);
	ok = !p->closing;
	if (ok)
		p->users++;
	pthread_mutex_unlock(&p->mu);
	return ok;
}

static void
producer_leave(studio_producer *p)
{
	pthread_mutex_lock(&p->mu);
	p->users--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

studio_status
studio_publish_async(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint32_t timeout_ms,
		     unsigned flags, studio_publish_fn cb, void *arg, char *detail, size_t detail_len)
{
	studio_status st;

	if (p == NULL || cb == NULL || timeout_ms == 0) {
		detail_say(detail, detail_len, "producer, callback and a timeout > 0 are required");
		return STUDIO_USAGE;
	}
	if (!producer_enter(p)) {
		detail_say(detail, detail_len, "the producer is being freed; nothing was sent");
		return STUDIO_CLOSED;
	}
	st = op_start(p, ev, n, key_base, timeout_ms, flags, cb, arg, detail, detail_len);
	producer_leave(p);
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
		detail_say(w->detail, w->detail_len, "%s", detail);
	w->st = st;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

studio_status
studio_publish(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint64_t *seqs_out,
	       uint32_t timeout_ms, char *detail, size_t detail_len)
{
	waiter w = { .seqs_out = seqs_out, .detail = detail, .detail_len = detail_len };
	studio_status st;

	if (p == NULL || timeout_ms == 0) {
		detail_say(detail, detail_len, "producer and a timeout > 0 are required");
		return STUDIO_USAGE;
	}
	if (!producer_enter(p)) {
		detail_say(detail, detail_len, "the producer is being freed; nothing was sent");
		return STUDIO_CLOSED;
	}
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	st = op_start(p, ev, n, key_base, timeout_ms, 0, waiter_cb, &w, detail, detail_len);
	if (st == STUDIO_OK) {
		pthread_mutex_lock(&w.mu);
		while (!w.done)
			pthread_cond_wait(&w.cv, &w.mu);
		st = w.st;
		pthread_mutex_unlock(&w.mu);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	producer_leave(p);
	return st;
}

studio_status
studio_producer_flush(studio_producer *p, uint32_t timeout_ms)
{
	uint64_t deadline;
	studio_status st;

	if (p == NULL)
		return STUDIO_USAGE;
	if (!producer_enter(p))
		return STUDIO_CLOSED;
	deadline = producer_now_ms(p) + timeout_ms;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		uint64_t now = producer_now_ms(p);

		if (p->inflight == 0 || p->closing || now >= deadline)
			break;
		producer_wait_ms(p, deadline - now);
	}
	st = p->inflight == 0 ? STUDIO_OK : p->closing ? STUDIO_CLOSED : STUDIO_TIMEOUT;
	pthread_mutex_unlock(&p->mu);
	producer_leave(p);
	return st;
}

studio_status
studio_producer_new(const char *urls, const studio_options *opt, studio_producer **out, char *err, size_t err_len)
{
	studio_producer *p = NULL;
	pthread_condattr_t ca;
	const char *cur = urls, *item;
	dial_tls t = { 0 };
	size_t len, n = 0;
	studio_status st = STUDIO_USAGE;

	if (out == NULL) {
		detail_say(err, err_len, "out (where the producer goes) is NULL");
		return STUDIO_USAGE;
	}
	*out = NULL;
	if (urls == NULL) {
		detail_say(err, err_len, "no writer URL");
		return STUDIO_USAGE;
	}
	if ((p = st_try_calloc(1, sizeof(*p))) == NULL) {
		detail_say(err, err_len, "out of memory");
		return STUDIO_NOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	st_dlist_init(&p->ops);
	if (opt != NULL)
		p->o = *opt;
	else
		options_defaults(&p->o);
	p->o.tls_ca = p->o.tls_cert = p->o.tls_key = NULL; /* read below, not kept */
	p->o.token = NULL;
	if (opt != NULL && opt->token != NULL && (p->o.token = strdup(opt->token)) == NULL) {
		detail_say(err, err_len, "out of memory");
		st = STUDIO_NOMEM;
		goto fail;
	}
	if (p->o.backoff_cap_ms < p->o.backoff_base_ms) {
		detail_say(err, err_len, "option backoff_cap_ms %u is below backoff_base_ms %u", p->o.backoff_cap_ms,
			   p->o.backoff_base_ms);
		goto fail;
	}
	if ((st = dial_tls_load(opt, &t, err, err_len)) != STUDIO_OK)
		goto fail;
	st = STUDIO_NOMEM;
	if ((p->socks = st_try_calloc(MAX_URLS, sizeof(*p->socks))) == NULL ||
	    (p->urls = st_try_calloc(MAX_URLS, sizeof(*p->urls))) == NULL) {
		detail_say(err, err_len, "out of memory");
		goto fail;
	}
	st = STUDIO_USAGE;
	while (st_list_next(&cur, &item, &len)) {
		char *url;

		if (n == MAX_URLS) {
			detail_say(err, err_len, "more than %d writer URLs", MAX_URLS);
			st = STUDIO_USAGE;
			goto fail;
		}
		if ((url = st_try_strndup(item, len)) == NULL) {
			detail_say(err, err_len, "out of memory");
			st = STUDIO_NOMEM;
			goto fail;
		}
		p->urls[n] = url;
		/* counted before it can fail: the socket is closed with p whatever dial_open says */
		if ((st = dial_open(&p->socks[n++], url, &t, err, err_len)) != STUDIO_OK)
			goto fail;
	}
	st = STUDIO_USAGE;
	if (n == 0) {
		detail_say(err, err_len, "no writer URL in \"%s\"", urls);
		goto fail;
	}
	p->n_urls = n;
	if (p->o.random64 != NULL) {
		uint64_t a = p->o.random64(p->o.test_arg), b = p->o.random64(p->o.test_arg);

		memcpy(p->id, &a, 8);
		memcpy(p->id + 8, &b, 8);
	} else if (getrandom(p->id, sizeof(p->id), 0) != (ssize_t)sizeof(p->id)) {
		detail_say(err, err_len, "getrandom: %s", strerror(errno));
		goto fail;
	}
	{
		uint64_t seed;

		memcpy(&seed, p->id, sizeof(seed));
		atomic_store(&p->rng, seed);
	}
	dial_tls_fini(&t);
	*out = p;
	return STUDIO_OK;
fail:
	dial_tls_fini(&t);
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
	pthread_cond_broadcast(&p->cv); /* slot waiters and flushes return CLOSED */
	pthread_mutex_unlock(&p->mu);
	/* Closed sockets end every send and receive with NNG_ECLOSED. */
	for (size_t i = 0; i < p->n_urls; i++)
		nng_close(p->socks[i]);
	/* Sleeping ops are not on a socket: cancel them, again until none is left
	 * (one may start its sleep right after a round).  Then wait for every
	 * call still inside (a waiter wakes, sees closing and leaves). */
	pthread_mutex_lock(&p->mu);
	while (p->inflight > 0 || p->users > 0) {
		op_cancel_all(p);
		producer_wait_ms(p, 50);
	}
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; p->urls != NULL && i < p->n_urls; i++)
		free(p->urls[i]);
	free(p->urls);
	free(p->socks);
	free(p->o.token);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
