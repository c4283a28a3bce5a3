/*
 * streams: the HTTP streams of an edge - GET /v1/stream, the registry of
 * open streams, and drain.
 *
 * A stream is one client connection in one wire format on up to 64 topics.
 * Its life: the query is parsed and checked (any error before the first
 * body byte is a problem document with a real status); it registers with
 * the hub at once; with a Last-Event-ID it first replays from PostgreSQL
 * while live frames wait in a hold buffer, then releases the hold at the
 * seam; then it is live until a terminal envelope (complete, failure,
 * reconnect) or the client goes away (abrupt_close).  Every stream ends with
 * exactly one outcome, counted in studio_stream_outcomes_total.
 *
 * The registry (streams) owns the hub: the sequencer's ordered batches come
 * in through streams_publish and fan out to the subscribers' queues.
 *
 * Implemented by streams.c (the registry: admission, heartbeats, drain,
 * flow control, metrics) on top of stream.c (one stream's state machine,
 * stream.h), which sees of the registry only the hooks of stream_env; this
 * header is all the rest of the edge sees.
 *
 * Threads: a registry and its streams run on the loop thread of its base.
 * An edge with several loops has one registry per loop (its own hub,
 * heartbeats, drain); they share one streams_metrics, whose handles are
 * atomic, so every series exists once and studio_streams_open is the total.
 */
#ifndef EDGE_STREAMS_H
#define EDGE_STREAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_auth_store.h"
#include "frame.h"
#include "iplimit.h"
#include "pgpool.h"
#include "st_clock.h"
#include "st_http.h"
#include "st_metrics.h"

struct event_base;
typedef struct streams streams;

typedef struct streams_config {
	uint64_t replay_cap;     /* more events than this to replay -> resync replay_cap */
	uint32_t heartbeat_ms;   /* heartbeat interval */
	uint32_t max_streams;    /* 429 beyond (counted over every registry sharing the metrics) */
	uint32_t drain_grace_ms; /* reconnect hints are spread over this; the rest is closed after it */
	/*
	 * Access control (auth.h), borrowed, shared by every registry; NULL:
	 * nothing is checked.  With it, GET and HEAD need a token covering
	 * every topic (401/403 before the first byte), and a stream ends with
	 * reconnect token_expired at its token's exp.
	 */
	st_auth_store *auth;
	/*
	 * --max-streams-per-ip (iplimit.h), borrowed, shared by every
	 * registry; NULL or disabled: no bound.  A GET beyond it gets 429 with
	 * Retry-After in every format.
	 */
	iplimit *ip_limit;
} streams_config;

/*
 * The streams' series (outcomes, drops, replay results, streams open...),
 * registered once in m, which must outlive it.  Main thread, at start.
 */
typedef struct streams_metrics streams_metrics;
streams_metrics *streams_metrics_new(st_metrics *m);
void streams_metrics_free(streams_metrics *sm); /* after every registry using it; NULL-safe */
/* Streams open now in every registry using sm (any thread). */
size_t streams_metrics_open(const streams_metrics *sm);

/*
 * pool and sm are borrowed and must outlive the registry; the clock too.
 * cfg->max_streams bounds the streams open in every registry sharing sm.
 */
streams *streams_new(struct event_base *base, pgpool *pool, const streams_metrics *sm, const st_clock *clock,
		     const streams_config *cfg);
/* Frees the registry.  Call after http_server_free (which closed every
 * started stream); requests still waiting for the database get 503.  NULL-safe. */
void streams_free(streams *ss);

/*
 * GET or HEAD /v1/stream.  Answers req (now or after the database answered).
 * ready: what /readyz would say apart from draining (database up, history
 * head known, a writer tick within 3 flush intervals); a request that is
 * not refused for its own sake gets the retryable not_ready refusal without
 * it.  draining: the edge began draining, though this registry may not
 * have been told yet (streams_drain reaches it through its worker's
 * mailbox); such a request is refused as draining, never as not_ready.
 * Retryable refusals (draining, not_ready, overloaded, unavailable) are
 * 200 + one reconnect envelope to SSE clients, 503/429 problems with
 * Retry-After to the other formats.
 */
void streams_handle(streams *ss, http_req *req, bool ready, bool draining);

/*
 * One contiguous batch of the ordered history (from the sequencer): fans
 * out to the subscribers, then writes to each touched stream once.  head is
 * the sequencer's head after the batch.  frames stay owned by the caller.
 */
void streams_publish(streams *ss, frame *const *frames, size_t n, uint64_t head);
/* The history head advanced without frames for anyone (a tick or a fill of nothing). */
void streams_set_head(streams *ss, uint64_t head);
/*
 * Flow control for bursts: true while some live stream has a burst queued
 * and its socket keeps taking bytes (a reader catching up, not a stalled
 * one); the caller then stops reading published messages for a moment, so
 * the burst waits upstream instead of overflowing that stream's queue.  A
 * stream stops counting once its socket takes nothing for 50 ms, and after
 * 1 s of pause in any 60 s, so one slow client cannot hold the others back
 * for long (ADR-0197: a client that stops reading delays nobody).  This is
 * a request: the caller grants it under one budget for all streams together
 * (flow.h), so many slow clients taking turns cannot either.
 * Cost: the number of streams behind right now.
 */
bool streams_backpressure(streams *ss);
/* The sequencer has its first head: streams may start. */
bool streams_ready(const streams *ss);

/*
 * Drain: new streams are refused (draining), every open stream is sent reconnect with a
 * retry hint spread over the grace period, streams still open after the
 * grace are closed.  done(arg) is called (once, from the loop) when no
 * stream is left.  Idempotent.
 */
void streams_drain(streams *ss, void (*done)(void *arg), void *arg);
bool streams_draining(const streams *ss);
/*
 * The auth keys were swapped (fanout_keys_changed): every stream whose
 * key is gone gets reconnect token_expired (stream_key_check).
 */
void streams_keys_changed(streams *ss);
size_t streams_count(const streams *ss);

#endif
