/* flow_test: the intake's pause budget on a fake clock (flow.h). */
#include "flow.h"

#include <stdio.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"

static st_clock_fake clk;

/* The bound of flow.h for an interval of t ms, with decisions every step ms. */
static uint64_t
bound(uint64_t t, uint64_t step)
{
	return FLOW_BURST_MS + t / FLOW_SHARE + step;
}

/*
 * Runs ms [0, n) deciding every step ms with want(ms); paused[ms] is the
 * state in force during that ms.  Returns the ms paused.
 */
static uint64_t
run(flow_budget *b, bool *paused, size_t n, uint64_t step, bool (*want)(uint64_t ms))
{
	uint64_t total = 0;
	bool p = false;

	for (size_t ms = 0; ms < n; ms++) {
		if (ms % step == 0)
			p = flow_budget_decide(b, want(ms), false);
		paused[ms] = p;
		total += p;
		clk.now++;
	}
	return total;
}

/* The most paused ms in any window of t ms (a sliding sum). */
static uint64_t
max_window(const bool *paused, size_t n, size_t t)
{
	uint64_t sum = 0, best = 0;

	for (size_t i = 0; i < n; i++) {
		sum += paused[i];
		if (i >= t)
			sum -= paused[i - t];
		if (sum > best)
			best = sum;
	}
	return best;
}

static bool
always(uint64_t ms)
{
	(void)ms;
	return true;
}

/*
 * 60 streams, each allowed by its own rule to hold the intake 1 s in every
 * 60 s, staggered by 1 s: together they ask for a pause all the time (the
 * old rule paused for all of it).
 */
static bool
staggered(uint64_t ms)
{
	uint64_t t = ms % 60000;

	for (unsigned i = 0; i < 60; i++)
		if (t >= i * 1000u && t < i * 1000u + 1000u)
			return true;
	return false;
}

#define RUN_MS 120000
static bool paused[RUN_MS];

static void
t_continuous_ask_is_bounded(void)
{
	flow_budget *b;
	uint64_t total;

	st_clock_fake_init(&clk, 1000000);
	b = flow_budget_new(&clk.clock);
	total = run(b, paused, RUN_MS, 5, always);
	ST_CHECK(flow_budget_paused_ms(b) <= total);
	ST_CHECK(total <= bound(RUN_MS, 5));
	/* It does pause: about the share of the time, minus the start threshold's gaps. */
	ST_CHECK(total >= RUN_MS / FLOW_SHARE);
	for (size_t t = 10; t <= 60000; t *= 10) {
		uint64_t w = max_window(paused, RUN_MS, t);

		if (w > bound(t, 5))
			fprintf(stderr, "  window %zu ms: paused %llu > bound %llu\n", t, (unsigned long long)w,
				(unsigned long long)bound(t, 5));
		ST_CHECK(w <= bound(t, 5));
	}
	/* The first pause lasts while the full bucket lasts: 500 ms at 9/10 net. */
	{
		size_t first = 0;

		while (first < RUN_MS && paused[first])
			first++;
		ST_CHECK(first >= FLOW_BURST_MS && first <= FLOW_BURST_MS * FLOW_SHARE / (FLOW_SHARE - 1) + 5);
	}
	flow_budget_free(b);
}

static void
t_staggered_streams(void)
{
	flow_budget *b;
	uint64_t total, asked = 0;

	for (uint64_t ms = 0; ms < RUN_MS; ms++)
		asked += staggered(ms);
	st_clock_fake_init(&clk, 5);
	b = flow_budget_new(&clk.clock);
	total = run(b, paused, RUN_MS, 5, staggered);
	printf("FIGURE flow_staggered_60 asked_ms=%llu paused_ms=%llu bound_ms=%llu\n", (unsigned long long)asked,
	       (unsigned long long)total, (unsigned long long)bound(RUN_MS, 5));
	ST_CHECK(asked == RUN_MS); /* the old rule: paused the whole time */
	ST_CHECK(total <= bound(RUN_MS, 5));
	ST_CHECK(max_window(paused, RUN_MS, 60000) <= bound(60000, 5));
	flow_budget_free(b);
}

static void
t_start_threshold_and_release(void)
{
	flow_budget *b;

	st_clock_fake_init(&clk, 0);
	b = flow_budget_new(&clk.clock);
	ST_CHECK(flow_budget_left_ms(b) == FLOW_BURST_MS);
	/* not asked: never paused, and an asked pause ends at once when nobody asks */
	ST_CHECK(!flow_budget_decide(b, false, false));
	ST_CHECK(flow_budget_decide(b, true, false));
	clk.now += 100;
	ST_CHECK(!flow_budget_decide(b, false, false));
	ST_CHECK(flow_budget_paused_ms(b) == 100);
	ST_CHECK(flow_budget_left_ms(b) == FLOW_BURST_MS - 100 + 10);
	/* empty it: 600 ms asked in one go overshoots, the debt is owed */
	ST_CHECK(flow_budget_decide(b, true, false));
	clk.now += 600;
	ST_CHECK(!flow_budget_decide(b, true, false));
	ST_CHECK(flow_budget_left_ms(b) < 0);
	/* a new pause needs FLOW_MIN_MS in the bucket: the debt, then 10 x FLOW_MIN_MS of time */
	{
		uint64_t waited = 0;

		while (!flow_budget_decide(b, true, false)) {
			clk.now += 1;
			waited++;
			ST_ASSERT(waited < 100000);
		}
		ST_CHECK(waited >= FLOW_MIN_MS * FLOW_SHARE);
		ST_CHECK(flow_budget_left_ms(b) >= FLOW_MIN_MS);
	}
	flow_budget_free(b);
}

static void
t_forced_pause_not_charged(void)
{
	flow_budget *b;
	int64_t left;

	st_clock_fake_init(&clk, 0);
	b = flow_budget_new(&clk.clock);
	/* spend it */
	ST_CHECK(flow_budget_decide(b, true, false));
	clk.now += 1000;
	ST_CHECK(!flow_budget_decide(b, true, false));
	left = flow_budget_left_ms(b);
	/* a full mailbox holds the intake whatever the budget */
	ST_CHECK(flow_budget_decide(b, true, true));
	clk.now += 2000;
	ST_CHECK(flow_budget_decide(b, false, true));
	ST_CHECK(flow_budget_paused_ms(b) == 3000);
	/* ... and was not charged: the level only refilled */
	ST_CHECK(!flow_budget_decide(b, false, false));
	ST_CHECK(flow_budget_left_ms(b) == ST_MIN(left + 200, (int64_t)FLOW_BURST_MS));
	flow_budget_free(b);
}

/* One stream's thresholds: behind at a burst (frames or bytes), holding until caught up or stalled. */
static void
t_stream_thresholds(void)
{
	static const struct {
		size_t frames, bytes;
		uint64_t quiet_ms;
		bool behind, holds;
	} cases[] = {
		{ 0, 0, 0, false, false },
		{ FLOW_BEHIND_FRAMES - 1, FLOW_BEHIND_BYTES - 1, 0, false, true },
		{ FLOW_BEHIND_FRAMES, 0, 0, true, true },
		{ 3, FLOW_BEHIND_BYTES, 0, true, true }, /* five frames of large events: behind in bytes */
		{ FLOW_BEHIND_FRAMES, FLOW_BEHIND_BYTES, FLOW_STALL_MS, true, true },
		{ FLOW_BEHIND_FRAMES, FLOW_BEHIND_BYTES, FLOW_STALL_MS + 1, true, false }, /* stalled: not honoured */
		{ FLOW_CAUGHT_UP_FRAMES, 0, 0, false, true },
		{ 0, FLOW_CAUGHT_UP_BYTES, 0, false, true },
		{ FLOW_CAUGHT_UP_FRAMES - 1, FLOW_CAUGHT_UP_BYTES - 1, 0, false, false }, /* caught up */
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		bool behind = flow_stream_behind(cases[i].frames, cases[i].bytes);
		bool holds = flow_stream_holds(cases[i].frames, cases[i].bytes, cases[i].quiet_ms);

		if (behind != cases[i].behind || holds != cases[i].holds)
			fprintf(stderr, "  case %zu (%zu frames %zu B, quiet %llu): behind %d holds %d, want %d %d\n",
				i, cases[i].frames, cases[i].bytes, (unsigned long long)cases[i].quiet_ms, behind,
				holds, cases[i].behind, cases[i].holds);
		ST_CHECK(behind == cases[i].behind);
		ST_CHECK(holds == cases[i].holds);
	}
}

/* One stream holds at most FLOW_HONOUR_MS in a window of FLOW_HONOUR_WINDOW_MS, in one go or in pieces. */
static void
t_honour_share(void)
{
	flow_honour h = { 0 };
	uint64_t now = 100000;

	ST_CHECK(!flow_honour_leave(&h, now)); /* not holding: nothing to charge */
	ST_CHECK(flow_honour_join(&h, now));
	ST_CHECK(h.holding);
	ST_CHECK(!flow_honour_spent(&h, now + FLOW_HONOUR_MS - 1));
	ST_CHECK(flow_honour_spent(&h, now + FLOW_HONOUR_MS));
	/* in pieces: 400 + 400, then 200 left of the window */
	ST_CHECK(flow_honour_leave(&h, now + 400));
	ST_CHECK(!h.holding);
	ST_CHECK_EQ_U64(h.used, 400);
	ST_CHECK(flow_honour_join(&h, now + 1000));
	ST_CHECK(flow_honour_leave(&h, now + 1400));
	ST_CHECK(flow_honour_join(&h, now + 2000));
	ST_CHECK(!flow_honour_spent(&h, now + 2199));
	ST_CHECK(flow_honour_spent(&h, now + 2200));
	ST_CHECK(flow_honour_leave(&h, now + 2200));
	ST_CHECK_EQ_U64(h.used, FLOW_HONOUR_MS);
	/* the share is spent until the window ends */
	ST_CHECK(!flow_honour_join(&h, now + 3000));
	ST_CHECK(!h.holding);
	ST_CHECK(!flow_honour_join(&h, now + FLOW_HONOUR_WINDOW_MS));
	/* a new window: a full share again */
	ST_CHECK(flow_honour_join(&h, now + FLOW_HONOUR_WINDOW_MS + 1));
	ST_CHECK_EQ_U64(h.used, 0);
	ST_CHECK(!flow_honour_spent(&h, now + FLOW_HONOUR_WINDOW_MS + FLOW_HONOUR_MS));
}

/* One worker asks while a stream holds or batches wait; a full mailbox forces; asks OR over workers. */
static void
t_worker_ask(void)
{
	static const struct {
		bool want_in, must_in, behind;
		unsigned inflight;
		bool want, must;
	} cases[] = {
		{ false, false, false, 0, false, false },
		{ false, false, false, FLOW_INFLIGHT_MAX - 1, false, false },
		{ false, false, false, FLOW_INFLIGHT_MAX, true, false },
		{ false, false, true, 0, true, false },
		{ false, false, false, FLOW_MAILBOX_MAX - 1, true, false },
		{ false, false, false, FLOW_MAILBOX_MAX, true, true },
		{ true, false, false, 0, true, false }, /* an earlier worker asked */
		{ true, true, false, 0, true, true },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		bool want = cases[i].want_in, must = cases[i].must_in;

		flow_worker_ask(cases[i].behind, cases[i].inflight, &want, &must);
		if (want != cases[i].want || must != cases[i].must)
			fprintf(stderr, "  case %zu: want %d must %d, expected %d %d\n", i, want, must, cases[i].want,
				cases[i].must);
		ST_CHECK(want == cases[i].want);
		ST_CHECK(must == cases[i].must);
	}
}

int
main(void)
{
	ST_RUN(t_continuous_ask_is_bounded);
	ST_RUN(t_staggered_streams);
	ST_RUN(t_start_threshold_and_release);
	ST_RUN(t_forced_pause_not_charged);
	ST_RUN(t_stream_thresholds);
	ST_RUN(t_honour_share);
	ST_RUN(t_worker_ask);
	return st_test_done();
}
