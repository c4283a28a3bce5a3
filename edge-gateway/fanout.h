/*
 * fanout: the loops that serve HTTP streams, and the hand-over of the
 * ordered history to them.
 *
 * A worker is one loop with its own HTTP server, streams registry (hub,
 * heartbeats, drain) and small pool for resume checks and replays.  With
 * n == 1 the one worker runs on the main loop and no thread is started;
 * with n > 1 each worker has a loop thread of its own and the servers share
 * the listen address (SO_REUSEPORT: the kernel spreads connections) and
 * one connection limit.  Either way the history takes the same path: every
 * sequencer emit becomes ONE message posted to every worker's st_mailbox
 * (each frame referenced once for all of them, the message counted by an
 * atomic and freed by the last worker), a head that moved without frames a
 * head message (posted only when it moved).  Frames are immutable and
 * atomically counted, and carry their own delivery origin
 * (frame_origin_ns), so nothing about a message travels beside it.
 *
 * Flow control sees every worker: each evaluates its own
 * streams_backpressure on its loop (after each batch, and every
 * FLOW_RECHECK_MS while behind) into an atomic flag; fanout_flow_look reports
 * what each worker asks (flow_worker_ask: "want a pause" while its flag is
 * set or FLOW_INFLIGHT_MAX batches wait, "must pause" at FLOW_MAILBOX_MAX,
 * the hard bound of a mailbox).  A worker that
 * frees the intake wakes main (on_flow) only if main asked since its last
 * look, so wake-ups cannot flood.
 *
 * Drain: fanout_drain posts drain to every worker; each spreads its own
 * reconnect hints over the grace (so the union is spread too) and reports
 * back; on_drained runs on main once every worker reported "no stream
 * left".  Stop: fanout_stop ends every worker thread (through its mailbox)
 * and joins it; fanout_free then frees everything with no worker loop
 * running, so no callback can follow a free.
 *
 * Bounds: per worker, at most FLOW_MAILBOX_MAX batch messages queued
 * (main stops reading published messages before that), each <= one
 * published message's frames (<= 256) or one fill chunk.
 *
 * Threads: fanout_* on the main loop's thread; the fanout_worker_*
 * accessors on the worker's own loop (inside on_http).
 */
#ifndef EDGE_FANOUT_H
#define EDGE_FANOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "pgpool.h"
#include "st_err.h"
#include "st_http.h"
#include "streams.h"

#define FANOUT_MAX 64u
/*
 * Each worker's database connections (resume checks and replays).  One
 * worker gets 3 of the edge's 4 (main keeps 1 for the head query and gap
 * fills, FANOUT_MAIN_POOL_CONNS), as when the edge was one pool of 4 with
 * one reserved for fills: three checks may wait on the database at once
 * and the edge still has a connection up.  N workers get 2 each (main 2).
 */
#define FANOUT_POOL_CONNS(n) ((n) == 1 ? 3u : 2u)
#define FANOUT_MAIN_POOL_CONNS(n) ((n) == 1 ? 1u : 2u)

struct event_base;
struct st_histogram;
typedef struct fanout fanout;
typedef struct fanout_worker fanout_worker;

/* A request on worker w's loop (n > 1: its own thread). */
typedef void (*fanout_http_fn)(http_req *req, fanout_worker *w, void *arg);

typedef struct fanout_config {
	size_t n;                       /* workers, 1..FANOUT_MAX */
	const char *pg_dsn;             /* each worker's pool (copied by pgpool) */
	const char *listen;             /* ADDR:PORT; port 0 binds one fresh port for every worker */
	const http_server_config *http; /* max_conns is the bound of all workers together */
	const streams_config *streams;
	streams_metrics *sm;           /* shared by every registry; borrowed */
	struct st_histogram *delivery; /* studio_edge_delivery_seconds; borrowed */
	bool cors_credentials;         /* http_server_set_cors_credentials */
	fanout_http_fn on_http;
	void (*on_flow)(void *arg);    /* main: a worker freed the intake after fanout_flow_look asked */
	void (*on_drained)(void *arg); /* main: every worker reported no stream left after fanout_drain */
	void *arg;
} fanout_config;

/*
 * Builds every worker (loop, pool, registry, server listening) on the
 * main thread; nothing runs yet.  On an error, why says what failed
 * ("--listen ADDR (loop I): ...") and nothing is left allocated.
 */
st_err fanout_new(struct event_base *main_base, const fanout_config *cfg, fanout **out, char *why, size_t cap);
/* n > 1: starts the worker threads (signals blocked in them: they are main's). */
st_err fanout_start(fanout *f);
/* Ends and joins the worker threads; the loops' objects stay until fanout_free.  Main's loop has ended. */
void fanout_stop(fanout *f);
/* After fanout_stop (or instead of it, when never started).  NULL-safe. */
void fanout_free(fanout *f);

/* One batch of the ordered history, frames ascending, head as of after them: one message for every worker. */
void fanout_publish(fanout *f, frame *const *frames, size_t n, uint64_t head);
/* The head moved without frames; posted only when above the last one posted. */
void fanout_set_head(fanout *f, uint64_t head);
/*
 * Every worker has a database connection up and knows the head (atomics:
 * any thread).  /readyz answers for the whole edge, not for the worker
 * that happened to accept it: with one worker ready and another still
 * connecting, a 200 would send streams to a worker that refuses them.
 * On false, why says which part is missing.
 */
bool fanout_ready(const fanout *f, const char **why);
/* A head or batch was posted: every worker knows a head. */
bool fanout_head_posted(const fanout *f);

/* Flow control on main: asks for a wake-up, then reads every worker.  *want: a pause is asked; *must: a mailbox is full. */
void fanout_flow_look(fanout *f, bool *want, bool *must);
/* Main decided not to hold the intake: no wake-up is needed. */
void fanout_flow_settled(fanout *f);

/* Posts drain to every worker (once). */
void fanout_drain(fanout *f);
/* The auth keys were swapped: every worker ends the streams whose key is gone (streams_keys_changed). */
void fanout_keys_changed(fanout *f);
/* Every worker reported no stream left since fanout_drain. */
bool fanout_drained(const fanout *f);
/* Streams open in every registry. */
size_t fanout_streams_open(const fanout *f);
/* HTTP connections open now on --listen (every worker's server together).  Main thread. */
size_t fanout_conns_open(const fanout *f);
size_t fanout_workers(const fanout *f);
/*
 * The port every worker listens on (--listen's, or the one picked for
 * port 0).  Any thread.  A seam for fanout_test, which listens on port 0
 * and has no worker at hand to ask before its first request.
 */
int fanout_port(const fanout *f);

/* On w's loop. */
streams *fanout_worker_streams(fanout_worker *w);
pgpool *fanout_worker_pool(fanout_worker *w);
http_server *fanout_worker_http(fanout_worker *w);

#endif
