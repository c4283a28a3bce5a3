/*
 * retention: deletes events older than --retention, a window of seqs at a
 * time, one replica at a time, on its own st_pgconn connection (so a long
 * delete never delays a flush).
 *
 * A round starts 1 s after retention_new and then 10 s after the previous
 * round ended.  It calls broker_retain4(lock_key, older_than, 5000) (see
 * schema.c, docs/writer.md "Retention") as separate statements until one
 * deletes nothing: each call is its own transaction, takes
 * pg_try_advisory_xact_lock(lock_key + 1) (a replica that does not get it
 * does nothing this round), looks only at the 5000 seqs above
 * broker_meta.horizon (so it reads at most 2 x 5000 rows, whatever the
 * table's size), cuts before the first row that has not expired, raises the
 * horizon to the cut before deleting, never deletes the newest event, and
 * when it deletes nothing trims broker_flush records older than 24 hours.
 * retention_ms == 0 keeps every event but still trims broker_flush.
 * After each round it measures the lag (retention.c).
 *
 * Thread: the loop thread.
 */
#ifndef BW_RETENTION_H
#define BW_RETENTION_H

#include <stdint.h>

#include "st_pgconn.h"
#include "st_err.h"
#include "st_metrics.h"

#define RETENTION_CHUNK 5000
#define RETENTION_PERIOD_MS 10000
#define RETENTION_FIRST_MS 1000

struct event_base;
typedef struct retention retention;

/*
 * sink and m are borrowed (must outlive the retention).  Registers in m
 * studio_writer_retention_deleted_total and
 * studio_writer_retention_lag_seconds.  Main thread, at start.
 */
st_err retention_new(struct event_base *base, st_pgconn *sink, int64_t lock_key, int64_t retention_ms, st_metrics *m,
		     retention **out);
/* Stops the timer.  A chunk in flight is abandoned with the sink (free the sink after this). NULL-safe. */
void retention_free(retention *r);

#endif
