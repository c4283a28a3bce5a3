/*
 * schema: the PostgreSQL schema of docs/architecture.md and its migration.
 *
 * schema_migrate runs the whole schema script (tables, indexes, the
 * broker_append2 and broker_retain functions) in one transaction under the
 * session advisory lock SCHEMA_MIGRATE_LOCK_KEY, so replicas starting
 * together migrate one at a time and a second run changes nothing.  It
 * BLOCKS (plain PQexec): it is for `broker-writer migrate` and for the
 * daemon's start, before the event loop runs.
 */
#ifndef BW_SCHEMA_H
#define BW_SCHEMA_H

#include <stddef.h>

#include <libpq-fe.h>

#include "st_err.h"

#define SCHEMA_VERSION 2
/* Fixed; distinct from the default --lock-key (and lock-key + 1). */
#define SCHEMA_MIGRATE_LOCK_KEY 7450000001

/* The schema script (idempotent).  Exposed for tests and docs. */
extern const char schema_sql[];

/*
 * Migrates over an open connection.  ST_OK, or ST_EDB with PostgreSQL's
 * message in err (NUL-terminated, truncated to errlen).  Blocks.
 */
st_err schema_migrate(PGconn *conn, char *err, size_t errlen);

#endif
