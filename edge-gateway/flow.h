/*
 * flow: flow control for bursts, in one place: when a stream or a worker
 * may ask the edge to stop reading published messages for a moment, and
 * the budget that grants those asks (docs/architecture.md "The edge in detail", item 7,
 * and docs/edge.md "Flow control").
 *
 * Three levels, each a pure decision here, applied by its owner:
 *
 *  1. One stream (stream.c): a live stream is behind with a burst queued
 *     (FLOW_BEHIND_FRAMES or FLOW_BEHIND_BYTES: lag is judged in bytes as
 *     well as frames because ADR-0197's queue bound is both, and a stream
 *     of large frames is at its 1 MiB with a handful queued).  It holds
 *     the intake while it still has FLOW_CAUGHT_UP_FRAMES or
 *     FLOW_CAUGHT_UP_BYTES queued and its client keeps reading (no sign of
 *     it for FLOW_STALL_MS, http_stream_quiet_ms: stalled, a client that
 *     stops reading delays nobody).  flow_stream_behind, flow_stream_holds.
 *  2. One stream's share (streams.c keeps the behind list): at most
 *     FLOW_HONOUR_MS of holding in any FLOW_HONOUR_WINDOW_MS, so one slow
 *     client cannot hold the others back for long.  flow_honour.
 *  3. One worker (fanout.c): it asks while a stream of its registry holds
 *     the intake or FLOW_INFLIGHT_MAX batches wait in its mailbox, and
 *     forces a pause at FLOW_MAILBOX_MAX (the mailbox's hard bound).
 *     flow_worker_ask.  Main re-decides every FLOW_RECHECK_MS while paused.
 *
 * The budget (main's loop) bounds what they ask TOGETHER, whatever their
 * number: a token bucket of pause time.
 *
 *   - The bucket holds at most FLOW_BURST_MS of pause and starts full.
 *   - Every ms refills 1/FLOW_SHARE ms; every ms paused spends 1 ms.
 *   - A pause starts only with at least FLOW_MIN_MS in the bucket (no
 *     flicker of 1 ms pauses once it is empty) and ends when it is empty.
 *
 * So in any interval of T ms the intake is paused (by request) at most
 *
 *     FLOW_BURST_MS + T / FLOW_SHARE  (+ one decision interval)
 *
 * ms: 500 ms, then 10 % of the time, however many streams ask.  A pause
 * that overshoots the bucket between two decisions is owed and repaid
 * before the next one, so the bound holds over any interval.
 *
 * A forced pause (a hard memory bound: a worker's mailbox full) holds the
 * intake whatever the budget and is not charged to it: it is not a
 * courtesy to a slow reader but the edge refusing to hold more.
 *
 * Threads: a budget on the loop thread that owns it (main's); a
 * flow_honour on its registry's loop; the rest is stateless.
 */
#ifndef EDGE_FLOW_H
#define EDGE_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_clock.h"

#define FLOW_BURST_MS 500u
#define FLOW_SHARE 10u
#define FLOW_MIN_MS 20u
/* Main re-decides at least this often while paused (and a worker re-looks while behind). */
#define FLOW_RECHECK_MS 5u

/* One stream: behind at this much queued (frames or bytes, whichever first)... */
#define FLOW_BEHIND_FRAMES 256u
#define FLOW_BEHIND_BYTES (256u * 1024)
/* ... caught up again under both of these ... */
#define FLOW_CAUGHT_UP_FRAMES 64u
#define FLOW_CAUGHT_UP_BYTES (64u * 1024)
/* ... and stalled (no longer honoured) once its client gave no sign of
 * reading for this long (http_stream_quiet_ms). */
#define FLOW_STALL_MS 50u
/* One stream's share: this much holding in any window. */
#define FLOW_HONOUR_MS 1000u
#define FLOW_HONOUR_WINDOW_MS 60000u
/* One worker: batches posted and not yet fanned out before it asks... */
#define FLOW_INFLIGHT_MAX 2u
/* ... and the hard bound of its mailbox: main stops reading whatever the budget. */
#define FLOW_MAILBOX_MAX 64u

/* A live stream with this much queued is behind: it may ask to hold the intake. */
bool flow_stream_behind(size_t frames, size_t bytes);
/* A behind stream still holds the intake: this much still queued, its client
 * quiet (http_stream_quiet_ms) no longer than FLOW_STALL_MS. */
bool flow_stream_holds(size_t frames, size_t bytes, uint64_t quiet_ms);

/*
 * One stream's share of holding (FLOW_HONOUR_MS in any FLOW_HONOUR_WINDOW_MS),
 * embedded in what its registry keeps of it; zeroed is a stream that never held.
 */
typedef struct flow_honour {
	bool holding;          /* on its registry's behind list */
	uint64_t since;        /* ms, when it started holding */
	uint64_t window_start; /* ms, start of its current window */
	uint64_t used;         /* ms it held in that window (before since) */
} flow_honour;

/* A stream behind (not yet holding) asks to hold: true (and holding) when its window has some left. */
bool flow_honour_join(flow_honour *h, uint64_t now);
/* A holding stream has used its share of the window. */
bool flow_honour_spent(const flow_honour *h, uint64_t now);
/* Stops holding (charged to the window); false when it was not holding. */
bool flow_honour_leave(flow_honour *h, uint64_t now);

/*
 * One worker's ask: behind = a stream of its registry holds the intake;
 * inflight = its batches not yet fanned out.  ORs into *want (asks for a
 * pause) and *must (its mailbox is full: a forced pause).
 */
void flow_worker_ask(bool behind, unsigned inflight, bool *want, bool *must);

typedef struct flow_budget flow_budget;

/* clock: borrowed, outlives the budget. */
flow_budget *flow_budget_new(const st_clock *clock);
void flow_budget_free(flow_budget *b); /* NULL-safe */

/*
 * The decision at this moment, accounting for the time since the last
 * one: want = some stream or worker asks for a pause; must = a hard bound
 * is reached.  Returns whether the intake stays (or goes) paused.  Call it
 * whenever one of the inputs may have changed and at least every few ms
 * while paused (the accuracy of the bound is the interval between calls).
 */
bool flow_budget_decide(flow_budget *b, bool want, bool must);

/* ms the intake was paused since the budget was made (asked and forced). */
uint64_t flow_budget_paused_ms(const flow_budget *b);
/* ms of pause left in the bucket now (negative: owed), as of the last decision. */
int64_t flow_budget_left_ms(const flow_budget *b);

#endif
