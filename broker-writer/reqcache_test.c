/* reqcache_test: the name of a request (id, length, hash; never the pipe),
 * pending -> answered, refusals forgotten, and the three bounds of the
 * answered entries (count, bytes, age) with a hand-driven time. */
#include "reqcache.h"

#include <stdlib.h>

#include "st_test.h"

static reqcache_key
key(uint32_t id, uint32_t len, uint64_t hash)
{
	reqcache_key k = { .id = id, .len = len, .hash = hash };

	return k;
}

static reqcache_state
find(reqcache *c, reqcache_key k, uint64_t now, void **owner, const char **reply, size_t *len)
{
	const void *r = NULL;
	reqcache_state st;

	*owner = NULL;
	*len = 0;
	st = reqcache_find(c, &k, now, owner, &r, len);
	*reply = r;
	return st;
}

static void
t_name_is_id_length_hash(void)
{
	reqcache *c = reqcache_new(10, 1 << 20, 1000);
	reqcache_key k = key(0x80000001u, 100, 42);
	int w1;
	void *o;
	const char *r;
	size_t n;

	ST_CHECK(!reqcache_maybe(c, k.id, k.len, 0));
	ST_CHECK(find(c, k, 0, &o, &r, &n) == REQCACHE_NEW);
	reqcache_add(c, &k, &w1);
	ST_CHECK(reqcache_maybe(c, k.id, k.len, 0));
	ST_CHECK(!reqcache_maybe(c, k.id, 101, 0));
	ST_CHECK(!reqcache_maybe(c, 0x80000002u, 100, 0));
	ST_CHECK(find(c, k, 0, &o, &r, &n) == REQCACHE_PENDING);
	ST_CHECK(o == &w1);
	/* same id and length, other bytes: another request */
	ST_CHECK(find(c, key(k.id, 100, 43), 0, &o, &r, &n) == REQCACHE_NEW);
	ST_CHECK(find(c, key(0x80000002u, 100, 42), 0, &o, &r, &n) == REQCACHE_NEW);
	ST_CHECK_EQ_U64(reqcache_pending(c), 1);
	reqcache_free(c);
}

static void
t_answered_then_resent(void)
{
	reqcache *c = reqcache_new(10, 1 << 20, 1000);
	reqcache_key k = key(0x80000001u, 7, 9);
	int w1;
	void *o;
	const char *r;
	size_t n;

	reqcache_add(c, &k, &w1);
	reqcache_answer(c, &k, &w1, "reply-1", 7, 100);
	ST_CHECK_EQ_U64(reqcache_pending(c), 0);
	ST_CHECK_EQ_U64(reqcache_answered(c), 1);
	ST_CHECK_EQ_U64(reqcache_bytes(c), 7 + reqcache_entry_size());
	ST_CHECK(find(c, k, 200, &o, &r, &n) == REQCACHE_ANSWERED);
	ST_CHECK_MEM(r, n, "reply-1");
	/* answering an owner that has no entry changes nothing */
	reqcache_answer(c, &k, &w1, "other", 5, 200);
	ST_CHECK_EQ_U64(reqcache_answered(c), 1);
	reqcache_free(c);
}

static void
t_refusal_is_forgotten(void)
{
	reqcache *c = reqcache_new(10, 1 << 20, 1000);
	reqcache_key k = key(0x80000003u, 5, 1);
	int w1, w2;
	void *o;
	const char *r;
	size_t n;

	reqcache_add(c, &k, &w1);
	reqcache_answer(c, &k, &w1, NULL, 0, 10); /* busy / invalid / unavailable: nothing stored */
	ST_CHECK(find(c, k, 10, &o, &r, &n) == REQCACHE_NEW);
	ST_CHECK(!reqcache_maybe(c, k.id, k.len, 10));
	reqcache_add(c, &k, &w2);
	ST_CHECK(find(c, k, 10, &o, &r, &n) == REQCACHE_PENDING && o == &w2);
	reqcache_free(c);
}

static void
t_age_bound(void)
{
	reqcache *c = reqcache_new(10, 1 << 20, 1000);
	reqcache_key k = key(0x80000001u, 1, 1);
	int w;
	void *o;
	const char *r;
	size_t n;

	reqcache_add(c, &k, &w);
	reqcache_answer(c, &k, &w, "x", 1, 5000);
	ST_CHECK(find(c, k, 5999, &o, &r, &n) == REQCACHE_ANSWERED); /* 999 ms old */
	ST_CHECK(find(c, k, 6000, &o, &r, &n) == REQCACHE_NEW);      /* 1000 ms: gone */
	ST_CHECK_EQ_U64(reqcache_answered(c), 0);
	ST_CHECK_EQ_U64(reqcache_bytes(c), 0);
	/* a pending entry never ages out: only its answer starts the clock */
	reqcache_add(c, &k, &w);
	ST_CHECK(find(c, k, 1000000, &o, &r, &n) == REQCACHE_PENDING);
	reqcache_free(c);
}

static void
t_count_and_byte_bounds(void)
{
	size_t es = reqcache_entry_size();
	reqcache *c = reqcache_new(3, 4 * (es + 10), 1000000);
	int w[8];
	void *o;
	const char *r;
	size_t n;

	for (uint32_t i = 0; i < 5; i++) {
		reqcache_key k = key(0x80000000u + i, 10, i);
		reqcache_add(c, &k, &w[i]);
		reqcache_answer(c, &k, &w[i], "0123456789", 10, i);
	}
	/* the count bound (3) keeps the newest three */
	ST_CHECK_EQ_U64(reqcache_answered(c), 3);
	ST_CHECK(find(c, key(0x80000000u, 10, 0), 10, &o, &r, &n) == REQCACHE_NEW);
	ST_CHECK(find(c, key(0x80000001u, 10, 1), 10, &o, &r, &n) == REQCACHE_NEW);
	ST_CHECK(find(c, key(0x80000002u, 10, 2), 10, &o, &r, &n) == REQCACHE_ANSWERED);
	ST_CHECK(find(c, key(0x80000004u, 10, 4), 10, &o, &r, &n) == REQCACHE_ANSWERED);
	/* the byte bound: one reply of 3 entries' worth pushes out the older ones */
	{
		reqcache_key k = key(0x80000010u, 99, 99);
		size_t len = 2 * es + 20 + 1;
		char *big = calloc(1, len);
		reqcache_add(c, &k, &w[5]);
		reqcache_answer(c, &k, &w[5], big, len, 20);
		ST_CHECK(reqcache_bytes(c) <= 4 * (es + 10));
		ST_CHECK(find(c, k, 20, &o, &r, &n) == REQCACHE_ANSWERED && n == len);
		ST_CHECK(find(c, key(0x80000002u, 10, 2), 20, &o, &r, &n) == REQCACHE_NEW);
		ST_CHECK(find(c, key(0x80000003u, 10, 3), 20, &o, &r, &n) == REQCACHE_NEW);
		ST_CHECK(find(c, key(0x80000004u, 10, 4), 20, &o, &r, &n) == REQCACHE_ANSWERED);
		free(big);
	}
	/* a reply larger than the byte bound alone is not kept at all */
	{
		size_t len = 4 * (es + 10) + 1;
		char *huge = calloc(1, len);
		reqcache_key k = key(0x80000020u, 5, 5);
		reqcache_add(c, &k, &w[6]);
		reqcache_answer(c, &k, &w[6], huge, len, 30);
		ST_CHECK(find(c, k, 30, &o, &r, &n) == REQCACHE_NEW);
		ST_CHECK_EQ_U64(reqcache_pending(c), 0);
		free(huge);
	}
	reqcache_free(c);
}

int
main(void)
{
	ST_RUN(t_name_is_id_length_hash);
	ST_RUN(t_answered_then_resent);
	ST_RUN(t_refusal_is_forgotten);
	ST_RUN(t_age_bound);
	ST_RUN(t_count_and_byte_bounds);
	return st_test_done();
}
