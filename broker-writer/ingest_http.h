/*
 * ingest_http: publishing over HTTP (--ingest-http ADDR:PORT), beside the
 * nng ingest and into the same pipeline.  docs/publishing.md (for users),
 * docs/writer.md "Publishing over HTTP" (the decisions).
 *
 * POST /v1/events, Content-Type application/json, a body of one event
 * object or an array of 1..10,000; members topic, about, data (any JSON
 * value; null or absent: a change signal), key; an Idempotency-Key header
 * is the key of a single event.  Before the body is read: 404/405, 503
 * (the loop refuses: ingest_refusal), 415, 401 (--ingest-keys: a Bearer
 * token of the same store as the nng ingest), 400 (no body), 413 (over
 * PROTO_MAX_REQUEST), 429 (the shared in-flight budget cannot take the
 * request's worst case).  Then the body is parsed (st_json, `data` kept as
 * its text), re-encoded as the nng request it would be and decoded by
 * proto_request_decode, so both ingests validate with one function and
 * refuse with the same detail words; 403 when the token does not cover an
 * event's topic.  The request then goes to the loop's ingest_request_fn
 * exactly as an nng one, and is answered after the commit: 200
 * {"seqs":[...]}, or the problem for the code (invalid 400, busy 429,
 * unavailable 503, with Retry-After).
 *
 * Threads: everything runs on the writer's loop thread.
 */
#ifndef BW_INGEST_HTTP_H
#define BW_INGEST_HTTP_H

#include "ingest.h"
#include "st_err.h"
#include "st_metrics.h"

/* Connections of the HTTP ingest (each carries one request at a time). */
#define INGEST_HTTP_MAX_CONNS 1024u

struct event_base;
struct st_auth_store;
typedef struct ingest_http ingest_http;

typedef struct ingest_http_config {
	ingest *in;                 /* the nng ingest: budget and refusal state (borrowed) */
	struct st_auth_store *auth; /* NULL: no producer credentials; borrowed */
	st_counter *invalid, *busy, *unavailable, *unauthorized, *forbidden; /* each may be NULL */
	ingest_request_fn fn; /* the loop's handler, as given to ingest_new */
	void *arg;
} ingest_http_config;

/* Listens on addr (ADDR:PORT).  Loop thread, at start.  ST_EINVAL / ST_ESYS as http_server_new. */
st_err ingest_http_new(struct event_base *base, const char *addr, const ingest_http_config *cfg, ingest_http **out);
/* Closes the listener and every connection; requests the loop still holds are freed (never answered). NULL-safe. */
void ingest_http_free(ingest_http *h);

#endif
