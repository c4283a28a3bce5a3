/*
 * stream_test: one stream's state machine (stream.c) through its API, on a
 * real loop with a real st_http server and client sockets on 127.0.0.1.
 * The registry is this test: it hands each stream the hooks of
 * stream_registry (stream.h: link, unlink, behind check, head, the env), so
 * what a stream asks of its registry is counted here.  No database: a
 * stream opened live-only never asks one, and a resume's check waits on a
 * pool whose server is not there (a real pgpool, connecting in vain).
 *
 * The rules (docs/edge.md, ADR-WEB-ADV-001, ADR-0197): a live stream's
 * first frame is its position (the head when it joined), then items in seq
 * order; a repeated or regressing id never reaches the socket; every end is
 * one outcome (reconnect once the envelope left, abrupt_close when the
 * client went), none before the response started; a client that reads
 * nothing overflows its queue into one resync, and the third overflow in a
 * minute drops it with reconnect.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_test_items.h"
#include "frame.h"
#include "frame_run.h"
#include "hub.h"
#include "pgpool.h"
#include "refusal.h"
#include "st_http.h"
#include "st_metrics.h"
#include "st_test.h"
#include "st_test_http.h"
#include "st_test_loop.h"
#include "st_util.h"
#include "stream.h"
#include "streamreq.h"

#define WAIT_MS 10000

typedef struct fx {
	struct event_base *base;
	struct event *tick;
	http_server *http;
	int port;
	pgpool *pool;
	st_metrics *m;
	stream_env env;
	refusals refs;
	st_counter *refc[REFUSAL_COUNT];
	uint64_t head;
	stream_reg *linked[16]; /* the streams linked and not yet unlinked */
	size_t n_linked, n_unlinked, n_behind;
} fx;

static uint64_t
reg_head(void *arg)
{
	return ((fx *)arg)->head;
}

static void
reg_link(void *arg, stream_reg *r)
{
	fx *x = arg;

	ST_CHECK(x->n_linked < 16);
	x->linked[x->n_linked++] = r;
}

static void
reg_unlink(void *arg, stream_reg *r)
{
	fx *x = arg;

	for (size_t i = 0; i < x->n_linked; i++)
		if (x->linked[i] == r)
			x->linked[i] = NULL;
	x->n_unlinked++;
}

static void
reg_behind_check(void *arg, stream_reg *r)
{
	(void)r;
	((fx *)arg)->n_behind++;
}

/* The registry's admission in its smallest form: the query parsed, the stream opened. */
static void
on_http(http_req *req, void *arg)
{
	fx *x = arg;
	streamreq rq = { 0 };
	streamreq_problem why;

	if (streamreq_parse(http_req_query(req), http_req_header(req, "Accept"), http_req_header(req, "Last-Event-ID"),
			    false, &rq, &why) != ST_OK)
		http_reply_problem(req, why.status, NULL, why.title, why.detail, NULL);
	else
		stream_open(&x->env, req, &rq, 0, 0, NULL);
	streamreq_fini(&rq);
}

static void
fx_init(fx *x)
{
	http_server_config hc = { 0 };
	char name[32];

	memset(x, 0, sizeof(*x));
	x->base = event_base_new();
	x->tick = st_test_loop_tick(x->base);
	ST_CHECK(http_server_new(x->base, "127.0.0.1:0", &hc, on_http, x, &x->http) == ST_OK);
	x->port = http_server_port(x->http);
	/* Nothing listens on port 1: the pool connects in vain, a check waits. */
	ST_CHECK(pgpool_new(x->base, "host=127.0.0.1 port=1 connect_timeout=1", 1, &x->pool) == ST_OK);
	x->m = st_metrics_new();
	for (int i = 0; i < REFUSAL_COUNT; i++) {
		snprintf(name, sizeof(name), "r=\"%d\"", i);
		x->refc[i] = st_metrics_counter(x->m, "refused", name, NULL);
	}
	refusal_init(&x->refs, 42, x->refc);
	x->env.registry = (stream_registry){ x, reg_head, reg_link, reg_unlink, reg_behind_check };
	x->env.base = x->base;
	x->env.pool = x->pool;
	x->env.clock = st_clock_system();
	x->env.hub = hub_new(stream_hub_deliver, stream_hub_flush, stream_hub_take);
	x->env.streams = st_slab_new(stream_size());
	x->env.queues = st_slab_new(subq_size());
	x->env.replay_cap = 1000;
	x->env.refusals = &x->refs;
	x->env.dropped.coalesced = st_metrics_counter(x->m, "dropped", "r=\"coalesced\"", NULL);
	x->env.dropped.overflow = st_metrics_counter(x->m, "dropped", "r=\"overflow\"", NULL);
	x->env.dropped.replay = st_metrics_counter(x->m, "dropped", "r=\"replay\"", NULL);
	x->env.dropped.blocked = st_metrics_counter(x->m, "dropped", "r=\"blocked\"", NULL);
	for (int i = 0; i < OUT_COUNT; i++) {
		snprintf(name, sizeof(name), "o=\"%d\"", i);
		x->env.m_outcome[i] = st_metrics_counter(x->m, "outcome", name, NULL);
	}
	for (int i = 0; i < RR_COUNT; i++) {
		snprintf(name, sizeof(name), "r=\"%d\"", i);
		x->env.m_replay[i] = st_metrics_counter(x->m, "replay", name, NULL);
	}
	x->env.m_frames = st_metrics_counter(x->m, "frames", NULL, NULL);
	x->env.m_refused = st_metrics_counter(x->m, "ids_refused", NULL, NULL);
	x->env.m_seam_overlap = st_metrics_counter(x->m, "overlap", NULL, NULL);
	x->env.m_seam_gap = st_metrics_counter(x->m, "gap", NULL, NULL);
	x->env.m_replay_rows = st_metrics_counter(x->m, "rows", NULL, NULL);
}

static void
fx_fini(fx *x)
{
	http_server_free(x->http); /* closes every started stream: each ends through on_close */
	for (size_t i = 0; i < x->n_linked; i++)
		if (x->linked[i] != NULL)
			stream_shutdown(x->linked[i]->s); /* a request still waiting on the check */
	hub_free(x->env.hub);
	st_slab_free(x->env.streams);
	st_slab_free(x->env.queues);
	pgpool_free(x->pool);
	event_free(x->tick);
	event_base_free(x->base);
	st_metrics_free(x->m);
}

/* The stream linked n-th (0-based), still linked. */
static stream *
fx_stream(fx *x, size_t n)
{
	ST_CHECK(n < x->n_linked && x->linked[n] != NULL);
	return n < x->n_linked && x->linked[n] != NULL ? x->linked[n]->s : NULL;
}

/* Runs the loop until c received needle (count times); prints what it got when it did not. */
static bool
wait_for(fx *x, st_test_http *c, const char *needle, size_t count)
{
	return st_test_http_wait(x->base, c, needle, count, WAIT_MS);
}

static bool
unlinked_cond(void *arg)
{
	fx *x = arg;

	return x->n_unlinked >= x->n_linked && x->n_linked > 0;
}

static bool
linked_cond(void *arg)
{
	return ((fx *)arg)->n_linked > 0;
}

/* Items from..to on topic, in hub batches of 64, the head following. */
static void
publish_items(fx *x, uint64_t from, uint64_t to, const char *topic, size_t data_len)
{
	frame *fs[64];

	for (uint64_t s = from; s <= to; s += 64) {
		size_t n = edge_test_items(fs, 64, s, ST_MIN(s + 63, to), topic, data_len);

		x->head = s + n - 1;
		hub_publish(x->env.hub, fs, n);
		edge_test_items_unref(fs, n);
	}
}

static uint64_t
outcome(fx *x, enum stream_outcome o)
{
	return st_counter_get(x->env.m_outcome[o]);
}

/* ---- the cases ---------------------------------------------------------- */

/*
 * Live-only, in each format: the position (the head at join) first, then
 * items in seq order; a repeated or regressing id is refused (counted, not
 * written); a later item still goes out.
 */
static void
t_live_position_then_items(void)
{
	static const struct {
		const char *accept, *position, *item6, *item7, *item8, *item9;
	} rows[] = {
		{ "text/event-stream", "id: 5\n\n", "id: 6\n", "id: 7\n", "id: 8\n", "id: 9\n" },
		{ "application/x-ndjson", "{\"type\":\"heartbeat\",\"id\":\"5\"}\n", "\"id\":\"6\"", "\"id\":\"7\"",
		  "\"id\":\"8\"", "\"id\":\"9\"" },
		{ "application/json-seq", "\"heartbeat\",\"id\":\"5\"}", "\"id\":\"6\"", "\"id\":\"7\"", "\"id\":\"8\"",
		  "\"id\":\"9\"" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(rows); i++) {
		fx x;
		st_test_http c;
		char req[256];
		const char *p6, *p7, *p8;

		fx_init(&x);
		x.head = 5;
		snprintf(req, sizeof(req), "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\nAccept: %s\r\n\r\n",
			 rows[i].accept);
		ST_CHECK(st_test_http_open(&c, x.port, req, 0));
		ST_CHECK(wait_for(&x, &c, rows[i].position, 1));
		ST_CHECK_EQ_U64(x.n_linked, 1);
		publish_items(&x, 6, 8, "a", 4);
		ST_CHECK(wait_for(&x, &c, rows[i].item8, 1));
		p6 = strstr(c.buf, rows[i].item6);
		p7 = strstr(c.buf, rows[i].item7);
		p8 = strstr(c.buf, rows[i].item8);
		ST_CHECK(p6 != NULL && p7 != NULL && p8 != NULL && strstr(c.buf, rows[i].position) < p6 && p6 < p7 &&
			 p7 < p8);
		/* 7 again and 4: the last step refuses both; 9 goes out. */
		x.head = 8;
		{
			frame *again[2] = { frame_item_new(7, "a", 1, NULL, 0, "1", 1),
					    frame_item_new(4, "a", 1, NULL, 0, "1", 1) };

			hub_publish(x.env.hub, again, 2);
			frame_unref(again[0]);
			frame_unref(again[1]);
		}
		publish_items(&x, 9, 9, "a", 4);
		ST_CHECK(wait_for(&x, &c, rows[i].item9, 1));
		ST_CHECK_EQ_U64(st_counter_get(x.env.m_refused), 2);
		ST_CHECK_EQ_U64(st_test_http_count(&c, rows[i].item7), 1);
		/* An item on another topic is not this stream's. */
		ST_CHECK_EQ_U64(st_test_http_count(&c, "\"topic\":\"b\""), 0);
		ST_CHECK_EQ_U64(st_counter_get(x.env.m_frames), 5); /* position, 6, 7, 8, 9 */
		st_test_http_free(&c);
		fx_fini(&x);
	}
}

/*
 * Every end is one outcome, counted once, and the stream leaves its
 * registry: reconnect once the envelope left (LIVE -> CLOSING -> ENDING),
 * abrupt_close when the client goes first.
 */
static void
t_outcomes(void)
{
	static const struct {
		const char *name;
		bool client_closes; /* else stream_reconnect */
		enum stream_outcome want;
	} rows[] = {
		{ "drain: reconnect", false, OUT_RECONNECT },
		{ "client gone: abrupt_close", true, OUT_ABRUPT },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(rows); i++) {
		fx x;
		st_test_http c;

		fx_init(&x);
		x.head = 10;
		ST_CHECK(st_test_http_open(&c, x.port, "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\n\r\n", 0));
		ST_CHECK(wait_for(&x, &c, "id: 10\n\n", 1));
		if (rows[i].client_closes) {
			st_test_http_close(&c);
		} else {
			stream_reconnect(fx_stream(&x, 0), 750, "draining");
			ST_CHECK(wait_for(&x, &c, "event: reconnect\nretry: 750\n", 1));
			ST_CHECK(wait_for(&x, &c, "\"reason\":\"draining\"", 1));
			ST_CHECK(st_test_loop_until(x.base, st_test_http_eof, &c, WAIT_MS));
		}
		ST_CHECK(st_test_loop_until(x.base, unlinked_cond, &x, WAIT_MS));
		ST_CHECK_EQ_U64(x.n_unlinked, 1);
		for (int o = 0; o < OUT_COUNT; o++) {
			if (outcome(&x, (enum stream_outcome)o) != (o == (int)rows[i].want)) {
				fprintf(stderr, "  %s: outcome %d counted %" PRIu64 "\n", rows[i].name, o,
					outcome(&x, (enum stream_outcome)o));
				ST_CHECK(false);
			}
		}
		st_test_http_free(&c);
		fx_fini(&x);
	}
}

/*
 * A live stream's heartbeat goes out in its format, only at a visit that
 * finds it silent since the last one (the registry visits twice per
 * interval: an idle stream gets one per interval, a busy one none); a
 * drain after it still ends the stream once.
 */
static void
t_heartbeat(void)
{
	fx x;
	st_test_http c;
	frame *hb = frame_heartbeat_new();
	const char *beat = "{\"type\":\"heartbeat\"}\n";
	uint64_t now = st_clock_now(st_clock_system());

	fx_init(&x);
	x.head = 3;
	ST_CHECK(st_test_http_open(
		&c, x.port, "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\nAccept: application/x-ndjson\r\n\r\n", 0));
	ST_CHECK(wait_for(&x, &c, "{\"type\":\"heartbeat\",\"id\":\"3\"}\n", 1));
	stream_heartbeat(fx_stream(&x, 0), hb, now); /* wrote its position since: skipped */
	stream_heartbeat(fx_stream(&x, 0), hb, now); /* silent since the last visit: one heartbeat */
	stream_heartbeat(fx_stream(&x, 0), hb, now); /* the heartbeat was a write: skipped */
	publish_items(&x, 4, 4, "a", 0);
	/* Bytes arrive in the order written: with item 4 here, every heartbeat written before it is too. */
	ST_CHECK(wait_for(&x, &c, "\"id\":\"4\"", 1));
	ST_CHECK_EQ_U64(st_test_http_count(&c, beat), 1);
	stream_heartbeat(fx_stream(&x, 0), hb, now); /* item 4 since the last visit: skipped */
	stream_heartbeat(fx_stream(&x, 0), hb, now);
	ST_CHECK(wait_for(&x, &c, beat, 2));
	stream_reconnect(fx_stream(&x, 0), 100, "draining");
	ST_CHECK(st_test_loop_until(x.base, unlinked_cond, &x, WAIT_MS));
	ST_CHECK_EQ_U64(outcome(&x, OUT_RECONNECT), 1);
	frame_unref(hb);
	st_test_http_free(&c);
	fx_fini(&x);
}

/*
 * Issue 27: live streams with nothing waiting take a message's frames at
 * once (stream_hub_take).  The first stream batches them and the loop's
 * cache remembers the list; each later one gets one reference to a single
 * copy; a one-frame message is taken by every stream.  Every stream still
 * gets every id once, in order, in its format.
 */
static void
t_take_shared(void)
{
	fx x;
	st_test_http c[3];
	const char *ids[4] = { "\"id\":\"4\"", "\"id\":\"5\"", "\"id\":\"6\"", "\"id\":\"7\"" };
	uint64_t frames0;

	fx_init(&x);
	x.env.runs = frame_run_cache_new();
	x.head = 3;
	for (int i = 0; i < 3; i++) {
		ST_CHECK(st_test_http_open(
			&c[i], x.port,
			"GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\nAccept: application/x-ndjson\r\n\r\n", 0));
		ST_CHECK(wait_for(&x, &c[i], "{\"type\":\"heartbeat\",\"id\":\"3\"}\n", 1));
	}
	frames0 = st_counter_get(x.env.m_frames);
	publish_items(&x, 4, 6, "a", 10); /* one batch of three */
	ST_CHECK_EQ_U64(frame_run_copies(x.env.runs), 1);
	ST_CHECK_EQ_U64(frame_run_takes(x.env.runs), 2);
	publish_items(&x, 7, 7, "a", 10);
	for (int i = 0; i < 3; i++) {
		ST_CHECK(wait_for(&x, &c[i], ids[3], 1));
		for (int k = 0; k < 4; k++) {
			ST_CHECK_EQ_U64(st_test_http_count(&c[i], ids[k]), 1);
			if (k > 0)
				ST_CHECK(strstr(c[i].buf, ids[k - 1]) < strstr(c[i].buf, ids[k]));
		}
	}
	ST_CHECK_EQ_U64(st_counter_get(x.env.m_frames) - frames0, 12);
	for (int i = 0; i < 3; i++)
		st_test_http_free(&c[i]);
	fx_fini(&x);
	frame_run_cache_free(x.env.runs);
}

/*
 * A resume waits in CHECKING (the database does not answer); a drain then
 * ends it before the first byte: SSE gets 200 and reconnect draining, the
 * other formats a 503 problem with Retry-After; no outcome is counted (the
 * response never started as a stream), and it leaves the registry.
 */
static void
t_checking_drain(void)
{
	static const struct {
		const char *accept, *status, *body;
	} rows[] = {
		{ "text/event-stream", "HTTP/1.1 200", "\"reason\":\"draining\"" },
		{ "application/x-ndjson", "HTTP/1.1 503", "Retry-After: " },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(rows); i++) {
		fx x;
		st_test_http c;
		char req[256];

		fx_init(&x);
		x.head = 20;
		snprintf(req, sizeof(req),
			 "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\nAccept: %s\r\nLast-Event-ID: 12\r\n\r\n",
			 rows[i].accept);
		ST_CHECK(st_test_http_open(&c, x.port, req, 0));
		ST_CHECK(st_test_loop_until(x.base, linked_cond, &x, WAIT_MS));
		st_test_loop_for(x.base, 50);
		st_test_http_read(&c);
		ST_CHECK_EQ_U64(c.len, 0); /* CHECKING: nothing written yet */
		/* A live frame while checking waits in the hold buffer, not on the socket. */
		publish_items(&x, 21, 21, "a", 4);
		stream_reconnect(fx_stream(&x, 0), 900, "draining");
		ST_CHECK(wait_for(&x, &c, rows[i].status, 1));
		ST_CHECK(wait_for(&x, &c, rows[i].body, 1));
		ST_CHECK_EQ_U64(st_test_http_count(&c, "\"id\":\"21\""), 0);
		ST_CHECK_EQ_U64(x.n_unlinked, 1);
		for (int o = 0; o < OUT_COUNT; o++)
			ST_CHECK_EQ_U64(outcome(&x, (enum stream_outcome)o), 0);
		ST_CHECK_EQ_U64(st_counter_get(x.refc[REFUSAL_DRAINING]), 1);
		st_test_http_free(&c);
		fx_fini(&x);
	}
}

/*
 * ADR-0197 on a client that reads nothing (a 4 KiB receive buffer): its
 * queue overflows (emptied into one resync), and the third overflow drops
 * it: the queue then holds only reconnect (slow_consumer), which goes out
 * once the client reads, and it ends with that outcome; every id it got
 * increases.  The registry was asked to look
 * at it for flow control while the burst queued.
 */
static void
t_slow_consumer_dropped(void)
{
	fx x;
	st_test_http c;
	uint64_t last = 0;
	bool increasing = true;

	fx_init(&x);
	x.head = 100;
	ST_CHECK(st_test_http_open(&c, x.port, "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\n\r\n", 4096));
	ST_CHECK(wait_for(&x, &c, "id: 100\n\n", 1));
	/* 8 KiB items, 3,000 of them (24 MB): far past the socket's buffers and 1 MiB three times. */
	for (uint64_t s = 101; s <= 3100 && x.linked[0] != NULL; s += 64) {
		publish_items(&x, s, ST_MIN(s + 63, 3100), "a", 8192);
		event_base_loop(x.base, EVLOOP_NONBLOCK);
	}
	ST_CHECK(st_counter_get(x.env.dropped.overflow) > 0);
	ST_CHECK(x.n_behind > 0);
	/* Now read: the resync, the reconnect, the end. */
	ST_CHECK(wait_for(&x, &c, "\"reason\":\"slow_consumer\"", 1));
	ST_CHECK(st_test_loop_until(x.base, st_test_http_eof, &c, WAIT_MS));
	ST_CHECK(st_test_loop_until(x.base, unlinked_cond, &x, WAIT_MS));
	/* Each overflow emptied the queue, the last one into the reconnect: the resyncs never reached it. */
	ST_CHECK_EQ_U64(st_test_http_count(&c, "event: reconnect"), 1);
	ST_CHECK_EQ_U64(outcome(&x, OUT_RECONNECT), 1);
	for (const char *p = strstr(c.buf, "id: "); p != NULL; p = strstr(p + 1, "\nid: ")) {
		uint64_t id = strtoull(p[0] == '\n' ? p + 5 : p + 4, NULL, 10);

		if (id <= last) {
			fprintf(stderr, "  id %" PRIu64 " after %" PRIu64 "\n", id, last);
			increasing = false;
		}
		last = id;
	}
	ST_CHECK(increasing);
	ST_CHECK(last > 100);
	fprintf(stderr, "  slow client: %zu bytes, last id %" PRIu64 ", overflow drops %" PRIu64 "\n", c.len, last,
		st_counter_get(x.env.dropped.overflow));
	st_test_http_free(&c);
	fx_fini(&x);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	ST_RUN(t_live_position_then_items);
	ST_RUN(t_outcomes);
	ST_RUN(t_heartbeat);
	ST_RUN(t_take_shared);
	ST_RUN(t_checking_drain);
	ST_RUN(t_slow_consumer_dropped);
	return st_test_done();
}
