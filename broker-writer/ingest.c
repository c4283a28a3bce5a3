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

#include <stdatomic.h>
#include <stdlib.h>

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
};

static void
work_send(ingest_work *w, st_buf *b)
{
	nng_msg *m = NULL;
	int rv;

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
	free(in);
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
