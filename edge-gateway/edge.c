/*
 * edge: one edge gateway (edge.h): subscribes to every writer, keeps the
 * ordered history's head, and serves HTTP streams.
 *
 * DESIGN
 *
 * The main loop (edge_run) owns what is single by nature: the sub0 socket's receive
 * descriptor, the sequencer (which makes published messages one contiguous
 * history, filling gaps from PostgreSQL through its own small pool), the
 * head query, flow control, the control socket, timers and signals.  The
 * loops that serve HTTP streams are fanout.h's workers: with --threads 1
 * the one worker runs on this same loop, with N > 1 each on its own thread;
 * either way every emit goes to them the same way (fanout_publish).
 * Nothing on a loop blocks: the only blocking call, getaddrinfo for writer
 * and database names, runs on resolver threads and comes back through a
 * mailbox.
 *
 * Readiness (/readyz, answered by whichever worker accepted the
 * connection, for the whole edge): main's pool has a connection and so has
 * every worker's, every worker's registry knows the head, a writer's tick or batch arrived within
 * three flush intervals (read, or waiting unread in nng's queue: the edge's
 * own pauses are not a stale writer), and the edge is not draining.  What
 * the main loop owns (database up, draining, last message time) is read through
 * atomics; the queue through a poll of its descriptor.
 * Liveness (/healthz) is just "the loop answers".
 *
 * Flow control: a pause asked by the workers (fanout_flow_look) is granted
 * under the one budget of flow.h; while held, gap fills and held releases
 * wait too (tick_cb), since they feed the same fan-out.
 *
 * Drain: fanout_drain; a SIGTERM exits when every worker reported "no
 * stream left" or after grace + 1 s.  Then the workers are stopped and
 * joined (fanout_stop) and everything is freed with no loop running.
 *
 * main.c keeps configuration; edge_new constructs, edge_run runs, edge_free
 * tears down.
 */
#include "edge.h"

#include <event2/event.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fanout.h"
#include "flow.h"
#include "frame.h"
#include "pgpool.h"
#include "replay.h"
#include "sequencer.h"
#include "st_clock.h"
#include "st_control.h"
#include "st_heap.h"
#include "st_keywatch.h"
#include "st_log.h"
#include "st_metrics.h"
#include "st_ops.h"
#include "st_tls.h"
#include "st_tlsstat.h"
#include "st_util.h"
#include "sub.h"
#include "wire.h"
#include "wire_pub.h"

#define EDGE_TICK_MS 50
/* A fill is fanned out like one published message: as many events, as many bytes. */
#define EDGE_FILL_CHUNK 256
#define EDGE_FILL_BYTES (256u * 1024)
#define EDGE_HEAD_RETRY_MS 500

struct edge {
	struct event_base *base;
	st_metrics *metrics;
	streams_metrics *sm;
	pgpool *pool; /* the head query and gap fills */
	sequencer *seq;
	sub *sub;
	fanout *fan; /* the loops serving streams */
	st_control *control;
	http_server *metrics_http; /* --metrics-listen on the main loop; NULL: /metrics on the public port */
	st_auth_store
		*auth; /* borrowed (main frees it after edge_free); NULL: access control off; shared by every loop */
	iplimit *ip_limit; /* borrowed, as auth; --max-streams-per-ip, shared by every loop */
	st_keywatch *
		keys; /* owned; --auth-keys reloaded on SIGHUP, `reload` and a change of the file; NULL: no --auth-keys */
	uint64_t keys_seen;   /* the store's generation the workers were last told about */
	struct event *ev_hup; /* SIGHUP: reload the keys */
	struct event *ev_tick, *ev_head_retry, *ev_term, *ev_int, *ev_exit, *ev_flow;
	pgpool_query *head_query;
	replay_job *fill_job;
	st_heap_trim *trim;           /* owned: when to give a burst's free pages back (st_heap.h) */
	flow_budget *flow;            /* the pause budget of the intake (flow.h) */
	bool held;                    /* the intake is paused (the last flow decision) */
	uint64_t paused_exported;     /* flow_budget_paused_ms already counted */
	_Atomic uint64_t last_msg_ms; /* monotonic ms of the last batch or tick read, 0 = never */
	atomic_bool db_up;            /* main's pool is up (updated on the tick); read by every loop */
	atomic_bool draining_flag;    /* set once by main; read by every loop */
	bool draining;
	uint64_t flush_interval_ms;
	uint32_t drain_grace_ms;
	bool exiting;
	st_counter *m_msgs, *m_bad_msgs, *m_gap_fills, *m_filled, *m_dups, *m_fill_errors, *m_held_dropped;
	st_counter *m_paused; /* ms the intake was paused */
	st_gauge *m_held, *m_head, *m_conns, *m_db_up, *m_writer_pipes;
	st_histogram *m_delivery; /* given to every worker's HTTP server */
	st_tlsstat *tlsstat;  /* failed TLS handshakes on --control (nng's statistics); polled by any loop's scrape */
	sequencer_stats seen; /* the sequencer's counters already exported */
	streams_config scfg;  /* fanout's workers read these copies */
	http_server_config hcfg;
	const char *listen;
	size_t n_writers;
};

/* ---- the history ------------------------------------------------------ */

static void edge_flow_check(edge *e);

static void
on_emit(void *arg, frame *const *frames, size_t n)
{
	edge *e = arg;

	fanout_publish(e->fan, frames, n, sequencer_head(e->seq));
}

static void
edge_set_head(edge *e)
{
	fanout_set_head(e->fan, sequencer_head(e->seq));
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
	edge_set_head(e);
}

static st_err
on_fill(void *arg, uint64_t after, uint64_t upto)
{
	edge *e = arg;

	e->fill_job = replay_fill(e->pool, after, upto, EDGE_FILL_CHUNK, EDGE_FILL_BYTES, on_fill_rows, e);
	return e->fill_job ? ST_OK : ST_EBUSY;
}

static void
on_pub(void *arg, const void *data, size_t len)
{
	edge *e = arg;
	proto_pub *m = NULL;

	/* The frames emitted at once carry it (studio_edge_delivery_seconds). */
	uint64_t arrival_ns = st_clock_mono_ns();

	if (proto_pub_decode(data, len, &m) != ST_OK) {
		st_counter_inc(e->m_bad_msgs);
		return;
	}
	st_counter_inc(e->m_msgs);
	atomic_store(&e->last_msg_ms, st_clock_now(st_clock_system()));
	(void)sequencer_push(e->seq, m, arrival_ns);
	proto_pub_free(m);
	edge_set_head(e);
	edge_flow_check(e);
}

/*
 * Flow control: while a stream catches up on a burst, published messages
 * wait in nng's queue; re-checked every FLOW_RECHECK_MS while paused.  What
 * the streams (and the workers behind on fan-out) ask for is granted under
 * one budget for all of them (flow.h); a worker's mailbox at its hard bound
 * holds the intake whatever the budget.  Gap fills and the sequencer's
 * release of held messages feed the same fan-out, so they wait while the
 * intake is held (tick_cb).
 */
static void
edge_flow_check(edge *e)
{
	struct timeval tv = st_timeval_ms(FLOW_RECHECK_MS);
	bool want, must;
	uint64_t paused;

	fanout_flow_look(e->fan, &want, &must);
	e->held = flow_budget_decide(e->flow, want, must);
	if (!e->held)
		fanout_flow_settled(e->fan);
	sub_pause(e->sub, e->held);
	if (e->held && !event_pending(e->ev_flow, EV_TIMEOUT, NULL))
		event_add(e->ev_flow, &tv);
	paused = flow_budget_paused_ms(e->flow);
	st_counter_add(e->m_paused, paused - e->paused_exported);
	e->paused_exported = paused;
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

/*
 * After a burst of connections (many opened or closed, then still), glibc
 * keeps the burst's transient blocks resident: give the free pages back
 * (st_heap.h).  At most once per burst, on this tick.
 */
static void
heap_trim_maybe(edge *e)
{
	uint64_t open = fanout_streams_open(e->fan), t0, rss0;

	if (!st_heap_trim_due(e->trim, st_clock_now(st_clock_system()), open))
		return;
	st_heap_trim_done(e->trim, open);
	rss0 = st_heap_rss_bytes();
	t0 = st_clock_mono_ns();
	(void)st_heap_release();
	st_info("heap: %llu streams open after a burst: gave free pages back, RSS %.1f -> %.1f MiB in %.1f ms",
		(unsigned long long)open, (double)rss0 / 1048576.0, (double)st_heap_rss_bytes() / 1048576.0,
		(double)(st_clock_mono_ns() - t0) / 1e6);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	edge *e = arg;

	(void)fd;
	(void)what;
	/* Fills and held releases are fan-out like a message read: not while the intake is held. */
	if (!e->held)
		sequencer_on_timer(e->seq);
	edge_export_stats(e);
	atomic_store(&e->db_up, pgpool_ready(e->pool));
	heap_trim_maybe(e);
	/*
	 * A reload (SIGHUP, `reload`, the watcher) swapped the keys: streams
	 * verified by a key that is gone end now, so a leaked key stops
	 * working at once rather than at its tokens' exp.  Looked at here
	 * rather than told by each reload path: one place sees every swap.
	 */
	if (e->auth != NULL && st_auth_store_generation(e->auth) != e->keys_seen) {
		e->keys_seen = st_auth_store_generation(e->auth);
		fanout_keys_changed(e->fan);
	}
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
	edge_set_head(e);
}

static void
head_query_start(edge *e)
{
	struct timeval tv = { 0, EDGE_HEAD_RETRY_MS * 1000 };

	e->head_query = pgpool_submit(e->pool, PGPOOL_PRIO_FILL, "SELECT coalesce(max(seq), 0)::text FROM broker_event",
				      0, NULL, NULL, NULL, 0, on_head, e);
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

/*
 * A writer's tick or batch arrived within three flush intervals.  Arrived,
 * not read: while the edge pauses its intake (flow control) or is still
 * reading a burst, the writers' ticks wait in nng's queue behind it, and a
 * delay of our own is not a stale writer.  So a message waiting to be read
 * counts as fresh; a writer that went quiet leaves nothing waiting.  (A
 * rule that only looked at the last message read made /readyz flap during
 * every pause at --flush-interval-ms 20.)  Any thread.
 *
 * The order of the three reads is what makes it exact while main reads
 * on: waiting first (a message main takes after that look is in hand
 * until on_pub stored its time, sub.h), then the time of the last one,
 * then the clock (read before it, a time main stored in between would be
 * "in the future" and the difference wrap).  A clean-clone run beside a
 * CPU hog caught both: 3 of 986 polls 503 during bursts.
 */
static bool
edge_writers_fresh(edge *e)
{
	bool waiting = e->sub != NULL && sub_msg_waiting(e->sub);
	uint64_t last = atomic_load(&e->last_msg_ms);
	uint64_t now = st_clock_now(st_clock_system());

	if (last == 0)
		return false; /* nothing read from any writer yet */
	return waiting || now - last <= 3 * e->flush_interval_ms;
}

/* On w's loop.  What main owns is read through atomics. */
static bool
edge_ready(edge *e, fanout_worker *w, const char **why)
{
	streams *ss = fanout_worker_streams(w);

	if (streams_draining(ss) || atomic_load(&e->draining_flag))
		return *why = "draining", false;
	if (!atomic_load(&e->db_up) || !pgpool_ready(fanout_worker_pool(w)))
		return *why = "no database connection", false;
	if (!streams_ready(ss))
		return *why = "history head not known yet", false;
	if (!edge_writers_fresh(e))
		return *why = "no writer tick or batch within 3 flush intervals", false;
	return *why = "ready", true;
}

typedef struct ops_ctx {
	edge *e;
	fanout_worker *w;
} ops_ctx;

static bool
ops_ready(void *arg, const char **why)
{
	ops_ctx *c = arg;

	if (!edge_ready(c->e, c->w, why))
		return false;
	return fanout_ready(c->e->fan, why);
}

/* These gauges are read only when scraped: each is a load of a count kept elsewhere (atomics). */
static void
ops_refresh(void *arg)
{
	ops_ctx *c = arg;

	st_gauge_set(c->e->m_conns, (int64_t)http_server_conns_open(fanout_worker_http(c->w)));
	st_gauge_set(c->e->m_db_up, atomic_load(&c->e->db_up) && pgpool_ready(fanout_worker_pool(c->w)));
	st_gauge_set(c->e->m_writer_pipes, c->e->sub != NULL ? (int64_t)sub_pipes(c->e->sub) : 0);
	st_tlsstat_poll(c->e->tlsstat);
}

static void
http_cb(http_req *req, fanout_worker *w, void *arg)
{
	ops_ctx c = { .e = arg, .w = w };
	const st_ops ops = { .metrics = c.e->metrics, .ready = ops_ready, .refresh = ops_refresh, .arg = &c };
	const char *why;

	/* With --metrics-listen the public port does not show them (only that port does). */
	if (c.e->metrics_http != NULL && strcmp(http_req_path(req), "/metrics") == 0) {
		http_reply_problem(req, 404, NULL, "Not Found", "no such resource", NULL);
		return;
	}
	if (st_ops_handle(req, &ops))
		return;
	if (strcmp(http_req_path(req), "/v1/stream") != 0) {
		http_reply_problem(req, 404, NULL, "Not Found", "no such resource", NULL);
		return;
	}
	if (!st_ops_refuse_method(req))
		streams_handle(fanout_worker_streams(w), req, edge_ready(c.e, w, &why),
			       atomic_load(&c.e->draining_flag));
}

/*
 * --metrics-listen: /metrics alone, on the main loop, for the scraper on
 * the ops network (issue 25: the public port need not show the edge's
 * counts).  studio_ready is the whole edge's readiness as /readyz would
 * answer it, from what main can read (atomics and fanout_ready).
 */
static bool
metrics_ready(void *arg, const char **why)
{
	edge *e = arg;

	if (e->draining)
		return *why = "draining", false;
	if (!pgpool_ready(e->pool))
		return *why = "no database connection", false;
	if (!fanout_ready(e->fan, why))
		return false;
	if (!edge_writers_fresh(e))
		return *why = "no writer tick or batch within 3 flush intervals", false;
	return *why = "ready", true;
}

static void
metrics_refresh(void *arg)
{
	edge *e = arg;
	const char *why;

	st_gauge_set(e->m_conns, (int64_t)fanout_conns_open(e->fan));
	st_gauge_set(e->m_db_up, pgpool_ready(e->pool) && fanout_ready(e->fan, &why));
	st_tlsstat_poll(e->tlsstat);
}

static void
metrics_http_cb(http_req *req, void *arg)
{
	const st_ops ops = {
		.metrics = ((edge *)arg)->metrics, .ready = metrics_ready, .refresh = metrics_refresh, .arg = arg
	};

	if (strcmp(http_req_path(req), "/metrics") != 0 || !st_ops_handle(req, &ops))
		http_reply_problem(req, 404, NULL, "Not Found", "only /metrics is served here", NULL);
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

/* Every worker reported no stream left. */
static void
on_drained(void *arg)
{
	edge *e = arg;

	if (e->exiting)
		event_active(e->ev_exit, 0, 0);
}

/* A worker freed the intake after main asked. */
static void
on_flow(void *arg)
{
	edge_flow_check(arg);
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
	if (e->draining) {
		if (then_exit && fanout_drained(e->fan))
			event_active(e->ev_exit, 0, 0);
		return;
	}
	e->draining = true;
	atomic_store(&e->draining_flag, true);
	st_info("draining %zu streams over %u ms", fanout_streams_open(e->fan), e->drain_grace_ms);
	fanout_drain(e->fan);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	st_info("signal %d: draining, then exit", (int)sig);
	edge_drain(arg, true);
}

/* Readiness as main sees it (control "stats"): the workers' registries get the head main posted. */
static bool
edge_ready_main(edge *e)
{
	return !e->draining && pgpool_ready(e->pool) && sequencer_has_head(e->seq) && fanout_head_posted(e->fan) &&
	       edge_writers_fresh(e);
}

/*
 * Reloads --auth-keys (st_keywatch): requests being checked keep the set
 * they took; streams whose key is gone end at the next tick (tick_cb sees
 * the store's generation move).  A file that does not parse changes nothing.
 */
static st_err
edge_reload_keys(edge *e, char *why, size_t cap)
{
	if (e->keys == NULL) {
		snprintf(why, cap, "access control is off (no --auth-keys)");
		return ST_EINVAL;
	}
	return st_keywatch_reload(e->keys, why, cap);
}

static void
hup_cb(evutil_socket_t sig, short what, void *arg)
{
	char why[256];

	(void)sig;
	(void)what;
	if (edge_reload_keys(arg, why, sizeof(why)) != ST_OK && ((edge *)arg)->auth == NULL)
		st_info("SIGHUP: %s, nothing to reload", why);
}

static st_err
control_cb(const char *cmd, const st_json *req, st_buf *out, void *arg)
{
	edge *e = arg;
	bool ready;

	(void)req;
	if (strcmp(cmd, "stats") == 0) {
		ready = edge_ready_main(e);
		st_buf_printf(out, "\"streams\":%zu,\"head\":%llu,\"ready\":%s,\"draining\":%s",
			      fanout_streams_open(e->fan), (unsigned long long)sequencer_head(e->seq),
			      ready ? "true" : "false", e->draining ? "true" : "false");
		return ST_OK;
	}
	if (strcmp(cmd, "drain") == 0) {
		edge_drain(e, false);
		st_buf_printf(out, "\"draining\":true,\"streams\":%zu", fanout_streams_open(e->fan));
		return ST_OK;
	}
	if (strcmp(cmd, "reload") == 0) {
		char reason[256];

		if (edge_reload_keys(e, reason, sizeof(reason)) != ST_OK) {
			st_buf_puts(out, reason);
			return ST_EINVAL;
		}
		st_buf_printf(out, "\"keys\":%zu", st_auth_store_key_count(e->auth));
		return ST_OK;
	}
	return ST_ENOTFOUND;
}

/* ---- construction, run, teardown -------------------------------------- */

static void
metrics_init(edge *e)
{
	static const double b[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
				    0.15,   0.2,     0.25,   0.3,   0.4,    0.5,   0.75, 1,     2.5,  5 };

	e->metrics = st_metrics_new();
	e->m_msgs = st_metrics_counter(e->metrics, "studio_edge_messages_total", NULL, "Published messages received.");
	{
		const char *const roles[] = { st_tls_role_name(ST_TLS_CONTROL) };

		e->tlsstat = st_tlsstat_new(e->base, e->metrics, "studio_edge_tls_handshake_failures_total", roles, 1,
					    ST_TLSSTAT_INTERVAL_MS);
	}
	e->m_bad_msgs = st_metrics_counter(e->metrics, "studio_edge_bad_messages_total", NULL,
					   "Published messages refused by the decoder.");
	e->m_gap_fills =
		st_metrics_counter(e->metrics, "studio_gap_fills_total", NULL, "History gaps filled from PostgreSQL.");
	e->m_filled = st_metrics_counter(e->metrics, "studio_gap_filled_events_total", NULL,
					 "Events read from PostgreSQL to fill gaps.");
	e->m_dups = st_metrics_counter(
		e->metrics, "studio_sequencer_duplicates_total", NULL,
		"Published events dropped as already in the history (another writer's copy, or filled).");
	e->m_fill_errors = st_metrics_counter(e->metrics, "studio_gap_fill_errors_total", NULL,
					      "Gap fills that failed and were retried.");
	e->m_held_dropped = st_metrics_counter(e->metrics, "studio_sequencer_held_dropped_total", NULL,
					       "Events dropped from the out-of-order hold (a fill recovers them).");
	e->m_paused = st_metrics_counter(e->metrics, "studio_edge_intake_paused_ms_total", NULL,
					 "Milliseconds the edge stopped reading published messages (flow control).");
	e->m_held = st_metrics_gauge(e->metrics, "studio_sequencer_held", NULL, "Events held behind a gap now.");
	e->m_head = st_metrics_gauge(e->metrics, "studio_history_head", NULL, "The newest seq of the ordered history.");
	e->m_conns = st_metrics_gauge(e->metrics, "studio_http_connections_open", NULL,
				      "HTTP connections open now (this scrape's included), of --max-streams + 1024.");
	e->m_db_up = st_metrics_gauge(e->metrics, "studio_database_up", NULL,
				      "1 when the database pools (main's and this worker's) are connected, else 0.");
	e->m_writer_pipes = st_metrics_gauge(e->metrics, "studio_edge_writer_pipes", NULL,
					     "Connections to writers up now (every address of every --writers URL).");
	e->m_delivery = st_metrics_histogram(e->metrics, "studio_edge_delivery_seconds", NULL,
					     "From nng handing a published message over to its bytes "
					     "reaching the kernel, per stream that keeps up.",
					     b, ST_ARRAY_LEN(b));
	e->sm = streams_metrics_new(e->metrics);
}

st_err
edge_new(const edge_config *cfg, edge **out, char *why, size_t cap)
{
	edge *e = st_xcalloc(1, sizeof(*e));
	struct timeval tick = { 0, EDGE_TICK_MS * 1000 };
	st_err rv;

	e->base = event_base_new();
	ST_ASSERT(e->base != NULL);
	e->auth = cfg->streams.auth;
	e->ip_limit = cfg->streams.ip_limit;
	if (e->auth != NULL && (e->keys = st_keywatch_new(e->base, e->auth, cfg->auth_keys_path, "--auth-keys",
							  cfg->auth_keys_watch_ms)) == NULL) {
		snprintf(why, cap, "--auth-keys: cannot watch the file");
		return ST_ESYS;
	}
	e->flush_interval_ms = cfg->flush_interval_ms;
	e->drain_grace_ms = cfg->drain_grace_ms;
	e->listen = cfg->listen;
	e->n_writers = cfg->n_writers;
	metrics_init(e);

	/* The head query and gap fills (fanout.h says how the edge's connections are shared out). */
	if ((rv = pgpool_new(e->base, cfg->pg_dsn, FANOUT_MAIN_POOL_CONNS(cfg->threads), &e->pool)) != ST_OK) {
		snprintf(why, cap, "--pg-dsn: %s", st_err_str(rv));
		return rv;
	}
	/* With 2, one runs only gap fills: live delivery never waits behind the head query (pgpool keeps 1 for all). */
	pgpool_reserve_fills(e->pool, 1);
	(void)sequencer_new(st_clock_system(), on_emit, on_fill, e, &e->seq);
	e->flow = flow_budget_new(st_clock_system());
	if ((e->trim = st_heap_trim_new()) == NULL) {
		snprintf(why, cap, "out of memory");
		return ST_ENOMEM;
	}
	e->scfg = cfg->streams;
	e->scfg.drain_grace_ms = e->drain_grace_ms;
	e->hcfg = cfg->http;
	/* Streams plus room for the ops endpoints and for refusals to be answered. */
	e->hcfg.max_conns = e->scfg.max_streams + 1024;
	{
		const fanout_config fcfg = { .n = cfg->threads,
					     .pg_dsn = cfg->pg_dsn,
					     .listen = cfg->listen,
					     .http = &e->hcfg,
					     .streams = &e->scfg,
					     .sm = e->sm,
					     .delivery = e->m_delivery,
					     .cors_credentials = e->auth != NULL,
					     .on_http = http_cb,
					     .on_flow = on_flow,
					     .on_drained = on_drained,
					     .arg = e };

		if ((rv = fanout_new(e->base, &fcfg, &e->fan, why, cap)) != ST_OK)
			return rv;
	}
	if (cfg->metrics_listen != NULL && cfg->metrics_listen[0] != '\0') {
		/* A scraper or two: a small bound of its own, apart from the streams'. */
		const http_server_config mcfg = { .max_conns = 64 };

		if ((rv = http_server_new(e->base, cfg->metrics_listen, &mcfg, metrics_http_cb, e, &e->metrics_http)) !=
		    ST_OK) {
			snprintf(why, cap, "--metrics-listen %s: cannot listen (%s)", cfg->metrics_listen,
				 st_err_str(rv));
			return rv;
		}
		st_info("/metrics on %s only (not on %s)", cfg->metrics_listen, cfg->listen);
	}
	if (cfg->control[0] != '\0' &&
	    (rv = st_control_new(e->base, cfg->control, control_cb, e, &e->control)) != ST_OK) {
		snprintf(why, cap, "--control %s: %s", cfg->control, st_err_str(rv));
		return rv;
	}
	if ((rv = sub_new(e->base, cfg->writers, cfg->n_writers, on_pub, e, &e->sub)) != ST_OK) {
		snprintf(why, cap, "--writers: %s", st_err_str(rv));
		return rv;
	}

	e->ev_tick = event_new(e->base, -1, EV_PERSIST, tick_cb, e);
	e->ev_head_retry = event_new(e->base, -1, 0, head_retry_cb, e);
	e->ev_exit = event_new(e->base, -1, 0, exit_cb, e);
	e->ev_flow = event_new(e->base, -1, 0, flow_cb, e);
	e->ev_term = evsignal_new(e->base, SIGTERM, signal_cb, e);
	e->ev_int = evsignal_new(e->base, SIGINT, signal_cb, e);
	e->ev_hup = evsignal_new(e->base, SIGHUP, hup_cb, e);
	ST_ASSERT(e->ev_tick && e->ev_head_retry && e->ev_exit && e->ev_term && e->ev_int && e->ev_flow && e->ev_hup);
	event_add(e->ev_tick, &tick);
	event_add(e->ev_term, NULL);
	event_add(e->ev_int, NULL);
	/* Without access control SIGHUP is caught too (and logged), rather than killing the edge. */
	event_add(e->ev_hup, NULL);
	head_query_start(e);
	if ((rv = fanout_start(e->fan)) != ST_OK) {
		snprintf(why, cap, "--threads: cannot start the loop threads");
		return rv;
	}
	*out = e;
	return ST_OK;
}

void
edge_run(edge *e)
{
	st_info("listening on %s, %zu writer url(s), %zu loop thread(s)", e->listen, e->n_writers,
		fanout_workers(e->fan));
	event_base_dispatch(e->base);
	st_info("exiting with %zu streams open", fanout_streams_open(e->fan));
}

void
edge_free(edge *e)
{
	if (e == NULL)
		return;
	/* Stop and join the worker loops, then free with no loop running. */
	fanout_stop(e->fan);
	fanout_free(e->fan);
	sub_free(e->sub);
	st_control_free(e->control);
	http_server_free(e->metrics_http);
	if (e->head_query)
		pgpool_cancel(e->head_query);
	if (e->fill_job)
		replay_cancel(e->fill_job);
	sequencer_free(e->seq);
	flow_budget_free(e->flow);
	st_heap_trim_free(e->trim);
	pgpool_free(e->pool);
	streams_metrics_free(e->sm);
	event_free(e->ev_tick);
	event_free(e->ev_head_retry);
	event_free(e->ev_exit);
	event_free(e->ev_flow);
	event_free(e->ev_term);
	event_free(e->ev_int);
	event_free(e->ev_hup);
	st_keywatch_free(e->keys);
	st_tlsstat_free(e->tlsstat);
	st_metrics_free(e->metrics);
	event_base_free(e->base);
	free(e);
}
