/*
 * streamreq: the request half of GET /v1/stream (see streamreq.h).
 *
 * The rules (docs/edge.md, "/v1/stream parameters"): topic= 1..64 times,
 * each 1..200 bytes of [A-Za-z0-9._:/-] (the writer's rule, proto_topic_check),
 * a repeated one counted once; format=sse|ndjson|json-seq (else 406), or
 * from Accept (the first listed range we serve; none, or the wildcards "any" and "text",
 * is SSE; the application wildcard is NDJSON; a range with q=0 is skipped; nothing
 * served: 406); Last-Event-ID (wins) or last_event_id=, a decimal u64;
 * until=head or a decimal u64; access_token= only with --auth-query-token;
 * any other parameter is ignored (cache busters, a proxy's own).
 */
#include "streamreq.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "st_http_parse.h" /* http_query_each: the only part of st_http used here */
#include "st_util.h"
#include "wire.h"

typedef struct parse_state {
	streamreq *r;
	bool keep_token;
	streamreq_problem *why;
	bool has_format;
	bool has_qid;
	uint64_t qid;
} parse_state;

static st_err
refuse(streamreq_problem *why, int status, const char *detail)
{
	why->status = status;
	why->title = status == 406 ? "Not Acceptable" : "Bad Request";
	why->detail = detail;
	return ST_EINVAL;
}

static bool
key_is(const char *key, size_t klen, const char *name)
{
	return strlen(name) == klen && memcmp(key, name, klen) == 0;
}

static st_err
query_item(const char *key, size_t klen, const char *val, size_t vlen, void *arg)
{
	parse_state *ps = arg;
	streamreq *r = ps->r;

	if (key_is(key, klen, "topic")) {
		if (proto_topic_check((proto_str){ val, vlen }) != NULL)
			return refuse(ps->why, 400, "topic must be 1..200 bytes of [A-Za-z0-9._:/-]");
		for (size_t i = 0; i < r->n_topics; i++)
			if (r->topic_lens[i] == vlen && memcmp(r->topics[i], val, vlen) == 0)
				return ST_OK; /* a repeated topic counts once */
		if (r->n_topics == STREAMREQ_MAX_TOPICS)
			return refuse(ps->why, 400, "at most 64 topics");
		r->topics[r->n_topics] = st_xstrndup(val, vlen);
		r->topic_lens[r->n_topics] = vlen;
		r->n_topics++;
	} else if (key_is(key, klen, "format")) {
		ps->has_format = true;
		if (key_is(val, vlen, "sse"))
			r->fmt = FRAME_SSE;
		else if (key_is(val, vlen, "ndjson"))
			r->fmt = FRAME_NDJSON;
		else if (key_is(val, vlen, "json-seq"))
			r->fmt = FRAME_JSONSEQ;
		else
			return refuse(ps->why, 406, "format must be sse, ndjson or json-seq");
	} else if (key_is(key, klen, "last_event_id")) {
		if (st_parse_u64(val, vlen, &ps->qid) != ST_OK)
			return refuse(ps->why, 400, "last_event_id must be a decimal event id");
		ps->has_qid = true;
	} else if (key_is(key, klen, "until")) {
		if (key_is(val, vlen, "head")) {
			r->has_until = true;
			r->until_head = true;
		} else if (st_parse_u64(val, vlen, &r->until) == ST_OK) {
			r->has_until = true;
			r->until_head = false;
		} else {
			return refuse(ps->why, 400, "until must be head or a decimal event id");
		}
	} else if (key_is(key, klen, "access_token")) {
		/* Kept only when allowed (--auth-query-token); otherwise it is ignored like any other. */
		if (r->access_token == NULL && ps->keep_token)
			r->access_token = st_xstrndup(val, vlen);
	}
	return ST_OK;
}

/* True when a media range's parameters (";q=0.000" ...) say "not acceptable". */
static bool
range_refused(const char *params, size_t len)
{
	for (size_t i = 0; i + 2 < len; i++) {
		if ((params[i] == 'q' || params[i] == 'Q') && params[i + 1] == '=') {
			size_t j = i + 2;

			if (params[j] != '0')
				return false;
			for (j++; j < len && params[j] != ';' && params[j] != ' '; j++)
				if (params[j] != '.' && params[j] != '0')
					return false;
			return true;
		}
	}
	return false;
}

bool
streamreq_accept_format(const char *accept, enum frame_format *out)
{
	static const struct {
		const char *type;
		enum frame_format fmt;
	} served[] = {
		{ "text/event-stream", FRAME_SSE },
		{ "application/x-ndjson", FRAME_NDJSON },
		{ "application/json-seq", FRAME_JSONSEQ },
		{ "*/*", FRAME_SSE },
		{ "text/*", FRAME_SSE },
		{ "application/*", FRAME_NDJSON },
	};
	const char *p = accept;

	if (accept == NULL || *accept == '\0') {
		*out = FRAME_SSE;
		return true;
	}
	while (*p) {
		const char *type, *params, *end;
		size_t tlen;

		while (*p == ' ' || *p == ',')
			p++;
		type = p;
		while (*p && *p != ',' && *p != ';' && *p != ' ')
			p++;
		tlen = (size_t)(p - type);
		params = p;
		while (*p && *p != ',')
			p++;
		end = p;
		if (tlen == 0 || range_refused(params, (size_t)(end - params)))
			continue;
		for (size_t i = 0; i < ST_ARRAY_LEN(served); i++) {
			if (strlen(served[i].type) == tlen && strncasecmp(served[i].type, type, tlen) == 0) {
				*out = served[i].fmt;
				return true;
			}
		}
	}
	return false;
}

st_err
streamreq_parse(const char *query, const char *accept, const char *last_event_id, bool keep_query_token, streamreq *r,
		streamreq_problem *why)
{
	parse_state ps = { .r = r, .keep_token = keep_query_token, .why = why };
	st_err rv;

	memset(r, 0, sizeof(*r));
	r->topics = st_xcalloc(STREAMREQ_MAX_TOPICS, sizeof(*r->topics));
	r->topic_lens = st_xcalloc(STREAMREQ_MAX_TOPICS, sizeof(*r->topic_lens));
	why->status = 400;
	why->title = "Bad Request";
	why->detail = "malformed query string";
	if (query != NULL && (rv = http_query_each(query, query_item, &ps)) != ST_OK) {
		rv = ST_EINVAL; /* why holds the item's reason, or "malformed query string" */
		goto fail;
	}
	if (r->n_topics == 0) {
		rv = refuse(why, 400, "at least one topic= is required");
		goto fail;
	}
	if (!ps.has_format && !streamreq_accept_format(accept, &r->fmt)) {
		rv = refuse(why, 406, "serves text/event-stream, application/x-ndjson, application/json-seq");
		goto fail;
	}
	if (last_event_id != NULL && *last_event_id != '\0') {
		if (st_parse_u64(last_event_id, strlen(last_event_id), &r->after) != ST_OK) {
			rv = refuse(why, 400, "Last-Event-ID must be a decimal event id");
			goto fail;
		}
		r->has_after = true;
	} else if (ps.has_qid) {
		r->after = ps.qid;
		r->has_after = true;
	}
	return ST_OK;
fail:
	streamreq_fini(r);
	return rv;
}

void
streamreq_fini(streamreq *r)
{
	if (r->topics != NULL)
		for (size_t i = 0; i < r->n_topics; i++)
			free(r->topics[i]);
	ST_FREE(&r->topics);
	ST_FREE(&r->topic_lens);
	ST_FREE(&r->access_token);
	r->n_topics = 0;
}
