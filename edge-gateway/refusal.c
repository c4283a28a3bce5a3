/*
 * refusal: the answers to refusals retrying can fix (see refusal.h).  One
 * table (name, hint range, status) and one decision, refusal_answer_make;
 * the sends only apply it.
 */
#include "refusal.h"

#include <stdio.h>

#include "st_util.h"

/*
 * One row per reason: the reason on the wire, the hint's range (drawn
 * uniformly from [lo, lo + span]) and the status NDJSON and JSON-seq get.
 * The first four are centred on their middle (mid/2 .. 3 mid/2).  The
 * per-address limit waits longer and never less than 10 s: the client
 * itself holds the streams, so an EventSource told to come back sooner
 * would only loop (issue 25); its reason on the wire is "overloaded", as a
 * full edge's, since the client's remedy is the same.
 */
static const struct {
	const char *name;
	uint32_t lo_ms, span_ms;
	int status;
} rows[REFUSAL_COUNT] = {
	[REFUSAL_DRAINING] = { "draining", 500, 1000, 503 },
	[REFUSAL_NOT_READY] = { "not_ready", 500, 1000, 503 },
	[REFUSAL_OVERLOADED] = { "overloaded", 2500, 5000, 429 },
	[REFUSAL_UNAVAILABLE] = { "unavailable", 500, 1000, 503 },
	[REFUSAL_IP_LIMIT] = { "overloaded", 10000, 5000, 429 },
};

const char *
refusal_name(enum refusal why)
{
	return (unsigned)why < REFUSAL_COUNT ? rows[why].name : "?";
}

uint32_t
refusal_retry_ms(enum refusal why)
{
	return (unsigned)why < REFUSAL_COUNT ? rows[why].lo_ms + rows[why].span_ms / 2 : 1000;
}

const char *
refusal_content_type(enum frame_format fmt)
{
	switch (fmt) {
	case FRAME_NDJSON: return "application/x-ndjson";
	case FRAME_JSONSEQ: return "application/json-seq";
	default: return "text/event-stream; charset=utf-8";
	}
}

void
refusal_answer_make(enum refusal why, enum frame_format fmt, uint32_t retry_ms, refusal_answer *out)
{
	*out = (refusal_answer){ .status = 0 };
	if (fmt == FRAME_SSE) {
		out->status = 200;
		out->content_type = refusal_content_type(FRAME_SSE);
		out->envelope = frame_reconnect_new(retry_ms, refusal_name(why));
		return;
	}
	out->status = rows[why].status;
	out->title = out->status == 429 ? "Too Many Requests" : "Service Unavailable";
	/* Whole seconds, rounded up: a hint of 1 ms must not read as "now". */
	snprintf(out->headers, sizeof(out->headers), "Retry-After: %u\r\n", (unsigned)((retry_ms + 999ull) / 1000));
}

void
refusal_answer_fini(refusal_answer *a)
{
	if (a->envelope != NULL)
		frame_unref(a->envelope);
	a->envelope = NULL;
}

void
refusal_init(refusals *r, uint64_t seed, st_counter *const counted[REFUSAL_COUNT])
{
	r->rng = seed != 0 ? seed : 0x9e3779b97f4a7c15u;
	for (int i = 0; i < REFUSAL_COUNT; i++)
		r->counted[i] = counted[i];
}

/* Uniform in [lo, lo + span]. */
static uint32_t
draw(refusals *r, uint32_t lo, uint32_t span)
{
	r->rng ^= r->rng << 13;
	r->rng ^= r->rng >> 7;
	r->rng ^= r->rng << 17;
	return lo + (uint32_t)(r->rng % ((uint64_t)span + 1));
}

uint32_t
refusal_jitter(refusals *r, uint32_t mid)
{
	return draw(r, mid / 2, mid);
}

uint32_t
refusal_hint(refusals *r, enum refusal why)
{
	ST_ASSERT((unsigned)why < REFUSAL_COUNT);
	return draw(r, rows[why].lo_ms, rows[why].span_ms);
}

void
refusal_send(refusals *r, http_req *req, enum frame_format fmt, enum refusal why, uint32_t retry_ms, const char *detail)
{
	refusal_answer a;

	st_counter_inc(r->counted[why]);
	refusal_answer_make(why, fmt, retry_ms, &a);
	if (a.envelope != NULL) {
		size_t len;
		const char *body = frame_bytes(a.envelope, FRAME_SSE, &len);

		http_reply(req, a.status, a.content_type, body, len, NULL);
	} else {
		http_reply_problem(req, a.status, NULL, a.title, detail, a.headers);
	}
	refusal_answer_fini(&a);
}

void
refusal_send_jittered(refusals *r, http_req *req, enum frame_format fmt, enum refusal why, const char *detail)
{
	refusal_send(r, req, fmt, why, refusal_hint(r, why), detail);
}
