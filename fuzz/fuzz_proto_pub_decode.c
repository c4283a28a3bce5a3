/*
 * fuzz_proto_pub_decode: what an edge reads from every writer's pub0.
 *
 * The edge trusts a decoded message's order and bounds (the sequencer
 * appends by seq), so on success this checks them independently: kind is a
 * batch or a tick; the writer id is at most 255 bytes of UTF-8 without NUL;
 * a batch has >= 1 event with prev < seq[0] < seq[1] < ..., head == the
 * last seq, topics and about entries within the contract, data 1..256 KiB
 * of UTF-8 without NUL, and every pointer inside the input.  The message is
 * then re-encoded with the writer's encoder and decoded again: the same
 * fields must come back.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_buf.h"
#include "st_json.h"
#include "wire.h"
#include "wire_pub.h"

static bool
str_eq(proto_str a, proto_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void
check_event(const proto_pub_event *ev, size_t i, const uint8_t *data, size_t size)
{
	FUZZ_CHECK(fuzz_topic_ok(ev->topic.p, ev->topic.len), "event %zu: bad topic accepted", i);
	FUZZ_CHECK(fuzz_within(ev->topic.p, ev->topic.len, data, size), "event %zu: topic outside the input", i);
	FUZZ_CHECK(ev->n_about <= PROTO_MAX_ABOUT, "event %zu: %u about entries", i, ev->n_about);
	FUZZ_CHECK(ev->n_about == 0 || ev->about != NULL, "event %zu: about is NULL", i);
	for (uint32_t a = 0; a < ev->n_about; a++) {
		proto_str s = ev->about[a];

		FUZZ_CHECK(s.len >= 1 && s.len <= PROTO_MAX_ABOUT_LEN, "event %zu: about[%u] len %zu", i, a, s.len);
		FUZZ_CHECK(st_utf8_valid(s.p, s.len), "event %zu: about[%u] not UTF-8 or has NUL", i, a);
		FUZZ_CHECK(fuzz_within(s.p, s.len, data, size), "event %zu: about[%u] outside the input", i, a);
	}
	if (ev->has_data) {
		FUZZ_CHECK(ev->data.len >= 1 && ev->data.len <= PROTO_MAX_DATA, "event %zu: data len %zu", i,
			   ev->data.len);
		FUZZ_CHECK(st_utf8_valid(ev->data.p, ev->data.len), "event %zu: data not UTF-8 or has NUL", i);
		FUZZ_CHECK(fuzz_within(ev->data.p, ev->data.len, data, size), "event %zu: data outside the input", i);
	}
}

static void
check_same(const proto_pub *a, const proto_pub *b)
{
	FUZZ_CHECK(proto_pub_kind(a) == proto_pub_kind(b), "round trip: kind differs");
	FUZZ_CHECK(str_eq(proto_pub_writer(a), proto_pub_writer(b)), "round trip: writer differs");
	FUZZ_CHECK(proto_pub_head(a) == proto_pub_head(b), "round trip: head differs");
	if (proto_pub_kind(a) != PROTO_PUB_BATCH)
		return;
	FUZZ_CHECK(proto_pub_prev(a) == proto_pub_prev(b), "round trip: prev differs");
	FUZZ_CHECK(proto_pub_count(a) == proto_pub_count(b), "round trip: count differs");
	for (size_t i = 0; i < proto_pub_count(a); i++) {
		const proto_pub_event *x = proto_pub_event_at(a, i), *y = proto_pub_event_at(b, i);

		FUZZ_CHECK(x->seq == y->seq && str_eq(x->topic, y->topic) && x->n_about == y->n_about &&
				   x->has_data == y->has_data && (!x->has_data || str_eq(x->data, y->data)),
			   "round trip: event %zu differs", i);
		for (uint32_t k = 0; k < x->n_about; k++)
			FUZZ_CHECK(str_eq(x->about[k], y->about[k]), "round trip: event %zu about[%u] differs", i, k);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_pub *m = NULL, *m2 = NULL;
	proto_str w;
	char writer[256];
	st_buf b;
	st_err rv;

	rv = proto_pub_decode(data, size, &m);
	if (rv != ST_OK) {
		FUZZ_CHECK(rv == ST_EPROTO || rv == ST_EINVAL, "refusal is %d", (int)rv);
		return 0;
	}
	FUZZ_CHECK(m != NULL, "ST_OK without a message");
	FUZZ_CHECK(size <= PROTO_MAX_PUB, "message of %zu bytes accepted", size);
	w = proto_pub_writer(m);
	FUZZ_CHECK(w.len <= 255, "writer of %zu bytes", w.len);
	FUZZ_CHECK(w.len == 0 || st_utf8_valid(w.p, w.len), "writer not UTF-8 or has NUL");
	FUZZ_CHECK(fuzz_within(w.p, w.len, data, size), "writer outside the input");
	memcpy(writer, w.p ? w.p : "", w.len);
	writer[w.len] = '\0';

	st_buf_init(&b);
	switch (proto_pub_kind(m)) {
	case PROTO_PUB_BATCH: {
		size_t n = proto_pub_count(m);
		uint64_t last = proto_pub_prev(m);
		proto_pub_event *evs;

		FUZZ_CHECK(n >= 1, "empty batch accepted");
		for (size_t i = 0; i < n; i++) {
			const proto_pub_event *ev = proto_pub_event_at(m, i);

			FUZZ_CHECK(ev != NULL, "event %zu is NULL", i);
			FUZZ_CHECK(ev->seq > last, "event %zu: seq %llu not above %llu", i, (unsigned long long)ev->seq,
				   (unsigned long long)last);
			last = ev->seq;
			check_event(ev, i, data, size);
		}
		FUZZ_CHECK(proto_pub_head(m) == last, "head %llu is not the last seq %llu",
			   (unsigned long long)proto_pub_head(m), (unsigned long long)last);
		evs = malloc(n * sizeof(*evs));
		FUZZ_CHECK(evs != NULL, "malloc");
		for (size_t i = 0; i < n; i++)
			evs[i] = *proto_pub_event_at(m, i);
		proto_pub_batch_encode(&b, writer, proto_pub_prev(m), evs, n);
		free(evs);
		break;
	}
	case PROTO_PUB_TICK: proto_pub_tick_encode(&b, writer, proto_pub_head(m)); break;
	default: FUZZ_CHECK(0, "kind %d", (int)proto_pub_kind(m));
	}
	rv = proto_pub_decode(b.p, b.len, &m2);
	FUZZ_CHECK(rv == ST_OK, "re-encoded message refused (%d)", (int)rv);
	check_same(m, m2);
	proto_pub_free(m2);
	st_buf_fini(&b);
	proto_pub_free(m);
	return 0;
}
