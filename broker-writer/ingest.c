/*
 * ingest: n_ctx rep0 contexts, each one nng_aio plus a state (nng's
 * demo/async/server.c pattern, PITFALLS.md section 1).
 *
 *   RECV: nng_ctx_recv outstanding.  On completion the request is decoded
 *         right here, on the nng thread: decoding is bounded (16 MiB, every
 *         count checked against the bytes left), and refusing garbage here
 *         keeps it off the loop.
 *   WAIT: handed to the loop through the mailbox; the loop owns it until it
 *         calls ingest_reply_*.
 *   SEND: the reply is outstanding; on completion (or failure: the reply
 *         message is still ours and freed) the context receives again.
 *
 * Teardown closes the socket first (every outstanding aio completes with
 * NNG_ECLOSED and the callbacks stop re-arming), then nng_aio_stop waits for
 * each callback, then the mailbox is freed with `closing` set, so items it
 * still holds are ignored: their works are freed from the works array.
 */
#include "ingest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "st_buf.h"
#include "st_log.h"
#include "st_mailbox.h"
#include "st_util.h"

enum work_state { W_RECV, W_WAIT, W_SEND };


struct ingest_work {
	ingest *in;
	nng_aio *aio;
	nng_ctx ctx;
	enum work_state st;
	nng_msg *msg;        /* the request message (WAIT), keeps req's strings alive */
	proto_request *req;
	/*
	 * Under in->mu: the request this work waits with, to spot REQ resends.
	 * rep0 keeps the request id to itself (contexts get no header), and a
	 * resend is the same bytes on the same pipe, so pipe + length + hash of
	 * the body name it.
	 */
	bool keyed;
	uint32_t pipe;
	size_t body_len;
	uint64_t body_hash;
};

struct ingest {
	nng_socket sock;
	bool open;
	st_mailbox *mb;
	ingest_work *works;
	size_t n_works;
	st_counter *invalid;
	ingest_request_fn fn;
	void *arg;
	atomic_bool closing;
	pthread_mutex_t mu;          /* the works' keys */
	atomic_size_t waiting;       /* works in WAIT */
	_Atomic(const char *) refuse; /* set by the loop: answer "unavailable" with this detail */
	st_counter *refused, *refused_unavail; /* refusals answered by the reserve */
};

/*
 * A REQ resends a request it has no answer for (after NNG_OPT_REQ_RESENDTIME,
 * 60 s by default, on the same pipe).  A resend of a request that waits for
 * its commit must not become a second request: it would be stored twice, or
 * refused while the original commits.  It is dropped; the original's reply
 * carries the same request id and answers it.  (Two different requests
 * with identical bytes from one requester at once: the second waits for the
 * first's answer, then its own resend goes through.)  Returns true when m
 * is such a resend.  Otherwise, with keep, records m's key for w.
 */
static bool
resend_or_key(ingest_work *w, nng_msg *m, bool keep)
{
	ingest *in = w->in;
	uint32_t pipe = nng_pipe_id(nng_msg_get_pipe(m));
	size_t len = nng_msg_len(m);
	uint64_t hash = st_hash_bytes(nng_msg_body(m), len);
	bool dup = false;

	pthread_mutex_lock(&in->mu);
	for (size_t i = 0; i < in->n_works && !dup; i++) {
		const ingest_work *o = &in->works[i];

		dup = o->keyed && o->pipe == pipe && o->body_len == len && o->body_hash == hash;
	}
	if (!dup && keep) {
		w->keyed = true;
		w->pipe = pipe;
		w->body_len = len;
		w->body_hash = hash;
	}
	pthread_mutex_unlock(&in->mu);
	return dup;
}

static void
unkey(ingest_work *w)
{
	pthread_mutex_lock(&w->in->mu);
	w->keyed = false;
	pthread_mutex_unlock(&w->in->mu);
}

static void
work_send(ingest_work *w, st_buf *b)
{
	nng_msg *m = NULL;
	int rv;

	if (w->st == W_WAIT) {
		unkey(w);
		atomic_fetch_sub(&w->in->waiting, 1);
	}
	proto_request_free(w->req);
	w->req = NULL;
	if (w->msg != NULL) {
		nng_msg_free(w->msg);
		w->msg = NULL;
	}
	if ((rv = nng_msg_alloc(&m, 0)) != 0 || (rv = nng_msg_append(m, b->p, b->len)) != 0) {
		/* no memory for a reply: drop it, the producer resends after its timeout */
		if (m != NULL)
			nng_msg_free(m);
		st_warn("ingest: reply dropped: %s", nng_strerror(rv));
		w->st = W_RECV;
		nng_ctx_recv(w->ctx, w->aio);
		return;
	}
	w->st = W_SEND;
	nng_aio_set_msg(w->aio, m);
	nng_ctx_send(w->ctx, w->aio);
}

static void
work_cb(void *arg)
{
	ingest_work *w = arg;
	ingest *in = w->in;
	int rv = nng_aio_result(w->aio);
	char detail[256];

	switch (w->st) {
	case W_RECV:
		if (rv != 0) {
			if (rv == NNG_ECLOSED || atomic_load(&in->closing))
				return;
			nng_ctx_recv(w->ctx, w->aio);
			return;
		}
		w->msg = nng_aio_get_msg(w->aio);
		nng_aio_set_msg(w->aio, NULL);
		if (resend_or_key(w, w->msg, false)) {
			nng_msg_free(w->msg);
			w->msg = NULL;
			nng_ctx_recv(w->ctx, w->aio);
			return;
		}
		detail[0] = '\0';
		if (proto_request_decode(nng_msg_body(w->msg), nng_msg_len(w->msg), &w->req, detail, sizeof(detail)) !=
		    ST_OK) {
			st_buf b;
			w->req = NULL;
			st_counter_inc(in->invalid);
			st_buf_init(&b);
			proto_reply_err_encode(&b, "invalid", detail[0] ? detail : "malformed request");
			work_send(w, &b);
			st_buf_fini(&b);
			return;
		}
		if (atomic_load(&in->waiting) + INGEST_RESERVE >= in->n_works || atomic_load(&in->refuse) != NULL) {
			/*
			 * The reserve: every other context waits for a commit (or the
			 * loop refuses everything anyway).  Answer here, so a producer
			 * always hears back, even while the database is down.
			 */
			const char *why = atomic_load(&in->refuse);
			st_buf b;

			proto_request_free(w->req);
			w->req = NULL;
			st_buf_init(&b);
			proto_reply_err_encode(&b, why ? "unavailable" : "busy",
			                       why ? why : "every request slot waits for a commit; retry later");
			work_send(w, &b);
			st_buf_fini(&b);
			if (in->refused)
				st_counter_inc(why ? in->refused_unavail : in->refused);
			return;
		}
		if (resend_or_key(w, w->msg, true)) {
			/* the same request arrived on another context meanwhile */
			proto_request_free(w->req);
			w->req = NULL;
			nng_msg_free(w->msg);
			w->msg = NULL;
			nng_ctx_recv(w->ctx, w->aio);
			return;
		}
		atomic_fetch_add(&in->waiting, 1);
		w->st = W_WAIT;
		st_mailbox_post(in->mb, w);
		return;
	case W_SEND:
		if (rv != 0) {
			nng_msg *m = nng_aio_get_msg(w->aio);
			nng_aio_set_msg(w->aio, NULL);
			if (m != NULL)
				nng_msg_free(m);
			if (rv == NNG_ECLOSED || atomic_load(&in->closing))
				return;
		}
		w->st = W_RECV;
		nng_ctx_recv(w->ctx, w->aio);
		return;
	case W_WAIT:
		return; /* no aio is outstanding while the loop owns the work */
	}
}

static void
mailbox_cb(void *item, void *arg)
{
	ingest *in = arg;
	ingest_work *w = item;

	if (atomic_load(&in->closing))
		return;
	in->fn(w, w->req, in->arg);
}

st_err
ingest_new(struct event_base *base, const char *url, size_t n_ctx, st_counter *invalid, ingest_request_fn fn,
           void *arg, ingest **out)
{
	ingest *in = st_xcalloc(1, sizeof(*in));
	st_err err = ST_ESYS;
	int rv;

	ST_ASSERT(n_ctx >= 1);
	in->invalid = invalid;
	in->fn = fn;
	in->arg = arg;
	atomic_init(&in->closing, false);
	atomic_init(&in->waiting, 0);
	atomic_init(&in->refuse, NULL);
	pthread_mutex_init(&in->mu, NULL);
	if ((in->mb = st_mailbox_new(base, mailbox_cb, in)) == NULL)
		goto fail;
	if ((rv = nng_rep0_open(&in->sock)) != 0) {
		st_error("ingest: cannot open rep0: %s", nng_strerror(rv));
		goto fail;
	}
	in->open = true;
	if ((rv = nng_socket_set_size(in->sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_REQUEST)) != 0) {
		st_error("ingest: NNG_OPT_RECVMAXSZ: %s", nng_strerror(rv));
		goto fail;
	}
	in->works = st_xcalloc(n_ctx, sizeof(*in->works));
	for (size_t i = 0; i < n_ctx; i++) {
		ingest_work *w = &in->works[i];
		w->in = in;
		if ((rv = nng_aio_alloc(&w->aio, work_cb, w)) != 0 || (rv = nng_ctx_open(&w->ctx, in->sock)) != 0) {
			st_error("ingest: cannot set up context %zu: %s", i, nng_strerror(rv));
			goto fail;
		}
		in->n_works = i + 1;
	}
	if ((rv = nng_listen(in->sock, url, NULL, 0)) != 0) {
		st_error("ingest: cannot listen on %s: %s", url, nng_strerror(rv));
		err = rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? ST_EINVAL : ST_ESYS;
		goto fail;
	}
	for (size_t i = 0; i < n_ctx; i++) {
		in->works[i].st = W_RECV;
		nng_ctx_recv(in->works[i].ctx, in->works[i].aio);
	}
	*out = in;
	return ST_OK;
fail:
	/* a half-built context (aio allocated, ctx not) must be freed too */
	if (in->works != NULL && in->n_works < n_ctx && in->works[in->n_works].aio != NULL)
		in->n_works++;
	ingest_free(in);
	return err;
}

void
ingest_free(ingest *in)
{
	if (in == NULL)
		return;
	atomic_store(&in->closing, true);
	if (in->open)
		nng_close(in->sock);
	for (size_t i = 0; i < in->n_works; i++)
		if (in->works[i].aio != NULL)
			nng_aio_stop(in->works[i].aio);
	st_mailbox_free(in->mb);
	for (size_t i = 0; i < in->n_works; i++) {
		ingest_work *w = &in->works[i];
		nng_msg *m = w->aio != NULL ? nng_aio_get_msg(w->aio) : NULL;
		if (m != NULL)
			nng_msg_free(m);
		proto_request_free(w->req);
		if (w->msg != NULL)
			nng_msg_free(w->msg);
		if (w->aio != NULL)
			nng_aio_free(w->aio);
	}
	free(in->works);
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
ingest_reply_ok(ingest_work *w, const uint64_t *seqs, size_t n)
{
	st_buf b;

	st_buf_init(&b);
	proto_reply_ok_encode(&b, seqs, n);
	work_send(w, &b);
	st_buf_fini(&b);
}

void
ingest_reply_err(ingest_work *w, const char *code, const char *detail)
{
	st_buf b;

	st_buf_init(&b);
	proto_reply_err_encode(&b, code, detail);
	work_send(w, &b);
	st_buf_fini(&b);
}
