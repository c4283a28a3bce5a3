/*
 * st_test_pg: helpers of the unit tests that run against a real PostgreSQL
 * (STUDIO_TEST_PG_DSN), header only, with st_test.h.
 */
#ifndef ST_TEST_PG_H
#define ST_TEST_PG_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "st_buf.h"

/* Runs set-up SQL q (blocking: tests only); false, with the error printed, when it fails. */
static inline bool
st_test_pg_exec(PGconn *conn, const char *q)
{
	PGresult *r = PQexec(conn, q);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

	if (!ok)
		fprintf(stderr, "set-up SQL failed: %s\n%s\n", q, PQresultErrorMessage(r));
	PQclear(r);
	return ok;
}

/*
 * dsn (a URI or key=value string) with search_path set to schema, so that
 * a test works in a private schema and never touches a real broker_event.
 * The caller frees the result.
 */
static inline char *
st_test_pg_dsn_schema(const char *dsn, const char *schema)
{
	st_buf b;

	st_buf_init(&b);
	st_buf_puts(&b, dsn);
	if (strncmp(dsn, "postgres://", 11) == 0 || strncmp(dsn, "postgresql://", 13) == 0)
		st_buf_printf(&b, "%coptions=-csearch_path%%3D%s", strchr(dsn, '?') ? '&' : '?', schema);
	else
		st_buf_printf(&b, " options='-csearch_path=%s'", schema);
	return st_buf_steal(&b, NULL);
}

#endif
