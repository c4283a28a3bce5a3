/*
 * flow: the budget of the edge's intake pauses (flow control for bursts,
 * docs/architecture.md "Flow control" and docs/edge.md "Flow control").
 *
 * Streams catching up on a burst (and, with --threads N, workers that have
 * not fanned out what main posted) ask main to stop reading published
 * messages for a moment.  Each stream's own rule (streams.c: 1 s of pause
 * in any 60 s) bounds what ONE stream can ask; this bounds what they ask
 * TOGETHER, whatever their number: a token bucket of pause time.
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
 * Threads: the loop thread that owns it (main's).
 */
#ifndef EDGE_FLOW_H
#define EDGE_FLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "st_clock.h"

#define FLOW_BURST_MS 500u
#define FLOW_SHARE 10u
#define FLOW_MIN_MS 20u

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
