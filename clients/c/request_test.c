/*
 * request_test: key bases (their form, what a caller's base may be), the
 * writer's checks and words found before anything is sent, and the
 * encoder under allocation failure (this binary is built with
 * ST_ALLOC_FAILPOINTS, clients/c/CMakeLists.txt).
 */
#include "request.h"

#include <stdio.h>
#include <string.h>

#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"
#include "studio_producer.h"
#include "wire.h"

/* The form of a made key base, and the bounds of a caller's. */
static void
t_key_base(void)
{
	const uint8_t id[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
				 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };
	char k[REQUEST_KEY_BASE_LEN + 1], k2[REQUEST_KEY_BASE_LEN + 1], long_base[STUDIO_KEY_BASE_MAX + 1];

	request_key_base_format(id, 0, k);
	ST_CHECK_STR(k, "sp2-0123456789abcdeffedcba9876543210-0000000000000000");
	ST_CHECK_EQ_U64(strlen(k), REQUEST_KEY_BASE_LEN);
	request_key_base_format(id, UINT64_MAX, k2);
	ST_CHECK_STR(k2, "sp2-0123456789abcdeffedcba9876543210-ffffffffffffffff");
	request_key_base_format(id, 1, k2);
	ST_CHECK(strcmp(k, k2) != 0);
	ST_CHECK(request_key_base_valid(k));
	ST_CHECK(request_key_base_valid("orders-2026-12-04"));
	ST_CHECK(!request_key_base_valid(""));
	ST_CHECK(!request_key_base_valid("has space"));
	ST_CHECK(!request_key_base_valid("tab\t"));
	ST_CHECK(!request_key_base_valid("\xc3\xa9"));
	memset(long_base, 'b', STUDIO_KEY_BASE_MAX - 1);
	long_base[STUDIO_KEY_BASE_MAX - 1] = '\0';
	ST_CHECK(request_key_base_valid(long_base));
	long_base[STUDIO_KEY_BASE_MAX - 1] = 'b';
	long_base[STUDIO_KEY_BASE_MAX] = '\0';
	ST_CHECK(!request_key_base_valid(long_base));
}

/* The writer's rules and words (proto/wire.c), found before anything is sent. */
static void
t_events_check(void)
{
	static const char *const about65[65] = { "a" };
	const char *about_ok[2] = { "x", "y" };
	char long_topic[202], detail[512];
	studio_event ok = { STUDIO_EVENT_INIT, .topic = "t",         .about = about_ok,
			    .n_about = 2,      .data = "{\"a\": 1}", .key = "k1" };
	static const struct {
		studio_event ev;
		studio_status want;
		const char *detail;
	} cases[] = {
		{ { STUDIO_EVENT_INIT, .topic = "a b" }, STUDIO_INVALID, "event 0: topic: bad character" },
		{ { STUDIO_EVENT_INIT, .topic = "" }, STUDIO_INVALID, "event 0: topic: empty" },
		{ { STUDIO_EVENT_INIT, .topic = NULL }, STUDIO_INVALID, "event 0: topic: empty" },
		{ { STUDIO_EVENT_INIT, .topic = "t", .data = "{" }, STUDIO_INVALID, "event 0: data: " },
		{ { STUDIO_EVENT_INIT, .topic = "t", .data = "1 2" }, STUDIO_INVALID, "event 0: data: " },
		{ { STUDIO_EVENT_INIT, .topic = "t", .key = "" }, STUDIO_INVALID, "event 0: key: empty" },
		{ { STUDIO_EVENT_INIT, .topic = "t", .about = about65, .n_about = 65 },
		  STUDIO_INVALID,
		  "event 0: about: too many entries (65, max 64)" },
		{ { STUDIO_EVENT_INIT, .topic = "t", .n_about = 2 },
		  STUDIO_USAGE,
		  "event 0: n_about 2 with about NULL" },
	};

	ST_CHECK(studio_events_check(&ok, 1, detail, sizeof(detail)) == STUDIO_OK);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		studio_status st;

		detail[0] = '\0';
		st = studio_events_check(&cases[i].ev, 1, detail, sizeof(detail));
		fprintf(stderr, "  case %zu -> %s \"%s\"\n", i, studio_status_str(st), detail);
		ST_CHECK(st == cases[i].want);
		ST_CHECK(strncmp(detail, cases[i].detail, strlen(cases[i].detail)) == 0);
	}
	memset(long_topic, 't', 201);
	long_topic[201] = '\0';
	{
		studio_event two[2] = { ok, { STUDIO_EVENT_INIT, .topic = long_topic } };

		ST_CHECK(studio_events_check(two, 2, detail, sizeof(detail)) == STUDIO_INVALID);
		ST_CHECK_STR(detail, "event 1: topic: too long");
	}
	ST_CHECK(studio_events_check(&ok, 0, detail, sizeof(detail)) == STUDIO_USAGE);
	ST_CHECK(studio_events_check(NULL, 1, detail, sizeof(detail)) == STUDIO_USAGE);
	/* An event not started with STUDIO_EVENT_INIT (or of another header's size) is not read. */
	{
		studio_event bare = { .topic = "t" }, sized[2] = { ok, ok };

		ST_CHECK(studio_events_check(&bare, 1, detail, sizeof(detail)) == STUDIO_USAGE);
		fprintf(stderr, "  no size: %s\n", detail);
		ST_CHECK(strncmp(detail, "event 0: size 0 is not sizeof(studio_event)", 43) == 0);
		sized[1].size = sizeof(studio_event) + 8;
		ST_CHECK(studio_events_check(sized, 2, detail, sizeof(detail)) == STUDIO_USAGE);
		ST_CHECK(strncmp(detail, "event 1: size ", 14) == 0);
	}
}

/* The encoder's growth fails: ST_ENOMEM, and the buffer is as it was before the call (not half an encoding). */
static void
t_nomem_encoder_leaves_buffer(void)
{
	static char data[300];
	proto_event ev = { .topic = { "t", 1 }, .data = { data, sizeof(data) }, .has_data = true };
	st_buf b;

	memset(data, '1', sizeof(data));
	st_buf_init(&b);
	st_buf_append(&b, "abc", 3); /* 64 bytes of room: the encoding must grow it */
	st_alloc_fail_arm(1);
	ST_CHECK(proto_request_try_encode(&b, &ev, 1, false) == ST_ENOMEM);
	ST_CHECK(st_alloc_fail_fired());
	st_alloc_fail_arm(0);
	ST_CHECK_MEM(b.p, b.len, "abc");
	ST_CHECK(proto_request_try_encode(&b, &ev, 1, false) == ST_OK);
	ST_CHECK(b.len > 3 + sizeof(data) && memcmp(b.p, "abc", 3) == 0);
	st_buf_fini(&b);
}

int
main(void)
{
	ST_RUN(t_key_base);
	ST_RUN(t_events_check);
	ST_RUN(t_nomem_encoder_leaves_buffer);
	return st_test_done();
}
