/*
 * subq: one stream's outbound queue, exactly as ADR-0197 says
 * (docs/design-records.md), and the replay hold buffer.
 *
 * Bounds (constants, not settings; they protect the edge's own memory):
 * at most SUBQ_MAX_FRAMES frames and SUBQ_MAX_BYTES bytes, a frame costing
 * frame_cost() (envelope + FRAME_OVERHEAD).
 *
 * subq_push, in this order:
 *  1. After SUBQ_DROP, or once a terminal frame is queued, every push is
 *     refused: SUBQ_DROP, the frame is not kept and not counted (nothing may
 *     follow the end of a stream).
 *  2. A terminal frame (reconnect, complete, failure) pushed by the stream is
 *     always accepted: it empties nothing, ignores both bounds (it is the
 *     last frame, so the queue exceeds them by at most one) and ignores
 *     blocked_ms (the stream ends after it anyway) -> SUBQ_QUEUED.
 *  3. Queue mode, blocked_ms > SUBQ_BLOCKED_MS (strictly): the queue is
 *     emptied, reconnect(SUBQ_RECONNECT_RETRY_MS, "blocked") is queued, the
 *     queue is marked dropped -> SUBQ_DROP.  Every queued frame and the
 *     pushed one count as dropped 'blocked'.  The caller passes how long the
 *     write in progress has been blocked (0 if none) on EVERY push; the
 *     heartbeat guarantees one push per heartbeat interval.
 *  4. A change signal (frame_is_signal) for a resource (frame_same_resource)
 *     that already has a signal queued is absorbed -> SUBQ_COALESCED, the
 *     pushed one counting as dropped 'coalesced'.  When the queued signal is
 *     the newest frame queued, it is replaced by the pushed one in place
 *     (same position, the newer id).  With frames queued behind it, the
 *     queued one keeps its position AND its id (ids keep increasing past the
 *     items queued behind it; the client refetches state that already holds
 *     the newer change).  In hold mode the second case does not coalesce:
 *     the pushed signal is queued (rule 5), so the release's cut at the
 *     replay head can never drop a newer seq hidden under an older id.
 *     O(1): the tail check, and a hash index of the queued signals.
 *     Data frames are never coalesced; signals for other resources are kept.
 *  5. A frame that fits is appended -> SUBQ_QUEUED.
 *  6. A heartbeat that does not fit is discarded, nothing else changes
 *     -> SUBQ_COALESCED (a full queue already keeps the connection busy, and
 *     a heartbeat carries no id for a resync).  Not counted: it is no event.
 *  7. Any other frame that does not fit (count would pass 1,000, or bytes
 *     1 MiB), in queue mode: if this is the third overflow within
 *     SUBQ_OVERFLOW_WINDOW_MS (the two previous overflows at most 60,000 ms
 *     before this one), the queue is emptied, reconnect(retry,
 *     "slow_consumer") is queued and the queue marked dropped -> SUBQ_DROP;
 *     otherwise the queue is emptied and one resync(id = seq of the frame
 *     that did not fit, "overflow") takes its place -> SUBQ_OVERFLOW.
 *     Either way the queued frames and the pushed one count 'overflow'
 *     (40 queued + 1 = 41).
 *  8. The same, in hold mode: the held frames and the pushed one are
 *     dropped, counted 'replay'; subq_hold_overflowed() becomes true and
 *     subq_overflow_seq() the newest seq dropped so far -> SUBQ_OVERFLOW.
 *     No resync is inserted (the stream queues resync(subq_overflow_seq())
 *     when it releases the replay; every frame still held is newer), the
 *     three-overflow rule does not apply and blocked_ms is ignored.
 *
 * SUBQ_DROP from a live push means: take the subscriber out of the hub,
 * write what is queued (ending with the reconnect), and close.
 *
 * Memory: an idle queue is the struct alone.  The ring of frame pointers is
 * allocated on the first push (8 slots), doubles up to 1,024, and a grown
 * ring is freed again whenever the queue empties; the signal index exists
 * only while signals are queued.
 *
 * Threads: none.  A queue belongs to one stream on one loop thread.
 */
#ifndef EDGE_SUBQ_H
#define EDGE_SUBQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "st_clock.h"
#include "st_metrics.h"
#include "st_slab.h"

#define SUBQ_MAX_FRAMES 1000u
#define SUBQ_MAX_BYTES (1024u * 1024u)
#define SUBQ_OVERFLOW_LIMIT 3u
#define SUBQ_OVERFLOW_WINDOW_MS 60000u
#define SUBQ_BLOCKED_MS 30000u
/* ADR-0197: "the client reconnects at once" (and replays what it missed). */
#define SUBQ_RECONNECT_RETRY_MS 500u

typedef struct subq subq;

/*
 * studio_sse_dropped_total by reason (frames), and studio_sse_cut_total by
 * reason (streams cut, their reconnect queued: the third overflow,
 * slow_consumer, or a socket blocked too long, which seldom reads it);
 * any may be NULL (not counted).
 */
typedef struct subq_counters {
	st_counter *coalesced;
	st_counter *overflow;
	st_counter *replay;
	st_counter *blocked;
	st_counter *cut_slow;
	st_counter *cut_blocked;
} subq_counters;

enum subq_result { SUBQ_QUEUED, SUBQ_COALESCED, SUBQ_OVERFLOW, SUBQ_DROP };

/* clk and c (NULL ok) are borrowed and must outlive the queue.  hold_mode:
 * the replay hold buffer (rule 8).  slab: where the queue itself is taken
 * from (borrowed, one of subq_size() bytes, same thread), NULL: malloc.
 * Never fails (aborts on OOM: fixed size). */
subq *subq_new(const st_clock *clk, const subq_counters *c, bool hold_mode, st_slab *slab);
/* The size of a queue, for its slab. */
size_t subq_size(void);
/* NULL-safe; releases every queued frame. */
void subq_free(subq *q);

/* The queue takes its own reference when it keeps f (QUEUED, COALESCED for a
 * signal); the caller's reference is never consumed. */
enum subq_result subq_push(subq *q, frame *f, uint64_t blocked_ms);
/* The oldest frame, with its reference handed to the caller (frame_unref it
 * once written); NULL when empty. */
frame *subq_pop(subq *q);
/* The oldest frame, still owned by the queue; NULL when empty. */
frame *subq_peek(const subq *q);

size_t subq_count(const subq *q);
size_t subq_bytes(const subq *q);    /* sum of frame_cost of queued frames */
bool subq_is_dropped(const subq *q); /* SUBQ_DROP happened (slow_consumer or blocked) */
bool subq_is_closed(const subq *q);  /* a terminal frame is queued or was written: pushes refused */
bool subq_hold_overflowed(const subq *q);
uint64_t subq_overflow_seq(const subq *q); /* hold mode: id for the resync queued at release */

#endif
