/*
 * sequencer: one contiguous history out of many writers' published copies.
 *
 * DESIGN.  head is the last seq emitted; known is the highest seq any
 * message proved committed.  Batches that cannot be emitted yet (before
 * the starting head is set, or behind a gap) are turned into frames at once
 * (the input message is freed by the caller) and kept in an array sorted by
 * prev, bounded in events; past the bound a batch is dropped, since the
 * fill that closes the gap reads it back from PostgreSQL anyway.
 *
 * Everything funnels into step(): release every held batch whose prev is
 * now <= head (emitting only its events above head, which makes duplicate
 * and overlapping copies harmless), then decide whether we are behind
 * (known > head).  Being behind starts a wait of SEQUENCER_WAIT_MS; the
 * wait is reset only when we catch up, so a partial (chunked) fill asks for
 * the rest at once.  A fill covers (head, first held prev] or, with nothing
 * held, (head, known]: every seq there is committed, and because commit
 * order is seq order (ADR-0197's advisory lock) whatever the query does not
 * return below upto is a rolled-back hole, so head may jump to upto.  One
 * fill at a time; a failed one is retried after a doubling back-off, never
 * skipped.
 */
#include "sequencer.h"

#include <stdlib.h>
#include <string.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_util.h"

typedef struct held {
	uint64_t prev;
	uint64_t last;
	size_t n;
	size_t bytes; /* held_cost of the batch */
	frame **frames;
} held;

struct sequencer {
	const st_clock *clock;
	sequencer_emit_fn emit;
	sequencer_fill_fn fill;
	void *arg;

	bool has_head;
	uint64_t head;
	uint64_t known;

	held *held; /* sorted by prev, ascending */
	size_t n_held;
	size_t cap_held;

	bool behind;
	uint64_t behind_since;

	bool fill_out;
	uint64_t fill_upto;
	bool backing_off;
	uint64_t retry_at;
	st_backoff backoff; /* between failed fills: SEQUENCER_BACKOFF_MIN_MS doubling to _MAX_MS */

	sequencer_stats st;
};

st_err
sequencer_new(const st_clock *clock, sequencer_emit_fn emit, sequencer_fill_fn fill, void *arg, sequencer **out)
{
	ST_ASSERT(clock != NULL && emit != NULL && fill != NULL && out != NULL);
	sequencer *s = st_xcalloc(1, sizeof(*s));
	s->clock = clock;
	s->emit = emit;
	s->fill = fill;
	s->arg = arg;
	st_backoff_init(&s->backoff, SEQUENCER_BACKOFF_MIN_MS, SEQUENCER_BACKOFF_MAX_MS);
	*out = s;
	return ST_OK;
}

static void
held_fini(held *h)
{
	for (size_t i = 0; i < h->n; i++)
		frame_unref(h->frames[i]);
	ST_FREE(&h->frames);
	h->n = 0;
}

void
sequencer_free(sequencer *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->n_held; i++)
		held_fini(&s->held[i]);
	free(s->held);
	free(s);
}

/* Emits frames[i..n) that lie above head (the array is ascending); returns how many. */
static size_t
emit_above_head(sequencer *s, frame *const *frames, size_t n)
{
	size_t i = 0;

	while (i < n && frame_seq(frames[i]) <= s->head)
		i++;
	s->st.duplicates += i;
	if (i == n)
		return 0;
	/* Head first: the callee reads it as the head after this batch. */
	s->head = frame_seq(frames[n - 1]);
	s->emit(s->arg, frames + i, n - i);
	s->st.emitted += n - i;
	return n - i;
}

static void
drain(sequencer *s)
{
	while (s->n_held > 0 && s->held[0].prev <= s->head) {
		held h = s->held[0];

		s->n_held--;
		memmove(&s->held[0], &s->held[1], s->n_held * sizeof(held));
		s->st.held -= h.n;
		s->st.held_bytes -= h.bytes;
		emit_above_head(s, h.frames, h.n);
		held_fini(&h);
	}
}

static void
fill_failed(sequencer *s)
{
	s->st.fill_errors++;
	s->backing_off = true;
	s->retry_at = st_clock_now(s->clock) + st_backoff_next(&s->backoff);
}

static void
maybe_fill(sequencer *s)
{
	uint64_t now = st_clock_now(s->clock);
	uint64_t upto;

	if (!s->behind || s->fill_out)
		return;
	if (now < s->behind_since + SEQUENCER_WAIT_MS)
		return;
	if (s->backing_off && now < s->retry_at)
		return;
	/* After drain(), held[0].prev > head. */
	upto = s->n_held > 0 ? s->held[0].prev : s->known;
	s->fill_out = true;
	s->fill_upto = upto;
	st_debug("sequencer: fill (%llu, %llu]", (unsigned long long)s->head, (unsigned long long)upto);
	if (s->fill(s->arg, s->head, upto) != ST_OK) {
		s->fill_out = false;
		fill_failed(s);
	}
}

static void
step(sequencer *s)
{
	if (!s->has_head)
		return;
	drain(s);
	if (s->known > s->head) {
		if (!s->behind) {
			s->behind = true;
			s->behind_since = st_clock_now(s->clock);
		}
	} else {
		s->behind = false;
	}
	maybe_fill(s);
}

void
sequencer_set_head(sequencer *s, uint64_t head)
{
	ST_ASSERT(!s->has_head);
	s->has_head = true;
	s->head = head;
	if (s->known < head)
		s->known = head;
	step(s);
}

bool
sequencer_has_head(const sequencer *s)
{
	return s->has_head;
}

uint64_t
sequencer_head(const sequencer *s)
{
	return s->head;
}

/* origin_ns: when the message arrived, for frames emitted at once; 0 for frames that will be held. */
static frame **
frames_make(const proto_pub_event *ev, size_t n, uint64_t origin_ns)
{
	frame **f = st_xcalloc(n, sizeof(*f));

	for (size_t i = 0; i < n; i++) {
		f[i] = frame_item_new(ev[i].seq, ev[i].topic.p, ev[i].topic.len, ev[i].about, ev[i].n_about,
				      ev[i].has_data ? ev[i].data.p : NULL, ev[i].has_data ? ev[i].data.len : 0);
		frame_set_origin(f[i], origin_ns);
	}
	return f;
}

static void
frames_free(frame **f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		frame_unref(f[i]);
	free(f);
}

/*
 * What holding these events may cost, computed from the wire lengths before
 * any frame is made: a frame's cost is its envelope + FRAME_OVERHEAD, and
 * the envelope is at most the data text, the topic, each about escaped (at
 * worst 6 bytes a byte: \u00XX) and a fixed frame of keys and the id.
 */
static size_t
held_cost(const proto_pub_event *ev, size_t n)
{
	size_t bytes = 0;

	for (size_t i = 0; i < n; i++) {
		bytes += FRAME_OVERHEAD + 96 + ev[i].topic.len + (ev[i].has_data ? ev[i].data.len : 0);
		for (uint32_t k = 0; k < ev[i].n_about; k++)
			bytes += 3 + 6 * ev[i].about[k].len;
	}
	return bytes;
}

/* Index where a batch with this prev goes; *found when one is already there. */
static size_t
held_find(const sequencer *s, uint64_t prev, bool *found)
{
	size_t lo = 0, hi = s->n_held;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->held[mid].prev < prev)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < s->n_held && s->held[lo].prev == prev;
	return lo;
}

static void
hold(sequencer *s, uint64_t prev, const proto_pub_event *ev, size_t n)
{
	bool found;
	size_t at = held_find(s, prev, &found), bytes;

	if (found && s->held[at].last >= ev[n - 1].seq) {
		/* The same commit from a second writer. */
		s->st.duplicates += n;
		return;
	}
	bytes = held_cost(ev, n);
	if (s->st.held - (found ? s->held[at].n : 0) + n > SEQUENCER_MAX_HELD ||
	    s->st.held_bytes - (found ? s->held[at].bytes : 0) + bytes > SEQUENCER_MAX_HELD_BYTES) {
		s->st.held_dropped += n;
		return;
	}
	if (found) {
		/* Same prev but reaching further: keep the longer copy. */
		s->st.held -= s->held[at].n;
		s->st.held_bytes -= s->held[at].bytes;
		held_fini(&s->held[at]);
	} else {
		if (s->n_held == s->cap_held) {
			s->cap_held = s->cap_held ? s->cap_held * 2 : 16;
			s->held = st_xrealloc(s->held, s->cap_held * sizeof(held));
		}
		memmove(&s->held[at + 1], &s->held[at], (s->n_held - at) * sizeof(held));
		s->n_held++;
	}
	s->held[at].prev = prev;
	s->held[at].last = ev[n - 1].seq;
	s->held[at].n = n;
	s->held[at].bytes = bytes;
	s->held[at].frames = frames_make(ev, n, 0);
	s->st.held += n;
	s->st.held_bytes += bytes;
}

st_err
sequencer_push_batch(sequencer *s, uint64_t prev, const proto_pub_event *ev, size_t n, uint64_t origin_ns)
{
	uint64_t last;

	if (n == 0) {
		if (s->known < prev)
			s->known = prev;
		step(s);
		return ST_OK;
	}
	for (size_t i = 0; i < n; i++) {
		if (ev[i].seq <= (i == 0 ? prev : ev[i - 1].seq)) {
			s->st.protocol_errors++;
			st_warn("sequencer: batch after %llu: seqs not ascending at %zu", (unsigned long long)prev, i);
			return ST_EPROTO;
		}
	}
	last = ev[n - 1].seq;
	if (s->known < last)
		s->known = last;

	if (s->has_head && last <= s->head) {
		s->st.duplicates += n;
	} else if (s->has_head && prev <= s->head) {
		/* prev == head is the common case; prev < head is an overlap after a fill.  Either way
		 * only the events above head are new, and a hole before the first is a rollback. */
		size_t i = 0;
		while (ev[i].seq <= s->head)
			i++;
		s->st.duplicates += i;
		frame **f = frames_make(ev + i, n - i, origin_ns);
		emit_above_head(s, f, n - i);
		frames_free(f, n - i);
	} else {
		hold(s, prev, ev, n);
	}
	step(s);
	return ST_OK;
}

void
sequencer_push_tick(sequencer *s, uint64_t head)
{
	if (s->known < head)
		s->known = head;
	step(s);
}

st_err
sequencer_push(sequencer *s, const proto_pub *m, uint64_t origin_ns)
{
	switch (proto_pub_kind(m)) {
	case PROTO_PUB_TICK: sequencer_push_tick(s, proto_pub_head(m)); return ST_OK;
	case PROTO_PUB_BATCH: {
		size_t n = proto_pub_count(m);
		if (n == 0)
			return sequencer_push_batch(s, proto_pub_prev(m), NULL, 0, origin_ns);
		const proto_pub_event *ev = proto_pub_event_at(m, 0);
		bool contiguous = true;
		for (size_t i = 1; i < n && contiguous; i++)
			contiguous = proto_pub_event_at(m, i) == ev + i;
		if (contiguous)
			return sequencer_push_batch(s, proto_pub_prev(m), ev, n, origin_ns);
		/* n is bounded by the decoded message, which is already in memory. */
		proto_pub_event *copy = st_xcalloc(n, sizeof(*copy));
		for (size_t i = 0; i < n; i++)
			copy[i] = *proto_pub_event_at(m, i);
		st_err rv = sequencer_push_batch(s, proto_pub_prev(m), copy, n, origin_ns);
		free(copy);
		return rv;
	}
	}
	s->st.protocol_errors++;
	return ST_EPROTO;
}

void
sequencer_fill_done(sequencer *s, st_err err, frame *const *frames, size_t n, uint64_t upto_reached)
{
	size_t i0 = 0, i1;

	if (!s->fill_out)
		return;
	s->fill_out = false;
	if (err != ST_OK) {
		fill_failed(s);
		step(s);
		return;
	}
	if (upto_reached > s->fill_upto) {
		st_warn("sequencer: fill reached %llu beyond the %llu asked", (unsigned long long)upto_reached,
			(unsigned long long)s->fill_upto);
		upto_reached = s->fill_upto;
	}
	while (i0 < n && frame_seq(frames[i0]) <= s->head)
		i0++;
	for (i1 = i0; i1 < n && frame_seq(frames[i1]) <= upto_reached; i1++) {
		if (i1 > i0 && frame_seq(frames[i1]) <= frame_seq(frames[i1 - 1])) {
			st_warn("sequencer: fill result not in seq order");
			fill_failed(s);
			step(s);
			return;
		}
	}
	s->backing_off = false;
	st_backoff_reset(&s->backoff);
	s->st.fills++;
	/*
	 * Head first, so the callee reads the head after this batch.  Nothing
	 * committed between the last row and upto_reached: rolled-back holes,
	 * so the head after the fill is upto_reached.
	 */
	if (i1 > i0)
		s->head = frame_seq(frames[i1 - 1]);
	if (s->head < upto_reached)
		s->head = upto_reached;
	if (s->known < s->head)
		s->known = s->head;
	if (i1 > i0) {
		s->emit(s->arg, frames + i0, i1 - i0);
		s->st.emitted += i1 - i0;
		s->st.filled_events += i1 - i0;
	}
	step(s);
}

void
sequencer_on_timer(sequencer *s)
{
	step(s);
}

uint64_t
sequencer_next_deadline(const sequencer *s)
{
	uint64_t d;

	if (!s->has_head || !s->behind || s->fill_out)
		return 0;
	d = s->behind_since + SEQUENCER_WAIT_MS;
	if (s->backing_off && s->retry_at > d)
		d = s->retry_at;
	return d;
}

bool
sequencer_fill_pending(const sequencer *s)
{
	return s->fill_out;
}

uint64_t
sequencer_known_head(const sequencer *s)
{
	return s->known;
}

void
sequencer_stats_get(const sequencer *s, sequencer_stats *out)
{
	*out = s->st;
}
