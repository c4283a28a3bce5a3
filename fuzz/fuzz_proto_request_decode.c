/*
 * fuzz_proto_request_decode: an ingest request is the first thing a
 * producer controls, so the decoder gets arbitrary bytes.
 *
 * Beyond "no sanitizer report", a request the decoder accepts must obey
 * every bound of the contract, checked here independently: 1..10000
 * events, topics of the allowed set, about entries 1..200 bytes of UTF-8
 * without NUL (at most 64), keys likewise, data at most 256 KiB and already
 * compact (compacting it again changes nothing, so it is valid JSON),
 * every pointer inside the input or the request's arena.  The accepted
 * request is then re-encoded as a batch and decoded again: the same events
 * must come back (what the writer stores is what it was sent).  A refused
 * request must give a NUL-terminated one-line detail, and the same verdict
 * again with a tiny detail buffer.  The request map's token, peeked without
 * a decode (the writer's check before it reserves memory), is 1..8192
 * bytes inside the input whenever it is found; an accepted request wrapped
 * in a request map decodes to the same events and peeks its token.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_buf.h"
#include "st_json.h"
#include "wire.h"

static bool
str_eq(proto_str a, proto_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void
check_event(const proto_event *ev, size_t i, const uint8_t *data, size_t size)
{
	FUZZ_CHECK(fuzz_topic_ok(ev->topic.p, ev->topic.len), "event %zu: bad topic accepted (len %zu)", i,
		   ev->topic.len);
	FUZZ_CHECK(fuzz_within(ev->topic.p, ev->topic.len, data, size), "event %zu: topic outside the input", i);
	FUZZ_CHECK(ev->n_about <= PROTO_MAX_ABOUT, "event %zu: %u about entries", i, ev->n_about);
	FUZZ_CHECK(ev->n_about == 0 || ev->about != NULL, "event %zu: about is NULL", i);
	for (uint32_t a = 0; a < ev->n_about; a++) {
		proto_str s = ev->about[a];

		FUZZ_CHECK(s.len >= 1 && s.len <= PROTO_MAX_ABOUT_LEN, "event %zu: about[%u] len %zu", i, a, s.len);
		FUZZ_CHECK(st_utf8_valid(s.p, s.len), "event %zu: about[%u] not UTF-8 or has NUL", i, a);
		FUZZ_CHECK(fuzz_within(s.p, s.len, data, size), "event %zu: about[%u] outside the input", i, a);
	}
	if (ev->has_key) {
		FUZZ_CHECK(ev->key.len >= 1 && ev->key.len <= PROTO_MAX_KEY, "event %zu: key len %zu", i, ev->key.len);
		FUZZ_CHECK(st_utf8_valid(ev->key.p, ev->key.len), "event %zu: key not UTF-8 or has NUL", i);
		FUZZ_CHECK(fuzz_within(ev->key.p, ev->key.len, data, size), "event %zu: key outside the input", i);
	}
	if (ev->has_data) {
		char *tmp;
		size_t n = 0;
		const char *err = NULL;

		FUZZ_CHECK(ev->data.len >= 1 && ev->data.len <= PROTO_MAX_DATA, "event %zu: data len %zu", i,
			   ev->data.len);
		tmp = malloc(ev->data.len);
		FUZZ_CHECK(tmp != NULL, "malloc");
		FUZZ_CHECK(st_json_compact(ev->data.p, ev->data.len, tmp, &n, &err) == ST_OK,
			   "event %zu: stored data is not valid JSON (%s)", i, err ? err : "?");
		FUZZ_CHECK(n == ev->data.len && memcmp(tmp, ev->data.p, n) == 0,
			   "event %zu: stored data is not in compact form", i);
		free(tmp);
	}
}

static void
check_same(const proto_event *a, const proto_event *b, size_t i)
{
	FUZZ_CHECK(str_eq(a->topic, b->topic), "round trip: event %zu topic differs", i);
	FUZZ_CHECK(a->n_about == b->n_about, "round trip: event %zu about count differs", i);
	for (uint32_t k = 0; k < a->n_about; k++)
		FUZZ_CHECK(str_eq(a->about[k], b->about[k]), "round trip: event %zu about[%u] differs", i, k);
	FUZZ_CHECK(a->has_data == b->has_data && (!a->has_data || str_eq(a->data, b->data)),
		   "round trip: event %zu data differs", i);
	FUZZ_CHECK(a->has_key == b->has_key && (!a->has_key || str_eq(a->key, b->key)),
		   "round trip: event %zu key differs", i);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_request *r = NULL, *r2 = NULL;
	char detail[160], small[6];
	st_err rv;
	size_t n;

	{
		proto_str tok;

		if (proto_request_token_peek(data, size, &tok)) {
			FUZZ_CHECK(tok.len >= 1 && tok.len <= PROTO_MAX_TOKEN, "peeked token of %zu bytes", tok.len);
			FUZZ_CHECK(fuzz_within(tok.p, tok.len, data, size), "peeked token outside the input");
		} else {
			FUZZ_CHECK(tok.p == NULL && tok.len == 0, "no token, but the out-param was set");
		}
	}
	memset(detail, 'x', sizeof(detail));
	rv = proto_request_decode(data, size, &r, detail, sizeof(detail));
	if (rv != ST_OK) {
		st_err rv2;

		FUZZ_CHECK(rv == ST_EINVAL, "refusal is %d, not ST_EINVAL", (int)rv);
		FUZZ_CHECK(memchr(detail, '\0', sizeof(detail)) != NULL, "detail not NUL-terminated");
		FUZZ_CHECK(detail[0] != '\0', "empty detail");
		FUZZ_CHECK(strchr(detail, '\n') == NULL && strchr(detail, '\r') == NULL, "detail is not one line");
		memset(small, 'x', sizeof(small));
		rv2 = proto_request_decode(data, size, &r2, small, sizeof(small));
		FUZZ_CHECK(rv2 == rv, "verdict changed with a small detail buffer");
		FUZZ_CHECK(memchr(small, '\0', sizeof(small)) != NULL, "small detail not NUL-terminated");
		proto_request_free(r2);
		return 0;
	}
	FUZZ_CHECK(r != NULL, "ST_OK without a request");
	n = proto_request_count(r);
	FUZZ_CHECK(n >= 1 && n <= PROTO_MAX_BATCH, "count %zu", n);
	FUZZ_CHECK(size <= PROTO_MAX_REQUEST, "request of %zu bytes accepted", size);
	FUZZ_CHECK(proto_request_bytes(r) >= size, "proto_request_bytes %zu < input %zu", proto_request_bytes(r), size);
	/* the writer charges proto_request_bytes_max before decoding: it must cover the result */
	FUZZ_CHECK(proto_request_bytes(r) <= proto_request_bytes_max(size), "proto_request_bytes %zu > max %zu",
		   proto_request_bytes(r), proto_request_bytes_max(size));
	for (size_t i = 0; i < n; i++) {
		const proto_event *ev = proto_request_event(r, i);

		FUZZ_CHECK(ev != NULL, "event %zu is NULL", i);
		check_event(ev, i, data, size);
	}

	/* Round trip: encode what was accepted, decode it, compare. */
	{
		proto_event *evs = malloc(n * sizeof(*evs));
		st_buf b;

		FUZZ_CHECK(evs != NULL, "malloc");
		for (size_t i = 0; i < n; i++)
			evs[i] = *proto_request_event(r, i);
		st_buf_init(&b);
		proto_request_encode(&b, evs, n, true);
		rv = proto_request_decode(b.p, b.len, &r2, detail, sizeof(detail));
		FUZZ_CHECK(rv == ST_OK, "re-encoded request refused: %s", detail);
		FUZZ_CHECK(proto_request_count(r2) == n, "round trip: count differs");
		for (size_t i = 0; i < n; i++)
			check_same(&evs[i], proto_request_event(r2, i), i);
		proto_request_free(r2);
		r2 = NULL;
		/* the same batch in a request map */
		{
			static const proto_str tok = { "a.b.c", 5 };
			proto_str got;
			st_buf m;

			st_buf_init(&m);
			proto_request_wrap(&m, tok, b.p, b.len);
			rv = proto_request_decode(m.p, m.len, &r2, detail, sizeof(detail));
			FUZZ_CHECK(rv == ST_OK || m.len > PROTO_MAX_REQUEST, "request map refused: %s", detail);
			if (rv == ST_OK) {
				FUZZ_CHECK(proto_request_count(r2) == n, "request map: count differs");
				for (size_t i = 0; i < n; i++)
					check_same(&evs[i], proto_request_event(r2, i), i);
				FUZZ_CHECK(proto_request_token_peek(m.p, m.len, &got) && got.len == 5 &&
						   memcmp(got.p, "a.b.c", 5) == 0,
					   "request map: token not peeked");
			}
			proto_request_free(r2);
			st_buf_fini(&m);
		}
		st_buf_fini(&b);
		free(evs);
	}
	proto_request_free(r);
	return 0;
}
