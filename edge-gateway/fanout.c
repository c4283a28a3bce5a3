/*
 * fanout: the workers of fanout.h and the messages between them and main.
 *
 * One message type (emsg) travels both ways through st_mailbox, the one
 * place where threads meet: main -> workers BATCH, HEAD, DRAIN, STOP;
 * worker -> main DRAINED, FLOW.  A message posted to every worker is one
 * allocation whose count starts at the number of workers; each worker
 * releases its count when it has handled it (or, stopped, skipped it).
 */
#include "fanout.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "flow.h"
#include "st_clock.h"
#include "st_log.h"
#include "st_mailbox.h"
#include "st_util.h"

enum emsg_kind {
	EMSG_BATCH,   /* main -> workers: frames of the ordered history, head after them */
	EMSG_HEAD,    /* main -> workers: the head moved without frames */
	EMSG_DRAIN,   /* main -> workers */
	EMSG_KEYS,    /* main -> workers: the key set was swapped (streams of a removed key end) */
	EMSG_STOP,    /* main -> workers: leave the loop */
	EMSG_DRAINED, /* worker -> main: no stream left */
	EMSG_FLOW     /* worker -> main: re-check flow control */
};

/* One allocation, shared by every worker it is posted to; the last one frees it. */
typedef struct emsg {
	enum emsg_kind kind;
	atomic_uint refs;
	uint64_t head;
	size_t n;
	frame *frames[]; /* one reference each, for all workers together */
} emsg;

struct fanout_worker {
	fanout *f;
	struct event_base *base; /* owned, or main's with n == 1 */
	pgpool *pool;            /* owned */
	streams *streams;        /* owned */
	http_server *http;       /* owned */
	st_mailbox *inbox;       /* owned: main -> this worker */
	struct event *ev_flow;   /* owned: re-evaluates backpressure while behind */
	pthread_t thread;
	bool started;           /* thread running (n > 1) */
	bool stopped;           /* EMSG_STOP seen: only release what follows */
	atomic_bool behind;     /* streams_backpressure, as of the worker's last look */
	atomic_uint inflight;   /* batches posted and not yet published */
	atomic_bool head_known; /* streams_ready, as of the last message handled: fanout_ready */
};

struct fanout {
	fanout_config cfg; /* http/streams/listen pointers borrowed for fanout_new only */
	struct event_base *main_base;
	fanout_worker *w;       /* owned, cfg.n */
	st_mailbox *inbox;      /* owned: workers -> main */
	http_conn_limit *limit; /* owned, n > 1: one connection bound for every server */
	atomic_bool flow_wait;  /* main looked and wants a wake-up when the intake frees */
	uint64_t posted_head;
	bool head_posted;
	bool drain_posted;
	size_t n_drained; /* workers that reported no stream left */
	bool stopping;    /* main's loop has ended: mailbox items are only freed */
};

static emsg *
emsg_new(enum emsg_kind kind, uint64_t head, size_t n)
{
	emsg *m = st_xmalloc(sizeof(*m) + n * sizeof(m->frames[0]));

	m->kind = kind;
	atomic_init(&m->refs, 1);
	m->head = head;
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
post_all(fanout *f, emsg *m)
{
	atomic_store_explicit(&m->refs, (unsigned)f->cfg.n, memory_order_relaxed);
	for (size_t i = 0; i < f->cfg.n; i++) {
		if (m->kind == EMSG_BATCH)
			atomic_fetch_add(&f->w[i].inflight, 1);
		st_mailbox_post(f->w[i].inbox, m);
	}
}

/* ---- on a worker's loop ------------------------------------------------ */

static void
worker_tell_main(fanout_worker *w, enum emsg_kind kind)
{
	st_mailbox_post(w->f->inbox, emsg_new(kind, 0, 0));
}

/* Its backpressure into the flag main reads; wakes main if it waits. */
static void
worker_flow_eval(fanout_worker *w)
{
	struct timeval tv = st_timeval_ms(FLOW_RECHECK_MS);
	bool behind = streams_backpressure(w->streams);

	atomic_store(&w->behind, behind);
	if (behind && !event_pending(w->ev_flow, EV_TIMEOUT, NULL))
		event_add(w->ev_flow, &tv);
	if (atomic_exchange(&w->f->flow_wait, false))
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
	fanout_worker *w = arg;
	emsg *m = item;

	switch (w->stopped ? EMSG_STOP : m->kind) {
	case EMSG_BATCH:
		streams_publish(w->streams, m->frames, m->n, m->head);
		atomic_fetch_sub(&w->inflight, 1);
		worker_flow_eval(w);
		break;
	case EMSG_HEAD: streams_set_head(w->streams, m->head); break;
	case EMSG_DRAIN: streams_drain(w->streams, worker_drained, w); break;
	case EMSG_KEYS: streams_keys_changed(w->streams); break;
	case EMSG_STOP:
		if (!w->stopped) {
			w->stopped = true;
			event_base_loopexit(w->base, NULL);
		}
		if (m->kind == EMSG_BATCH)
			atomic_fetch_sub(&w->inflight, 1);
		break;
	default: break;
	}
	if (streams_ready(w->streams))
		atomic_store(&w->head_known, true);
	emsg_release(m);
}

static void
worker_http_cb(http_req *req, void *arg)
{
	fanout_worker *w = arg;

	w->f->cfg.on_http(req, w, w->f->cfg.arg);
}

static void *
worker_main(void *arg)
{
	fanout_worker *w = arg;

	/* Kept running while idle: the mailbox event is only active when something was posted. */
	event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

/* ---- on main ------------------------------------------------------------ */

/* Main's mailbox: what the workers report. */
static void
main_inbox_cb(void *item, void *arg)
{
	fanout *f = arg;
	emsg *m = item;

	if (!f->stopping && m->kind == EMSG_DRAINED) {
		f->n_drained++;
		if (f->n_drained == f->cfg.n && f->cfg.on_drained != NULL)
			f->cfg.on_drained(f->cfg.arg);
	} else if (!f->stopping && m->kind == EMSG_FLOW && f->cfg.on_flow != NULL) {
		f->cfg.on_flow(f->cfg.arg);
	}
	emsg_release(m);
}

/* "ADDR:PORT" with the port replaced (a --listen of port 0 binds one fresh port for all). */
static void
listen_with_port(const char *listen, int port, char *out, size_t cap)
{
	const char *colon = strrchr(listen, ':');
	int hl = colon ? (int)(colon - listen) : (int)strlen(listen);

	snprintf(out, cap, "%.*s:%d", hl, listen, port);
}

/* Main thread, before any worker runs.  listen: the address, with a bound port after the first. */
static st_err
worker_init(fanout *f, fanout_worker *w, const char *listen)
{
	const fanout_config *c = &f->cfg;
	st_err rv;

	w->f = f;
	atomic_init(&w->behind, false);
	atomic_init(&w->inflight, 0);
	w->base = c->n == 1 ? f->main_base : event_base_new();
	ST_ASSERT(w->base != NULL);
	if ((rv = pgpool_new(w->base, c->pg_dsn, FANOUT_POOL_CONNS(c->n), &w->pool)) != ST_OK)
		return rv;
	w->streams = streams_new(w->base, w->pool, c->sm, st_clock_system(), c->streams);
	/* One server owns the address; several share it (SO_REUSEPORT) and one connection bound. */
	rv = c->n == 1 ? http_server_new(w->base, listen, c->http, worker_http_cb, w, &w->http)
		       : http_server_new_shared(w->base, listen, c->http, f->limit, worker_http_cb, w, &w->http);
	if (rv != ST_OK)
		return rv;
	http_server_set_cors_credentials(w->http, c->cors_credentials);
	http_server_set_delivery_histogram(w->http, c->delivery);
	w->inbox = st_mailbox_new(w->base, worker_inbox_cb, w);
	w->ev_flow = event_new(w->base, -1, 0, worker_flow_cb, w);
	ST_ASSERT(w->inbox && w->ev_flow);
	return ST_OK;
}

/* Main thread, after the worker's thread was joined (or never started): no loop runs it. */
static void
worker_fini(fanout_worker *w)
{
	w->stopped = true;
	st_mailbox_free(w->inbox); /* releases what was still queued */
	http_server_free(w->http); /* closes every stream: on_close runs into the registry */
	streams_free(w->streams);
	pgpool_free(w->pool);
	if (w->ev_flow)
		event_free(w->ev_flow);
	if (w->base != NULL && w->base != w->f->main_base)
		event_base_free(w->base); /* the last write_ref cleanups release their frames here */
}

st_err
fanout_new(struct event_base *main_base, const fanout_config *cfg, fanout **out, char *why, size_t cap)
{
	fanout *f;
	char bound[600];
	st_err rv = ST_OK;

	ST_ASSERT(cfg->n >= 1 && cfg->n <= FANOUT_MAX && cfg->on_http != NULL);
	f = st_xcalloc(1, sizeof(*f));
	f->cfg = *cfg;
	f->main_base = main_base;
	atomic_init(&f->flow_wait, false);
	f->inbox = st_mailbox_new(main_base, main_inbox_cb, f);
	ST_ASSERT(f->inbox != NULL);
	if (cfg->n > 1)
		f->limit = http_conn_limit_new(cfg->http->max_conns);
	f->w = st_xcalloc(cfg->n, sizeof(*f->w));
	snprintf(bound, sizeof(bound), "%s", cfg->listen);
	for (size_t i = 0; i < cfg->n; i++) {
		if ((rv = worker_init(f, &f->w[i], bound)) != ST_OK) {
			snprintf(why, cap, "--listen %s (loop %zu): %s", bound, i, st_err_str(rv));
			f->cfg.n = i + 1; /* free what was made */
			fanout_free(f);
			return rv;
		}
		/* Port 0: the first server picked one; the others share it. */
		if (i == 0)
			listen_with_port(cfg->listen, http_server_port(f->w[0].http), bound, sizeof(bound));
	}
	*out = f;
	return ST_OK;
}

st_err
fanout_start(fanout *f)
{
	sigset_t all, old;
	st_err rv = ST_OK;

	if (f->cfg.n == 1)
		return ST_OK; /* the worker is the main loop */
	/* Signals are main's (libevent's handler feeds main's loop): workers block them. */
	sigemptyset(&all);
	sigaddset(&all, SIGTERM);
	sigaddset(&all, SIGINT);
	sigaddset(&all, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (size_t i = 0; i < f->cfg.n && rv == ST_OK; i++) {
		if (pthread_create(&f->w[i].thread, NULL, worker_main, &f->w[i]) != 0)
			rv = ST_ESYS;
		else
			f->w[i].started = true;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rv;
}

void
fanout_stop(fanout *f)
{
	f->stopping = true;
	if (f->cfg.n == 1)
		return; /* main's loop, already ended */
	post_all(f, emsg_new(EMSG_STOP, 0, 0));
	for (size_t i = 0; i < f->cfg.n; i++)
		if (f->w[i].started)
			pthread_join(f->w[i].thread, NULL);
}

void
fanout_free(fanout *f)
{
	if (f == NULL)
		return;
	f->stopping = true;
	for (size_t i = 0; i < f->cfg.n; i++)
		if (f->w[i].f != NULL)
			worker_fini(&f->w[i]);
	st_mailbox_free(f->inbox);
	http_conn_limit_free(f->limit);
	free(f->w);
	free(f);
}

void
fanout_publish(fanout *f, frame *const *frames, size_t n, uint64_t head)
{
	emsg *m = emsg_new(EMSG_BATCH, head, n);

	for (size_t i = 0; i < n; i++)
		m->frames[i] = frame_ref(frames[i]);
	f->posted_head = head;
	f->head_posted = true;
	post_all(f, m);
}

void
fanout_set_head(fanout *f, uint64_t head)
{
	if (f->head_posted && head <= f->posted_head)
		return;
	f->posted_head = head;
	f->head_posted = true;
	post_all(f, emsg_new(EMSG_HEAD, head, 0));
}

bool
fanout_ready(const fanout *f, const char **why)
{
	for (size_t i = 0; i < f->cfg.n; i++) {
		if (!pgpool_ready(f->w[i].pool))
			return *why = "no database connection", false;
		if (!atomic_load(&((fanout_worker *)&f->w[i])->head_known))
			return *why = "history head not known yet", false;
	}
	return true;
}

bool
fanout_head_posted(const fanout *f)
{
	return f->head_posted;
}

void
fanout_flow_look(fanout *f, bool *want, bool *must)
{
	/*
	 * Ask for a wake-up before looking: a worker that frees the intake
	 * after our look sees the request (seq_cst), so no wake is lost.
	 */
	atomic_store(&f->flow_wait, true);
	*want = *must = false;
	for (size_t i = 0; i < f->cfg.n; i++) {
		flow_worker_ask(atomic_load(&f->w[i].behind), atomic_load(&f->w[i].inflight), want, must);
	}
}

void
fanout_flow_settled(fanout *f)
{
	atomic_store(&f->flow_wait, false);
}

void
fanout_drain(fanout *f)
{
	if (f->drain_posted)
		return;
	f->drain_posted = true;
	post_all(f, emsg_new(EMSG_DRAIN, 0, 0));
}

void
fanout_keys_changed(fanout *f)
{
	post_all(f, emsg_new(EMSG_KEYS, 0, 0));
}

bool
fanout_drained(const fanout *f)
{
	return f->n_drained == f->cfg.n;
}

size_t
fanout_streams_open(const fanout *f)
{
	return streams_metrics_open(f->cfg.sm);
}

size_t
fanout_conns_open(const fanout *f)
{
	/* One worker runs on main's loop; several share one bound (an atomic). */
	return f->cfg.n == 1 ? http_server_conns_open(f->w[0].http) : http_conn_limit_open(f->limit);
}

size_t
fanout_workers(const fanout *f)
{
	return f->cfg.n;
}

int
fanout_port(const fanout *f)
{
	return http_server_port(f->w[0].http);
}

streams *
fanout_worker_streams(fanout_worker *w)
{
	return w->streams;
}

pgpool *
fanout_worker_pool(fanout_worker *w)
{
	return w->pool;
}

http_server *
fanout_worker_http(fanout_worker *w)
{
	return w->http;
}
