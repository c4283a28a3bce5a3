/* refusal_test: the answer to every refusal in every format, and the retry hint's jitter (refusal.h). */
#include "refusal.h"

#include <stdio.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"

/* Names, hint middles and Content-Types: what clients and dashboards read. */
static void
t_tables(void)
{
	static const struct {
		enum refusal why;
		const char *name;
		uint32_t mid_ms;
	} want[] = {
		{ REFUSAL_DRAINING, "draining", 1000 },     { REFUSAL_NOT_READY, "not_ready", 1000 },
		{ REFUSAL_OVERLOADED, "overloaded", 5000 }, { REFUSAL_UNAVAILABLE, "unavailable", 1000 },
		{ REFUSAL_IP_LIMIT, "overloaded", 12500 },
	};
	static const struct {
		enum frame_format fmt;
		const char *type;
	} types[] = {
		{ FRAME_SSE, "text/event-stream; charset=utf-8" },
		{ FRAME_NDJSON, "application/x-ndjson" },
		{ FRAME_JSONSEQ, "application/json-seq" },
	};

	ST_CHECK_EQ_U64(ST_ARRAY_LEN(want), REFUSAL_COUNT);
	for (size_t i = 0; i < ST_ARRAY_LEN(want); i++) {
		ST_CHECK_STR(refusal_name(want[i].why), want[i].name);
		ST_CHECK_EQ_U64(refusal_retry_ms(want[i].why), want[i].mid_ms);
	}
	ST_CHECK_STR(refusal_name(REFUSAL_COUNT), "?");
	for (size_t i = 0; i < ST_ARRAY_LEN(types); i++)
		ST_CHECK_STR(refusal_content_type(types[i].fmt), types[i].type);
}

/* Every reason in every format: the status, the problem's title and Retry-After, or the SSE envelope. */
static void
t_answers(void)
{
	static const struct {
		enum refusal why;
		enum frame_format fmt;
		uint32_t retry_ms;
		int status;
		const char *title;   /* NULL: SSE */
		const char *headers; /* problem: Retry-After; SSE: the envelope's bytes */
	} cases[] = {
		{ REFUSAL_DRAINING, FRAME_SSE, 750, 200, NULL,
		  "event: reconnect\nretry: 750\ndata: "
		  "{\"type\":\"reconnect\",\"retry_ms\":750,\"reason\":\"draining\"}\n\n" },
		{ REFUSAL_NOT_READY, FRAME_SSE, 1200, 200, NULL,
		  "event: reconnect\nretry: 1200\ndata: "
		  "{\"type\":\"reconnect\",\"retry_ms\":1200,\"reason\":\"not_ready\"}\n\n" },
		{ REFUSAL_OVERLOADED, FRAME_SSE, 5000, 200, NULL,
		  "event: reconnect\nretry: 5000\ndata: "
		  "{\"type\":\"reconnect\",\"retry_ms\":5000,\"reason\":\"overloaded\"}\n\n" },
		{ REFUSAL_UNAVAILABLE, FRAME_SSE, 0, 200, NULL,
		  "event: reconnect\nretry: 0\ndata: "
		  "{\"type\":\"reconnect\",\"retry_ms\":0,\"reason\":\"unavailable\"}\n\n" },
		{ REFUSAL_DRAINING, FRAME_NDJSON, 1000, 503, "Service Unavailable", "Retry-After: 1\r\n" },
		{ REFUSAL_DRAINING, FRAME_JSONSEQ, 1001, 503, "Service Unavailable", "Retry-After: 2\r\n" },
		{ REFUSAL_NOT_READY, FRAME_NDJSON, 1, 503, "Service Unavailable", "Retry-After: 1\r\n" },
		{ REFUSAL_NOT_READY, FRAME_JSONSEQ, 0, 503, "Service Unavailable", "Retry-After: 0\r\n" },
		{ REFUSAL_OVERLOADED, FRAME_NDJSON, 7499, 429, "Too Many Requests", "Retry-After: 8\r\n" },
		{ REFUSAL_OVERLOADED, FRAME_JSONSEQ, 2500, 429, "Too Many Requests", "Retry-After: 3\r\n" },
		{ REFUSAL_UNAVAILABLE, FRAME_NDJSON, 999, 503, "Service Unavailable", "Retry-After: 1\r\n" },
		{ REFUSAL_UNAVAILABLE, FRAME_JSONSEQ, UINT32_MAX, 503, "Service Unavailable",
		  "Retry-After: 4294968\r\n" },
		/* The per-address limit: an EventSource must not take it as final (issue 25). */
		{ REFUSAL_IP_LIMIT, FRAME_SSE, 12000, 200, NULL,
		  "event: reconnect\nretry: 12000\ndata: "
		  "{\"type\":\"reconnect\",\"retry_ms\":12000,\"reason\":\"overloaded\"}\n\n" },
		{ REFUSAL_IP_LIMIT, FRAME_NDJSON, 10000, 429, "Too Many Requests", "Retry-After: 10\r\n" },
		{ REFUSAL_IP_LIMIT, FRAME_JSONSEQ, 14001, 429, "Too Many Requests", "Retry-After: 15\r\n" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		refusal_answer a;

		refusal_answer_make(cases[i].why, cases[i].fmt, cases[i].retry_ms, &a);
		ST_CHECK_EQ_U64(a.status, cases[i].status);
		if (cases[i].title == NULL) {
			size_t len;
			const char *bytes;

			ST_CHECK(a.envelope != NULL && a.title == NULL && a.headers[0] == '\0');
			ST_CHECK_STR(a.content_type, "text/event-stream; charset=utf-8");
			if (a.envelope != NULL) {
				bytes = frame_bytes(a.envelope, FRAME_SSE, &len);
				ST_CHECK_MEM(bytes, len, cases[i].headers);
			}
		} else {
			ST_CHECK(a.envelope == NULL && a.content_type == NULL);
			ST_CHECK_STR(a.title, cases[i].title);
			ST_CHECK_STR(a.headers, cases[i].headers);
		}
		refusal_answer_fini(&a);
		ST_CHECK(a.envelope == NULL);
	}
}

/* Hints stay in [mid/2, 3 mid/2], spread over it, and a zero seed still draws. */
static void
t_jitter(void)
{
	static const struct {
		uint64_t seed;
		uint32_t mid;
	} cases[] = {
		{ 1, 1000 }, { 0x123456789abcdefu, 5000 }, { 0, 1000 }, { 42, 1 }, { 7, 0 }, { 99, 60000 },
	};
	st_counter *none[REFUSAL_COUNT] = { 0 };

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		uint32_t mid = cases[i].mid;
		uint64_t lo = mid / 2, hi = mid / 2 + (uint64_t)mid;
		uint64_t min = UINT64_MAX, max = 0;
		refusals r;

		refusal_init(&r, cases[i].seed, none);
		ST_CHECK(r.rng != 0);
		for (int n = 0; n < 20000; n++) {
			uint64_t v = refusal_jitter(&r, mid);

			min = ST_MIN(min, v);
			max = ST_MAX(max, v);
		}
		if (min < lo || max > hi)
			fprintf(stderr, "seed %llu mid %u: drew [%llu, %llu], bound [%llu, %llu]\n",
				(unsigned long long)cases[i].seed, mid, (unsigned long long)min,
				(unsigned long long)max, (unsigned long long)lo, (unsigned long long)hi);
		ST_CHECK(min >= lo);
		ST_CHECK(max <= hi);
		/* Spread: 20,000 draws reach both ends' first and last 5 % (all of it for tiny ranges). */
		ST_CHECK(min <= lo + mid / 20);
		ST_CHECK(max + mid / 20 >= hi);
	}
}

/* Each reason's hint stays in its range and spans it; the per-address limit never under 10 s. */
static void
t_hints(void)
{
	static const struct {
		enum refusal why;
		uint32_t lo, hi;
	} want[] = {
		{ REFUSAL_DRAINING, 500, 1500 },    { REFUSAL_NOT_READY, 500, 1500 },
		{ REFUSAL_OVERLOADED, 2500, 7500 }, { REFUSAL_UNAVAILABLE, 500, 1500 },
		{ REFUSAL_IP_LIMIT, 10000, 15000 },
	};
	st_counter *none[REFUSAL_COUNT] = { 0 };
	refusals r;

	ST_CHECK_EQ_U64(ST_ARRAY_LEN(want), REFUSAL_COUNT);
	refusal_init(&r, 12345, none);
	for (size_t i = 0; i < ST_ARRAY_LEN(want); i++) {
		uint32_t min = UINT32_MAX, max = 0, span = want[i].hi - want[i].lo;

		for (int n = 0; n < 20000; n++) {
			uint32_t v = refusal_hint(&r, want[i].why);

			min = ST_MIN(min, v);
			max = ST_MAX(max, v);
		}
		if (min < want[i].lo || max > want[i].hi)
			fprintf(stderr, "%s: drew [%u, %u], bound [%u, %u]\n", refusal_name(want[i].why), min, max,
				want[i].lo, want[i].hi);
		ST_CHECK(min >= want[i].lo && max <= want[i].hi);
		ST_CHECK(min <= want[i].lo + span / 20 && max + span / 20 >= want[i].hi);
	}
}

int
main(void)
{
	ST_RUN(t_tables);
	ST_RUN(t_answers);
	ST_RUN(t_jitter);
	ST_RUN(t_hints);
	return st_test_done();
}
