/* streamreq_test: every /v1/stream request rule, table-driven (no loop, no database). */
#include "streamreq.h"

#include <stdio.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"

static void
t_accepted(void)
{
	static const struct {
		const char *query, *accept, *lei;
		bool keep_token;
		size_t n_topics;
		const char *topic0;
		enum frame_format fmt;
		int after; /* -1: none */
		int until; /* -1: none, -2: head */
		const char *token;
	} cases[] = {
		{ "topic=a", NULL, NULL, false, 1, "a", FRAME_SSE, -1, -1, NULL },
		{ "topic=a&topic=b/c&topic=a", NULL, NULL, false, 2, "a", FRAME_SSE, -1, -1, NULL },
		{ "topic=a&format=ndjson", "text/event-stream", NULL, false, 1, "a", FRAME_NDJSON, -1, -1, NULL },
		{ "topic=a&format=json-seq", NULL, NULL, false, 1, "a", FRAME_JSONSEQ, -1, -1, NULL },
		{ "topic=a", "application/x-ndjson", NULL, false, 1, "a", FRAME_NDJSON, -1, -1, NULL },
		{ "topic=a", "application/json-seq;q=1, text/event-stream", NULL, false, 1, "a", FRAME_JSONSEQ, -1, -1,
		  NULL },
		{ "topic=a", "text/event-stream;q=0, application/*", NULL, false, 1, "a", FRAME_NDJSON, -1, -1, NULL },
		{ "topic=a", "*/*", NULL, false, 1, "a", FRAME_SSE, -1, -1, NULL },
		{ "topic=a", "TEXT/EVENT-STREAM", NULL, false, 1, "a", FRAME_SSE, -1, -1, NULL },
		{ "topic=a&last_event_id=7", NULL, NULL, false, 1, "a", FRAME_SSE, 7, -1, NULL },
		{ "topic=a&last_event_id=7", NULL, "9", false, 1, "a", FRAME_SSE, 9, -1, NULL },
		{ "topic=a&last_event_id=7", NULL, "", false, 1, "a", FRAME_SSE, 7, -1, NULL },
		{ "topic=a&until=head", NULL, NULL, false, 1, "a", FRAME_SSE, -1, -2, NULL },
		{ "topic=a&until=42&_=123", NULL, NULL, false, 1, "a", FRAME_SSE, -1, 42, NULL },
		{ "topic=a&access_token=t0k", NULL, NULL, false, 1, "a", FRAME_SSE, -1, -1, NULL },
		{ "topic=a&access_token=t0k&access_token=x", NULL, NULL, true, 1, "a", FRAME_SSE, -1, -1, "t0k" },
		{ "topic=acct%2F7", NULL, NULL, false, 1, "acct/7", FRAME_SSE, -1, -1, NULL },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		streamreq r;
		streamreq_problem why = { 0 };
		st_err rv =
			streamreq_parse(cases[i].query, cases[i].accept, cases[i].lei, cases[i].keep_token, &r, &why);

		fprintf(stderr, "  case %zu: %s | %s | %s -> %s %s\n", i, cases[i].query,
			cases[i].accept ? cases[i].accept : "-", cases[i].lei ? cases[i].lei : "-", st_err_str(rv),
			rv == ST_OK ? "" : why.detail);
		ST_CHECK(rv == ST_OK);
		if (rv != ST_OK)
			continue;
		ST_CHECK_EQ_U64(r.n_topics, cases[i].n_topics);
		ST_CHECK_STR(r.topics[0], cases[i].topic0);
		ST_CHECK_EQ_U64(r.fmt, cases[i].fmt);
		ST_CHECK(r.has_after == (cases[i].after >= 0));
		if (cases[i].after >= 0)
			ST_CHECK_EQ_U64(r.after, (uint64_t)cases[i].after);
		ST_CHECK(r.has_until == (cases[i].until != -1));
		ST_CHECK(r.until_head == (cases[i].until == -2));
		if (cases[i].until >= 0)
			ST_CHECK_EQ_U64(r.until, (uint64_t)cases[i].until);
		if (cases[i].token)
			ST_CHECK_STR(r.access_token, cases[i].token);
		else
			ST_CHECK(r.access_token == NULL);
		streamreq_fini(&r);
		streamreq_fini(&r); /* twice is harmless */
	}
}

static void
t_refused(void)
{
	static const struct {
		const char *query, *accept, *lei;
		int status;
		const char *detail;
	} cases[] = {
		{ NULL, NULL, NULL, 400, "at least one topic= is required" },
		{ "", NULL, NULL, 400, "at least one topic= is required" },
		{ "format=sse", NULL, NULL, 400, "at least one topic= is required" },
		{ "topic=", NULL, NULL, 400, "topic must be 1..200 bytes of [A-Za-z0-9._:/-]" },
		{ "topic=a+b", NULL, NULL, 400, "topic must be 1..200 bytes of [A-Za-z0-9._:/-]" },
		{ "topic=a%zz", NULL, NULL, 400, "malformed query string" },
		{ "topic=a&format=xml", NULL, NULL, 406, "format must be sse, ndjson or json-seq" },
		{ "topic=a", "application/xml", NULL, 406,
		  "serves text/event-stream, application/x-ndjson, application/json-seq" },
		{ "topic=a", "text/event-stream;q=0", NULL, 406,
		  "serves text/event-stream, application/x-ndjson, application/json-seq" },
		{ "topic=a&last_event_id=x", NULL, NULL, 400, "last_event_id must be a decimal event id" },
		{ "topic=a&last_event_id=-1", NULL, NULL, 400, "last_event_id must be a decimal event id" },
		{ "topic=a", NULL, "18446744073709551616", 400, "Last-Event-ID must be a decimal event id" },
		{ "topic=a&until=tail", NULL, NULL, 400, "until must be head or a decimal event id" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		streamreq r;
		streamreq_problem why = { 0 };
		st_err rv = streamreq_parse(cases[i].query, cases[i].accept, cases[i].lei, false, &r, &why);

		fprintf(stderr, "  case %zu: %s -> %s %d %s\n", i, cases[i].query ? cases[i].query : "(none)",
			st_err_str(rv), why.status, why.detail ? why.detail : "");
		ST_CHECK(rv == ST_EINVAL);
		ST_CHECK_EQ_U64(why.status, cases[i].status);
		ST_CHECK_STR(why.detail, cases[i].detail);
		ST_CHECK_STR(why.title, cases[i].status == 406 ? "Not Acceptable" : "Bad Request");
		ST_CHECK(r.topics == NULL && r.access_token == NULL); /* nothing left to free */
	}
}

/* 64 distinct topics are accepted, the 65th refused; repeats do not count. */
static void
t_topic_bound(void)
{
	char q[4096];
	size_t o = 0;
	streamreq r;
	streamreq_problem why = { 0 };

	for (int i = 0; i < 64; i++)
		o += (size_t)snprintf(q + o, sizeof(q) - o, "%stopic=t%d&topic=t%d", i ? "&" : "", i, i);
	ST_CHECK(streamreq_parse(q, NULL, NULL, false, &r, &why) == ST_OK);
	ST_CHECK_EQ_U64(r.n_topics, 64);
	streamreq_fini(&r);
	snprintf(q + o, sizeof(q) - o, "&topic=t64");
	ST_CHECK(streamreq_parse(q, NULL, NULL, false, &r, &why) == ST_EINVAL);
	ST_CHECK_STR(why.detail, "at most 64 topics");
}

int
main(void)
{
	ST_RUN(t_accepted);
	ST_RUN(t_refused);
	ST_RUN(t_topic_bound);
	return st_test_done();
}
