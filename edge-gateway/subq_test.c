/* subq_test: every rule of ADR-0197 on a fake clock, plus the signal index against a model. */
#include "subq.h"

#include <stdlib.h>

#include "st_test.h"
#include "st_util.h"

static st_clock_fake clk;
static st_metrics *reg;
static subq_counters ctr;

static void
setup(void)
{
	st_metrics_free(reg);
	reg = st_metrics_new();
	ctr.coalesced = st_metrics_counter(reg, "studio_sse_dropped_total", "reason=\"coalesced\"", "dropped");
	ctr.overflow = st_metrics_counter(reg, "studio_sse_dropped_total", "reason=\"overflow\"", "dropped");
	ctr.replay = st_metrics_counter(reg, "studio_sse_dropped_total", "reason=\"replay\"", "dropped");
	ctr.blocked = st_metrics_counter(reg, "studio_sse_dropped_total", "reason=\"blocked\"", "dropped");
	ctr.cut_slow = st_metrics_counter(reg, "studio_sse_cut_total", "reason=\"slow_consumer\"", "cut");
	ctr.cut_blocked = st_metrics_counter(reg, "studio_sse_cut_total", "reason=\"blocked\"", "cut");
	st_clock_fake_init(&clk, 1000000);
}

/* An item on topic t about "r<res>"; a signal when !data. */
static frame *
item(uint64_t seq, unsigned res, bool data)
{
	char a[16];
	proto_str ab[1];
	int n = snprintf(a, sizeof(a), "r%u", res);

	ab[0] = (proto_str){ a, (size_t)n };
	return frame_item_new(seq, "t", 1, ab, 1, data ? "{\"x\":1}" : NULL, data ? 7 : 0);
}

/* Pushes a new frame and drops the caller's reference. */
static enum subq_result
push(subq *q, frame *f, uint64_t blocked)
{
	enum subq_result r = subq_push(q, f, blocked);

	frame_unref(f);
	return r;
}

static uint64_t
pop_seq(subq *q)
{
	frame *f = subq_pop(q);
	uint64_t s = f ? frame_seq(f) : UINT64_MAX;

	frame_unref(f);
	return s;
}

#define CHECK_HEAD(q, want)                                       \
	do {                                                      \
		size_t l_;                                        \
		frame *h_ = subq_peek(q);                         \
		ST_CHECK(h_ != NULL);                             \
		if (h_) {                                         \
			const char *e_ = frame_envelope(h_, &l_); \
			ST_CHECK_MEM(e_, l_, (want));             \
		}                                                 \
	} while (0)

/* Fills q with data frames seq first.. so that it holds exactly SUBQ_MAX_FRAMES. */
static uint64_t
fill(subq *q, uint64_t first)
{
	while (subq_count(q) < SUBQ_MAX_FRAMES)
		ST_CHECK(push(q, item(first++, 1, true), 0) == SUBQ_QUEUED);
	return first;
}

static void
t_coalesce_keeps_first_position(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	ST_CHECK(push(q, item(1, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(2, 9, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(3, 2, false), 0) == SUBQ_QUEUED); /* other resource: kept */
	ST_CHECK(push(q, item(4, 1, false), 0) == SUBQ_COALESCED);
	ST_CHECK(push(q, item(5, 1, false), 0) == SUBQ_COALESCED);
	ST_CHECK_EQ_U64(subq_count(q), 3);
	ST_CHECK_EQ_U64(st_counter_get(ctr.coalesced), 2);
	/* The first signal keeps its place and its id, so ids still increase. */
	ST_CHECK_EQ_U64(pop_seq(q), 1);
	ST_CHECK_EQ_U64(pop_seq(q), 2);
	ST_CHECK_EQ_U64(pop_seq(q), 3);
	ST_CHECK(subq_pop(q) == NULL);
	ST_CHECK_EQ_U64(subq_bytes(q), 0);
	/* popped signals leave the index: a new one is queued, not coalesced */
	ST_CHECK(push(q, item(6, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow) + st_counter_get(ctr.blocked), 0);
	subq_free(q);
}

static void
t_data_never_coalesced(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	ST_CHECK(push(q, item(1, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(2, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(3, 1, false), 0) == SUBQ_QUEUED); /* a signal does not replace data */
	ST_CHECK(push(q, item(4, 1, true), 0) == SUBQ_QUEUED);  /* data does not replace a signal */
	ST_CHECK_EQ_U64(subq_count(q), 4);
	ST_CHECK_EQ_U64(st_counter_get(ctr.coalesced), 0);
	ST_CHECK_EQ_U64(pop_seq(q), 1);
	ST_CHECK_EQ_U64(pop_seq(q), 2);
	ST_CHECK_EQ_U64(pop_seq(q), 3);
	ST_CHECK_EQ_U64(pop_seq(q), 4);
	subq_free(q);
}

static void
t_overflow_by_count(void)
{
	subq *q;
	frame *f;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	fill(q, 1);
	ST_CHECK_EQ_U64(subq_count(q), 1000);
	f = item(1001, 1, true);
	ST_CHECK(subq_push(q, f, 0) == SUBQ_OVERFLOW);
	frame_unref(f); /* ASan: the queue must not have kept it */
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"resync\",\"id\":\"1001\",\"reason\":\"overflow\"}");
	ST_CHECK_EQ_U64(subq_bytes(q), frame_cost(subq_peek(q)));
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 1001);
	ST_CHECK(!subq_is_dropped(q));
	/* the queue goes on after the resync */
	ST_CHECK(push(q, item(1002, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(pop_seq(q), 1001);
	ST_CHECK_EQ_U64(pop_seq(q), 1002);
	subq_free(q);
}

static void
t_overflow_small(void)
{
	/* 40 queued + the one that did not fit = 41 (bytes bound, one huge frame) */
	char *big = malloc(SUBQ_MAX_BYTES);
	subq *q;

	setup();
	memset(big, '1', SUBQ_MAX_BYTES);
	q = subq_new(&clk.clock, &ctr, false, NULL);
	for (uint64_t s = 1; s <= 40; s++)
		ST_CHECK(push(q, item(s, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, frame_item_new(41, "t", 1, NULL, 0, big, SUBQ_MAX_BYTES - 200), 0) == SUBQ_OVERFLOW);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 41);
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"resync\",\"id\":\"41\",\"reason\":\"overflow\"}");
	subq_free(q);
	free(big);
}

static void
t_overflow_by_bytes(void)
{
	char *data = malloc(64 * 1024);
	frame *probe;
	size_t cost, n;
	subq *q;

	setup();
	memset(data, '7', 64 * 1024);
	probe = frame_item_new(100, "t", 1, NULL, 0, data, 64 * 1024);
	cost = frame_cost(probe);
	frame_unref(probe);
	n = SUBQ_MAX_BYTES / cost; /* 15 */
	q = subq_new(&clk.clock, &ctr, false, NULL);
	for (size_t i = 0; i < n; i++)
		ST_CHECK(push(q, frame_item_new(100 + i, "t", 1, NULL, 0, data, 64 * 1024), 0) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(subq_bytes(q), n * cost);
	ST_CHECK(n * cost + cost > SUBQ_MAX_BYTES);
	ST_CHECK(push(q, frame_item_new(100 + n, "t", 1, NULL, 0, data, 64 * 1024), 0) == SUBQ_OVERFLOW);
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"resync\",\"id\":\"115\",\"reason\":\"overflow\"}");
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), n + 1);
	subq_free(q);
	free(data);
}

/* One overflow at the current fake time; returns the next seq. */
static uint64_t
overflow_once(subq *q, uint64_t seq, enum subq_result want)
{
	seq = fill(q, seq);
	ST_CHECK(push(q, item(seq, 1, true), 0) == want);
	return seq + 1;
}

static void
t_third_overflow_within_60s_drops(void)
{
	uint64_t seq = 1, before;
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	seq = overflow_once(q, seq, SUBQ_OVERFLOW);
	clk.now += 30000;
	seq = overflow_once(q, seq, SUBQ_OVERFLOW);
	clk.now += 30000; /* exactly 60 s after the first: within */
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_slow), 0);
	seq = overflow_once(q, seq, SUBQ_DROP);
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_slow), 1);
	ST_CHECK(subq_is_dropped(q) && subq_is_closed(q));
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"reconnect\",\"retry_ms\":500,\"reason\":\"slow_consumer\"}");
	/* 1001 + (1 resync + 999 + 1) + (1 + 999 + 1) */
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 3003);
	before = st_counter_get(ctr.overflow);
	ST_CHECK(push(q, item(seq, 1, true), 0) == SUBQ_DROP);
	ST_CHECK(push(q, frame_heartbeat_new(), 0) == SUBQ_DROP);
	ST_CHECK(push(q, frame_complete_new(), 0) == SUBQ_DROP);
	ST_CHECK(push(q, item(seq + 1, 1, true), 999999) == SUBQ_DROP);
	ST_CHECK_EQ_U64(subq_count(q), 1);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), before);
	ST_CHECK_EQ_U64(st_counter_get(ctr.blocked), 0);
	/* one stream, cut once, whatever it is offered afterwards */
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_slow), 1);
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_blocked), 0);
	subq_free(q);
}

static void
t_three_overflows_over_60001ms_do_not_drop(void)
{
	uint64_t seq = 1;
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	seq = overflow_once(q, seq, SUBQ_OVERFLOW);
	clk.now += 30000;
	seq = overflow_once(q, seq, SUBQ_OVERFLOW);
	clk.now += 30001; /* 60.001 s after the first */
	seq = overflow_once(q, seq, SUBQ_OVERFLOW);
	ST_CHECK(!subq_is_dropped(q));
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"resync\",\"id\":\"3001\",\"reason\":\"overflow\"}");
	/* the window slides: the second and third are within 60 s of a fourth */
	clk.now += 1;
	seq = overflow_once(q, seq, SUBQ_DROP);
	ST_CHECK(subq_is_dropped(q));
	subq_free(q);
}

static void
t_blocked(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	for (uint64_t s = 1; s <= 5; s++)
		ST_CHECK(push(q, item(s, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, frame_heartbeat_new(), 29900) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(6, 1, true), SUBQ_BLOCKED_MS) == SUBQ_QUEUED); /* strictly more than 30 s */
	ST_CHECK(!subq_is_dropped(q));
	ST_CHECK_EQ_U64(st_counter_get(ctr.blocked), 0);
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_blocked), 0);
	ST_CHECK(push(q, frame_heartbeat_new(), 30100) == SUBQ_DROP);
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_blocked), 1);
	ST_CHECK_EQ_U64(st_counter_get(ctr.cut_slow), 0);
	ST_CHECK(subq_is_dropped(q));
	ST_CHECK_EQ_U64(subq_count(q), 1);
	CHECK_HEAD(q, "{\"type\":\"reconnect\",\"retry_ms\":500,\"reason\":\"blocked\"}");
	ST_CHECK_EQ_U64(st_counter_get(ctr.blocked), 8); /* 7 queued + the heartbeat */
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 0);
	ST_CHECK(push(q, item(7, 1, true), 0) == SUBQ_DROP);
	ST_CHECK_EQ_U64(st_counter_get(ctr.blocked), 8);
	subq_free(q);
}

static void
t_hold_mode(void)
{
	uint64_t seq;
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, true, NULL);
	ST_CHECK(push(q, item(1, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(2, 1, false), 0) == SUBQ_COALESCED);  /* coalescing applies */
	ST_CHECK(push(q, item(3, 2, true), 999999) == SUBQ_QUEUED); /* blocked_ms ignored */
	seq = fill(q, 4);
	ST_CHECK(!subq_hold_overflowed(q));
	ST_CHECK(push(q, item(seq, 1, true), 0) == SUBQ_OVERFLOW);
	ST_CHECK(subq_hold_overflowed(q));
	ST_CHECK_EQ_U64(subq_overflow_seq(q), seq);
	ST_CHECK_EQ_U64(subq_count(q), 0); /* no resync inserted */
	ST_CHECK_EQ_U64(subq_bytes(q), 0);
	ST_CHECK_EQ_U64(st_counter_get(ctr.replay), 1001);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 0);
	ST_CHECK_EQ_U64(st_counter_get(ctr.coalesced), 1);
	/* the three-overflow rule does not apply */
	seq++;
	for (int i = 0; i < 3; i++) {
		seq = fill(q, seq);
		ST_CHECK(push(q, item(seq, 1, true), 0) == SUBQ_OVERFLOW);
		ST_CHECK_EQ_U64(subq_overflow_seq(q), seq);
		seq++;
	}
	ST_CHECK(!subq_is_dropped(q));
	ST_CHECK(push(q, item(seq, 1, true), 0) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(pop_seq(q), seq);
	subq_free(q);
}

static void
t_hold_newest_seq(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, true, NULL);
	fill(q, 5001);
	/* the newest dropped seq is remembered, whichever frame did not fit */
	ST_CHECK(push(q, frame_resync_new(7, "gap"), 0) == SUBQ_OVERFLOW);
	ST_CHECK_EQ_U64(subq_overflow_seq(q), 6000);
	ST_CHECK_EQ_U64(subq_count(q), 0);
	ST_CHECK_EQ_U64(st_counter_get(ctr.replay), 1001);
	/* and never goes back */
	fill(q, 100);
	ST_CHECK(push(q, item(1100, 1, true), 0) == SUBQ_OVERFLOW);
	ST_CHECK_EQ_U64(subq_overflow_seq(q), 6000);
	subq_free(q);
}

static void
t_terminal_always_accepted(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	fill(q, 1);
	/* a heartbeat that does not fit is discarded; nothing is emptied */
	ST_CHECK(push(q, frame_heartbeat_new(), 0) == SUBQ_COALESCED);
	ST_CHECK_EQ_U64(subq_count(q), 1000);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow), 0);
	/* a terminal frame gets in over the bound, even while blocked */
	ST_CHECK(push(q, frame_reconnect_new(3000, "draining"), 40000) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(subq_count(q), 1001);
	ST_CHECK(subq_is_closed(q) && !subq_is_dropped(q));
	ST_CHECK(push(q, item(5000, 1, true), 0) == SUBQ_DROP);
	ST_CHECK(push(q, frame_complete_new(), 0) == SUBQ_DROP);
	ST_CHECK_EQ_U64(subq_count(q), 1001);
	ST_CHECK_EQ_U64(st_counter_get(ctr.overflow) + st_counter_get(ctr.blocked), 0);
	for (int i = 0; i < 1000; i++)
		ST_CHECK_EQ_U64(pop_seq(q), (uint64_t)i + 1);
	CHECK_HEAD(q, "{\"type\":\"reconnect\",\"retry_ms\":3000,\"reason\":\"draining\"}");
	subq_free(q);

	/* byte bound too: a failure after a full-bytes queue */
	q = subq_new(&clk.clock, NULL, false, NULL);
	ST_CHECK(push(q, frame_failure_new(500, "Internal Server Error", NULL), 0) == SUBQ_QUEUED);
	ST_CHECK_EQ_U64(subq_count(q), 1);
	subq_free(q);
}

static void
t_null_counters_and_free(void)
{
	subq *q = subq_new(&clk.clock, NULL, false, NULL);

	st_clock_fake_init(&clk, 5);
	ST_CHECK(subq_peek(q) == NULL && subq_pop(q) == NULL);
	ST_CHECK(push(q, item(1, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(2, 1, false), 0) == SUBQ_COALESCED);
	fill(q, 3);
	ST_CHECK(push(q, item(2000, 1, true), 0) == SUBQ_OVERFLOW);
	ST_CHECK(push(q, item(2001, 1, true), 30001) == SUBQ_DROP);
	subq_free(q); /* frees the queued frames: ASan checks */
	subq_free(NULL);
}

/*
 * The signal index against a naive model: random signals on 40 resources,
 * data frames and pops, so that the ring grows, wraps and shrinks and the
 * index rebuilds and deletes in every pattern.
 */
static void
t_index_model(void)
{
	enum { N = 1200 };
	struct {
		uint64_t seq;
		unsigned res;
		bool sig;
	} model[N];
	size_t mn = 0, maxn = 0;
	uint32_t rnd = 12345;
	uint64_t seq = 1, coalesced = 0;
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	for (int step = 0; step < 200000; step++) {
		unsigned r;

		rnd = rnd * 1103515245u + 12345u;
		r = (rnd >> 8) % 100;
		/* phases of filling and draining */
		if ((step / 3000) % 2 ? r < 60 : r < 10) {
			uint64_t got = pop_seq(q);

			if (mn == 0) {
				ST_CHECK(got == UINT64_MAX);
			} else {
				if (got != model[0].seq) {
					ST_CHECK_EQ_U64(got, model[0].seq);
					break;
				}
				memmove(model, model + 1, (mn - 1) * sizeof(model[0]));
				mn--;
			}
		} else if (mn < SUBQ_MAX_FRAMES) {
			unsigned res = (rnd >> 16) % 40;
			bool sig = r % 3 != 0;
			enum subq_result want = SUBQ_QUEUED, got;
			size_t i;

			for (i = 0; sig && i < mn; i++)
				if (model[i].sig && model[i].res == res)
					break;
			if (sig && mn > 0 && model[mn - 1].sig && model[mn - 1].res == res) {
				/* the newest frame queued: it takes the newer id */
				model[mn - 1].seq = seq;
				want = SUBQ_COALESCED;
				coalesced++;
			} else if (sig && i < mn) {
				/* frames behind it: the queued signal keeps its place and its id */
				want = SUBQ_COALESCED;
				coalesced++;
			} else {
				model[mn].seq = seq;
				model[mn].res = res;
				model[mn].sig = sig;
				mn++;
			}
			got = push(q, item(seq, res, !sig), 0);
			ST_CHECK(got == want);
			if (got != want)
				break;
			seq++;
		}
		maxn = ST_MAX(maxn, mn);
		if (subq_count(q) != mn) {
			ST_CHECK_EQ_U64(subq_count(q), mn);
			break;
		}
	}
	ST_CHECK_EQ_U64(st_counter_get(ctr.coalesced), coalesced);
	ST_CHECK(coalesced > 1000);
	ST_CHECK(maxn > 512); /* the ring grew to its largest size */
	subq_free(q);
}

/* Contract "Coalescing and ids": nothing queued behind -> the newer id. */
static void
t_coalesce_takes_newer_id_at_tail(void)
{
	subq *q;

	setup();
	q = subq_new(&clk.clock, &ctr, false, NULL);
	ST_CHECK(push(q, item(1, 9, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(2, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(3, 1, false), 0) == SUBQ_COALESCED);
	ST_CHECK(push(q, item(7, 1, false), 0) == SUBQ_COALESCED);
	ST_CHECK_EQ_U64(subq_count(q), 2);
	ST_CHECK_EQ_U64(st_counter_get(ctr.coalesced), 2);
	ST_CHECK_EQ_U64(pop_seq(q), 1);
	CHECK_HEAD(q, "{\"type\":\"item\",\"id\":\"7\",\"topic\":\"t\",\"about\":[\"r1\"]}");
	ST_CHECK_EQ_U64(pop_seq(q), 7);
	ST_CHECK(subq_pop(q) == NULL);
	ST_CHECK_EQ_U64(subq_bytes(q), 0);
	/* the replaced signal left the index with its slot: a new one queues */
	ST_CHECK(push(q, item(8, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(9, 2, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(10, 1, false), 0) == SUBQ_COALESCED); /* data behind: keeps 8 */
	ST_CHECK_EQ_U64(pop_seq(q), 8);
	ST_CHECK_EQ_U64(pop_seq(q), 9);
	ST_CHECK(subq_pop(q) == NULL);
	subq_free(q);
}

/*
 * The resume seam (a client resumes with L = 90; the check's snapshot head
 * D = 103): S1 (id 100) and S2 (id 105, same topic and about) are held.  The
 * release drops held frames at or below D; the change 105 must survive, with
 * or without frames held between the two signals.
 */
static uint64_t
release_above(subq *hold, uint64_t cut, uint64_t *out, size_t cap)
{
	size_t n = 0;
	frame *f;

	while ((f = subq_pop(hold)) != NULL) {
		if (frame_seq(f) > cut && n < cap)
			out[n++] = frame_seq(f);
		frame_unref(f);
	}
	return n;
}

static void
t_hold_seam_keeps_newer_signal(void)
{
	uint64_t got[8];
	subq *q;

	setup();
	/* S1 then S2: S2 takes S1's slot with its own id. */
	q = subq_new(&clk.clock, &ctr, true, NULL);
	ST_CHECK(push(q, item(100, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(105, 1, false), 0) == SUBQ_COALESCED);
	ST_CHECK_EQ_U64(release_above(q, 103, got, 8), 1);
	ST_CHECK_EQ_U64(got[0], 105);
	subq_free(q);
	/* S1, an item, then S2: S2 is held on its own, after the item. */
	q = subq_new(&clk.clock, &ctr, true, NULL);
	ST_CHECK(push(q, item(100, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(102, 2, true), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(105, 1, false), 0) == SUBQ_QUEUED);
	ST_CHECK(push(q, item(106, 1, false), 0) == SUBQ_COALESCED); /* at the tail again */
	ST_CHECK_EQ_U64(subq_count(q), 3);
	ST_CHECK_EQ_U64(release_above(q, 103, got, 8), 1);
	ST_CHECK_EQ_U64(got[0], 106);
	subq_free(q);
}

int
main(void)
{
	ST_RUN(t_coalesce_keeps_first_position);
	ST_RUN(t_data_never_coalesced);
	ST_RUN(t_coalesce_takes_newer_id_at_tail);
	ST_RUN(t_hold_seam_keeps_newer_signal);
	ST_RUN(t_overflow_by_count);
	ST_RUN(t_overflow_small);
	ST_RUN(t_overflow_by_bytes);
	ST_RUN(t_third_overflow_within_60s_drops);
	ST_RUN(t_three_overflows_over_60001ms_do_not_drop);
	ST_RUN(t_blocked);
	ST_RUN(t_hold_mode);
	ST_RUN(t_hold_newest_seq);
	ST_RUN(t_terminal_always_accepted);
	ST_RUN(t_null_counters_and_free);
	ST_RUN(t_index_model);
	st_metrics_free(reg);
	return st_test_done();
}
