/*
 * schema: the PostgreSQL schema of docs/architecture.md and its migration.
 *
 * schema_migrate reads the recorded version first, with no lock and no DDL,
 * and leaves a current (or newer, still compatible) schema alone.  Missing
 * steps run in one transaction under the session advisory lock
 * SCHEMA_MIGRATE_LOCK_KEY, with lock_timeout SCHEMA_LOCK_TIMEOUT_MS (an
 * index built CONCURRENTLY runs just before that transaction).  It
 * BLOCKS (plain PQexec): it is for `broker-writer migrate` and for the
 * daemon's start, before the event loop runs.
 */
#ifndef BW_SCHEMA_H
#define BW_SCHEMA_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "st_err.h"

#define SCHEMA_VERSION 4
/* The oldest version the daemon upgrades by itself (functions only, no table lock): version 4 adds a
 * column to broker_event, an index to broker_flush and replaces broker_event's key index by one on
 * (topic, key), so only a fresh database or this one. */
#define SCHEMA_ONLINE_FROM 4
/* Fixed; distinct from the default --lock-key (and lock-key + 1). */
#define SCHEMA_MIGRATE_LOCK_KEY 7450000001
/* Every lock the migration waits for, at most (then ST_EAGAIN, retried by the caller). */
#define SCHEMA_LOCK_TIMEOUT_MS 1000
/* broker_flush records outlive the longest retry of a flush (12 h) with a margin. */
#define SCHEMA_FLUSH_KEEP_HOURS 24

/*
 * The session settings every connection of the daemon runs before it is
 * used (st_pgconn_opts.setup_sql); the reasons are at the definition.
 */
extern const char schema_session_sql[];

typedef enum {
	SCHEMA_ONLINE, /* the daemon: create a fresh schema, or upgrade with steps that lock no table */
	SCHEMA_ALL,    /* `broker-writer migrate`: every step, exclusive table locks included */
} schema_mode;

/*
 * ST_EINVAL unless the server's encoding is UTF8 (events are UTF-8 and the
 * connections set client_encoding UTF8: another encoding would refuse some
 * of them at the flush, forever).  err gets one line.
 */
st_err schema_check_encoding(PGconn *conn, char *err, size_t errlen);

/*
 * Checks the encoding, pins the session settings of schema_session_sql (a
 * database or role default must not change what the migration does either),
 * then migrates over an open connection as mode allows.  *found is the version recorded before (0: no schema).  Returns
 *   ST_OK      the schema is usable by this program (current, just migrated,
 *              or newer and still compatible);
 *   ST_EAGAIN  a lock was not obtained within SCHEMA_LOCK_TIMEOUT_MS: retry;
 *   ST_EINVAL  this program must not run on this database (encoding, an
 *              upgrade the mode does not allow, a newer incompatible schema);
 *   ST_EDB     another PostgreSQL failure.
 * err (NUL-terminated, truncated to errlen) says why, in one line.  Blocks.
 */
st_err schema_migrate(PGconn *conn, schema_mode mode, int *found, char *err, size_t errlen);

/* `broker-writer migrate` gives up after this many lock timeouts (about a minute with the back-off). */
#define SCHEMA_MIGRATE_LOCK_ATTEMPTS 15
#define SCHEMA_RETRY_MIN_MS 100
#define SCHEMA_RETRY_MAX_MS 5000

/*
 * Connects (blocking, 5 s connect timeout) and runs schema_migrate, with
 * retries after a back-off (100 ms doubling to 5 s), logging what it did.
 * SCHEMA_ONLINE (the daemon's start): every failure but a refusal is
 * retried until it succeeds or *stop becomes true (a signal handler sets it;
 * it is polled every 50 ms while waiting).  SCHEMA_ALL (`broker-writer
 * migrate`): a lock timeout is retried SCHEMA_MIGRATE_LOCK_ATTEMPTS times
 * (each attempt queues for at most SCHEMA_LOCK_TIMEOUT_MS in front of the
 * flushes); a database that cannot be reached (schema_connect_transient:
 * refused, timed out, starting up or shutting down, a name not resolved) is
 * retried until wait_ms have passed since the start (an init container
 * that starts beside a database still starting, or during its restart,
 * should not crash-loop); anything else (authentication, TLS verification,
 * no such database) fails at once.  wait_ms is not used by SCHEMA_ONLINE.  Returns 0 (the schema is usable),
 * 1 (failed), 2 (this program must not run on this database; one line
 * logged) or -1 (stopped).  Blocks.
 */
int schema_migrate_retry(const char *dsn, schema_mode mode, uint64_t wait_ms, volatile sig_atomic_t *stop);

/* libpq's connection failure message says the server was not reached or not
 * yet (or no longer) accepting: worth waiting for.  Pure. */
bool schema_connect_transient(const char *msg);

#endif
