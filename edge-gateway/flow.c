/*
 * flow: the token bucket of intake pauses and the asks it grants (see
 * flow.h for the rules).
 *
 * Units: the bucket counts ticks of 1/FLOW_SHARE ms, so both the refill
 * (1 tick per ms elapsed) and the cost of a pause (FLOW_SHARE ticks per ms
 * paused) are integers.  The level may go below 0 (a pause that outlasted
 * the bucket between two decisions): that debt is repaid by the refill
 * before the next pause may start.
 */
#include "flow.h"

#include <stdlib.h>

#include "st_util.h"

#define FLOW_CAP ((int64_t)FLOW_BURST_MS * FLOW_SHARE)
#define FLOW_START ((int64_t)FLOW_MIN_MS * FLOW_SHARE)

struct flow_budget {
	const st_clock *clock; /* borrowed */
	uint64_t last;         /* ms of the last decision */
	int64_t level;         /* ticks in the bucket, <= FLOW_CAP; < 0 is debt */
	bool paused;           /* the last decision */
	bool charged;          /* the pause since the last decision is charged (asked, not forced) */
	uint64_t paused_ms;
};

flow_budget *
flow_budget_new(const st_clock *clock)
{
	flow_budget *b = st_xcalloc(1, sizeof(*b));

	b->clock = clock;
	b->last = st_clock_now(clock);
	b->level = FLOW_CAP;
	return b;
}

void
flow_budget_free(flow_budget *b)
{
	free(b);
}

bool
flow_budget_decide(flow_budget *b, bool want, bool must)
{
	uint64_t now = st_clock_now(b->clock);
	uint64_t e = now > b->last ? now - b->last : 0;

	b->last = now;
	if (b->paused) {
		b->paused_ms += e;
		if (b->charged)
			b->level -= (int64_t)e * FLOW_SHARE;
	}
	b->level = ST_MIN(b->level + (int64_t)e, FLOW_CAP);
	if (must) {
		b->paused = true;
		b->charged = false;
	} else if (!want) {
		b->paused = false;
	} else {
		/* Going on needs anything left; starting needs FLOW_MIN_MS (a forced pause ending counts as starting). */
		b->paused = b->paused && b->charged ? b->level > 0 : b->level >= FLOW_START;
		b->charged = true;
	}
	return b->paused;
}

uint64_t
flow_budget_paused_ms(const flow_budget *b)
{
	return b->paused_ms;
}

int64_t
flow_budget_left_ms(const flow_budget *b)
{
	return b->level / FLOW_SHARE;
}

bool
flow_stream_behind(size_t frames, size_t bytes)
{
	return frames >= FLOW_BEHIND_FRAMES || bytes >= FLOW_BEHIND_BYTES;
}

bool
flow_stream_holds(size_t frames, size_t bytes, uint64_t quiet_ms)
{
	return (frames >= FLOW_CAUGHT_UP_FRAMES || bytes >= FLOW_CAUGHT_UP_BYTES) && quiet_ms <= FLOW_STALL_MS;
}

bool
flow_honour_join(flow_honour *h, uint64_t now)
{
	ST_ASSERT(!h->holding);
	if (now - h->window_start > FLOW_HONOUR_WINDOW_MS) {
		h->window_start = now;
		h->used = 0;
	}
	if (h->used >= FLOW_HONOUR_MS)
		return false;
	h->holding = true;
	h->since = now;
	return true;
}

bool
flow_honour_spent(const flow_honour *h, uint64_t now)
{
	return h->used + (now - h->since) >= FLOW_HONOUR_MS;
}

bool
flow_honour_leave(flow_honour *h, uint64_t now)
{
	if (!h->holding)
		return false;
	h->holding = false;
	h->used += now - h->since;
	return true;
}

void
flow_worker_ask(bool behind, unsigned inflight, bool *want, bool *must)
{
	*want = *want || behind || inflight >= FLOW_INFLIGHT_MAX;
	*must = *must || inflight >= FLOW_MAILBOX_MAX;
}
