/*
 * streamreq: what a GET or HEAD /v1/stream asks for, read from its query
 * string, Accept and Last-Event-ID headers, or the problem that refuses it.
 *
 * A pure function of its inputs (no loop, no clock, no database): the
 * stream module calls it first and acts on the result; the unit test and
 * the fuzz target call it alone.  Every input is bounded before anything is
 * allocated: the query by http_query_each (256 pairs of 1 KiB), topics by
 * STREAMREQ_MAX_TOPICS, a topic by the writer's topic rule.
 */
#ifndef STREAMREQ_H
#define STREAMREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "st_err.h"

#define STREAMREQ_MAX_TOPICS 64

typedef struct streamreq {
	char **topics;         /* owned: STREAMREQ_MAX_TOPICS slots, n_topics used, each a copy */
	size_t *topic_lens;    /* owned, the same slots */
	size_t n_topics;       /* 1..STREAMREQ_MAX_TOPICS, a repeated topic counted once */
	enum frame_format fmt; /* format= wins over Accept */
	bool has_after;        /* Last-Event-ID (wins) or last_event_id= */
	uint64_t after;
	bool has_until;     /* until=head or until=N */
	bool until_head;    /* until=head (resolved later against the database head) */
	uint64_t until;     /* until=N */
	char *access_token; /* owned; access_token= when query tokens are allowed, else NULL */
} streamreq;

/* Why a request is refused: a status and static texts for the problem document. */
typedef struct streamreq_problem {
	int status; /* 400 or 406 */
	const char *title;
	const char *detail;
} streamreq_problem;

/*
 * Reads a request: query (without '?', may be NULL), the Accept and
 * Last-Event-ID header values (NULL when absent; an empty Last-Event-ID is
 * no header, what EventSource sends before it has an id), and whether an
 * access_token= parameter is to be kept (--auth-query-token).  ST_OK: *r is
 * filled and owned by the caller (streamreq_fini).  ST_EINVAL: *why says
 * why, *r holds nothing (finished already).
 */
st_err streamreq_parse(const char *query, const char *accept, const char *last_event_id, bool keep_query_token,
		       streamreq *r, streamreq_problem *why);

/* Frees what *r owns (safe on a zeroed or finished one). */
void streamreq_fini(streamreq *r);

/* Accept negotiation alone: false when nothing listed is served. */
bool streamreq_accept_format(const char *accept, enum frame_format *out);

#endif
