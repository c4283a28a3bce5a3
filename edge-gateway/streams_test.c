/*
 * streams_test: the registry of an edge's streams (streams.c) through
 * streams.h, on a real loop with a real st_http server and client sockets
 * on 127.0.0.1; the streams in it are real (stream.c).  No database: live
 * streams never ask one (the pool points at a port nothing listens on).
 *
 * The rules (docs/edge.md): admission answers before a stream exists
 * (400 for a bad query; the retryable refusals draining, not_ready and
 * overloaded as 200 + reconnect to SSE and 503/429 with Retry-After to the
 * other formats); the registry links every stream it admits and unlinks it
 * at its end (the count and studio_streams_open follow); a batch reaches
 * every stream on its topics in seq order; drain tells every stream to
 * reconnect with hints spread over the grace and calls done once, when the
 * last stream is gone.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_test_items.h"
#include "pgpool.h"
#include "st_http.h"
#include "st_metrics.h"
#include "st_test.h"
#include "st_test_http.h"
#include "st_test_loop.h"
#include "st_util.h"
#include "streams.h"

#define WAIT_MS 10000
#define GET_SSE "GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\n\r\n"

typedef struct fx {
	struct event_base *base;
	struct event *tick;
	http_server *http;
	int port;
	pgpool *pool;
	st_metrics *m;
	streams_metrics *sm;
	streams *ss;
	bool ready, draining; /* what the edge tells streams_handle */
	int drained;          /* drain's done calls */
} fx;

static void
on_http(http_req *req, void *arg)
{
	fx *x = arg;

	streams_handle(x->ss, req, x->ready, x->draining);
}

static void
fx_init(fx *x, uint32_t max_streams, uint32_t grace_ms)
{
	http_server_config hc = { 0 };
	streams_config sc = {
		.replay_cap = 1000, .heartbeat_ms = 15000, .max_streams = max_streams, .drain_grace_ms = grace_ms
	};

	memset(x, 0, sizeof(*x));
	x->base = event_base_new();
	x->tick = st_test_loop_tick(x->base);
	ST_CHECK(http_server_new(x->base, "127.0.0.1:0", &hc, on_http, x, &x->http) == ST_OK);
	x->port = http_server_port(x->http);
	ST_CHECK(pgpool_new(x->base, "host=127.0.0.1 port=1 connect_timeout=1", 1, &x->pool) == ST_OK);
	x->m = st_metrics_new();
	x->sm = streams_metrics_new(x->m);
	x->ss = streams_new(x->base, x->pool, x->sm, st_clock_system(), &sc);
	x->ready = true;
}

static void
fx_fini(fx *x)
{
	http_server_free(x->http);
	streams_free(x->ss);
	streams_metrics_free(x->sm);
	pgpool_free(x->pool);
	event_free(x->tick);
	event_base_free(x->base);
	st_metrics_free(x->m);
}

static void
publish(fx *x, uint64_t from, uint64_t to, const char *topic, size_t data_len)
{
	frame *fs[64];

	for (uint64_t s = from; s <= to; s += 64) {
		size_t n = edge_test_items(fs, 64, s, ST_MIN(s + 63, to), topic, data_len);

		streams_publish(x->ss, fs, n, s + n - 1);
		edge_test_items_unref(fs, n);
	}
}

typedef struct count_want {
	fx *x;
	size_t n;
} count_want;

static bool
count_is(void *arg)
{
	count_want *w = arg;

	return streams_count(w->x->ss) == w->n;
}

static bool
wait_count(fx *x, size_t n)
{
	count_want w = { x, n };
	bool ok = st_test_loop_until(x->base, count_is, &w, WAIT_MS);

	if (!ok)
		fprintf(stderr, "  waited for %zu streams, have %zu\n", n, streams_count(x->ss));
	return ok;
}

/* ---- the cases ---------------------------------------------------------- */

/*
 * Admission, one row per answer: what the edge says (ready, draining,
 * head known), what the registry holds (max_streams with one open), the
 * request, and the answer's first line and a piece of its body.
 */
static void
t_admission(void)
{
	static const struct {
		const char *name;
		bool ready, draining, head, one_open;
		uint32_t max_streams;
		const char *accept, *query, *status, *body;
		size_t open_after; /* streams in the registry after the answer */
	} rows[] = {
		{ "admitted", true, false, true, false, 0, "text/event-stream", "topic=a", "HTTP/1.1 200", "id: 7\n\n",
		  1 },
		{ "no topic", true, false, true, false, 0, "text/event-stream", "x=1", "HTTP/1.1 400", "topic", 0 },
		{ "not ready (sse)", false, false, true, false, 0, "text/event-stream", "topic=a", "HTTP/1.1 200",
		  "\"reason\":\"not_ready\"", 0 },
		{ "no head yet (ndjson)", true, false, false, false, 0, "application/x-ndjson", "topic=a",
		  "HTTP/1.1 503", "Retry-After: ", 0 },
		{ "draining (sse)", true, true, true, false, 0, "text/event-stream", "topic=a", "HTTP/1.1 200",
		  "\"reason\":\"draining\"", 0 },
		{ "draining (ndjson)", true, true, true, false, 0, "application/x-ndjson", "topic=a", "HTTP/1.1 503",
		  "draining", 0 },
		{ "full (sse)", true, false, true, true, 1, "text/event-stream", "topic=a", "HTTP/1.1 200",
		  "\"reason\":\"overloaded\"", 1 },
		{ "full (ndjson)", true, false, true, true, 1, "application/x-ndjson", "topic=a", "HTTP/1.1 429",
		  "Retry-After: ", 1 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(rows); i++) {
		fx x;
		st_test_http first, c;
		char req[256];

		fprintf(stderr, "  row: %s\n", rows[i].name);
		fx_init(&x, rows[i].max_streams, 1000);
		if (rows[i].head)
			streams_set_head(x.ss, 7);
		if (rows[i].one_open) {
			ST_CHECK(st_test_http_open(&first, x.port, GET_SSE, 0));
			ST_CHECK(st_test_http_wait(x.base, &first, "id: 7\n\n", 1, WAIT_MS));
		}
		x.ready = rows[i].ready;
		x.draining = rows[i].draining;
		snprintf(req, sizeof(req), "GET /v1/stream?%s HTTP/1.1\r\nHost: t\r\nAccept: %s\r\n\r\n", rows[i].query,
			 rows[i].accept);
		ST_CHECK(st_test_http_open(&c, x.port, req, 0));
		ST_CHECK(st_test_http_wait(x.base, &c, rows[i].status, 1, WAIT_MS));
		ST_CHECK(st_test_http_wait(x.base, &c, rows[i].body, 1, WAIT_MS));
		st_test_loop_for(x.base, 20);
		ST_CHECK_EQ_U64(streams_count(x.ss), rows[i].open_after);
		ST_CHECK_EQ_U64(streams_metrics_open(x.sm), rows[i].open_after);
		st_test_http_free(&c);
		if (rows[i].one_open)
			st_test_http_free(&first);
		fx_fini(&x);
	}
}

/*
 * Link and unlink: three streams on two topics are counted; a batch
 * reaches each stream on its topics once, in seq order; a client that goes
 * leaves the registry (count and gauge follow) and the others go on.
 */
static void
t_registry_and_publish(void)
{
	fx x;
	st_test_http c[3];
	static const char *const reqs[3] = {
		"GET /v1/stream?topic=a HTTP/1.1\r\nHost: t\r\n\r\n",
		"GET /v1/stream?topic=b HTTP/1.1\r\nHost: t\r\n\r\n",
		"GET /v1/stream?topic=a&topic=b HTTP/1.1\r\nHost: t\r\n\r\n",
	};

	fx_init(&x, 0, 1000);
	ST_CHECK(!streams_ready(x.ss));
	streams_set_head(x.ss, 100);
	ST_CHECK(streams_ready(x.ss));
	for (int i = 0; i < 3; i++) {
		ST_CHECK(st_test_http_open(&c[i], x.port, reqs[i], 0));
		ST_CHECK(st_test_http_wait(x.base, &c[i], "id: 100\n\n", 1, WAIT_MS));
	}
	ST_CHECK_EQ_U64(streams_count(x.ss), 3);
	ST_CHECK_EQ_U64(streams_metrics_open(x.sm), 3);
	publish(&x, 101, 150, "a", 10);
	publish(&x, 151, 200, "b", 10);
	ST_CHECK(st_test_http_wait(x.base, &c[0], "id: 150\n", 1, WAIT_MS));
	ST_CHECK(st_test_http_wait(x.base, &c[1], "id: 200\n", 1, WAIT_MS));
	ST_CHECK(st_test_http_wait(x.base, &c[2], "id: 200\n", 1, WAIT_MS));
	ST_CHECK_EQ_U64(st_test_http_count(&c[0], "\nid: "), 51); /* position + 50 items of a */
	ST_CHECK_EQ_U64(st_test_http_count(&c[0], "\"topic\":\"b\""), 0);
	ST_CHECK_EQ_U64(st_test_http_count(&c[1], "\"topic\":\"a\""), 0);
	ST_CHECK_EQ_U64(st_test_http_count(&c[2], "\"type\":\"item\""), 100);
	{
		uint64_t last = 99; /* the position, 100, comes first */
		bool ordered = true;

		for (const char *p = strstr(c[2].buf, "\nid: "); p != NULL; p = strstr(p + 1, "\nid: ")) {
			uint64_t id = strtoull(p + 5, NULL, 10);

			if (id != last + 1) {
				fprintf(stderr, "  id %" PRIu64 " after %" PRIu64 "\n", id, last);
				ordered = false;
			}
			last = id;
		}
		ST_CHECK(ordered);
		ST_CHECK_EQ_U64(last, 200);
	}
	st_test_http_close(&c[1]);
	ST_CHECK(wait_count(&x, 2));
	ST_CHECK_EQ_U64(streams_metrics_open(x.sm), 2);
	publish(&x, 201, 201, "a", 10);
	ST_CHECK(st_test_http_wait(x.base, &c[0], "id: 201\n", 1, WAIT_MS));
	ST_CHECK(st_test_http_wait(x.base, &c[2], "id: 201\n", 1, WAIT_MS));
	for (int i = 0; i < 3; i++)
		st_test_http_free(&c[i]);
	fx_fini(&x);
}

static void
drained(void *arg)
{
	((fx *)arg)->drained++;
}

/*
 * Drain: every stream gets reconnect draining, the hints spread over the
 * grace ((2i + 1) * grace / 2n: 500, 1500, 2500 of 3000 for three), done
 * is called once, after the last stream left; a new request is refused
 * draining; a second drain does nothing.
 */
static void
t_drain(void)
{
	fx x;
	st_test_http c[3], late;
	bool hint[3] = { false, false, false };
	static const char *const hints[3] = { "retry: 500\n", "retry: 1500\n", "retry: 2500\n" };

	fx_init(&x, 0, 3000);
	streams_set_head(x.ss, 1);
	for (int i = 0; i < 3; i++) {
		ST_CHECK(st_test_http_open(&c[i], x.port, GET_SSE, 0));
		ST_CHECK(st_test_http_wait(x.base, &c[i], "id: 1\n\n", 1, WAIT_MS));
	}
	streams_drain(x.ss, drained, &x);
	streams_drain(x.ss, drained, &x);
	ST_CHECK(streams_draining(x.ss));
	for (int i = 0; i < 3; i++) {
		ST_CHECK(st_test_http_wait(x.base, &c[i], "\"reason\":\"draining\"", 1, WAIT_MS));
		ST_CHECK(st_test_loop_until(x.base, st_test_http_eof, &c[i], WAIT_MS));
		for (int h = 0; h < 3; h++)
			if (strstr(c[i].buf, hints[h]) != NULL)
				hint[h] = true;
	}
	for (int h = 0; h < 3; h++) {
		if (!hint[h])
			fprintf(stderr, "  no stream got the hint %s", hints[h]);
		ST_CHECK(hint[h]);
	}
	ST_CHECK(wait_count(&x, 0));
	st_test_loop_for(x.base, 20);
	ST_CHECK_EQ_U64(x.drained, 1);
	ST_CHECK(st_test_http_open(&late, x.port, GET_SSE, 0));
	ST_CHECK(st_test_http_wait(x.base, &late, "\"reason\":\"draining\"", 1, WAIT_MS));
	st_test_loop_for(x.base, 20);
	ST_CHECK_EQ_U64(streams_count(x.ss), 0);
	ST_CHECK_EQ_U64(x.drained, 1);
	for (int i = 0; i < 3; i++)
		st_test_http_free(&c[i]);
	st_test_http_free(&late);
	fx_fini(&x);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	ST_RUN(t_admission);
	ST_RUN(t_registry_and_publish);
	ST_RUN(t_drain);
	return st_test_done();
}
