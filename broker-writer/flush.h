/*
 * flush: the writer's batches and the state machine that stores them.
 * Requests accepted by the loop go into `cur` (flush_add); flush_start,
 * called by the writer's flush timer, moves the oldest of them into the
 * flush `fl`, sends it as one broker_append4 statement on the writer's flush
 * connection, and after the commit publishes the fresh rows and answers the
 * requests.  Failures are retried with a backoff, or split and refused when
 * the database says the data cannot be stored (docs/writer.md, "Failed
 * flushes").  The transitions are a table (flush_state_can) and every one
 * goes through flush_goto, which aborts on any other: the code and the
 * diagram in flush.c cannot drift apart.
 *
 * Thread: everything on the loop thread of the base given to flush_new,
 * hooks included; nothing blocks.
 */
#ifndef BW_FLUSH_H
#define BW_FLUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "batch.h"
#include "publish.h"
#include "st_clock.h"
#include "st_err.h"
#include "st_metrics.h"
#include "st_pgconn.h"

/* One flush transaction: the first producers' wait and the statement's
 * memory stay bounded; a backlog goes out as back-to-back flushes. */
#define FLUSH_MAX_EVENTS 20000u
#define FLUSH_MAX_BYTES (32u * 1024 * 1024)
/* A flush is retried at most this long after its first attempt (then the
 * fatal hook).  broker_flush keeps its records longer (24 h), so a retry
 * always finds the record of an attempt that did commit.  Tests shorten it
 * with STUDIO_TEST_FLUSH_GIVE_UP_MS. */
#define FLUSH_GIVE_UP_MS (12u * 3600 * 1000)
/* From the first failed round trip on: past this, flush_db_unavailable. */
#define FLUSH_UNAVAILABLE_AFTER_MS 10000u

enum flush_state {
	FLUSH_IDLE,    /* fl empty, nothing in flight */
	FLUSH_TICK,    /* fl empty, the head query in flight */
	FLUSH_WAITING, /* fl holds a flush not on the wire: retry timer, or the connection down or busy */
	FLUSH_SENT,    /* broker_append4 for fl in flight */
};
/* Not an enumerator, so switches over the states stay exhaustive without it. */
#define FLUSH_STATE_COUNT (FLUSH_SENT + 1)

/* from -> to is a transition of the diagram in flush.c. */
bool flush_state_can(enum flush_state from, enum flush_state to);
const char *flush_state_name(enum flush_state s);
/*
 * Every transition of the machine: *state becomes to when the table has
 * that edge; any other is a bug: logged with both names, then ST_ASSERT
 * aborts.  Pure.
 */
void flush_goto(enum flush_state *state, enum flush_state to);

typedef struct flush flush;

/* The writer's answers to what the machine settles.  Every hook runs on the loop thread. */
typedef struct flush_hooks {
	/* owner's request is committed: its events got seqs[0..n) (valid during the call). */
	void (*answer)(void *owner, const uint64_t *seqs, size_t n);
	/* owner's request is refused (code "invalid" and the database's reason); nothing of it is stored. */
	void (*refuse)(void *owner, const char *code, const char *detail);
	/* The database answered after a failure may have been recorded (flush_db_unavailable may have turned false). */
	void (*reachable)(void *arg);
	/* A result was handled and the next flush, if due, started: flush_done may have turned true. */
	void (*settled)(void *arg);
	/* A flush has failed for give_up_ms: the writer must exit (its producers resend elsewhere). */
	void (*fatal)(void *arg);
	void *arg;
} flush_hooks;

/* The writer's metrics the machine updates (borrowed, all required). */
typedef struct flush_metrics {
	st_counter *committed;   /* fresh events stored */
	st_counter *rej_invalid; /* requests refused with a data error */
	st_counter *failures;    /* attempts that failed */
	st_histogram *seconds;   /* duration of successful flushes */
	st_gauge *pending;       /* accepted events not yet committed */
} flush_metrics;

typedef struct flush_config {
	const char *instance; /* copied (at most 127 bytes): flush_ids are "<instance>:<counter>" */
	int64_t lock_key;     /* the advisory lock of broker_append4 */
	uint64_t crash_after; /* test hook: SIGKILL after this many commits; 0 = never */
	uint64_t give_up_ms;  /* 0: FLUSH_GIVE_UP_MS, or STUDIO_TEST_FLUSH_GIVE_UP_MS when set */
} flush_config;

/*
 * A machine in FLUSH_IDLE with empty batches.  db (the flush connection,
 * opened with schema_session_sql), pub, clock and m are borrowed and must
 * outlive it; the writer forwards db's state callback to flush_db_state.
 * Returns ST_OK; a bad STUDIO_TEST_FLUSH_GIVE_UP_MS is logged and ignored.
 */
st_err flush_new(struct event_base *base, const st_clock *clock, st_pgconn *db, publish *pub, const flush_config *cfg,
		 const flush_metrics *m, const flush_hooks *hooks, flush **out);
/* NULL-safe.  Requests never answered are dropped with their batches (their producers resend). */
void flush_free(flush *f);

/*
 * Accepts n events of bytes (src, read through at) into cur for owner.
 * ST_EBUSY when cur is full (the caller answers busy); on ST_OK the request
 * will be answered or refused exactly once through the hooks.
 */
st_err flush_add(flush *f, void *owner, size_t n, size_t bytes, batch_event_fn at, const void *src);

/*
 * A flush tick: flush what is due (first the requests of a failed flush one
 * at a time, then cur), or with nothing to flush ask the database for the
 * head and publish it as a tick.  While a flush or tick is out, what is in
 * cur is marked due and goes as soon as the machine is idle again.
 */
void flush_start(flush *f);
/* The writer stops: no more ticks, and what is left in cur goes without waiting for the timer. Idempotent. */
void flush_set_stopping(flush *f);
/* The flush connection came up (resend a waiting flush now) or went down (a failure). */
void flush_db_state(flush *f, bool up);

/* The database has failed every round trip for FLUSH_UNAVAILABLE_AFTER_MS. */
bool flush_db_unavailable(const flush *f);
/* IDLE and nothing accepted left to store. */
bool flush_done(const flush *f);
enum flush_state flush_get_state(const flush *f);

typedef struct flush_stats {
	size_t pending_events;  /* in cur */
	bool inflight;          /* fl is not empty */
	size_t inflight_events; /* in fl */
	size_t unstored_events; /* cur, fl and the failed flush's requests */
	uint64_t last_flush_ms; /* duration of the last successful flush */
} flush_stats;
void flush_stats_get(const flush *f, flush_stats *out);

#endif
