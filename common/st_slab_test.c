/* Unit tests for st_slab: objects zeroed, distinct and aligned across
 * blocks; blocks unmapped when their objects are all back (one kept);
 * freed objects reused before new ones. */
#include "st_slab.h"
#include "st_test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PER_OBJECT 1
#else
#define PER_OBJECT 0
#endif

enum { SIZE = 376, N = 1000 };

static void
t_objects(void)
{
	st_slab *s = st_slab_new(SIZE);
	unsigned char **p = calloc(N, sizeof(*p));
	size_t bad = 0;

	for (size_t i = 0; i < N; i++) {
		p[i] = st_slab_get(s);
		for (size_t k = 0; k < SIZE; k++)
			bad += p[i][k] != 0;
		bad += ((uintptr_t)p[i] & 7) != 0;
		memset(p[i], 0xA5, SIZE); /* a neighbour's bytes would show in the next check */
	}
	if (bad != 0)
		fprintf(stderr, "  %zu bytes not zero or objects not 8-aligned\n", bad);
	ST_CHECK_EQ_U64(bad, 0);
	for (size_t i = 1; i < N; i++) /* distinct and not overlapping */
		for (size_t j = 0; j < i; j++)
			if (p[i] < p[j] + SIZE && p[j] < p[i] + SIZE) {
				fprintf(stderr, "  objects %zu and %zu overlap\n", i, j);
				ST_CHECK(0);
				i = N;
				break;
			}
	if (!PER_OBJECT) {
		/* 376 B objects, ~174 per 64 KiB block: 1000 need 6 */
		ST_CHECK_EQ_U64(st_slab_mapped(s), 6 * (uint64_t)ST_SLAB_BLOCK);
	}
	for (size_t i = 0; i < N; i++)
		st_slab_put(s, p[i]);
	if (!PER_OBJECT)
		ST_CHECK_EQ_U64(st_slab_mapped(s), ST_SLAB_BLOCK); /* one block kept */
	/* again: the kept block serves first, its objects zeroed again */
	p[0] = st_slab_get(s);
	for (size_t k = 0; k < SIZE; k++)
		bad += p[0][k] != 0;
	ST_CHECK_EQ_U64(bad, 0);
	st_slab_put(s, p[0]);
	st_slab_put(s, NULL);
	st_slab_free(s);
	free(p);
}

static void
t_reuse_before_new(void)
{
	st_slab *s = st_slab_new(96);
	void *a[300], *x, *y;

	for (size_t i = 0; i < 300; i++)
		a[i] = st_slab_get(s);
	x = a[17];
	st_slab_put(s, x);
	y = st_slab_get(s);
	if (!PER_OBJECT)
		ST_CHECK(y == x); /* the freed slot, not a fresh one */
	a[17] = y;
	/* churn at a steady count maps nothing more */
	size_t before = st_slab_mapped(s);
	for (int r = 0; r < 10000; r++) {
		size_t i = (size_t)(r * 7919) % 300;
		st_slab_put(s, a[i]);
		a[i] = st_slab_get(s);
	}
	ST_CHECK_EQ_U64(st_slab_mapped(s), before);
	for (size_t i = 0; i < 300; i++)
		st_slab_put(s, a[i]);
	st_slab_free(s);
}

static void
t_sparse_blocks_stay(void)
{
	/* after a peak, a block stays while one object in it lives: the bound in st_slab.h */
	st_slab *s = st_slab_new(512);
	enum { M = 1270 }; /* 127 per block: 10 blocks */
	void **p = calloc(M, sizeof(*p));

	for (size_t i = 0; i < M; i++)
		p[i] = st_slab_get(s);
	if (!PER_OBJECT)
		ST_CHECK_EQ_U64(st_slab_mapped(s), 10 * (uint64_t)ST_SLAB_BLOCK);
	for (size_t i = 0; i < M; i++)
		if (i % 127 != 0) {
			st_slab_put(s, p[i]);
			p[i] = NULL;
		}
	if (!PER_OBJECT)
		ST_CHECK_EQ_U64(st_slab_mapped(s), 10 * (uint64_t)ST_SLAB_BLOCK);
	for (size_t i = 0; i < M; i++)
		st_slab_put(s, p[i]);
	if (!PER_OBJECT)
		ST_CHECK_EQ_U64(st_slab_mapped(s), ST_SLAB_BLOCK);
	st_slab_free(s);
	free(p);
}

int
main(void)
{
	ST_RUN(t_objects);
	ST_RUN(t_reuse_before_new);
	ST_RUN(t_sparse_blocks_stay);
	return st_test_done();
}
