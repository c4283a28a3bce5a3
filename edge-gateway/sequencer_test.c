/*
 * sequencer_test: the ordering rules on a hand-driven clock.
 */
#include "sequencer.h"

#include <stdlib.h>
#include <string.h>

#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"

#define MAX_REC 30000

typedef struct rec {
	uint64_t seqs[MAX_REC];
	uint64_t origins[MAX_REC]; /* frame_origin_ns of each emitted frame */
	size_t n;
	size_t emits;
	bool order_broken;
	struct {
		uint64_t after, upto;
	} fills[64];
	size_t n_fills;
	st_err fill_rv;
	uint64_t heads[64]; /* sequencer_head() seen inside each emit */
} rec;

static rec R;
static uint64_t ORIGIN; /* what batch() gives as the message's arrival */
static sequencer *S;    /* the one under test, for on_emit */
static st_clock_fake C;

static void
on_emit(void *arg, frame *const *frames, size_t n)
{
	rec *r = arg;

	if (r->emits < ST_ARRAY_LEN(r->heads))
		r->heads[r->emits] = sequencer_head(S);
	r->emits++;
	for (size_t i = 0; i < n; i++) {
		/* Take and drop a reference, as a subscriber queue would. */
		frame *f = frame_ref(frames[i]);
		uint64_t seq = frame_seq(f);
		if (r->n > 0 && seq <= r->seqs[r->n - 1])
			r->order_broken = true;
		if (r->n < MAX_REC) {
			r->origins[r->n] = frame_origin_ns(f);
			r->seqs[r->n++] = seq;
		}
		frame_unref(f);
	}
}

static st_err
on_fill(void *arg, uint64_t after, uint64_t upto)
{
	rec *r = arg;

	if (r->n_fills < ST_ARRAY_LEN(r->fills)) {
		r->fills[r->n_fills].after = after;
		r->fills[r->n_fills].upto = upto;
	}
	r->n_fills++;
	return r->fill_rv;
}

static sequencer *
setup(void)
{
	sequencer *s;

	memset(&R, 0, sizeof(R));
	st_clock_fake_init(&C, 1000);
	ST_CHECK(sequencer_new(&C.clock, on_emit, on_fill, &R, &s) == ST_OK);
	S = s;
	return s;
}

/* A batch of events with seqs from..to (inclusive) after prev. */
static st_err
batch(sequencer *s, uint64_t prev, uint64_t from, uint64_t to)
{
	static const proto_str about[2] = { { "a", 1 }, { "b,\"c", 4 } };
	proto_pub_event ev[64];
	size_t n = 0;

	ST_ASSERT(to - from < ST_ARRAY_LEN(ev));
	for (uint64_t q = from; q <= to; q++, n++) {
		memset(&ev[n], 0, sizeof(ev[n]));
		ev[n].seq = q;
		ev[n].topic.p = "t";
		ev[n].topic.len = 1;
		ev[n].about = about;
		ev[n].n_about = 2;
		if (q % 2 == 0) {
			ev[n].data.p = "{\"x\":1}";
			ev[n].data.len = 7;
			ev[n].has_data = true;
		}
	}
	return sequencer_push_batch(s, prev, ev, n, ORIGIN);
}

/* Answers the outstanding fill with items from..to (skipping the seqs in holes[]), reaching upto. */
static void
fill_answer(sequencer *s, uint64_t from, uint64_t to, uint64_t upto, const uint64_t *holes, size_t n_holes)
{
	frame *f[200] = { 0 };
	size_t n = 0;

	for (uint64_t q = from; q <= to && from != 0 && n < ST_ARRAY_LEN(f); q++) {
		bool hole = false;
		for (size_t i = 0; i < n_holes; i++)
			hole |= holes[i] == q;
		if (!hole)
			f[n++] = frame_item_new(q, "t", 1, NULL, 0, NULL, 0);
	}
	sequencer_fill_done(s, ST_OK, f, n, upto);
	for (size_t i = 0; i < n; i++)
		frame_unref(f[i]);
}

static bool
emitted_range(uint64_t from, uint64_t to)
{
	if (R.n != to - from + 1 || R.order_broken)
		return false;
	for (size_t i = 0; i < R.n; i++)
		if (R.seqs[i] != from + i)
			return false;
	return true;
}

static void
t_in_order(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	ST_CHECK(batch(s, 0, 1, 3) == ST_OK);
	ST_CHECK(batch(s, 3, 4, 5) == ST_OK);
	ST_CHECK(emitted_range(1, 5));
	ST_CHECK_EQ_U64(R.emits, 2);
	ST_CHECK_EQ_U64(sequencer_head(s), 5);
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 0);
	C.now += 10000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.emitted, 5);
	ST_CHECK_EQ_U64(st.duplicates, 0);
	sequencer_free(s);
}

static void
t_duplicate(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	batch(s, 0, 1, 3); /* writer A */
	batch(s, 0, 1, 3); /* writer B's copy */
	batch(s, 3, 4, 4);
	batch(s, 3, 4, 4);
	ST_CHECK(emitted_range(1, 4));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.duplicates, 4);
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	sequencer_free(s);
}

static void
t_reorder(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	batch(s, 3, 4, 5); /* batch 2 first */
	ST_CHECK_EQ_U64(R.n, 0);
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.held, 2);
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 1000 + SEQUENCER_WAIT_MS);
	C.now += 200;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	batch(s, 0, 1, 3); /* batch 1 within the wait */
	ST_CHECK(emitted_range(1, 5));
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.held, 0);
	ST_CHECK_EQ_U64(st.fills, 0);
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 0);
	sequencer_free(s);
}

/* Frames emitted with their message carry its arrival; frames that waited for a fill carry 0. */
static void
t_origin(void)
{
	sequencer *s = setup();

	sequencer_set_head(s, 0);
	ORIGIN = 777;
	batch(s, 0, 1, 2); /* emitted at once */
	batch(s, 4, 5, 6); /* held: 3..4 missing */
	ORIGIN = 0;
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	fill_answer(s, 3, 4, 4, NULL, 0);
	ST_CHECK(emitted_range(1, 6));
	ST_CHECK_EQ_U64(R.origins[0], 777);
	ST_CHECK_EQ_U64(R.origins[1], 777);
	for (size_t i = 2; i < 6; i++)
		ST_CHECK_EQ_U64(R.origins[i], 0);
	sequencer_free(s);
}

static void
t_gap(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	/* batch 1 (1..2) is lost */
	batch(s, 2, 3, 4);
	C.now += 100;
	batch(s, 4, 5, 5);
	C.now += 149; /* 249 ms after the gap was seen */
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	C.now += 1;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].after, 0);
	ST_CHECK_EQ_U64(R.fills[0].upto, 2);
	ST_CHECK(sequencer_fill_pending(s));
	/* a second timer while the fill runs asks nothing more */
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	fill_answer(s, 1, 2, 2, NULL, 0);
	ST_CHECK(emitted_range(1, 5));
	ST_CHECK(!sequencer_fill_pending(s));
	/* the lost message turns up late: nothing twice */
	batch(s, 0, 1, 2);
	ST_CHECK(emitted_range(1, 5));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.fills, 1);
	ST_CHECK_EQ_U64(st.filled_events, 2);
	ST_CHECK_EQ_U64(st.duplicates, 2);
	ST_CHECK_EQ_U64(st.held, 0);
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	sequencer_free(s);
}

static void
t_late_during_fill(void)
{
	sequencer *s = setup();

	sequencer_set_head(s, 0);
	batch(s, 2, 3, 4);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	batch(s, 0, 1, 2); /* arrives while the fill runs */
	ST_CHECK(emitted_range(1, 4));
	fill_answer(s, 1, 2, 2, NULL, 0);
	ST_CHECK(emitted_range(1, 4));
	ST_CHECK_EQ_U64(sequencer_head(s), 4);
	sequencer_free(s);
}

static void
t_partial_fill(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	batch(s, 10, 11, 11);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].upto, 10);
	fill_answer(s, 1, 4, 4, NULL, 0); /* LIMIT 4 */
	/* the rest is asked for at once, without a new wait */
	ST_CHECK_EQ_U64(R.n_fills, 2);
	ST_CHECK_EQ_U64(R.fills[1].after, 4);
	ST_CHECK_EQ_U64(R.fills[1].upto, 10);
	ST_CHECK(emitted_range(1, 4));
	fill_answer(s, 5, 10, 10, NULL, 0);
	ST_CHECK(emitted_range(1, 11));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.fills, 2);
	ST_CHECK_EQ_U64(st.filled_events, 10);
	ST_CHECK_EQ_U64(R.n_fills, 2);
	sequencer_free(s);
}

static void
t_fill_error_retry(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 0);
	batch(s, 5, 6, 6);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	sequencer_fill_done(s, ST_EDB, NULL, 0, 0);
	ST_CHECK_EQ_U64(R.n_fills, 1); /* no immediate retry */
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), C.now + 500);
	C.now += 499;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	C.now += 1;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 2);
	ST_CHECK_EQ_U64(R.fills[1].after, 0);
	ST_CHECK_EQ_U64(R.fills[1].upto, 5);
	sequencer_fill_done(s, ST_EDB, NULL, 0, 0);
	/* back-off doubled; the fill callback itself failing counts too */
	C.now += 999;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 2);
	C.now += 1;
	R.fill_rv = ST_EBUSY;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 3);
	ST_CHECK(!sequencer_fill_pending(s));
	R.fill_rv = ST_OK;
	/* capped at 5 s: 2000, 4000, 5000, 5000 */
	C.now += 2000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 4);
	sequencer_fill_done(s, ST_EDB, NULL, 0, 0);
	C.now += 4000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 5);
	sequencer_fill_done(s, ST_EDB, NULL, 0, 0);
	C.now += 4999;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 5);
	C.now += 1;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 6);
	ST_CHECK_EQ_U64(R.n, 0); /* never skipped */
	fill_answer(s, 1, 5, 5, NULL, 0);
	ST_CHECK(emitted_range(1, 6));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.fill_errors, 5);
	ST_CHECK_EQ_U64(st.fills, 1);
	/* success reset the back-off: a new gap, a failed fill, retry after 500 ms */
	batch(s, 8, 9, 9);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 7);
	sequencer_fill_done(s, ST_EDB, NULL, 0, 0);
	C.now += 500;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 8);
	sequencer_free(s);
}

static void
t_rollback_hole(void)
{
	sequencer *s = setup();

	sequencer_set_head(s, 5);
	batch(s, 5, 8, 9); /* 6 and 7 were rolled back */
	ST_CHECK(emitted_range(8, 9));
	ST_CHECK_EQ_U64(sequencer_head(s), 9);
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 0);
	C.now += 1000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	sequencer_free(s);
}

static void
t_tick_ahead(void)
{
	sequencer *s = setup();
	const uint64_t hole = 7;

	sequencer_set_head(s, 5);
	sequencer_push_tick(s, 8);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	C.now += 249;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	C.now += 1;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].after, 5);
	ST_CHECK_EQ_U64(R.fills[0].upto, 8);
	fill_answer(s, 6, 8, 8, &hole, 1);
	ST_CHECK_EQ_U64(R.n, 2);
	ST_CHECK_EQ_U64(R.seqs[0], 6);
	ST_CHECK_EQ_U64(R.seqs[1], 8);
	ST_CHECK_EQ_U64(sequencer_head(s), 8);
	sequencer_free(s);
}

static void
t_tick_equal(void)
{
	sequencer *s = setup();

	sequencer_set_head(s, 5);
	sequencer_push_tick(s, 5);
	sequencer_push_tick(s, 3); /* a lagging writer */
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 0);
	C.now += 10000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	ST_CHECK_EQ_U64(R.n, 0);
	sequencer_free(s);
}

static void
t_before_head(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	batch(s, 10, 11, 12);
	batch(s, 12, 13, 13);
	batch(s, 5, 6, 10);
	sequencer_push_tick(s, 13);
	C.now += 10000;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n, 0);
	ST_CHECK_EQ_U64(R.n_fills, 0);
	ST_CHECK_EQ_U64(sequencer_next_deadline(s), 0);
	sequencer_set_head(s, 8);
	ST_CHECK(emitted_range(9, 13));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.duplicates, 3);
	ST_CHECK_EQ_U64(st.held, 0);
	sequencer_free(s);

	/* released into a gap: filled after the wait */
	s = setup();
	batch(s, 5, 6, 6);
	sequencer_set_head(s, 3);
	ST_CHECK_EQ_U64(R.n, 0);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].after, 3);
	ST_CHECK_EQ_U64(R.fills[0].upto, 5);
	fill_answer(s, 4, 5, 5, NULL, 0);
	ST_CHECK(emitted_range(4, 6));
	sequencer_free(s);
}

static void
t_overlap(void)
{
	sequencer *s = setup();
	sequencer_stats st;

	sequencer_set_head(s, 10);
	batch(s, 8, 9, 12);
	ST_CHECK(emitted_range(11, 12));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.duplicates, 2);
	sequencer_free(s);
}

static void
t_hold_bound(void)
{
	sequencer *s = setup();
	sequencer_stats st;
	uint64_t q = 100;

	sequencer_set_head(s, 0);
	/* 10,050 events after a gap: the last ones do not fit */
	for (int i = 0; i < 201; i++, q += 50)
		batch(s, q, q + 1, q + 50);
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.held, SEQUENCER_MAX_HELD);
	ST_CHECK_EQ_U64(st.held_dropped, 50);
	ST_CHECK_EQ_U64(sequencer_known_head(s), 10150);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].upto, 100);
	fill_answer(s, 1, 100, 100, NULL, 0);
	ST_CHECK(emitted_range(1, 10100));
	/* the dropped batch comes from the next fill */
	ST_CHECK_EQ_U64(R.n_fills, 2);
	ST_CHECK_EQ_U64(R.fills[1].after, 10100);
	ST_CHECK_EQ_U64(R.fills[1].upto, 10150);
	fill_answer(s, 10101, 10150, 10150, NULL, 0);
	ST_CHECK(emitted_range(1, 10150));
	sequencer_free(s);
}

/* Writers cannot make the hold cost more than SEQUENCER_MAX_HELD_BYTES, however large the events. */
static void
t_hold_bound_bytes(void)
{
	static char big[PROTO_MAX_DATA];
	sequencer *s = setup();
	sequencer_stats st;
	proto_pub_event ev[4];
	uint64_t q = 100, kept = 0, held_events = 0;

	memset(big, 'x', sizeof(big));
	big[0] = '"';
	big[sizeof(big) - 1] = '"';
	sequencer_set_head(s, 0);
	/* batches of 4 events of 256 KiB data each after a gap: ~1 MiB a batch */
	for (int i = 0; i < 64; i++, q += 4) {
		for (int k = 0; k < 4; k++) {
			memset(&ev[k], 0, sizeof(ev[k]));
			ev[k].seq = q + 1 + (uint64_t)k;
			ev[k].topic.p = "t";
			ev[k].topic.len = 1;
			ev[k].data.p = big;
			ev[k].data.len = sizeof(big);
			ev[k].has_data = true;
		}
		ST_CHECK(sequencer_push_batch(s, q, ev, 4, 0) == ST_OK);
	}
	sequencer_stats_get(s, &st);
	held_events = st.held;
	kept = st.held_bytes;
	ST_CHECK(kept <= SEQUENCER_MAX_HELD_BYTES);
	ST_CHECK(kept > SEQUENCER_MAX_HELD_BYTES - 4 * (PROTO_MAX_DATA + 1024)); /* full, not refusing early */
	ST_CHECK(held_events < 4 * 64);
	ST_CHECK_EQ_U64(st.held_dropped + held_events, 4 * 64);
	/* the fill brings everything back, nothing emitted twice */
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.fills[0].upto, 100);
	fill_answer(s, 1, 100, 100, NULL, 0);
	ST_CHECK_EQ_U64(R.n_fills, 2);
	ST_CHECK_EQ_U64(R.fills[1].after, 100 + held_events);
	fill_answer(s, 101 + held_events, 100 + 4 * 64, 100 + 4 * 64, NULL, 0);
	ST_CHECK(emitted_range(1, 100 + 4 * 64));
	sequencer_stats_get(s, &st);
	ST_CHECK_EQ_U64(st.held_bytes, 0);
	sequencer_free(s);
}

static void
t_protocol_error(void)
{
	sequencer *s = setup();
	proto_pub_event ev[2];

	memset(ev, 0, sizeof(ev));
	ev[0].seq = 5;
	ev[0].topic.p = ev[1].topic.p = "t";
	ev[0].topic.len = ev[1].topic.len = 1;
	ev[1].seq = 5;
	sequencer_set_head(s, 0);
	ST_CHECK(sequencer_push_batch(s, 0, ev, 2, 0) == ST_EPROTO);
	ST_CHECK(sequencer_push_batch(s, 5, ev, 1, 0) == ST_EPROTO); /* seq <= prev */
	ST_CHECK_EQ_U64(R.n, 0);
	ST_CHECK_EQ_U64(sequencer_known_head(s), 0);
	/* fill_done with nothing outstanding is ignored */
	sequencer_fill_done(s, ST_OK, NULL, 0, 99);
	ST_CHECK_EQ_U64(sequencer_head(s), 0);
	sequencer_free(s);
}

/* Through the real wire format: encoded, decoded, pushed. */
static void
t_wire(void)
{
	sequencer *s = setup();
	proto_pub_event ev[3];
	proto_str about[1] = { { "x,\"y", 4 } };
	proto_pub *m = NULL;
	st_buf b;

	memset(ev, 0, sizeof(ev));
	for (int i = 0; i < 3; i++) {
		ev[i].seq = 11 + (uint64_t)i;
		ev[i].topic.p = "orders";
		ev[i].topic.len = 6;
	}
	ev[1].about = about;
	ev[1].n_about = 1;
	ev[2].data.p = "{\"a\":1}";
	ev[2].data.len = 7;
	ev[2].has_data = true;
	sequencer_set_head(s, 10);
	st_buf_init(&b);
	proto_pub_batch_encode(&b, "w1", 10, ev, 3);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_OK);
	ST_CHECK(m != NULL && sequencer_push(s, m, 0) == ST_OK);
	proto_pub_free(m);
	m = NULL;
	ST_CHECK(emitted_range(11, 13));
	st_buf_reset(&b);
	proto_pub_tick_encode(&b, "w1", 15);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_OK);
	ST_CHECK(m != NULL && sequencer_push(s, m, 0) == ST_OK);
	proto_pub_free(m);
	ST_CHECK_EQ_U64(sequencer_known_head(s), 15);
	C.now += SEQUENCER_WAIT_MS;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	ST_CHECK_EQ_U64(R.fills[0].after, 13);
	ST_CHECK_EQ_U64(R.fills[0].upto, 15);
	st_buf_fini(&b);
	sequencer_free(s);
}

/* streams.h: a batch is published with the head from after it, fills included. */
static void
t_head_after_batch_inside_emit(void)
{
	static const uint64_t holes[] = { 9, 10 };
	sequencer *s = setup();

	sequencer_set_head(s, 0);
	batch(s, 0, 1, 3);
	ST_CHECK_EQ_U64(R.emits, 1);
	ST_CHECK_EQ_U64(R.heads[0], 3);
	/* behind a gap, then drained: the held batch's emit sees its own last seq */
	batch(s, 10, 11, 12);
	C.now += 250;
	sequencer_on_timer(s);
	ST_CHECK_EQ_U64(R.n_fills, 1);
	/* the fill returns 4..8 of (3, 10]; 9 and 10 are rolled-back holes */
	fill_answer(s, 4, 10, 10, holes, 2);
	ST_CHECK_EQ_U64(R.emits, 3);
	ST_CHECK_EQ_U64(R.heads[1], 10); /* the fill's batch: head is upto_reached */
	ST_CHECK_EQ_U64(R.heads[2], 12); /* the held batch after it */
	ST_CHECK(!R.order_broken);
	sequencer_free(s);
}

int
main(void)
{
	ST_RUN(t_in_order);
	ST_RUN(t_head_after_batch_inside_emit);
	ST_RUN(t_duplicate);
	ST_RUN(t_reorder);
	ST_RUN(t_gap);
	ST_RUN(t_origin);
	ST_RUN(t_late_during_fill);
	ST_RUN(t_partial_fill);
	ST_RUN(t_fill_error_retry);
	ST_RUN(t_rollback_hole);
	ST_RUN(t_tick_ahead);
	ST_RUN(t_tick_equal);
	ST_RUN(t_before_head);
	ST_RUN(t_overlap);
	ST_RUN(t_hold_bound);
	ST_RUN(t_hold_bound_bytes);
	ST_RUN(t_protocol_error);
	ST_RUN(t_wire);
	return st_test_done();
}
