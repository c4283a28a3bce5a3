/*
 * edge-gateway: subscribes to every writer, keeps the ordered history's
 * head, and serves HTTP streams.
 *
 * DESIGN
 *
 * One libevent loop runs everything: the sub0 socket's receive descriptor,
 * the asynchronous PostgreSQL pool, the HTTP server, the control socket,
 * timers and signals.  Published messages go sub -> sequencer (which makes
 * them one contiguous history, filling gaps from PostgreSQL) -> streams
 * (hub fan-out to per-stream queues).  Nothing on the loop blocks: the only
 * blocking call, getaddrinfo for writer names, runs on sub's resolver
 * thread and comes back through a mailbox.
 *
 * Readiness (/readyz): the pool has a connection, the sequencer knows its
 * head, a writer's tick or batch arrived within three flush intervals, and
 * the edge is not draining.  Liveness (/healthz) is just "the loop answers".
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "pgpool.h"
#include "replay.h"
#include "sequencer.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_control.h"
#include "st_http.h"
#include "st_log.h"
#include "st_metrics.h"
#include "st_util.h"
#include "stream.h"
#include "sub.h"
#include "wire.h"

#define EDGE_POOL_CONNS 4
#define EDGE_TICK_MS 50
#define EDGE_FILL_CHUNK 256 /* a fill is fanned out like one published message */
#define EDGE_HEAD_RETRY_MS 500
#define EDGE_FLOW_MS 5

typedef struct edge {
	struct event_base *base;
	st_metrics *metrics;
	pgpool *pool;
	sequencer *seq;
	sub *sub;
	streams *streams;
	http_server *http;
	st_control *control;
	struct event *ev_tick, *ev_head_retry, *ev_term, *ev_int, *ev_exit, *ev_flow;
	pgpool_query *head_query;
	replay_job *fill_job;
	uint64_t last_msg_ms;      /* monotonic ms of the last batch or tick, 0 = never */
	uint64_t flush_interval_ms;
	uint32_t drain_grace_ms;
	bool exiting;
	st_counter *m_msgs, *m_bad_msgs, *m_gap_fills, *m_filled, *m_dups, *m_fill_errors, *m_held_dropped;
	st_gauge *m_held, *m_head;
	sequencer_stats seen;      /* the sequencer's counters already exported */
} edge;

/* ---- the history ------------------------------------------------------ */

static void edge_flow_check(edge *e);
static void edge_export_stats(edge *e);

static void
on_emit(void *arg, frame *const *frames, size_t n)
{
	edge *e = arg;

	streams_publish(e->streams, frames, n, sequencer_head(e->seq));
}

static void
on_fill_rows(void *arg, st_err err, frame *const *frames, size_t n, uint64_t upto)
{
	edge *e = arg;

	e->fill_job = NULL;
	if (err == ST_OK) {
		st_counter_inc(e->m_gap_fills);
		st_counter_add(e->m_filled, n);
	}
	sequencer_fill_done(e->seq, err, frames, n, upto);
	streams_set_head(e->streams, sequencer_head(e->seq));
}

static st_err
on_fill(void *arg, uint64_t after, uint64_t upto)
{
	edge *e = arg;

	e->fill_job = replay_fill(e->pool, after, upto, EDGE_FILL_CHUNK, on_fill_rows, e);
	return e->fill_job ? ST_OK : ST_EBUSY;
}

static void
on_pub(void *arg, const void *data, size_t len)
{
	edge *e = arg;
	proto_pub *m = NULL;

	if (proto_pub_decode(data, len, &m) != ST_OK) {
		st_counter_inc(e->m_bad_msgs);
		return;
	}
	st_counter_inc(e->m_msgs);
	e->last_msg_ms = st_clock_now(st_clock_system());
	(void)sequencer_push(e->seq, m);
	proto_pub_free(m);
	streams_set_head(e->streams, sequencer_head(e->seq));
	edge_flow_check(e);
}

/*
 * Flow control: while a stream catches up on a burst, published messages
 * wait in nng's queue; re-checked every EDGE_FLOW_MS.
 */
static void
edge_flow_check(edge *e)
{
	struct timeval tv = { 0, EDGE_FLOW_MS * 1000 };
	bool hold = streams_backpressure(e->streams);

	sub_pause(e->sub, hold);
	if (hold && !event_pending(e->ev_flow, EV_TIMEOUT, NULL))
		event_add(e->ev_flow, &tv);
}

static void
flow_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	edge_flow_check(arg);
}

/* The sequencer keeps plain counters; export what moved since the last tick. */
static void
edge_export_stats(edge *e)
{
	sequencer_stats now;

	sequencer_stats_get(e->seq, &now);
	st_counter_add(e->m_dups, now.duplicates - e->seen.duplicates);
	st_counter_add(e->m_fill_errors, now.fill_errors - e->seen.fill_errors);
	st_counter_add(e->m_held_dropped, now.held_dropped - e->seen.held_dropped);
	st_gauge_set(e->m_held, (int64_t)now.held);
	st_gauge_set(e->m_head, (int64_t)sequencer_head(e->seq));
	e->seen = now;
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	edge *e = arg;

	(void)fd;
	(void)what;
	sequencer_on_timer(e->seq);
	edge_export_stats(e);
}

static void head_query_start(edge *e);

static void
on_head(void *arg, st_err err, const PGresult *res)
{
	edge *e = arg;
	struct timeval tv = { 0, EDGE_HEAD_RETRY_MS * 1000 };
	uint64_t head;
	const char *v;

	e->head_query = NULL;
	if (err != ST_OK || PQntuples(res) != 1 || (v = PQgetvalue(res, 0, 0)) == NULL ||
	    st_parse_u64(v, strlen(v), &head) != ST_OK) {
		st_warn("reading the history head failed; retrying");
		event_add(e->ev_head_retry, &tv);
		return;
	}
	st_info("history head is %llu", (unsigned long long)head);
	sequencer_set_head(e->seq, head);
	streams_set_head(e->streams, sequencer_head(e->seq));
}

static void
head_query_start(edge *e)
{
	struct timeval tv = { 0, EDGE_HEAD_RETRY_MS * 1000 };

	e->head_query = pgpool_submit(e->pool, PGPOOL_PRIO_FILL, "SELECT coalesce(max(seq), 0)::text FROM broker_event", 0, NULL,
	                              NULL, NULL, 0, on_head, e);
	if (e->head_query == NULL)
		event_add(e->ev_head_retry, &tv);
}

static void
head_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	head_query_start(arg);
}

/* ---- HTTP ------------------------------------------------------------- */

static bool
edge_ready(edge *e, const char **why)
{
	uint64_t now = st_clock_now(st_clock_system());

	if (streams_draining(e->streams))
		return *why = "draining", false;
	if (!pgpool_ready(e->pool))
		return *why = "no database connection", false;
	if (!streams_ready(e->streams))
		return *why = "history head not known yet", false;
	if (e->last_msg_ms == 0 || now - e->last_msg_ms > 3 * e->flush_interval_ms)
		return *why = "no writer tick or batch within 3 flush intervals", false;
	return *why = "ready", true;
}

static void
http_cb(http_req *req, void *arg)
{
	edge *e = arg;
	const char *path = http_req_path(req), *method = http_req_method(req);
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
	const char *why;

	if (strcmp(path, "/v1/stream") != 0 && strcmp(path, "/healthz") != 0 && strcmp(path, "/readyz") != 0 &&
	    strcmp(path, "/metrics") != 0) {
		http_reply_problem(req, 404, NULL, "Not Found", "no such resource", NULL);
		return;
	}
	if (!get) {
		http_reply_problem(req, 405, NULL, "Method Not Allowed", "use GET", "Allow: GET, HEAD, OPTIONS\r\n");
		return;
	}
	if (strcmp(path, "/v1/stream") == 0) {
		streams_handle(e->streams, req);
	} else if (strcmp(path, "/healthz") == 0) {
		http_reply(req, 200, "text/plain; charset=utf-8", "ok\n", 3, NULL);
	} else if (strcmp(path, "/readyz") == 0) {
		bool ok = edge_ready(e, &why);
		char body[128];
		int n = snprintf(body, sizeof(body), "%s\n", why);

		http_reply(req, ok ? 200 : 503, "text/plain; charset=utf-8", body, (size_t)n,
		           ok ? NULL : "Retry-After: 1\r\n");
	} else {
		size_t len;
		char *text = st_metrics_render(e->metrics, &len);

		http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
		free(text);
	}
}

/* ---- drain, control, signals ------------------------------------------ */

static void
exit_cb(evutil_socket_t fd, short what, void *arg)
{
	edge *e = arg;

	(void)fd;
	(void)what;
	event_base_loopexit(e->base, NULL);
}

static void
on_drained(void *arg)
{
	edge *e = arg;

	if (e->exiting)
		event_active(e->ev_exit, 0, 0);
}

static void
edge_drain(edge *e, bool then_exit)
{
	if (then_exit && !e->exiting) {
		/* Exit once every stream closed; grace_cb closes the rest at the deadline. */
		struct timeval tv = { e->drain_grace_ms / 1000 + 1, 0 };

		e->exiting = true;
		event_add(e->ev_exit, &tv);
	}
	if (streams_draining(e->streams)) {
		if (then_exit && streams_count(e->streams) == 0)
			event_active(e->ev_exit, 0, 0);
		return;
	}
	st_info("draining %zu streams over %u ms", streams_count(e->streams), e->drain_grace_ms);
	streams_drain(e->streams, on_drained, e);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	st_info("signal %d: draining, then exit", (int)sig);
	edge_drain(arg, true);
}

static st_err
control_cb(const char *cmd, const st_json *req, st_buf *out, void *arg)
{
	edge *e = arg;
	const char *why;
	bool ready;

	(void)req;
	if (strcmp(cmd, "stats") == 0) {
		ready = edge_ready(e, &why);
		st_buf_printf(out, "\"streams\":%zu,\"head\":%llu,\"ready\":%s,\"draining\":%s",
		              streams_count(e->streams), (unsigned long long)sequencer_head(e->seq),
		              ready ? "true" : "false", streams_draining(e->streams) ? "true" : "false");
		return ST_OK;
	}
	if (strcmp(cmd, "drain") == 0) {
		edge_drain(e, false);
		st_buf_printf(out, "\"draining\":true,\"streams\":%zu", streams_count(e->streams));
		return ST_OK;
	}
	return ST_ENOTFOUND;
}

/* ---- main ------------------------------------------------------------- */

static st_opt opts[] = {
	{ "pg-dsn", ST_OPT_STR, NULL, "PostgreSQL connection string (libpq)", 0, 0, true, NULL, 0, false },
	{ "writers", ST_OPT_LIST, NULL, "nng sub0 dial URLs of the writers' publish sockets, comma separated", 0, 0,
	  true, NULL, 0, false },
	{ "listen", ST_OPT_STR, "0.0.0.0:8080", "HTTP listen address ADDR:PORT", 0, 0, false, NULL, 0, false },
	{ "control", ST_OPT_STR, "", "nng rep0 URL of the ops socket (empty: none)", 0, 0, false, NULL, 0, false },
	{ "replay-cap", ST_OPT_INT, "10000", "most events one resume replays before it answers resync", 0,
	  100000000, false, NULL, 0, false },
	{ "heartbeat-s", ST_OPT_INT, "15", "seconds between heartbeats", 1, 3600, false, NULL, 0, false },
	{ "drain-grace-s", ST_OPT_INT, "25", "seconds a drain spreads reconnects over before closing the rest", 0,
	  3600, false, NULL, 0, false },
	{ "threads", ST_OPT_INT, "1", "event loop threads (1 in this version; see docs/edge.md)", 1, 1, false, NULL,
	  0, false },
	{ "max-streams", ST_OPT_INT, "100000", "open streams before new ones get 429", 1, 10000000, false, NULL, 0,
	  false },
	{ "cors-origins", ST_OPT_STR, "", "origins allowed by CORS, comma separated, or *", 0, 0, false, NULL, 0,
	  false },
	{ "flush-interval-ms", ST_OPT_INT, "1000", "the writers' flush interval (readiness waits 3 of them)", 10,
	  600000, false, NULL, 0, false },
};
#define OPT(name) st_config_get(opts, ST_ARRAY_LEN(opts), name)

int
main(int argc, char **argv)
{
	edge e = { 0 };
	http_server_config hcfg = { 0 };
	streams_config scfg = { 0 };
	struct timeval tick = { 0, EDGE_TICK_MS * 1000 };
	char **writers = NULL;
	size_t n_writers;
	int first_pos, rc = 1;
	st_err rv;

	st_log_init("edge-gateway");
	st_config_parse(opts, ST_ARRAY_LEN(opts), argc, argv, "edge-gateway",
	                "edge-gateway --pg-dsn DSN --writers URL[,URL...] [options]", &first_pos);
	if (first_pos != argc)
		st_config_fail("edge-gateway", "unexpected argument '%s'", argv[first_pos]);
	n_writers = st_config_split(OPT("writers")->sval, &writers, 64);
	if (n_writers == 0)
		st_config_fail("edge-gateway", "--writers needs at least one URL");
	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	e.base = event_base_new();
	ST_ASSERT(e.base != NULL);
	e.metrics = st_metrics_new();
	e.flush_interval_ms = (uint64_t)OPT("flush-interval-ms")->ival;
	e.drain_grace_ms = (uint32_t)OPT("drain-grace-s")->ival * 1000;
	e.m_msgs = st_metrics_counter(e.metrics, "studio_edge_messages_total", NULL, "Published messages received.");
	e.m_bad_msgs = st_metrics_counter(e.metrics, "studio_edge_bad_messages_total", NULL,
	                                  "Published messages refused by the decoder.");
	e.m_gap_fills = st_metrics_counter(e.metrics, "studio_gap_fills_total", NULL,
	                                   "History gaps filled from PostgreSQL.");
	e.m_filled = st_metrics_counter(e.metrics, "studio_gap_filled_events_total", NULL,
	                                "Events read from PostgreSQL to fill gaps.");
	e.m_dups = st_metrics_counter(e.metrics, "studio_sequencer_duplicates_total", NULL,
	                              "Published events dropped as already in the history (another writer's copy, or filled).");
	e.m_fill_errors = st_metrics_counter(e.metrics, "studio_gap_fill_errors_total", NULL,
	                                     "Gap fills that failed and were retried.");
	e.m_held_dropped = st_metrics_counter(e.metrics, "studio_sequencer_held_dropped_total", NULL,
	                                      "Events dropped from the out-of-order hold (a fill recovers them).");
	e.m_held = st_metrics_gauge(e.metrics, "studio_sequencer_held", NULL, "Events held behind a gap now.");
	e.m_head = st_metrics_gauge(e.metrics, "studio_history_head", NULL, "The newest seq of the ordered history.");

	if ((rv = pgpool_new(e.base, OPT("pg-dsn")->sval, EDGE_POOL_CONNS, &e.pool)) != ST_OK)
		st_config_fail("edge-gateway", "--pg-dsn: %s", st_err_str(rv));
	(void)sequencer_new(st_clock_system(), on_emit, on_fill, &e, &e.seq);
	scfg.replay_cap = (uint64_t)OPT("replay-cap")->ival;
	scfg.heartbeat_ms = (uint32_t)OPT("heartbeat-s")->ival * 1000;
	scfg.max_streams = (uint32_t)OPT("max-streams")->ival;
	scfg.drain_grace_ms = e.drain_grace_ms;
	e.streams = streams_new(e.base, e.pool, e.metrics, st_clock_system(), &scfg);

	hcfg.cors_origins = OPT("cors-origins")->sval;
	hcfg.max_conns = scfg.max_streams + 1024;
	if ((rv = http_server_new(e.base, OPT("listen")->sval, &hcfg, http_cb, &e, &e.http)) != ST_OK)
		st_config_fail("edge-gateway", "--listen %s: %s", OPT("listen")->sval, st_err_str(rv));
	if (OPT("control")->sval[0] != '\0' &&
	    (rv = st_control_new(e.base, OPT("control")->sval, control_cb, &e, &e.control)) != ST_OK)
		st_config_fail("edge-gateway", "--control %s: %s", OPT("control")->sval, st_err_str(rv));
	if ((rv = sub_new(e.base, (const char *const *)writers, n_writers, on_pub, &e, &e.sub)) != ST_OK)
		st_config_fail("edge-gateway", "--writers: %s", st_err_str(rv));

	e.ev_tick = event_new(e.base, -1, EV_PERSIST, tick_cb, &e);
	e.ev_head_retry = event_new(e.base, -1, 0, head_retry_cb, &e);
	e.ev_exit = event_new(e.base, -1, 0, exit_cb, &e);
	e.ev_flow = event_new(e.base, -1, 0, flow_cb, &e);
	e.ev_term = evsignal_new(e.base, SIGTERM, signal_cb, &e);
	e.ev_int = evsignal_new(e.base, SIGINT, signal_cb, &e);
	ST_ASSERT(e.ev_tick && e.ev_head_retry && e.ev_exit && e.ev_term && e.ev_int && e.ev_flow);
	event_add(e.ev_tick, &tick);
	event_add(e.ev_term, NULL);
	event_add(e.ev_int, NULL);
	head_query_start(&e);

	st_info("listening on %s, %zu writer url(s)", OPT("listen")->sval, n_writers);
	event_base_dispatch(e.base);
	st_info("exiting with %zu streams open", streams_count(e.streams));
	rc = 0;

	sub_free(e.sub);
	st_control_free(e.control);
	http_server_free(e.http);
	if (e.head_query)
		pgpool_cancel(e.head_query);
	if (e.fill_job)
		replay_cancel(e.fill_job);
	streams_free(e.streams);
	sequencer_free(e.seq);
	pgpool_free(e.pool);
	event_free(e.ev_tick);
	event_free(e.ev_head_retry);
	event_free(e.ev_exit);
	event_free(e.ev_flow);
	event_free(e.ev_term);
	event_free(e.ev_int);
	st_metrics_free(e.metrics);
	for (size_t i = 0; i < n_writers; i++)
		free(writers[i]);
	free(writers);
	event_base_free(e.base);
	/* nng's own threads and buffers end here; without it ASan counts them as leaks. */
	nng_fini();
	return rc;
}
