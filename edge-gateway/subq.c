/*
 * subq: ADR-0197's per-stream queue (the rules are listed in subq.h).
 *
 * DESIGN.  The queue is a ring of frame pointers addressed by a 32-bit
 * position that only grows: the frame at position p lives in
 * ring[p & (cap - 1)], so wrap-around of the counter is harmless (cap is a
 * power of two dividing 2^32).  The ring starts at 8 slots on the first
 * push, doubles up to 1,024 (1,000 frames plus the one terminal frame that
 * may exceed the bound), and a grown ring is freed whenever the queue
 * empties, so an idle stream costs only this struct.
 *
 * Coalescing must not scan a thousand slots per signal, so queued signals
 * are indexed by an open-addressing table (linear probing, at most half
 * full, backward-shift deletion so there are no tombstones) mapping
 * frame_resource_hash to a ring slot.  Replacing a signal keeps its slot,
 * hence its position (ADR-0197: "keeps the position of the first").  The
 * table is rebuilt when the ring grows (slots move) and freed as soon as no
 * signal is queued.
 *
 * The three-overflow rule needs only the times of the two previous
 * overflows, kept in a tiny shift array.  Time comes from the injected
 * st_clock so the tests drive it by hand.
 */
#include "subq.h"

#include <stdlib.h>
#include <string.h>

#include "st_util.h"

#define RING_MIN 8u
#define RING_MAX 1024u
#define IDX_MIN 16u

struct subq {
	const st_clock *clk;
	const subq_counters *ctr;
	frame **ring;  /* cap slots, NULL when cap == 0 */
	uint16_t *idx; /* signal index: ring slot + 1, 0 = free; idx_cap slots */
	size_t bytes;
	uint64_t overflow_at[SUBQ_OVERFLOW_LIMIT - 1]; /* previous overflows, oldest first */
	uint64_t overflow_seq;
	uint32_t head; /* position of the oldest frame */
	uint32_t count;
	uint16_t cap;
	uint16_t idx_cap;
	uint16_t n_signals;
	uint8_t n_overflows; /* valid entries of overflow_at */
	bool hold, dropped, closed, hold_overflowed;
	st_slab *slab; /* where it came from (subq_new), NULL: malloc */
};

static void
count_drop(st_counter *c, size_t n)
{
	if (c != NULL && n > 0)
		st_counter_add(c, n);
}

enum drop_reason { C_COALESCED, C_OVERFLOW, C_REPLAY, C_BLOCKED };

static st_counter *
ctr_of(const subq *q, enum drop_reason r)
{
	if (q->ctr == NULL)
		return NULL;
	switch (r) {
	case C_COALESCED: return q->ctr->coalesced;
	case C_OVERFLOW: return q->ctr->overflow;
	case C_REPLAY: return q->ctr->replay;
	default: return q->ctr->blocked;
	}
}

/* ---- the signal index ---------------------------------------------------- */

static uint32_t
idx_home(const subq *q, uint16_t slot)
{
	return (uint32_t)frame_resource_hash(q->ring[slot]) & (q->idx_cap - 1u);
}

static void
idx_put(subq *q, uint16_t slot)
{
	uint32_t m = q->idx_cap - 1u, i = idx_home(q, slot);

	while (q->idx[i] != 0)
		i = (i + 1) & m;
	q->idx[i] = (uint16_t)(slot + 1);
}

/* Rebuilds the index at cap slots from the signals in the ring. */
static void
idx_rebuild(subq *q, uint32_t cap)
{
	free(q->idx);
	q->idx = st_xcalloc(cap, sizeof(*q->idx));
	q->idx_cap = (uint16_t)cap;
	for (uint32_t k = 0; k < q->count; k++) {
		uint16_t slot = (uint16_t)((q->head + k) & (q->cap - 1u));

		if (frame_is_signal(q->ring[slot]))
			idx_put(q, slot);
	}
}

static void
idx_drop_all(subq *q)
{
	ST_FREE(&q->idx);
	q->idx_cap = 0;
	q->n_signals = 0;
}

/* The ring slot of a queued signal for f's resource, or -1. */
static int
idx_find(const subq *q, const frame *f)
{
	uint32_t m, i;

	if (q->idx == NULL)
		return -1;
	m = q->idx_cap - 1u;
	for (i = (uint32_t)frame_resource_hash(f) & m; q->idx[i] != 0; i = (i + 1) & m) {
		uint16_t slot = (uint16_t)(q->idx[i] - 1);

		if (frame_same_resource(q->ring[slot], f))
			return slot;
	}
	return -1;
}

/* Adds the signal in slot (already in the ring). */
static void
idx_add(subq *q, uint16_t slot)
{
	q->n_signals++;
	if (q->idx == NULL || (uint32_t)q->n_signals * 2 > q->idx_cap) {
		uint32_t cap = q->idx_cap ? q->idx_cap * 2u : IDX_MIN;

		while ((uint32_t)q->n_signals * 2 > cap)
			cap *= 2;
		idx_rebuild(q, cap); /* the ring already holds the new signal */
		return;
	}
	idx_put(q, slot);
}

/* Removes the signal in slot (still in the ring) with backward-shift deletion. */
static void
idx_remove(subq *q, uint16_t slot)
{
	uint32_t m = q->idx_cap - 1u, i = idx_home(q, slot), j;

	while (q->idx[i] != (uint16_t)(slot + 1)) {
		ST_ASSERT(q->idx[i] != 0);
		i = (i + 1) & m;
	}
	for (j = i;;) {
		uint32_t k;

		j = (j + 1) & m;
		if (q->idx[j] == 0)
			break;
		k = idx_home(q, (uint16_t)(q->idx[j] - 1));
		/* The entry at j may move back to i only if its home is not in (i, j]. */
		if ((i < j) ? (k <= i || k > j) : (k <= i && k > j)) {
			q->idx[i] = q->idx[j];
			i = j;
		}
	}
	q->idx[i] = 0;
	if (--q->n_signals == 0)
		idx_drop_all(q);
}

/* ---- the ring -------------------------------------------------------------- */

static void
ring_grow(subq *q)
{
	uint32_t cap = q->cap ? q->cap * 2u : RING_MIN;
	frame **r;

	ST_ASSERT(cap <= RING_MAX);
	r = st_xcalloc(cap, sizeof(*r));
	for (uint32_t k = 0; k < q->count; k++) {
		uint32_t p = q->head + k;

		r[p & (cap - 1)] = q->ring[p & (q->cap - 1u)];
	}
	free(q->ring);
	q->ring = r;
	q->cap = (uint16_t)cap;
	if (q->idx != NULL)
		idx_rebuild(q, q->idx_cap);
}

/* Called whenever the queue becomes empty: give back what a burst grew. */
static void
ring_shrink_if_empty(subq *q)
{
	if (q->count == 0 && q->cap > RING_MIN) {
		ST_FREE(&q->ring);
		q->cap = 0;
	}
}

/* Appends f, taking a reference. */
static void
append(subq *q, frame *f)
{
	uint16_t slot;

	if (q->count == q->cap)
		ring_grow(q);
	slot = (uint16_t)((q->head + q->count) & (q->cap - 1u));
	q->ring[slot] = frame_ref(f);
	q->count++;
	q->bytes += frame_cost(f);
	if (frame_is_signal(f))
		idx_add(q, slot);
}

/* Appends a frame we made, handing our reference to the queue. */
static void
append_new(subq *q, frame *f)
{
	append(q, f);
	frame_unref(f);
}

/* Empties the queue; returns the newest seq dropped (0 if none). */
static uint64_t
empty(subq *q)
{
	uint64_t newest = 0;

	for (uint32_t k = 0; k < q->count; k++) {
		uint32_t slot = (q->head + k) & (q->cap - 1u);

		newest = ST_MAX(newest, frame_seq(q->ring[slot]));
		frame_unref(q->ring[slot]);
		q->ring[slot] = NULL;
	}
	q->head += q->count;
	q->count = 0;
	q->bytes = 0;
	idx_drop_all(q);
	ring_shrink_if_empty(q);
	return newest;
}

/* Rules 3 and 7: empty, count queued + pushed, queue reconnect, refuse the rest. */
static enum subq_result
drop(subq *q, enum drop_reason r, const char *reason)
{
	count_drop(ctr_of(q, r), (size_t)q->count + 1);
	if (q->ctr != NULL)
		count_drop(r == C_OVERFLOW ? q->ctr->cut_slow : q->ctr->cut_blocked, 1);
	empty(q);
	append_new(q, frame_reconnect_new(SUBQ_RECONNECT_RETRY_MS, reason));
	q->dropped = true;
	q->closed = true;
	return SUBQ_DROP;
}

/* Rules 7 and 8: f did not fit. */
static enum subq_result
overflow(subq *q, frame *f)
{
	uint64_t now;

	if (q->hold) {
		uint64_t newest;

		count_drop(ctr_of(q, C_REPLAY), (size_t)q->count + 1);
		newest = empty(q); /* not inside ST_MAX: it evaluates twice */
		newest = ST_MAX(newest, frame_seq(f));
		q->overflow_seq = ST_MAX(q->overflow_seq, newest);
		q->hold_overflowed = true;
		return SUBQ_OVERFLOW;
	}
	now = st_clock_now(q->clk);
	if (q->n_overflows == SUBQ_OVERFLOW_LIMIT - 1 && now - q->overflow_at[0] <= SUBQ_OVERFLOW_WINDOW_MS)
		return drop(q, C_OVERFLOW, "slow_consumer");
	if (q->n_overflows == SUBQ_OVERFLOW_LIMIT - 1) {
		memmove(q->overflow_at, q->overflow_at + 1, sizeof(q->overflow_at) - sizeof(q->overflow_at[0]));
		q->n_overflows--;
	}
	q->overflow_at[q->n_overflows++] = now;
	count_drop(ctr_of(q, C_OVERFLOW), (size_t)q->count + 1);
	empty(q);
	append_new(q, frame_resync_new(frame_seq(f), "overflow"));
	return SUBQ_OVERFLOW;
}

static bool
fits(size_t count, size_t bytes)
{
	return count <= SUBQ_MAX_FRAMES && bytes <= SUBQ_MAX_BYTES;
}

/*
 * Rule 4.  Returns true when f was absorbed by a queued signal for its
 * resource.
 *
 * When that signal is the newest frame queued, it simply becomes f: the
 * client is told the newest change with the newest id, so its last id does
 * not lag behind what it was told about (and a resume does not replay
 * signals it already knows).
 *
 * With frames queued behind it, the queued signal keeps its place and its
 * id: putting the newer id in the older slot would put a higher id before
 * the items queued between the two, and the stream's last step refuses a
 * regressing id - those items would be lost.  A signal carries no data, and
 * the client that acts on the queued one refetches state that already
 * holds the newer change.
 *
 * Not in the hold buffer, though: at release every held frame at or below
 * the replay's head is dropped as overlap, and a signal that absorbed a
 * newer seq under an older id would be dropped with it - the client would
 * never hear of the newer change.  There the newer signal is queued on its
 * own (the hold buffer's bounds still apply).
 */
static bool
coalesce(subq *q, frame *f, size_t cost)
{
	uint16_t tail = (uint16_t)((q->head + q->count - 1u) & (q->cap - 1u));
	frame *last = q->count ? q->ring[tail] : NULL;

	if (last != NULL && frame_is_signal(last) && frame_same_resource(last, f) &&
	    fits(q->count, q->bytes - frame_cost(last) + cost)) {
		/* Same resource, same slot: the signal index entry stays valid. */
		q->bytes = q->bytes - frame_cost(last) + cost;
		q->ring[tail] = frame_ref(f);
		frame_unref(last);
		count_drop(ctr_of(q, C_COALESCED), 1);
		return true;
	}
	if (q->hold || idx_find(q, f) < 0)
		return false;
	count_drop(ctr_of(q, C_COALESCED), 1);
	return true;
}

/* ---- the API ----------------------------------------------------------------- */

subq *
subq_new(const st_clock *clk, const subq_counters *c, bool hold_mode, st_slab *slab)
{
	subq *q = slab != NULL ? st_slab_get(slab) : st_xcalloc(1, sizeof(*q));

	q->slab = slab;
	q->clk = clk;
	q->ctr = c;
	q->hold = hold_mode;
	return q;
}

size_t
subq_size(void)
{
	return sizeof(subq);
}

void
subq_free(subq *q)
{
	if (q == NULL)
		return;
	empty(q);
	free(q->ring);
	if (q->slab != NULL)
		st_slab_put(q->slab, q);
	else
		free(q);
}

enum subq_result
subq_push(subq *q, frame *f, uint64_t blocked_ms)
{
	size_t cost = frame_cost(f);

	if (q->closed)
		return SUBQ_DROP;
	if (frame_is_terminal(f)) {
		append(q, f);
		q->closed = true;
		return SUBQ_QUEUED;
	}
	if (!q->hold && blocked_ms > SUBQ_BLOCKED_MS)
		return drop(q, C_BLOCKED, "blocked");
	if (frame_is_signal(f) && coalesce(q, f, cost))
		return SUBQ_COALESCED;
	if (fits((size_t)q->count + 1, q->bytes + cost)) {
		append(q, f);
		return SUBQ_QUEUED;
	}
	if (frame_type(f) == FRAME_HEARTBEAT)
		return SUBQ_COALESCED;
	return overflow(q, f);
}

frame *
subq_pop(subq *q)
{
	uint16_t slot;
	frame *f;

	if (q->count == 0)
		return NULL;
	slot = (uint16_t)(q->head & (q->cap - 1u));
	f = q->ring[slot];
	if (frame_is_signal(f))
		idx_remove(q, slot);
	q->ring[slot] = NULL;
	q->head++;
	q->count--;
	q->bytes -= frame_cost(f);
	ring_shrink_if_empty(q);
	return f;
}

frame *
subq_peek(const subq *q)
{
	return q->count ? q->ring[q->head & (q->cap - 1u)] : NULL;
}

size_t
subq_count(const subq *q)
{
	return q->count;
}

size_t
subq_bytes(const subq *q)
{
	return q->bytes;
}

bool
subq_is_dropped(const subq *q)
{
	return q->dropped;
}

bool
subq_is_closed(const subq *q)
{
	return q->closed;
}

bool
subq_hold_overflowed(const subq *q)
{
	return q->hold_overflowed;
}

uint64_t
subq_overflow_seq(const subq *q)
{
	return q->overflow_seq;
}
