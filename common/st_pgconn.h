/*
 * st_pgconn: one non-blocking libpq connection driven by a libevent loop,
 * with name resolution off the loop, session settings, reconnection with
 * back-off, one statement in flight at a time, and a deadline on every
 * wait.  The writer's flush and retention each use one; the edge's pool
 * (pgpool) is N of them plus its queue.
 *
 *   DOWN --timer--> RESOLVING --addresses--> CONNECTING --PQconnectPoll OK--> SETUP --result--> IDLE <--> BUSY
 *   DOWN --timer (the DSN names no host)--> CONNECTING
 *   CONNECTING, SETUP --error or the attempt's deadline--> CONNECTING (the round's next address)
 *   CONNECTING, SETUP --error or deadline at the round's last address--> DOWN, timer = back-off
 *   IDLE, BUSY --error, EOF, deadline, SQLSTATE 25006--> DOWN (a BUSY statement ends with res NULL,
 *                                                         or with its 25006 result), timer = back-off
 *   any --st_pgconn_drop--> DOWN
 *
 * Nothing blocks the loop: the DSN's host names are resolved on a thread
 * (st_resolve, again on every reconnect) and the connection is opened by
 * address with PQconnectStartParams (st_pgdsn: host=name for TLS
 * verification, hostaddr=address), polled with PQconnectPoll on socket
 * events; statements go out with PQsendQueryParams in non-blocking mode
 * (PQflush repeated on EV_WRITE) and are read with PQconsumeInput /
 * PQisBusy / PQgetResult.  libpq 15 has only a blocking PQcancel, so a
 * statement is given up by dropping the connection (st_pgconn_drop, or its
 * deadline): PQfinish closes the socket at once and the server ends the
 * statement at its next write or at the session's statement_timeout.
 *
 * A round tries the DSN's addresses one at a time (every host of a
 * multi-host DSN, every address of a name, in libpq's order; st_pgdsn.h),
 * each attempt under its own deadline, the next at once when one fails.
 * A statement refused with SQLSTATE 25006 (read_only_sql_transaction)
 * means the server is, or has become, a standby: the session is dropped
 * (the result is still handed to the statement's callback) so that the
 * next round finds the read-write server instead of failing on the same
 * session until someone restarts the process.
 *
 * Deadlines: name resolution 10 s, connect plus session setup at one
 * address the DSN's connect_timeout (10 s when unset or 0), a statement
 * opts.query_deadline_ms (0: none).  Keepalives (5 s idle, 3
 * probes 2 s apart) and tcp_user_timeout 10 s override the DSN's, so a
 * partitioned connection is noticed in about 11 s, not the kernel's hours.
 * While IDLE the socket is watched, so a server that goes away is noticed
 * before the next statement (st_pgconn_up turns false at once).
 * Reconnects wait 100 ms doubling to 5 s, reset once a session is up.  A
 * loss is logged once per outage ("<name>: database connection lost: ...",
 * warn), each later failed round and every failed attempt at debug,
 * "<name>: connected to the database" (info) when a session is up again,
 * naming the addresses that failed before it in that round.
 *
 * Memory: one PGconn, its last result, one resolver (a mailbox; a lookup
 * is a short-lived thread).
 *
 * Thread: everything, callbacks included, on the loop thread of base.
 */
#ifndef ST_PGCONN_H
#define ST_PGCONN_H

#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "st_err.h"

struct event_base;
typedef struct st_pgconn st_pgconn;

#define ST_PGCONN_CONNECT_DEADLINE_MS 10000u
#define ST_PGCONN_BACKOFF_MIN_MS 100u
#define ST_PGCONN_BACKOFF_MAX_MS 5000u

typedef struct st_pgconn_opts {
	const char *name;             /* in log lines, e.g. "flush" (copied, at most 63 bytes kept) */
	const char *application_name; /* wins over the DSN's (static, or outliving the connection) */
	const char *setup_sql;        /* the session settings, run before the connection counts as up (same) */
	uint32_t query_deadline_ms;   /* a statement in flight longer than this drops the connection; 0: none */
	bool log_notices;             /* server notices logged at info; false: dropped (libpq would print them) */
	/* The session writes: a server in hot standby (in_hot_standby, which
	 * PostgreSQL 14 and later report at connect) is passed over like a
	 * failed address.  Not libpq's target_session_attrs=read-write, which
	 * also refuses a database whose default_transaction_read_only is on, a
	 * default the setup SQL may override on purpose. */
	bool writes;
} st_pgconn_opts;

/*
 * The end of a statement.  res is its result: the last one, or the first
 * error result of a multi-statement string (check PQresultStatus: an SQL
 * error arrives here and the connection stays up).  res is NULL when the
 * connection was lost or dropped before the statement ended (err says why;
 * whether it ran is unknown).  res is cleared after the callback returns.
 * The connection is IDLE (or DOWN) again when this runs, so the callback
 * may send the next statement; it must not free the connection.
 */
typedef void (*st_pgconn_result_fn)(void *arg, PGresult *res, const char *err);
/* The session came up (true: set up, IDLE) or an up session was lost (false). */
typedef void (*st_pgconn_state_fn)(void *arg, bool up);

/*
 * Parses and copies dsn (ST_EINVAL, logged with the name, when libpq
 * cannot parse it), then starts connecting from the loop (never inside this
 * call).  on_state may be NULL.
 */
st_err st_pgconn_new(struct event_base *base, const char *dsn, const st_pgconn_opts *opts, st_pgconn_state_fn on_state,
		     void *arg, st_pgconn **out);
/* Closes the connection; a statement in flight gets no callback.  Not from
 * one of its callbacks.  NULL-safe. */
void st_pgconn_free(st_pgconn *c);

bool st_pgconn_up(const st_pgconn *c);   /* a session is set up (IDLE or BUSY) */
bool st_pgconn_idle(const st_pgconn *c); /* up and no statement in flight: st_pgconn_send will take one */

/*
 * Sends one statement (PQsendQueryParams: the values are copied by libpq
 * before this returns; types, lengths and formats may be NULL as libpq
 * allows; result_format 1 asks for binary results).  ST_OK: fn will be
 * called exactly once (unless the connection is freed first), from the
 * loop, or before this returns when the connection breaks while sending.
 * ST_EUNAVAIL: not idle (down, connecting, or busy): nothing was sent and
 * fn will not be called.
 */
st_err st_pgconn_send(st_pgconn *c, const char *sql, int n_params, const Oid *types, const char *const *values,
		      const int *lengths, const int *formats, int result_format, st_pgconn_result_fn fn, void *arg);

/* res is a success: PGRES_TUPLES_OK, PGRES_COMMAND_OK or PGRES_EMPTY_QUERY. */
bool st_pgconn_result_ok(const PGresult *res);

/*
 * A failed result for a log line or a reply: "SQLSTATE 23514: <primary
 * message>", one line.  Never the DETAIL or CONTEXT fields, which repeat a
 * failing row ("Failing row contains (...)") or a value, and so an event's
 * data, into the logs.
 */
void st_pgconn_result_text(const PGresult *res, char *buf, size_t cap);

/* Gives the connection up now (why is logged and handed to a statement in
 * flight, whose callback runs before this returns) and reconnects after
 * the back-off.  Nothing happens while it is DOWN already. */
void st_pgconn_drop(st_pgconn *c, const char *why);

#endif
