/*
 * hub: the topic index of an edge - which streams receive which frames.
 *
 * A frame costs one hash lookup of its topic, then one deliver call per
 * subscriber of that topic; no scan of all streams.  A batch (one
 * contiguous, seq-ordered run of frames from the sequencer) is delivered
 * stream by stream: each touched stream gets all its frames of the batch,
 * in order, then its one flush, before the next stream gets any, so it
 * writes the batch in as few writes as possible and as early as possible.
 *
 * Threads: none.  One hub per loop thread; every call on that thread.
 * Callbacks run inside hub_publish/hub_each and may call hub_unsubscribe
 * for any subscription (the free is deferred until the outermost hub call
 * returns; an unsubscribed stream receives nothing more, not even a flush).
 * They must not call hub_subscribe, hub_publish, hub_each or hub_free.
 */
#ifndef EDGE_HUB_H
#define EDGE_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include "frame.h"

/* Topics per subscription and bytes per topic (docs/api.md). */
#define HUB_MAX_TOPICS 64u
#define HUB_MAX_TOPIC_LEN 200u

typedef struct hub hub;
typedef struct hub_sub hub_sub;

/* f is borrowed for the call: a stream that keeps it takes its own
 * reference (subq_push does). */
typedef void (*hub_deliver_fn)(void *stream, frame *f);
/* The batch is complete: write what was delivered. */
typedef void (*hub_flush_fn)(void *stream);

/*
 * Optional, before deliver: a one-topic stream is offered all its frames
 * of the batch at once (frames[0..n), in order, borrowed for the call; the
 * same array for every stream of the topic).  true: taken whole, and the
 * stream gets neither delivers nor a flush for this batch; false: the
 * frames come one by one, then the flush, as without it.  Must not call
 * back into the hub.
 */
typedef bool (*hub_take_fn)(void *stream, frame *const *frames, size_t n);

/* Never fails (fixed-size allocation aborts on OOM).  take may be NULL. */
hub *hub_new(hub_deliver_fn deliver, hub_flush_fn flush, hub_take_fn take);
/* NULL-safe; frees every subscription without calling back. */
void hub_free(hub *h);

/*
 * Subscribes stream to topics[0..n) (lens[i] bytes each; copied, need not
 * be NUL-terminated).  Repeated topics are folded, so a stream gets each
 * frame at most once.  Returns NULL (nothing registered) when n is 0 or
 * above HUB_MAX_TOPICS or a topic is empty or longer than HUB_MAX_TOPIC_LEN:
 * the HTTP layer validated them, this only bounds the allocation.  The
 * stream pointer is never dereferenced.
 */
hub_sub *hub_subscribe(hub *h, void *stream, const char *const *topics, const size_t *lens, size_t n);
/* Removes s (NULL-safe); s must not be used afterwards.  Safe inside callbacks. */
void hub_unsubscribe(hub *h, hub_sub *s);

/* Delivers frames[0..n) (items; others are ignored): to each touched
 * stream its frames in order, then its flush (once).  The hub takes no reference. */
void hub_publish(hub *h, frame *const *frames, size_t n);

/* Live subscriptions. */
size_t hub_count(const hub *h);
/* Calls fn for every live subscription's stream (the drain registry);
 * fn may unsubscribe it or any other. */
void hub_each(hub *h, void (*fn)(void *stream, void *arg), void *arg);

#endif
