/*
 * pgpool: a few asynchronous libpq connections on one libevent loop, and a
 * bounded two-priority queue of queries for them.
 *
 * Each connection is one st_pgconn (common/st_pgconn.h: host names resolved
 * off the loop before every attempt, connected by address, non-blocking
 * statements, reconnect after 100 ms doubling to 5 s, keepalives and
 * tcp_user_timeout 10 s).  Each session runs SET statement_timeout = '15s'
 * and client_encoding UTF8 and is named application_name=edge-gateway; the
 * pool adds the queue, the per-query deadlines and fill reservation.
 *
 * Threads: everything, callbacks included, runs on the loop thread of the
 * event_base given to pgpool_new.
 */
#ifndef EDGE_PGPOOL_H
#define EDGE_PGPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "st_clock.h"
#include "st_err.h"

struct event_base;
typedef struct pgpool pgpool;
typedef struct pgpool_query pgpool_query;

#define PGPOOL_MAX_CONNS 64u
#define PGPOOL_MAX_QUEUED 10000u /* queued (not yet sent) queries */
#define PGPOOL_MAX_PARAMS 1024u
#define PGPOOL_MAX_PARAM_BYTES (16u * 1024 * 1024) /* all parameters of one query together */
/* A query waits at most this long while no connection is up (then ST_EUNAVAIL). */
#define PGPOOL_WAIT_MS 5000u
/*
 * Default deadlines, counted from the submit (the wait for a connection
 * included): past it the query ends with ST_ETIMEDOUT, dropping its
 * connection if it is in flight.  Checked every 250 ms.  Both are below the
 * sessions' statement_timeout (15 s), which ends on the server a query the
 * pool gave up.
 */
#define PGPOOL_FILL_DEADLINE_MS 10000u
#define PGPOOL_REPLAY_DEADLINE_MS 10000u

/* Priorities: every queued PGPOOL_PRIO_FILL query is sent before any PGPOOL_PRIO_REPLAY one. */
enum pgpool_prio { PGPOOL_PRIO_FILL = 0, PGPOOL_PRIO_REPLAY = 1 };

/*
 * The end of a query, called exactly once unless the query was cancelled.
 * err ST_OK: res is the PGRES_TUPLES_OK / PGRES_COMMAND_OK result.
 * err ST_EDB: the query failed (res is the error result: PQresultErrorField
 * works) or the connection died while it was in flight (res NULL).
 * err ST_EUNAVAIL: no connection was up for PGPOOL_WAIT_MS while it waited
 * in the queue (res NULL).
 * err ST_ETIMEDOUT: the query's deadline passed, queued or in flight (res
 * NULL; in flight, its connection was dropped and is made again).  A query
 * in flight when the connection dies is failed, never resent: the caller
 * decides.  The message has been logged.  res is valid only during the
 * call (the pool clears it).  The handle is freed when the callback
 * returns.  The callback may submit and cancel other queries; it must not
 * call pgpool_free.
 */
typedef void (*pgpool_fn)(void *arg, st_err err, const PGresult *res);

/*
 * dsn: a libpq conninfo string or URI (copied).  n: 1..PGPOOL_MAX_CONNS
 * connections, started at once.  ST_EINVAL for a bad n or a dsn libpq
 * cannot parse (logged).  Connecting goes on in the background; see
 * pgpool_ready.
 */
st_err pgpool_new(struct event_base *base, const char *dsn, unsigned n, pgpool **out);

/*
 * Queues one query.  sql, the parameter values (vals[i] of lens[i] bytes
 * when fmts[i] == 1, a NUL-terminated text otherwise; NULL vals[i] is SQL
 * NULL), lens and fmts are copied; lens/fmts may be NULL for all-text
 * parameters.  Parameter types are taken from the SQL (write $1::int8).
 * result_binary: 1 asks for binary results.  Returns NULL (and calls
 * nothing) when the queue holds PGPOOL_MAX_QUEUED queries or the parameters
 * are over their bounds.  Queries wait in the queue while no connection is
 * up, at most PGPOOL_WAIT_MS (then ST_EUNAVAIL).
 */
pgpool_query *pgpool_submit(pgpool *p, enum pgpool_prio prio, const char *sql, int nparams, const char *const *vals,
			    const int *lens, const int *fmts, int result_binary, pgpool_fn fn, void *arg);

/*
 * The callback of q will never be called.  A queued query is dropped; one
 * in flight is left to finish on its connection (at most until its
 * deadline) and its result discarded.
 * Safe from inside any pgpool callback; a no-op inside q's own callback.
 * After the callback has returned, q is gone: do not cancel it then.
 */
void pgpool_cancel(pgpool_query *q);

/* Sets q's deadline (ms from its submit) instead of its priority's default.
 * Right after pgpool_submit, before the loop runs again. */
void pgpool_set_deadline(pgpool_query *q, uint32_t ms);

/* The first k connections run PGPOOL_PRIO_FILL queries only (at most n-1 of
 * them), so a fill never waits behind replays holding every connection. */
void pgpool_reserve_fills(pgpool *p, unsigned k);

/* Tests: the clock deadlines are read from (default st_clock_system()).
 * Set it before submitting; it must outlive the pool. */
void pgpool_set_clock(pgpool *p, const st_clock *clock);

/* At least one connection is up (session set up).  Any thread (an atomic count). */
bool pgpool_ready(const pgpool *p);
/* Connections up; queries queued, and in flight. */
size_t pgpool_up(const pgpool *p);
size_t pgpool_queued(const pgpool *p);
size_t pgpool_inflight(const pgpool *p);

/* Closes every connection; queued and in-flight queries are dropped
 * without callbacks.  Not from a pgpool callback.  NULL-safe. */
void pgpool_free(pgpool *p);

#endif
