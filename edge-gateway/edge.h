/*
 * edge: one edge gateway's parts wired together (edge.c's DESIGN): the
 * writers' intake (sub), the ordered history (sequencer, with gap fills and
 * the head query on main's pool), flow control, the loops serving streams
 * (fanout), readiness, drain, the control socket, signals and metrics.
 * main.c configures it, builds it with edge_new, runs it with edge_run and
 * frees it with edge_free.
 *
 * Thread: the main thread; evthread_use_pthreads() must have been called
 * before edge_new (the workers' mailboxes wake loops across threads).
 */
#ifndef EDGE_EDGE_H
#define EDGE_EDGE_H

#include <stddef.h>
#include <stdint.h>

#include "st_auth.h"
#include "st_err.h"
#include "st_http.h"
#include "streams.h"

typedef struct edge edge;

typedef struct edge_config {
	const char *pg_dsn;
	const char *const *writers; /* n_writers >= 1 sub0 dial URLs (borrowed until edge_free) */
	size_t n_writers;
	const char *listen;         /* HTTP ADDR:PORT */
	const char *control;        /* nng rep0 URL of the ops socket; "" = none */
	const char *metrics_listen; /* ADDR:PORT serving /metrics instead of listen; NULL/"" = metrics on listen */
	size_t threads;             /* loops serving streams (fanout.h) */
	uint64_t flush_interval_ms; /* the writers' (readiness waits 3 of them) */
	/* Copied; edge_new sets streams.drain_grace_ms and http.max_conns (streams plus 1024). */
	streams_config streams; /* auth and ip_limit borrowed: they outlive edge_free */
	http_server_config http;
	const char *auth_keys_path;  /* reloaded into streams.auth on SIGHUP, `reload` and a change of the file */
	uint64_t auth_keys_watch_ms; /* how often the file is looked at; 0 = never */
	uint32_t drain_grace_ms;
} edge_config;

/*
 * Builds everything, starts the head query and the worker loops.  On an
 * error, why says which option is at fault (the caller ends the process
 * with it, as a configuration error); *out is then unset and what was
 * built is not freed.
 */
st_err edge_new(const edge_config *cfg, edge **out, char *why, size_t cap);
/* Runs the main loop until a drain after SIGTERM/SIGINT ends it. */
void edge_run(edge *e);
/* Stops and joins the worker loops, then frees everything with no loop running.  NULL-safe. */
void edge_free(edge *e);

#endif
