/*
 * sequencer: turns the published messages of every writer (duplicated,
 * reordered, sometimes lost) into one contiguous, ordered, duplicate-free
 * history of frames (docs/architecture.md "The edge: how a frame travels").
 *
 * It keeps head, the last seq of the history handed out.  A batch with
 * prev == head is emitted (a hole between prev and its first seq is a
 * rolled-back identity value, not a loss); one entirely <= head is a
 * duplicate; one overlapping head is emitted from head on; one with
 * prev > head is held (keyed by prev) for SEQUENCER_WAIT_MS, after which
 * the gap (head, prev] is filled from PostgreSQL through the fill callback.
 * A tick whose head is above ours starts the same wait.  A failed fill is
 * retried with back-off for ever: nothing is ever skipped.
 *
 * Pure logic: no I/O, time through an st_clock.  Loop thread only; not
 * thread-safe.  Callbacks (emit, fill) are called from inside sequencer
 * functions and must not call back into the sequencer.
 */
#ifndef EDGE_SEQUENCER_H
#define EDGE_SEQUENCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "st_clock.h"
#include "st_err.h"
#include "wire.h"
#include "wire_pub.h"

#define SEQUENCER_WAIT_MS 250u    /* wait for a missing message before filling */
#define SEQUENCER_MAX_HELD 10000u /* events held (before set_head, or behind a gap) */
/* ... and their cost (envelope bound + FRAME_OVERHEAD, from the wire lengths, before allocating). */
#define SEQUENCER_MAX_HELD_BYTES (32u * 1024 * 1024)
#define SEQUENCER_BACKOFF_MIN_MS 500u /* after a failed fill; doubles */
#define SEQUENCER_BACKOFF_MAX_MS 5000u

typedef struct sequencer sequencer;

/*
 * The history, in order: frames[0..n) are items with strictly increasing
 * seqs, all above every seq emitted before.  The callee takes a reference
 * (frame_ref) for whatever it keeps; the sequencer drops its own after the
 * call.  n >= 1.  Inside the call sequencer_head() is already the head after
 * this batch (for a fill, the seq the fill reached, which may lie above the
 * last frame when rolled-back holes follow it).
 */
typedef void (*sequencer_emit_fn)(void *arg, frame *const *frames, size_t n);

/*
 * Asks for the committed events with after < seq <= upto (all topics, seq
 * order).  Return ST_OK when the query was started: the owner then calls
 * sequencer_fill_done exactly once (never from inside this callback).  Any
 * other value counts as a failed fill (retried after the back-off).
 */
typedef st_err (*sequencer_fill_fn)(void *arg, uint64_t after, uint64_t upto);

typedef struct sequencer_stats {
	uint64_t duplicates;      /* events dropped as already emitted (or held twice) */
	uint64_t fills;           /* fills completed successfully (each chunk counts) */
	uint64_t filled_events;   /* events emitted from fills */
	uint64_t fill_errors;     /* fills failed (and retried) */
	uint64_t held;            /* events held right now */
	uint64_t held_bytes;      /* their cost (bounded by SEQUENCER_MAX_HELD_BYTES) */
	uint64_t held_dropped;    /* events dropped because the hold was full (a fill recovers them) */
	uint64_t emitted;         /* events emitted in total */
	uint64_t protocol_errors; /* messages refused as malformed (seqs not ascending, <= prev) */
} sequencer_stats;

/* clock must outlive the sequencer.  Never fails but for programmer errors. */
st_err sequencer_new(const st_clock *clock, sequencer_emit_fn emit, sequencer_fill_fn fill, void *arg, sequencer **out);
/* NULL-safe.  An outstanding fill is forgotten: the owner cancels its query first. */
void sequencer_free(sequencer *s);

/*
 * The starting head (the edge reads max(seq) at start).  Until it is
 * called, messages are held (bounded by SEQUENCER_MAX_HELD events and
 * SEQUENCER_MAX_HELD_BYTES, beyond that dropped: a fill recovers them) and nothing is emitted or filled.
 * Held messages are released (emitted, or filled behind) at once.  Calling
 * it again is a programmer error.
 */
void sequencer_set_head(sequencer *s, uint64_t head);
bool sequencer_has_head(const sequencer *s);
uint64_t sequencer_head(const sequencer *s);

/*
 * One published message.  The sequencer copies what it keeps (frames are
 * made at once), so the caller may free m and its input on return.
 * ST_EPROTO (counted, nothing changes) for a batch whose seqs are not
 * strictly ascending above prev.  origin_ns: when the message arrived
 * (st_clock_mono_ns); the frames emitted at once carry it (frame_origin_ns),
 * frames held behind a gap carry 0.
 */
st_err sequencer_push(sequencer *s, const proto_pub *m, uint64_t origin_ns);
/* The same, from the fields (used by sequencer_push and the tests). */
st_err sequencer_push_batch(sequencer *s, uint64_t prev, const proto_pub_event *ev, size_t n, uint64_t origin_ns);
void sequencer_push_tick(sequencer *s, uint64_t head);

/*
 * The answer to the outstanding fill.  On ST_OK frames[0..n) are the
 * events of (after, upto_reached] in seq order, with upto_reached <= the
 * upto asked (less when the query was chunked: the rest is asked for at
 * once).  The caller keeps its references to frames.  Any other err: the
 * fill is retried after the back-off (500 ms doubling to 5 s).  Ignored
 * when no fill is outstanding.
 */
void sequencer_fill_done(sequencer *s, st_err err, frame *const *frames, size_t n, uint64_t upto_reached);

/* Called by the owner periodically (every 50 ms or at next_deadline). */
void sequencer_on_timer(sequencer *s);
/* The clock time (ms) when sequencer_on_timer has something to do; 0: nothing pending. */
uint64_t sequencer_next_deadline(const sequencer *s);

/* True while a fill query is outstanding. */
bool sequencer_fill_pending(const sequencer *s);
/* The highest seq known to be committed (from batches and ticks). */
uint64_t sequencer_known_head(const sequencer *s);
void sequencer_stats_get(const sequencer *s, sequencer_stats *out);

#endif
