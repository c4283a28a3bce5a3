/*
 * fanout_test: the hand-over of the ordered history to the loops that
 * serve streams (fanout.c), through fanout.h, with one worker (on the main
 * loop) and with two (threads of their own: also run on build-tsan).
 * Real loops, real st_http servers sharing one port, real streams, client
 * sockets on 127.0.0.1.  The workers' pools point at a port nothing
 * listens on: live streams never ask the database.
 *
 * The rules (docs/edge.md, ADR-0197): a flush of N events reaches every
 * one of M streams once, in seq order, whichever worker took it; a stream
 * that subscribed mid-burst starts at its position (the head its worker
 * had when it joined) and gets every event after it, nothing at or below
 * it; a stream whose client reads nothing is cut by ADR-0197 (reconnect
 * slow_consumer) while the others get everything; drain reaches every
 * worker's streams and on_drained runs once on main.
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_test_items.h"
#include "fanout.h"
#include "st_metrics.h"
#include "st_test.h"
#include "st_test_http.h"
#include "st_test_loop.h"
#include "st_test_metric.h"
#include "st_util.h"

#define WAIT_MS 20000
#define GET_SSE "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\n\r\n"
#define CLIENTS 4

typedef struct fx {
	struct event_base *base;
	struct event *tick;
	st_metrics *m;
	streams_metrics *sm;
	fanout *f;
	int port;
	int drained; /* on_drained calls (main) */
} fx;

static void
on_http(http_req *req, fanout_worker *w, void *arg)
{
	(void)arg;
	streams_handle(fanout_worker_streams(w), req, true, false);
}

static void
on_drained(void *arg)
{
	((fx *)arg)->drained++;
}

static void
fx_init(fx *x, size_t workers)
{
	/* max_conns given: with several workers it is their shared bound (fanout.h). */
	http_server_config hc = { .max_conns = 1000 };
	streams_config sc = { .replay_cap = 1000, .heartbeat_ms = 15000, .drain_grace_ms = 2000 };
	fanout_config fc = { 0 };
	char why[256] = "";

	memset(x, 0, sizeof(*x));
	x->base = event_base_new();
	x->tick = st_test_loop_tick(x->base);
	x->m = st_metrics_new();
	x->sm = streams_metrics_new(x->m);
	fc.n = workers;
	fc.pg_dsn = "host=127.0.0.1 port=1 connect_timeout=1";
	fc.listen = "127.0.0.1:0";
	fc.http = &hc;
	fc.streams = &sc;
	fc.sm = x->sm;
	fc.on_http = on_http;
	fc.on_drained = on_drained;
	fc.arg = x;
	if (fanout_new(x->base, &fc, &x->f, why, sizeof(why)) != ST_OK)
		fprintf(stderr, "  fanout_new: %s\n", why);
	ST_CHECK(x->f != NULL);
	ST_CHECK(fanout_start(x->f) == ST_OK);
	x->port = x->f ? fanout_port(x->f) : 0;
}

static void
fx_fini(fx *x)
{
	if (x->f) {
		fanout_stop(x->f);
		fanout_free(x->f);
	}
	streams_metrics_free(x->sm);
	event_free(x->tick);
	event_base_free(x->base);
	st_metrics_free(x->m);
}

typedef struct opened {
	st_test_http *c;
	const char *pos; /* what a stream's first frame starts with */
} opened;

static bool
answered(void *arg)
{
	opened *o = arg;

	st_test_http_read(o->c);
	return strstr(o->c->buf, o->pos) != NULL || strstr(o->c->buf, "not_ready") != NULL || o->c->eof;
}

/*
 * Opens a stream on topic a; true once it is live (its position arrived).
 * A worker that has not handled the first head yet answers not_ready: the
 * client then asks again, as a real one does after the hint.
 */
static bool
open_stream(fx *x, st_test_http *c, int rcvbuf)
{
	opened o = { c, "\r\nid: " };

	for (int attempt = 0; attempt < 100; attempt++) {
		if (!st_test_http_open(c, x->port, GET_SSE, rcvbuf))
			return false;
		if (!st_test_loop_until(x->base, answered, &o, WAIT_MS))
			break;
		if (strstr(c->buf, o.pos) != NULL)
			return true;
		if (attempt == 99)
			break;
		st_test_http_free(c);
	}
	fprintf(stderr, "  no stream opened: %.300s\n", c->buf ? c->buf : "(no connection)");
	return false;
}

/* Publishes items from..to (data_len each) in batches of batch, the head following. */
static void
publish(fx *x, uint64_t from, uint64_t to, size_t batch, size_t data_len)
{
	frame *fs[256];

	for (uint64_t s = from; s <= to; s += batch) {
		size_t n = edge_test_items(fs, batch, s, ST_MIN(s + batch - 1, to), "a", data_len);

		fanout_publish(x->f, fs, n, s + n - 1);
		edge_test_items_unref(fs, n);
	}
}

typedef struct all_have {
	st_test_http *c;
	size_t n;
	char needle[32];
} all_have;

static bool
all_have_cond(void *arg)
{
	all_have *a = arg;
	bool all = true;

	for (size_t i = 0; i < a->n; i++) {
		st_test_http_read(&a->c[i]);
		all = all && strstr(a->c[i].buf, a->needle) != NULL;
	}
	return all;
}

/* Runs main's loop until every client of c[0..n) received item id. */
static bool
wait_all(fx *x, st_test_http *c, size_t n, uint64_t id)
{
	all_have a = { c, n, "" };
	bool ok;

	snprintf(a.needle, sizeof(a.needle), "\nid: %" PRIu64 "\n", id);
	ok = st_test_loop_until(x->base, all_have_cond, &a, WAIT_MS);
	for (size_t i = 0; !ok && i < n; i++)
		if (strstr(c[i].buf, a.needle) == NULL)
			fprintf(stderr, "  client %zu has no id %" PRIu64 " (%zu bytes)\n", i, id, c[i].len);
	return ok;
}

/*
 * What c received after its position: every item from the position + 1
 * to last, once, in order (*pos gets the position).  Prints the first
 * difference.
 */
static bool
items_contiguous(const st_test_http *c, uint64_t last, uint64_t *pos)
{
	const char *p = strstr(c->buf, "\r\nid: ");
	uint64_t want;

	if (p == NULL)
		return fprintf(stderr, "  no position\n"), false;
	*pos = strtoull(p + 6, NULL, 10);
	want = *pos + 1;
	for (p = strstr(p + 2, "\nid: "); p != NULL; p = strstr(p + 1, "\nid: ")) {
		uint64_t id = strtoull(p + 5, NULL, 10);

		if (id != want) {
			fprintf(stderr, "  id %" PRIu64 " where %" PRIu64 " was due (position %" PRIu64 ")\n", id, want,
				*pos);
			return false;
		}
		want++;
	}
	if (want != last + 1)
		fprintf(stderr, "  ended at %" PRIu64 ", want %" PRIu64 "\n", want - 1, last);
	return want == last + 1;
}

/* ---- the cases ---------------------------------------------------------- */

/*
 * A flush of 1,000 events in batches of 50 to CLIENTS streams: each gets
 * every event once, in seq order, with one worker and with two (the
 * streams spread over both by the kernel).
 */
static void
t_flush_reaches_every_stream(void)
{
	static const size_t workers[] = { 1, 2 };

	for (size_t r = 0; r < ST_ARRAY_LEN(workers); r++) {
		fx x;
		st_test_http c[CLIENTS];

		fprintf(stderr, "  workers: %zu\n", workers[r]);
		fx_init(&x, workers[r]);
		ST_CHECK_EQ_U64(fanout_workers(x.f), workers[r]);
		fanout_set_head(x.f, 10);
		ST_CHECK(fanout_head_posted(x.f));
		for (int i = 0; i < CLIENTS; i++)
			ST_CHECK(open_stream(&x, &c[i], 0));
		ST_CHECK_EQ_U64(fanout_streams_open(x.f), CLIENTS);
		publish(&x, 11, 1010, 50, 100);
		ST_CHECK(wait_all(&x, c, CLIENTS, 1010));
		for (int i = 0; i < CLIENTS; i++) {
			uint64_t pos = 0;

			ST_CHECK(items_contiguous(&c[i], 1010, &pos));
			ST_CHECK_EQ_U64(pos, 10);
			st_test_http_free(&c[i]);
		}
		fx_fini(&x);
	}
}

/*
 * A stream that subscribes mid-burst (its request sent after 10 of 20
 * batches were posted, the other 10 posted right behind it) starts at its
 * position, the head its worker had when it joined, and gets every event
 * after it and none at or below it; the one there from the start gets
 * everything.
 */
static void
t_subscribe_mid_burst(void)
{
	fx x;
	st_test_http first, late;
	uint64_t pos = 0, late_pos = 0;

	fx_init(&x, 2);
	fanout_set_head(x.f, 0);
	ST_CHECK(open_stream(&x, &first, 0));
	publish(&x, 1, 500, 50, 100);
	/* The late request is sent, and the rest of the burst posted at once behind it. */
	ST_CHECK(st_test_http_open(&late, x.port, GET_SSE, 0));
	publish(&x, 501, 1000, 50, 100);
	ST_CHECK(wait_all(&x, &first, 1, 1000));
	ST_CHECK(wait_all(&x, &late, 1, 1000));
	ST_CHECK(items_contiguous(&first, 1000, &pos));
	ST_CHECK_EQ_U64(pos, 0);
	ST_CHECK(items_contiguous(&late, 1000, &late_pos));
	fprintf(stderr, "  late stream's position: %" PRIu64 "\n", late_pos);
	ST_CHECK(late_pos >= 500 && late_pos <= 1000);
	st_test_http_free(&first);
	st_test_http_free(&late);
	fx_fini(&x);
}

/* Streams ADR-0197 cut for overflowing three times (the metric). */
static uint64_t
cut_slow(fx *x)
{
	double n = st_test_metric(x->m, "studio_sse_cut_total{reason=\"slow_consumer\"}");

	return n > 0 ? (uint64_t)n : 0;
}

/*
 * ADR-0197 across the hand-over: beside two clients that read, one that
 * reads nothing (a 4 KiB window) while 2,400 events of 8 KiB pass is cut
 * (reconnect slow_consumer, its connection closed once it reads); the two
 * get every event, in order, with no resync.  The fast ones are waited for
 * after each batch, so only the slow one falls behind.  Once the edge has
 * cut it (studio_sse_cut_total moved) the slow client reads again: its
 * terminal frame then goes out however long the rest of the batches take
 * (on a loaded machine they took over SUBQ_BLOCKED_MS, and a client that
 * reads nothing that long is closed without its terminal, as it must be).
 */
static void
t_slow_stream_cut(void)
{
	fx x;
	st_test_http fast[2], slow;
	uint64_t cut_at = 0; /* the last event published when the cut was seen */

	fx_init(&x, 2);
	fanout_set_head(x.f, 0);
	for (int i = 0; i < 2; i++)
		ST_CHECK(open_stream(&x, &fast[i], 0));
	ST_CHECK(open_stream(&x, &slow, 4096));
	for (uint64_t s = 1; s <= 2400; s += 50) {
		publish(&x, s, s + 49, 50, 8192);
		ST_CHECK(wait_all(&x, fast, 2, s + 49));
		if (!cut_at && cut_slow(&x) > 0)
			cut_at = s + 49;
		if (cut_at)
			st_test_http_read(&slow);
	}
	fprintf(stderr, "  slow stream cut by event %" PRIu64 "\n", cut_at);
	ST_CHECK(cut_at != 0);
	for (int i = 0; i < 2; i++) {
		uint64_t pos = 0;

		ST_CHECK(items_contiguous(&fast[i], 2400, &pos));
		ST_CHECK_EQ_U64(st_test_http_count(&fast[i], "event: resync"), 0);
		st_test_http_free(&fast[i]);
	}
	ST_CHECK(st_test_http_wait(x.base, &slow, "\"reason\":\"slow_consumer\"", 1, WAIT_MS));
	ST_CHECK(st_test_loop_until(x.base, st_test_http_eof, &slow, WAIT_MS));
	ST_CHECK(strstr(slow.buf, "\nid: 2400\n") == NULL);
	fprintf(stderr, "  slow client: %zu bytes before the cut\n", slow.len);
	st_test_http_free(&slow);
	fx_fini(&x);
}

/* Drain reaches every worker's streams (reconnect draining); on_drained runs once on main, after the last. */
static void
t_drain(void)
{
	fx x;
	st_test_http c[CLIENTS];

	fx_init(&x, 2);
	fanout_set_head(x.f, 5);
	for (int i = 0; i < CLIENTS; i++)
		ST_CHECK(open_stream(&x, &c[i], 0));
	fanout_drain(x.f);
	fanout_drain(x.f);
	for (int i = 0; i < CLIENTS; i++) {
		ST_CHECK(st_test_http_wait(x.base, &c[i], "\"reason\":\"draining\"", 1, WAIT_MS));
		ST_CHECK(st_test_loop_until(x.base, st_test_http_eof, &c[i], WAIT_MS));
	}
	{
		bool done = false;

		for (uint64_t end = st_clock_now(st_clock_system()) + WAIT_MS;
		     !(done = x.drained == 1 && fanout_drained(x.f)) && st_clock_now(st_clock_system()) < end;)
			event_base_loop(x.base, EVLOOP_ONCE);
		ST_CHECK(done);
	}
	ST_CHECK_EQ_U64(x.drained, 1);
	ST_CHECK_EQ_U64(fanout_streams_open(x.f), 0);
	for (int i = 0; i < CLIENTS; i++)
		st_test_http_free(&c[i]);
	fx_fini(&x);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	ST_RUN(t_flush_reaches_every_stream);
	ST_RUN(t_subscribe_mid_burst);
	ST_RUN(t_slow_stream_cut);
	ST_RUN(t_drain);
	return st_test_done();
}
