/*
 * stream: one GET /v1/stream, its state machine (CHECKING .. ENDING), for
 * the registry that admits and links it (streams.c, streams.h); the rest of
 * the edge sees only streams.h.
 *
 * The arrows run one way: streams.c calls stream.c, never the reverse.  A
 * stream keeps its struct private; the registry sees of it only the part
 * embedded for it (stream_reg: its list links and its flow-control share)
 * and the stream_* calls below.  A stream sees of its registry only
 * stream_env: what it borrows, fixed when the registry is made, including
 * the few hooks it calls back (stream_registry).  Threads: a stream and its
 * registry run on the registry's loop.
 */
#ifndef EDGE_STREAM_H
#define EDGE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "flow.h"
#include "frame.h"
#include "frame_run.h"
#include "hub.h"
#include "iplimit.h"
#include "pgpool.h"
#include "refusal.h"
#include "st_auth_store.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_http.h"
#include "st_metrics.h"
#include "streamreq.h"
#include "subq.h"

typedef struct stream stream;

/* How a stream ended, counted once in studio_stream_outcomes_total (OUT_NONE: before the response, not counted). */
enum stream_outcome { OUT_NONE = -1, OUT_COMPLETE = 0, OUT_FAILURE, OUT_RECONNECT, OUT_ABRUPT, OUT_COUNT };
/* Resume requests by result (studio_replay_total). */
enum replay_result { RR_OK, RR_CAP, RR_EXPIRED, RR_FUTURE, RR_ERROR, RR_COUNT };

typedef struct stream_reg stream_reg;

/*
 * What a stream asks of the registry that linked it, and nothing else: the
 * hooks run on the registry's loop and never free the stream.
 */
typedef struct stream_registry {
	void *arg; /* the registry */
	/* The history head (the sequencer's, as last published). */
	uint64_t (*head)(void *arg);
	/* Takes a stream over: it holds the slot of --max-streams the admission reserved. */
	void (*link)(void *arg, stream_reg *r);
	/* Out of the registry: off every list, its slot given back, a drain told when it was the last. */
	void (*unlink)(void *arg, stream_reg *r);
	/* After a push: a live stream with a burst queued joins the behind list, if its share allows. */
	void (*behind_check)(void *arg, stream_reg *r);
} stream_registry;

/*
 * What a stream borrows from its registry: set once by streams_new, read
 * only afterwards, owned by the registry (the handles by streams_metrics).
 */
typedef struct stream_env {
	stream_registry registry; /* the hooks back into the registry */
	struct event_base *base;
	pgpool *pool;          /* borrowed */
	const st_clock *clock; /* borrowed */
	hub *hub;              /* the registry's */
	st_slab *streams;      /* the registry's: every stream of this loop (stream_size() bytes) */
	st_slab *queues;       /* the registry's: every stream's live queue (subq_size() bytes) */
	uint64_t replay_cap;
	st_auth_store *auth;   /* borrowed; NULL: no access control */
	iplimit *ip_limit;     /* borrowed; NULL: no bound */
	refusals *refusals;    /* the registry's: the retryable refusals' jitter and counters */
	frame_run_cache *runs; /* the registry's (this loop's); NULL: every batch written frame by frame */
	subq_counters dropped; /* copies of the shared handles (subqs keep a pointer to this) */
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
struct stream_reg {
	stream *s;          /* the stream it is part of */
	st_dlink link;      /* on the registry's list of every stream while linked */
	st_dlink blink;     /* on its behind list while behind (flow control) */
	st_dlink ulink;     /* on its until list while bounded */
	bool bounded;       /* has an until bound: visited when the head moves */
	flow_honour honour; /* on the behind list while honour.holding (flow.h) */
};

/*
 * A GET admitted by the registry (env: the registry's, borrowed, outlives
 * the stream): takes over rq's topics, the ip slot (ip non-NULL: one of its
 * slots is held) and the reserved --max-streams slot, links itself through
 * env->registry, and answers req now or after the resume check.
 */
void stream_open(const stream_env *env, http_req *req, streamreq *rq, uint64_t exp_ms, uint64_t key_id,
		 const uint8_t *ip);
/* The size of a stream, for the registry's slab (stream_env.streams). */
size_t stream_size(void);
/*
 * The auth keys were swapped: when the key that verified this stream's
 * token (key_id of stream_open) is gone, reconnect token_expired, as at
 * exp; true when it did.  May free s.
 */
bool stream_key_check(stream *s);
/* The registry's heartbeat visit, twice per interval: hb (the shared heartbeat frame, borrowed) goes out
 * unless the stream handed bytes since the last visit and has none waiting (stream.c). */
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
/* The hub's callbacks (arg: the stream subscribed; take: hub.h hub_take_fn). */
void stream_hub_deliver(void *arg, frame *f);
void stream_hub_flush(void *arg);
bool stream_hub_take(void *arg, frame *const *fs, size_t n);

#endif
