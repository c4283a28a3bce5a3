/*
 * schema: which connection failures are worth waiting for (a table, pure),
 * and schema_migrate against the real server (STUDIO_TEST_PG_DSN), each
 * case in a private PostgreSQL schema: a fresh database gets the current
 * version; a current one is left alone; a newer one that keeps the
 * functions this program calls is accepted, one that lost them refused;
 * the daemon's online mode refuses an upgrade that needs table locks; a
 * migration lock held elsewhere is ST_EAGAIN after lock_timeout, not a
 * wait for ever.  Without the variable only the table runs (exit 77).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "schema.h"
#include "st_log.h"
#include "st_test.h"
#include "st_test_pg.h"

static void
t_transient(void)
{
	static const struct {
		const char *msg;
		bool transient;
	} cases[] = {
		{ "connection to server at \"127.0.0.1\", port 5 failed: Connection refused", true },
		{ "could not translate host name \"db.example\" to address: Name or service not known", true },
		{ "connection to server ... failed: FATAL:  the database system is starting up", true },
		{ "connection to server ... failed: FATAL:  the database system is shutting down", true },
		{ "timeout expired", true },
		{ "server closed the connection unexpectedly", true },
		{ "connection to server on socket \"/run/x/.s.PGSQL.5432\" failed: No such file or directory", true },
		{ "FATAL:  password authentication failed for user \"studio\"", false },
		{ "FATAL:  database \"nope\" does not exist", false },
		{ "server certificate for \"db\" does not match host name \"db2\"", false },
		{ "invalid sslmode value: \"bogus\"", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (schema_connect_transient(cases[i].msg) != cases[i].transient) {
			fprintf(stderr, "schema_connect_transient(\"%s\"): got %d, want %d\n", cases[i].msg,
				!cases[i].transient, cases[i].transient);
			ST_CHECK(false);
		}
}

static const char *DSN;
static PGconn *ADMIN; /* the test's own session: schemas, locks held elsewhere */

/* The migration's NOTICEs ("already exists, skipping") are expected: not printed. */
static void
quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* A connection whose search_path is a new private schema named after tag; NULL on failure. */
static PGconn *
private_schema(PGconn *admin, const char *tag)
{
	char q[256], schema[64], *dsn;
	PGconn *c;

	snprintf(schema, sizeof(schema), "schema_test_%s_%d", tag, (int)getpid());
	snprintf(q, sizeof(q), "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s",
		 schema, schema);
	if (!st_test_pg_exec(admin, q))
		return NULL;
	dsn = st_test_pg_dsn_schema(DSN, schema);
	c = PQconnectdb(dsn);
	free(dsn);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "cannot connect: %s", PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, quiet, NULL);
	return c;
}

static void
drop_schema(PGconn *admin, const char *tag)
{
	char q[160];

	snprintf(q, sizeof(q), "DROP SCHEMA IF EXISTS schema_test_%s_%d CASCADE", tag, (int)getpid());
	(void)st_test_pg_exec(admin, q);
}

/* Runs body on a connection to a new private schema named after tag, then drops the schema. */
static void
in_private_schema(const char *tag, void (*body)(PGconn *c, char *err, size_t cap))
{
	PGconn *c = private_schema(ADMIN, tag);
	char err[512] = "";

	if (c == NULL) {
		ST_CHECK(c != NULL);
		return;
	}
	body(c, err, sizeof(err));
	PQfinish(c);
	drop_schema(ADMIN, tag);
}

static void
t_fresh_then_current_in(PGconn *c, char *err, size_t cap)
{
	int found = -1;

	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_OK);
	ST_CHECK_EQ_U64(found, 0);
	err[0] = '\0';
	ST_CHECK(schema_migrate(c, SCHEMA_ALL, &found, err, cap) == ST_OK);
	ST_CHECK_EQ_U64(found, SCHEMA_VERSION);
	if (err[0] != '\0')
		fprintf(stderr, "err: %s\n", err);
}

static void
t_fresh_then_current(void)
{
	in_private_schema("fresh", t_fresh_then_current_in);
}

static void
t_newer_schemas_in(PGconn *c, char *err, size_t cap)
{
	int found = -1;

	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_OK);
	/* a newer version that keeps what this program calls: accepted as it is */
	ST_CHECK(st_test_pg_exec(c, "UPDATE broker_meta SET schema_version = 99 WHERE id = 1"));
	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_OK);
	ST_CHECK_EQ_U64(found, 99);
	/* one that lost a function this program calls: refused, saying so */
	ST_CHECK(st_test_pg_exec(c, "DROP FUNCTION broker_retain4(bigint, interval, integer) CASCADE"));
	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_EINVAL);
	ST_CHECK(strstr(err, "upgrade this program") != NULL);
}

static void
t_newer_schemas(void)
{
	in_private_schema("newer", t_newer_schemas_in);
}

static void
t_online_refuses_a_locking_upgrade_in(PGconn *c, char *err, size_t cap)
{
	int found = -1;

	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_OK);
	ST_CHECK(st_test_pg_exec(c, "UPDATE broker_meta SET schema_version = 3 WHERE id = 1"));
	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_EINVAL);
	ST_CHECK_EQ_U64(found, 3);
	ST_CHECK(strstr(err, "broker-writer migrate") != NULL);
}

static void
t_online_refuses_a_locking_upgrade(void)
{
	in_private_schema("old", t_online_refuses_a_locking_upgrade_in);
}

static void
t_lock_held_elsewhere_is_eagain_in(PGconn *c, char *err, size_t cap)
{
	int found = -1;

	ST_CHECK(st_test_pg_exec(ADMIN, "SELECT pg_advisory_lock(7450000001)"));
	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_EAGAIN);
	if (strstr(err, "lock") == NULL)
		fprintf(stderr, "err: %s\n", err);
	ST_CHECK(strstr(err, "lock") != NULL);
	ST_CHECK(st_test_pg_exec(ADMIN, "SELECT pg_advisory_unlock(7450000001)"));
	/* the lock gone, the same call creates the schema */
	ST_CHECK(schema_migrate(c, SCHEMA_ONLINE, &found, err, cap) == ST_OK);
	ST_CHECK_EQ_U64(found, 0);
}

static void
t_lock_held_elsewhere_is_eagain(void)
{
	in_private_schema("locked", t_lock_held_elsewhere_is_eagain_in);
}

int
main(void)
{
	st_log_init("schema_test");
	ST_RUN(t_transient);
	DSN = getenv("STUDIO_TEST_PG_DSN");
	if (DSN == NULL || DSN[0] == '\0') {
		printf("skip: STUDIO_TEST_PG_DSN not set (the table ran)\n");
		return st_test_done() != 0 ? 1 : 77;
	}
	ADMIN = PQconnectdb(DSN);
	if (PQstatus(ADMIN) != CONNECTION_OK) {
		fprintf(stderr, "cannot connect: %s", PQerrorMessage(ADMIN));
		PQfinish(ADMIN);
		return 1;
	}
	ST_RUN(t_fresh_then_current);
	ST_RUN(t_newer_schemas);
	ST_RUN(t_online_refuses_a_locking_upgrade);
	ST_RUN(t_lock_held_elsewhere_is_eagain);
	PQfinish(ADMIN);
	return st_test_done();
}
