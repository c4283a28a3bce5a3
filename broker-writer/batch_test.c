/* batch_test: bounds (busy), key folding, seqs in request order, parameter encoding,
 * the compact answer of broker_append2, splitting a backlog into flushes. */
#include "batch.h"

#include <stdlib.h>

#include "st_test.h"

static const proto_event *
at(const void *src, size_t i)
{
	return &((const proto_event *)src)[i];
}

static proto_event
ev(const char *topic, const char *key)
{
	proto_event e;

	memset(&e, 0, sizeof(e));
	e.topic.p = topic;
	e.topic.len = strlen(topic);
	if (key != NULL) {
		e.key.p = key;
		e.key.len = strlen(key);
		e.has_key = true;
	}
	return e;
}

static void
t_bounds_events(void)
{
	batch *b = batch_new(5, 1000);
	proto_event e3[3] = { ev("a", NULL), ev("b", NULL), ev("c", NULL) };
	int o1, o2, o3;

	ST_CHECK(batch_empty(b));
	ST_CHECK(batch_add(b, &o1, 3, 10, at, e3) == ST_OK);
	ST_CHECK(batch_add(b, &o2, 3, 10, at, e3) == ST_EBUSY); /* 6 > 5: refused whole */
	ST_CHECK_EQ_U64(batch_events(b), 3);
	ST_CHECK_EQ_U64(batch_requests(b), 1);
	ST_CHECK_EQ_U64(batch_rows(b), 3);
	ST_CHECK(batch_add(b, &o3, 2, 10, at, e3) == ST_OK); /* exactly 5 fits */
	ST_CHECK_EQ_U64(batch_events(b), 5);
	ST_CHECK(batch_add(b, &o3, 1, 1, at, e3) == ST_EBUSY);
	batch_reset(b);
	ST_CHECK(batch_empty(b));
	ST_CHECK(batch_add(b, &o1, 3, 10, at, e3) == ST_OK);
	batch_free(b);
}

static void
t_bounds_bytes(void)
{
	batch *b = batch_new(100, 100);
	proto_event e1[1] = { ev("a", NULL) };
	int o;

	/* an empty batch takes one request even above the byte bound */
	ST_CHECK(batch_add(b, &o, 1, 500, at, e1) == ST_OK);
	ST_CHECK(batch_add(b, &o, 1, 1, at, e1) == ST_EBUSY);
	batch_reset(b);
	ST_CHECK(batch_add(b, &o, 1, 60, at, e1) == ST_OK);
	ST_CHECK(batch_add(b, &o, 1, 40, at, e1) == ST_OK);
	ST_CHECK(batch_add(b, &o, 1, 1, at, e1) == ST_EBUSY);
	ST_CHECK_EQ_U64(batch_bytes(b), 100);
	batch_free(b);
}

static void
t_key_folding_and_order(void)
{
	batch *b = batch_new(100, 1 << 20);
	proto_event r1[3] = { ev("t", "k1"), ev("t", NULL), ev("t", "k2") };
	proto_event r2[3] = { ev("t", "k2"), ev("t", "k3"), ev("t", "k1") };
	proto_event r3[2] = { ev("t", "k3"), ev("t", "k3") };
	int o1, o2, o3;
	uint64_t s[3];

	ST_CHECK(batch_add(b, &o1, 3, 1, at, r1) == ST_OK);
	ST_CHECK(batch_add(b, &o2, 3, 1, at, r2) == ST_OK);
	ST_CHECK(batch_add(b, &o3, 2, 1, at, r3) == ST_OK);
	ST_CHECK_EQ_U64(batch_events(b), 8);
	ST_CHECK_EQ_U64(batch_rows(b), 4); /* k1, -, k2, k3 */
	ST_CHECK(batch_row(b, 0) == &r1[0]);
	ST_CHECK(batch_row(b, 1) == &r1[1]);
	ST_CHECK(batch_row(b, 2) == &r1[2]);
	ST_CHECK(batch_row(b, 3) == &r2[1]);
	/* k1 was stored before (not fresh), the others are new */
	batch_row_set(b, 0, 7, false);
	batch_row_set(b, 1, 11, true);
	batch_row_set(b, 2, 12, true);
	batch_row_set(b, 3, 13, true);
	ST_CHECK(batch_req_owner(b, 0) == &o1 && batch_req_owner(b, 1) == &o2 && batch_req_owner(b, 2) == &o3);
	ST_CHECK_EQ_U64(batch_req_count(b, 1), 3);
	batch_req_seqs(b, 0, s);
	ST_CHECK(s[0] == 7 && s[1] == 11 && s[2] == 12);
	batch_req_seqs(b, 1, s);
	ST_CHECK(s[0] == 12 && s[1] == 13 && s[2] == 7);
	batch_req_seqs(b, 2, s);
	ST_CHECK(s[0] == 13 && s[1] == 13);
	ST_CHECK(!batch_row_fresh(b, 0) && batch_row_fresh(b, 3));
	batch_free(b);
}

static void
t_keys_fold_per_topic(void)
{
	/* issue 24 item 3: a key is unique per (topic, key).  "pay-777" first on junk/x, then on
	 * payments/777: two rows, each its own seq; the same (topic, key) again still folds, also
	 * within one request; a topic that is a prefix of another is another topic */
	batch *b = batch_new(100, 1 << 20);
	proto_event r1[2] = { ev("junk/x", "pay-777"), ev("payments/777", "pay-777") };
	proto_event r2[3] = { ev("payments/777", "pay-777"), ev("junk/x", "pay-777"), ev("junk", "pay-777") };
	int o1, o2;
	uint64_t s[3];

	ST_CHECK(batch_add(b, &o1, 2, 1, at, r1) == ST_OK);
	ST_CHECK(batch_add(b, &o2, 3, 1, at, r2) == ST_OK);
	ST_CHECK_EQ_U64(batch_events(b), 5);
	ST_CHECK_EQ_U64(batch_rows(b), 3); /* (junk/x, pay-777), (payments/777, pay-777), (junk, pay-777) */
	ST_CHECK(batch_row(b, 0) == &r1[0]);
	ST_CHECK(batch_row(b, 1) == &r1[1]);
	ST_CHECK(batch_row(b, 2) == &r2[2]);
	batch_row_set(b, 0, 21, true);
	batch_row_set(b, 1, 22, true);
	batch_row_set(b, 2, 23, true);
	batch_req_seqs(b, 0, s);
	ST_CHECK_EQ_U64(s[0], 21);
	ST_CHECK_EQ_U64(s[1], 22);
	batch_req_seqs(b, 1, s);
	ST_CHECK_EQ_U64(s[0], 22);
	ST_CHECK_EQ_U64(s[1], 21);
	ST_CHECK_EQ_U64(s[2], 23);
	batch_free(b);
}

static void
t_refused_request_leaves_no_key(void)
{
	batch *b = batch_new(2, 1 << 20);
	proto_event r1[1] = { ev("t", "a") };
	proto_event r2[2] = { ev("t", "b"), ev("t", "c") };
	proto_event r3[1] = { ev("t", "b") };
	int o;

	ST_CHECK(batch_add(b, &o, 1, 1, at, r1) == ST_OK);
	ST_CHECK(batch_add(b, &o, 2, 1, at, r2) == ST_EBUSY);
	ST_CHECK(batch_add(b, &o, 1, 1, at, r3) == ST_OK);
	ST_CHECK_EQ_U64(batch_rows(b), 2); /* "b" is a row of its own: r2 left nothing behind */
	ST_CHECK(batch_row(b, 1) == &r3[0]);
	batch_free(b);
}

static void
t_many_keys_rehash(void)
{
	batch *b = batch_new(20000, 1 << 30);
	proto_event *e = calloc(10000, sizeof(*e));
	char(*k)[16] = calloc(10000, 16);
	int o;
	uint64_t *s = calloc(10000, sizeof(*s));

	for (size_t i = 0; i < 10000; i++) {
		snprintf(k[i], 16, "k%zu", i % 5000);
		e[i] = ev("t", k[i]);
	}
	ST_CHECK(batch_add(b, &o, 10000, 1, at, e) == ST_OK);
	ST_CHECK_EQ_U64(batch_rows(b), 5000);
	for (size_t i = 0; i < 5000; i++)
		batch_row_set(b, i, 100 + i, true);
	batch_req_seqs(b, 0, s);
	int bad = 0;
	for (size_t i = 0; i < 10000; i++)
		bad += s[i] != 100 + i % 5000;
	ST_CHECK(bad == 0);
	batch_free(b);
	free(e);
	free(k);
	free(s);
}

static void
t_encode(void)
{
	batch *b = batch_new(10, 1000);
	static const proto_str ab[2] = { { "x\"y", 3 }, { "z", 1 } };
	proto_event e[2] = { ev("t1", NULL), ev("t2", "kk") };
	st_buf t, a, d, k;
	int o;

	e[0].about = ab;
	e[0].n_about = 2;
	e[1].data.p = "{\"v\":1}";
	e[1].data.len = 7;
	e[1].has_data = true;
	st_buf_init(&t);
	st_buf_init(&a);
	st_buf_init(&d);
	st_buf_init(&k);
	ST_CHECK(batch_add(b, &o, 2, 1, at, e) == ST_OK);
	batch_encode(b, &t, &a, &d, &k);
	ST_CHECK_EQ_U64(t.len, 20 + 4 + 2 + 4 + 2);
	ST_CHECK(t.p[7] == 0);
	/* abouts: {"x\"y","z"} and {} */
	ST_CHECK_MEM(a.p + 24, 12, "{\"x\\\"y\",\"z\"}");
	ST_CHECK_MEM(a.p + 24 + 12 + 4, 2, "{}");
	/* data: NULL then the text */
	ST_CHECK(d.p[7] == 1);
	ST_CHECK((unsigned char)d.p[20] == 0xff);
	ST_CHECK_MEM(d.p + 28, 7, "{\"v\":1}");
	ST_CHECK(k.p[7] == 1);
	ST_CHECK_MEM(k.p + 28, 2, "kk");
	st_buf_fini(&t);
	st_buf_fini(&a);
	st_buf_fini(&d);
	st_buf_fini(&k);
	batch_free(b);
}

static void
t_encode_no_keys(void)
{
	batch *b = batch_new(10, 1000);
	proto_event e[2] = { ev("t1", NULL), ev("t2", NULL) };
	st_buf t, a, d, k;
	int o;

	st_buf_init(&t);
	st_buf_init(&a);
	st_buf_init(&d);
	st_buf_init(&k);
	ST_CHECK(batch_add(b, &o, 2, 1, at, e) == ST_OK);
	ST_CHECK(!batch_has_keys(b));
	batch_encode(b, &t, &a, &d, &k);
	ST_CHECK_EQ_U64(k.len, 0); /* the keys parameter is NULL */
	ST_CHECK_EQ_U64(t.len, 20 + 4 + 2 + 4 + 2);
	st_buf_fini(&t);
	st_buf_fini(&a);
	st_buf_fini(&d);
	st_buf_fini(&k);
	batch_free(b);
}

static void
t_apply(void)
{
	batch *b = batch_new(100, 1 << 20);
	proto_event r1[3] = { ev("t", "k1"), ev("t", NULL), ev("t", "k2") };
	proto_event r2[3] = { ev("t", "k2"), ev("t", "k3"), ev("t", "k1") };
	static const uint64_t ords[2] = { 1, 4 }, dseq[2] = { 7, 9 };
	static const uint64_t bad_ords[2] = { 4, 1 }, hi_seq[2] = { 7, 51 };
	int o1, o2;
	uint64_t s[3];

	ST_CHECK(batch_add(b, &o1, 3, 1, at, r1) == ST_OK);
	ST_CHECK(batch_add(b, &o2, 3, 1, at, r2) == ST_OK);
	ST_CHECK(batch_has_keys(b));
	ST_CHECK_EQ_U64(batch_rows(b), 4); /* k1, -, k2, k3 */
	/* malformed answers change nothing */
	ST_CHECK(batch_apply(b, 50, 51, 3, ords, dseq, 2) == ST_EINVAL);     /* 3 + 2 != 4 */
	ST_CHECK(batch_apply(b, 50, 51, 2, bad_ords, dseq, 2) == ST_EINVAL); /* not ascending */
	ST_CHECK(batch_apply(b, 50, 51, 2, ords, hi_seq, 2) == ST_EINVAL);   /* a stored seq above prev */
	ST_CHECK(batch_apply(b, 50, 50, 2, ords, dseq, 2) == ST_EINVAL);     /* first not above prev */
	ST_CHECK_EQ_U64(batch_row_seq(b, 0), 0);
	/* k1 (row 1) and k3 (row 4) were stored; rows 2 and 3 get 51 and 52 */
	ST_CHECK(batch_apply(b, 50, 51, 2, ords, dseq, 2) == ST_OK);
	batch_req_seqs(b, 0, s);
	ST_CHECK(s[0] == 7 && s[1] == 51 && s[2] == 52);
	batch_req_seqs(b, 1, s);
	ST_CHECK(s[0] == 52 && s[1] == 9 && s[2] == 7);
	ST_CHECK(!batch_row_fresh(b, 0) && batch_row_fresh(b, 1) && batch_row_fresh(b, 2) && !batch_row_fresh(b, 3));
	/* nothing fresh: first is not looked at */
	batch_reset(b);
	ST_CHECK(batch_add(b, &o1, 1, 1, at, r1) == ST_OK);
	ST_CHECK(batch_apply(b, 50, 0, 0, ords, dseq, 1) == ST_OK);
	ST_CHECK(batch_row_seq(b, 0) == 7 && !batch_row_fresh(b, 0));
	batch_free(b);
}

static void
t_take_split(void)
{
	batch *cur = batch_new(100, 1000), *fl = batch_new(100, 1000);
	proto_event r1[2] = { ev("t", "k1"), ev("t", NULL) };
	proto_event r2[2] = { ev("t", "k2"), ev("t", "k1") };
	proto_event r3[3] = { ev("t", "k2"), ev("t", "k4"), ev("t", "k4") };
	int o1, o2, o3;
	uint64_t s[3];

	ST_CHECK(batch_add(cur, &o1, 2, 10, at, r1) == ST_OK);
	ST_CHECK(batch_add(cur, &o2, 2, 10, at, r2) == ST_OK);
	ST_CHECK(batch_add(cur, &o3, 3, 10, at, r3) == ST_OK);
	ST_CHECK_EQ_U64(batch_rows(cur), 4); /* k1, -, k2, k4 */
	/* at most 5 events: r1 and r2 (4), r3 stays */
	batch_take(fl, cur, 5, 1000);
	ST_CHECK_EQ_U64(batch_requests(fl), 2);
	ST_CHECK_EQ_U64(batch_events(fl), 4);
	ST_CHECK_EQ_U64(batch_rows(fl), 3); /* k1, -, k2: k1 still folded */
	ST_CHECK_EQ_U64(batch_bytes(fl), 20);
	ST_CHECK(batch_req_owner(fl, 0) == &o1 && batch_req_owner(fl, 1) == &o2);
	ST_CHECK_EQ_U64(batch_requests(cur), 1);
	ST_CHECK_EQ_U64(batch_bytes(cur), 10);
	/* r3's k2 lost its first occurrence to fl: a row of its own now */
	ST_CHECK_EQ_U64(batch_rows(cur), 2);
	ST_CHECK(batch_row(cur, 0) == &r3[0] && batch_row(cur, 1) == &r3[1]);
	ST_CHECK(batch_req_owner(cur, 0) == &o3);
	ST_CHECK(batch_apply(fl, 0, 1, 3, NULL, NULL, 0) == ST_OK);
	batch_req_seqs(fl, 1, s);
	ST_CHECK(s[0] == 3 && s[1] == 1);
	/* the next flush: k2 is stored (seq 3) */
	batch_reset(fl);
	{
		static const uint64_t o[1] = { 1 }, q[1] = { 3 };
		batch_take(fl, cur, 5, 1000);
		ST_CHECK(batch_empty(cur));
		ST_CHECK(batch_apply(fl, 3, 4, 1, o, q, 1) == ST_OK);
		batch_req_seqs(fl, 0, s);
		ST_CHECK(s[0] == 3 && s[1] == 4 && s[2] == 4);
	}
	/* the bounds stay with each batch after a whole move */
	ST_CHECK(batch_add(cur, &o1, 2, 10, at, r1) == ST_OK);
	ST_CHECK(batch_add(cur, &o2, 2, 10, at, r2) == ST_OK);
	batch_reset(fl);
	batch_take(fl, cur, 5, 1000);
	ST_CHECK_EQ_U64(batch_requests(fl), 2);
	ST_CHECK(batch_empty(cur));
	/* one request larger than the flush bound still goes, alone; bytes split too */
	batch_reset(fl);
	ST_CHECK(batch_add(cur, &o3, 3, 10, at, r3) == ST_OK);
	ST_CHECK(batch_add(cur, &o1, 2, 10, at, r1) == ST_OK);
	batch_take(fl, cur, 2, 1000);
	ST_CHECK_EQ_U64(batch_requests(fl), 1);
	ST_CHECK_EQ_U64(batch_events(fl), 3);
	ST_CHECK_EQ_U64(batch_requests(cur), 1);
	batch_reset(fl);
	ST_CHECK(batch_add(cur, &o2, 2, 10, at, r2) == ST_OK);
	batch_take(fl, cur, 100, 15);
	ST_CHECK_EQ_U64(batch_requests(fl), 1);
	ST_CHECK(batch_req_owner(fl, 0) == &o1);
	ST_CHECK_EQ_U64(batch_requests(cur), 1);
	batch_free(cur);
	batch_free(fl);
}

int
main(void)
{
	ST_RUN(t_bounds_events);
	ST_RUN(t_bounds_bytes);
	ST_RUN(t_key_folding_and_order);
	ST_RUN(t_keys_fold_per_topic);
	ST_RUN(t_refused_request_leaves_no_key);
	ST_RUN(t_many_keys_rehash);
	ST_RUN(t_encode);
	ST_RUN(t_encode_no_keys);
	ST_RUN(t_apply);
	ST_RUN(t_take_split);
	return st_test_done();
}
