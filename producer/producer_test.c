/* producer_test: keys, back-off, local checks with the writer's words, options (no network). */
#include "studio_producer.h"

#include <stdio.h>
#include <string.h>

#include "producer_int.h"
#include "st_test.h"
#include "st_util.h"

static void
t_key_format(void)
{
	const uint8_t id[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
		                 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };
	char k[PRODUCER_KEY_LEN + 1], k2[PRODUCER_KEY_LEN + 1];

	producer_key_format(id, 0, k);
	ST_CHECK_STR(k, "sp1-0123456789abcdeffedcba9876543210-0000000000000000");
	ST_CHECK_EQ_U64(strlen(k), PRODUCER_KEY_LEN);
	producer_key_format(id, UINT64_MAX, k2);
	ST_CHECK_STR(k2, "sp1-0123456789abcdeffedcba9876543210-ffffffffffffffff");
	producer_key_format(id, 1, k2);
	ST_CHECK(strcmp(k, k2) != 0);
}

/* The writer's rules and words (proto/wire.c), found before anything is sent. */
static void
t_events_check(void)
{
	static const char *const about65[65] = { "a" };
	const char *about_ok[2] = { "x", "y" };
	char long_topic[202], detail[512];
	studio_event ok = { .topic = "t", .about = about_ok, .n_about = 2, .data = "{\"a\": 1}", .key = "k1" };
	static const struct {
		studio_event ev;
		studio_status want;
		const char *detail;
	} cases[] = {
		{ { .topic = "a b" }, STUDIO_INVALID, "event 0: topic: bad character" },
		{ { .topic = "" }, STUDIO_INVALID, "event 0: topic: empty" },
		{ { .topic = NULL }, STUDIO_INVALID, "event 0: topic: empty" },
		{ { .topic = "t", .data = "{" }, STUDIO_INVALID, "event 0: data: " },
		{ { .topic = "t", .data = "1 2" }, STUDIO_INVALID, "event 0: data: " },
		{ { .topic = "t", .key = "" }, STUDIO_INVALID, "event 0: key: empty" },
		{ { .topic = "t", .about = about65, .n_about = 65 }, STUDIO_INVALID, "event 0: about: too many entries (65, max 64)" },
		{ { .topic = "t", .n_about = 2 }, STUDIO_USAGE, "event 0: n_about 2 with about NULL" },
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
		studio_event two[2] = { ok, { .topic = long_topic } };

		ST_CHECK(studio_events_check(two, 2, detail, sizeof(detail)) == STUDIO_INVALID);
		ST_CHECK_STR(detail, "event 1: topic: too long");
	}
	ST_CHECK(studio_events_check(&ok, 0, detail, sizeof(detail)) == STUDIO_USAGE);
	ST_CHECK(studio_events_check(NULL, 1, detail, sizeof(detail)) == STUDIO_USAGE);
}

static void
t_new_refuses(void)
{
	studio_producer *p = (studio_producer *)1;
	studio_producer_options o = { .backoff_base_ms = 500, .backoff_cap_ms = 100 };
	char err[256];

	ST_CHECK(studio_producer_new(NULL, NULL, &p, err, sizeof(err)) == STUDIO_USAGE && p == NULL);
	ST_CHECK(studio_producer_new(",,", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK_STR(err, "no writer URL in \",,\"");
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", &o, &p, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK_STR(err, "backoff_cap_ms 100 is below backoff_base_ms 500");
	ST_CHECK(studio_producer_new("nope://x", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  bad scheme: %s\n", err);
	ST_CHECK(strncmp(err, "bad writer URL \"nope://x\"", 25) == 0);
	ST_CHECK(studio_producer_new("tls+tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  tls without files: %s\n", err);
}

/* A producer with nothing to talk to: the deadline ends the call, with a reason. */
static void
t_no_writer_times_out(void)
{
	studio_producer *p = NULL;
	studio_event ev = { .topic = "t" };
	char err[256], detail[512];
	uint64_t seq = 0;

	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_publish(p, &ev, 1, &seq, 200, detail, sizeof(detail)) == STUDIO_TIMEOUT);
	fprintf(stderr, "  no writer: %s\n", detail);
	studio_producer_free(p);
}

int
main(void)
{
	ST_RUN(t_key_format);
	ST_RUN(t_events_check);
	ST_RUN(t_new_refuses);
	ST_RUN(t_no_writer_times_out);
	return st_test_done();
}
