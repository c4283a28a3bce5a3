/*
 * refusal: the stream requests that retrying can fix (the edge drains, is
 * not ready, serves its maximum of streams, cannot reach its database, the
 * client's address holds its --max-streams-per-ip) and what each is
 * answered.
 *
 * A browser's EventSource treats every answer but 200 as final and never
 * reconnects, so a client that asked for SSE gets 200, one reconnect
 * envelope (its retry: hint, the reason) and the end of the response.
 * NDJSON and json-seq clients read statuses: they get a problem document,
 * 429 for overloaded and the per-address limit, 503 for the rest, with
 * Retry-After in whole seconds rounded up.  Hints are jittered uniformly
 * over each reason's range ([mid/2, 3 mid/2] around its middle; 10..15 s
 * for the per-address limit, whose wire reason is "overloaded"), so
 * refused clients do not come back together.
 *
 * Pure but for refusal_send and refusal_send_jittered, the two calls that
 * answer a request (st_http) and count it (studio_stream_refusals_total):
 * refusal_answer_make decides the whole answer, and refusal_test checks it
 * for every reason and format.
 *
 * Threads: a refusals is confined to the loop of the registry that owns it
 * (its streams borrow it); the rest is stateless.
 */
#ifndef EDGE_REFUSAL_H
#define EDGE_REFUSAL_H

#include <stdint.h>

#include "frame.h"
#include "st_http.h"
#include "st_metrics.h"

/*
 * REFUSAL_IP_LIMIT comes last: the first REFUSAL_RETRY_COUNT reasons are
 * the labels of studio_stream_refusals_total; the per-address limit is
 * counted in studio_ip_limit_refused_total (the registry passes that
 * counter in its slot).
 */
enum refusal {
	REFUSAL_DRAINING,
	REFUSAL_NOT_READY,
	REFUSAL_OVERLOADED,
	REFUSAL_UNAVAILABLE,
	REFUSAL_IP_LIMIT,
	REFUSAL_COUNT
};
#define REFUSAL_RETRY_COUNT REFUSAL_IP_LIMIT

/*
 * The reason on the wire (the reconnect envelope: "overloaded" for the
 * per-address limit too), and the metric label of the first
 * REFUSAL_RETRY_COUNT reasons; "?" out of range.
 */
const char *refusal_name(enum refusal why);
/* The middle of the reason's retry hint: 1 s; overloaded 5 s (a full edge
 * frees slots slowly); the per-address limit 12.5 s (10..15 s). */
uint32_t refusal_retry_ms(enum refusal why);
/* A stream's Content-Type in this format (a refused SSE request gets a stream too). */
const char *refusal_content_type(enum frame_format fmt);

/*
 * The whole answer to a refusal, decided without I/O.  envelope is owned
 * by the answer (refusal_answer_fini releases it).
 */
typedef struct refusal_answer {
	int status;               /* 200 (SSE), 429 (overloaded) or 503 */
	const char *content_type; /* SSE: the stream's; NULL: a problem document */
	const char *title;        /* the problem's title; NULL for SSE */
	char headers[40];         /* "Retry-After: N\r\n" (problem); "" for SSE */
	frame *envelope;          /* SSE: the reconnect envelope; NULL otherwise */
} refusal_answer;

void refusal_answer_make(enum refusal why, enum frame_format fmt, uint32_t retry_ms, refusal_answer *out);
void refusal_answer_fini(refusal_answer *a);

/*
 * A registry's refusals: the jitter's state and the counters.  Embedded in
 * the registry; its fields are this module's.
 */
typedef struct refusals {
	uint64_t rng; /* xorshift state */
	st_counter *counted
		[REFUSAL_COUNT]; /* borrowed (studio_stream_refusals_total by reason; IP_LIMIT: studio_ip_limit_refused_total) */
} refusals;

/* seed: anything that differs between registries (0 is replaced: xorshift would stay at 0). */
void refusal_init(refusals *r, uint64_t seed, st_counter *const counted[REFUSAL_COUNT]);
/* A hint drawn uniformly from [mid/2, mid/2 + mid]. */
uint32_t refusal_jitter(refusals *r, uint32_t mid);
/* The reason's hint drawn uniformly from its range (see above). */
uint32_t refusal_hint(refusals *r, enum refusal why);
/* Answers req with the refusal (hint retry_ms) and counts it.  Frees req. */
void refusal_send(refusals *r, http_req *req, enum frame_format fmt, enum refusal why, uint32_t retry_ms,
		  const char *detail);
/* The same with the reason's jittered hint (refusal_hint).  Frees req. */
void refusal_send_jittered(refusals *r, http_req *req, enum frame_format fmt, enum refusal why, const char *detail);

#endif
