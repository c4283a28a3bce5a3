/*
 * publish: encode with proto_pub_*_encode into one reusable st_buf, copy into
 * an nng message, send without blocking.  A send that fails (only when the
 * socket is closing, or out of memory) is logged and dropped: publishing is
 * best effort by design, and the edges detect the hole through prev.
 *
 * The size of a message is estimated before encoding (the encoder's own
 * framing is a few bytes per field), so a split never has to re-encode.
 */
#include "publish.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>

#include "st_buf.h"
#include "st_log.h"
#include "st_tls.h"
#include "st_util.h"

struct publish {
	nng_socket sock;
	bool open;
	char *writer;
	st_buf buf;
	atomic_uint pipes;
	atomic_bool pipes_warned;
};

/* nng thread: counts subscriber connections, closes those past the cap (only atomics and nng_pipe_close here). */
static void
pipe_cb(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
	publish *p = arg;

	if (ev == NNG_PIPE_EV_REM_POST) {
		atomic_fetch_sub(&p->pipes, 1);
		return;
	}
	if (atomic_fetch_add(&p->pipes, 1) >= PUBLISH_MAX_SUBSCRIBERS) {
		if (!atomic_exchange(&p->pipes_warned, true))
			st_warn("publish: more than %u subscriber connections; closing the new ones (logged once)",
				PUBLISH_MAX_SUBSCRIBERS);
		nng_pipe_close(pipe);
	}
}

st_err
publish_new(const char *url, const char *writer, publish **out)
{
	publish *p = st_xcalloc(1, sizeof(*p));
	int rv;

	st_buf_init(&p->buf);
	ST_ASSERT(strlen(writer) <= 255);
	p->writer = st_xstrdup(writer);
	atomic_init(&p->pipes, 0);
	atomic_init(&p->pipes_warned, false);
	if ((rv = nng_pub0_open(&p->sock)) != 0) {
		st_error("publish: cannot open pub0: %s", nng_strerror(rv));
		goto fail;
	}
	p->open = true;
	if ((rv = nng_socket_set_int(p->sock, NNG_OPT_SENDBUF, PUBLISH_SENDBUF)) != 0 ||
	    (rv = nng_pipe_notify(p->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, p)) != 0 ||
	    (rv = nng_pipe_notify(p->sock, NNG_PIPE_EV_REM_POST, pipe_cb, p)) != 0) {
		st_error("publish: socket options: %s", nng_strerror(rv));
		goto fail;
	}
	if ((rv = st_tls_listen(p->sock, url, ST_TLS_PUBLISH)) != 0) {
		st_error("publish: cannot listen on %s: %s", url, nng_strerror(rv));
		publish_free(p);
		return rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? ST_EINVAL : ST_ESYS;
	}
	*out = p;
	return ST_OK;
fail:
	publish_free(p);
	return ST_ESYS;
}

void
publish_free(publish *p)
{
	if (p == NULL)
		return;
	if (p->open)
		nng_close(p->sock);
	st_buf_fini(&p->buf);
	free(p->writer);
	free(p);
}

static size_t
event_size(const proto_pub_event *e)
{
	size_t n = 48 + e->topic.len + (e->has_data ? e->data.len : 0);

	for (uint32_t i = 0; i < e->n_about; i++)
		n += 5 + e->about[i].len;
	return n;
}

size_t
publish_split(const proto_pub_event *ev, size_t n)
{
	size_t bytes = 0, i;

	for (i = 0; i < n && i < PUBLISH_MAX_EVENTS; i++) {
		size_t sz = event_size(&ev[i]);
		if (i > 0 && bytes + sz > PUBLISH_MAX_BYTES)
			break;
		bytes += sz;
	}
	return i;
}

static void
send_buf(publish *p)
{
	nng_msg *m = NULL;
	int rv;

	/* the memory arithmetic counts on it (publish_split's estimate is an upper bound) */
	ST_ASSERT(p->buf.len <= PUBLISH_MSG_MAX);
	if ((rv = nng_msg_alloc(&m, p->buf.len)) != 0) {
		st_warn("publish: message dropped: %s", nng_strerror(rv));
		return;
	}
	memcpy(nng_msg_body(m), p->buf.p, p->buf.len);
	if ((rv = nng_sendmsg(p->sock, m, NNG_FLAG_NONBLOCK)) != 0) {
		nng_msg_free(m); /* still ours on failure */
		st_warn("publish: message dropped: %s", nng_strerror(rv));
	}
}

size_t
publish_batch(publish *p, uint64_t prev, const proto_pub_event *ev, size_t n)
{
	size_t sent = 0;

	while (n > 0) {
		size_t k = publish_split(ev, n);
		st_buf_reset(&p->buf);
		proto_pub_batch_encode(&p->buf, p->writer, prev, ev, k);
		send_buf(p);
		prev = ev[k - 1].seq;
		ev += k;
		n -= k;
		sent++;
	}
	return sent;
}

void
publish_tick(publish *p, uint64_t head)
{
	st_buf_reset(&p->buf);
	proto_pub_tick_encode(&p->buf, p->writer, head);
	send_buf(p);
}

/* Every message the writer publishes must fit an edge's receive limit. */
_Static_assert(PUBLISH_MAX_BYTES + 4096 <= PROTO_MAX_PUB && PROTO_MAX_PUB_EVENT + 4096 <= PROTO_MAX_PUB,
	       "a published message could exceed PROTO_MAX_PUB");
