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
 *
 * THREADS (--threads N, N > 1).  What is single by nature stays on the
 * main loop: sub, the sequencer, the head query and gap fills (its own
 * pool), the control socket, signals, the metrics registry.  Each of N
 * workers has its own loop thread with its own HTTP server (SO_REUSEPORT on
 * the same --listen address: the kernel spreads connections), its own
 * streams registry (hub, heartbeats, drain) and its own small pool for
 * resume checks and replays.  The history goes main -> workers through one
 * st_mailbox per worker: every sequencer emit becomes ONE message shared
 * by every worker (each frame referenced once for all of them, the message
 * counted by an atomic and freed by the last worker), a head that moved
 * without frames becomes a head message (posted only when it moved).
 * Frames are immutable and atomically counted; frame_bytes publishes its
 * lazy bytes with a compare-and-swap, so workers share frames freely.
 *
 * Flow control must see every worker.  Each worker evaluates its own
 * streams_backpressure on its loop (after each batch, and every
 * EDGE_FLOW_MS while it is behind) into an atomic flag; main asks for a
 * pause while a flag is set or a worker has EDGE_INFLIGHT_MAX batches not
 * yet fanned out (with several loops main would otherwise read ahead of the
 * fan-out, which is what reading one message per turn prevents), and the
 * pause is granted under the one budget of flow.h; a worker with
 * EDGE_MAILBOX_MAX batches queued holds the intake whatever the budget, so
 * no mailbox grows without bound.  A worker
 * whose state frees the intake wakes main through main's mailbox, only if
 * main asked (flow_wait), so the wake-ups cannot flood; the EDGE_FLOW_MS
 * re-check stays as the safety net.
 *
 * Readiness inputs that main owns (database up, draining, last message
 * time) are atomics, so /readyz, /healthz and /metrics are answered by
 * whichever worker accepted the connection; the head is the worker's own
 * registry's (a stream it accepts needs exactly that).  Drain: main posts
 * drain to every worker; each spreads its own reconnect hints over the
 * grace (so the union is spread too) and reports "no stream left" back
 * through main's mailbox; a SIGTERM exits when every worker reported or
 * after grace + 1 s.  Then each worker's loop is stopped through its
 * mailbox, the threads are joined, and everything is freed from main with
 * no loop running, so no callback can follow a free.
 *
 * With --threads 1 no thread is started and nothing goes through a
 * mailbox: the one registry and server run on the main loop, and emits and
 * heads are handed to it directly, as before.
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <nng/nng.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "flow.h"
#include "frame.h"
#include "pgpool.h"
#include "replay.h"
#include "sequencer.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_control.h"
#include "st_http.h"
#include "st_log.h"
#include "st_mailbox.h"
#include "st_metrics.h"
#include "st_ops.h"
#include "st_preflight.h"
#include "st_tls.h"
#include "st_util.h"
#include "stream.h"
#include "sub.h"
#include "wire.h"

#define EDGE_POOL_CONNS 4
#define EDGE_MAIN_POOL_CONNS 2   /* threads > 1: main serves only the head query and gap fills */
#define EDGE_WORKER_POOL_CONNS 2 /* threads > 1: resume checks and replays of one worker */
#define EDGE_MAX_THREADS 64
#define EDGE_TICK_MS 50
/* A fill is fanned out like one published message: as many events, as many bytes. */
/* Seconds the teardown after the loop may take before the process just exits. */
#define EDGE_TEARDOWN_S 5
#define EDGE_FILL_CHUNK 256
#define EDGE_FILL_BYTES (256u * 1024)
#define EDGE_HEAD_RETRY_MS 500
#define EDGE_FLOW_MS 5
/* threads > 1: batches main may have posted to a worker before it fanned them out
 * (a request for a pause, under the flow budget)... */
#define EDGE_INFLIGHT_MAX 2
/* ... and the hard bound of a worker's mailbox: main stops reading whatever the budget. */
#define EDGE_MAILBOX_MAX 64

typedef struct edge edge;

/* What travels between the loops (threads > 1). */
enum emsg_kind {
	EMSG_BATCH,   /* main -> workers: frames of the ordered history, head after them */
	EMSG_HEAD,    /* main -> workers: the head moved without frames */
	EMSG_DRAIN,   /* main -> workers */
	EMSG_STOP,    /* main -> workers: leave the loop */
	EMSG_DRAINED, /* worker -> main: no stream left */
	EMSG_FLOW     /* worker -> main: re-check flow control */
};

/* One allocation, shared by every worker it is posted to; the last one frees it. */
typedef struct emsg {
	enum emsg_kind kind;
	atomic_uint refs;
	uint64_t head;
	uint64_t origin_ns; /* EMSG_BATCH: when nng handed its message over, 0 = not from one (a fill) */
	size_t n;
	frame *frames[];  /* one reference each, for all workers together */
} emsg;

/* One loop serving HTTP streams.  With one thread it is the main loop. */
typedef struct worker {
	edge *e;
	struct event_base *base;  /* == e->base with one thread; owned otherwise */
	pgpool *pool;             /* == e->pool with one thread; owned otherwise */
	streams *streams;
	http_server *http;
	st_mailbox *inbox;        /* threads > 1: main -> worker */
	struct event *ev_flow;    /* threads > 1: re-evaluates backpressure while behind */
	pthread_t thread;
	bool started;
	bool stopped;             /* worker thread: EMSG_STOP seen, only release what follows */
	atomic_bool behind;       /* streams_backpressure, as of the worker's last look */
	atomic_uint inflight;     /* batches posted and not yet published */
} worker;

struct edge {
	struct event_base *base;
	st_metrics *metrics;
	streams_metrics *sm;
	pgpool *pool;
	sequencer *seq;
	sub *sub;
	worker *w;                 /* n_workers */
	size_t n_workers;
	st_mailbox *inbox;         /* threads > 1: workers -> main */
	http_conn_limit *conn_limit; /* threads > 1: one connection bound for every loop's server */
	st_control *control;
	auth_store *auth;          /* NULL: access control off; shared by every loop */
	iplimit *ip_limit;         /* --max-streams-per-ip; shared by every loop */
	const char *auth_keys_path;
	struct event *ev_hup;      /* SIGHUP: reload the keys */
	struct event *ev_tick, *ev_head_retry, *ev_term, *ev_int, *ev_exit, *ev_flow;
	pgpool_query *head_query;
	replay_job *fill_job;
	flow_budget *flow;         /* the pause budget of the intake (flow.h) */
	bool held;                 /* the intake is paused (the last flow decision) */
	uint64_t paused_exported;  /* flow_budget_paused_ms already counted */
	_Atomic uint64_t last_msg_ms; /* monotonic ms of the last batch or tick, 0 = never */
	atomic_bool db_up;         /* threads > 1: main's pool is up (updated on the tick) */
	atomic_bool draining_flag; /* set once by main; read by every loop */
	atomic_bool flow_wait;     /* main paused sub and wants a wake-up */
	uint64_t posted_head;      /* threads > 1: the last head posted to the workers */
	bool head_posted;
	size_t n_drained;          /* workers that reported no stream left */
	bool draining;
	bool stopping;             /* main's loop has ended: mailbox items are only freed */
	uint64_t flush_interval_ms;
	uint64_t arrival_ns;       /* while on_pub runs: when nng handed the message over; else 0 */
	uint32_t drain_grace_ms;
	bool exiting;
	st_counter *m_msgs, *m_bad_msgs, *m_gap_fills, *m_filled, *m_dups, *m_fill_errors, *m_held_dropped;
	st_counter *m_paused;      /* ms the intake was paused */
	st_gauge *m_held, *m_head, *m_conns;
	st_histogram *m_delivery;  /* given to every worker's HTTP server */
	sequencer_stats seen;      /* the sequencer's counters already exported */
};

/* ---- the history ------------------------------------------------------ */

static void edge_flow_check(edge *e);
static void edge_export_stats(edge *e);

static bool
edge_threaded(const edge *e)
{
	return e->n_workers > 1;
}

static emsg *
emsg_new(enum emsg_kind kind, uint64_t head, size_t n)
{
	emsg *m = st_xmalloc(sizeof(*m) + n * sizeof(m->frames[0]));

	m->kind = kind;
	atomic_init(&m->refs, 1);
	m->head = head;
	m->origin_ns = 0;
	m->n = n;
	return m;
}

static void
emsg_release(emsg *m)
{
	if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < m->n; i++)
		frame_unref(m->frames[i]);
	free(m);
}

/* One message for every worker: each worker's mailbox owns one count. */
static void
edge_post_all(edge *e, emsg *m)
{
	atomic_store_explicit(&m->refs, (unsigned)e->n_workers, memory_order_relaxed);
	for (size_t i = 0; i < e->n_workers; i++) {
		if (m->kind == EMSG_BATCH)
			atomic_fetch_add(&e->w[i].inflight, 1);
		st_mailbox_post(e->w[i].inbox, m);
	}
}

static void
on_emit(void *arg, frame *const *frames, size_t n)
{
	edge *e = arg;
	emsg *m;

	if (!edge_threaded(e)) {
		http_server_set_origin(e->w[0].http, e->arrival_ns);
		streams_publish(e->w[0].streams, frames, n, sequencer_head(e->seq));
		http_server_set_origin(e->w[0].http, 0);
		return;
	}
	m = emsg_new(EMSG_BATCH, sequencer_head(e->seq), n);
	m->origin_ns = e->arrival_ns;
	for (size_t i = 0; i < n; i++)
		m->frames[i] = frame_ref(frames[i]);
	e->posted_head = m->head;
	e->head_posted = true;
	edge_post_all(e, m);
}

/* streams_set_head for every registry; with threads, posted only when it moved. */
static void
edge_set_head(edge *e)
{
	uint64_t head = sequencer_head(e->seq);

	if (!edge_threaded(e)) {
		streams_set_head(e->w[0].streams, head);
		return;
	}
	if (e->head_posted && head <= e->posted_head)
		return;
	e->posted_head = head;
	e->head_posted = true;
	edge_post_all(e, emsg_new(EMSG_HEAD, head, 0));
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

	/* Frames the sequencer emits under this call came with this message
	 * (studio_edge_delivery_seconds); a later emit (after a fill) is not
	 * timed against it. */
	e->arrival_ns = st_clock_mono_ns();
	if (proto_pub_decode(data, len, &m) != ST_OK) {
		st_counter_inc(e->m_bad_msgs);
		e->arrival_ns = 0;
		return;
	}
	st_counter_inc(e->m_msgs);
	atomic_store_explicit(&e->last_msg_ms, st_clock_now(st_clock_system()), memory_order_relaxed);
	(void)sequencer_push(e->seq, m);
	e->arrival_ns = 0;
	proto_pub_free(m);
	edge_set_head(e);
	edge_flow_check(e);
}

/*
 * Flow control: while a stream catches up on a burst, published messages
 * wait in nng's queue; re-checked every EDGE_FLOW_MS while paused.  What
 * the streams (and the workers behind on fan-out) ask for is granted under
 * one budget for all of them (flow.h); a worker's mailbox at its hard bound
 * holds the intake whatever the budget.  Gap fills and the sequencer's
 * release of held messages feed the same fan-out, so they wait while the
 * intake is held (tick_cb).
 */
static void
edge_flow_check(edge *e)
{
	struct timeval tv = { 0, EDGE_FLOW_MS * 1000 };
	bool want = false, must = false;
	uint64_t paused;

	if (!edge_threaded(e)) {
		want = streams_backpressure(e->w[0].streams);
	} else {
		/*
		 * Ask for a wake-up before looking: a worker that frees the intake
		 * after our look sees the request (seq_cst), so no wake is lost.
		 */
		atomic_store(&e->flow_wait, true);
		for (size_t i = 0; i < e->n_workers; i++) {
			unsigned inflight = atomic_load(&e->w[i].inflight);

			want = want || atomic_load(&e->w[i].behind) || inflight >= EDGE_INFLIGHT_MAX;
			must = must || inflight >= EDGE_MAILBOX_MAX;
		}
	}
	e->held = flow_budget_decide(e->flow, want, must);
	if (edge_threaded(e) && !e->held)
		atomic_store(&e->flow_wait, false);
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
	if (edge_threaded(e))
		atomic_store(&e->db_up, pgpool_ready(e->pool));
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

/* On w's loop.  Main's inputs are atomics when w runs on its own thread. */
static bool
edge_ready(edge *e, worker *w, const char **why)
{
	uint64_t now = st_clock_now(st_clock_system());
	uint64_t last = atomic_load_explicit(&e->last_msg_ms, memory_order_relaxed);
	bool db = w->pool == e->pool ? pgpool_ready(e->pool) : atomic_load(&e->db_up) && pgpool_ready(w->pool);

	if (streams_draining(w->streams) || atomic_load(&e->draining_flag))
		return *why = "draining", false;
	if (!db)
		return *why = "no database connection", false;
	if (!streams_ready(w->streams))
		return *why = "history head not known yet", false;
	if (last == 0 || now - last > 3 * e->flush_interval_ms)
		return *why = "no writer tick or batch within 3 flush intervals", false;
	return *why = "ready", true;
}

static bool
ops_ready(void *arg, const char **why)
{
	worker *w = arg;

	return edge_ready(w->e, w, why);
}

/* The connection gauge is read only when scraped: it is one load of the server's count. */
static void
ops_refresh(void *arg)
{
	worker *w = arg;

	st_gauge_set(w->e->m_conns, (int64_t)http_server_conns_open(w->http));
}

static void
http_cb(http_req *req, void *arg)
{
	worker *w = arg;
	const st_ops ops = { .metrics = w->e->metrics, .ready = ops_ready, .refresh = ops_refresh, .arg = w };
	const char *why;

	if (st_ops_handle(req, &ops))
		return;
	if (strcmp(http_req_path(req), "/v1/stream") != 0) {
		http_reply_problem(req, 404, NULL, "Not Found", "no such resource", NULL);
		return;
	}
	if (!st_ops_refuse_method(req))
		streams_handle(w->streams, req, edge_ready(w->e, w, &why));
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

/* Streams open in every registry (main thread). */
static size_t
edge_streams_count(const edge *e)
{
	return edge_threaded(e) ? streams_metrics_open(e->sm) : streams_count(e->w[0].streams);
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
		if (then_exit && (edge_threaded(e) ? e->n_drained == e->n_workers : streams_count(e->w[0].streams) == 0))
			event_active(e->ev_exit, 0, 0);
		return;
	}
	e->draining = true;
	atomic_store(&e->draining_flag, true);
	st_info("draining %zu streams over %u ms", edge_streams_count(e), e->drain_grace_ms);
	if (!edge_threaded(e)) {
		streams_drain(e->w[0].streams, on_drained, e);
		return;
	}
	edge_post_all(e, emsg_new(EMSG_DRAIN, 0, 0));
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	st_info("signal %d: draining, then exit", (int)sig);
	edge_drain(arg, true);
}

/* Readiness as main sees it (control "stats" with threads > 1). */
static bool
edge_ready_main(edge *e)
{
	uint64_t now = st_clock_now(st_clock_system());
	uint64_t last = atomic_load_explicit(&e->last_msg_ms, memory_order_relaxed);

	return !e->draining && pgpool_ready(e->pool) && sequencer_has_head(e->seq) && e->head_posted && last != 0 &&
	       now - last <= 3 * e->flush_interval_ms;
}

/*
 * Reloads --auth-keys into a new key set and swaps it in: streams already
 * open are not looked at again (their token was checked at their start;
 * they end at its exp), requests being checked keep the set they took.  A
 * file that does not parse changes nothing.  Main loop: one read of a
 * local file of at most 1 MiB (docs/security.md says to keep it local).
 */
static st_err
edge_reload_keys(edge *e, char *why, size_t cap)
{
	auth_keys *ks = NULL;

	if (e->auth == NULL) {
		snprintf(why, cap, "access control is off (no --auth-keys)");
		return ST_EINVAL;
	}
	if (auth_keys_load(e->auth_keys_path, &ks, why, cap) != ST_OK) {
		st_warn("--auth-keys %s: reload failed, keeping the %zu keys in use: %s", e->auth_keys_path,
		        auth_store_key_count(e->auth), why);
		return ST_EINVAL;
	}
	st_info("--auth-keys %s: reloaded, %zu keys", e->auth_keys_path, auth_keys_count(ks));
	auth_store_swap(e->auth, ks);
	return ST_OK;
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
	const char *why;
	bool ready;

	(void)req;
	if (strcmp(cmd, "stats") == 0) {
		/* With threads, worker 0's registry stands for the head it knows; the rest are main's. */
		ready = !edge_threaded(e) ? edge_ready(e, &e->w[0], &why) : edge_ready_main(e);
		st_buf_printf(out, "\"streams\":%zu,\"head\":%llu,\"ready\":%s,\"draining\":%s",
		              edge_streams_count(e), (unsigned long long)sequencer_head(e->seq),
		              ready ? "true" : "false", e->draining ? "true" : "false");
		return ST_OK;
	}
	if (strcmp(cmd, "drain") == 0) {
		edge_drain(e, false);
		st_buf_printf(out, "\"draining\":true,\"streams\":%zu", edge_streams_count(e));
		return ST_OK;
	}
	if (strcmp(cmd, "reload") == 0) {
		char reason[256];

		if (edge_reload_keys(e, reason, sizeof(reason)) != ST_OK) {
			st_buf_puts(out, reason);
			return ST_EINVAL;
		}
		st_buf_printf(out, "\"keys\":%zu", auth_store_key_count(e->auth));
		return ST_OK;
	}
	return ST_ENOTFOUND;
}

/* ---- worker loops (threads > 1) ----------------------------------------- */

/* Worker -> main: a small message of its own (refs 1). */
static void
worker_tell_main(worker *w, enum emsg_kind kind)
{
	st_mailbox_post(w->e->inbox, emsg_new(kind, 0, 0));
}

/* On the worker's loop: its backpressure into the flag main reads; wake main if it waits. */
static void
worker_flow_eval(worker *w)
{
	struct timeval tv = { 0, EDGE_FLOW_MS * 1000 };
	bool behind = streams_backpressure(w->streams);

	atomic_store(&w->behind, behind);
	if (behind && !event_pending(w->ev_flow, EV_TIMEOUT, NULL))
		event_add(w->ev_flow, &tv);
	if (atomic_exchange(&w->e->flow_wait, false))
		worker_tell_main(w, EMSG_FLOW);
}

static void
worker_flow_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	worker_flow_eval(arg);
}

static void
worker_drained(void *arg)
{
	worker_tell_main(arg, EMSG_DRAINED);
}

static void
worker_inbox_cb(void *item, void *arg)
{
	worker *w = arg;
	emsg *m = item;

	switch (w->stopped ? EMSG_STOP : m->kind) {
	case EMSG_BATCH:
		http_server_set_origin(w->http, m->origin_ns);
		streams_publish(w->streams, m->frames, m->n, m->head);
		http_server_set_origin(w->http, 0);
		atomic_fetch_sub(&w->inflight, 1);
		worker_flow_eval(w);
		break;
	case EMSG_HEAD:
		streams_set_head(w->streams, m->head);
		break;
	case EMSG_DRAIN:
		streams_drain(w->streams, worker_drained, w);
		break;
	case EMSG_STOP:
		if (!w->stopped) {
			w->stopped = true;
			event_base_loopexit(w->base, NULL);
		}
		if (m->kind == EMSG_BATCH)
			atomic_fetch_sub(&w->inflight, 1);
		break;
	default:
		break;
	}
	emsg_release(m);
}

/* Main's mailbox: what the workers report. */
static void
main_inbox_cb(void *item, void *arg)
{
	edge *e = arg;
	emsg *m = item;

	if (!e->stopping && m->kind == EMSG_DRAINED) {
		e->n_drained++;
		if (e->exiting && e->n_drained == e->n_workers)
			event_active(e->ev_exit, 0, 0);
	} else if (!e->stopping && m->kind == EMSG_FLOW) {
		edge_flow_check(e);
	}
	emsg_release(m);
}

static void *
worker_main(void *arg)
{
	worker *w = arg;

	/* Kept running while idle: the mailbox event is only active when something was posted. */
	event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

/* Main thread, before the worker's thread starts.  listen: the address with a bound port. */
static st_err
worker_init(edge *e, worker *w, const char *dsn, const char *listen, const http_server_config *hcfg,
            const streams_config *scfg)
{
	st_err rv;

	w->e = e;
	atomic_init(&w->behind, false);
	atomic_init(&w->inflight, 0);
	w->base = event_base_new();
	ST_ASSERT(w->base != NULL);
	if ((rv = pgpool_new(w->base, dsn, EDGE_WORKER_POOL_CONNS, &w->pool)) != ST_OK)
		return rv;
	w->streams = streams_new(w->base, w->pool, e->sm, st_clock_system(), scfg);
	if ((rv = http_server_new_shared(w->base, listen, hcfg, e->conn_limit, http_cb, w, &w->http)) != ST_OK)
		return rv;
	http_server_set_cors_credentials(w->http, e->auth != NULL);
	http_server_set_delivery_histogram(w->http, e->m_delivery);
	w->inbox = st_mailbox_new(w->base, worker_inbox_cb, w);
	w->ev_flow = event_new(w->base, -1, 0, worker_flow_cb, w);
	ST_ASSERT(w->inbox && w->ev_flow);
	return ST_OK;
}

/* Main thread, after the worker's thread was joined (or never started): no loop runs it. */
static void
worker_fini(worker *w)
{
	w->stopped = true;
	st_mailbox_free(w->inbox); /* releases what was still queued */
	http_server_free(w->http); /* closes every stream: on_close runs into the registry */
	streams_free(w->streams);
	pgpool_free(w->pool);
	if (w->ev_flow)
		event_free(w->ev_flow);
	if (w->base)
		event_base_free(w->base); /* the last write_ref cleanups release their frames here */
}

/* "ADDR:PORT" with the port replaced (a --listen of port 0 binds one fresh port for all). */
static void
listen_with_port(const char *listen, int port, char *out, size_t cap)
{
	const char *colon = strrchr(listen, ':');
	int hl = colon ? (int)(colon - listen) : (int)strlen(listen);

	snprintf(out, cap, "%.*s:%d", hl, listen, port);
}

/* ---- main ------------------------------------------------------------- */

/* The options, by index: a misspelt name is a compile error. */
enum {
	E_PG_DSN,
	E_WRITERS,
	E_LISTEN,
	E_CONTROL,
	E_REPLAY_CAP,
	E_HEARTBEAT_S,
	E_DRAIN_GRACE_S,
	E_THREADS,
	E_MAX_STREAMS,
	E_CORS_ORIGINS,
	E_FLUSH_INTERVAL_MS,
	E_AUTH_KEYS,
	E_AUTH_LEEWAY_S,
	E_AUTH_AUDIENCE,
	E_AUTH_ISSUER,
	E_AUTH_TOPICS_CLAIM,
	E_AUTH_COOKIE,
	E_AUTH_QUERY_TOKEN,
	E_MAX_STREAMS_PER_IP,
	E_TRUSTED_PROXIES,
	E_TLS_CERT,
	E_TLS_KEY,
	E_TLS_CA,
	E_N
};

static st_opt opts[E_N] = {
	[E_PG_DSN] = ST_OPT_PG_DSN,
	[E_WRITERS] = { .name = "writers", .kind = ST_OPT_LIST,
	  .help = "nng sub0 dial URLs of the writers' publish sockets, comma separated (at most 64)", .required = true,
	  .check = st_preflight_dial_urls },
	[E_LISTEN] = { .name = "listen", .kind = ST_OPT_STR, .def = "0.0.0.0:8080", .help = "HTTP listen address ADDR:PORT",
	  .required = true, .check = st_preflight_http_addr },
	[E_CONTROL] = { .name = "control", .kind = ST_OPT_STR, .def = "", .help = "nng rep0 URL of the ops socket (empty: none)",
	  .check = st_preflight_listen_url },
	[E_REPLAY_CAP] = { .name = "replay-cap", .kind = ST_OPT_INT, .def = "10000",
	  .help = "most events one resume replays before it answers resync", .min = 0, .max = 100000000 },
	[E_HEARTBEAT_S] = { .name = "heartbeat-s", .kind = ST_OPT_INT, .def = "15", .help = "seconds between heartbeats", .min = 1,
	  .max = 3600 },
	[E_DRAIN_GRACE_S] = { .name = "drain-grace-s", .kind = ST_OPT_INT, .def = "25",
	  .help = "seconds a drain spreads reconnects over before closing the rest", .min = 0, .max = 3600 },
	[E_THREADS] = { .name = "threads", .kind = ST_OPT_INT, .def = "1",
	  .help = "event loop threads serving HTTP streams (see docs/edge.md)", .min = 1, .max = EDGE_MAX_THREADS },
	[E_MAX_STREAMS] = { .name = "max-streams", .kind = ST_OPT_INT, .def = "100000", .help = "open streams before new ones get 429",
	  .min = 1, .max = 10000000 },
	[E_CORS_ORIGINS] = { .name = "cors-origins", .kind = ST_OPT_STR, .def = "", .help = "origins allowed by CORS, comma separated, or *" },
	[E_FLUSH_INTERVAL_MS] = { .name = "flush-interval-ms", .kind = ST_OPT_INT, .def = "1000",
	  .help = "the writers' flush interval (readiness waits 3 of them)", .min = 10, .max = 600000 },
	/* Access control (docs/security.md). */
	[E_AUTH_KEYS] = { .name = "auth-keys", .kind = ST_OPT_STR, .def = "",
	  .help = "JWKS file of token verification keys; empty: streams need no token" },
	[E_AUTH_LEEWAY_S] = { .name = "auth-leeway-s", .kind = ST_OPT_INT, .def = "30",
	  .help = "clock skew tolerated on a token's exp, nbf and iat", .min = 0, .max = 300 },
	[E_AUTH_AUDIENCE] = { .name = "auth-audience", .kind = ST_OPT_STR, .def = "", .help = "required token aud (empty: not checked)" },
	[E_AUTH_ISSUER] = { .name = "auth-issuer", .kind = ST_OPT_STR, .def = "", .help = "required token iss (empty: not checked)" },
	[E_AUTH_TOPICS_CLAIM] = { .name = "auth-topics-claim", .kind = ST_OPT_STR, .def = "topics",
	  .help = "the claim listing the topics a token may read" },
	[E_AUTH_COOKIE] = { .name = "auth-cookie", .kind = ST_OPT_STR, .def = "studio_token", .help = "cookie carrying the token" },
	[E_AUTH_QUERY_TOKEN] = { .name = "auth-query-token", .kind = ST_OPT_BOOL, .def = "false",
	  .help = "also accept the token as access_token= in the query (it may end up in proxy logs)" },
	[E_MAX_STREAMS_PER_IP] = { .name = "max-streams-per-ip", .kind = ST_OPT_INT, .def = "0",
	  .help = "open streams per client address before 429 (0: no limit)", .min = 0, .max = 10000000 },
	[E_TRUSTED_PROXIES] = { .name = "trusted-proxies", .kind = ST_OPT_STR, .def = "",
	  .help = "CIDR ranges whose X-Forwarded-For names the client, comma separated" },
	/* Mutual TLS on tls+tcp:// links (docs/security.md). */
	[E_TLS_CERT] = ST_OPT_TLS_CERT,
	[E_TLS_KEY] = ST_OPT_TLS_KEY,
	[E_TLS_CA] = ST_OPT_TLS_CA,
};

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
	const char *listen;

	st_log_init("edge-gateway");
	st_config_parse_or_exit(opts, E_N, argc, argv, "edge-gateway",
	                "edge-gateway --pg-dsn DSN --writers URL[,URL...] [options]", &first_pos);
	if (first_pos != argc)
		st_config_fail("edge-gateway", "unexpected argument '%s'", argv[first_pos]);
	n_writers = st_config_split(opts[E_WRITERS].sval, &writers, ST_PREFLIGHT_MAX_DIAL);
	if (n_writers == 0)
		st_config_fail("edge-gateway", "--writers needs at least one URL");
	st_preflight_tls("edge-gateway", opts, E_N, &opts[E_TLS_CERT], &opts[E_TLS_KEY], &opts[E_TLS_CA]);
	{
		/* Before the database and the writers: an address that cannot listen is bad configuration. */
		const st_preflight_addr addrs[] = {
			{ "listen", opts[E_LISTEN].sval, opts[E_THREADS].ival > 1 ? ST_PREFLIGHT_HTTP_SHARED : ST_PREFLIGHT_HTTP },
			{ "control", opts[E_CONTROL].sval, ST_PREFLIGHT_NNG },
		};
		st_preflight_listen("edge-gateway", addrs, ST_ARRAY_LEN(addrs));
	}
	/* Access control and the per-address bound: local checks, before the database and the writers. */
	if (opts[E_AUTH_KEYS].sval[0] != '\0') {
		auth_config acfg = { .policy = { .leeway_s = (uint32_t)opts[E_AUTH_LEEWAY_S].ival,
		                                 .audience = opts[E_AUTH_AUDIENCE].sval,
		                                 .issuer = opts[E_AUTH_ISSUER].sval,
		                                 .topics_claim = opts[E_AUTH_TOPICS_CLAIM].sval },
		                     .cookie = opts[E_AUTH_COOKIE].sval,
		                     .query_token = opts[E_AUTH_QUERY_TOKEN].ival != 0,
		                     .wall = st_clock_realtime() };
		auth_keys *ks = NULL;
		char why[256];

		if (auth_keys_load(opts[E_AUTH_KEYS].sval, &ks, why, sizeof(why)) != ST_OK)
			st_config_fail("edge-gateway", "--auth-keys %s: %s", opts[E_AUTH_KEYS].sval, why);
		/* Credentials with every origin would let any site read with its visitors' cookies. */
		if (strchr(opts[E_CORS_ORIGINS].sval, '*') != NULL)
			st_config_fail("edge-gateway",
			               "--cors-origins %s: with --auth-keys, list the allowed origins (no *)",
			               opts[E_CORS_ORIGINS].sval);
		e.auth_keys_path = opts[E_AUTH_KEYS].sval;
		/*
		 * A token of up to AUTH_TOKEN_MAX beside cookies and the other
		 * headers must reach the check, so a longer one is answered 401
		 * invalid_token rather than 431 by the head parser.  The head
		 * buffer lives only until the head is parsed (header timeout 10 s).
		 */
		hcfg.max_header_bytes = 4 * AUTH_TOKEN_MAX;
		e.auth = auth_store_new(ks, &acfg);
		scfg.auth = e.auth;
	}
	{
		char why[160];

		if (iplimit_new((uint32_t)opts[E_MAX_STREAMS_PER_IP].ival, opts[E_TRUSTED_PROXIES].sval, &e.ip_limit,
		                why, sizeof(why)) != ST_OK)
			st_config_fail("edge-gateway", "--trusted-proxies %s: %s", opts[E_TRUSTED_PROXIES].sval, why);
		scfg.ip_limit = e.ip_limit;
	}
	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	e.base = event_base_new();
	ST_ASSERT(e.base != NULL);
	e.metrics = st_metrics_new();
	e.flush_interval_ms = (uint64_t)opts[E_FLUSH_INTERVAL_MS].ival;
	e.drain_grace_ms = (uint32_t)opts[E_DRAIN_GRACE_S].ival * 1000;
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
	e.m_paused = st_metrics_counter(e.metrics, "studio_edge_intake_paused_ms_total", NULL,
	                                "Milliseconds the edge stopped reading published messages (flow control).");
	e.m_held = st_metrics_gauge(e.metrics, "studio_sequencer_held", NULL, "Events held behind a gap now.");
	e.m_head = st_metrics_gauge(e.metrics, "studio_history_head", NULL, "The newest seq of the ordered history.");
	e.m_conns = st_metrics_gauge(e.metrics, "studio_http_connections_open", NULL,
	                             "HTTP connections open now (this scrape's included), of --max-streams + 1024.");
	{
		static const double b[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		                            0.075,  0.1,     0.15,   0.2,   0.25,   0.3,   0.4,  0.5,   0.75, 1,
		                            2.5,    5 };

		e.m_delivery = st_metrics_histogram(e.metrics, "studio_edge_delivery_seconds", NULL,
		                                    "From nng handing a published message over to its bytes "
		                                    "reaching the kernel, per stream that keeps up.",
		                                    b, sizeof(b) / sizeof(b[0]));
	}

	e.sm = streams_metrics_new(e.metrics);
	e.n_workers = (size_t)opts[E_THREADS].ival;
	e.w = st_xcalloc(e.n_workers, sizeof(*e.w));
	listen = opts[E_LISTEN].sval;

	if ((rv = pgpool_new(e.base, opts[E_PG_DSN].sval, edge_threaded(&e) ? EDGE_MAIN_POOL_CONNS : EDGE_POOL_CONNS,
	                     &e.pool)) != ST_OK)
		st_config_fail("edge-gateway", "--pg-dsn: %s", st_err_str(rv));
	/* One connection runs only the head query and gap fills: live delivery
	 * never waits behind replays that hold every other connection. */
	pgpool_reserve_fills(e.pool, 1);
	(void)sequencer_new(st_clock_system(), on_emit, on_fill, &e, &e.seq);
	e.flow = flow_budget_new(st_clock_system());
	scfg.replay_cap = (uint64_t)opts[E_REPLAY_CAP].ival;
	scfg.heartbeat_ms = (uint32_t)opts[E_HEARTBEAT_S].ival * 1000;
	scfg.max_streams = (uint32_t)opts[E_MAX_STREAMS].ival;
	scfg.drain_grace_ms = e.drain_grace_ms;

	hcfg.cors_origins = opts[E_CORS_ORIGINS].sval;
	/* Streams plus room for the ops endpoints and for refusals to be answered. */
	hcfg.max_conns = scfg.max_streams + 1024;
	if (!edge_threaded(&e)) {
		worker *w = &e.w[0];

		w->e = &e;
		w->base = e.base;
		w->pool = e.pool;
		w->streams = streams_new(e.base, e.pool, e.sm, st_clock_system(), &scfg);
		if ((rv = http_server_new(e.base, listen, &hcfg, http_cb, w, &w->http)) != ST_OK)
			st_config_fail("edge-gateway", "--listen %s: %s", listen, st_err_str(rv));
		http_server_set_cors_credentials(w->http, e.auth != NULL);
		http_server_set_delivery_histogram(w->http, e.m_delivery);
	} else {
		char bound[600];

		e.inbox = st_mailbox_new(e.base, main_inbox_cb, &e);
		ST_ASSERT(e.inbox != NULL);
		e.conn_limit = http_conn_limit_new(hcfg.max_conns);
		snprintf(bound, sizeof(bound), "%s", listen);
		for (size_t i = 0; i < e.n_workers; i++) {
			if ((rv = worker_init(&e, &e.w[i], opts[E_PG_DSN].sval, bound, &hcfg, &scfg)) != ST_OK)
				st_config_fail("edge-gateway", "--listen %s (loop %zu): %s", bound, i, st_err_str(rv));
			/* Port 0: the first server picked one; the others share it. */
			if (i == 0)
				listen_with_port(listen, http_server_port(e.w[0].http), bound, sizeof(bound));
		}
	}
	if (opts[E_CONTROL].sval[0] != '\0' &&
	    (rv = st_control_new(e.base, opts[E_CONTROL].sval, control_cb, &e, &e.control)) != ST_OK)
		st_config_fail("edge-gateway", "--control %s: %s", opts[E_CONTROL].sval, st_err_str(rv));
	if ((rv = sub_new(e.base, (const char *const *)writers, n_writers, on_pub, &e, &e.sub)) != ST_OK)
		st_config_fail("edge-gateway", "--writers: %s", st_err_str(rv));

	e.ev_tick = event_new(e.base, -1, EV_PERSIST, tick_cb, &e);
	e.ev_head_retry = event_new(e.base, -1, 0, head_retry_cb, &e);
	e.ev_exit = event_new(e.base, -1, 0, exit_cb, &e);
	e.ev_flow = event_new(e.base, -1, 0, flow_cb, &e);
	e.ev_term = evsignal_new(e.base, SIGTERM, signal_cb, &e);
	e.ev_int = evsignal_new(e.base, SIGINT, signal_cb, &e);
	e.ev_hup = evsignal_new(e.base, SIGHUP, hup_cb, &e);
	ST_ASSERT(e.ev_tick && e.ev_head_retry && e.ev_exit && e.ev_term && e.ev_int && e.ev_flow && e.ev_hup);
	event_add(e.ev_tick, &tick);
	event_add(e.ev_term, NULL);
	event_add(e.ev_int, NULL);
	/* Without access control SIGHUP is caught too (and logged), rather than killing the edge. */
	event_add(e.ev_hup, NULL);
	head_query_start(&e);

	if (edge_threaded(&e)) {
		sigset_t all, old;

		/* Signals are main's (libevent's handler feeds main's loop): workers block them. */
		sigemptyset(&all);
		sigaddset(&all, SIGTERM);
		sigaddset(&all, SIGINT);
		sigaddset(&all, SIGHUP);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		for (size_t i = 0; i < e.n_workers; i++) {
			if (pthread_create(&e.w[i].thread, NULL, worker_main, &e.w[i]) != 0)
				st_config_fail("edge-gateway", "--threads: cannot start loop thread %zu", i);
			e.w[i].started = true;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}

	if (e.auth)
		st_info("access control on: %zu keys from %s; streams need a token", auth_store_key_count(e.auth),
		        e.auth_keys_path);
	else
		st_warn("access control off (no --auth-keys): anyone who reaches this edge reads every topic");
	st_info("listening on %s, %zu writer url(s), %zu loop thread(s)", listen, n_writers, e.n_workers);
	event_base_dispatch(e.base);
	st_info("exiting with %zu streams open", edge_streams_count(&e));
	rc = 0;
	/* The drain is done; closing must not hold a rolling restart (see st_util.h). */
	st_exit_watchdog("edge-gateway", EDGE_TEARDOWN_S, rc);

	if (edge_threaded(&e)) {
		/* Stop every worker loop, join, then free with no loop running. */
		edge_post_all(&e, emsg_new(EMSG_STOP, 0, 0));
		for (size_t i = 0; i < e.n_workers; i++)
			if (e.w[i].started)
				pthread_join(e.w[i].thread, NULL);
		e.stopping = true;
		for (size_t i = 0; i < e.n_workers; i++)
			worker_fini(&e.w[i]);
	}
	sub_free(e.sub);
	st_control_free(e.control);
	if (!edge_threaded(&e))
		http_server_free(e.w[0].http);
	if (e.head_query)
		pgpool_cancel(e.head_query);
	if (e.fill_job)
		replay_cancel(e.fill_job);
	if (!edge_threaded(&e))
		streams_free(e.w[0].streams);
	sequencer_free(e.seq);
	flow_budget_free(e.flow);
	pgpool_free(e.pool);
	st_mailbox_free(e.inbox);
	http_conn_limit_free(e.conn_limit);
	free(e.w);
	streams_metrics_free(e.sm);
	event_free(e.ev_tick);
	event_free(e.ev_head_retry);
	event_free(e.ev_exit);
	event_free(e.ev_flow);
	event_free(e.ev_term);
	event_free(e.ev_int);
	event_free(e.ev_hup);
	/* After every worker was joined: no check can hold the store any more. */
	auth_store_free(e.auth);
	iplimit_free(e.ip_limit);
	st_metrics_free(e.metrics);
	for (size_t i = 0; i < n_writers; i++)
		free(writers[i]);
	free(writers);
	event_base_free(e.base);
	st_tls_unload();
	/* nng's own threads and buffers end here; without it ASan counts them as leaks. */
	nng_fini();
	return rc;
}
