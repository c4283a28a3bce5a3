/* st_slab: fixed-size objects in blocks of their own (st_slab.h). */
#include "st_slab.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "st_dlist.h"
#include "st_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLAB_PER_OBJECT 1 /* every object its own calloc: the sanitizers see each one */
#else
#define SLAB_PER_OBJECT 0
#endif

/* At the start of each block; its objects follow. */
typedef struct slab_block {
	st_dlink link; /* on the slab's list of blocks with a free object */
	void *free;    /* objects put back: each holds the next */
	uint32_t next; /* objects never handed out start at this index */
	uint32_t live; /* objects handed out and not put back */
} slab_block;

struct st_slab {
	size_t size;      /* an object's size, a multiple of 8 */
	uint32_t per;     /* objects per block */
	size_t first;     /* offset of the first object in a block */
	st_dlink partial; /* blocks with at least one free object (the empty ones too) */
	uint32_t empty;   /* blocks on partial with no live object */
	size_t mapped;    /* bytes of blocks mapped */
	uint64_t live;    /* objects out (SLAB_PER_OBJECT counts too) */
};

st_slab *
st_slab_new(size_t size)
{
	st_slab *s = st_xcalloc(1, sizeof(*s));

	s->size = (size + 7) & ~(size_t)7;
	if (s->size < sizeof(void *))
		s->size = sizeof(void *);
	s->first = (sizeof(slab_block) + 7) & ~(size_t)7;
	ST_ASSERT(s->size <= ST_SLAB_BLOCK / 8);
	s->per = (uint32_t)((ST_SLAB_BLOCK - s->first) / s->size);
	st_dlist_init(&s->partial);
	return s;
}

/* A block aligned to ST_SLAB_BLOCK: twice the size mapped, the ends cut. */
static slab_block *
block_map(st_slab *s)
{
	size_t len = 2 * (size_t)ST_SLAB_BLOCK;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a;
	size_t head;
	slab_block *b;

	if (p == MAP_FAILED)
		st_oom("slab block", ST_SLAB_BLOCK);
	a = ((uintptr_t)p + ST_SLAB_BLOCK - 1) & ~(uintptr_t)(ST_SLAB_BLOCK - 1);
	head = a - (uintptr_t)p;
	if (head > 0)
		munmap(p, head);
	if (len - head - ST_SLAB_BLOCK > 0)
		munmap((char *)a + ST_SLAB_BLOCK, len - head - ST_SLAB_BLOCK);
	b = (slab_block *)a; /* zero pages: free NULL, next 0, live 0 */
	s->mapped += ST_SLAB_BLOCK;
	return b;
}

static slab_block *
block_of(void *p)
{
	return (slab_block *)((uintptr_t)p & ~(uintptr_t)(ST_SLAB_BLOCK - 1));
}

void *
st_slab_get(st_slab *s)
{
	slab_block *b;
	void *p;

	s->live++;
	if (SLAB_PER_OBJECT)
		return st_xcalloc(1, s->size);
	if (st_dlist_empty(&s->partial)) {
		b = block_map(s);
		st_dlist_push_front(&s->partial, &b->link);
		s->empty++;
	} else {
		b = ST_CONTAINER_OF(st_dlist_first(&s->partial), slab_block, link);
	}
	if (b->live == 0)
		s->empty--;
	if (b->free != NULL) {
		p = b->free;
		memcpy(&b->free, p, sizeof(void *));
		memset(p, 0, s->size);
	} else {
		p = (char *)b + s->first + (size_t)b->next * s->size; /* never used: still zero */
		b->next++;
	}
	b->live++;
	if (b->free == NULL && b->next == s->per)
		st_dlink_unlink(&b->link); /* full */
	return p;
}

void
st_slab_put(st_slab *s, void *p)
{
	slab_block *b;

	if (p == NULL)
		return;
	ST_ASSERT(s->live > 0);
	s->live--;
	if (SLAB_PER_OBJECT) {
		free(p);
		return;
	}
	b = block_of(p);
	ST_ASSERT(b->live > 0);
	if (!st_dlink_linked(&b->link))
		st_dlist_push_front(&s->partial, &b->link); /* was full */
	memcpy(p, &b->free, sizeof(void *));
	b->free = p;
	if (--b->live > 0)
		return;
	if (s->empty == 0) {
		/* kept for churn, behind the blocks still in use so that they fill first */
		s->empty = 1;
		st_dlink_unlink(&b->link);
		st_dlist_push_back(&s->partial, &b->link);
		return;
	}
	st_dlink_unlink(&b->link);
	munmap(b, ST_SLAB_BLOCK);
	s->mapped -= ST_SLAB_BLOCK;
}

void
st_slab_free(st_slab *s)
{
	st_dlink *n, *next;

	/* Objects still out (a bug): leave everything, so that a late put stays harmless; LeakSanitizer
	 * reports the objects in the sanitizer builds, where each is its own calloc. */
	if (s == NULL || s->live != 0)
		return;
	for (n = st_dlist_first(&s->partial); n != NULL; n = next) {
		next = st_dlist_after(&s->partial, n);
		st_dlink_unlink(n);
		munmap(ST_CONTAINER_OF(n, slab_block, link), ST_SLAB_BLOCK);
	}
	free(s);
}

size_t
st_slab_mapped(const st_slab *s)
{
	return s->mapped;
}
