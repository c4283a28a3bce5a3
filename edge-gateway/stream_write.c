/*
 * stream_write: the last step of an edge stream before its socket (the
 * struct is stream_impl.h; the state machine that calls this is stream.c).
 *
 * Frames reach the connection as references, never copies of their bytes:
 * one at a time (resyncs, failures, heartbeats, a drop's reconnect), in a
 * batch the pump fills (one writev, or one copy shared by the streams of a
 * loop that batched the same frames: frame_run.h), or a message whole when
 * the hub offers it to a live stream with nothing waiting (the take).  Ids
 * strictly increase here, whichever way they came (ADR-WEB-ADV-001).
 *
 * The arrows run one way: nothing here calls stream.c.  A terminal frame
 * handed over is returned to the caller, which ends the stream.
 *
 * Ownership: a frame reference passed in is consumed (written, batched or
 * released); a batch's references pass to the connection at the hand-over.
 * Threads: the registry's loop.
 */
#include "stream_impl.h"

#include "frame_run.h"
#include "st_util.h"

void
ref_batch_hand_over(stream *s, ref_batch *b)
{
	http_ref run;

	if (b->n == 0)
		return;
	st_counter_add(s->env->m_frames, b->n);
	if (s->hs && s->env->runs != NULL && frame_run_share(s->env->runs, s->fmt, b->r, b->n, &run)) {
		http_stream_write_refs(s->hs, &run, 1);
	} else if (s->hs) {
		http_stream_write_refs(s->hs, b->r, b->n);
	} else {
		for (size_t i = 0; i < b->n; i++)
			frame_unref(b->r[i].arg);
	}
	b->n = 0;
	b->bytes = 0;
}

bool
stream_write_out(stream *s, frame *f, ref_batch *b)
{
	enum frame_type t = frame_type(f);
	const char *bytes;
	size_t len;
	bool term;

	if (s->hs == NULL || s->state == STREAM_ENDING) {
		frame_unref(f);
		return false;
	}
	if (t == FRAME_ITEM || t == FRAME_RESYNC) {
		uint64_t id = frame_seq(f);

		if (id <= s->last_id) {
			/* ADR-WEB-ADV-001: a repeated or regressing position is refused. */
			st_counter_inc(s->env->m_refused);
			frame_unref(f);
			return false;
		}
		s->last_id = id;
	}
	/* Read before the hand-over: a failed reference frees f at once. */
	term = frame_is_terminal(f);
	bytes = frame_bytes(f, s->fmt, &len);
	if (b != NULL && !term) {
		/* counted at the hand-over: one atomic add per batch, not per frame */
		b->r[b->n++] = (http_ref){ bytes, len, frame_release_cb, f, frame_origin_ns(f) };
		b->bytes += len;
		if (b->n == STREAM_BATCH || b->bytes >= STREAM_BATCH_BYTES)
			ref_batch_hand_over(s, b);
		return false;
	}
	if (b != NULL)
		ref_batch_hand_over(s, b);
	st_counter_inc(s->env->m_frames);
	http_stream_write_ref(s->hs, bytes, len, frame_release_cb, f);
	return term;
}

/*
 * The hub's offer of a message's frames at once (hub.h take).  A live
 * stream with nothing queued or waiting would push them all and pop them
 * all in its flush, then write them as one batch; it writes that batch now
 * instead: one reference to the loop's copy of the bytes (frame_run.h),
 * made by the stream before, or the one frame.  Anything the per-frame way
 * would treat otherwise is declined: a bound (until), a signal (it may
 * coalesce), an id at or below the seam or the last one written, a frame
 * over a batch's bytes, a list no stream before batched.
 */
bool
stream_hub_take(void *arg, frame *const *fs, size_t n)
{
	stream *s = arg;
	http_ref r;
	uint64_t prev;

	if (n == 0 || s->state != STREAM_LIVE || s->hs == NULL || s->has_until || subq_count(s->q) != 0 ||
	    http_stream_backlog(s->hs) != 0)
		return false;
	prev = s->last_id > s->seam ? s->last_id : s->seam;
	for (size_t i = 0; i < n; prev = frame_seq(fs[i]), i++)
		if (frame_type(fs[i]) != FRAME_ITEM || frame_is_signal(fs[i]) || frame_seq(fs[i]) <= prev)
			return false;
	if (n == 1) {
		size_t len;
		const char *bytes = frame_bytes(fs[0], s->fmt, &len);

		if (frame_cost(fs[0]) > STREAM_BATCH_BYTES)
			return false;
		r = (http_ref){ bytes, len, frame_release_cb, frame_ref(fs[0]), frame_origin_ns(fs[0]) };
	} else if (s->env->runs == NULL || !frame_run_take(s->env->runs, s->fmt, fs, n, &r)) {
		return false;
	}
	s->last_id = prev;
	st_counter_add(s->env->m_frames, n);
	http_stream_write_refs(s->hs, &r, 1);
	return true;
}
