/*
 * retention: deletes events older than --retention, a chunk at a time, one
 * replica at a time, on its own pgsink connection (so a long delete never
 * delays a flush).
 *
 * A round starts 1 s after retention_new and then 10 s after the previous
 * round ended.  It calls broker_retain(lock_key, older_than, 5000) (see
 * schema.c) as separate statements until one deletes nothing: each chunk is
 * its own transaction, takes pg_try_advisory_xact_lock(lock_key + 1) (a
 * replica that does not get it does nothing this round), raises
 * broker_meta.horizon to the highest seq it deletes before deleting, never
 * deletes the newest event, and also trims broker_flush rows older than an
 * hour.  retention_ms == 0 keeps every event but still trims broker_flush.
 *
 * Thread: the loop thread.
 */
#ifndef BW_RETENTION_H
#define BW_RETENTION_H

#include <stdint.h>

#include "pgsink.h"
#include "st_err.h"
#include "st_metrics.h"

#define RETENTION_CHUNK 5000
#define RETENTION_PERIOD_MS 10000
#define RETENTION_FIRST_MS 1000

struct event_base;
typedef struct retention retention;

/* sink is borrowed (must outlive the retention); deleted may be NULL. */
st_err retention_new(struct event_base *base, pgsink *sink, int64_t lock_key, int64_t retention_ms,
                     st_counter *deleted, retention **out);
/* Stops the timer.  A chunk in flight is abandoned with the sink (free the sink after this). NULL-safe. */
void retention_free(retention *r);

#endif
