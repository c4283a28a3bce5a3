/*
 * stream: one GET /v1/stream, a state machine from its admission to its
 * end.  The registry (admission, heartbeats, drain, flow control) is
 * streams.c, which calls this; a stream calls back only the hooks of its
 * stream_env (stream.h).
 *
 * DESIGN
 *
 * States (enum stream_state):
 *   CHECKING   the resume check query is out; nothing is written yet, so
 *              errors are problem documents (s->req, no s->hs).
 *   REPLAYING  rows from PostgreSQL are written as they come, paced by the
 *              connection's backlog; live frames wait in the hold buffer.
 *   LIVE       frames from the hub queue in the stream's subq and are
 *              written while the backlog is under the low watermark.
 *   CLOSING    a terminal envelope (complete at until, reconnect for a
 *              drain or an expired token) waits in the queue behind the
 *              live frames; the queue refuses anything more.
 *   ENDING     the terminal envelope was handed to the connection
 *              (stream_end, the only way in); inputs are stopped; the close
 *              callback frees the stream.
 *
 * Events and transitions:
 *
 *   admitted, live only (the position written) ........ -> LIVE
 *   admitted, Last-Event-ID or until .................. -> CHECKING
 *   CHECKING  check answered (ok, cursor_expired,
 *             replay_cap: the response starts) ........ -> REPLAYING
 *   CHECKING  check failed, id in the future, request
 *             gone, drain, replay queue full .......... -> end (no outcome)
 *   REPLAYING last rows written: release at the seam .. -> LIVE
 *   REPLAYING replay failed (stream_fail: replay
 *             stopped, failure or reconnect written) .. -> LIVE -> ENDING
 *   REPLAYING drain, token expired (replay stopped) ... -> LIVE -> CLOSING
 *   LIVE      history head reached until .............. -> CLOSING
 *   LIVE      drain, token expired .................... -> CLOSING
 *   REPLAYING, LIVE  queue dropped us (ADR-0197: slow
 *             consumer, blocked; reconnect written) ... -> ENDING
 *   CLOSING   drain, token expired .................... -> CLOSING (out of the hub)
 *   CLOSING   the terminal envelope reaches the socket  -> ENDING
 *   ENDING    connection closed, every byte out ....... -> end (the envelope's outcome)
 *   REPLAYING, LIVE, CLOSING, ENDING  connection cut
 *             (client gone, drain grace, blocked) ..... -> end (abrupt_close)
 *
 * The transitions are the table of stream_state.c: stream_goto asserts
 * each one against it (stream_state_test checks its shape).
 *
 * Every end, before the response or after, goes through stream_destroy:
 * the outcome counted (once the response started), out of the registry,
 * freed.  Every terminal envelope goes through stream_end.
 *
 * What is data, not state: chunk_done (whether the replay has rows left to
 * fetch changes only what the pump does when the chunk runs out, nothing
 * the stream accepts), has_until/until_head/until_known (the request's
 * bound and whether the check has resolved it), job (an outstanding
 * query), handed (which envelope ENDING waits on), and the flow-control
 * "behind" mark, which is the registry's (stream_reg).
 *
 * The seam.  The stream registers with the hub before anything else, so no
 * live frame can fall between the replay and the live queue: while
 * CHECKING/REPLAYING live frames wait in a hold buffer (a subq in hold
 * mode, bounded like the queue).  The replay covers (L, D], D being the
 * database head in the check's snapshot; since commit order equals seq
 * order, every frame the hub saw before the registration (seq <= H0) is
 * committed, so H0 <= D and the hold buffer holds everything after D.  At
 * release, held frames with seq <= D are the expected overlap (an edge a
 * little behind) and dropped; H0 > D would be a hole and is answered with
 * resync gap.  The hold's bound is spent on what follows D only
 * (stream_hold_settle).  The last step before the socket refuses any id
 * that does not increase.
 *
 * Ownership: a stream owns itself from stream_open to stream_destroy (the
 * close callback of its connection or, before the response started, the
 * answer of its request); the registry only links it.  Frames are shared:
 * the queue holds a reference, the connection's evbuffer holds it while
 * the bytes are in flight.  Threads: the registry's loop.
 *
 * Files: the struct is stream_impl.h, shared with stream_write.c, the
 * last step before the socket (ids checked, a frame or a batch of frame
 * references to the connection, the hub's take), which calls nothing
 * here; a replay's rows wait in a replay_buf (replay.h); the token's life
 * is stream_token.c.
 */
#include "stream_impl.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_log.h"
#include "st_util.h"

/*
 * Queued frames or bytes at which delivery writes to the connection (and
 * looks whether the stream is behind) before the batch ends.  Bytes too:
 * five frames of 200 KB fill ADR-0197's 1 MiB long before 256 frames queue.
 * 256: a writer's message (up to 256 events) is written in one go.
 */
#define STREAM_PUMP_AT 256
#define STREAM_PUMP_BYTES (64u * 1024)

static void stream_pump(stream *s);
static void stream_release(stream *s);
static void stream_fetch(stream *s);

/* The registry's history head. */
static uint64_t
stream_head(const stream *s)
{
	return s->env->registry.head(s->env->registry.arg);
}

/* Every transition: one edge of the diagram (stream_state.c), or a bug. */
static void
stream_goto(stream *s, enum stream_state to)
{
	if (!stream_state_can(s->state, to))
		st_error("stream: no transition %s -> %s", stream_state_name(s->state), stream_state_name(to));
	ST_ASSERT(stream_state_can(s->state, to));
	s->state = to;
}

/* The first state, once admitted. */
static void
stream_start_in(stream *s, enum stream_state first)
{
	ST_ASSERT(stream_state_initial(first));
	s->state = first;
}

/* Live: frames come from the queue (a terminal one may already wait there). */
static bool
stream_is_live(const stream *s)
{
	return s->state == STREAM_LIVE || s->state == STREAM_CLOSING;
}

/* ---- inputs and the end ------------------------------------------------- */

static void
stream_leave_hub(stream *s)
{
	if (s->sub) {
		hub_unsubscribe(s->env->hub, s->sub);
		s->sub = NULL;
	}
}

static void
stream_cancel_job(stream *s)
{
	if (s->job) {
		replay_cancel(s->job);
		s->job = NULL;
	}
}

/* The hub keeps its own copies; ours serve the replay only. */
static void
stream_free_topics(stream *s)
{
	for (size_t i = 0; i < s->n_topics; i++)
		free(s->topics[i]);
	ST_FREE(&s->topics);
	ST_FREE(&s->topic_lens);
	s->n_topics = 0;
}

/* Nothing more comes in: no replay job, no hub subscription, no unwritten rows. */
static void
stream_inputs_stop(stream *s)
{
	stream_cancel_job(s);
	stream_leave_hub(s);
	replay_buf_clear(&s->rows);
}

/*
 * REPLAYING -> LIVE without the seam: stops a resume where it is (the check
 * or the fetch, the rows not yet written, the hold buffer); whatever ends
 * the stream now goes out after what it has written.
 */
static void
stream_replay_stop(stream *s)
{
	stream_cancel_job(s);
	replay_buf_clear(&s->rows);
	subq_free(s->hold);
	s->hold = NULL;
	stream_goto(s, STREAM_LIVE);
}

/*
 * The one end of every stream, from any state: the outcome counted (o:
 * OUT_NONE before the response started, which counts nothing), out of the
 * registry (which tells a drain), every resource freed.
 */
static void
stream_destroy(stream *s, enum stream_outcome o)
{
	if (o != OUT_NONE)
		st_counter_inc(s->env->m_outcome[o]);
	s->env->registry.unlink(s->env->registry.arg, &s->reg);
	stream_token_free(s->token);
	if (s->ip_held)
		iplimit_release(s->env->ip_limit, s->ip);
	stream_inputs_stop(s);
	subq_free(s->q);
	subq_free(s->hold);
	stream_free_topics(s);
	st_slab_put(s->env->streams, s);
}

/*
 * -> ENDING, the only way in: the terminal envelope t was handed to the
 * connection; nothing more comes in, and the close callback ends the
 * stream once the bytes have left.
 */
static void
stream_end(stream *s, enum frame_type t)
{
	s->handed = t == FRAME_COMPLETE ? OUT_COMPLETE : t == FRAME_FAILURE ? OUT_FAILURE : OUT_RECONNECT;
	stream_goto(s, STREAM_ENDING);
	stream_inputs_stop(s);
	http_stream_end(s->hs);
}

/* ---- the last step before the socket ----------------------------------- */

/* The last step (stream_write_out), and the end a terminal frame brings: -> ENDING. */
static void
stream_write_frame_to(stream *s, frame *f, ref_batch *b)
{
	enum frame_type t = frame_type(f); /* read first: the hand-over may free f */

	if (stream_write_out(s, f, b))
		stream_end(s, t); /* counted when the bytes have left (on_close), not on hand-over */
}

/* A single frame (resyncs, failures, heartbeats, drops): straight to the socket's queue. */
static void
stream_write_frame(stream *s, frame *f)
{
	stream_write_frame_to(s, f, NULL);
}

/*
 * The queue dropped the subscriber (ADR-0197): it holds only the reconnect.
 * Take it out of the hub and hand the reconnect to the socket whatever its
 * backlog (-> ENDING); a socket that will not take even that is closed by
 * the end's drain timeout.
 */
static void
stream_dropped(stream *s)
{
	frame *f;

	stream_inputs_stop(s);
	while ((f = subq_pop(s->q)) != NULL)
		stream_write_frame(s, f);
}

static void
stream_push_live(stream *s, frame *f)
{
	uint64_t blocked = s->hs ? http_stream_blocked_now(s->hs, s->env->clock) : 0;

	/* SUBQ_DROP also answers pushes after a terminal frame; only a real drop ends us here (once: -> ENDING). */
	if (subq_push(s->q, f, blocked) == SUBQ_DROP && subq_is_dropped(s->q) && s->state != STREAM_ENDING)
		stream_dropped(s);
}

/* LIVE -> CLOSING: the terminal frame f goes out after what is queued (a terminal push is always accepted). */
static void
stream_close_after_queue(stream *s, frame *f)
{
	stream_goto(s, STREAM_CLOSING);
	stream_push_live(s, f);
	stream_pump(s);
}

/* ---- flow control (flow.h decides; the registry keeps the behind list) -- */

bool
stream_burst_queued(const stream *s)
{
	return stream_is_live(s) && s->hs != NULL && flow_stream_behind(subq_count(s->q), subq_bytes(s->q));
}

bool
stream_holds_intake(const stream *s, uint64_t now)
{
	return stream_is_live(s) && s->hs != NULL &&
	       flow_stream_holds(subq_count(s->q), subq_bytes(s->q), http_stream_quiet_ms(s->hs, now));
}

/* ---- hub callbacks ----------------------------------------------------- */

/* Frames after the client's until bound are not for this stream. */
static bool
beyond_until(const stream *s, const frame *f)
{
	return s->has_until && s->until_known && frame_seq(f) > s->until;
}

void
stream_hub_deliver(void *arg, frame *f)
{
	stream *s = arg;

	if (beyond_until(s, f))
		return;
	switch (s->state) {
	case STREAM_CHECKING:
	case STREAM_REPLAYING:
		/*
		 * What the replay covers (up to the client's id, then up to the
		 * snapshot head d) never enters the hold buffer: an edge that is
		 * still catching up on a burst would otherwise fill it with frames
		 * the replay sends anyway, overflow it, and lose the live frames
		 * above d with them (a needless resync).
		 */
		if (frame_type(f) == FRAME_ITEM && frame_seq(f) <= (s->state == STREAM_REPLAYING ? s->d : s->after)) {
			st_counter_inc(s->env->m_seam_overlap);
			break;
		}
		if (s->state == STREAM_CHECKING && frame_type(f) == FRAME_ITEM)
			s->check_held++;
		(void)subq_push(s->hold, f, 0);
		break;
	case STREAM_LIVE:
	case STREAM_CLOSING: /* the queue refuses the push; the rest is the same */
		/*
		 * After release the edge's live history can still lag the
		 * database (a batch waiting for another writer's message): frames
		 * the replay already covered arrive now.  They are overlap, not a
		 * bug, so they stop here and the last step's id guard stays an
		 * alarm for real bugs.
		 */
		if (frame_type(f) == FRAME_ITEM && frame_seq(f) <= s->seam) {
			st_counter_inc(s->env->m_seam_overlap);
			break;
		}
		stream_push_live(s, f);
		/* A message carries many frames: write as they come, not only at the batch's end. */
		if (subq_count(s->q) >= STREAM_PUMP_AT || subq_bytes(s->q) >= STREAM_PUMP_BYTES) {
			stream_pump(s);
			s->env->registry.behind_check(s->env->registry.arg, &s->reg);
		}
		break;
	case STREAM_ENDING: break;
	}
}

/* LIVE and the history reached until: complete goes out after what is queued. */
void
stream_head_moved(stream *s)
{
	frame *f;

	if (!s->has_until || !s->until_known || s->state != STREAM_LIVE || stream_head(s) < s->until)
		return;
	f = frame_complete_new();
	stream_close_after_queue(s, f);
	frame_unref(f);
}

void
stream_hub_flush(void *arg)
{
	stream *s = arg;

	if (stream_is_live(s))
		stream_pump(s);
}

/* ---- writing ----------------------------------------------------------- */

/*
 * Room on the connection: the backlog is under the low watermark, or gets
 * there after writing it to the socket now.  Frames stay in the queue only
 * when the kernel will not take more.
 */
static bool
stream_has_room(stream *s)
{
	size_t lw = http_stream_low_watermark(s->hs);

	return http_stream_backlog(s->hs) <= lw || http_stream_flush(s->hs) <= lw;
}

static void
stream_pump(stream *s)
{
	ref_batch b; /* n and bytes only: an initialiser zeroes all 256 slots (10 KiB) per pump */

	b.n = b.bytes = 0;
	if (s->hs == NULL)
		return;
	/* Room is checked between batches: a batch holds at most
	 * STREAM_BATCH_BYTES more than the low watermark allows. */
	while (s->state != STREAM_ENDING && s->hs && (b.n > 0 || stream_has_room(s))) {
		frame *f;

		if (s->state == STREAM_REPLAYING) {
			/* The older chunk is written: read the next one while this one goes out. */
			if (replay_buf_read_ahead_due(&s->rows) && s->job == NULL && !s->chunk_done) {
				/* a fetch that cannot start writes a frame: ours go first */
				ref_batch_hand_over(s, &b);
				stream_fetch(s);
				if (s->state != STREAM_REPLAYING)
					return;
			}
			if ((f = replay_buf_next(&s->rows)) != NULL) {
				s->cursor = frame_seq(f);
				stream_write_frame_to(s, f, &b);
				continue;
			}
			/* Anything below may write frames of its own: ours go first. */
			ref_batch_hand_over(s, &b);
			if (s->job != NULL)
				return; /* the next rows are on their way */
			if (!s->chunk_done) {
				stream_fetch(s);
				if (s->job != NULL || s->state != STREAM_REPLAYING)
					return;
				continue; /* nothing left to fetch: chunk_done */
			}
			stream_release(s);
			continue;
		}
		if (!stream_is_live(s))
			break;
		if ((f = subq_pop(s->q)) == NULL)
			break;
		stream_write_frame_to(s, f, &b);
	}
	ref_batch_hand_over(s, &b);
}

static void
on_writable(void *arg)
{
	stream_pump(arg);
}

static void
on_close(void *arg, bool abrupt)
{
	stream *s = arg;

	s->hs = NULL;
	/* A terminal envelope counts once all of it left; anything else was cut off. */
	stream_destroy(s, !abrupt && s->handed != OUT_NONE ? s->handed : OUT_ABRUPT);
}

/* ---- registry events --------------------------------------------------- */

/*
 * Heartbeats keep proxies' idle timeouts at bay; a push to a live queue also runs ADR-0197's
 * blocked check.  Skipped for a stream that wrote since the last visit (two per interval) and
 * has nothing waiting: an idle one gets one per interval, a busy one none.
 */
void
stream_heartbeat(stream *s, frame *hb, uint64_t now)
{
	if (s->hs == NULL || (!http_stream_visit_silent(s->hs) && subq_count(s->q) == 0 &&
			      (s->state == STREAM_LIVE || s->state == STREAM_REPLAYING)))
		return;
	switch (s->state) {
	case STREAM_CLOSING:
		/*
		 * A terminal frame waits behind a socket that takes nothing: the
		 * queue refuses pushes now, so the blocked rule is applied here.
		 * Closed without its terminal: abrupt_close.
		 */
		if (http_stream_blocked_ms(s->hs, now) > SUBQ_BLOCKED_MS) {
			st_counter_add(s->env->dropped.blocked, subq_count(s->q));
			http_stream_abort(s->hs);
		}
		break;
	case STREAM_LIVE:
		stream_push_live(s, hb);
		stream_pump(s);
		break;
	case STREAM_REPLAYING:
		if (http_stream_blocked_ms(s->hs, now) > SUBQ_BLOCKED_MS) {
			/* A replay paced by a socket that takes nothing: the same rule. */
			stream_push_live(s, hb);
		} else if (http_stream_backlog(s->hs) <= http_stream_low_watermark(s->hs)) {
			/* A replay waiting on the database still heartbeats (proxies' idle timeouts). */
			stream_write_frame(s, frame_ref(hb));
		}
		break;
	case STREAM_CHECKING:
	case STREAM_ENDING: break;
	}
}

/* reason: "draining" or "token_expired" (only once the response started). */
void
stream_reconnect(stream *s, uint32_t retry_ms, const char *reason)
{
	frame *f;

	if (s->state == STREAM_CHECKING) {
		stream_cancel_job(s);
		refusal_send(s->env->refusals, s->req, s->fmt, REFUSAL_DRAINING, retry_ms,
			     "this edge is draining; reconnect");
		s->req = NULL;
		stream_destroy(s, OUT_NONE);
		return;
	}
	f = frame_reconnect_new(retry_ms, reason);
	if (s->state == STREAM_REPLAYING) {
		/* Stop the replay where it is; the client resumes from its last id elsewhere. */
		stream_replay_stop(s);
	}
	if (stream_is_live(s)) {
		/*
		 * Terminal frames are always accepted; it goes out after what is
		 * queued, as the client reads.  A client that reads nothing is
		 * closed by the grace timer, never before.
		 */
		stream_leave_hub(s);
		if (s->state == STREAM_LIVE)
			stream_close_after_queue(s, f);
		else
			stream_pump(s); /* CLOSING: a terminal frame is queued already */
	}
	frame_unref(f);
}

void
stream_abort(stream *s)
{
	if (s->hs)
		http_stream_abort(s->hs); /* on_close follows, deferred */
}

void
stream_shutdown(stream *s)
{
	if (s->req) {
		http_reply_problem(s->req, 503, NULL, "Service Unavailable", "shutting down", NULL);
		s->req = NULL;
	}
	/* http_server_free ran first and closed every started stream. */
	ST_ASSERT(s->hs == NULL);
	stream_destroy(s, OUT_NONE);
}

/* The token's exp passed: the client comes back with a fresh token and its last id. */
static void
token_expired(void *arg)
{
	stream *s = arg;

	stream_reconnect(s, refusal_jitter(s->env->refusals, 1000), "token_expired");
}

bool
stream_key_check(stream *s)
{
	if (!stream_token_key_gone(s->token))
		return false;
	stream_reconnect(s, refusal_jitter(s->env->refusals, 1000), "token_expired");
	return true;
}

static void
stream_start_response(stream *s)
{
	static const http_stream_cbs cbs = { on_writable, on_close };
	http_req *req = s->req;
	char until[48] = "";

	/* The bound until=head resolved to: a client that reconnects sends it
	 * instead of "head", so the bound does not move forward after a cut. */
	if (s->has_until && s->until_known)
		snprintf(until, sizeof(until), "Studio-Until: %" PRIu64 "\r\n", s->until);
	s->req = NULL;
	s->hs = http_stream_start(req, 200, refusal_content_type(s->fmt), until[0] != '\0' ? until : NULL, &cbs, s);
	stream_token_arm(s->token);
}

/* ---- replay ------------------------------------------------------------ */

/*
 * The replay cannot go on (REPLAYING -> LIVE -> ENDING).  A database that
 * failed or a full replay queue passes: the client is told to come back
 * with its last id (reconnect unavailable, a jittered hint), as it would be
 * before the first byte; a proper client stops for good on `failure`, so
 * that is kept for a row the edge cannot read (ST_EPROTO: a defect,
 * retrying gives the same row).
 */
static void
stream_fail(stream *s, st_err err, const char *detail)
{
	stream_replay_stop(s);
	if (err == ST_EPROTO)
		stream_write_frame(s, frame_failure_new(500, "Replay failed", detail));
	else
		stream_write_frame(
			s, frame_reconnect_new(refusal_jitter(s->env->refusals, refusal_retry_ms(REFUSAL_UNAVAILABLE)),
					       refusal_name(REFUSAL_UNAVAILABLE)));
}

static void
on_rows(void *arg, st_err err, frame *const *frames, size_t n, bool done, uint64_t horizon)
{
	stream *s = arg;

	s->job = NULL;
	if (err != ST_OK) {
		st_counter_inc(s->env->m_replay[RR_ERROR]);
		stream_fail(s, err,
			    err == ST_EPROTO ? "a stored event could not be read"
					     : "the database failed during the replay; reconnect with Last-Event-ID");
		return;
	}
	if (horizon > s->fetch_from) {
		replay_buf_clear(&s->rows);
		/*
		 * Retention deleted rows after our cursor while we replayed: never
		 * a silent hole (ADR-WEB-ADV-001).  One resync, then live from d.
		 */
		st_counter_inc(s->env->m_replay[RR_EXPIRED]);
		stream_write_frame(s, frame_resync_new(s->d, "cursor_expired"));
		s->chunk_done = true;
		stream_pump(s);
		return;
	}
	st_counter_add(s->env->m_replay_rows, n);
	replay_buf_add(&s->rows, frames, n, done);
	s->chunk_done = done;
	stream_pump(s);
}

/*
 * Starts the fetch of the rows after those held (or written), or sets
 * chunk_done when there are none left; called by the pump only, which
 * goes on from what it finds.
 */
static void
stream_fetch(stream *s)
{
	uint64_t upto = s->has_until ? ST_MIN(s->d, s->until) : s->d;

	s->fetch_from = replay_buf_last_seq(&s->rows, s->cursor);
	if (s->fetch_from >= upto) {
		s->chunk_done = true;
		return;
	}
	s->job = replay_fetch(s->env->pool, (const char *const *)s->topics, s->topic_lens, s->n_topics, s->fetch_from,
			      upto, s->rows.limit, REPLAY_BUF_CHUNK_BYTES, on_rows, s);
	if (s->job == NULL) {
		st_counter_inc(s->env->m_replay[RR_ERROR]);
		stream_fail(s, ST_EBUSY, "the replay queue is full; reconnect with Last-Event-ID");
	}
}

/*
 * The seam, REPLAYING -> LIVE: the replay has written (after, d]; the hold
 * buffer has every live frame since registration.  Move what follows d to
 * the live queue.
 */
static void
stream_release(stream *s)
{
	uint64_t floor = s->d;
	frame *f;

	stream_goto(s, STREAM_LIVE);
	if (s->h0 > s->d) {
		/* A frame the hub had before we registered is not in the replay. */
		st_counter_inc(s->env->m_seam_gap);
		st_warn("stream seam gap: hub head %llu above replay head %llu", (unsigned long long)s->h0,
			(unsigned long long)s->d);
		floor = ST_MAX(stream_head(s), s->last_id + 1);
		stream_write_frame(s, frame_resync_new(floor, "gap"));
	}
	if (subq_hold_overflowed(s->hold) && subq_overflow_seq(s->hold) > floor) {
		/* ADR-0197: held frames were dropped; one resync at release. */
		floor = subq_overflow_seq(s->hold);
		stream_write_frame(s, frame_resync_new(floor, "overflow"));
	}
	s->seam = floor;
	while ((f = subq_pop(s->hold)) != NULL) {
		if (frame_type(f) == FRAME_ITEM && (frame_seq(f) <= floor || beyond_until(s, f))) {
			st_counter_inc(s->env->m_seam_overlap);
			frame_unref(f);
			continue;
		}
		stream_push_live(s, f);
		frame_unref(f);
		if (s->state != STREAM_LIVE)
			break;
	}
	subq_free(s->hold);
	s->hold = NULL;
	stream_free_topics(s);
	stream_head_moved(s);
}

/*
 * The check's answer fixes d.  While checking, the hold buffer took every
 * live frame after the client's id, because d was not known yet; an edge
 * still fanning out a burst fills it with frames the replay sends anyway.
 * Those must neither stay (they would overflow the hold during the replay
 * and drop the live frames above d with them: a needless resync) nor
 * decide anything:
 *  - held items up to d are dropped now (the replay writes them);
 *  - if the hold overflowed while checking and dropped frames above d,
 *    those frames are committed (the hub only sees committed events, and
 *    commit order is seq order), so the replay reads them too: its bound
 *    becomes the newest seq dropped, and every frame held after that
 *    overflow is newer.  This adds only what arrived during the check.
 *    That raise is bounded by --replay-cap like the rest: the events it adds
 *    are at most the items held while checking and at most the seqs
 *    between (neither is exact, the database was not asked), and when
 *    count plus that bound passes the cap the answer is resync replay_cap
 *    at the new d instead of a replay (returns false), as a check that
 *    counted them would have said.  So a replay never sends more than the
 *    cap; at worst a resume that would just have fitted gets the resync.
 * A hold that overflows during the replay itself is ADR-0197's case (the
 * client reads slower than the live traffic): resync at release.
 */
static bool
stream_hold_settle(stream *s, uint64_t count)
{
	uint64_t added;
	frame *f;

	while ((f = subq_peek(s->hold)) != NULL && frame_type(f) == FRAME_ITEM && frame_seq(f) <= s->d) {
		st_counter_inc(s->env->m_seam_overlap);
		frame_unref(subq_pop(s->hold));
	}
	if (!subq_hold_overflowed(s->hold) || subq_overflow_seq(s->hold) <= s->d)
		return true;
	added = ST_MIN(subq_overflow_seq(s->hold) - s->d, s->check_held);
	s->d = subq_overflow_seq(s->hold);
	return count + added <= s->env->replay_cap;
}

/* CHECKING -> REPLAYING once the response started: a resync at d instead of rows (resync non-NULL), or rows. */
static void
stream_replay_begin(stream *s, enum replay_result rr, const char *resync, bool nothing_to_fetch)
{
	st_counter_inc(s->env->m_replay[rr]);
	if (resync != NULL)
		stream_write_frame(s, frame_resync_new(s->d, resync));
	s->chunk_done = resync != NULL || nothing_to_fetch;
	stream_goto(s, STREAM_REPLAYING);
	stream_pump(s);
}

/* CHECKING -> REPLAYING (the response starts), or the end before the first byte. */
static void
on_check(void *arg, st_err err, uint64_t d, uint64_t horizon, uint64_t count)
{
	stream *s = arg;

	s->job = NULL;
	if (err != ST_OK) {
		st_counter_inc(s->env->m_replay[RR_ERROR]);
		refusal_send_jittered(s->env->refusals, s->req, s->fmt, REFUSAL_UNAVAILABLE,
				      "the event store cannot be reached; retry later");
		s->req = NULL;
		goto drop;
	}
	if (s->after > d) {
		st_counter_inc(s->env->m_replay[RR_FUTURE]);
		http_reply_problem(s->req, 400, NULL, "Bad Request",
				   "Last-Event-ID is beyond the newest committed event", NULL);
		s->req = NULL;
		goto drop;
	}
	s->d = d;
	if (s->until_head)
		s->until = d;
	s->until_known = true;
	s->cursor = s->after;
	s->last_id = s->after;
	s->rows.limit = REPLAY_BUF_CHUNK_ROWS;
	stream_start_response(s);
	if (s->after < horizon)
		stream_replay_begin(s, RR_EXPIRED, "cursor_expired", true);
	else if (count > s->env->replay_cap)
		stream_replay_begin(s, RR_CAP, "replay_cap", true);
	else if (!stream_hold_settle(s, count)) /* what the hold dropped while checking passes the cap */
		stream_replay_begin(s, RR_CAP, "replay_cap", true);
	else
		stream_replay_begin(s, RR_OK, NULL, count == 0 && s->d == d);
	return;
drop:
	stream_destroy(s, OUT_NONE);
}

static void
on_req_gone(void *arg)
{
	stream *s = arg;

	s->req = NULL;
	stream_destroy(s, OUT_NONE);
}

/* ---- the start --------------------------------------------------------- */

size_t
stream_size(void)
{
	return sizeof(stream);
}

void
stream_open(const stream_env *env, http_req *req, streamreq *rq, uint64_t exp_ms, uint64_t key_id, const uint8_t *ip)
{
	stream *s = st_slab_get(env->streams); /* zeroed, away from the request's buffers (st_slab.h) */

	s->reg.s = s;
	s->env = env;
	s->handed = OUT_NONE;
	/* The stream takes the topics over (a replay may need them after the request is gone). */
	s->topics = rq->topics;
	s->topic_lens = rq->topic_lens;
	s->n_topics = rq->n_topics;
	rq->topics = NULL;
	rq->topic_lens = NULL;
	rq->n_topics = 0;
	s->fmt = rq->fmt;
	s->has_after = rq->has_after;
	s->after = rq->after;
	s->has_until = rq->has_until;
	s->until_head = rq->until_head;
	s->until = rq->until;
	s->until_known = rq->has_until && !rq->until_head;
	s->token = stream_token_new(env->base, env->auth, exp_ms, key_id, token_expired, s);
	if (ip != NULL) {
		memcpy(s->ip, ip, sizeof(s->ip));
		s->ip_held = true;
	}
	s->q = subq_new(s->env->clock, &s->env->dropped, false, s->env->queues);
	s->req = req;
	s->h0 = stream_head(s);
	s->last_id = 0;
	s->reg.bounded = s->has_until;
	/* Live only when there is nothing to check; until without an id reads the retained history from its start. */
	stream_start_in(s, !s->has_after && !s->has_until ? STREAM_LIVE : STREAM_CHECKING);
	env->registry.link(env->registry.arg, &s->reg);
	s->sub = hub_subscribe(s->env->hub, s, (const char *const *)s->topics, s->topic_lens, s->n_topics);
	if (!s->has_after && !s->has_until) {
		/*
		 * Live only: nothing to check, the first byte goes out now, and it
		 * is the stream's position (docs/api.md "Stream position"): h0,
		 * this loop's head when the stream joined the hub.  Every frame
		 * the hub hands us from now on is newer than h0 (the sequencer
		 * emits in seq order, and this loop learns a head only with or
		 * after its frames), and a client cut before its first item
		 * resumes with Last-Event-ID h0, whose replay covers (h0, D]: no
		 * item on its topics is lost.  h0 is committed (the hub sees only
		 * committed events, and a head without frames is a filled hole),
		 * so that resume is never refused as beyond the head.  h0 counts
		 * as the last id written: nothing at or below it goes out.
		 */
		stream_free_topics(s);
		stream_start_response(s);
		s->last_id = s->h0;
		stream_write_frame(s, frame_position_new(s->h0));
		return;
	}
	s->hold = subq_new(s->env->clock, &s->env->dropped, true, NULL); /* short-lived: malloc */
	http_req_set_gone_cb(req, on_req_gone, s);
	/* A numeric until bounds the count: events after it are never sent, so they cannot exceed the cap. */
	s->job = replay_check(s->env->pool, (const char *const *)s->topics, s->topic_lens, s->n_topics, s->after,
			      s->has_until && !s->until_head ? s->until : UINT64_MAX, s->env->replay_cap, on_check, s);
	if (s->job == NULL) {
		st_counter_inc(s->env->m_replay[RR_ERROR]);
		refusal_send_jittered(s->env->refusals, req, s->fmt, REFUSAL_UNAVAILABLE,
				      "the replay queue is full; retry later");
		s->req = NULL;
		stream_destroy(s, OUT_NONE);
	}
}
