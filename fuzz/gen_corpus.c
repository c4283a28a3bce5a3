/*
 * gen_corpus: writes the seed corpora under DIR/<target>/ (run by hand,
 * output checked in as fuzz/corpus/): a few valid inputs per target, the
 * msgpack ones made with the project's own encoders so they follow the
 * wire format exactly.  Seeds only need to be valid and varied; the
 * fuzzer finds the invalid ones.
 *
 *   fuzz_gen_corpus DIR
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "st_buf.h"
#include "wire.h"
#include "wire_pub.h"

static const char *root;

static void
put(const char *target, int i, const void *p, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, target);
	if (mkdir(path, 0755) == -1 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/seed_%02d", root, target, i);
	if ((f = fopen(path, "wb")) == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void
put_s(const char *target, int i, const char *s)
{
	put(target, i, s, strlen(s));
}

static proto_str
S(const char *s)
{
	proto_str r = { s, strlen(s) };
	return r;
}

static void
requests(void)
{
	static const proto_str about[] = { { "user:42", 7 }, { "room/7", 6 } };
	proto_event ev[3];
	st_buf b;

	memset(ev, 0, sizeof(ev));
	ev[0].topic = S("orders.eu");
	ev[0].data = S("{\"id\":1,\"total\":12.5}");
	ev[0].has_data = true;

	ev[1].topic = S("chat:room/7");
	ev[1].about = about;
	ev[1].n_about = 2;
	ev[1].data = S("[1, \"\\u00e9\\ud83d\\ude00\", {\"a\": null}, true, false, -0.5e10]");
	ev[1].has_data = true;
	ev[1].key = S("idem-\xc3\xa9-1");
	ev[1].has_key = true;

	ev[2].topic = S("signal-only_1");

	st_buf_init(&b);
	proto_request_encode(&b, &ev[0], 1, false);
	put("proto_request_decode", 0, b.p, b.len);
	st_buf_reset(&b);
	proto_request_encode(&b, ev, 3, true);
	put("proto_request_decode", 1, b.p, b.len);
	st_buf_reset(&b);
	proto_request_encode(&b, &ev[2], 1, false);
	put("proto_request_decode", 2, b.p, b.len);
	st_buf_reset(&b);
	proto_request_encode(&b, &ev[1], 1, true);
	put("proto_request_decode", 3, b.p, b.len);
	{
		/* the request map with a producer token (issue 24) */
		st_buf m;

		st_buf_init(&m);
		st_buf_reset(&b);
		proto_request_encode(&b, ev, 3, true);
		proto_request_wrap(&m, S("eyJhbGciOiJIUzI1NiIsImtpZCI6ImsifQ.eyJleHAiOjF9.c2ln"), b.p, b.len);
		put("proto_request_decode", 4, m.p, m.len);
		st_buf_fini(&m);
	}
	st_buf_fini(&b);
}

static void
pubs(void)
{
	static const proto_str about[] = { { "user:42", 7 } };
	proto_pub_event ev[2];
	st_buf b;

	memset(ev, 0, sizeof(ev));
	ev[0].seq = 41;
	ev[0].topic = S("orders.eu");
	ev[0].data = S("{\"id\":1}");
	ev[0].has_data = true;
	ev[1].seq = 300;
	ev[1].topic = S("chat:room/7");
	ev[1].about = about;
	ev[1].n_about = 1;

	st_buf_init(&b);
	proto_pub_batch_encode(&b, "writer-a", 40, ev, 2);
	put("proto_pub_decode", 0, b.p, b.len);
	st_buf_reset(&b);
	proto_pub_tick_encode(&b, "writer-b", 123456789012ull);
	put("proto_pub_decode", 1, b.p, b.len);
	st_buf_reset(&b);
	proto_pub_batch_encode(&b, "", 0, ev, 1);
	put("proto_pub_decode", 2, b.p, b.len);
	st_buf_fini(&b);
}

static void
replies(void)
{
	static const uint64_t seqs[] = { 1, 2, 300, 70000, 5000000000ull };
	st_buf b;

	st_buf_init(&b);
	proto_reply_ok_encode(&b, seqs, 5);
	put("proto_reply_decode", 0, b.p, b.len);
	st_buf_reset(&b);
	proto_reply_err_encode(&b, "invalid", "event 3: topic: bad character");
	put("proto_reply_decode", 1, b.p, b.len);
	st_buf_reset(&b);
	proto_reply_err_encode(&b, "busy", "");
	put("proto_reply_decode", 2, b.p, b.len);
	st_buf_reset(&b);
	proto_reply_ok_encode(&b, seqs, 0);
	put("proto_reply_decode", 3, b.p, b.len);
	st_buf_fini(&b);
}

static void
texts(void)
{
	static const char *const json[] = {
		"{\"a\": 1, \"b\": [true, false, null], \"c\": {\"d\": \"e\"}}",
		" [ 1 , -2.5e+3 , 0 , 1E-7 , 18446744073709551615 ] ",
		"\"\\u00e9\\ud83d\\ude00 \\n\\t\\\" \\\\ \\/ caf\xc3\xa9\"",
		"{\"k\":\"\\u0000\"}",
		"[[[[[[[[[[[]]]]]]]]]]]",
		"{\"\":{},\"x\":[],\"x\":\"dup\"}",
		"12345",
		"null",
	};
	static const char *const queries[] = {
		"topic=orders.eu&format=sse",
		"topic=a&topic=b%2Fc&format=ndjson&until=42",
		"q=a+b%20c&&empty=&novalue&%41%42=%7e",
		"format=json-seq&qid=18446744073709551615",
	};
	static const char *const heads[] = {
		"GET /v1/stream?topic=orders.eu HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
		"Last-Event-ID: 42\r\n\r\n",
		"HEAD /healthz HTTP/1.0\r\n\r\n",
		"OPTIONS /v1/stream HTTP/1.1\r\nOrigin: https://a.example\r\n"
		"Access-Control-Request-Method: GET\r\n\r\n",
		"GET /a HTTP/1.1\r\nConnection: keep-alive\r\n\r\nGET /ab HTTP/1.1\r\nConnection: close\r\n\r\n",
		"\r\nGET /metrics HTTP/1.1\nContent-Length: 0\n\n",
		"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
	};
	static const char *const nums[] = {
		"0", "42", "18446744073709551615", "18446744073709551616", "00000000000000000001", "-1"
	};

	for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++) {
		put_s("json_compact", (int)i, json[i]);
		put_s("json_parse", (int)i, json[i]);
	}
	for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
		put_s("http_query_each", (int)i, queries[i]);
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++)
		put_s("http_head", (int)i, heads[i]);
	{
		/* one head just over the 8 KiB limit: the 431 path */
		static char big[9000];
		size_t o = (size_t)snprintf(big, sizeof(big), "GET /big HTTP/1.1\r\nX-Fuzz: ");

		memset(big + o, 'a', sizeof(big) - o - 4);
		memcpy(big + sizeof(big) - 4, "\r\n\r\n", 4);
		put("http_head", (int)(sizeof(heads) / sizeof(heads[0])), big, sizeof(big));
	}
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		put_s("parse_u64", (int)i, nums[i]);
}

static size_t
be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return 4;
}

/* A binary text[] of the given strings (ndim 1), or ndim 0 when n == 0. */
static size_t
text_array(unsigned char *out, const char *const *s, uint32_t n)
{
	size_t o = 0;

	o += be32(out + o, n ? 1 : 0);
	o += be32(out + o, 0);
	o += be32(out + o, 25);
	if (n == 0)
		return o;
	o += be32(out + o, n);
	o += be32(out + o, 1);
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(s[i]);

		o += be32(out + o, (uint32_t)l);
		memcpy(out + o, s[i], l);
		o += l;
	}
	return o;
}

static void
arrays(void)
{
	static const char *const a[] = { "user:42", "room/7", "", "caf\xc3\xa9" };
	unsigned char buf[256];

	put("pgarray_binary_parse", 0, buf, text_array(buf, a, 0));
	put("pgarray_binary_parse", 1, buf, text_array(buf, a, 1));
	put("pgarray_binary_parse", 2, buf, text_array(buf, a, 4));
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	root = argv[1];
	requests();
	pubs();
	replies();
	texts();
	arrays();
	return 0;
}
