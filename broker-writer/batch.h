/*
 * batch: the writer's bounded buffer of accepted requests waiting for one
 * flush transaction.
 *
 * A batch holds requests (an opaque owner pointer each, the ingest context
 * that will be answered) and their events, by pointer: the events stay
 * owned by the caller's decoded requests, which must outlive the batch's
 * use of them (until batch_reset).  Events with the same topic and the same
 * idempotency key are folded: only the first becomes a SQL row, later ones
 * share its seq (the same key on another topic is another event).
 *
 * Bounds: at most max_events events (counted before folding) and max_bytes
 * of request bytes (the caller's proto_request_bytes).  A request that does
 * not fit whole is refused (ST_EBUSY) and nothing of it is kept, except that
 * an empty batch always takes one request, so a request within the
 * protocol's own limits can never be refused for ever.
 *
 * Thread: the loop thread only (no locking).
 */
#ifndef BW_BATCH_H
#define BW_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"
#include "wire.h"

#define BATCH_MAX_EVENTS 200000u
#define BATCH_MAX_BYTES (128u * 1024 * 1024)

typedef struct batch batch;

/* Accessor for the i-th event of the caller's request src. */
typedef const proto_event *(*batch_event_fn)(const void *src, size_t i);

batch *batch_new(size_t max_events, size_t max_bytes);
void batch_free(batch *b); /* NULL-safe */

/*
 * Adds one request of n >= 1 events (at(src, 0..n-1)) holding bytes bytes.
 * ST_OK: added, owner will be reported by batch_req_owner.  ST_EBUSY: the
 * bounds are reached, nothing was added.  Events must stay valid until
 * batch_reset.
 */
st_err batch_add(batch *b, void *owner, size_t n, size_t bytes, batch_event_fn at, const void *src);

size_t batch_events(const batch *b); /* accepted events, before folding */
size_t batch_bytes(const batch *b);
size_t batch_requests(const batch *b);
size_t batch_rows(const batch *b); /* distinct rows that go to SQL */
bool batch_empty(const batch *b);

/* The event behind SQL row i (input ordinal i + 1). */
const proto_event *batch_row(const batch *b, size_t i);

/* Whether some row has a key (otherwise broker_append2 gets keys = NULL). */
bool batch_has_keys(const batch *b);

/*
 * Encodes the binary text[] parameters of broker_append2, one element per
 * row: topics, abouts (each a PostgreSQL array literal, st_pgarray_literal_add),
 * datas (NULL = signal) and, only when batch_has_keys, keys (NULL = none;
 * keys is left untouched otherwise).  Appends to the (reset) buffers.
 */
void batch_encode(const batch *b, st_buf *topics, st_buf *abouts, st_buf *datas, st_buf *keys);

/*
 * Records broker_append2's compact answer: rows whose ordinal (1-based) is
 * in dup_ords (ascending) get the stored seq beside it, not fresh; the
 * n_fresh others, in row order, get first, first + 1, ... and are fresh.
 * ST_EINVAL (nothing changed) when the answer does not fit the batch: the
 * counts disagree, the ordinals are not ascending within 1..rows, a stored
 * seq is not in 1..prev, or first is not above prev.
 */
st_err batch_apply(batch *b, uint64_t prev, uint64_t first, uint64_t n_fresh, const uint64_t *dup_ords,
		   const uint64_t *dup_seqs, size_t n_dup);

/* Records an answer for row i directly (tests). */
void batch_row_set(batch *b, size_t i, uint64_t seq, bool fresh);
uint64_t batch_row_seq(const batch *b, size_t i);
bool batch_row_fresh(const batch *b, size_t i);

/* The owner of request i, in arrival order, and its number of events. */
void *batch_req_owner(const batch *b, size_t i);
size_t batch_req_count(const batch *b, size_t i);
/* Fills seqs[0..batch_req_count(b, i)) with the seqs of request i's events in request order. */
void batch_req_seqs(const batch *b, size_t i, uint64_t *seqs);

/* Empties the batch (back to the state of batch_new; large arrays are released). */
void batch_reset(batch *b);

/*
 * Moves whole requests from the front of src (arrival order) into the empty
 * dst: all of them when src holds at most max_events events and max_bytes
 * request bytes, else the longest prefix within both (at least one
 * request).  Key folding is recomputed on both sides (see batch.c).  Each
 * batch keeps its own bounds.  O(1) when everything moves, else O(events).
 */
void batch_take(batch *dst, batch *src, size_t max_events, size_t max_bytes);

#endif
