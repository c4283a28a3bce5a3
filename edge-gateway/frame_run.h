/*
 * frame_run: one contiguous copy of a message's frames, shared by the
 * streams of one loop that write the same frames in the same format.
 *
 * The hub hands a writer's message to every stream in turn (hub.c), and
 * each stream batches its frames into one writev (stream.c).  With one
 * iovec per frame the kernel copies a 200-frame message in 200 segments
 * for every stream: `_copy_from_iter` was 21-27 % of the edge's CPU at
 * 1,000 streams x 200 events/s, where the same-shape floor writes one
 * contiguous burst (docs/performance.md, "The same-shape floor").  So the
 * second stream that batches exactly the frames of the stream before it
 * (same frames, same order, same format) gets one reference to a copy of
 * their bytes made once, and every later one the same copy, until a
 * stream batches other frames.  The first stream of a message writes its
 * frames as before: a copy is made only for a list seen twice.  A live
 * stream with nothing queued asks for it before it queues anything
 * (frame_run_take, from the hub's offer: stream.c stream_hub_take).
 *
 * Ownership: the cache holds a reference to each frame of the last list
 * per format (so a frame's address cannot be reused while it is compared)
 * and one to the copy; a reference handed out is dropped by its cleanup
 * (http_ref.cleanup, called by the connection when the bytes left or the
 * connection went away).  At most FRAME_RUN_MAX frames and one copy of at
 * most their bytes per format and loop.
 *
 * Thread: one cache per loop, used on that loop only; a copy's count is
 * atomic all the same (a connection may drop its bytes on teardown).
 */
#ifndef EDGE_FRAME_RUN_H
#define EDGE_FRAME_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "frame.h"
#include "st_http.h"

#define FRAME_RUN_MAX 256u

typedef struct frame_run_cache frame_run_cache;

frame_run_cache *frame_run_cache_new(void);
void frame_run_cache_free(frame_run_cache *c); /* NULL-safe; drops what it holds */

/*
 * refs[0..n): a stream's batch, each arg a frame (the caller's reference)
 * and data/len its bytes in fmt.  The same frames in the same format as
 * this cache's previous call for fmt: true, and *out is one reference to
 * a contiguous copy of all their bytes (origin_ns: the first non-zero of
 * refs), and refs' frame references are dropped (the copy has their
 * bytes: refs is spent).
 * Otherwise false, and the list is remembered for the next call.  n of 0
 * or 1, or over FRAME_RUN_MAX: false, nothing remembered.
 */
bool frame_run_share(frame_run_cache *c, enum frame_format fmt, const http_ref *refs, size_t n, http_ref *out);

/*
 * frames[0..n) (borrowed: no reference is taken or spent) are the list of
 * this cache's previous frame_run_share for fmt: true, and *out is one
 * reference to the copy of their bytes (made now if it is not yet).
 * Otherwise false and nothing changes: the caller batches them, and its
 * frame_run_share remembers them for the next stream.
 */
bool frame_run_take(frame_run_cache *c, enum frame_format fmt, frame *const *frames, size_t n, http_ref *out);

/* Copies made, and lists handed out by frame_run_take, since the cache was created (for tests). */
size_t frame_run_copies(const frame_run_cache *c);
size_t frame_run_takes(const frame_run_cache *c);

#endif
