/*
 * pgsink: one asynchronous libpq connection driven by the event loop, with
 * reconnection, session settings and one statement in flight at a time.
 *
 * The DSN's host names are resolved off the loop (st_resolve, on every
 * reconnect) and the connection is opened by address with
 * PQconnectStartParams (st_pgdsn: host=name, hostaddr=address, so TLS
 * verification still uses the name), with keepalives=1 keepalives_idle=5
 * keepalives_interval=2 keepalives_count=3 tcp_user_timeout=10000 (they win
 * over the DSN's own), polled with PQconnectPoll on
 * socket events (10 s deadline), then the session is set up (lock_timeout
 * 5s, statement_timeout 30s, idle_in_transaction_session_timeout 10s,
 * client_encoding UTF8, application_name broker-writer, and pinned against
 * database and role defaults: default_transaction_isolation read committed,
 * default_transaction_read_only off, synchronous_commit at least on) before
 * it counts as up.  A lost connection is re-opened after a backoff of 100 ms doubling to
 * 5 s.  While idle the socket is watched, so a server that goes away is
 * noticed at once (db_up, /readyz).
 *
 * Nothing here blocks the loop: name resolution runs on a thread and
 * answers through a mailbox (a name that takes longer than 10 s counts as
 * a failed connect).
 *
 * Thread: the loop thread of base only.
 */
#ifndef BW_PGSINK_H
#define BW_PGSINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "st_err.h"

struct event_base;
typedef struct pgsink pgsink;

/*
 * Result of one statement, on the loop thread.  res is the statement's
 * result (check PQresultStatus: an SQL error arrives here as a result, the
 * connection stays up), or NULL when the connection was lost before the
 * result arrived (err says why; the outcome of the statement is unknown).
 * res is freed by pgsink after the callback returns.  The callback may
 * issue the next pgsink_query; it must not free the sink.
 */
typedef void (*pgsink_result_fn)(void *arg, PGresult *res, const char *err);
/* Called when the connection comes up (true) or is lost (false). */
typedef void (*pgsink_state_fn)(void *arg, bool up);

/* Starts connecting at once.  dsn is parsed and copied (ST_EINVAL, logged, when
 * libpq cannot parse it).  name is used in logs (static). */
st_err pgsink_new(struct event_base *base, const char *dsn, const char *name, pgsink_state_fn on_state,
                  void *arg, pgsink **out);
/* Closes the connection (an in-flight statement's callback is NOT called). NULL-safe. */
void pgsink_free(pgsink *s);

bool pgsink_up(const pgsink *s);   /* connected and set up (idle or busy) */
bool pgsink_idle(const pgsink *s); /* up and no statement in flight: pgsink_query will be taken */

/*
 * Sends one statement with parameters (PQsendQueryParams; values are copied
 * by libpq before this returns, so they may be freed afterwards), results
 * in text format.  ST_OK: fn will be called exactly once (unless the sink
 * is freed first).  ST_EUNAVAIL: not idle (down, connecting, or busy);
 * nothing was sent and fn will not be called.
 */
st_err pgsink_query(pgsink *s, const char *sql, int n_params, const Oid *types, const char *const *values,
                    const int *lengths, const int *formats, pgsink_result_fn fn, void *arg);

#endif
