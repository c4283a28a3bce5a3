/* frame_test: every envelope in every wire format, byte for byte; escaping; keys; refcounts. */
#include "frame.h"

#include <stdlib.h>

#include "st_test.h"

#define CHECK_FMT(f, fmt, want)                                \
	do {                                                   \
		size_t l_;                                     \
		const char *p_ = frame_bytes((f), (fmt), &l_); \
		ST_CHECK_MEM(p_, l_, (want));                  \
	} while (0)

static const proto_str about_a[] = { { "a", 1 } };

static void
t_item(void)
{
	frame *f = frame_item_new(42, "t", 1, about_a, 1, "{\"x\":1}", 7);
	const char *env = "{\"type\":\"item\",\"id\":\"42\",\"topic\":\"t\",\"about\":[\"a\"],\"data\":{\"x\":1}}";
	size_t len;
	const char *p = frame_envelope(f, &len);

	ST_CHECK_MEM(p, len, env);
	CHECK_FMT(
		f, FRAME_SSE,
		"id: 42\ndata: {\"type\":\"item\",\"id\":\"42\",\"topic\":\"t\",\"about\":[\"a\"],\"data\":{\"x\":1}}\n\n");
	CHECK_FMT(f, FRAME_NDJSON,
		  "{\"type\":\"item\",\"id\":\"42\",\"topic\":\"t\",\"about\":[\"a\"],\"data\":{\"x\":1}}\n");
	CHECK_FMT(f, FRAME_JSONSEQ,
		  "\x1e{\"type\":\"item\",\"id\":\"42\",\"topic\":\"t\",\"about\":[\"a\"],\"data\":{\"x\":1}}\n");
	/* cached: the same bytes the second time */
	{
		size_t l1, l2;
		const char *a = frame_bytes(f, FRAME_JSONSEQ, &l1), *b = frame_bytes(f, FRAME_JSONSEQ, &l2);

		ST_CHECK(a == b && l1 == l2);
	}
	ST_CHECK_EQ_U64(frame_type(f), FRAME_ITEM);
	ST_CHECK_EQ_U64(frame_seq(f), 42);
	ST_CHECK(!frame_is_signal(f));
	ST_CHECK(!frame_is_terminal(f));
	ST_CHECK_EQ_U64(frame_cost(f), strlen(env) + FRAME_OVERHEAD);
	p = frame_topic(f, &len);
	ST_CHECK_MEM(p, len, "t");
	frame_unref(f);
}

static void
t_signal(void)
{
	static const proto_str ab[] = { { "a", 1 }, { "b", 1 } };
	frame *f = frame_item_new(7, "orders", 6, ab, 2, NULL, 0);
	frame *g = frame_item_new(8, "orders", 6, NULL, 0, NULL, 0);

	ST_CHECK(frame_is_signal(f));
	CHECK_FMT(f, FRAME_SSE,
		  "id: 7\ndata: {\"type\":\"item\",\"id\":\"7\",\"topic\":\"orders\",\"about\":[\"a\",\"b\"]}\n\n");
	CHECK_FMT(g, FRAME_NDJSON, "{\"type\":\"item\",\"id\":\"8\",\"topic\":\"orders\",\"about\":[]}\n");
	ST_CHECK(frame_is_signal(g));
	frame_unref(f);
	frame_unref(g);
}

static void
t_resync(void)
{
	frame *f = frame_resync_new(57, "overflow");

	CHECK_FMT(f, FRAME_SSE,
		  "id: 57\nevent: resync\ndata: {\"type\":\"resync\",\"id\":\"57\",\"reason\":\"overflow\"}\n\n");
	CHECK_FMT(f, FRAME_NDJSON, "{\"type\":\"resync\",\"id\":\"57\",\"reason\":\"overflow\"}\n");
	CHECK_FMT(f, FRAME_JSONSEQ, "\x1e{\"type\":\"resync\",\"id\":\"57\",\"reason\":\"overflow\"}\n");
	ST_CHECK_EQ_U64(frame_seq(f), 57);
	ST_CHECK(!frame_is_terminal(f) && !frame_is_signal(f));
	ST_CHECK(frame_topic(f, NULL) == NULL);
	frame_unref(f);
}

static void
t_heartbeat(void)
{
	frame *f = frame_heartbeat_new();

	CHECK_FMT(f, FRAME_SSE, ": heartbeat\n\n");
	CHECK_FMT(f, FRAME_NDJSON, "{\"type\":\"heartbeat\"}\n");
	CHECK_FMT(f, FRAME_JSONSEQ, "\x1e{\"type\":\"heartbeat\"}\n");
	ST_CHECK_EQ_U64(frame_seq(f), 0);
	ST_CHECK(!frame_is_terminal(f));
	frame_unref(f);
}

/* The stream position: SSE is an id field alone (no event dispatched), the others a heartbeat with an id. */
static void
t_position(void)
{
	frame *f = frame_position_new(18446744073709551615u);
	frame *z = frame_position_new(0);

	CHECK_FMT(f, FRAME_SSE, "id: 18446744073709551615\n\n");
	CHECK_FMT(f, FRAME_NDJSON, "{\"type\":\"heartbeat\",\"id\":\"18446744073709551615\"}\n");
	CHECK_FMT(f, FRAME_JSONSEQ, "\x1e{\"type\":\"heartbeat\",\"id\":\"18446744073709551615\"}\n");
	CHECK_FMT(z, FRAME_SSE, "id: 0\n\n");
	CHECK_FMT(z, FRAME_NDJSON, "{\"type\":\"heartbeat\",\"id\":\"0\"}\n");
	ST_CHECK(frame_type(f) == FRAME_HEARTBEAT);
	ST_CHECK_EQ_U64(frame_seq(f), 18446744073709551615u);
	ST_CHECK(!frame_is_terminal(f));
	frame_unref(f);
	frame_unref(z);
}

static void
t_reconnect(void)
{
	frame *f = frame_reconnect_new(500, "slow_consumer");

	CHECK_FMT(
		f, FRAME_SSE,
		"event: reconnect\nretry: 500\ndata: {\"type\":\"reconnect\",\"retry_ms\":500,\"reason\":\"slow_consumer\"}\n\n");
	CHECK_FMT(f, FRAME_NDJSON, "{\"type\":\"reconnect\",\"retry_ms\":500,\"reason\":\"slow_consumer\"}\n");
	CHECK_FMT(f, FRAME_JSONSEQ, "\x1e{\"type\":\"reconnect\",\"retry_ms\":500,\"reason\":\"slow_consumer\"}\n");
	ST_CHECK(frame_is_terminal(f));
	ST_CHECK_EQ_U64(frame_type(f), FRAME_RECONNECT);
	frame_unref(f);
}

static void
t_complete(void)
{
	frame *f = frame_complete_new();

	CHECK_FMT(f, FRAME_SSE, "event: complete\ndata: {\"type\":\"complete\"}\n\n");
	CHECK_FMT(f, FRAME_NDJSON, "{\"type\":\"complete\"}\n");
	CHECK_FMT(f, FRAME_JSONSEQ, "\x1e{\"type\":\"complete\"}\n");
	ST_CHECK(frame_is_terminal(f));
	frame_unref(f);
}

static void
t_failure(void)
{
	frame *f = frame_failure_new(503, "Service Unavailable", "database \"down\"");

	CHECK_FMT(
		f, FRAME_SSE,
		"event: failure\ndata: {\"type\":\"failure\",\"problem\":{\"type\":\"about:blank\",\"title\":\"Service "
		"Unavailable\",\"status\":503,\"detail\":\"database \\\"down\\\"\"}}\n\n");
	CHECK_FMT(f, FRAME_NDJSON,
		  "{\"type\":\"failure\",\"problem\":{\"type\":\"about:blank\",\"title\":\"Service "
		  "Unavailable\",\"status\":503,\"detail\":\"database \\\"down\\\"\"}}\n");
	CHECK_FMT(f, FRAME_JSONSEQ,
		  "\x1e{\"type\":\"failure\",\"problem\":{\"type\":\"about:blank\",\"title\":\"Service "
		  "Unavailable\",\"status\":503,\"detail\":\"database \\\"down\\\"\"}}\n");
	ST_CHECK(frame_is_terminal(f));
	frame_unref(f);
}

static void
t_escape(void)
{
	/* quote, backslash, named controls, other controls as lowercase \u00XX, DEL and UTF-8 untouched */
	static const char topic[] = "q\"b\\n\n";
	static const char a1[] = "\r\t\b\f\x01\x1f\x7f\xc3\xa9/";
	proto_str ab[] = { { a1, sizeof(a1) - 1 } };
	frame *f = frame_item_new(1, topic, sizeof(topic) - 1, ab, 1, NULL, 0);
	size_t len;
	const char *p = frame_envelope(f, &len);

	ST_CHECK_MEM(
		p, len,
		"{\"type\":\"item\",\"id\":\"1\",\"topic\":\"q\\\"b\\\\n\\n\",\"about\":[\"\\r\\t\\b\\f\\u0001\\u001f"
		"\x7f\xc3\xa9/\"]}");
	/* the raw topic is returned, not the escaped one */
	p = frame_topic(f, &len);
	ST_CHECK(len == sizeof(topic) - 1 && memcmp(p, topic, len) == 0);
	ST_CHECK(p[len] == '\0');
	CHECK_FMT(
		f, FRAME_SSE,
		"id: 1\ndata: {\"type\":\"item\",\"id\":\"1\",\"topic\":\"q\\\"b\\\\n\\n\",\"about\":[\"\\r\\t\\b\\f\\u0001"
		"\\u001f\x7f\xc3\xa9/\"]}\n\n");
	frame_unref(f);
}

static void
t_resource(void)
{
	static const proto_str ab[] = { { "a", 1 }, { "b", 1 } }, ba[] = { { "b", 1 }, { "a", 1 } };
	static const proto_str a_b[] = { { "a,b", 3 } }, quoted[] = { { "a\",\"b", 5 } };
	frame *f1 = frame_item_new(1, "t", 1, ab, 2, NULL, 0);
	frame *f2 = frame_item_new(1000, "t", 1, ab, 2, NULL, 0);
	frame *f3 = frame_item_new(3, "t", 1, ba, 2, NULL, 0);
	frame *f4 = frame_item_new(4, "u", 1, ab, 2, NULL, 0);
	frame *f5 = frame_item_new(5, "t", 1, a_b, 1, NULL, 0);
	frame *f6 = frame_item_new(6, "t", 1, quoted, 1, NULL, 0);
	frame *f7 = frame_item_new(7, "t", 1, ab, 2, "1", 1);
	frame *r = frame_resync_new(1, "gap");

	ST_CHECK(frame_same_resource(f1, f2));
	ST_CHECK(frame_resource_hash(f1) == frame_resource_hash(f2));
	ST_CHECK(!frame_same_resource(f1, f3)); /* order matters */
	ST_CHECK(!frame_same_resource(f1, f4));
	ST_CHECK(!frame_same_resource(f1, f5));
	ST_CHECK(!frame_same_resource(f1, f6)); /* ["a","b"] vs ["a\",\"b"] */
	ST_CHECK(frame_same_resource(f1, f7));  /* same resource; the queue decides data frames are never coalesced */
	ST_CHECK(!frame_same_resource(r, r));
	frame_unref(f1);
	frame_unref(f2);
	frame_unref(f3);
	frame_unref(f4);
	frame_unref(f5);
	frame_unref(f6);
	frame_unref(f7);
	frame_unref(r);
}

static void
t_refcount(void)
{
	frame *f = frame_item_new(9, "t", 1, NULL, 0, "[]", 2);
	size_t len;

	ST_CHECK(frame_ref(f) == f);
	frame_unref(f);
	frame_bytes(f, FRAME_JSONSEQ, &len); /* still alive: ASan would catch a use after free */
	ST_CHECK_EQ_U64(len, frame_cost(f) - FRAME_OVERHEAD + 2);
	frame_unref(f);
	frame_unref(NULL);
}

static void
t_big(void)
{
	/* a 256 KiB data value and 64 long about entries, every byte escaped in about */
	size_t dl = 256 * 1024;
	char *data = malloc(dl), *ab = malloc(200);
	proto_str about[64];
	frame *f;
	size_t len;

	memset(data, '1', dl);
	memset(ab, '\x01', 200);
	for (int i = 0; i < 64; i++)
		about[i] = (proto_str){ ab, 200 };
	f = frame_item_new(UINT64_MAX, "t", 1, about, 64, data, dl);
	frame_envelope(f, &len);
	ST_CHECK_EQ_U64(
		len,
		strlen("{\"type\":\"item\",\"id\":\"18446744073709551615\",\"topic\":\"t\",\"about\":[],\"data\":}") +
			dl + 64 * (200 * 6 + 2) + 63);
	ST_CHECK(!frame_is_signal(f));
	frame_unref(f);
	free(data);
	free(ab);
}

int
main(void)
{
	ST_RUN(t_item);
	ST_RUN(t_signal);
	ST_RUN(t_resync);
	ST_RUN(t_heartbeat);
	ST_RUN(t_position);
	ST_RUN(t_reconnect);
	ST_RUN(t_complete);
	ST_RUN(t_failure);
	ST_RUN(t_escape);
	ST_RUN(t_resource);
	ST_RUN(t_refcount);
	ST_RUN(t_big);
	return st_test_done();
}
