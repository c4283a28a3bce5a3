/*
 * Unit tests for proto/wire: round trips of every message, every rule of the
 * ingest contract refused (table-driven), truncation at every byte, hostile
 * headers that claim billions of elements (run under ASan: they must be
 * refused without allocating), and every msgpack encoding of str, array, map
 * and int accepted.
 *
 * SIZE.  Over 800 lines on purpose: one table of cases per format, in the
 * order of wire.c.
 */
#include "wire.h"
#include "wire_pub.h"
#include "st_test.h"
#include "st_util.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

static int
buf_write(void *data, const char *b, size_t n)
{
	st_buf_append(data, b, n);
	return 0;
}

static proto_str
S(const char *s)
{
	proto_str r = { s, strlen(s) };
	return r;
}

/* Decodes from an exact-size heap copy, so ASan sees any read past the end. */
static st_err
decode_req(const void *p, size_t len, proto_request **out, char *detail, size_t dlen)
{
	void *copy = st_xmalloc(len);
	st_err rv;

	memcpy(copy, p, len);
	rv = proto_request_decode(copy, len, out, detail, dlen);
	if (rv == ST_OK) {
		/* the request points into its input: keep the copy for the caller */
		proto_request_free(*out);
		*out = NULL;
		rv = proto_request_decode(p, len, out, detail, dlen);
	}
	free(copy);
	return rv;
}

static void
t_request_roundtrip(void)
{
	proto_str ab[2] = { S("user:1"), S("\xc3\xa9t\xc3\xa9") };
	proto_event ev[3];
	proto_request *r = NULL;
	st_buf b;
	char detail[128];

	memset(ev, 0, sizeof(ev));
	ev[0].topic = S("orders/eu-1.v2:x_y");
	ev[0].about = ab;
	ev[0].n_about = 2;
	ev[0].data = S("{\"a\": 1,\n \"s\": \"x  y\"}");
	ev[0].has_data = true;
	ev[0].key = S("producer-1:42");
	ev[0].has_key = true;
	ev[1].topic = S("t"); /* a change signal, nothing else */
	ev[2].topic = S("t");
	ev[2].data = S("  [1, 2]  ");
	ev[2].has_data = true;

	st_buf_init(&b);
	proto_request_encode(&b, ev, 3, true);
	ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
	if (r == NULL)
		goto out;
	ST_CHECK_EQ_U64(proto_request_count(r), 3);
	const proto_event *e = proto_request_event(r, 0);
	ST_CHECK_MEM(e->topic.p, e->topic.len, "orders/eu-1.v2:x_y");
	ST_CHECK_EQ_U64(e->n_about, 2);
	ST_CHECK_MEM(e->about[0].p, e->about[0].len, "user:1");
	ST_CHECK_MEM(e->about[1].p, e->about[1].len, "\xc3\xa9t\xc3\xa9");
	ST_CHECK(e->has_data);
	ST_CHECK_MEM(e->data.p, e->data.len, "{\"a\":1,\"s\":\"x  y\"}");
	ST_CHECK(e->has_key);
	ST_CHECK_MEM(e->key.p, e->key.len, "producer-1:42");
	e = proto_request_event(r, 1);
	ST_CHECK(!e->has_data && !e->has_key && e->n_about == 0);
	e = proto_request_event(r, 2);
	ST_CHECK_MEM(e->data.p, e->data.len, "[1,2]");
	ST_CHECK(proto_request_bytes(r) >= b.len + 5 + 18);
	ST_CHECK(proto_request_bytes(r) <= proto_request_bytes_max(b.len));
	proto_request_free(r);
	r = NULL;

	/* a single map is one event */
	st_buf_reset(&b);
	ev[0].data = S("{\"a\": 1}");
	proto_request_encode(&b, ev, 1, false);
	ST_CHECK(b.p[0] == (char)0x84);
	ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
	ST_CHECK(r && proto_request_count(r) == 1);
	if (r) {
		e = proto_request_event(r, 0);
		ST_CHECK_MEM(e->data.p, e->data.len, "{\"a\":1}");
	}
	proto_request_free(r);
	proto_request_free(NULL);
out:
	st_buf_fini(&b);
}

/* ---- contract violations built from proto_event ---------------------- */

static char big[PROTO_MAX_DATA + 16];
static proto_str many_about[PROTO_MAX_ABOUT + 1];

static void
fill_big(size_t n, char c)
{
	memset(big, c, n);
}

struct ev_case {
	const char *name;
	void (*mk)(proto_event *ev);
	const char *detail; /* expected substring */
};

static void
mk_topic_char(proto_event *e)
{
	e->topic = S("a b");
}
static void
mk_topic_nul(proto_event *e)
{
	e->topic.p = "a\0b";
	e->topic.len = 3;
}
static void
mk_topic_utf8(proto_event *e)
{
	e->topic = S("caf\xc3\xa9");
}
static void
mk_topic_empty(proto_event *e)
{
	e->topic = S("");
}
static void
mk_topic_201(proto_event *e)
{
	fill_big(201, 'a');
	e->topic.p = big;
	e->topic.len = 201;
}
static void
mk_about_65(proto_event *e)
{
	e->about = many_about;
	e->n_about = 65;
}
static void
mk_about_201(proto_event *e)
{
	fill_big(201, 'a');
	many_about[0].p = big;
	many_about[0].len = 201;
	e->about = many_about;
	e->n_about = 1;
}
static void
mk_about_empty(proto_event *e)
{
	many_about[0] = S("");
	e->about = many_about;
	e->n_about = 1;
}
static void
mk_about_utf8(proto_event *e)
{
	many_about[0] = S("\xc0\xaf");
	e->about = many_about;
	e->n_about = 1;
}
static void
mk_about_nul(proto_event *e)
{
	many_about[0].p = "a\0";
	many_about[0].len = 2;
	e->about = many_about;
	e->n_about = 1;
}
static void
mk_data_big(proto_event *e)
{
	/* a valid JSON string of 256 KiB + 1 bytes */
	fill_big(PROTO_MAX_DATA + 1, 'x');
	big[0] = '"';
	big[PROTO_MAX_DATA] = '"';
	e->data.p = big;
	e->data.len = PROTO_MAX_DATA + 1;
	e->has_data = true;
}
static void
mk_data_bad(proto_event *e)
{
	e->data = S("{\"a\":}");
	e->has_data = true;
}
static void
mk_data_nl(proto_event *e)
{
	e->data = S("\"a\nb\"");
	e->has_data = true;
}
static void
mk_data_empty(proto_event *e)
{
	e->data = S("");
	e->has_data = true;
}
static void
mk_data_nan(proto_event *e)
{
	e->data = S("[NaN]");
	e->has_data = true;
}
static void
mk_data_two(proto_event *e)
{
	e->data = S("1 2");
	e->has_data = true;
}
static void
mk_key_empty(proto_event *e)
{
	e->key = S("");
	e->has_key = true;
}
static void
mk_key_201(proto_event *e)
{
	fill_big(201, 'k');
	e->key.p = big;
	e->key.len = 201;
	e->has_key = true;
}
static void
mk_key_nul(proto_event *e)
{
	e->key.p = "k\0";
	e->key.len = 2;
	e->has_key = true;
}
static void
mk_key_utf8(proto_event *e)
{
	e->key = S("\xff");
	e->has_key = true;
}

static const struct ev_case ev_cases[] = {
	{ "topic with a space", mk_topic_char, "event 1: topic: bad character" },
	{ "topic with NUL", mk_topic_nul, "event 1: topic: bad character" },
	{ "topic non-ASCII", mk_topic_utf8, "event 1: topic: bad character" },
	{ "topic 0 bytes", mk_topic_empty, "event 1: topic: empty" },
	{ "topic 201 bytes", mk_topic_201, "event 1: topic: too long" },
	{ "65 about entries", mk_about_65, "event 1: about: too many entries" },
	{ "about entry 201 bytes", mk_about_201, "event 1: about[0]: too long" },
	{ "about entry empty", mk_about_empty, "event 1: about[0]: empty" },
	{ "about entry overlong UTF-8", mk_about_utf8, "event 1: about[0]: invalid UTF-8" },
	{ "about entry with NUL", mk_about_nul, "event 1: about[0]: invalid UTF-8 or NUL" },
	{ "data 256 KiB + 1", mk_data_big, "event 1: data: too long" },
	{ "data invalid JSON", mk_data_bad, "event 1: data: invalid JSON" },
	{ "data raw newline in string", mk_data_nl, "event 1: data: invalid JSON: control character" },
	{ "data empty", mk_data_empty, "event 1: data: invalid JSON" },
	{ "data NaN", mk_data_nan, "event 1: data: invalid JSON" },
	{ "data two values", mk_data_two, "event 1: data: invalid JSON" },
	{ "key empty", mk_key_empty, "event 1: key: empty" },
	{ "key 201 bytes", mk_key_201, "event 1: key: too long" },
	{ "key with NUL", mk_key_nul, "event 1: key: invalid UTF-8" },
	{ "key invalid UTF-8", mk_key_utf8, "event 1: key: invalid UTF-8" },
};

static void
t_request_rules(void)
{
	st_buf b;
	char detail[160];

	for (size_t i = 0; i <= PROTO_MAX_ABOUT; i++)
		many_about[i] = S("x");
	st_buf_init(&b);
	for (size_t i = 0; i < ST_ARRAY_LEN(ev_cases); i++) {
		proto_event ev[2];
		proto_request *r = NULL;

		memset(ev, 0, sizeof(ev));
		ev[0].topic = S("ok");
		ev[1].topic = S("ok");
		ev_cases[i].mk(&ev[1]);
		st_buf_reset(&b);
		proto_request_encode(&b, ev, 2, true);
		detail[0] = 'X';
		st_err rv = decode_req(b.p, b.len, &r, detail, sizeof(detail));
		if (rv != ST_EINVAL || strstr(detail, ev_cases[i].detail) == NULL)
			fprintf(stderr, "case \"%s\": rv %d detail \"%s\"\n", ev_cases[i].name, rv, detail);
		ST_CHECK(rv == ST_EINVAL && r == NULL);
		ST_CHECK(strstr(detail, ev_cases[i].detail) != NULL);
		ST_CHECK(strchr(detail, '\n') == NULL);
		proto_request_free(r);
		for (size_t k = 0; k <= PROTO_MAX_ABOUT; k++)
			many_about[k] = S("x");
	}

	/* the limits themselves are accepted */
	{
		proto_event ev;
		proto_request *r = NULL;

		memset(&ev, 0, sizeof(ev));
		fill_big(200, 'a');
		ev.topic.p = big;
		ev.topic.len = 200;
		ev.about = many_about;
		ev.n_about = 64;
		ev.key.p = big;
		ev.key.len = 200;
		ev.has_key = true;
		st_buf_reset(&b);
		proto_request_encode(&b, &ev, 1, false);
		ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
		proto_request_free(r);
		r = NULL;

		char *data = st_xmalloc(PROTO_MAX_DATA);
		memset(data, ' ', PROTO_MAX_DATA);
		data[0] = '"';
		data[PROTO_MAX_DATA - 2] = '"'; /* and one byte of trailing space */
		ev.data.p = data;
		ev.data.len = PROTO_MAX_DATA;
		ev.has_data = true;
		st_buf_reset(&b);
		proto_request_encode(&b, &ev, 1, false);
		ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
		if (r)
			ST_CHECK_EQ_U64(proto_request_event(r, 0)->data.len, PROTO_MAX_DATA - 1);
		proto_request_free(r);
		free(data);
	}
	st_buf_fini(&b);
}

/* ---- contract violations as raw bytes -------------------------------- */

struct raw_case {
	const char *name;
	const char *bytes;
	size_t len;
	const char *detail;
};

#define RAW(name, lit, detail)                     \
	{                                          \
		name, lit, sizeof(lit) - 1, detail \
	}
/* a string literal and its length, NULs included */
#define B(lit) lit, sizeof(lit) - 1

/* 0x81 = fixmap 1, 0xa5 "topic" = fixstr 5 */
static const struct raw_case raw_cases[] = {
	RAW("empty input", "", "empty request"),
	RAW("not a map or array", "\xa1x", "not a map or an array"),
	RAW("nil", "\xc0", "not a map or an array"),
	RAW("empty array", "\x90", "empty batch"),
	RAW("array of a non-map", "\x91\x01", "event 0: not a map"),
	RAW("empty map", "\x80", "event 0: topic: missing"),
	RAW("unknown key",
	    "\x82\xa5topic\xa1t\xa3"
	    "foo\x01",
	    "event 0: unknown key \"foo\""),
	RAW("unknown key, quotes made safe",
	    "\x81\xa3"
	    "a\"\n\x01",
	    "event 0: unknown key \"a??\""),
	RAW("duplicate key", "\x82\xa5topic\xa1t\xa5topic\xa1u", "event 0: duplicate key \"topic\""),
	RAW("duplicate about",
	    "\x83\xa5topic\xa1t\xa5"
	    "about\x90\xa5"
	    "about\x90",
	    "event 0: duplicate key \"about\""),
	RAW("non-str key", "\x81\x01\xa1t", "event 0: a key is not a str"),
	RAW("bin key", "\x81\xc4\x05topic\xa1t", "event 0: a key is not a str"),
	RAW("topic int", "\x81\xa5topic\x01", "event 0: topic: not a str"),
	RAW("topic bin", "\x81\xa5topic\xc4\x01t", "event 0: topic: not a str"),
	RAW("topic nil", "\x81\xa5topic\xc0", "event 0: topic: not a str"),
	RAW("about str",
	    "\x82\xa5topic\xa1t\xa5"
	    "about\xa1x",
	    "event 0: about: not an array"),
	RAW("about map",
	    "\x82\xa5topic\xa1t\xa5"
	    "about\x80",
	    "event 0: about: not an array"),
	RAW("about entry int",
	    "\x82\xa5topic\xa1t\xa5"
	    "about\x91\x01",
	    "event 0: about[0]: not a str"),
	RAW("data map",
	    "\x82\xa5topic\xa1t\xa4"
	    "data\x80",
	    "event 0: data: not a str or nil"),
	RAW("data bin",
	    "\x82\xa5topic\xa1t\xa4"
	    "data\xc4\x01"
	    "1",
	    "event 0: data: not a str or nil"),
	RAW("data int",
	    "\x82\xa5topic\xa1t\xa4"
	    "data\x01",
	    "event 0: data: not a str or nil"),
	RAW("key int", "\x82\xa5topic\xa1t\xa3key\x01", "event 0: key: not a str or nil"),
	RAW("key bool", "\x82\xa5topic\xa1t\xa3key\xc3", "event 0: key: not a str or nil"),
	RAW("trailing bytes", "\x81\xa5topic\xa1t\x00", "trailing bytes"),
	RAW("trailing after batch", "\x91\x81\xa5topic\xa1t\xc0", "trailing bytes"),
	RAW("second event missing", "\x92\x81\xa5topic\xa1t", "truncated"),
	RAW("array32 of 4e9", "\xdd\xff\xff\xff\xff", "truncated"),
	RAW("array16 of 65535", "\xdc\xff\xff", "truncated"),
	RAW("map16 of 65535", "\xde\xff\xff", "event 0: truncated"),
	RAW("map32 of 4e9", "\xdf\xff\xff\xff\xff", "event 0: truncated"),
	RAW("str32 topic of 4 GB", "\x81\xa5topic\xdb\xff\xff\xff\xff", "event 0: topic: truncated"),
	RAW("str32 data of 4 GB",
	    "\x82\xa5topic\xa1t\xa4"
	    "data\xdb\xff\xff\xff\xff"
	    "1",
	    "event 0: data: truncated"),
	RAW("array32 about of 4e9",
	    "\x82\xa5topic\xa1t\xa5"
	    "about\xdd\xff\xff\xff\xff",
	    "event 0: about: truncated"),
	RAW("str32 key name of 4 GB", "\x81\xdb\xff\xff\xff\xff", "event 0: truncated"),
	RAW("reserved byte", "\xc1", "not a map or an array"),
};

static void
t_request_raw(void)
{
	char detail[160];

	for (size_t i = 0; i < ST_ARRAY_LEN(raw_cases); i++) {
		proto_request *r = NULL;
		const struct raw_case *c = &raw_cases[i];
		/* an exact-size heap copy: a read past the end is an ASan error */
		char *copy = st_xmalloc(c->len);
		memcpy(copy, c->bytes, c->len);
		detail[0] = '\0';
		st_err rv = proto_request_decode(copy, c->len, &r, detail, sizeof(detail));
		if (rv != ST_EINVAL || strstr(detail, c->detail) == NULL)
			fprintf(stderr, "raw case \"%s\": rv %d detail \"%s\"\n", c->name, rv, detail);
		ST_CHECK(rv == ST_EINVAL && r == NULL);
		ST_CHECK(strstr(detail, c->detail) != NULL);
		/* NULL detail is allowed */
		ST_CHECK(proto_request_decode(copy, c->len, &r, NULL, 0) == ST_EINVAL);
		free(copy);
	}
}

static void
t_request_counts(void)
{
	st_buf b;
	msgpack_packer pk;
	proto_request *r = NULL;
	char detail[128];

	/* 10001 events */
	st_buf_init(&b);
	msgpack_packer_init(&pk, &b, buf_write);
	msgpack_pack_array(&pk, PROTO_MAX_BATCH + 1);
	for (unsigned i = 0; i < PROTO_MAX_BATCH + 1; i++) {
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "topic", 5);
		msgpack_pack_str_with_body(&pk, "t", 1);
	}
	ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_EINVAL);
	ST_CHECK(strstr(detail, "too many events") != NULL);

	/* 10000 is fine */
	st_buf_reset(&b);
	msgpack_pack_array(&pk, PROTO_MAX_BATCH);
	for (unsigned i = 0; i < PROTO_MAX_BATCH; i++) {
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "topic", 5);
		msgpack_pack_str_with_body(&pk, "t", 1);
	}
	ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
	ST_CHECK(r && proto_request_count(r) == PROTO_MAX_BATCH);
	proto_request_free(r);
	r = NULL;

	/* a request over 16 MiB is refused before it is looked at */
	char *huge = st_xcalloc(1, PROTO_MAX_REQUEST + 1);
	ST_CHECK(proto_request_decode(huge, PROTO_MAX_REQUEST + 1, &r, detail, sizeof(detail)) == ST_EINVAL);
	ST_CHECK(strstr(detail, "request too large") != NULL);
	free(huge);

	/* the detail is truncated, never overflowed */
	char tiny[8];
	memset(tiny, 'Z', sizeof(tiny));
	ST_CHECK(proto_request_decode("\x90", 1, &r, tiny, 4) == ST_EINVAL);
	ST_CHECK(tiny[3] == '\0' && tiny[4] == 'Z');
	st_buf_fini(&b);
}

/* Every msgpack encoding of str, array and map is accepted. */
static void
t_request_encodings(void)
{
	/* map32 { str16 "topic": str32 "t", str8 "about": array32 [str8 "a"],
	 *         str32 "data": str16 "[ 1 ]", fixstr "key": nil } */
	static const char req[] = "\xdd\x00\x00\x00\x01"
				  "\xdf\x00\x00\x00\x04"
				  "\xda\x00\x05topic"
				  "\xdb\x00\x00\x00\x01t"
				  "\xd9\x05"
				  "about"
				  "\xdd\x00\x00\x00\x01"
				  "\xd9\x01"
				  "a"
				  "\xdb\x00\x00\x00\x04"
				  "data"
				  "\xda\x00\x05[ 1 ]"
				  "\xa3key\xc0";
	static const char req16[] = "\xdc\x00\x01\xde\x00\x02\xa5topic\xa1t\xa5"
				    "about\xdc\x00\x00";
	proto_request *r = NULL;
	char detail[128];

	ST_CHECK(decode_req(req, sizeof(req) - 1, &r, detail, sizeof(detail)) == ST_OK);
	if (r) {
		const proto_event *e = proto_request_event(r, 0);
		ST_CHECK_MEM(e->topic.p, e->topic.len, "t");
		ST_CHECK(e->n_about == 1 && e->about[0].len == 1 && e->about[0].p[0] == 'a');
		ST_CHECK_MEM(e->data.p, e->data.len, "[1]");
		ST_CHECK(!e->has_key);
	}
	proto_request_free(r);
	r = NULL;
	ST_CHECK(decode_req(req16, sizeof(req16) - 1, &r, detail, sizeof(detail)) == ST_OK);
	ST_CHECK(r && proto_request_event(r, 0)->n_about == 0);
	proto_request_free(r);
	r = NULL;
	/* about nil and data nil are "absent" */
	static const char nils[] = "\x83\xa5topic\xa1t\xa5"
				   "about\xc0\xa4"
				   "data\xc0";
	ST_CHECK(decode_req(nils, sizeof(nils) - 1, &r, detail, sizeof(detail)) == ST_OK);
	ST_CHECK(r && !proto_request_event(r, 0)->has_data);
	proto_request_free(r);
}

/* Truncating a valid request at every byte offset is refused, never a crash. */
static void
t_request_truncated(void)
{
	proto_str ab[2] = { S("a"), S("bb") };
	proto_event ev[2];
	st_buf b;
	char detail[128];

	memset(ev, 0, sizeof(ev));
	ev[0].topic = S("topic.one");
	ev[0].about = ab;
	ev[0].n_about = 2;
	ev[0].data = S("{\"x\": [1, 2, {\"y\": null}]}");
	ev[0].has_data = true;
	ev[0].key = S("k1");
	ev[0].has_key = true;
	ev[1].topic = S("t2");
	st_buf_init(&b);
	for (int batch = 0; batch < 2; batch++) {
		st_buf_reset(&b);
		proto_request_encode(&b, ev, batch ? 2 : 1, batch);
		for (size_t k = 0; k < b.len; k++) {
			proto_request *r = NULL;
			char *copy = st_xmalloc(k ? k : 1);
			memcpy(copy, b.p, k);
			st_err rv = proto_request_decode(copy, k, &r, detail, sizeof(detail));
			if (rv != ST_EINVAL)
				fprintf(stderr, "truncated at %zu accepted\n", k);
			ST_CHECK(rv == ST_EINVAL && r == NULL);
			free(copy);
		}
		proto_request *r = NULL;
		ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
		proto_request_free(r);
	}
	st_buf_fini(&b);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Random byte flips of valid messages: no crash, no leak, deterministic verdicts. */
static void
t_mutations(void)
{
	proto_str ab[1] = { S("a") };
	proto_pub_event pe[2] = { { 5, { "t", 1 }, ab, 1, { "{}", 2 }, true },
				  { 7, { "u", 1 }, NULL, 0, { NULL, 0 }, false } };
	proto_event ev = { { "topic", 5 }, ab, 1, { "[1,{\"a\":2}]", 11 }, true, { "k", 1 }, true };
	st_buf req, pub;
	char m[256], detail[64];
	int accepted = 0;

	st_buf_init(&req);
	st_buf_init(&pub);
	proto_request_encode(&req, &ev, 1, true);
	proto_pub_batch_encode(&pub, "w1", 4, pe, 2);
	for (int it = 0; it < 20000; it++) {
		st_buf *src = it & 1 ? &pub : &req;
		size_t len = src->len;
		memcpy(m, src->p, len);
		for (int f = 0, nf = 1 + (int)(rnd() % 3); f < nf; f++)
			m[rnd() % len] = (char)rnd();
		if (it & 1) {
			proto_pub *p = NULL, *p2 = NULL;
			st_err a = proto_pub_decode(m, len, &p), b2 = proto_pub_decode(m, len, &p2);
			ST_CHECK(a == b2);
			accepted += a == ST_OK;
			proto_pub_free(p);
			proto_pub_free(p2);
		} else {
			proto_request *r = NULL;
			st_err a = proto_request_decode(m, len, &r, detail, sizeof(detail));
			accepted += a == ST_OK;
			proto_request_free(r);
		}
		proto_reply rep;
		if (proto_reply_decode(m, len, &rep) == ST_OK)
			proto_reply_fini(&rep);
	}
	ST_CHECK(accepted > 0);
	st_buf_fini(&req);
	st_buf_fini(&pub);
}

/* ---- replies ------------------------------------------------------------ */

static void
t_reply(void)
{
	uint64_t seqs[3] = { 1, 300, UINT64_MAX };
	proto_reply rep;
	st_buf b;

	st_buf_init(&b);
	proto_reply_ok_encode(&b, seqs, 3);
	ST_CHECK(proto_reply_decode(b.p, b.len, &rep) == ST_OK);
	ST_CHECK(rep.ok && rep.n_seqs == 3 && rep.seqs[0] == 1 && rep.seqs[1] == 300 && rep.seqs[2] == UINT64_MAX);
	proto_reply_fini(&rep);
	ST_CHECK(rep.seqs == NULL);

	st_buf_reset(&b);
	proto_reply_ok_encode(&b, NULL, 0);
	ST_CHECK(proto_reply_decode(b.p, b.len, &rep) == ST_OK && rep.ok && rep.n_seqs == 0);
	proto_reply_fini(&rep);

	st_buf_reset(&b);
	proto_reply_err_encode(&b, "invalid", "event 3: topic: bad character");
	ST_CHECK(proto_reply_decode(b.p, b.len, &rep) == ST_OK);
	ST_CHECK(!rep.ok && rep.seqs == NULL);
	ST_CHECK_STR(rep.error, "invalid");
	ST_CHECK_STR(rep.detail, "event 3: topic: bad character");
	proto_reply_fini(&rep);

	/* a long detail is truncated */
	char longd[2000];
	memset(longd, 'd', sizeof(longd) - 1);
	longd[sizeof(longd) - 1] = '\0';
	st_buf_reset(&b);
	proto_reply_err_encode(&b, "busy", longd);
	ST_CHECK(proto_reply_decode(b.p, b.len, &rep) == ST_OK);
	ST_CHECK_EQ_U64(strlen(rep.detail), sizeof(rep.detail) - 1);
	ST_CHECK_STR(rep.error, "busy");
	proto_reply_fini(&rep);

	/* every int encoding a seq may use; unknown keys skipped */
	static const char ints[] =
		"\x83\xa2ok\xc3\xa4seqs\x97"
		"\x05\xcc\xc8\xcd\x01\x00\xce\x00\x01\x00\x00\xcf\x00\x00\x00\x01\x00\x00\x00\x00"
		"\xd0\x07\xd3\x00\x00\x00\x00\x00\x00\x00\x09"
		"\xa5"
		"extra\x82\xa1x\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xc4\x01z\xa1y\xd6\x01\x00\x00\x00\x00";
	ST_CHECK(proto_reply_decode(ints, sizeof(ints) - 1, &rep) == ST_OK);
	ST_CHECK(rep.n_seqs == 7 && rep.seqs[0] == 5 && rep.seqs[1] == 200 && rep.seqs[2] == 256 &&
		 rep.seqs[3] == 65536 && rep.seqs[4] == 1ull << 32 && rep.seqs[5] == 7 && rep.seqs[6] == 9);
	proto_reply_fini(&rep);

	static const struct {
		const char *b;
		size_t len;
	} bad[] = {
		{ B("") },
		{ B("\x80") },                                       /* no ok */
		{ B("\x81\xa2ok\xc3") },                             /* ok without seqs */
		{ B("\x81\xa2ok\xc2") },                             /* error without code */
		{ B("\x82\xa2ok\x01\xa4seqs\x90") },                 /* ok not a bool */
		{ B("\x82\xa2ok\xc3\xa4seqs\x91\xff") },             /* negative seq */
		{ B("\x82\xa2ok\xc3\xa4seqs\x91\xd0\x80") },         /* negative int8 */
		{ B("\x82\xa2ok\xc3\xa4seqs\x91\xa1x") },            /* str seq */
		{ B("\x82\xa2ok\xc3\xa4seqs\x90\x00") },             /* trailing */
		{ B("\x82\xa2ok\xc3\xa4seqs\xdd\xff\xff\xff\xff") }, /* array32 of 4e9 */
		{ B("\xde\xff\xff") },
		{ B("\x82\xa2ok\xc2\xa5"
		    "error\xdb\xff\xff\xff\xff") },
	};
	for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
		char *copy = st_xmalloc(bad[i].len ? bad[i].len : 1);
		memcpy(copy, bad[i].b, bad[i].len);
		if (proto_reply_decode(copy, bad[i].len, &rep) != ST_EPROTO)
			fprintf(stderr, "bad reply %zu accepted\n", i);
		ST_CHECK(proto_reply_decode(copy, bad[i].len, &rep) == ST_EPROTO);
		ST_CHECK(rep.seqs == NULL);
		free(copy);
	}

	/* truncation of a valid reply at every offset */
	st_buf_reset(&b);
	proto_reply_ok_encode(&b, seqs, 3);
	for (size_t k = 0; k < b.len; k++) {
		char *copy = st_xmalloc(k ? k : 1);
		memcpy(copy, b.p, k);
		ST_CHECK(proto_reply_decode(copy, k, &rep) == ST_EPROTO);
		free(copy);
	}
	st_buf_fini(&b);
}

/* ---- published messages ---------------------------------------------------- */

static void
t_pub_roundtrip(void)
{
	proto_str ab[2] = { S("a"), S("b:2") };
	proto_pub_event ev[3];
	proto_pub *m = NULL;
	st_buf b;

	memset(ev, 0, sizeof(ev));
	ev[0].seq = 11;
	ev[0].topic = S("t1");
	ev[0].about = ab;
	ev[0].n_about = 2;
	ev[0].data = S("{\"a\":1}");
	ev[0].has_data = true;
	ev[1].seq = 13; /* a hole: a rolled-back identity value */
	ev[1].topic = S("t2");
	ev[2].seq = 1ull << 40;
	ev[2].topic = S("t1");
	ev[2].data = S("\"\xc3\xa9\"");
	ev[2].has_data = true;

	st_buf_init(&b);
	proto_pub_batch_encode(&b, "writer-a", 10, ev, 3);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_OK);
	if (m) {
		ST_CHECK(proto_pub_kind(m) == PROTO_PUB_BATCH);
		proto_str w = proto_pub_writer(m);
		ST_CHECK_MEM(w.p, w.len, "writer-a");
		ST_CHECK_EQ_U64(proto_pub_prev(m), 10);
		ST_CHECK_EQ_U64(proto_pub_head(m), 1ull << 40);
		ST_CHECK_EQ_U64(proto_pub_count(m), 3);
		const proto_pub_event *e = proto_pub_event_at(m, 0);
		ST_CHECK_EQ_U64(e->seq, 11);
		ST_CHECK_MEM(e->topic.p, e->topic.len, "t1");
		ST_CHECK(e->n_about == 2);
		ST_CHECK_MEM(e->about[1].p, e->about[1].len, "b:2");
		ST_CHECK(e->has_data);
		ST_CHECK_MEM(e->data.p, e->data.len, "{\"a\":1}");
		e = proto_pub_event_at(m, 1);
		ST_CHECK(e->seq == 13 && !e->has_data && e->n_about == 0);
		e = proto_pub_event_at(m, 2);
		ST_CHECK_MEM(e->data.p, e->data.len, "\"\xc3\xa9\"");
	}
	proto_pub_free(m);
	m = NULL;

	st_buf_reset(&b);
	proto_pub_tick_encode(&b, "writer-a", 99);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_OK);
	ST_CHECK(m && proto_pub_kind(m) == PROTO_PUB_TICK && proto_pub_head(m) == 99 && proto_pub_count(m) == 0);
	proto_pub_free(m);
	proto_pub_free(NULL);

	/* truncation at every offset */
	st_buf_reset(&b);
	proto_pub_batch_encode(&b, "writer-a", 10, ev, 3);
	for (size_t k = 0; k < b.len; k++) {
		char *copy = st_xmalloc(k ? k : 1);
		memcpy(copy, b.p, k);
		m = NULL;
		ST_CHECK(proto_pub_decode(copy, k, &m) == ST_EPROTO && m == NULL);
		free(copy);
	}
	st_buf_fini(&b);
}

static void
t_pub_refused(void)
{
	proto_pub_event ev[2];
	proto_pub *m = NULL;
	st_buf b;

	st_buf_init(&b);
	memset(ev, 0, sizeof(ev));
	ev[0].seq = 5;
	ev[0].topic = S("t");
	ev[1].seq = 6;
	ev[1].topic = S("t");

	/* seq == prev, descending, equal */
	proto_pub_batch_encode(&b, "w", 5, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	st_buf_reset(&b);
	ev[1].seq = 5;
	proto_pub_batch_encode(&b, "w", 4, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	st_buf_reset(&b);
	ev[1].seq = 3;
	proto_pub_batch_encode(&b, "w", 1, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	ev[1].seq = 6;
	/* empty batch */
	st_buf_reset(&b);
	proto_pub_batch_encode(&b, "w", 4, ev, 0);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	/* bad topic, invalid UTF-8 data, data over the bound */
	st_buf_reset(&b);
	ev[0].topic = S("a b");
	proto_pub_batch_encode(&b, "w", 4, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	ev[0].topic = S("t");
	st_buf_reset(&b);
	ev[0].data = S("\"\xff\"");
	ev[0].has_data = true;
	proto_pub_batch_encode(&b, "w", 4, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	char *data = st_xmalloc(PROTO_MAX_DATA + 1);
	memset(data, '1', PROTO_MAX_DATA + 1);
	ev[0].data.p = data;
	ev[0].data.len = PROTO_MAX_DATA + 1;
	st_buf_reset(&b);
	proto_pub_batch_encode(&b, "w", 4, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_EPROTO);
	ev[0].data.len = PROTO_MAX_DATA; /* the bound itself is fine */
	st_buf_reset(&b);
	proto_pub_batch_encode(&b, "w", 4, ev, 2);
	ST_CHECK(proto_pub_decode(b.p, b.len, &m) == ST_OK);
	proto_pub_free(m);
	m = NULL;
	free(data);

	static const struct {
		const char *name, *b;
		size_t len;
	} bad[] = {
		{ "version 2", B("\x84\xa1v\x02\xa1k\xa4tick\xa1w\xa1w\xa4head\x01") },
		{ "no version", B("\x83\xa1k\xa4tick\xa1w\xa1w\xa4head\x01") },
		{ "version str", B("\x84\xa1v\xa1"
				   "1\xa1k\xa4tick\xa1w\xa1w\xa4head\x01") },
		{ "unknown kind", B("\x84\xa1v\x01\xa1k\xa4tock\xa1w\xa1w\xa4head\x01") },
		{ "tick without head", B("\x83\xa1v\x01\xa1k\xa4tick\xa1w\xa1w") },
		{ "tick without writer", B("\x83\xa1v\x01\xa1k\xa4tick\xa4head\x01") },
		{ "batch without ev", B("\x84\xa1v\x01\xa1k\xa5"
					"batch\xa1w\xa1w\xa4prev\x01") },
		{ "event not 4 long", B("\x85\xa1v\x01\xa1k\xa5"
					"batch\xa1w\xa1w\xa4prev\x01\xa2"
					"ev\x91\x93\x02\xa1t\x90") },
		{ "array32 of 4e9 events", B("\x85\xa1v\x01\xa1k\xa5"
					     "batch\xa1w\xa1w\xa4prev\x01\xa2"
					     "ev\xdd\xff\xff\xff\xff") },
		{ "array32 of 4e9", B("\xdd\xff\xff\xff\xff") },
		{ "map16 of 65535", B("\xde\xff\xff") },
		{ "str32 of 4 GB", B("\x81\xdb\xff\xff\xff\xff") },
		{ "tick with events", B("\x85\xa1v\x01\xa1k\xa4tick\xa1w\xa1w\xa4head\x01\xa2"
					"ev\x90") },
		{ "trailing", B("\x84\xa1v\x01\xa1k\xa4tick\xa1w\xa1w\xa4head\x01\xc0") },
		{ "deep unknown value", B("\x85\xa1v\x01\xa1k\xa4tick\xa1w\xa1w\xa4head\x01\xa1x"
					  "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
					  "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
					  "\x91\x91\x91\x91\xc0") },
	};
	for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
		char *copy = st_xmalloc(bad[i].len);
		memcpy(copy, bad[i].b, bad[i].len);
		m = NULL;
		st_err rv = proto_pub_decode(copy, bad[i].len, &m);
		if (rv != ST_EPROTO)
			fprintf(stderr, "pub case \"%s\": rv %d\n", bad[i].name, rv);
		ST_CHECK(rv == ST_EPROTO && m == NULL);
		free(copy);
	}
	/* the same tick with v = 1 and an unknown key is accepted (forward compatible) */
	static const char okt[] = "\x85\xa1v\x01\xa1k\xa4tick\xa1w\xa1w\xa4head\x01\xa1x\x92\x01\xa1y";
	ST_CHECK(proto_pub_decode(okt, sizeof(okt) - 1, &m) == ST_OK);
	proto_pub_free(m);
	st_buf_fini(&b);
}

/* The reservation bound holds for the shapes that stress each allocation. */
static void
t_request_bytes_max(void)
{
	static proto_str ab[64];
	proto_event *ev = calloc(1000, sizeof(*ev));
	char *data = malloc(200001);
	st_buf b;
	proto_request *r = NULL;
	char detail[128];

	for (int i = 0; i < 64; i++)
		ab[i] = S("a");
	memset(data, ' ', 200000);
	data[0] = '1';
	for (int shape = 0; shape < 3; shape++) {
		size_t n = shape == 2 ? 40 : 1000;
		for (size_t i = 0; i < n; i++) {
			memset(&ev[i], 0, sizeof(ev[i]));
			ev[i].topic = S("t");
			if (shape == 0) { /* every about entry as short as it can be */
				ev[i].about = ab;
				ev[i].n_about = 64;
			} else if (shape == 1) { /* tiny events */
				ev[i].data = S("1");
				ev[i].has_data = true;
			} else { /* large data that compacts to almost nothing */
				ev[i].data.p = data;
				ev[i].data.len = 200000;
				ev[i].has_data = true;
			}
		}
		st_buf_init(&b);
		proto_request_encode(&b, ev, n, true);
		ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
		ST_CHECK(r != NULL && proto_request_bytes(r) <= proto_request_bytes_max(b.len));
		proto_request_free(r);
		r = NULL;
		st_buf_fini(&b);
	}
	ST_CHECK(proto_request_bytes_max(PROTO_MAX_REQUEST) < 6u * PROTO_MAX_REQUEST);
	free(ev);
	free(data);
}

/* The request map {"token": T, "events": [...]}: decoded like a batch, its token peeked without a decode. */
static void
t_request_map(void)
{
	proto_event ev[2];
	proto_request *r = NULL;
	proto_str tok;
	st_buf batch, b;
	msgpack_packer pk;
	char detail[160];

	memset(ev, 0, sizeof(ev));
	ev[0].topic = S("orders");
	ev[1].topic = S("users/1");
	st_buf_init(&batch);
	st_buf_init(&b);
	proto_request_encode(&batch, ev, 2, true);
	proto_request_wrap(&b, S("aaa.bbb.ccc"), batch.p, batch.len);
	ST_CHECK(decode_req(b.p, b.len, &r, detail, sizeof(detail)) == ST_OK);
	ST_CHECK(r != NULL && proto_request_count(r) == 2);
	ST_CHECK(r && proto_request_event(r, 1)->topic.len == 7);
	proto_request_free(r);
	r = NULL;
	ST_CHECK(proto_request_token_peek(b.p, b.len, &tok));
	ST_CHECK(tok.len == 11 && memcmp(tok.p, "aaa.bbb.ccc", 11) == 0);
	/* bare shapes have no token */
	ST_CHECK(!proto_request_token_peek(batch.p, batch.len, &tok) && tok.p == NULL);

	/* events first, token second; then a map without a token (valid on the wire) */
	const char *bad[][2] = {
		{ "events-first", NULL },
		{ "no-token", NULL },
		{ "no-events", "events: missing" },
		{ "extra-key", "request map: too many keys" },
		{ "events-map", "events: not an array" },
		{ "token-int", "token: not a str of 1..8192 bytes" },
		{ "trailing", "trailing bytes after the request (1)" },
		{ "empty-events", "empty batch" },
	};
	for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
		const char *name = bad[i][0];

		st_buf_reset(&b);
		msgpack_packer_init(&pk, &b, buf_write);
		if (strcmp(name, "events-first") == 0 || strcmp(name, "no-token") == 0) {
			msgpack_pack_map(&pk, name[0] == 'e' ? 2 : 1);
			msgpack_pack_str(&pk, 6);
			msgpack_pack_str_body(&pk, "events", 6);
			st_buf_append(&b, batch.p, batch.len);
			if (name[0] == 'e') {
				msgpack_pack_str(&pk, 5);
				msgpack_pack_str_body(&pk, "token", 5);
				msgpack_pack_str(&pk, 3);
				msgpack_pack_str_body(&pk, "t.u", 3);
			}
		} else if (strcmp(name, "no-events") == 0) {
			msgpack_pack_map(&pk, 1);
			msgpack_pack_str(&pk, 5);
			msgpack_pack_str_body(&pk, "token", 5);
			msgpack_pack_str(&pk, 3);
			msgpack_pack_str_body(&pk, "t.u", 3);
		} else if (strcmp(name, "extra-key") == 0) {
			proto_request_wrap(&b, S("t.u"), batch.p, batch.len);
			b.p[0] = (char)0x83;
			msgpack_pack_str(&pk, 1);
			msgpack_pack_str_body(&pk, "x", 1);
			msgpack_pack_nil(&pk);
		} else if (strcmp(name, "events-map") == 0) {
			st_buf one;

			st_buf_init(&one);
			proto_request_encode(&one, ev, 1, false);
			proto_request_wrap(&b, S("t.u"), one.p, one.len);
			st_buf_fini(&one);
		} else if (strcmp(name, "token-int") == 0) {
			msgpack_pack_map(&pk, 2);
			msgpack_pack_str(&pk, 5);
			msgpack_pack_str_body(&pk, "token", 5);
			msgpack_pack_int(&pk, 7);
			msgpack_pack_str(&pk, 6);
			msgpack_pack_str_body(&pk, "events", 6);
			st_buf_append(&b, batch.p, batch.len);
		} else if (strcmp(name, "trailing") == 0) {
			proto_request_wrap(&b, S("t.u"), batch.p, batch.len);
			msgpack_pack_nil(&pk);
		} else {
			proto_request_wrap(&b, S("t.u"), "\x90", 1);
		}
		st_err rv = decode_req(b.p, b.len, &r, detail, sizeof(detail));
		fprintf(stderr, "  case %s\n", name);
		if (bad[i][1] == NULL) {
			ST_CHECK_STR(detail, "");
			ST_CHECK(rv == ST_OK && r != NULL && proto_request_count(r) == 2);
			ST_CHECK(proto_request_token_peek(b.p, b.len, &tok) == (name[0] == 'e'));
		} else {
			ST_CHECK(rv == ST_EINVAL);
			ST_CHECK_STR(detail, bad[i][1]);
			ST_CHECK(!proto_request_token_peek(b.p, b.len, &tok) || strcmp(name, "empty-events") == 0);
		}
		proto_request_free(r);
		r = NULL;
	}
	st_buf_fini(&batch);
	st_buf_fini(&b);
}

int
main(void)
{
	ST_RUN(t_request_bytes_max);
	ST_RUN(t_request_roundtrip);
	ST_RUN(t_request_rules);
	ST_RUN(t_request_raw);
	ST_RUN(t_request_counts);
	ST_RUN(t_request_map);
	ST_RUN(t_request_encodings);
	ST_RUN(t_request_truncated);
	ST_RUN(t_mutations);
	ST_RUN(t_reply);
	ST_RUN(t_pub_roundtrip);
	ST_RUN(t_pub_refused);
	return st_test_done();
}
