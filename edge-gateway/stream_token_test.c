/*
 * stream_token_test: a stream's token after admission (stream_token.c) on
 * a real loop, with a real st_auth_store whose wall clock is a fake one
 * the test sets: the exp timer fires once exp has passed (at once when it
 * already has), never without an exp or without access control; a key
 * that is not in the store's set is gone, said once.  The key that stays
 * (its id comes only from verifying a signed token) is it_auth's case.
 */
#include <event2/event.h>
#include <string.h>

#include "st_auth_store.h"
#include "st_clock.h"
#include "st_test.h"
#include "st_test_loop.h"
#include "st_util.h"
#include "stream_token.h"

static const char keys_json[] = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\","
				"\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}";

static void
expired(void *arg)
{
	(*(int *)arg)++;
}

static st_auth_store *
store_new(st_clock_fake *wall)
{
	st_auth_keys *ks = NULL;
	char why[128] = "";
	st_auth_config cfg = { .wall = &wall->clock };

	ST_CHECK(st_auth_keys_parse(keys_json, strlen(keys_json), &ks, why, sizeof(why)) == ST_OK);
	return st_auth_store_new(ks, &cfg);
}

static bool
fired_once(void *arg)
{
	return *(int *)arg >= 1;
}

/*
 * Rows: exp relative to the wall clock now (0: none), whether the timer
 * fires within the deadline.  exp in the past fires at once (exp passed
 * while a resume check ran).
 */
static void
t_exp_timer(void)
{
	static const struct {
		const char *name;
		bool has_exp;
		int64_t exp_from_now_ms;
		bool fires;
	} rows[] = {
		{ "exp in 100 ms", true, 100, true },
		{ "exp passed", true, -5000, true },
		{ "no exp", false, 0, false },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(rows); i++) {
		struct event_base *base = event_base_new();
		struct event *tick = st_test_loop_tick(base);
		st_clock_fake wall;
		st_auth_store *st;
		stream_token *t;
		int n = 0;
		uint64_t exp;

		st_clock_fake_init(&wall, 1700000000000ull);
		st = store_new(&wall);
		exp = rows[i].has_exp ? (uint64_t)((int64_t)wall.now + rows[i].exp_from_now_ms) : 0;
		t = stream_token_new(base, st, exp, 7, expired, &n);
		ST_CHECK(t != NULL);
		stream_token_arm(t);
		stream_token_arm(t); /* once armed, armed */
		if (rows[i].fires) {
			ST_CHECK(st_test_loop_until(base, fired_once, &n, 10000));
		} else {
			st_test_loop_for(base, 150);
		}
		st_test_loop_for(base, 50);
		if (n != (rows[i].fires ? 1 : 0))
			fprintf(stderr, "  %s: fired %d times\n", rows[i].name, n);
		ST_CHECK_EQ_U64(n, rows[i].fires ? 1 : 0);
		stream_token_free(t);
		st_auth_store_free(st);
		event_free(tick);
		event_base_free(base);
	}
}

/* A key the set does not hold is gone, said once; no key id, nothing to say. */
static void
t_key_gone(void)
{
	struct event_base *base = event_base_new();
	st_clock_fake wall;
	st_auth_store *st;
	stream_token *t, *none;
	int n = 0;

	st_clock_fake_init(&wall, 1700000000000ull);
	st = store_new(&wall);
	t = stream_token_new(base, st, 0, 12345, expired, &n);
	ST_CHECK(stream_token_key_gone(t));
	ST_CHECK(!stream_token_key_gone(t)); /* a later reload never ends it twice */
	none = stream_token_new(base, st, 0, 0, expired, &n);
	ST_CHECK(!stream_token_key_gone(none));
	ST_CHECK_EQ_U64(n, 0);
	stream_token_free(t);
	stream_token_free(none);
	st_auth_store_free(st);
	event_base_free(base);
}

/* Without access control there is no token: NULL, which every call takes as one that never ends. */
static void
t_no_access_control(void)
{
	struct event_base *base = event_base_new();
	int n = 0;
	stream_token *t = stream_token_new(base, NULL, 1, 5, expired, &n);

	ST_CHECK(t == NULL);
	stream_token_arm(t);
	ST_CHECK(!stream_token_key_gone(t));
	stream_token_free(t);
	ST_CHECK_EQ_U64(n, 0);
	event_base_free(base);
}

int
main(void)
{
	ST_RUN(t_exp_timer);
	ST_RUN(t_key_gone);
	ST_RUN(t_no_access_control);
	return st_test_done();
}
