/*
 * stream_internal: what the two halves of the streams of an edge share, and
 * nothing else may include.  The public API is stream.h.
 *
 *  - streams.c is the registry: admission of GET/HEAD /v1/stream, the list
 *    of open streams, the hub, heartbeats, drain, flow control, metrics.
 *  - stream.c is one stream's state machine (CHECKING .. ENDING).
 *
 * The cut: a stream keeps its struct private; the registry sees of it only
 * the part embedded for it (stream_reg: its list links and its flow-control
 * bookkeeping) and the stream_* calls below.  A stream sees of its registry
 * only stream_env (what it borrows, fixed at streams_new) and the streams_*
 * calls below.  Threads: both halves run on the registry's loop.
 */
#ifndef EDGE_STREAM_INTERNAL_H
#define EDGE_STREAM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "flow.h"
#include "frame.h"
#include "hub.h"
#include "refusal.h"
#include "st_dlist.h"
#include "stream.h"
#include "streamreq.h"
#include "subq.h"

typedef struct stream stream;

/* How a stream ended, counted once in studio_stream_outcomes_total (OUT_NONE: before the response, not counted). */
enum stream_outcome { OUT_NONE = -1, OUT_COMPLETE = 0, OUT_FAILURE, OUT_RECONNECT, OUT_ABRUPT, OUT_COUNT };
/* Resume requests by result (studio_replay_total). */
enum replay_result { RR_OK, RR_CAP, RR_EXPIRED, RR_FUTURE, RR_ERROR, RR_COUNT };

/*
 * What a stream borrows from its registry: set once by streams_new, read
 * only afterwards, owned by the registry (the handles by streams_metrics).
 */
typedef struct stream_env {
	struct event_base *base;
	pgpool *pool;            /* borrowed */
	const st_clock *clock;   /* borrowed */
	hub *hub;                /* the registry's */
	uint64_t replay_cap;
	st_auth_store *auth;        /* borrowed; NULL: no access control */
	iplimit *ip_limit;       /* borrowed; NULL: no bound */
	refusals *refusals;      /* the registry's: the retryable refusals' jitter and counters */
	subq_counters dropped;   /* copies of the shared handles (subqs keep a pointer to this) */
	st_counter *m_outcome[OUT_COUNT];
	st_counter *m_replay[RR_COUNT];
	st_counter *m_frames;
	st_counter *m_refused;
	st_counter *m_seam_overlap;
	st_counter *m_seam_gap;
	st_counter *m_replay_rows;
} stream_env;

/*
 * The registry's part of a stream, embedded in it; only streams.c reads or
 * writes its fields (stream.c sets s at creation and passes it along).
 */
typedef struct stream_reg {
	stream *s;               /* the stream it is part of */
	st_dlink link;           /* on the registry's list of every stream while linked */
	st_dlink blink;          /* on its behind list while behind (flow control) */
	st_dlink ulink;          /* on its until list while bounded */
	bool bounded;            /* has an until bound: visited when the head moves */
	flow_honour honour;      /* on the behind list while honour.holding (flow.h) */
} stream_reg;

/* ---- the registry, for stream.c (streams.c) ----------------------------- */

const stream_env *streams_env(const streams *ss);
/* The history head (the sequencer's, as last published). */
uint64_t streams_head(const streams *ss);
/* Takes a stream over: it holds the slot of --max-streams the admission reserved. */
void streams_link(streams *ss, stream_reg *r);
/* Out of the registry: off every list, its slot given back, a drain told when it was the last. */
void streams_unlink(streams *ss, stream_reg *r);
/* After a push: a live stream with a burst queued joins the behind list, if its budget allows. */
void streams_behind_check(streams *ss, stream_reg *r);

/* ---- one stream, for streams.c (stream.c) ------------------------------- */

/*
 * A GET admitted by the registry: takes over rq's topics, the ip slot
 * (ip non-NULL: one of its slots is held) and the reserved --max-streams
 * slot, links itself, and answers req now or after the resume check.
 */
void stream_open(streams *ss, http_req *req, streamreq *rq, uint64_t exp_ms, const uint8_t *ip);
/* The registry's heartbeat tick (hb: the shared heartbeat frame, borrowed). */
void stream_heartbeat(stream *s, frame *hb, uint64_t now);
/* Drain or token expiry: reconnect with this hint; before the response, a refusal.  May free s. */
void stream_reconnect(stream *s, uint32_t retry_ms, const char *reason);
/* The drain's grace passed: close the connection now (the close callback frees s later). */
void stream_abort(stream *s);
/* The history head moved: a bounded stream may be complete.  May free s. */
void stream_head_moved(stream *s);
/* Flow control: a live stream with a burst queued (may join the behind list). */
bool stream_burst_queued(const stream *s);
/* Flow control: a behind stream still holds the intake (still live, still queued, its socket still taking). */
bool stream_holds_intake(const stream *s, uint64_t now);
/* The registry is freed: a request still waiting gets 503; frees s. */
void stream_shutdown(stream *s);
/* The hub's callbacks (arg: the stream subscribed). */
void stream_hub_deliver(void *arg, frame *f);
void stream_hub_flush(void *arg);

#endif
