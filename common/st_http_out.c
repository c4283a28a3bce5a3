/*
 * st_http_out: the stream output path of st_http - direct writes with
 * EV_WRITE off, the server's outq written once per loop turn, the
 * zero-copy writev of http_stream_write_refs, the backlog, the low
 * watermark, the blocked time and the delivery latency.  The connection
 * it writes to is st_http.c's (st_http_internal.h); this module never
 * closes or frees one: a write failure it meets is met again by the
 * stream's write event (st_http.c http_conn_stream_write_cb), which closes.
 * A stream has no bufferevent (http_out_adopt): its output evbuffer exists
 * only while bytes wait, so an idle stream holds none.
 */
#include "st_http_out.h"

#include "st_metrics.h"
#include "st_util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

void
http_out_leave(http_stream *c)
{
	st_dlink_unlink(&c->lk[L_OUT]);
}

/*
 * The stream output path.  A bufferevent writes only from its EV_WRITE
 * callback, so every burst would cost an epoll_ctl to arm the event, a
 * wake-up and another epoll_ctl to disarm it once the output is empty
 * (the profile of 10,000 streams showed those beside writev as the top
 * cost).  Streams therefore keep EV_WRITE off while their output is
 * empty and write themselves: bytes queued in a loop turn are written with
 * one writev at the end of the turn (http_conn_defer_cb), or earlier by
 * http_stream_flush.  Only when the kernel refuses bytes is the stream's
 * write event armed (http_out_arm), and it writes until the output is
 * empty again (st_http.c http_conn_stream_write_cb).  A write error also
 * hands over to it: it meets the same error and closes.
 */
void
http_out_observe(http_stream *c)
{
	if (c->origin_ns != 0 && c->srv->delivery) {
		uint64_t now = st_clock_mono_ns();

		st_histogram_observe(c->srv->delivery, now > c->origin_ns ? (double)(now - c->origin_ns) / 1e9 : 0.0);
	}
	c->origin_ns = 0;
}

/*
 * A bufferevent keeps its output frozen at the start so that only its own
 * write callback drains it (evbuffer_write on it fails at once); it thaws
 * the buffer around its own writes, and so do we.
 */
static void
out_write_fd(http_stream *c, struct evbuffer *out)
{
	if (!c->bev) {
		(void)evbuffer_write(out, c->fd);
		return;
	}
	evbuffer_unfreeze(out, 1);
	(void)evbuffer_write(out, bufferevent_getfd(c->bev));
	evbuffer_freeze(out, 1);
}

struct evbuffer *
http_out_buf(const http_stream *c)
{
	return c->bev ? bufferevent_get_output(c->bev) : c->out;
}

size_t
http_out_len(const http_stream *c)
{
	struct evbuffer *out = http_out_buf(c);

	return out ? evbuffer_get_length(out) : 0;
}

/* The output to queue bytes on: a stream's own is made here when it has none. */
static struct evbuffer *
out_get(http_stream *c)
{
	if (c->bev)
		return bufferevent_get_output(c->bev);
	if (!c->out) {
		c->out = evbuffer_new();
		ST_ASSERT(c->out != NULL);
		/* progress_ms: bytes arrive on an empty output, or leave it. */
		ST_ASSERT(evbuffer_add_cb(c->out, http_out_progress_cb, c) != NULL);
	}
	return c->out;
}

void
http_out_release(http_stream *c)
{
	if (!c->bev && c->out && evbuffer_get_length(c->out) == 0) {
		evbuffer_free(c->out);
		c->out = NULL;
	}
}

void
http_out_arm(http_stream *c)
{
	if (!c->wev) {
		c->wev = event_new(c->srv->base, c->fd, EV_WRITE | EV_PERSIST, http_conn_stream_write_cb, c);
		ST_ASSERT(c->wev != NULL);
	}
	event_add(c->wev, NULL);
}

void
http_out_adopt(http_stream *c)
{
	struct bufferevent *bev = c->bev;
	struct evbuffer *bo = bufferevent_get_output(bev);

	c->fd = bufferevent_getfd(bev);
	bufferevent_disable(bev, EV_READ | EV_WRITE);
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	/* The socket is ours now: the bufferevent lets go of it (and thaws its output). */
	bufferevent_setfd(bev, -1);
	c->bev = NULL;
	if (evbuffer_get_length(bo) > 0)
		evbuffer_add_buffer(out_get(c), bo);
	bufferevent_free(bev);
	event_assign(&c->rev, c->srv->base, c->fd, EV_READ | EV_PERSIST, http_conn_stream_read_cb, c);
	event_add(&c->rev, NULL);
}

/* The kernel refused bytes: the write event waits for room and calls
 * on_writable once under the low watermark. */
static void
out_block(http_stream *c)
{
	if (!c->direct || c->closing || c->state != ST_STREAM)
		return;
	http_out_leave(c);
	c->direct = false;
	if (c->bev)
		bufferevent_enable(c->bev, EV_WRITE);
	else
		http_out_arm(c);
}

static size_t
total_len(const http_ref *refs, size_t n)
{
	size_t t = 0;

	for (size_t i = 0; i < n; i++)
		t += refs[i].len;
	return t;
}

/*
 * notify: called from http_conn_defer_cb, not under the user's own write: a writer
 * that stopped at the low watermark without flushing hears on_writable
 * once its bytes are out, as it would from the write event.
 */
void
http_out_write(http_stream *c, bool notify)
{
	struct evbuffer *out;
	size_t before;

	if (c->closing || c->state != ST_STREAM || !c->direct)
		return;
	if ((out = http_out_buf(c)) == NULL || (before = evbuffer_get_length(out)) == 0)
		return;
	out_write_fd(c, out);
	if (evbuffer_get_length(out) > 0) {
		out_block(c);
		return;
	}
	http_out_release(c);
	http_out_observe(c);
	if (notify && before > HTTP_STREAM_LOWAT && c->on_writable) {
		c->srv->cb_depth++;
		c->on_writable(c->arg);
		c->srv->cb_depth--;
	}
}

/* Bytes were queued: write them at the end of this loop turn. */
void
http_out_mark(http_stream *c, uint64_t origin_ns)
{
	if (!c->direct || st_dlink_linked(&c->lk[L_OUT]))
		return;
	if (c->origin_ns == 0)
		c->origin_ns = origin_ns;
	st_dlist_push_back(&c->srv->outq, &c->lk[L_OUT]);
	http_server_defer_kick(c->srv);
}

void
http_out_progress_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	http_stream *c = arg;

	(void)buf;
	if (info->n_deleted > 0 || (info->orig_size == 0 && info->n_added > 0))
		c->progress_ms = http_now_ms();
}

/* Bytes are dropped once the stream is closing or ended, and always for HEAD. */
static bool
stream_drops(const http_stream *s)
{
	return s->closing || s->end_called || s->head_only || s->state != ST_STREAM;
}

void
http_stream_write(http_stream *s, const void *data, size_t len)
{
	if (stream_drops(s) || len == 0)
		return;
	s->wrote = true;
	evbuffer_add(out_get(s), data, len);
	http_out_mark(s, 0);
}

/* http_stream_write_ref, the bytes stamped with origin_ns when they start the output (0: not timed). */
static void
stream_write_ref_at(http_stream *s, const void *data, size_t len,
		    void (*cleanup)(const void *data, size_t len, void *arg), void *arg, uint64_t origin_ns)
{
	struct evbuffer *to = stream_drops(s) ? s->srv->trash : out_get(s);

	if (evbuffer_add_reference(to, data, len, cleanup, arg) != 0) {
		/* libevent did not take the reference (out of memory). */
		if (cleanup)
			cleanup(data, len, arg);
		http_stream_abort(s);
		return;
	}
	s->wrote = true;
	if (to == s->srv->trash)
		http_server_defer_kick(s->srv);
	else
		http_out_mark(s, origin_ns);
}

void
http_stream_write_ref(http_stream *s, const void *data, size_t len,
		      void (*cleanup)(const void *data, size_t len, void *arg), void *arg)
{
	stream_write_ref_at(s, data, len, cleanup, arg, 0);
}

void
http_stream_write_refs(http_stream *s, const http_ref *refs, size_t n)
{
	struct iovec iov[HTTP_WRITEV_MAX];
	size_t i = 0, off = 0, k = n < HTTP_WRITEV_MAX ? n : HTTP_WRITEV_MAX;
	bool refused = false;
	uint64_t origin_ns = 0; /* the first one given: the oldest arrival these bytes carry */

	if (n == 0)
		return;
	for (size_t j = 0; j < n && origin_ns == 0; j++)
		origin_ns = refs[j].origin_ns;
	if (!stream_drops(s) && s->direct && !st_dlink_linked(&s->lk[L_OUT]) && http_out_len(s) == 0) {
		for (size_t j = 0; j < k; j++) {
			iov[j].iov_base = (void *)refs[j].data;
			iov[j].iov_len = refs[j].len;
		}
		/* One piece (a shared run, a single frame): write(), which skips writev's iovec import. */
		ssize_t w = k == 1 ? write(http_conn_fd(s), iov[0].iov_base, iov[0].iov_len)
				   : writev(http_conn_fd(s), iov, (int)k);

		if (w < 0) {
			refused = errno != EINTR;
		} else {
			size_t left = (size_t)w;

			/* Fewer than n taken whole with all k written is the iovec
			 * cap, not a full socket: the end of the turn writes the rest. */
			refused = (size_t)w < total_len(refs, k);

			while (i < n && i < k && left >= refs[i].len) {
				left -= refs[i].len;
				if (refs[i].cleanup)
					refs[i].cleanup(refs[i].data, refs[i].len, refs[i].arg);
				i++;
			}
			off = left;
		}
		s->wrote = true;
		if (i == n) {
			/* All of it reached the kernel now. */
			if (origin_ns != 0) {
				s->origin_ns = origin_ns;
				http_out_observe(s);
			}
			return;
		}
	}
	for (; i < n; i++, off = 0)
		stream_write_ref_at(s, (const char *)refs[i].data + off, refs[i].len - off, refs[i].cleanup,
				    refs[i].arg, origin_ns);
	/* The kernel refused bytes (or an error: the write event meets it too
	 * and closes): wait for room instead of trying again this turn. */
	if (refused)
		out_block(s);
}

size_t
http_stream_flush(http_stream *s)
{
	struct evbuffer *out;

	if (stream_drops(s) || (out = http_out_buf(s)) == NULL)
		return http_stream_backlog(s);
	/*
	 * One non-blocking write now instead of at the end of the turn or the
	 * next EV_WRITE: a burst (a 10,000-event flush fans out as ten messages
	 * in one callback) reaches the kernel as it is queued, and frames wait
	 * in the stream's own queue only when the kernel really refuses them.
	 * An error is left for the write event to see on its next write.
	 */
	if (s->direct)
		http_out_write(s, false);
	else if (evbuffer_get_length(out) > 0)
		out_write_fd(s, out);
	return http_out_len(s); /* out may be released by now */
}

size_t
http_stream_backlog(const http_stream *s)
{
	return http_out_len(s);
}

size_t
http_stream_low_watermark(const http_stream *s)
{
	(void)s;
	return HTTP_STREAM_LOWAT;
}

bool
http_stream_visit_silent(http_stream *s)
{
	bool wrote = s->wrote;

	s->wrote = false;
	return !wrote || http_stream_backlog(s) > 0;
}

uint64_t
http_stream_blocked_ms(const http_stream *s, uint64_t now)
{
	if (http_stream_backlog(s) == 0 || now <= s->progress_ms)
		return 0;
	return now - s->progress_ms;
}

uint64_t
http_stream_quiet_ms(const http_stream *s, uint64_t now)
{
	uint64_t blocked = http_stream_blocked_ms(s, now);
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	/* Only a stream that looks blocked pays the system call. */
	if (blocked == 0 || s->fd < 0 || getsockopt(s->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
	    len < offsetof(struct tcp_info, tcpi_last_ack_recv) + sizeof(ti.tcpi_last_ack_recv))
		return blocked;
	return ST_MIN(blocked, (uint64_t)ti.tcpi_last_ack_recv);
}

uint64_t
http_stream_blocked_now(const http_stream *s, const st_clock *clock)
{
	return http_stream_backlog(s) == 0 ? 0 : http_stream_blocked_ms(s, st_clock_now(clock));
}
