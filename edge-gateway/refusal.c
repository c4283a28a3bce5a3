/*
 * refusal: the answers to refusals retrying can fix (see refusal.h).  Two
 * tables (names, hint middles) and one decision, refusal_answer_make; the
 * sends only apply it.
 */
#include "refusal.h"

#include <stdio.h>

static const char *const names[REFUSAL_COUNT] = { "draining", "not_ready", "overloaded", "unavailable" };
static const uint32_t retry_mid_ms[REFUSAL_COUNT] = { 1000, 1000, 5000, 1000 };

const char *
refusal_name(enum refusal why)
{
	return (unsigned)why < REFUSAL_COUNT ? names[why] : "?";
}

uint32_t
refusal_retry_ms(enum refusal why)
{
	return (unsigned)why < REFUSAL_COUNT ? retry_mid_ms[why] : 1000;
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
	out->status = why == REFUSAL_OVERLOADED ? 429 : 503;
	out->title = why == REFUSAL_OVERLOADED ? "Too Many Requests" : "Service Unavailable";
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

uint32_t
refusal_jitter(refusals *r, uint32_t mid)
{
	r->rng ^= r->rng << 13;
	r->rng ^= r->rng >> 7;
	r->rng ^= r->rng << 17;
	return mid / 2 + (uint32_t)(r->rng % ((uint64_t)mid + 1));
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
	refusal_send(r, req, fmt, why, refusal_jitter(r, refusal_retry_ms(why)), detail);
}
