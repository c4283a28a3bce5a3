/*
 * replay: the history queries of the edge, on the pgpool.
 *
 *   replay_check  the Last-Event-ID decision (docs/architecture.md "Resume"):
 *                 D = max(seq), the retention horizon, and how many events
 *                 on the topics follow L, up to the client's until bound
 *                 when it is a number (counted up to cap + 1 only: the
 *                 events after until are never sent, so they must not
 *                 trip the replay cap).
 *   replay_fetch  one chunk of a replay: the events on the topics with
 *                 cursor < seq <= upto, in seq order, at most limit.
 *   replay_fill   one chunk of a gap fill for the sequencer: every event
 *                 with after < seq <= upto, in seq order, at most limit.
 *
 * Results are read in binary (about as a binary text[], data as the json
 * text byte for byte) and turned into item frames.  Replays run at
 * PGPOOL_PRIO_REPLAY, fills at PGPOOL_PRIO_FILL (a fill holds back every
 * stream's live history; a replay only one client).  Deadlines (from the
 * submit): a check REPLAY_CHECK_DEADLINE_MS, a chunk or a fill the pool's
 * defaults (PGPOOL_REPLAY_DEADLINE_MS, PGPOOL_FILL_DEADLINE_MS); a job past
 * it ends with ST_ETIMEDOUT.
 *
 * Threads: the loop thread of the pool.  Callbacks run from the pool's
 * callbacks (never from inside the call that starts the query) and may
 * start or cancel other jobs.
 */
#ifndef EDGE_REPLAY_H
#define EDGE_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "pgpool.h"
#include "st_err.h"
#include "subq.h"

/* A resume check decides whether a client gets a stream at all: it ends
 * (ST_ETIMEDOUT, the client is told to retry) after this long. */
#define REPLAY_CHECK_DEADLINE_MS 5000u
#include "wire.h"

#define REPLAY_MAX_TOPICS 64u   /* per query (the contract's bound per stream) */
#define REPLAY_MAX_LIMIT 10000u /* rows per chunk */
#define REPLAY_MAX_ABOUT 1024u  /* entries of one about array read back */

typedef struct replay_job replay_job;

/* err ST_OK: d is max(seq) (0 when empty), horizon the retention horizon (0 with no
 * broker_meta row), count min(events in (after, until] on the topics, cap + 1). */
typedef void (*replay_check_fn)(void *arg, st_err err, uint64_t d, uint64_t horizon, uint64_t count);

/* err ST_OK: frames[0..n) in seq order; done when the range is exhausted (fewer than limit
 * rows and nothing cut by max_bytes); horizon: the retention horizon in the same snapshot (every seq at
 * or below it may be gone, so a horizon above the cursor means rows were deleted under
 * the replay).  The callee refs what it keeps; the frames are unreferenced after the
 * call.  err ST_EDB: the query failed; ST_EPROTO: a row could not be read (logged). */
typedef void (*replay_rows_fn)(void *arg, st_err err, frame *const *frames, size_t n, bool done, uint64_t horizon);

/* As replay_rows_fn; upto_reached is the seq up to which (after, upto_reached] is now
 * complete: upto when the range is exhausted, the last row's seq otherwise.
 * Exactly what sequencer_fill_done wants. */
typedef void (*replay_fill_fn)(void *arg, st_err err, frame *const *frames, size_t n, uint64_t upto_reached);

/*
 * topics[i] of lens[i] bytes (copied), n in 1..REPLAY_MAX_TOPICS; repeated
 * topics count once.  Return a handle, or NULL (nothing will be called)
 * when the arguments are out of bounds or the pool's queue is full.  The
 * handle is valid until the callback returns or replay_cancel.
 */
/* until: UINT64_MAX for no bound (no until, or until=head: the snapshot's own head bounds it). */
replay_job *replay_check(pgpool *p, const char *const *topics, const size_t *lens, size_t n, uint64_t after,
			 uint64_t until, uint64_t cap, replay_check_fn fn, void *arg);
/*
 * A chunk: at most limit rows (1..REPLAY_MAX_LIMIT) and, counting each row
 * as an upper bound of its frame's cost from the sizes the database keeps
 * (160 + topic + about + data), rows are taken while the ones before cost
 * less than max_bytes (> 0): a chunk holds at most max_bytes plus one row
 * (one row of at most ~270 KiB), and the data of a row is read from the
 * database once, by the chunk that keeps it.
 */
replay_job *replay_fetch(pgpool *p, const char *const *topics, const size_t *lens, size_t n, uint64_t cursor,
			 uint64_t upto, uint32_t limit, size_t max_bytes, replay_rows_fn fn, void *arg);
replay_job *replay_fill(pgpool *p, uint64_t after, uint64_t upto, uint32_t limit, size_t max_bytes, replay_fill_fn fn,
			void *arg);

/* The callback will never be called (the client went away).  NULL-safe; not after the
 * callback has returned; a no-op inside the job's own callback. */
void replay_cancel(replay_job *j);

/*
 * replay_buf: the rows one replay has read and not yet written, so the
 * next chunk is read while the last one is written (the database and the
 * socket work at the same time instead of in turn): at most two chunks,
 * the older being written and the newest read ahead.  It also sizes the
 * next chunk (limit).  Embedded; zeroed is empty (limit set by the user
 * before the first fetch).  Pure: no loop, no query.
 */
#define REPLAY_BUF_CHUNK_ROWS 1000u /* the most rows asked of one chunk */
/* Holding up to two chunks, each is cut at half of what one stream may queue (ADR-0197). */
#define REPLAY_BUF_CHUNK_BYTES (SUBQ_MAX_BYTES / 2)

typedef struct replay_buf {
	frame **f; /* the rows [i, n) not yet written, a reference each (owned) */
	size_t n, i;
	size_t mark;    /* where the newest chunk starts: the next read waits for the writer to reach it */
	uint32_t limit; /* rows asked of the next chunk */
	uint64_t last;  /* seq of the newest row added: its frame may be written and gone */
} replay_buf;

/* Releases every row not yet written; empty after. */
void replay_buf_clear(replay_buf *b);
/*
 * A chunk of n rows arrived (done: the range had no more): appended after
 * the rows not yet written (each referenced), and the next limit adapted.
 */
void replay_buf_add(replay_buf *b, frame *const *frames, size_t n, bool done);
/* The next row to write, its reference now the caller's; NULL when none is left. */
frame *replay_buf_next(replay_buf *b);
/* The older chunk is written and the newest not started: time to read the next one ahead. */
bool replay_buf_read_ahead_due(const replay_buf *b);
/* The seq the next chunk starts after: the newest row held, or cursor when none is. */
uint64_t replay_buf_last_seq(const replay_buf *b, uint64_t cursor);

#endif
