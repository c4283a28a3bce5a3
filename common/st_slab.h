/*
 * st_slab: objects of one size that live as long as a connection, packed
 * in blocks of their own, away from the malloc heap where each connection's
 * short-lived buffers come and go.
 *
 * Why.  Setting up a stream takes about 6 KiB for a moment (libevent's
 * bufferevent, the 4 KiB chain the request is read into, the parsed
 * request, the topic arrays) between the allocations that stay (the
 * connection, the stream, its queue, its hub entry: ~900 B).  From one heap,
 * the few that stay end up on most pages the burst used, so those pages stay
 * resident when the rest is freed: 10,000 clients connecting at 50,000/s
 * left 26.6 MB of heap holding 9.9 MB in use, 2,400 B of RSS per idle stream
 * instead of ~960 (docs/performance.md "Idle stream").  From blocks of their
 * own, the long-lived objects stay dense and the burst's pages come free
 * whole, for malloc_trim (st_heap.h) or the next burst.
 *
 * Blocks of ST_SLAB_BLOCK bytes are mapped anonymously, aligned to their
 * size, so an object finds its block by masking its address.  A new block's
 * objects are handed out in address order (its untouched pages cost
 * nothing), freed ones first (a free list per block).  A block whose objects
 * are all free is unmapped, except one kept for churn.  Memory: at most
 * ceil(peak live / objects per block) blocks, each ST_SLAB_BLOCK; after a
 * peak, a block stays mapped while one object in it lives.
 *
 * Objects are 8-byte aligned (sizes round up to 8): for structs of pointers
 * and integers, not for types that need more.  A slab belongs to one
 * thread (one loop).  Under AddressSanitizer or ThreadSanitizer each object
 * is its own calloc, so the sanitizers see every object's bounds and life.
 */
#ifndef ST_SLAB_H
#define ST_SLAB_H

#include <stddef.h>

#define ST_SLAB_BLOCK (64 * 1024)

typedef struct st_slab st_slab;

/* A slab of objects of size bytes (at most ST_SLAB_BLOCK / 8); aborts when out of memory (st_oom). */
st_slab *st_slab_new(size_t size);
/* NULL-safe.  Every object should have been put back: if not, nothing is freed (st_slab.c). */
void st_slab_free(st_slab *s);
/* A zeroed object; aborts when out of memory (st_oom), as st_xcalloc. */
void *st_slab_get(st_slab *s);
/* Gives p (from this slab's st_slab_get) back. NULL-safe. */
void st_slab_put(st_slab *s, void *p);
/* Bytes of blocks mapped now (for the docs and tests). */
size_t st_slab_mapped(const st_slab *s);

#endif
