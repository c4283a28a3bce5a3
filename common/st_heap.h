/*
 * st_heap: gives the heap's free pages back to the kernel once a burst of
 * connections has settled.
 *
 * Why.  A connection being set up holds about 6 KiB for a moment (libevent's
 * bufferevent, the 4 KiB chain its request is read into, the parsed
 * request, the stream request's topic arrays); an idle stream keeps about
 * 0.9 KiB.  glibc reuses freed blocks but keeps their pages resident, so
 * after 10,000 clients connect at once the process stays at the peak of the
 * burst, the more so the slower the loop (measured before st_slab.h and this module: 956,
 * 964, 968 and 1,275 B of RSS per idle stream for ~933 B live;
 * docs/performance.md "Idle stream").  malloc_trim(0) returns every whole
 * free page inside the heap (madvise), so RSS falls back to what is live.
 *
 * When.  st_heap_trim_due is fed a count of open connections (the edge: its
 * streams, counted once their requests are parsed) each tick.
 * A trim is due once that number moved by ST_HEAP_TRIM_STEP or more since
 * the last trim (up or down: a burst of new streams, or many closed) and
 * then either held within a tenth of the step for ST_HEAP_TRIM_QUIET_MS (the
 * burst is over) or ST_HEAP_TRIM_MAX_WAIT_MS went by (steady churn).  So a
 * process trims at most once per burst of a thousand connections, and never
 * while the count stands still.  The caller runs the trim on its loop:
 * malloc_trim walks the free chunks of every arena (measured in
 * docs/performance.md: a few milliseconds after 10,000 streams), locking
 * each in turn, so another thread allocating from the arena being walked
 * waits for that arena's pass too (with --threads N, a worker's loop).
 *
 * One trimmer per process, used from one thread (the caller's tick).
 */
#ifndef ST_HEAP_H
#define ST_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#define ST_HEAP_TRIM_STEP 1000u
#define ST_HEAP_TRIM_QUIET_MS 1000u
#define ST_HEAP_TRIM_MAX_WAIT_MS 60000u

typedef struct st_heap_trim st_heap_trim;

/* NULL when out of memory. */
st_heap_trim *st_heap_trim_new(void);
void st_heap_trim_free(st_heap_trim *t); /* NULL-safe */

/* Feeds the count of open connections at now_ms; true when a trim is due now. */
bool st_heap_trim_due(st_heap_trim *t, uint64_t now_ms, uint64_t open);

/* Records a trim done with open connections; the caller calls st_heap_release. */
void st_heap_trim_done(st_heap_trim *t, uint64_t open);

/* malloc_trim(0): true when memory was given back. */
bool st_heap_release(void);

/* The process's resident size (/proc/self/statm), 0 when unknown: for the log line of a trim. */
uint64_t st_heap_rss_bytes(void);

#endif
