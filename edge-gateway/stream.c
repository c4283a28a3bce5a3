/*
 * stream: GET /v1/stream, the registry of open streams, and drain.
 *
 * DESIGN
 *
 * A stream is one state machine (enum stream_state, s->state):
 *
 *   (request) --live only--> LIVE
 *   (request) --Last-Event-ID or until--> CHECKING --check answered--> REPLAYING --replay written--> LIVE
 *   CHECKING --database error, id in the future, drain--> (answered, destroyed: nothing was written)
 *   REPLAYING --replay fails--> ENDING (stream_replay_stop, then the terminal frame written at once)
 *   REPLAYING --drain, token expiry--> CLOSING (stream_replay_stop, then as from LIVE)
 *   LIVE --until reached, drain, token expiry, ADR-0197 drop--> CLOSING (a terminal frame queued)
 *   LIVE, CLOSING --terminal frame handed to the connection--> ENDING
 *   any --the connection closed (on_close) or its request went (on_req_gone)--> destroyed
 *
 * CHECKING: the resume check query is out; nothing is written yet, so
 * errors are problem documents.  REPLAYING: rows from PostgreSQL are
 * written as they come, paced by the connection's backlog.  LIVE: frames
 * from the hub queue in the stream's subq and are written while the backlog
 * is under the low watermark.  CLOSING: a terminal frame (complete, or a
 * reconnect: drain, token expiry, a drop) waits in the queue behind what
 * the client has not read yet; nothing new is taken in.  ENDING: the
 * terminal frame was handed to the connection; the close callback ends the
 * stream.  stream_write_frame_to is the one place that enters ENDING and
 * stream_destroy the one place that ends a registered stream (the outcome
 * is recorded once, by stream_finish).  The booleans left on the struct are
 * data, not states: what the request asked (is_head, has_after, has_until,
 * until_head, until_known), whether the replay has more rows to fetch
 * (chunk_done) and whether the stream holds a per-address slot (ip_held);
 * "behind" (flow control) is the membership of the behind list.
 *
 * The stream registers with the hub before anything else, so no live frame
 * can fall between the replay and the live queue: while CHECKING/REPLAYING
 * live frames wait in a hold buffer (a subq in hold mode, bounded like the
 * queue).  The replay covers (L, D], D being the database head in the
 * check's snapshot; since commit order equals seq order, every frame the
 * hub saw before the registration (seq <= H0) is committed, so H0 <= D and
 * the hold buffer holds everything after D.  At release, held frames with
 * seq <= D are the expected overlap (an edge a little behind) and dropped;
 * H0 > D would be a hole and is answered with resync gap.  The hold's
 * bound is spent on what follows D only (stream_hold_settle).  The last
 * step before the socket refuses any id that does not increase.
 *
 * Ownership: a stream is owned by the registry from creation to the close
 * callback of its connection (or, before the response started, to the
 * answer of its request).  Frames are shared: the queue holds a reference,
 * the connection's evbuffer holds it while the bytes are in flight.
 *
 * Threads: a registry is confined to its loop.  With several loops
 * (edge-gateway --threads N) each has its own registry, and only the
 * metric handles (streams_metrics, atomic) are shared: the open-streams
 * gauge moves by deltas so it is the total, and --max-streams is checked
 * against that total.
 */
#include "stream.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "hub.h"
#include "replay.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_log.h"
#include "st_util.h"
#include "streamreq.h"
#include "subq.h"

#define STREAM_REPLAY_CHUNK 1000
/* Queued frames at which delivery writes to the connection before the batch ends. */
#define STREAM_PUMP_AT 64
/*
 * Flow control (see streams_backpressure): a live stream is "behind" with
 * this much queued, caught up again under STREAM_CAUGHT_UP frames; it holds
 * the edge's intake back only while its socket keeps taking bytes (none for
 * STREAM_STALL_MS: stalled, no longer honoured) and for at most
 * STREAM_HONOUR_MS in any STREAM_HONOUR_WINDOW_MS.  That bounds one
 * stream; what all streams ask together is bounded by the caller's budget
 * (flow.h, edge-gateway main.c).
 */
#define STREAM_BEHIND_FRAMES 256
#define STREAM_BEHIND_BYTES (256u * 1024)
#define STREAM_CAUGHT_UP 64
#define STREAM_STALL_MS 50
#define STREAM_HONOUR_MS 1000
#define STREAM_HONOUR_WINDOW_MS 60000
/* Streams visited per heartbeat callback, so one callback stays bounded. */
#define STREAM_HEARTBEAT_SLICE 2000

/* The order matters: every state below ST_CLOSING still takes frames in. */
enum stream_state { ST_CHECKING, ST_REPLAYING, ST_LIVE, ST_CLOSING, ST_ENDING };
enum stream_outcome { OUT_NONE = -1, OUT_COMPLETE = 0, OUT_FAILURE, OUT_RECONNECT, OUT_ABRUPT, OUT_COUNT };
static const char *const outcome_names[OUT_COUNT] = { "complete", "failure", "reconnect", "abrupt_close" };

enum replay_result { RR_OK, RR_CAP, RR_EXPIRED, RR_FUTURE, RR_ERROR, RR_COUNT };
static const char *const replay_result_names[RR_COUNT] = { "ok", "replay_cap", "cursor_expired", "future", "error" };

/* Refusals that retrying can fix (answered 200 + reconnect to SSE clients). */
enum refusal { RF_DRAINING, RF_NOT_READY, RF_OVERLOADED, RF_UNAVAILABLE, RF_COUNT };
static const char *const refusal_names[RF_COUNT] = { "draining", "not_ready", "overloaded", "unavailable" };
/* The retry hint's middle: 1 s, except overloaded (5 s: a full edge frees slots slowly). */
static const uint32_t refusal_retry_ms[RF_COUNT] = { 1000, 1000, 5000, 1000 };

typedef struct stream stream;

struct streams {
	struct event_base *base;
	pgpool *pool;            /* borrowed */
	const st_clock *clock;   /* borrowed */
	streams_config cfg;
	hub *hub;                /* owned */
	st_dlink all;            /* registry (stream.link), newest first */
	size_t n_streams;        /* streams in the registry with a started response or pending check */
	size_t n_until;          /* streams with an until bound */
	uint64_t head;           /* the history head (sequencer) */
	bool head_known;
	bool draining;
	void (*drain_done)(void *arg);
	void *drain_arg;
	struct event *ev_heartbeat;
	struct event *ev_grace;
	struct event *ev_drain_done;
	stream *hb_cursor;       /* where the heartbeat sweep goes on */
	st_dlink behind;         /* live streams holding the intake back, flow control (stream.blink) */
	st_dlink untils;         /* streams with an until bound: visited when the head moves (stream.ulink) */
	bool hb_sweeping;
	frame *heartbeat;        /* one shared heartbeat frame */
	subq_counters dropped;   /* copies of the shared handles (subq keeps a pointer to this) */
	st_gauge *m_open;
	st_counter *m_outcome[OUT_COUNT];
	st_counter *m_replay[RR_COUNT];
	st_counter *m_frames;
	st_counter *m_refused;
	st_counter *m_seam_overlap;
	st_counter *m_seam_gap;
	st_counter *m_refusal[RF_COUNT];
	st_counter *m_replay_rows;
	st_counter *m_auth[AUTH_RESULT_COUNT]; /* refusals by reason; [AUTH_OK] unused */
	st_counter *m_ip_refused;
	uint64_t rng;            /* xorshift state for retry jitter */
};

/* Registered once per process; every registry (one per loop) copies the handles. */
struct streams_metrics {
	subq_counters dropped;
	st_gauge *open;
	st_counter *outcome[OUT_COUNT];
	st_counter *replay[RR_COUNT];
	st_counter *frames;
	st_counter *refused;
	st_counter *seam_overlap;
	st_counter *seam_gap;
	st_counter *refusal[RF_COUNT];
	st_counter *replay_rows;
	st_counter *auth[AUTH_RESULT_COUNT];
	st_counter *ip_refused;
};

struct stream {
	streams *ss;
	st_dlink link;           /* on ss->all while registered */
	st_dlink blink;          /* on ss->behind while behind (flow control): linked == behind */
	st_dlink ulink;          /* on ss->untils while has_until and registered */
	uint64_t behind_since;   /* ms, when it joined the behind list */
	uint64_t honour_start;   /* ms, start of its current honour window */
	uint64_t honour_used;    /* ms of intake pause it caused in that window */
	http_req *req;           /* until the response starts; then NULL */
	http_stream *hs;         /* after the response started; NULL once closed */
	hub_sub *sub;            /* NULL once out of the hub */
	subq *q;                 /* live queue, owned */
	subq *hold;              /* replay hold buffer, owned, only while CHECKING/REPLAYING */
	replay_job *job;         /* the outstanding check or fetch, or NULL */
	frame **chunk;           /* replay rows not yet written (own a reference each) */
	size_t chunk_n, chunk_i;
	bool chunk_done;         /* the last fetch returned fewer rows than asked */
	char **topics;           /* owned copies; kept while a replay may need them */
	size_t *topic_lens;
	size_t n_topics;
	enum frame_format fmt;
	enum stream_state state;
	enum stream_outcome outcome;
	enum stream_outcome handed;  /* the terminal envelope handed to the connection, if any */
	bool is_head;            /* HEAD request: headers only, not counted */
	bool has_after, has_until;
	bool until_head;         /* until=head: resolved to the check's database head */
	bool until_known;        /* until holds its final value */
	uint64_t after;          /* Last-Event-ID */
	uint64_t until;          /* complete once the history reached this seq */
	uint64_t h0;             /* hub head when registered */
	uint64_t d;              /* database head of the replay snapshot */
	uint64_t seam;           /* live: items at or below it were covered at release (overlap) */
	uint32_t fetch_limit;    /* rows asked of the next replay chunk */
	uint64_t cursor;         /* last seq the replay fetched */
	uint64_t last_id;        /* last id written (items and resyncs) */
	uint64_t exp_ms;         /* access control: the token's exp (wall-clock ms), 0 = none */
	struct event *ev_exp;    /* ends the stream at exp_ms (reconnect token_expired), owned */
	bool ip_held;            /* holds one of ip's slots in cfg.ip_limit */
	uint8_t ip[16];          /* the client's address (X-Forwarded-For from a trusted proxy) */
};

/* The registry in order (newest first): NULL past the end. */
static stream *
registry_first(streams *ss)
{
	st_dlink *n = st_dlist_first(&ss->all);

	return n ? ST_CONTAINER_OF(n, stream, link) : NULL;
}

static stream *
registry_after(streams *ss, stream *s)
{
	st_dlink *n = st_dlist_after(&ss->all, &s->link);

	return n ? ST_CONTAINER_OF(n, stream, link) : NULL;
}

static void stream_pump(stream *s);
static void behind_leave(stream *s, uint64_t now);
static void stream_release(stream *s);
static void stream_fetch(stream *s);
static void stream_unlink(stream *s);
static void stream_free(stream *s);
static void streams_check_drained(streams *ss);

/* The one end of a registered stream: out of the registry, freed, and a drain told. */
static void
stream_destroy(stream *s)
{
	streams *ss = s->ss;

	stream_unlink(s);
	stream_free(s);
	streams_check_drained(ss);
}

/* ---- small helpers ---------------------------------------------------- */

static void
frame_release_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	frame_unref(arg);
}

static void
chunk_clear(stream *s)
{
	for (size_t i = s->chunk_i; i < s->chunk_n; i++)
		frame_unref(s->chunk[i]);
	ST_FREE(&s->chunk);
	s->chunk_n = s->chunk_i = 0;
}

static void
stream_leave_hub(stream *s)
{
	if (s->sub) {
		hub_unsubscribe(s->ss->hub, s->sub);
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
	chunk_clear(s);
}

/*
 * Stops a resume where it is (the check or the fetch, the rows not yet
 * written, the hold buffer): from here the stream is live, and whatever
 * ends it goes out after what it has written.
 */
static void
stream_replay_stop(stream *s)
{
	stream_cancel_job(s);
	chunk_clear(s);
	subq_free(s->hold);
	s->hold = NULL;
	s->state = ST_LIVE;
}

static void
stream_free(stream *s)
{
	if (s->ev_exp)
		event_free(s->ev_exp);
	if (s->ip_held)
		iplimit_release(s->ss->cfg.ip_limit, s->ip);
	behind_leave(s, st_clock_now(s->ss->clock));
	stream_inputs_stop(s);
	subq_free(s->q);
	subq_free(s->hold);
	stream_free_topics(s);
	free(s);
}

/* Records the outcome once; the first one wins. */
static void
stream_finish(stream *s, enum stream_outcome o)
{
	streams *ss = s->ss;

	if (s->outcome == OUT_NONE) {
		s->outcome = o;
		st_counter_inc(ss->m_outcome[o]);
	}
}

/*
 * Frames the pump hands to the socket in one go (http_stream_write_refs:
 * one writev, no copy, no allocation), bounded so the backlog check between
 * them stays meaningful.
 */
#define STREAM_BATCH 64
#define STREAM_BATCH_BYTES (16u * 1024)

typedef struct out_batch {
	http_ref r[STREAM_BATCH];
	size_t n;
	size_t bytes;
} out_batch;

static void
batch_flush(stream *s, out_batch *b)
{
	if (b->n == 0)
		return;
	if (s->hs) {
		http_stream_write_refs(s->hs, b->r, b->n);
	} else {
		for (size_t i = 0; i < b->n; i++)
			frame_unref(b->r[i].arg);
	}
	b->n = 0;
	b->bytes = 0;
}

static void stream_write_frame_to(stream *s, frame *f, out_batch *b);

/* A single frame (resyncs, failures, heartbeats, drops): straight to the socket's queue. */
static void
stream_write_frame(stream *s, frame *f)
{
	stream_write_frame_to(s, f, NULL);
}

/*
 * The last step before the socket: ids strictly increase, a terminal frame
 * ends the stream.  Consumes the caller's reference to f.  With b, the frame
 * joins the batch (flushed when full, and before a terminal frame).
 */
static void
stream_write_frame_to(stream *s, frame *f, out_batch *b)
{
	enum frame_type t = frame_type(f);
	const char *bytes;
	size_t len;
	bool term;

	if (s->hs == NULL || s->state == ST_ENDING) {
		frame_unref(f);
		return;
	}
	if (t == FRAME_ITEM || t == FRAME_RESYNC) {
		uint64_t id = frame_seq(f);

		if (id <= s->last_id) {
			/* ADR-WEB-ADV-001: a repeated or regressing position is refused. */
			st_counter_inc(s->ss->m_refused);
			frame_unref(f);
			return;
		}
		s->last_id = id;
	}
	/* Read before the hand-over: a failed reference frees f at once. */
	term = frame_is_terminal(f);
	bytes = frame_bytes(f, s->fmt, &len);
	st_counter_inc(s->ss->m_frames);
	if (b != NULL && !term) {
		b->r[b->n++] = (http_ref){ bytes, len, frame_release_cb, f, frame_origin_ns(f) };
		b->bytes += len;
		if (b->n == STREAM_BATCH || b->bytes >= STREAM_BATCH_BYTES)
			batch_flush(s, b);
		return;
	}
	if (b != NULL)
		batch_flush(s, b);
	http_stream_write_ref(s->hs, bytes, len, frame_release_cb, f);
	if (term) {
		/* Counted when the bytes have left (on_close), not on hand-over. */
		s->handed = t == FRAME_COMPLETE ? OUT_COMPLETE : t == FRAME_FAILURE ? OUT_FAILURE : OUT_RECONNECT;
		s->state = ST_ENDING;
		stream_inputs_stop(s);
		http_stream_end(s->hs);
	}
}

/*
 * The queue dropped the subscriber (ADR-0197): it holds only the reconnect.
 * Take it out of the hub and hand the reconnect to the socket whatever its
 * backlog; a socket that will not take even that is closed by the end's
 * drain timeout.
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
	uint64_t blocked = s->hs ? http_stream_blocked_ms(s->hs, st_clock_now(s->ss->clock)) : 0;

	/* SUBQ_DROP also answers pushes after a terminal frame; only a real drop ends us here. */
	if (subq_push(s->q, f, blocked) == SUBQ_DROP && subq_is_dropped(s->q) && s->state < ST_CLOSING) {
		s->state = ST_CLOSING;
		stream_dropped(s);
	}
}

/* ---- flow control ------------------------------------------------------ */

static void
behind_leave(stream *s, uint64_t now)
{
	if (!st_dlink_linked(&s->blink))
		return;
	s->honour_used += now - s->behind_since;
	st_dlink_unlink(&s->blink);
}

/* After a push: a stream with a burst queued joins the behind list, if its budget allows. */
static void
behind_check(stream *s)
{
	streams *ss = s->ss;
	uint64_t now;

	if (st_dlink_linked(&s->blink) || s->state != ST_LIVE || s->hs == NULL ||
	    (subq_count(s->q) < STREAM_BEHIND_FRAMES && subq_bytes(s->q) < STREAM_BEHIND_BYTES))
		return;
	now = st_clock_now(ss->clock);
	if (now - s->honour_start > STREAM_HONOUR_WINDOW_MS) {
		s->honour_start = now;
		s->honour_used = 0;
	}
	if (s->honour_used >= STREAM_HONOUR_MS)
		return;
	s->behind_since = now;
	st_dlist_push_front(&ss->behind, &s->blink);
}

bool
streams_backpressure(streams *ss)
{
	uint64_t now = st_clock_now(ss->clock);
	st_dlink *n, *next;

	for (n = st_dlist_first(&ss->behind); n != NULL; n = next) {
		stream *s = ST_CONTAINER_OF(n, stream, blink);

		next = st_dlist_after(&ss->behind, n);
		if (s->state != ST_LIVE || s->hs == NULL || subq_count(s->q) < STREAM_CAUGHT_UP ||
		    http_stream_blocked_ms(s->hs, now) > STREAM_STALL_MS ||
		    s->honour_used + (now - s->behind_since) >= STREAM_HONOUR_MS)
			behind_leave(s, now);
	}
	return !st_dlist_empty(&ss->behind);
}

/* ---- hub callbacks ----------------------------------------------------- */

/* Frames after the client's until bound are not for this stream. */
static bool
beyond_until(const stream *s, const frame *f)
{
	return s->has_until && s->until_known && frame_seq(f) > s->until;
}

static void
hub_deliver_cb(void *arg, frame *f)
{
	stream *s = arg;

	if (beyond_until(s, f))
		return;
	switch (s->state) {
	case ST_CHECKING:
	case ST_REPLAYING:
		/*
		 * What the replay covers (up to the client's id, then up to the
		 * snapshot head d) never enters the hold buffer: an edge that is
		 * still catching up on a burst would otherwise fill it with frames
		 * the replay sends anyway, overflow it, and lose the live frames
		 * above d with them (a needless resync).
		 */
		if (frame_type(f) == FRAME_ITEM &&
		    frame_seq(f) <= (s->state == ST_REPLAYING ? s->d : s->after)) {
			st_counter_inc(s->ss->m_seam_overlap);
			break;
		}
		(void)subq_push(s->hold, f, 0);
		break;
	case ST_LIVE:
		/*
		 * After release the edge's live history can still lag the
		 * database (a batch waiting for another writer's message): frames
		 * the replay already covered arrive now.  They are overlap, not a
		 * bug, so they stop here and the last step's id guard stays an
		 * alarm for real bugs.
		 */
		if (frame_type(f) == FRAME_ITEM && frame_seq(f) <= s->seam) {
			st_counter_inc(s->ss->m_seam_overlap);
			break;
		}
		stream_push_live(s, f);
		/* A message carries many frames: write as they come, not only at the batch's end. */
		if (subq_count(s->q) >= STREAM_PUMP_AT) {
			stream_pump(s);
			behind_check(s);
		}
		break;
	case ST_CLOSING: /* the queue takes nothing after its terminal frame */
	case ST_ENDING:
		break;
	}
}

static void
stream_maybe_complete(stream *s)
{
	frame *f;

	if (!s->has_until || !s->until_known || s->state != ST_LIVE || s->ss->head < s->until)
		return;
	s->state = ST_CLOSING;
	f = frame_complete_new();
	stream_push_live(s, f);
	frame_unref(f);
	stream_pump(s);
}

static void
hub_flush_cb(void *arg)
{
	stream *s = arg;

	if (s->state == ST_LIVE || s->state == ST_CLOSING)
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
	out_batch b = { .n = 0 };

	if (s->hs == NULL)
		return;
	/* Room is checked between batches: a batch holds at most
	 * STREAM_BATCH_BYTES more than the low watermark allows. */
	while (s->state != ST_ENDING && s->hs && (b.n > 0 || stream_has_room(s))) {
		frame *f;

		if (s->state == ST_REPLAYING) {
			if (s->chunk_i < s->chunk_n) {
				f = s->chunk[s->chunk_i++];
				s->cursor = frame_seq(f);
				stream_write_frame_to(s, f, &b);
				continue;
			}
			/* Anything below may write frames of its own: ours go first. */
			batch_flush(s, &b);
			if (s->job != NULL)
				return; /* the next rows are on their way */
			if (!s->chunk_done) {
				stream_fetch(s);
				return;
			}
			stream_release(s);
			continue;
		}
		if (s->state != ST_LIVE && s->state != ST_CLOSING)
			break;
		if ((f = subq_pop(s->q)) == NULL)
			break;
		stream_write_frame_to(s, f, &b);
	}
	batch_flush(s, &b);
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
	stream_finish(s, !abrupt && s->handed != OUT_NONE ? s->handed : OUT_ABRUPT);
	stream_destroy(s);
}

static const char *
format_content_type(enum frame_format f)
{
	switch (f) {
	case FRAME_NDJSON: return "application/x-ndjson";
	case FRAME_JSONSEQ: return "application/json-seq";
	default: return "text/event-stream; charset=utf-8";
	}
}

/* A retry hint drawn uniformly from [mid/2, 3 mid/2]: refused clients do not come back together. */
static uint32_t
retry_jitter(streams *ss, uint32_t mid)
{
	ss->rng ^= ss->rng << 13;
	ss->rng ^= ss->rng >> 7;
	ss->rng ^= ss->rng << 17;
	return mid / 2 + (uint32_t)(ss->rng % (mid + 1));
}

static void
refusal_send(streams *ss, http_req *req, enum frame_format fmt, enum refusal why, uint32_t retry_ms,
             const char *detail)
{
	char hdr[40];

	st_counter_inc(ss->m_refusal[why]);
	if (fmt == FRAME_SSE) {
		frame *f = frame_reconnect_new(retry_ms, refusal_names[why]);
		size_t len;
		const char *body = frame_bytes(f, FRAME_SSE, &len);

		http_reply(req, 200, format_content_type(FRAME_SSE), body, len, NULL);
		frame_unref(f);
		return;
	}
	snprintf(hdr, sizeof(hdr), "Retry-After: %u\r\n", (retry_ms + 999) / 1000);
	http_reply_problem(req, why == RF_OVERLOADED ? 429 : 503, NULL,
	                   why == RF_OVERLOADED ? "Too Many Requests" : "Service Unavailable", detail, hdr);
}

/*
 * A refusal that retrying can fix.  A browser's EventSource treats every
 * answer but 200 as final and never reconnects, so a client that asked for
 * SSE gets 200, one reconnect envelope (its retry: hint jittered between
 * half and one and a half times the reason's middle, so refused clients do
 * not come back together) and the end of the response.  NDJSON and json-seq
 * clients read statuses: they get the problem document with Retry-After.
 * Frees req.
 */
static void
refuse_retryable(streams *ss, http_req *req, enum frame_format fmt, enum refusal why, const char *detail)
{
	refusal_send(ss, req, fmt, why, retry_jitter(ss, refusal_retry_ms[why]), detail);
}

static void stream_send_reconnect(stream *s, uint32_t retry_ms, const char *reason);

/* The token's exp passed: the client comes back with a fresh token and its last id. */
static void
exp_cb(evutil_socket_t fd, short what, void *arg)
{
	stream *s = arg;

	(void)fd;
	(void)what;
	stream_send_reconnect(s, retry_jitter(s->ss, 1000), "token_expired");
}

/*
 * exp is wall-clock time (the issuer's); the timer runs on the loop's
 * monotonic clock, so the delay is measured once, here, from the store's
 * wall clock.  A token accepted within the leeway after its exp ends at once.
 */
static void
stream_arm_expiry(stream *s)
{
	streams *ss = s->ss;
	uint64_t now, left;
	struct timeval tv;

	if (ss->cfg.auth == NULL || s->exp_ms == 0)
		return;
	now = auth_store_now_ms(ss->cfg.auth);
	left = s->exp_ms > now ? s->exp_ms - now : 0;
	tv = st_timeval_ms(left);
	s->ev_exp = evtimer_new(ss->base, exp_cb, s);
	ST_ASSERT(s->ev_exp != NULL);
	evtimer_add(s->ev_exp, &tv);
}

static void
stream_start_response(stream *s)
{
	static const http_stream_cbs cbs = { on_writable, on_close };
	http_req *req = s->req;

	s->req = NULL;
	s->hs = http_stream_start(req, 200, format_content_type(s->fmt), NULL, &cbs, s);
	stream_arm_expiry(s);
}

/* ---- replay ------------------------------------------------------------ */

/*
 * The replay cannot go on.  A database that failed or a full replay queue
 * passes: the client is told to come back with its last id (reconnect
 * unavailable, a jittered hint), as it would be before the first byte; a
 * proper client stops for good on `failure`, so that is kept for a row the
 * edge cannot read (ST_EPROTO: a defect, retrying gives the same row).
 */
static void
stream_fail(stream *s, st_err err, const char *detail)
{
	stream_replay_stop(s);
	if (err == ST_EPROTO)
		stream_write_frame(s, frame_failure_new(500, "Replay failed", detail));
	else
		stream_write_frame(s, frame_reconnect_new(retry_jitter(s->ss, refusal_retry_ms[RF_UNAVAILABLE]),
		                                          refusal_names[RF_UNAVAILABLE]));
}

static void
on_rows(void *arg, st_err err, frame *const *frames, size_t n, bool done, uint64_t horizon)
{
	stream *s = arg;

	s->job = NULL;
	if (err != ST_OK) {
		st_counter_inc(s->ss->m_replay[RR_ERROR]);
		stream_fail(s, err, err == ST_EPROTO ? "a stored event could not be read" :
		                                      "the database failed during the replay; reconnect with Last-Event-ID");
		return;
	}
	chunk_clear(s);
	if (horizon > s->cursor) {
		/*
		 * Retention deleted rows after our cursor while we replayed: never
		 * a silent hole (ADR-WEB-ADV-001).  One resync, then live from d.
		 */
		st_counter_inc(s->ss->m_replay[RR_EXPIRED]);
		stream_write_frame(s, frame_resync_new(s->d, "cursor_expired"));
		s->chunk_done = true;
		stream_pump(s);
		return;
	}
	st_counter_add(s->ss->m_replay_rows, n);
	/*
	 * The chunk was cut by the database to SUBQ_MAX_BYTES (ADR-0197 bounds
	 * what a stream holds) or to fetch_limit rows: every row is kept, none
	 * is read twice.  The next limit follows what the bytes allow, so a
	 * chunk of large rows does not make the database walk (index entries
	 * and row headers, not data) far past the cut every time.
	 */
	if (!done && n < s->fetch_limit)
		s->fetch_limit = (uint32_t)ST_MAX(8, ST_MIN(2 * n, STREAM_REPLAY_CHUNK));
	else
		s->fetch_limit = (uint32_t)ST_MIN(2u * s->fetch_limit, STREAM_REPLAY_CHUNK);
	if (n) {
		s->chunk = st_xcalloc(n, sizeof(*s->chunk));
		for (size_t i = 0; i < n; i++)
			s->chunk[i] = frame_ref(frames[i]);
		s->chunk_n = n;
	}
	s->chunk_done = done;
	stream_pump(s);
}

static void
stream_fetch(stream *s)
{
	uint64_t upto = s->has_until ? ST_MIN(s->d, s->until) : s->d;

	if (s->cursor >= upto) {
		s->chunk_done = true;
		stream_release(s);
		stream_pump(s);
		return;
	}
	s->job = replay_fetch(s->ss->pool, (const char *const *)s->topics, s->topic_lens, s->n_topics, s->cursor,
	                      upto, s->fetch_limit, SUBQ_MAX_BYTES, on_rows, s);
	if (s->job == NULL) {
		st_counter_inc(s->ss->m_replay[RR_ERROR]);
		stream_fail(s, ST_EBUSY, "the replay queue is full; reconnect with Last-Event-ID");
	}
}

/*
 * The seam: the replay has written (after, d]; the hold buffer has every
 * live frame since registration.  Move what follows d to the live queue.
 */
static void
stream_release(stream *s)
{
	streams *ss = s->ss;
	uint64_t floor = s->d;
	frame *f;

	s->state = ST_LIVE;
	if (s->h0 > s->d) {
		/* A frame the hub had before we registered is not in the replay. */
		st_counter_inc(ss->m_seam_gap);
		st_warn("stream seam gap: hub head %llu above replay head %llu", (unsigned long long)s->h0,
		        (unsigned long long)s->d);
		floor = ST_MAX(ss->head, s->last_id + 1);
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
			st_counter_inc(ss->m_seam_overlap);
			frame_unref(f);
			continue;
		}
		stream_push_live(s, f);
		frame_unref(f);
		if (s->state != ST_LIVE)
			break;
	}
	subq_free(s->hold);
	s->hold = NULL;
	stream_free_topics(s);
	stream_maybe_complete(s);
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
 * A hold that overflows during the replay itself is ADR-0197's case (the
 * client reads slower than the live traffic): resync at release.
 */
static void
stream_hold_settle(stream *s)
{
	frame *f;

	while ((f = subq_peek(s->hold)) != NULL && frame_type(f) == FRAME_ITEM && frame_seq(f) <= s->d) {
		st_counter_inc(s->ss->m_seam_overlap);
		frame_unref(subq_pop(s->hold));
	}
	if (subq_hold_overflowed(s->hold) && subq_overflow_seq(s->hold) > s->d)
		s->d = subq_overflow_seq(s->hold);
}

static void
on_check(void *arg, st_err err, uint64_t d, uint64_t horizon, uint64_t count)
{
	stream *s = arg;
	streams *ss = s->ss;

	s->job = NULL;
	if (err != ST_OK) {
		st_counter_inc(ss->m_replay[RR_ERROR]);
		refuse_retryable(ss, s->req, s->fmt, RF_UNAVAILABLE, "the event store cannot be reached; retry later");
		s->req = NULL;
		goto drop;
	}
	if (s->after > d) {
		st_counter_inc(ss->m_replay[RR_FUTURE]);
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
	s->fetch_limit = STREAM_REPLAY_CHUNK;
	stream_start_response(s);
	if (s->after < horizon) {
		st_counter_inc(ss->m_replay[RR_EXPIRED]);
		stream_write_frame(s, frame_resync_new(d, "cursor_expired"));
		s->chunk_done = true;
		s->state = ST_REPLAYING;
		stream_pump(s);
		return;
	}
	if (count > ss->cfg.replay_cap) {
		st_counter_inc(ss->m_replay[RR_CAP]);
		stream_write_frame(s, frame_resync_new(d, "replay_cap"));
		s->chunk_done = true;
		s->state = ST_REPLAYING;
		stream_pump(s);
		return;
	}
	st_counter_inc(ss->m_replay[RR_OK]);
	stream_hold_settle(s);
	s->state = ST_REPLAYING;
	s->chunk_done = (count == 0 && s->d == d);
	stream_pump(s);
	return;
drop:
	stream_destroy(s);
}

static void
on_req_gone(void *arg)
{
	stream *s = arg;

	s->req = NULL;
	stream_destroy(s);
}

/* ---- the request ------------------------------------------------------- */

static void
head_noop_writable(void *arg)
{
	(void)arg;
}

static void
head_noop_close(void *arg, bool abrupt)
{
	(void)arg;
	(void)abrupt;
}

static void
stream_link(streams *ss, stream *s)
{
	st_dlist_push_front(&ss->all, &s->link);
	ss->n_streams++;
	if (s->has_until) {
		ss->n_until++;
		st_dlist_push_front(&ss->untils, &s->ulink);
	}
	/* The slot was reserved in the gauge by stream_slot_reserve; stream_unlink gives it back. */
}

/* One slot of --max-streams in the gauge every loop shares (deltas, not a set). */
static bool
stream_slot_reserve(streams *ss)
{
	if (ss->cfg.max_streams == 0) {
		st_gauge_add(ss->m_open, 1);
		return true;
	}
	return st_gauge_inc_below(ss->m_open, (int64_t)ss->cfg.max_streams);
}

static void
stream_unlink(stream *s)
{
	streams *ss = s->ss;

	if (ss->hb_cursor == s)
		ss->hb_cursor = registry_after(ss, s);
	st_dlink_unlink(&s->link);
	ss->n_streams--;
	if (s->has_until) {
		ss->n_until--;
		st_dlink_unlink(&s->ulink);
	}
	st_gauge_add(ss->m_open, -1);
}

/*
 * Access control before the first byte (RFC 6750 3): no token is 401 with
 * a bare "Bearer" challenge; a token that fails any check is 401
 * invalid_token; a valid token missing a topic is 403 insufficient_scope.
 * The client learns nothing more (which check failed is logged at debug
 * level, without the token).  On success the token's exp is kept for the
 * stream's end.  On refusal answers req and returns false.
 */
static bool
stream_authorize(streams *ss, stream *s, http_req *req, const char *query_token)
{
	const char *why = "";
	uint64_t exp = 0;
	enum auth_result r =
	    auth_store_check(ss->cfg.auth, http_req_header(req, "Authorization"), http_req_header(req, "Cookie"),
	                     query_token, (const char *const *)s->topics, s->topic_lens, s->n_topics, &exp, &why);

	if (r == AUTH_OK) {
		s->exp_ms = exp;
		return true;
	}
	st_counter_inc(ss->m_auth[r]);
	st_debug("stream refused (%s): %s", auth_result_name(r), why);
	switch (r) {
	case AUTH_MISSING:
		http_reply_problem(req, 401, NULL, "Unauthorized", "this stream needs a bearer token",
		                   "WWW-Authenticate: Bearer\r\n");
		break;
	case AUTH_FORBIDDEN:
		http_reply_problem(req, 403, NULL, "Forbidden", "the token does not allow every requested topic",
		                   "WWW-Authenticate: Bearer error=\"insufficient_scope\"\r\n");
		break;
	default:
		http_reply_problem(req, 401, NULL, "Unauthorized", "the bearer token is not valid",
		                   "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n");
		break;
	}
	return false;
}

/*
 * A refusal that retrying can fix.  A browser's EventSource treats every
 * answer but 200 as final and never reconnects, so a client that asked for
 * SSE gets 200, one reconnect envelope (its retry: hint jittered between
 * half and one and a half times the reason's middle, so refused clients do
 * not come back together) and the end of the response.  NDJSON and json-seq
 * clients read statuses: they get the problem document with Retry-After.
 * Frees req.
 */
void
streams_handle(streams *ss, http_req *req, bool ready)
{
	streamreq rq = { 0 };
	streamreq_problem why;
	stream *s;

	s = st_xcalloc(1, sizeof(*s));
	s->ss = ss;
	s->outcome = OUT_NONE;
	s->handed = OUT_NONE;
	s->is_head = strcmp(http_req_method(req), "HEAD") == 0;
	if (streamreq_parse(http_req_query(req), http_req_header(req, "Accept"), http_req_header(req, "Last-Event-ID"),
	                    ss->cfg.auth != NULL && auth_store_query_token(ss->cfg.auth), &rq, &why) != ST_OK) {
		http_reply_problem(req, why.status, NULL, why.title, why.detail, NULL);
		goto refuse;
	}
	/* The stream takes the topics over (a replay may need them after the request is gone). */
	s->topics = rq.topics;
	s->topic_lens = rq.topic_lens;
	s->n_topics = rq.n_topics;
	rq.topics = NULL;
	rq.topic_lens = NULL;
	rq.n_topics = 0;
	s->fmt = rq.fmt;
	s->has_after = rq.has_after;
	s->after = rq.after;
	s->has_until = rq.has_until;
	s->until_head = rq.until_head;
	s->until = rq.until;
	s->until_known = rq.has_until && !rq.until_head;
	/* Before the retryable refusals: retrying cannot fix a missing or bad token. */
	if (ss->cfg.auth && !stream_authorize(ss, s, req, rq.access_token))
		goto refuse;
	/*
	 * The retryable refusals come after the query is read: what the client
	 * gets depends on the format it asked for, and a request that retrying
	 * cannot fix (400, 406) says so even while the edge drains.
	 */
	if (ss->draining) {
		refuse_retryable(ss, req, s->fmt, RF_DRAINING, "this edge is draining; reconnect");
		goto refuse;
	}
	/* The same readiness as /readyz: the database, a known head, a recent writer tick. */
	if (!ready || !ss->head_known) {
		refuse_retryable(ss, req, s->fmt, RF_NOT_READY, "this edge is not ready yet");
		goto refuse;
	}
	/*
	 * One client's share (--max-streams-per-ip).  Not a retryable refusal
	 * like a full edge: the client itself holds the streams, and telling
	 * its EventSources to come back would only loop; so 429 with
	 * Retry-After in every format.  stream_free gives the slot back.
	 */
	if (!s->is_head && iplimit_enabled(ss->cfg.ip_limit)) {
		uint8_t peer[16];

		http_req_peer_ip(req, peer);
		iplimit_client(ss->cfg.ip_limit, peer, http_req_header(req, "X-Forwarded-For"), s->ip);
		if (!iplimit_acquire(ss->cfg.ip_limit, s->ip)) {
			char text[64];

			st_counter_inc(ss->m_ip_refused);
			st_debug("stream refused: %s holds its maximum of streams",
			         iplimit_addr_str(s->ip, text, sizeof(text)));
			http_reply_problem(req, 429, NULL, "Too Many Requests", "too many streams from this address",
			                   "Retry-After: 5\r\n");
			goto refuse;
		}
		s->ip_held = true;
	}
	/*
	 * The shared gauge: the bound is the edge's, whichever loop took the
	 * connection.  A GET reserves its slot in one atomic step (check and
	 * add), so loops accepting at the same moment cannot both take the
	 * last one; stream_link takes the reserved slot over.  A HEAD opens no
	 * stream: it only looks.
	 */
	if (s->is_head ? ss->cfg.max_streams && st_gauge_get(ss->m_open) >= (int64_t)ss->cfg.max_streams
	               : !stream_slot_reserve(ss)) {
		refuse_retryable(ss, req, s->fmt, RF_OVERLOADED, "this edge serves its maximum of streams");
		goto refuse;
	}
	if (s->is_head) {
		/*
		 * The headers a GET would get after the same checks (the resume
		 * check against the database is not run for a HEAD); no body, so
		 * no stream to keep and no outcome to count.
		 */
		static const http_stream_cbs none = { head_noop_writable, head_noop_close };

		(void)http_stream_start(req, 200, format_content_type(s->fmt), NULL, &none, NULL);
		goto refuse;
	}
	s->q = subq_new(ss->clock, &ss->dropped, false);
	s->req = req;
	s->h0 = ss->head;
	s->last_id = 0;
	stream_link(ss, s);
	s->sub = hub_subscribe(ss->hub, s, (const char *const *)s->topics, s->topic_lens, s->n_topics);
	if (!s->has_after && !s->has_until) {
		/* Live only: nothing to check, the first byte goes out now. */
		s->state = ST_LIVE;
		stream_free_topics(s);
		stream_start_response(s);
		goto out;
	}
	/* until without an id reads the retained history from its start. */
	s->state = ST_CHECKING;
	s->hold = subq_new(ss->clock, &ss->dropped, true);
	http_req_set_gone_cb(req, on_req_gone, s);
	/* A numeric until bounds the count: events after it are never sent, so they cannot exceed the cap. */
	s->job = replay_check(ss->pool, (const char *const *)s->topics, s->topic_lens, s->n_topics, s->after,
	                      s->has_until && !s->until_head ? s->until : UINT64_MAX, ss->cfg.replay_cap, on_check, s);
	if (s->job == NULL) {
		st_counter_inc(ss->m_replay[RR_ERROR]);
		refuse_retryable(ss, req, s->fmt, RF_UNAVAILABLE, "the replay queue is full; retry later");
		s->req = NULL;
		stream_destroy(s);
	}
	goto out;
refuse:
	stream_free(s);
out:
	streamreq_fini(&rq);
}

/* ---- fan-out, heartbeats, drain ------------------------------------------ */

/* Only bounded streams are visited, not the registry. */
static void
streams_visit_until(streams *ss)
{
	st_dlink *n, *next;

	for (n = st_dlist_first(&ss->untils); n != NULL; n = next) {
		next = st_dlist_after(&ss->untils, n);
		stream_maybe_complete(ST_CONTAINER_OF(n, stream, ulink));
	}
}

void
streams_publish(streams *ss, frame *const *frames, size_t n, uint64_t head)
{
	ss->head = head;
	ss->head_known = true;
	hub_publish(ss->hub, frames, n);
	streams_visit_until(ss);
}

void
streams_set_head(streams *ss, uint64_t head)
{
	if (head > ss->head || !ss->head_known) {
		ss->head = head;
		ss->head_known = true;
		streams_visit_until(ss);
	}
}

bool
streams_ready(const streams *ss)
{
	return ss->head_known;
}

/*
 * Heartbeats go to every live stream once per interval.  Pushing one also
 * runs ADR-0197's blocked-write check, which is why every stream gets one,
 * even a busy one.  The sweep is sliced so one callback stays bounded.
 */
static void
heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	uint64_t now = st_clock_now(ss->clock);
	size_t visited = 0;
	stream *s;

	(void)fd;
	(void)what;
	if (!ss->hb_sweeping) {
		ss->hb_sweeping = true;
		ss->hb_cursor = registry_first(ss);
	}
	while ((s = ss->hb_cursor) != NULL && visited < STREAM_HEARTBEAT_SLICE) {
		ss->hb_cursor = registry_after(ss, s);
		visited++;
		if (s->hs == NULL || s->state == ST_ENDING)
			continue;
		if (s->state == ST_CLOSING || (s->state == ST_LIVE && subq_is_closed(s->q))) {
			/*
			 * A terminal frame waits behind a socket that takes nothing:
			 * the queue refuses pushes now, so the blocked rule is applied
			 * here.  Closed without its terminal: abrupt_close.
			 */
			if (http_stream_blocked_ms(s->hs, now) > SUBQ_BLOCKED_MS) {
				st_counter_add(ss->dropped.blocked, subq_count(s->q));
				http_stream_abort(s->hs);
			}
		} else if (s->state == ST_LIVE) {
			stream_push_live(s, ss->heartbeat);
			stream_pump(s);
		} else if (s->state == ST_REPLAYING) {
			if (http_stream_blocked_ms(s->hs, now) > SUBQ_BLOCKED_MS) {
				/* A replay paced by a socket that takes nothing: the same rule. */
				stream_push_live(s, ss->heartbeat);
			} else if (http_stream_backlog(s->hs) <= http_stream_low_watermark(s->hs)) {
				/* A replay waiting on the database still heartbeats (proxies' idle timeouts). */
				stream_write_frame(s, frame_ref(ss->heartbeat));
			}
		}
	}
	if (ss->hb_cursor != NULL) {
		struct timeval at_once = { 0, 0 };

		event_add(ss->ev_heartbeat, &at_once);
		return;
	}
	ss->hb_sweeping = false;
	{
		struct timeval tv = st_timeval_ms(ss->cfg.heartbeat_ms);

		event_add(ss->ev_heartbeat, &tv);
	}
}

static void
drain_done_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	void (*done)(void *) = ss->drain_done;

	(void)fd;
	(void)what;
	ss->drain_done = NULL;
	if (done)
		done(ss->drain_arg);
}

static void
streams_check_drained(streams *ss)
{
	if (ss->draining && ss->n_streams == 0 && ss->drain_done)
		event_active(ss->ev_drain_done, 0, 0);
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	stream *s, *next;

	(void)fd;
	(void)what;
	for (s = registry_first(ss); s; s = next) {
		next = registry_after(ss, s);
		if (s->hs)
			http_stream_abort(s->hs); /* on_close follows, deferred */
	}
}

/* reason: "draining" or "token_expired" (only once the response started). */
static void
stream_send_reconnect(stream *s, uint32_t retry_ms, const char *reason)
{
	frame *f = frame_reconnect_new(retry_ms, reason);

	if (s->state == ST_CHECKING) {
		frame_unref(f);
		stream_cancel_job(s);
		refusal_send(s->ss, s->req, s->fmt, RF_DRAINING, retry_ms, "this edge is draining; reconnect");
		s->req = NULL;
		stream_destroy(s);
		return;
	}
	if (s->state == ST_REPLAYING) {
		/* Stop the replay where it is; the client resumes from its last id elsewhere. */
		stream_replay_stop(s);
	}
	if (s->state == ST_LIVE || s->state == ST_CLOSING) {
		/*
		 * Terminal frames are always accepted; it goes out after what is
		 * queued, as the client reads.  A client that reads nothing is
		 * closed by the grace timer, never before.  (Already CLOSING: the
		 * first terminal frame stands and this one is refused.)
		 */
		s->state = ST_CLOSING;
		stream_leave_hub(s);
		(void)subq_push(s->q, f, 0);
		stream_pump(s);
	}
	frame_unref(f);
}

void
streams_drain(streams *ss, void (*done)(void *arg), void *arg)
{
	struct timeval tv = st_timeval_ms(ss->cfg.drain_grace_ms);
	size_t n = ss->n_streams, i = 0;
	stream *s, *next;

	if (ss->draining)
		return;
	ss->draining = true;
	ss->drain_done = done;
	ss->drain_arg = arg;
	/*
	 * ADR-WEB-ADV-001: ask clients to reconnect, with hints spread evenly
	 * over the grace period so they do not all come back at once.
	 */
	for (s = registry_first(ss); s; s = next) {
		uint32_t retry = n ? (uint32_t)(((uint64_t)ss->cfg.drain_grace_ms * (2 * i + 1)) / (2 * n)) : 0;

		next = registry_after(ss, s);
		i++;
		stream_send_reconnect(s, retry, "draining");
	}
	event_add(ss->ev_grace, &tv);
	streams_check_drained(ss);
}

bool
streams_draining(const streams *ss)
{
	return ss->draining;
}

size_t
streams_count(const streams *ss)
{
	return ss->n_streams;
}

streams_metrics *
streams_metrics_new(st_metrics *m)
{
	streams_metrics *sm = st_xcalloc(1, sizeof(*sm));
	char labels[64];

	sm->dropped.coalesced = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"coalesced\"",
	                                           "Frames dropped from stream queues, by reason (ADR-0197).");
	sm->dropped.overflow = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"overflow\"", NULL);
	sm->dropped.replay = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"replay\"", NULL);
	sm->dropped.blocked = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"blocked\"", NULL);
	sm->open = st_metrics_gauge(m, "studio_streams_open", NULL, "Streams open now.");
	for (int i = 0; i < OUT_COUNT; i++) {
		snprintf(labels, sizeof(labels), "outcome=\"%s\"", outcome_names[i]);
		sm->outcome[i] = st_metrics_counter(m, "studio_stream_outcomes_total", labels,
		                                    i == 0 ? "Streams ended, by outcome (ADR-WEB-ADV-001)." : NULL);
	}
	for (int i = 0; i < RR_COUNT; i++) {
		snprintf(labels, sizeof(labels), "result=\"%s\"", replay_result_names[i]);
		sm->replay[i] = st_metrics_counter(m, "studio_replay_total", labels,
		                                   i == 0 ? "Resume requests, by result." : NULL);
	}
	sm->frames = st_metrics_counter(m, "studio_frames_delivered_total", NULL,
	                                "Frames handed to client connections.");
	sm->refused = st_metrics_counter(m, "studio_ids_refused_total", NULL,
	                                 "Frames refused because their id would repeat or regress.");
	sm->seam_overlap = st_metrics_counter(m, "studio_seam_overlap_total", NULL,
	                                      "Live frames dropped at the resume seam because the replay sent them.");
	sm->seam_gap = st_metrics_counter(m, "studio_seam_gaps_total", NULL,
	                                  "Resume seams that would have left a hole (answered with resync gap).");
	for (int i = 0; i < RF_COUNT; i++) {
		snprintf(labels, sizeof(labels), "reason=\"%s\"", refusal_names[i]);
		sm->refusal[i] = st_metrics_counter(m, "studio_stream_refusals_total", labels,
		                                    i == 0 ? "Stream requests refused with a retry hint, by reason." : NULL);
	}
	sm->replay_rows = st_metrics_counter(m, "studio_replay_rows_total", NULL,
	                                     "Rows replays received from the database (each row once).");
	for (int i = AUTH_MISSING; i < AUTH_RESULT_COUNT; i++) {
		const char *help = "Stream requests refused by access control, by reason.";

		snprintf(labels, sizeof(labels), "reason=\"%s\"", auth_result_name((enum auth_result)i));
		sm->auth[i] = st_metrics_counter(m, "studio_auth_refused_total", labels, i == AUTH_MISSING ? help : NULL);
	}
	sm->ip_refused = st_metrics_counter(m, "studio_ip_limit_refused_total", NULL,
	                                    "Stream requests refused by --max-streams-per-ip (429).");
	return sm;
}

void
streams_metrics_free(streams_metrics *sm)
{
	free(sm); /* the handles belong to the registry */
}

size_t
streams_metrics_open(const streams_metrics *sm)
{
	int64_t v = st_gauge_get(sm->open);

	return v > 0 ? (size_t)v : 0;
}

streams *
streams_new(struct event_base *base, pgpool *pool, const streams_metrics *sm, const st_clock *clock,
            const streams_config *cfg)
{
	streams *ss = st_xcalloc(1, sizeof(*ss));
	struct timeval tv;

	ss->base = base;
	ss->pool = pool;
	ss->clock = clock;
	ss->cfg = *cfg;
	if (ss->cfg.heartbeat_ms == 0)
		ss->cfg.heartbeat_ms = 15000;
	ss->hub = hub_new(hub_deliver_cb, hub_flush_cb);
	ss->heartbeat = frame_heartbeat_new();
	ss->dropped = sm->dropped;
	ss->m_open = sm->open;
	for (int i = 0; i < OUT_COUNT; i++)
		ss->m_outcome[i] = sm->outcome[i];
	for (int i = 0; i < RR_COUNT; i++)
		ss->m_replay[i] = sm->replay[i];
	ss->m_frames = sm->frames;
	ss->m_refused = sm->refused;
	ss->m_seam_overlap = sm->seam_overlap;
	ss->m_seam_gap = sm->seam_gap;
	for (int i = 0; i < RF_COUNT; i++)
		ss->m_refusal[i] = sm->refusal[i];
	ss->m_replay_rows = sm->replay_rows;
	for (int i = 0; i < AUTH_RESULT_COUNT; i++)
		ss->m_auth[i] = sm->auth[i];
	ss->m_ip_refused = sm->ip_refused;
	st_dlist_init(&ss->all);
	st_dlist_init(&ss->behind);
	st_dlist_init(&ss->untils);
	/* Jitter only spreads retries; any seed that differs between registries will do. */
	ss->rng = (st_clock_now(clock) << 20) ^ (uint64_t)(uintptr_t)ss ^ 0x9e3779b97f4a7c15u;
	ss->ev_heartbeat = event_new(base, -1, 0, heartbeat_cb, ss);
	ss->ev_grace = event_new(base, -1, 0, grace_cb, ss);
	ss->ev_drain_done = event_new(base, -1, 0, drain_done_cb, ss);
	ST_ASSERT(ss->ev_heartbeat && ss->ev_grace && ss->ev_drain_done);
	tv = st_timeval_ms(ss->cfg.heartbeat_ms);
	event_add(ss->ev_heartbeat, &tv);
	return ss;
}

void
streams_free(streams *ss)
{
	stream *s, *next;

	if (ss == NULL)
		return;
	for (s = registry_first(ss); s; s = next) {
		next = registry_after(ss, s);
		if (s->req) {
			http_reply_problem(s->req, 503, NULL, "Service Unavailable", "shutting down", NULL);
			s->req = NULL;
		}
		/* http_server_free ran first and closed every started stream. */
		ST_ASSERT(s->hs == NULL);
		stream_unlink(s);
		stream_free(s);
	}
	hub_free(ss->hub);
	frame_unref(ss->heartbeat);
	event_free(ss->ev_heartbeat);
	event_free(ss->ev_grace);
	event_free(ss->ev_drain_done);
	free(ss);
}
